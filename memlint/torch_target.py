"""The oldest torch a project supports, which decides the fixes memlint may offer.

Like ruff's `target-version`: `[tool.memlint] target-torch = "2.1"` (or `--target-torch 2.1`)
says it; else it is read from what the project declares about torch, in the folder of the
linted file or the nearest one above it that declares anything, up to the project's root:

- `pyproject.toml`: `project.dependencies` (also Poetry's `tool.poetry.dependencies.torch`);
- `requirements*.txt`, and `requirements/*.txt`, `requirements/*/*.txt`;
- `setup.py`: a literal `install_requires=[...]` (or a name bound to a literal list), read with
  `ast`, never executed; `setup.cfg`: `[options] install_requires`.

The lower bound of the declared range is the target (`torch>=1.8.0` targets 1.8; a wheel URL
`torch-1.8.1+cpu-...whl` 1.8); several declarations: the lowest. A requirement without a lower
bound (`torch`, `torch<3`) says nothing; with no lower bound declared at all there is no
target: every fix is offered, as on the current torch. The search stops at the configuration's folder or at a folder that holds a
project (`pyproject.toml`, `setup.py`, `setup.cfg`, `.git`), whatever it declares.

A fix says the oldest torch it runs on (`Fix.min_torch`); below the target the engine does not
offer it and says why.
"""

from __future__ import annotations

import ast
import configparser
import os
import re
import sys
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on older Pythons only
    import tomli as tomllib


