"""Where nodes stand in the source, found one statement at a time.

LibCST knows a node's line and column only by printing the whole module while counting
(PositionProvider), which costs more than parsing it; memlint needs the positions of a few
nodes (what was reported, what fixes edit). So each is found from its innermost statement: the
statement's line comes from Python's own parser (`ast`, a tenth of LibCST's cost, paired with
LibCST's statements block by block), and only that statement is printed, at its indentation,
to place the nodes inside it. Most statements need no parser at all: the printed statement
(its comments and blank lines above it included) found once, and only once, in the source, at
the start of a line, is there, whatever else the file holds; Python's parser is asked only
when a statement's text repeats (`optimizer.zero_grad()` in two loops). Each printed statement
is checked against the source lines it stands for; when one does not match, or the pairing
does not line up, the whole module is printed once, the old way, and every position comes
from that.
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_right
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import libcst as cst
from libcst._position import CodePosition
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

STATEMENT = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # the line ends Python and LibCST count


def split_lines(text: str) -> List[str]:
    """`text` in lines, each with its line end; a form feed or other separator inside a line stays."""
    return _LINE.findall(text)


def whole_module(module: cst.Module) -> Mapping[cst.CSTNode, CodeRange]:
    """Every node's range. Run by hand, the provider costs one code generation; through
    MetadataWrapper it costs a full visit (which rebuilds every node) on top."""
    provider = PositionProvider()
    try:
        provider._gen_impl(module)  # private, but stable across LibCST 1.x
        return provider._computed
    except AttributeError:  # a LibCST without these internals: the public, slower way
        return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)


def ancestors(node: cst.CSTNode, parents: Mapping[int, cst.CSTNode]) -> List[cst.CSTNode]:
    """The nodes above `node`, innermost first."""
    found = []
    parent = parents.get(id(node))
    while parent is not None:
        found.append(parent)
        parent = parents.get(id(parent))
    return found


def statement_of(node: cst.CSTNode, parents: Mapping[int, cst.CSTNode]) -> Optional[cst.CSTNode]:
    """The innermost whole statement holding `node` (itself, if it is one). An `elif` is the
    `if` it continues: it cannot be printed on its own."""
    parent = parents.get(id(node))
    while not isinstance(node, STATEMENT) or (isinstance(parent, cst.If) and parent.orelse is node):
        if parent is None:
            return None
        node, parent = parent, parents.get(id(parent))
    return node


def indents(statement: cst.CSTNode, parents: Mapping[int, cst.CSTNode], module: cst.Module) -> List[str]:
    """The indentation the blocks around `statement` add, outermost first."""
    return [module.default_indent if block.indent is None else block.indent
            for block in reversed(ancestors(statement, parents)) if isinstance(block, cst.IndentedBlock)]


class _Unpaired(Exception):
    """LibCST's and Python's statements do not line up."""


def _pair_block(block: cst.BaseSuite, body: Sequence[ast.stmt], lines: Dict[int, int]) -> None:
    if isinstance(block, cst.IndentedBlock):
        _pair(block.body, body, lines)
    elif len(body) != len(block.body):  # a one-line suite: small statements only
        raise _Unpaired


def _pair(statements: Sequence[cst.BaseStatement], body: Sequence[ast.stmt], lines: Dict[int, int]) -> None:
    """Record the line of every LibCST statement in `statements`, from Python's `body`."""
    at = 0
    for statement in statements:
        if at >= len(body):
            raise _Unpaired
        node = body[at]
        lines[id(statement)] = node.lineno
        if isinstance(statement, cst.SimpleStatementLine):
            at += len(statement.body)  # `a; b` is one LibCST line, two Python statements
            continue
        at += 1
        _pair_compound(statement, node, lines)
    if at != len(body):
        raise _Unpaired


def _pair_compound(statement: cst.CSTNode, node: ast.stmt, lines: Dict[int, int]) -> None:
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef, cst.With)):
        _pair_block(statement.body, node.body, lines)  # type: ignore[attr-defined]
    elif isinstance(statement, cst.If):
        if not isinstance(node, ast.If):
            raise _Unpaired
        _pair_block(statement.body, node.body, lines)
        if isinstance(statement.orelse, cst.If):  # elif
            if len(node.orelse) != 1:
                raise _Unpaired
            lines[id(statement.orelse)] = node.orelse[0].lineno
            _pair_compound(statement.orelse, node.orelse[0], lines)
        elif statement.orelse is not None:
            _pair_block(statement.orelse.body, node.orelse, lines)
    elif isinstance(statement, (cst.For, cst.While)):
        _pair_block(statement.body, node.body, lines)  # type: ignore[attr-defined]
        if statement.orelse is not None:
            _pair_block(statement.orelse.body, node.orelse, lines)  # type: ignore[attr-defined]
    elif isinstance(statement, (cst.Try, cst.TryStar)):
        _pair_block(statement.body, node.body, lines)  # type: ignore[attr-defined]
        handlers = node.handlers  # type: ignore[attr-defined]
        if len(handlers) != len(statement.handlers):
            raise _Unpaired
        for handler, python in zip(statement.handlers, handlers):
            _pair_block(handler.body, python.body, lines)
        if statement.orelse is not None:
            _pair_block(statement.orelse.body, node.orelse, lines)  # type: ignore[attr-defined]
        if statement.finalbody is not None:
            _pair_block(statement.finalbody.body, node.finalbody, lines)  # type: ignore[attr-defined]
    elif isinstance(statement, cst.Match):
        cases = node.cases  # type: ignore[attr-defined]
        if len(cases) != len(statement.cases):
            raise _Unpaired
        for case, python in zip(statement.cases, cases):
            _pair_block(case.body, python.body, lines)
    else:
        raise _Unpaired


