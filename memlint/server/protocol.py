"""The Language Server Protocol side (pygls): documents in, diagnostics and code actions out.

Diagnostics are published when a document (or a notebook's cell) is opened, changed or saved,
and cleared when it is closed. Each carries memlint's code, its rule's level
(memlint.report.severity), and a link to the rule's documentation (`memlint explain`, written
once per session to a temporary folder). Code actions: one quick fix per finding whose fix the
configuration allows, and "fix all" (`source.fixAll.memlint`, also offered as a quick fix).
Edits are versioned, so a client applies none to a document that changed meanwhile.
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Type

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace import TextDocument

from memlint import __version__
from memlint.config import ConfigError
from memlint.docs import explain
from memlint.findings import Finding, Safety
from memlint.report.severity import Severity, severity
from memlint.rule import Rule
from memlint.rules import registry as rule_registry
from memlint.server.documents import (Cell, Linted, Settings, changed_cells, fixed_text, lint,
                                      notebook_json)
from memlint.server.edits import LineEdit, line_edit, lines_of

SOURCE = "memlint"
FIX_ALL = f"{types.CodeActionKind.SourceFixAll.value}.{SOURCE}"
_LEVELS = {Severity.ERROR: types.DiagnosticSeverity.Error, Severity.WARNING: types.DiagnosticSeverity.Warning,
           Severity.NOTE: types.DiagnosticSeverity.Information}
_WHERE = re.compile(r"\(line (\d+), column (\d+)\)")


class MemlintServer(LanguageServer):
    def __init__(self, settings: Settings) -> None:
        super().__init__(SOURCE, __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
                         notebook_document_sync=types.NotebookDocumentSyncOptions(
                             notebook_selector=[types.NotebookDocumentFilterWithCells(
                                 cells=[types.NotebookCellLanguage(language="python")], notebook="*")],
                             save=True))
        self.settings = settings
        self.registry: Mapping[str, Type[Rule]] = rule_registry()
        self._docs: Optional[Path] = None
        self._shown: Optional[str] = None  # the configuration error last shown

    # -- where things are ---------------------------------------------------------------------
    def root(self) -> Path:
        root = self.workspace.root_path
        return Path(root) if root else Path.cwd()

    def path_of(self, uri: str, suffix: str = ".py") -> Path:
        """The file a document stands for; an unsaved one is named in the workspace's root."""
        path = to_fs_path(uri) if uri.startswith("file:") else None
        return Path(path) if path else self.root() / f"untitled{suffix}"

    def docs_link(self, code: str) -> Optional[str]:
        rule = self.registry.get(code)
        if rule is None:
            return None
        if self._docs is None:
            self._docs = Path(tempfile.mkdtemp(prefix="memlint-docs-"))
            atexit.register(shutil.rmtree, self._docs, True)
        page = self._docs / f"{code}-{rule.NAME}.md"
        if not page.exists():
            page.write_text(explain(rule), encoding="utf-8")
        return from_fs_path(str(page))

    # -- linting --------------------------------------------------------------------------------
    def lint(self, text: str, path: Path, fix: bool = False) -> Optional[Linted]:
        """The document linted; None, and the error shown once (not at every keystroke), while
        a configuration is wrong."""
        try:
            linted = lint(text, path, self.root(), self.registry, self.settings, fix)
        except ConfigError as error:
            if str(error) != self._shown:
                self._shown = str(error)
                self.window_show_message(types.ShowMessageParams(types.MessageType.Error, f"memlint: {error}"))
            return None
        self._shown = None
        return linted

    def diagnostics(self, text: str, linted: Optional[Linted], cell: Optional[int] = None) -> List[types.Diagnostic]:
        """The diagnostics of a text (of notebook cell number `cell`, for a notebook)."""
        if linted is None:
            return []
        lines = lines_of(text)
        found = [self._diagnostic(lines, f, i, linted) for i, f in enumerate(linted.outcome.findings)
                 if f.cell == cell]
        if linted.outcome.error is not None:
            for line, column, message in _errors(linted.outcome.error, cell):
                found.append(types.Diagnostic(_range(lines, line, column, line, column, self), message,
                                              source=SOURCE, severity=types.DiagnosticSeverity.Error))
        return found

    def _diagnostic(self, lines: Sequence[str], finding: Finding, index: int, linted: Linted) -> types.Diagnostic:
        where = finding.range
        link = self.docs_link(finding.code)
        return types.Diagnostic(
            range=_range(lines, where.line - 1, where.column - 1, where.end_line - 1, where.end_column - 1, self),
            message=finding.message,
            severity=_LEVELS[severity(self.registry[finding.code])] if finding.code in self.registry else None,
            code=finding.code,
            code_description=types.CodeDescription(href=link) if link else None,
            source=SOURCE,
            data={"index": index, "fixable": linted.fixable(finding)},
        )

    def units(self, text: str) -> int:
        return self.workspace.position_codec.client_num_units(text)

    # -- documents and notebooks ----------------------------------------------------------------
    def notebook_cells(self, notebook: types.NotebookDocument) -> List[Cell]:
        cells = []
        for cell in notebook.cells:
            document = self.workspace.get_text_document(cell.document)
            code = cell.kind == types.NotebookCellKind.Code and (document.language_id or "python") == "python"
            cells.append(Cell(cell.document, document.source, code))
        return cells

    def publish_text(self, document: TextDocument) -> None:
        if self.workspace.get_notebook_document(cell_uri=document.uri) is not None:
            return self.publish_notebook(self.workspace.get_notebook_document(cell_uri=document.uri))
        linted = self.lint(document.source, self.path_of(document.uri))
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            document.uri, self.diagnostics(document.source, linted), document.version))

    def publish_notebook(self, notebook: Optional[types.NotebookDocument]) -> None:
        if notebook is None:
            return
        cells = self.notebook_cells(notebook)
        linted = self.lint(notebook_json(cells), self.path_of(notebook.uri, ".ipynb"))
        for number, cell in enumerate(cells, 1):
            if cell.code:
                self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
                    cell.uri, self.diagnostics(cell.text, linted, number)))

    # -- fixes ------------------------------------------------------------------------------------
    def edit(self, changes: Mapping[str, str]) -> Optional[types.WorkspaceEdit]:
        """A versioned edit turning each document (by URI) into its new text."""
        document_changes = []
        for uri, new in changes.items():
            document = self.workspace.get_text_document(uri)
            change = line_edit(document.source, new)
            if change is not None:
                document_changes.append(types.TextDocumentEdit(
                    types.OptionalVersionedTextDocumentIdentifier(uri, document.version),
                    [types.TextEdit(_line_range(lines_of(document.source), change, self), change.text)]))
        return types.WorkspaceEdit(document_changes=document_changes) if document_changes else None

    def code_actions(self, params: types.CodeActionParams) -> List[types.CodeAction]:
        uri = params.text_document.uri
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        if notebook is not None:
            cells = self.notebook_cells(notebook)
            number = next(i for i, c in enumerate(cells, 1) if c.uri == uri)
            text, path = notebook_json(cells), self.path_of(notebook.uri, ".ipynb")
        else:
            document = self.workspace.get_text_document(uri)
            cells, number, text, path = [], None, document.source, self.path_of(uri)

        def changes(new: Optional[str]) -> Dict[str, str]:
            return changed_cells(cells, new) if notebook is not None else ({uri: new} if new is not None else {})

        wanted = params.context.only
        actions: List[types.CodeAction] = []
        linted = self.lint(text, path)
        if linted is None:
            return []
        if _wanted(types.CodeActionKind.QuickFix, wanted):
            for index, finding in enumerate(linted.outcome.findings):
                if finding.cell != number or not _meets(finding, params.range):
                    continue
                edit = self.edit(changes(fixed_text(text, linted, index)))
                safe = finding.fix is not None and finding.fix.safety is Safety.SAFE
                if edit is not None:
                    actions.append(types.CodeAction(
                        f"{finding.code}: {finding.fix.description}{'' if safe else ' (unsafe)'}",  # type: ignore[union-attr]
                        kind=types.CodeActionKind.QuickFix, edit=edit, is_preferred=safe,
                        diagnostics=[d for d in params.context.diagnostics if d.source == SOURCE
                                     and d.code == finding.code and d.range.start.line == finding.line - 1]))
        fix_all = [kind for kind in (types.CodeActionKind.QuickFix, FIX_ALL) if _wanted(kind, wanted)]
        if fix_all and any(linted.fixable(f) for f in linted.outcome.findings):
            fixed = self.lint(text, path, fix=True)
            edit = self.edit(changes(fixed.outcome.text)) if fixed is not None else None
            if edit is not None:
                actions += [types.CodeAction("memlint: fix all", kind=kind, edit=edit) for kind in fix_all]
        return actions


