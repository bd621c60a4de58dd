"""Which files a run lints: the paths given, folders walked, .gitignore and excludes honoured.

A file named on the command line is always linted (with `--force-exclude`, unless `exclude`
names it); files found by walking a folder are skipped when a .gitignore (of the folder or any
parent up to the repository root) or the `exclude` setting says so, and folders such as .git,
.venv and build are never entered.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import pathspec

from memlint.config import Config

SKIPPED_FOLDERS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "build", "dist", "__pycache__",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", "node_modules", ".eggs", "site-packages",
    ".ipynb_checkpoints",
})
SOURCE_SUFFIXES = (".py", ".ipynb")


@dataclass(frozen=True)
class MissingPath:
    path: Path


_Ignores = List[Tuple[Path, pathspec.PathSpec]]


def _gitignore(folder: Path) -> Optional[pathspec.PathSpec]:
    file = folder / ".gitignore"
    if not file.is_file():
        return None
    try:
        lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _parent_ignores(folder: Path) -> _Ignores:
    """The .gitignore files above `folder`, up to the repository root (the folder with .git)."""
    found: _Ignores = []
    for parent in folder.resolve().parents:
        spec = _gitignore(parent)
        if spec is not None:
            found.append((parent, spec))
        if (parent / ".git").exists():
            break
    return found


def _ignored(path: Path, is_dir: bool, ignores: _Ignores) -> bool:
    for base, spec in ignores:
        try:
            relative = path.resolve().relative_to(base).as_posix()
        except ValueError:
            continue
        if spec.match_file(relative + ("/" if is_dir else "")):
            return True
    return False


def _walk(root: Path, config: Config) -> Iterator[Path]:
    ignores = _parent_ignores(root)
    own = _gitignore(root)
    if own is not None:
        ignores.append((root.resolve(), own))
    stack: List[Tuple[Path, _Ignores]] = [(root, ignores)]
    while stack:
        folder, inherited = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        subfolders = []
        for entry in entries:
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if entry.name in SKIPPED_FOLDERS or _ignored(path, True, inherited) or config.is_excluded(path):
                    continue
                spec = _gitignore(path)
                subfolders.append((path, inherited + [(path.resolve(), spec)] if spec else inherited))
            elif entry.name.endswith(SOURCE_SUFFIXES) and entry.is_file():
                if not _ignored(path, False, inherited) and not config.is_excluded(path):
                    yield path
        stack.extend(reversed(subfolders))


def discover(paths: Sequence[str], config: Config, force_exclude: bool = False
             ) -> Iterator[Union[Path, MissingPath]]:
    """The files to lint; with `force_exclude`, `exclude` applies to files named on the command
    line too (pre-commit names every staged file)."""
    seen = set()
    for name in paths:
        path = Path(name)
        if not path.exists():
            yield MissingPath(path)
            continue
        if force_exclude and not path.is_dir() and config.is_excluded(path):
            continue
        found = _walk(path, config) if path.is_dir() else iter((path,))
        for file in found:
            key = file.resolve()
            if key not in seen:
                seen.add(key)
                yield file