def _same(source: List[str], printed: List[str]) -> bool:
    """The printed lines are the source's; the file's last line may lack its line end."""
    if source == printed:
        return True
    return (len(source) == len(printed) > 0 and source[:-1] == printed[:-1]
            and source[-1] == printed[-1].rstrip("\r\n"))


class Positions:
    """node -> CodeRange, for the nodes of one module, computed a statement at a time on demand."""

    def __init__(self, module: cst.Module, source: str, parents: Mapping[int, cst.CSTNode]) -> None:
        self._module = module
        self._source = source
        self._parents = parents
        self._found: Dict[int, Tuple[int, int, int, int]] = {}  # id(node) -> line, column, end line, end column
        self._statement_lines: Optional[Dict[int, int]] = None
        self._lines: Optional[List[str]] = None
        self._starts: Optional[List[int]] = None  # the offset in the source where each line starts
        self._whole: Optional[Mapping[cst.CSTNode, CodeRange]] = None
        self.statements_printed = 0  # how many statements were printed to place nodes
        self.parsed = False  # whether Python's parser was asked for statements' lines

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        found = self._found.get(id(node))
        if found is None and self._whole is None:
            statement = statement_of(node, self._parents)
            if statement is not None and self._place(statement):
                found = self._found.get(id(node))
            if found is None:
                self._whole = whole_module(self._module)
        if found is None:
            return self._whole[node]  # type: ignore[index]
        line, column, end_line, end_column = found
        return CodeRange(CodePosition(line, column), CodePosition(end_line, end_column))

    def _line_of(self, statement: cst.CSTNode) -> Optional[int]:
        if self._statement_lines is None:
            self._statement_lines = {}
            self.parsed = True
            try:
                _pair(self._module.body, ast.parse(self._source).body, self._statement_lines)
            except (_Unpaired, SyntaxError, ValueError, RecursionError, MemoryError, AttributeError):
                self._statement_lines = {}
        return self._statement_lines.get(id(statement))

    def _place(self, statement: cst.CSTNode) -> bool:
        """Print `statement` alone and record the range of every node in it; False when it
        cannot be placed in the source."""
        provider = PositionProvider()
        state = PositionProvidingCodegenState(default_indent=self._module.default_indent,
                                              default_newline=self._module.default_newline, provider=provider)
        state.indent_tokens = indents(statement, self._parents, self._module)
        statement._codegen(state)
        self.statements_printed += 1
        text = "".join(state.tokens)
        if self._lines is None:
            self._lines = split_lines(self._source)
        shift = self._only_place_of(text)  # the source line the printed text starts at
        if shift is None:
            line = self._line_of(statement)
            if line is None:
                return False
            shift = line - provider._computed[statement].start.line
        printed = split_lines(text)
        if shift < 0 or not _same(self._lines[shift:shift + len(printed)], printed):
            return False
        parents = self._parents
        for node, where in provider._computed.items():  # kept as plain numbers, and only for the
            if id(node) in parents or node is statement:  # nodes rules see, not whitespace or commas
                self._found[id(node)] = (where.start.line + shift, where.start.column,
                                         where.end.line + shift, where.end.column)
        return True

    def _only_place_of(self, text: str) -> Optional[int]:
        """The index of the source line at whose start `text` stands, when the source holds
        `text` nowhere else; None when it holds it twice (then which is which takes the parser)
        or not at all. Looked for without its last line end, which the file's last line may
        lack: the statement there must count as a place too."""
        source = self._source
        text = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith(("\n", "\r")) else text
        at = source.find(text)
        if not text or at < 0 or source.find(text, at + 1) >= 0:
            return None
        if self._starts is None:
            self._starts = starts = [0]
            for line in self._lines:  # type: ignore[union-attr]
                starts.append(starts[-1] + len(line))
        line = bisect_right(self._starts, at) - 1
        return line if self._starts[line] == at else None
