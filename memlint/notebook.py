"""Jupyter notebooks in and out: code cells as one module, IPython syntax masked, findings
mapped back to `cell N`, fixes written into code cells only.

A notebook is analysed as one module, its code cells in order, so that a loop in one cell sees
the model built in another. IPython lines that are not Python (`%time f()`, `!pip install x`,
`x?`, the `%%timeit` line of a cell magic) become `pass` placeholders of the same indentation:
line numbers stay, the blocks they sit in stay valid, and they are put back after a fix. Cells
are separated by marker statements, so a fix cannot move code from one cell into another
unnoticed. Fixes are spliced into the file's own JSON text: outputs, metadata, key order,
indentation, escaping and the final newline stay byte for byte.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import io
import json
import os
import re
import tokenize
import warnings
from dataclasses import dataclass, replace
from functools import cached_property
from json.decoder import scanstring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from memlint.engine import SourceError, parse, why_not_compiled
from memlint.findings import Finding, Range
from memlint.sourcefile import SourceText, digest, read_bytes

NOTEBOOK_SUFFIX = ".ipynb"
# Cell magics whose body is Python that runs as written; any other (%%bash, %%writefile ...) is
# not Python, and its cell is left alone.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})

_CELL_MAGIC = re.compile(r"[ \t]*%%(\w*)")
_LINE_MAGIC = re.compile(r"[ \t]*[%!]")  # %time f(), !pip install x
_ASSIGNED_MAGIC = re.compile(r"[ \t]*[\w.]+(?:[ \t]*,[ \t]*[\w.]+)*[ \t]*=[ \t]*[%!]")  # files = !ls
_HELP = re.compile(r"[ \t]*(?:\?\??[ \t]*[\w.*]+|[\w.*]+(?:\(\))?[ \t]*\?\??)[ \t]*")  # ?x, x?, x??
_SPACE = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null|NaN|-?Infinity")


class NotebookError(Exception):
    """The notebook cannot be read or rewritten; the message is one line."""


def is_notebook(path: Path) -> bool:
    return path.suffix == NOTEBOOK_SUFFIX


def read_source(path: Path) -> SourceText:
    """A notebook file's JSON text, for Notebook.from_text (read in the run's own process,
    which looks its result up in the cache by it): UnreadableFile or TooLarge, or
    NotebookError when it is not UTF-8."""
    raw = read_bytes(path)  # a regular file only: never waits on a FIFO
    encoding = "utf-8-sig" if raw.startswith(b"\xef\xbb\xbf") else "utf-8"
    try:
        return SourceText(raw.decode(encoding), encoding, digest(raw))
    except UnicodeDecodeError:
        raise NotebookError("not a notebook: not valid UTF-8 text") from None


def _lines(text: str) -> List[str]:
    """Lines with their endings, split as Python splits them (\\n, \\r\\n, \\r; not form feeds)."""
    return list(io.StringIO(text, newline=""))


def _body(line: str) -> str:
    return line.rstrip("\r\n")


def _at_statement_start(previous: Sequence[str]) -> bool:
    """Whether the next line starts a statement: the lines before it close every bracket,
    string and backslash continuation (so `% b` inside parentheses stays Python)."""
    try:
        for _ in tokenize.generate_tokens(io.StringIO("".join(previous)).readline):
            pass
    except tokenize.TokenError:
        return False
    except (SyntaxError, ValueError):
        return True  # not Python anyway: the parse reports it
    return True


def _is_magic(line: str) -> bool:
    body = _body(line)
    return bool(_LINE_MAGIC.match(body) or _ASSIGNED_MAGIC.match(body) or _HELP.fullmatch(body))


@dataclass(frozen=True)
class _Placeholder:
    original: str  # the IPython line, with its ending
    continued: bool  # a backslash continuation of the line above: put back as it was


@dataclass(frozen=True)
class _Cell:
    number: int  # 1-based position among all cells, markdown included
    index: int  # position in the JSON "cells" list
    source: str  # as in the file
    masked: str  # IPython lines as placeholders; ends with a newline
    placeholders: Dict[int, _Placeholder]
    added_newline: bool  # the file's source has no final newline; `masked` does


def _placeholder(indent: str, ident: int, nonce: str, ending: str) -> str:
    return f"{indent}pass  # memlint magic {ident} {nonce}{ending}"


def _mask(source: str, nonce: str, first_id: int) -> Optional[Tuple[str, Dict[int, _Placeholder]]]:
    """The cell's source with IPython lines as placeholders; None for a cell that is not Python."""
    lines = _lines(source)
    placeholders: Dict[int, _Placeholder] = {}
    out: List[str] = []
    continuing = False
    indent = ""

    def put(line: str, continued: bool) -> None:
        ident = first_id + len(placeholders)
        placeholders[ident] = _Placeholder(line, continued)
        ending = line[len(_body(line)):] or "\n"
        out.append(_placeholder(indent, ident, nonce, ending))

    for number, line in enumerate(lines):
        cell_magic = _CELL_MAGIC.match(line) if number == 0 else None
        if cell_magic is not None and cell_magic.group(1) not in PYTHON_CELL_MAGICS:
            return None
        if continuing:
            put(line, continued=True)
        elif cell_magic is not None or (_is_magic(line) and _at_statement_start(out)):
            indent = line[:len(line) - len(line.lstrip(" \t"))]
            put(line, continued=False)
        else:
            out.append(line)
            continue
        continuing = _body(line).endswith("\\")
    masked = "".join(out)
    if masked and not masked.endswith(("\n", "\r")):
        masked += "\n"
    return masked, placeholders