def _wanted(kind: str, only: Optional[Sequence[str]]) -> bool:
    """Whether a client that asks for the kinds `only` (None: any) wants actions of `kind`."""
    return not only or any(kind == w or kind.startswith(f"{w}.") for w in only)


def _errors(error: str, cell: Optional[int]) -> List[Tuple[int, int, str]]:
    """Where an outcome's error (one line; "cell N: ..." parts joined by "; " in a notebook)
    points in a document (notebook cell number `cell`): 0-based line and column, and the text."""
    found = []
    for part in error.split("; ") if cell is not None else [error]:
        if cell is not None:
            if not part.startswith(f"cell {cell}: "):
                continue
            part = part[len(f"cell {cell}: "):]
        where = _WHERE.search(part)
        found.append((int(where.group(1)) - 1, int(where.group(2)) - 1, part) if where else (0, 0, part))
    return found


def _meets(finding: Finding, requested: types.Range) -> bool:
    """Whether the finding's lines meet the requested range (lines are enough for a quick fix)."""
    return finding.range.line - 1 <= requested.end.line and requested.start.line <= finding.range.end_line - 1


def _position(lines: Sequence[str], line: int, column: int, server: MemlintServer) -> types.Position:
    if line >= len(lines):
        if lines and not lines[-1].endswith(("\n", "\r")):  # past the last line, which has no newline
            return types.Position(len(lines) - 1, server.units(lines[-1]))
        return types.Position(len(lines), 0)
    text = lines[line].rstrip("\r\n")
    return types.Position(line, server.units(text[:max(column, 0)]))


