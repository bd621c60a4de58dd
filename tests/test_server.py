"""`memlint server` end to end: the real server process driven over stdio by an LSP client
(pygls's), as an editor drives it: initialize, open a document, receive its diagnostics, ask
for code actions, apply the edit, change the document, see the diagnostics go, shut down."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence


from test_cli import BAD, FIXED, REPO, write

from lsprotocol import types  # the extra memlint[server]; the `test` extra installs it
from pygls.lsp.client import LanguageClient
from pygls.uris import from_fs_path, to_fs_path

SELECT_MEM101 = '[tool.memlint]\nextend-select = ["MEM101"]\n'


def apply(text: str, edits: Sequence[types.TextEdit]) -> str:
    """What an editor does with a document's text edits (positions in UTF-16 units; ASCII here)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(position: types.Position) -> int:
        return starts[min(position.line, len(lines))] + position.character

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[:offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end):]
    return text


class Editor:
    """An LSP client around the real `memlint server` process, remembering what it publishes."""

    def __init__(self, root: Path, *server_args: str) -> None:
        self.root = root
        self.server_args = server_args
        self.client = LanguageClient("memlint-tests", "1")
        self.published: Dict[str, List[List[types.Diagnostic]]] = {}
        self.messages: List[str] = []
        self._arrived = asyncio.Event()

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def diagnostics(params: types.PublishDiagnosticsParams) -> None:
            self.published.setdefault(params.uri, []).append(list(params.diagnostics))
            self._arrived.set()

        @self.client.feature(types.WINDOW_SHOW_MESSAGE)
        def show(params: types.ShowMessageParams) -> None:
            self.messages.append(params.message)
            self._arrived.set()

    async def start(self) -> types.InitializeResult:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        await self.client.start_io(sys.executable, "-m", "memlint", "server", *self.server_args,
                                   env=env, cwd=str(self.root))
        result = await self.client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(), root_uri=from_fs_path(str(self.root)),
            process_id=os.getpid()))
        self.client.initialized(types.InitializedParams())
        return result

    async def diagnostics(self, uri: str, count: int) -> List[types.Diagnostic]:
        """The `count`-th set of diagnostics published for `uri` (waiting for it)."""
        while len(self.published.get(uri, [])) < count:
            self._arrived.clear()
            await asyncio.wait_for(self._arrived.wait(), timeout=60)
        return self.published[uri][count - 1]

    def open(self, uri: str, text: str, version: int = 1) -> None:
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri, "python", version, text)))

    def change(self, uri: str, text: str, version: int) -> None:
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(version, uri),
            [types.TextDocumentContentChangeWholeDocument(text)]))

    async def actions(self, uri: str, diagnostics: List[types.Diagnostic], only: Optional[List[str]] = None
                      ) -> List[types.CodeAction]:
        whole = types.Range(types.Position(0, 0), types.Position(10_000, 0))
        found = await self.client.text_document_code_action_async(types.CodeActionParams(
            types.TextDocumentIdentifier(uri), diagnostics[0].range if diagnostics else whole,
            types.CodeActionContext(diagnostics, only=only)))
        return [action for action in found or [] if isinstance(action, types.CodeAction)]

    async def stop(self) -> None:
        await self.client.shutdown_async(None)
        self.client.exit(None)
        await self.client.stop()


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=180))


def edits_of(action: types.CodeAction, uri: str) -> List[types.TextEdit]:
    assert action.edit is not None and action.edit.document_changes
    return [edit for change in action.edit.document_changes if change.text_document.uri == uri
            for edit in change.edits]


def test_diagnostics_quick_fix_change_and_shutdown(tmp_path):
    write(tmp_path, "pyproject.toml", SELECT_MEM101)  # MEM101 is opt-in: the file's configuration selects it
    uri = from_fs_path(str(tmp_path / "train.py"))

    async def session():
        editor = Editor(tmp_path)
        started = await editor.start()
        assert started.capabilities.code_action_provider is not None
        editor.open(uri, BAD)
        [diagnostic] = await editor.diagnostics(uri, 1)
        assert (diagnostic.code, diagnostic.source) == ("MEM101", "memlint")
        assert diagnostic.message.startswith("`noise` gets a new same-shaped tensor")
        assert diagnostic.range == types.Range(types.Position(3, 4), types.Position(3, 29))
        assert diagnostic.severity == types.DiagnosticSeverity.Information  # an opt-in rule: a note
        docs = Path(to_fs_path(diagnostic.code_description.href))
        assert docs.read_text(encoding="utf-8").startswith("# MEM101 tensor-alloc-in-loop")

        actions = await editor.actions(uri, [diagnostic])
        kinds = sorted(str(action.kind) for action in actions)
        assert kinds == ["quickfix", "quickfix", "source.fixAll.memlint"]
        [quick] = [a for a in actions if a.title.startswith("MEM101: ")]
        assert list(quick.diagnostics) == [diagnostic]
        assert quick.edit.document_changes[0].text_document.version == 1  # versioned: never applied to a newer text
        fixed = apply(BAD, edits_of(quick, uri))
        assert fixed == FIXED

        editor.change(uri, fixed, 2)
        assert await editor.diagnostics(uri, 2) == []
        assert not (tmp_path / "train.py").exists()  # the server writes nothing
        await editor.stop()

    run(session())