def _syntax_problem(cell: _Cell) -> Optional[str]:
    """Why CPython rejects the cell, with the line and column inside the cell; None if it parses."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(cell.masked)
    except SyntaxError as error:
        return f"cell {cell.number}: cannot parse: {error.msg} (line {error.lineno}, column {error.offset})"
    except (ValueError, RecursionError, MemoryError) as error:
        return f"cell {cell.number}: cannot parse: {why_not_compiled(error)}"
    return None


@dataclass(frozen=True)
class _Span:
    """Where a cell's "source" value lies in the JSON text, and each string inside it."""

    start: int
    end: int
    strings: Tuple[Tuple[int, int], ...]


def _source_spans(text: str) -> Dict[int, _Span]:
    """cells[i].source -> its span, for every cell, by one scan of the (valid) JSON text."""
    spans: Dict[int, _Span] = {}

    def skip(pos: int) -> int:
        return _SPACE.match(text, pos).end()  # type: ignore[union-attr]

    def is_source(path: Tuple[object, ...]) -> bool:
        return len(path) == 3 and path[0] == "cells" and path[2] == "source"

    def value(pos: int, path: Tuple[object, ...]) -> int:
        char = text[pos]
        if char == '"':
            end = scanstring(text, pos + 1)[1]
            if is_source(path):
                spans[path[1]] = _Span(pos, end, ((pos, end),))  # type: ignore[index]
            return end
        if char not in "[{":
            return _SCALAR.match(text, pos).end()  # type: ignore[union-attr]
        close = "]" if char == "[" else "}"
        items: List[Tuple[int, int]] = []
        start, pos = pos, skip(pos + 1)
        while text[pos] != close:
            if char == "{":
                key, pos = scanstring(text, pos + 1)
                pos = skip(skip(pos) + 1)  # the colon
            else:
                key = len(items)
            item_end = value(pos, (*path, key))
            items.append((pos, item_end))
            pos = skip(item_end)
            if text[pos] == ",":
                pos = skip(pos + 1)
        if char == "[" and is_source(path):
            spans[path[1]] = _Span(start, pos + 1, tuple(items))  # type: ignore[index]
        return pos + 1

    value(skip(0), ())
    return spans


def _code_language(data: dict) -> str:
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    for key, field in (("language_info", "name"), ("kernelspec", "language")):
        table = metadata.get(key)
        if isinstance(table, dict) and isinstance(table.get(field), str):
            return table[field].lower()
    return "python"


def _is_python(language: str) -> bool:
    return language.startswith(("python", "ipython"))


def _source_text(cell: dict) -> Optional[str]:
    source = cell.get("source", "")
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(part, str) for part in source):
        return "".join(source)
    return None


def _cell_language(cell: dict, default: str) -> str:
    vscode = cell.get("metadata", {}).get("vscode") if isinstance(cell.get("metadata"), dict) else None
    if isinstance(vscode, dict) and isinstance(vscode.get("languageId"), str):
        return vscode["languageId"].lower()
    return default