def _range(lines: Sequence[str], line: int, column: int, end_line: int, end_column: int,
           server: MemlintServer) -> types.Range:
    return types.Range(_position(lines, line, column, server), _position(lines, end_line, end_column, server))


def _line_range(lines: Sequence[str], change: LineEdit, server: MemlintServer) -> types.Range:
    return _range(lines, change.start, 0, change.end, 0, server)


def build(settings: Settings) -> MemlintServer:
    server = MemlintServer(settings)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: MemlintServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.publish_text(ls.workspace.get_text_document(params.text_document.uri))

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: MemlintServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.publish_text(ls.workspace.get_text_document(params.text_document.uri))

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: MemlintServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.publish_text(ls.workspace.get_text_document(params.text_document.uri))

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: MemlintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(params.text_document.uri, []))

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_open(ls: MemlintServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.publish_notebook(ls.workspace.get_notebook_document(notebook_uri=params.notebook_document.uri))

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_change(ls: MemlintServer, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.publish_notebook(ls.workspace.get_notebook_document(notebook_uri=params.notebook_document.uri))

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_save(ls: MemlintServer, params: types.DidSaveNotebookDocumentParams) -> None:
        ls.publish_notebook(ls.workspace.get_notebook_document(notebook_uri=params.notebook_document.uri))

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_close(ls: MemlintServer, params: types.DidCloseNotebookDocumentParams) -> None:
        for cell in params.cell_text_documents:
            ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(cell.uri, []))

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL]))
    def code_action(ls: MemlintServer, params: types.CodeActionParams) -> List[types.CodeAction]:
        return ls.code_actions(params)

    return server


def serve(settings: Settings) -> None:
    build(settings).start_io()