def test_fix_all_only_offers_safe_fixes_unless_configured(tmp_path):
    write(tmp_path, "pyproject.toml", '[tool.memlint]\nextend-select = ["MEM101", "MEM103"]\n')
    two = BAD + "for step in range(10):\n    other = torch.randn(n, n).cuda()\n    loss = model(other).sum()\n"
    uri = from_fs_path(str(tmp_path / "train.py"))

    async def session(*args: str) -> str:
        editor = Editor(tmp_path, *args)
        await editor.start()
        editor.open(uri, two)
        diagnostics = await editor.diagnostics(uri, 1)
        assert [d.code for d in diagnostics] == ["MEM101", "MEM101", "MEM103"]  # a safe fix, two unsafe ones
        [fix_all] = await editor.actions(uri, [], only=["source.fixAll"])
        await editor.stop()
        return apply(two, edits_of(fix_all, uri))

    safe = run(session())
    assert "noise.normal_()" in safe and "torch.randn(n, n).cuda()" in safe  # the unsafe one is left
    unsafe = run(session("--unsafe-fixes"))
    assert "torch.randn(n, n).cuda()" not in unsafe


def test_each_file_gets_its_own_configuration(tmp_path):
    write(tmp_path, "a/pyproject.toml", SELECT_MEM101)
    inside, outside = (from_fs_path(str(tmp_path / folder / "train.py")) for folder in ("a", "b"))

    async def session():
        editor = Editor(tmp_path)
        await editor.start()
        editor.open(inside, BAD)
        editor.open(outside, BAD)
        assert [d.code for d in await editor.diagnostics(inside, 1)] == ["MEM101"]
        assert await editor.diagnostics(outside, 1) == []  # the defaults: MEM101 is opt-in
        write(tmp_path, "b/memlint.toml", 'extend-select = ["MEM101"]\n')  # read afresh on the next change
        editor.change(outside, BAD + "\n", 2)
        assert [d.code for d in await editor.diagnostics(outside, 2)] == ["MEM101"]
        await editor.stop()

    run(session())


def test_a_bad_configuration_is_shown_not_crashed_on(tmp_path):
    write(tmp_path, "pyproject.toml", '[tool.memlint]\nselct = ["MEM1"]\n')
    uri = from_fs_path(str(tmp_path / "train.py"))

    async def session():
        editor = Editor(tmp_path)
        await editor.start()
        editor.open(uri, BAD)
        assert await editor.diagnostics(uri, 1) == []
        assert any("unknown key `selct`" in message for message in editor.messages)
        await editor.stop()

    run(session())


def test_a_notebook_document_gets_diagnostics_and_fixes_per_cell(tmp_path):
    write(tmp_path, "pyproject.toml", SELECT_MEM101)
    notebook = from_fs_path(str(tmp_path / "study.ipynb"))
    cells = [f"{notebook}#cell{i}" for i in range(3)]
    texts = ["import torch\n", "n = 1024\n", BAD.replace("import torch\n\n", "")]

    async def session():
        editor = Editor(tmp_path)
        await editor.start()
        editor.client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
            types.NotebookDocument(notebook, "jupyter-notebook", 1,
                                   [types.NotebookCell(types.NotebookCellKind.Code, uri) for uri in cells]),
            [types.TextDocumentItem(uri, "python", 1, text) for uri, text in zip(cells, texts)]))
        [diagnostic] = await editor.diagnostics(cells[2], 1)
        assert diagnostic.code == "MEM101" and diagnostic.range.start == types.Position(1, 4)
        assert await editor.diagnostics(cells[0], 1) == []
        [quick] = [a for a in await editor.actions(cells[2], [diagnostic]) if a.title.startswith("MEM101")]
        changed = {change.text_document.uri for change in quick.edit.document_changes}
        assert changed == {cells[2]}  # the buffer goes before the loop, in the loop's own cell
        assert apply(texts[2], edits_of(quick, cells[2])) == FIXED.replace("import torch\n\n", "")
        await editor.stop()

    run(session())


def test_the_server_without_pygls_says_how_to_get_it(tmp_path):
    import subprocess

    blocker = tmp_path / "blocker"
    write(blocker, "pygls/__init__.py", "raise ImportError('pygls is not installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(REPO)])}
    result = subprocess.run([sys.executable, "-m", "memlint", "server"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60, input="")
    assert result.returncode == 2
    assert "pip install 'memlint[server]'" in result.stderr and "Traceback" not in result.stderr