class Notebook:
    """One notebook: its JSON text, the code cells memlint lints, and the module they make."""

    def __init__(self, text: str, encoding: str, data: dict, cells: List[_Cell],
                 problems: List[str], nonce: str) -> None:
        self.text = text  # the file's JSON text, as read (or as a fix would write it)
        self.encoding = encoding
        self.data = data
        self.cells = cells  # the code cells that are linted, in order
        self.problems = problems  # one line per code cell that does not parse
        self.nonce = nonce

    @classmethod
    def from_text(cls, text: str, encoding: str = "utf-8") -> "Notebook":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise NotebookError(f"not a notebook: invalid JSON: {error.msg} "
                                f"(line {error.lineno}, column {error.colno})") from None
        except RecursionError:
            raise NotebookError("not a notebook: JSON nested too deep") from None
        if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
            if isinstance(data, dict) and isinstance(data.get("worksheets"), list):
                raise NotebookError("nbformat 3 notebooks are not supported "
                                    "(convert with `jupyter nbconvert --to notebook`)")
            raise NotebookError("not a notebook: no list of cells")
        nonce = os.urandom(16).hex()  # (uuid4's randomness, without importing uuid and platform)
        language = _code_language(data)
        cells: List[_Cell] = []
        problems: List[str] = []
        placeholders = 0
        for index, raw_cell in enumerate(data["cells"]):
            if not isinstance(raw_cell, dict) or raw_cell.get("cell_type") != "code":
                continue
            source = _source_text(raw_cell)
            if source is None or not _is_python(_cell_language(raw_cell, language)):
                continue
            masked = _mask(source, nonce, placeholders)
            if masked is None:
                continue
            placeholders += len(masked[1])
            cell = _Cell(index + 1, index, source, masked[0], masked[1],
                         added_newline=bool(source) and not source.endswith(("\n", "\r")))
            problem = _syntax_problem(cell)
            if problem is None:
                cells.append(cell)
            else:
                problems.append(problem)
        return cls(text, encoding, data, cells, problems, nonce)

    # The module -----------------------------------------------------------------------------

    def _boundary(self, cell: _Cell) -> str:
        return f"pass  # memlint cell {cell.number} {self.nonce}\n"

    @cached_property
    def module(self) -> str:
        """The code cells joined, a marker statement between two cells."""
        parts = []
        for position, cell in enumerate(self.cells):
            if position:
                parts.append(self._boundary(cell))
            parts.append(cell.masked)
        return "".join(parts)

    @cached_property
    def _line_cells(self) -> List[Tuple[int, int]]:
        """For each line of the module: (cell number, line in the cell); (cell, 0) for a marker."""
        table: List[Tuple[int, int]] = []
        for position, cell in enumerate(self.cells):
            if position:
                table.append((cell.number, 0))
            table.extend((cell.number, line) for line in range(1, len(_lines(cell.masked)) + 1))
        return table

    def _cell_line(self, module_line: int) -> Tuple[int, int]:
        table = self._line_cells
        if not table:
            return 1, 1
        cell, line = table[min(max(module_line, 1), len(table)) - 1]
        return cell, max(line, 1)

    def locate(self, finding: Finding) -> Finding:
        """The finding with its lines counted inside its cell, and the cell's number."""
        cell, line = self._cell_line(finding.range.line)
        end_cell, end_line = self._cell_line(finding.range.end_line)
        end_column = finding.range.end_column
        if end_cell != cell:  # cannot happen for a node inside one cell; keep the range sane
            end_line, end_column = line, finding.range.column
        statement_cell, statement_line = self._cell_line(finding.statement_line)
        return replace(finding, cell=cell,
                       range=Range(line, finding.range.column, end_line, end_column),
                       statement_line=statement_line if statement_cell == cell else line)

    def without_unparsable_cells(self) -> "Notebook":
        """This notebook less the cells LibCST cannot parse (CPython accepted them all); itself
        when every cell parses on its own."""
        kept, problems = [], list(self.problems)
        for cell in self.cells:
            try:
                parse(cell.masked)
            except SourceError as error:
                problems.append(f"cell {cell.number}: {error}")
            else:
                kept.append(cell)
        if len(kept) == len(self.cells):
            return self
        return Notebook(self.text, self.encoding, self.data, kept, problems, self.nonce)

    # Writing back ---------------------------------------------------------------------------

    def _split(self, module: str) -> List[str]:
        """The module cut back into one text per cell, at the markers."""
        texts: List[List[str]] = [[] for _ in self.cells]
        position = 0
        for line in _lines(module):
            following = self.cells[position + 1] if position + 1 < len(self.cells) else None
            if following is not None and line == self._boundary(following):
                position += 1
            elif line.startswith("pass  # memlint cell ") and self.nonce in line:
                raise NotebookError("a fix moved code across notebook cells; nothing written")
            else:
                texts[position].append(line)
        if position != len(self.cells) - 1:
            raise NotebookError("a fix moved code across notebook cells; nothing written")
        return ["".join(lines) for lines in texts]

    def _unmask(self, cell: _Cell, masked: str) -> str:
        """The cell's new source: placeholders back to the IPython lines they stand for."""
        pattern = re.compile(rf"([ \t]*)pass  # memlint magic (\d+) {self.nonce}(\r\n|\r|\n)?")
        seen = []
        out = []
        for line in _lines(masked):
            match = pattern.fullmatch(line)
            if match is None:
                out.append(line)
                continue
            ident = int(match.group(2))
            placeholder = cell.placeholders.get(ident)
            if placeholder is None:
                raise NotebookError("a fix moved an IPython line across notebook cells; nothing written")
            seen.append(ident)
            line = _body(placeholder.original)
            if not placeholder.continued:  # at the indentation the fix left it
                line = match.group(1) + line.lstrip(" \t")
            out.append(line + (match.group(3) or ""))
        if sorted(seen) != sorted(cell.placeholders):
            raise NotebookError("a fix lost or copied an IPython line; nothing written")
        source = "".join(out)
        if cell.added_newline and source.endswith("\n"):
            source = source[:-1]
        return source

    def updated(self, module: str) -> "Notebook":
        """This notebook with the code cells of `module` (the module after a fix)."""
        if module == self.module:
            return self
        cells, sources = [], {}
        for cell, masked in zip(self.cells, self._split(module)):
            source = self._unmask(cell, masked)
            cells.append(replace(cell, masked=masked, source=source))
            if source != cell.source:
                sources[cell.index] = source
        text = self._spliced(sources)
        return Notebook(text, self.encoding, json.loads(text), cells, self.problems, self.nonce)

    def _spliced(self, sources: Dict[int, str]) -> str:
        """The JSON text with the given cells' sources replaced and every other byte kept."""
        spans = self._spans
        pieces, last = [], 0
        for index in sorted(sources):
            span = spans[index]
            pieces += [self.text[last:span.start], self._encoded(span, index, sources[index])]
            last = span.end
        pieces.append(self.text[last:])
        text = "".join(pieces)
        expected = json.loads(self.text, parse_constant=str)  # NaN as a string: equal to itself
        for index, source in sources.items():
            old = expected["cells"][index]["source"]
            expected["cells"][index]["source"] = source if isinstance(old, str) else _lines(source)
        if json.loads(text, parse_constant=str) != expected:  # the sources changed, nothing else
            raise NotebookError("cannot rewrite the notebook's JSON faithfully; nothing written")
        return text

    def _encoded(self, span: _Span, index: int, source: str) -> str:
        ascii_only = self.text.isascii()
        if self.text[span.start] == '"':
            return json.dumps(source, ensure_ascii=ascii_only)
        old = self.data["cells"][index]["source"]
        new = _lines(source)
        raw = [self.text[start:end] for start, end in span.strings]
        if span.strings:
            opening = self.text[span.start + 1:span.strings[0][0]]
            closing = self.text[span.strings[-1][1]:span.end - 1]
            separator = (self.text[span.strings[0][1]:span.strings[1][0]] if len(span.strings) > 1
                         else "," + opening)
        else:
            opening, closing, separator = self._empty_list_layout(span)
        items: List[str] = []
        matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
        for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
            if tag == "equal":
                items += raw[old_start:old_end]
            else:
                items += [json.dumps(line, ensure_ascii=ascii_only) for line in new[new_start:new_end]]
        if not items:
            return "[]"
        return "[" + opening + separator.join(items) + closing + "]"

    def _empty_list_layout(self, span: _Span) -> Tuple[str, str, str]:
        """For a source that was `[]`: strings one per line, one indent deeper than the key."""
        line_start = self.text.rfind("\n", 0, span.start) + 1
        if line_start == 0:  # the whole file on one line
            return "", "", ", "
        key_line = self.text[line_start:span.start]
        indent = key_line[:len(key_line) - len(key_line.lstrip(" \t"))]
        unit = re.match(r"\{\r?\n([ \t]*)", self.text)
        step = unit.group(1) if unit else " "
        newline = "\r\n" if "\r\n" in self.text else "\n"
        return newline + indent + step, newline + indent, "," + newline + indent + step

    # Positions in the file ------------------------------------------------------------------

    @cached_property
    def _spans(self) -> Dict[int, _Span]:
        return _source_spans(self.text)

    @cached_property
    def _newlines(self) -> List[int]:
        return [match.start() for match in re.finditer("\n", self.text)]

    def file_line(self, cell_number: int, line: int) -> int:
        """The line of the JSON file that holds line `line` of cell `cell_number`."""
        index = cell_number - 1
        span = self._spans.get(index)
        if span is None or not span.strings:
            return 1
        source = self.data["cells"][index]["source"]
        parts = [source] if isinstance(source, str) else source
        seen = 0
        position = span.strings[-1][0]
        for part, (start, _) in zip(parts, span.strings):
            seen += max(len(_lines(part)), 1)
            if seen >= line:
                position = start
                break
        return bisect.bisect_left(self._newlines, position) + 1