class TorchVersion(NamedTuple):
    """A torch release as (major, minor): APIs appear in minor releases."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


_VERSION = re.compile(r"^\s*v?(\d+)(?:\.(\d+|\*))?(?:\.(\d+|\*))?(?:[.+\-]?[A-Za-z0-9.+\-]*)?\s*$")
_CONFIG_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")


def parse_version(text: str) -> Optional[TorchVersion]:
    """`2.1`, `2.1.0`, `1.13.1+cu117`, `2.1.*`, `2` -> (major, minor); None for anything else."""
    match = _VERSION.match(text)
    if match is None:
        return None
    minor = match.group(2)
    return TorchVersion(int(match.group(1)), int(minor) if minor and minor != "*" else 0)


def config_version(text: object) -> Optional[TorchVersion]:
    """The value of `target-torch` ("2.1" or "2.1.0"), or None when it is not one."""
    if not isinstance(text, str) or not _CONFIG_VERSION.match(text.strip()):
        return None
    return parse_version(text)


# `torch`, `torch[extra]`, then a specifier (maybe in parentheses), markers after `;`
_REQUIREMENT = re.compile(r"^\s*torch(?![\w.\-])\s*(\[[^\]]*\])?\s*(?P<spec>[^;#@]*?)\s*(;.*)?$", re.IGNORECASE)
_CLAUSE = re.compile(r"^\s*(?P<op>===|==|~=|>=|<=|!=|>|<|\^|~)?\s*(?P<version>[^\s,]+)\s*$")
_LOWER = ("===", "==", "~=", ">=", ">", "^", "~", None)  # operators that bound the range from below
_WHEEL = re.compile(r"(?:^|/)torch-(\d+\.\d+)(?:\.\d+)?(?:%2B|\+|-)[^/\s]*\.whl\b", re.IGNORECASE)


def lower_bound(requirement: str) -> Optional[TorchVersion]:
    """The lowest torch a requirement line allows, when it names torch with a lower bound:
    `torch>=1.8.0` -> 1.8, `torch (>=2.0, <3)` -> 2.0, `torch==2.1.*` -> 2.1, a wheel URL
    `.../torch-1.8.1%2Bcpu-...whl` -> 1.8; None otherwise (`torch`, `torch<3`, `torchvision`)."""
    line = requirement.split(" #", 1)[0].strip()
    wheel = _WHEEL.search(line)
    if wheel is not None:
        return parse_version(wheel.group(1))
    match = _REQUIREMENT.match(line)
    if match is None:
        return None
    spec = match.group("spec").strip().strip("()").strip()
    if not spec:
        return None
    bounds: List[TorchVersion] = []
    for clause in spec.split(","):
        parsed = _CLAUSE.match(clause.strip("() "))
        if parsed is None:
            return None
        version = parse_version(parsed.group("version"))
        if version is None:
            return None
        if parsed.group("op") in _LOWER:
            bounds.append(version)
    return max(bounds) if bounds else None


def _lowest(bounds: Iterable[Optional[TorchVersion]]) -> Optional[TorchVersion]:
    found = [bound for bound in bounds if bound is not None]
    return min(found) if found else None


# -- what one folder declares ------------------------------------------------------------------
def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _from_pyproject(text: str) -> List[Optional[TorchVersion]]:
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError, MemoryError):  # tomllib recurses per nested bracket
        return []
    found: List[Optional[TorchVersion]] = []
    project = data.get("project")
    dependencies = project.get("dependencies") if isinstance(project, dict) else None
    if isinstance(dependencies, list):
        found += [lower_bound(d) for d in dependencies if isinstance(d, str) and _names_torch(d)]
    tool = data.get("tool")
    poetry = tool.get("poetry") if isinstance(tool, dict) else None
    poetry_deps = poetry.get("dependencies") if isinstance(poetry, dict) else None
    if isinstance(poetry_deps, dict) and "torch" in poetry_deps:
        value = poetry_deps["torch"]
        spec = value.get("version") if isinstance(value, dict) else value
        found.append(lower_bound(f"torch{spec}") if isinstance(spec, str) and spec.strip() != "*" else None)
    return found


def _names_torch(requirement: str) -> bool:
    return _REQUIREMENT.match(requirement) is not None or _WHEEL.search(requirement) is not None


def _from_requirements(text: str) -> List[Optional[TorchVersion]]:
    return [lower_bound(line) for line in text.splitlines()
            if not line.lstrip().startswith(("#", "-")) and _names_torch(line.split(" #", 1)[0])]


def _literal_strings(node: Optional[ast.expr]) -> Optional[List[str]]:
    if isinstance(node, (ast.List, ast.Tuple)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    return None


def _from_setup_py(text: str) -> List[Optional[TorchVersion]]:
    """`install_requires=[...]` in any call (`setup(...)`), or a module-level name bound to a
    literal list and passed as it. Read, never run."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    assigned: Dict[str, Optional[ast.expr]] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name):  # bound twice: not a literal we can trust
                    assigned[target.id] = None if target.id in assigned else statement.value
    found: List[Optional[TorchVersion]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg != "install_requires":
                continue
            value = keyword.value
            if isinstance(value, ast.Name):
                value = assigned.get(value.id)  # type: ignore[assignment]
            strings = _literal_strings(value)
            if strings is not None:
                found += [lower_bound(s) for s in strings if _names_torch(s)]
    return found


def _from_setup_cfg(text: str) -> List[Optional[TorchVersion]]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
        requires = parser.get("options", "install_requires", fallback="")
    except (configparser.Error, UnicodeError):
        return []
    return [lower_bound(line) for line in requires.splitlines() if _names_torch(line)]


def _requirement_files(folder: Path) -> Iterator[Path]:
    try:
        yield from sorted(folder.glob("requirements*.txt"))
        nested = folder / "requirements"
        if os.path.isdir(nested):
            yield from sorted(nested.glob("*.txt"))
            yield from sorted(nested.glob("*/*.txt"))
    except OSError:
        return


_READERS = (("pyproject.toml", _from_pyproject), ("setup.py", _from_setup_py), ("setup.cfg", _from_setup_cfg))
_PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def declared(folder: Path) -> Optional[List[Optional[TorchVersion]]]:
    """The lower bounds of every torch requirement `folder` declares (None for one without a
    lower bound); None when it declares nothing about torch."""
    found: List[Optional[TorchVersion]] = []
    named = False
    for name, reader in _READERS:
        path = folder / name
        if os.path.isfile(path):
            text = _read(path)
            if text is not None and "torch" in text:
                bounds = reader(text)
                named = named or bool(bounds)
                found += bounds
    for path in _requirement_files(folder):
        text = _read(path) if os.path.isfile(path) else None
        if text is not None and "torch" in text:
            bounds = _from_requirements(text)
            named = named or bool(bounds)
            found += bounds
    return found if named else None


class DeclaredTargets:
    """The target each linted file gets from its project's declarations, cached per folder."""

    def __init__(self, root: Optional[Path] = None) -> None:
        self.root = Path(os.path.abspath(root)) if root is not None else None  # the configuration's folder
        self._by_folder: Dict[Path, Optional[TorchVersion]] = {}
        self._by_name: Dict[str, Optional[TorchVersion]] = {}  # the same, by the folder's name: no Path made per file

    def for_file(self, path: Path) -> Optional[TorchVersion]:
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in self._by_name:
            self._by_name[folder] = self._for_folder(Path(folder))
        return self._by_name[folder]

    def _for_folder(self, folder: Path) -> Optional[TorchVersion]:
        if folder in self._by_folder:
            return self._by_folder[folder]
        bounds = declared(folder)
        if bounds is not None:
            target = _lowest(bounds)
        elif folder == self.root or folder.parent == folder or any(
                os.path.exists(folder / marker) for marker in _PROJECT_MARKERS):
            target = None  # the project's root declares nothing about torch
        else:
            target = self._for_folder(folder.parent)
        self._by_folder[folder] = target
        return target
