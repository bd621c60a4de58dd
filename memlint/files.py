"""Which files a run lints: the paths given, folders walked, .gitignore and excludes honoured.

A file named on the command line is always linted (with `--force-exclude`, unless `exclude`
names it); files found by walking a folder are skipped when a .gitignore (of the folder or any
parent up to the repository root) or the `exclude` setting says so, and folders such as .git,
.venv and build are never entered. Nor is code a project carries but does not own: a folder
named for it (`third_party`, `vendor`, ...), or a project of its own (with a `setup.py`,
`setup.cfg` or `pyproject.toml`) inside a folder of dependencies (`dependencies/AutoGPTQ`,
`external/taming`). Its maintainers would not take changes to a copy; name the folder on the
command line to lint it.

The walk stays inside the folder it was given: symbolic links to folders are not entered,
links to files outside it are not followed, and FIFOs, sockets and devices are not source. A
path that cannot be read is a BadPath (one line, never an exception): an error, or a warning
for a `.py` link that leads nowhere (broken or looping), since no source is lost by skipping it.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, List, Optional, Sequence, Tuple, Union

from memlint.config import AnyConfig, location, relative_to

SKIPPED_FOLDERS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "build", "dist", "__pycache__",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", "node_modules", ".eggs", "site-packages",
    ".ipynb_checkpoints",
})
SOURCE_SUFFIXES = (".py", ".ipynb")
# Folders of code copied from elsewhere, and folders holding other projects
VENDORED_FOLDERS = frozenset({"third_party", "third-party", "thirdparty", "3rdparty", "vendor", "vendored", "_vendor"})
DEPENDENCY_FOLDERS = VENDORED_FOLDERS | {"dependencies", "deps", "external", "externals", "extern"}
_PROJECT_FILES = ("setup.py", "setup.cfg", "pyproject.toml")


@dataclass(frozen=True)
class BadPath:
    """A path that cannot be linted, and why (one line)."""

    path: Path
    message: str
    warning: bool = False  # skipped, but the run is not failed for it


if TYPE_CHECKING:  # imported where a folder is walked: a run over named files (pre-commit's) needs none
    import pathspec

_Ignores = List[Tuple[str, "pathspec.PathSpec"]]  # (the folder of a .gitignore, resolved; its patterns)


def _gitignore(folder: Path, problems: List["BadPath"]) -> Optional[pathspec.PathSpec]:
    """The patterns of the folder's .gitignore; one that is there but cannot be read is a
    warning in `problems` (its patterns do not apply: files it would hide get linted)."""
    file = folder / ".gitignore"
    if not os.path.lexists(file):
        return None
    try:
        if not os.path.isfile(file):
            reason = "is a directory" if os.path.isdir(file) else "not a regular file"
            raise OSError(errno.EINVAL, reason)
        lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as error:
        problems.append(BadPath(file, f"cannot read: {_reason(file, error)}; its patterns are not applied",
                                warning=True))
        return None
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(lines)


def _parent_ignores(folder: Path, problems: List["BadPath"]) -> _Ignores:
    """The .gitignore files above `folder`, up to the repository root (the folder with .git)."""
    found: _Ignores = []
    for parent in folder.resolve().parents:
        spec = _gitignore(parent, problems)
        if spec is not None:
            found.append((str(parent), spec))
        if os.path.exists(parent / ".git"):
            break
    return found


def _ignored(path: Path, is_dir: bool, ignores: _Ignores) -> bool:
    for base, spec in ignores:
        relative = relative_to(location(path), base)
        if relative is not None and spec.match_file(relative + ("/" if is_dir else "")):
            return True
    return False


def _reason(path: Path, error: OSError) -> str:
    """Why `path` cannot be opened, in a user's words."""
    if error.errno == errno.ELOOP:
        return "symbolic link loop"
    if error.errno == errno.ENOENT and os.path.islink(path):
        return f"broken symbolic link (to {os.readlink(path)})"
    if error.errno == errno.ENOENT:
        return "no such file or directory"
    return (error.strerror or str(error)).lower()


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _source_file(entry: os.DirEntry, root: str) -> Union[Path, BadPath, None]:
    """A `.py` entry of a walked folder: the file to lint, a reason to skip it, or None when it
    is no source of this tree (a FIFO, socket or device; a link to one, to a folder, or out)."""
    path = Path(entry.path)
    try:
        if entry.is_file():
            outside = entry.is_symlink() and not _inside(os.path.realpath(path), root)
            return None if outside else path
        if entry.is_symlink():
            os.stat(path)  # raises when the link leads nowhere
        return None
    except OSError as error:
        skipped = error.errno in (errno.ENOENT, errno.ELOOP)
        return BadPath(path, _reason(path, error) + (", skipped" if skipped else ""), warning=skipped)


