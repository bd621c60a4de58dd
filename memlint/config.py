"""`[tool.memlint]` in the nearest pyproject.toml, and which rules a run selects.

Keys: select, ignore, extend-select (codes, prefixes such as "MEM2", or "ALL"),
per-file-ignores ({glob: [codes]}), exclude ([globs]), unsafe-fixes (bool), target-torch
("2.1": the oldest torch the project supports; memlint.torch_target), file-timeout (seconds of
CPU time one file may take; 0: no limit). Globs are
gitignore-style and relative to the pyproject.toml. An unknown key, a mistyped value or an
unknown code is a ConfigError: one line, naming the file.

Selection follows ruff: `select` replaces the default set, `extend-select` adds to it,
`ignore` removes from it. Opt-in rules are chosen only by their full code or by "ALL": a
prefix such as "MEM2" selects the default rules of that family.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Type

import pathspec

from memlint.rule import Rule
from memlint.torch_target import TorchVersion, config_version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on older Pythons only
    import tomli as tomllib

_SELECTOR = re.compile(r"^(ALL|MEM[0-9]{0,3})$")
_FULL_CODE = re.compile(r"^MEM[0-9]{3}$")
KEYS = ("select", "ignore", "extend-select", "per-file-ignores", "exclude", "unsafe-fixes", "target-torch",
        "file-timeout")
FILE_TIMEOUT = 5.0  # seconds of CPU time: the slowest real file takes well under one


class ConfigError(Exception):
    """Bad configuration or selector; the message is one line."""


def _check_selectors(selectors: Sequence[str], registry: Mapping[str, Type[Rule]], where: str) -> None:
    for selector in selectors:
        if not isinstance(selector, str) or not _SELECTOR.match(selector):
            raise ConfigError(f"{where}: {selector!r} is not a rule code, prefix or ALL")
        if _FULL_CODE.match(selector) and selector not in registry:
            raise ConfigError(f"{where}: unknown rule code {selector}")


def _selects(selector: str, rule: Type[Rule]) -> bool:
    if selector == "ALL" or selector == rule.CODE:
        return True
    return rule.DEFAULT_ON and rule.CODE.startswith(selector)


def _matches(selector: str, code: str) -> bool:
    return selector == "ALL" or code.startswith(selector)


@dataclass
class Selection:
    select: Optional[List[str]] = None  # None: the default rules
    extend_select: List[str] = field(default_factory=list)
    ignore: List[str] = field(default_factory=list)

    def rules(self, registry: Mapping[str, Type[Rule]], extra_ignore: Sequence[str] = ()) -> List[Type[Rule]]:
        for name, selectors in (("select", self.select or []), ("extend-select", self.extend_select),
                                ("ignore", [*self.ignore, *extra_ignore])):
            _check_selectors(selectors, registry, f"--{name}")
        chosen = []
        for rule in registry.values():
            if self.select is None:
                on = rule.DEFAULT_ON
            else:
                on = any(_selects(s, rule) for s in self.select)
            on = on or any(_selects(s, rule) for s in self.extend_select)
            if on and not any(_matches(s, rule.CODE) for s in (*self.ignore, *extra_ignore)):
                chosen.append(rule)
        return chosen


def location(path: Path) -> Path:
    """Where `path` itself stands, its folders' links resolved but not a link it may be: a
    link is matched by its own name, as git does, and a looping one does not raise."""
    absolute = os.path.abspath(path)
    return Path(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))


@dataclass
class Config:
    root: Path  # globs are relative to this folder
    source: Optional[Path] = None  # the pyproject.toml read, if any
    selection: Selection = field(default_factory=Selection)
    per_file_ignores: Dict[str, List[str]] = field(default_factory=dict)
    exclude: List[str] = field(default_factory=list)
    unsafe_fixes: bool = False
    target_torch: Optional[TorchVersion] = None  # None: read from the project's declared requirements
    file_timeout: float = FILE_TIMEOUT
    warnings: List[str] = field(default_factory=list)  # for the user, one line each

    def _relative(self, path: Path) -> Optional[str]:
        try:
            return location(path).relative_to(os.path.realpath(self.root)).as_posix()
        except ValueError:
            return None

    @cached_property
    def _exclude_spec(self) -> pathspec.PathSpec:
        return pathspec.PathSpec.from_lines("gitwildmatch", self.exclude)

    @cached_property
    def _ignore_specs(self) -> List[Tuple[pathspec.PathSpec, List[str]]]:
        return [(pathspec.PathSpec.from_lines("gitwildmatch", [glob]), codes)
                for glob, codes in self.per_file_ignores.items()]

    def is_excluded(self, path: Path) -> bool:
        relative = self._relative(path)
        return relative is not None and self._exclude_spec.match_file(relative)

    def ignored_codes(self, path: Path) -> List[str]:
        """Codes that per-file-ignores turn off for `path`."""
        relative = self._relative(path)
        if relative is None:
            return []
        return [code for spec, codes in self._ignore_specs if spec.match_file(relative) for code in codes]


def _string_list(table: Mapping[str, object], key: str, where: str) -> Optional[List[str]]:
    if key not in table:
        return None
    value = table[key]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return value


def parse_table(table: Mapping[str, object], root: Path, source: Optional[Path],
                registry: Mapping[str, Type[Rule]]) -> Config:
    where = str(source) if source else "[tool.memlint]"
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key `{unknown[0]}` in [tool.memlint] "
                          f"(known: {', '.join(KEYS)})")
    config = Config(root=root, source=source)
    config.selection = Selection(
        select=_string_list(table, "select", where),
        extend_select=_string_list(table, "extend-select", where) or [],
        ignore=_string_list(table, "ignore", where) or [],
    )
    config.exclude = _string_list(table, "exclude", where) or []
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict):
        raise ConfigError(f"{where}: `per-file-ignores` must be a table of glob = [codes]")
    for glob in per_file:
        config.per_file_ignores[glob] = _string_list(per_file, glob, f"{where}: per-file-ignores") or []
    unsafe = table.get("unsafe-fixes", False)
    if not isinstance(unsafe, bool):
        raise ConfigError(f"{where}: `unsafe-fixes` must be true or false")
    config.unsafe_fixes = unsafe
    if "target-torch" in table:
        config.target_torch = target_torch(table["target-torch"], f"{where}: `target-torch`")
    timeout = table.get("file-timeout", FILE_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout < 1e9:
        raise ConfigError(f"{where}: `file-timeout` must be a number of seconds (0: no limit)")
    config.file_timeout = float(timeout)
    for name, selectors in (("select", config.selection.select or []),
                            ("extend-select", config.selection.extend_select),
                            ("ignore", config.selection.ignore),
                            *((f"per-file-ignores {glob!r}", codes)
                              for glob, codes in config.per_file_ignores.items())):
        _check_selectors(selectors, registry, f"{where}: {name}")
    return config


def target_torch(value: object, where: str) -> TorchVersion:
    """A `target-torch` value ("2.1"), or a ConfigError naming `where`."""
    version = config_version(value)
    if version is None:
        raise ConfigError(f"{where} must be a torch version such as \"2.1\", not {value!r}")
    return version


# a [tool.memlint] table, one of its sub-tables, or a dotted `tool.memlint` key
_OURS = re.compile(r"^\s*(\[\s*tool\s*\.\s*memlint\b|tool\s*\.\s*memlint\s*[.=])", re.MULTILINE)


def find_pyproject(start: Path, warnings: List[str]) -> Optional[Path]:
    """The nearest pyproject.toml at or above `start` that has a [tool.memlint] table. One that
    is not valid TOML and shows no such table is not memlint's: a warning, and the search goes on."""
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if os.path.isfile(candidate):
            try:
                text = candidate.read_text(encoding="utf-8")
                data = tomllib.loads(text)
            except (OSError, UnicodeDecodeError) as error:
                raise ConfigError(f"{candidate}: cannot read: {error}") from None
            except tomllib.TOMLDecodeError as error:
                if _OURS.search(text):
                    raise ConfigError(f"{candidate}: cannot read: {error}") from None
                warnings.append(f"{candidate}: not valid TOML ({error}); it has no [tool.memlint], "
                                f"so it is skipped")
                continue
            if isinstance(data.get("tool"), dict) and "memlint" in data["tool"]:
                return candidate
    return None


def load(start: Path, registry: Mapping[str, Type[Rule]], explicit: Optional[Path] = None) -> Config:
    """The configuration for a run started in `start` (or read from `explicit`)."""
    warnings: List[str] = []
    path = explicit if explicit is not None else find_pyproject(start.resolve(), warnings)
    if path is None:
        return Config(root=start, warnings=warnings)
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would never finish reading
        raise ConfigError(f"{path}: cannot read: not a regular file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None
    table = data.get("tool", {}).get("memlint", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.memlint] must be a table")
    config = parse_table(table, path.parent, path, registry)
    config.warnings = warnings
    return config
