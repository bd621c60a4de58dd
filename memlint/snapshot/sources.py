"""Which of the user's files a recorded frame is in.

A snapshot names files as they were on the machine that recorded it (`/home/me/proj/train.py`
on a cluster node); here they may lie elsewhere (`~/proj/train.py`). A frame is placed in a
local file with the same name whose path agrees with the recorded one on the most trailing
folders, and only where the local file has that line inside a function of the frame's name:
torch's own `module.py` is not a user's `module.py`. Frames of installed packages
(site-packages, dist-packages) are never the user's, unless the very same path is.
"""

from __future__ import annotations

import ast
from pathlib import Path, PurePath
from typing import Dict, Iterable, List, Optional, Tuple

INSTALLED = frozenset({"site-packages", "dist-packages"})
_Scopes = List[Tuple[int, int, str]]  # (first line, last line, name) of every def, class and lambda


def _scopes(path: Path) -> Optional[Tuple[int, _Scopes]]:
    """(number of lines, scopes) of a file, or None when it cannot be read or parsed."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    scopes = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            scopes.append((first, node.end_lineno or node.lineno, node.name))
        elif isinstance(node, ast.Lambda):
            scopes.append((node.lineno, node.end_lineno or node.lineno, "<lambda>"))
    return len(source.splitlines()), scopes


def _common_tail(recorded: PurePath, local: Path) -> int:
    count = 0
    for a, b in zip(reversed(recorded.parts), reversed(local.parts)):
        if a != b:
            break
        count += 1
    return count


class Sources:
    """The user's Python files, and the one (if any) that a recorded frame is in."""

    def __init__(self, files: Iterable[Path]) -> None:
        self.by_name: Dict[str, List[Path]] = {}
        for path in files:
            if path.suffix == ".py":
                self.by_name.setdefault(path.name, []).append(path.resolve())
        self._scopes: Dict[Path, Optional[Tuple[int, _Scopes]]] = {}
        self._found: Dict[Tuple[str, int, str], Optional[Path]] = {}

    def _runs_there(self, path: Path, line: int, function: str) -> bool:
        """Whether `path` has `line`, inside a def or class named `function` (a module frame's
        `<module>`: inside none; a comprehension's or lambda's `<...>` name: anywhere)."""
        if path not in self._scopes:
            self._scopes[path] = _scopes(path)
        known = self._scopes[path]
        if known is None or not 1 <= line <= known[0]:
            return False
        if function.startswith("<") and function != "<module>":
            return True
        around = [(first, name) for first, last, name in known[1] if first <= line <= last and name != "<lambda>"]
        innermost = max(around)[1] if around else "<module>"
        return innermost == function

    def match(self, filename: str, line: int, function: str) -> Optional[Path]:
        """The local file a frame recorded as (filename, line, function) is in, or None."""
        key = (filename, line, function)
        if key not in self._found:
            self._found[key] = self._match(filename, line, function)
        return self._found[key]

    def _match(self, filename: str, line: int, function: str) -> Optional[Path]:
        recorded = PurePath(filename)
        candidates = [path for path in self.by_name.get(recorded.name, ())
                      if str(path) == filename or not INSTALLED.intersection(recorded.parts)]
        candidates = [path for path in candidates if self._runs_there(path, line, function)]
        if not candidates:
            return None
        tails = [(_common_tail(recorded, path), path) for path in candidates]
        best = max(tail for tail, _ in tails)
        chosen = [path for tail, path in tails if tail == best]
        return chosen[0] if len(chosen) == 1 else None  # two files as likely: say neither