@dataclass
class _Tally:
    """What a walk passed over: source files and folders that .gitignore or `exclude` hide, and
    vendored folders."""

    hidden: int = 0


def _walk(root: Path, config: AnyConfig, tally: _Tally) -> Iterator[Union[Path, BadPath]]:
    real_root = os.path.realpath(root)
    problems: List[BadPath] = []
    ignores = _parent_ignores(root, problems)
    own = _gitignore(root, problems)
    if own is not None:
        ignores.append((str(root.resolve()), own))
    yield from problems
    stack: List[Tuple[Path, _Ignores]] = [(root, ignores)]
    while stack:
        folder, inherited = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
            if entries:  # a folder one may list but not enter (mode 644): its files cannot be opened
                os.stat(os.path.join(folder, os.curdir))
        except OSError as error:
            yield BadPath(folder, f"cannot read folder: {_reason(folder, error)}")
            continue
        subfolders = []
        for entry in entries:
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if entry.name in SKIPPED_FOLDERS:
                    continue
                if _ignored(path, True, inherited) or config.is_excluded(path) or _vendored(folder, entry.name):
                    tally.hidden += 1
                    continue
                problems = []
                spec = _gitignore(path, problems)
                yield from problems
                subfolders.append((path, inherited + [(str(path.resolve()), spec)] if spec else inherited))
            elif entry.name.endswith(SOURCE_SUFFIXES):
                if _ignored(path, False, inherited) or config.is_excluded(path):
                    tally.hidden += 1
                    continue
                found = _source_file(entry, real_root)
                if found is not None:
                    yield found
        stack.extend(reversed(subfolders))


def _vendored(folder: Path, name: str) -> bool:
    """The subfolder `name` of `folder` holds code copied from elsewhere (see the module docstring)."""
    if name in VENDORED_FOLDERS:
        return True
    return folder.name in DEPENDENCY_FOLDERS and any(os.path.isfile(folder / name / f) for f in _PROJECT_FILES)


def _in_vendored(path: Path) -> bool:
    """A file named as it lies in the project (`dependencies/AutoGPTQ/x.py`, as pre-commit names
    staged files) sits in a vendored folder; folders above the path as given do not count."""
    parts = Path(os.path.normpath(path)).parts[:-1]
    return any(_vendored(Path(*parts[:i]) if i else Path("."), parts[i]) for i in range(len(parts))
               if parts[i] not in ("..", "/"))


def _nothing_found(folder: Path, tally: _Tally) -> BadPath:
    if tally.hidden:
        return BadPath(folder, "no Python file found (all are ignored by .gitignore or `exclude`, or vendored)")
    return BadPath(folder, "no Python file found")


def discover(paths: Sequence[str], config: AnyConfig, force_exclude: bool = False,
             require_files: bool = False) -> Iterator[Union[Path, BadPath]]:
    """The files to lint; with `force_exclude`, `exclude` and the vendored folders apply to
    files named on the command line too (pre-commit names every staged file). With `require_files`, a folder named in
    `paths` in which no file is found is an error (a typo, or a tree all ignored, must not pass)."""
    seen = set()
    warned = set()  # a .gitignore above several named folders: one warning
    for name in paths:
        path = Path(name)
        try:
            os.stat(path)
        except OSError as error:
            yield BadPath(path, _reason(path, error))
            continue
        if force_exclude and not os.path.isdir(path) and (config.is_excluded(path) or _in_vendored(path)):
            continue
        tally = _Tally()
        found = _walk(path, config, tally) if os.path.isdir(path) else iter((path,))
        some = False
        for item in found:
            if isinstance(item, BadPath):
                some = some or not item.warning
                if item.path not in warned:
                    warned.add(item.path)
                    yield item
                continue
            some = True
            key = os.path.realpath(item) if os.path.islink(item) else location(item)  # the same, sooner
            if key not in seen:
                seen.add(key)
                yield item
        if not some and require_files:
            yield _nothing_found(path, tally)
