"""`memlint server`: memlint as a Language Server, over standard input and output, for any
editor with an LSP client (`pip install 'memlint[server]'`: it runs on pygls). It lints what
the editor holds, through the same run, configuration and rules as `memlint` on the command
line (memlint.server.documents), and speaks the protocol in memlint.server.protocol."""
