"""memlint's configuration: where it is found, what it says, and which rules a run selects.

Each file uses the closest configuration above it, as ruff finds it: in each folder from the
file's own upwards, `.memlint.toml`, then `memlint.toml` (keys at the top level), then a
`pyproject.toml` that has a [tool.memlint] table (one without is not memlint's, and the search
goes on); a file with none above it uses the one found from the folder memlint runs in, else
the defaults. `--config FILE` names one configuration for every file. The command line's
options apply on top of whichever configuration a file gets.

Keys: select, ignore, extend-select (codes, prefixes such as "MEM2", or "ALL"; any case),
per-file-ignores ({glob: [codes]}), exclude ([globs]), unsafe-fixes (bool), target-torch
("2.1": the oldest torch the project supports; memlint.torch_target), file-timeout (seconds of
CPU time one file may take; 0: no limit). Globs are gitignore-style and relative to the
configuration file's folder. An unknown key, a mistyped value or an unknown code is a
ConfigError: one line, naming the file.

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
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

from memlint.rule import Rule
from memlint.torch_target import DeclaredTargets, TorchVersion, config_version

if TYPE_CHECKING:  # imported when `exclude` or `per-file-ignores` is first matched: most runs set neither
    import pathspec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on older Pythons only
    import tomli as tomllib

_SELECTOR = re.compile(r"^(ALL|MEM[0-9]{0,3})$")
_FULL_CODE = re.compile(r"^MEM[0-9]{3}$")
KEYS = ("select", "ignore", "extend-select", "per-file-ignores", "exclude", "unsafe-fixes", "target-torch",
        "file-timeout")
FILE_TIMEOUT = 5.0  # seconds of CPU time: the slowest real file takes well under one
CONFIG_NAMES = (".memlint.toml", "memlint.toml", "pyproject.toml")  # in one folder, the first wins


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


# Folders resolved in this run (their links followed), by absolute path: resolving one costs a
# system call per part of the path, and a run asks about the same few folders for every file.
_REAL_FOLDERS: Dict[str, str] = {}
# Where each path named in this run stands (`location`), by the path as named: a run asks it of
# every file several times (its configuration, excludes, per-file ignores, .gitignore, cache key).
_LOCATIONS: Dict[str, str] = {}


def real_folder(folder: str) -> str:
    """The folder `folder` (absolute) stands for, its links resolved: once per run."""
    found = _REAL_FOLDERS.get(folder)
    if found is None:
        found = _REAL_FOLDERS[folder] = os.path.realpath(folder)
    return found


def forget_folders() -> None:
    """Resolve folders afresh from now on (a run starts: links may have changed since the last)."""
    _REAL_FOLDERS.clear()
    _LOCATIONS.clear()


def location(path: Union[str, Path]) -> str:
    """Where `path` itself stands (an absolute path), its folders' links resolved but not a
    link it may be: a link is matched by its own name, as git does, and a looping one does not
    raise. Once per run."""
    name = os.fspath(path)
    found = _LOCATIONS.get(name)
    if found is None:
        absolute = os.path.abspath(name)
        found = _LOCATIONS[name] = os.path.join(real_folder(os.path.dirname(absolute)), os.path.basename(absolute))
    return found


def relative_to(place: str, folder: str) -> Optional[str]:
    """`place` (a location) relative to `folder` (absolute, resolved), with forward slashes,
    as `Path.relative_to(...).as_posix()` gives it; None when it is not inside."""
    if os.path.normcase(place) == os.path.normcase(folder):
        return "."
    prefix = folder if folder.endswith(os.sep) else folder + os.sep
    if not os.path.normcase(place).startswith(os.path.normcase(prefix)):
        return None
    return place[len(prefix):].replace(os.sep, "/")


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
        root = self.__dict__.get("_absolute_root")  # not a field: the cache key reads the fields
        if root is None:
            root = self.__dict__["_absolute_root"] = os.path.abspath(self.root)
        return relative_to(location(path), real_folder(root))

    @cached_property
    def _exclude_spec(self) -> pathspec.PathSpec:
        import pathspec

        return pathspec.GitIgnoreSpec.from_lines(self.exclude)

    @cached_property
    def _ignore_specs(self) -> List[Tuple[pathspec.PathSpec, List[str]]]:
        import pathspec

        return [(pathspec.GitIgnoreSpec.from_lines([glob]), codes)
                for glob, codes in self.per_file_ignores.items()]

    def is_excluded(self, path: Path) -> bool:
        if not self.exclude:
            return False
        relative = self._relative(path)
        return relative is not None and self._exclude_spec.match_file(relative)

    def ignored_codes(self, path: Path) -> List[str]:
        """Codes that per-file-ignores turn off for `path`."""
        if not self.per_file_ignores:
            return []
        relative = self._relative(path)
        if relative is None:
            return []
        return [code for spec, codes in self._ignore_specs if spec.match_file(relative) for code in codes]

    def for_file(self, path: Path) -> "Config":
        """One configuration named for the whole run serves every file (as Configurations does)."""
        return self

    def rules_for(self, path: Path, registry: Mapping[str, Type[Rule]]) -> List[Type[Rule]]:
        """The rules that lint `path`: the selection less its per-file ignores."""
        ignored = self.ignored_codes(path)
        if ignored:
            return self.selection.rules(registry, ignored)
        memo = self.__dict__.setdefault("_selected", {})  # not a field: the cache key reads the fields
        if id(registry) not in memo:
            memo[id(registry)] = (registry, self.selection.rules(registry))
        return memo[id(registry)][1]

    def target_for(self, path: Path) -> Optional[TorchVersion]:
        """The oldest torch the fixes of `path` must run on: `target-torch`, else what the
        project around the file declares (memlint.torch_target), searched up to this folder."""
        if self.target_torch is not None:
            return self.target_torch
        declared = self.__dict__.get("_declared")
        if declared is None:
            declared = self.__dict__["_declared"] = DeclaredTargets(self.root if self.source is not None else None)
        return declared.for_file(path)


def _string_list(table: Mapping[str, object], key: str, where: str) -> Optional[List[str]]:
    if key not in table:
        return None
    value = table[key]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return value


def _codes(table: Mapping[str, object], key: str, where: str) -> Optional[List[str]]:
    """A list of rule selectors, in capitals whatever case the file writes (as on the command line)."""
    value = _string_list(table, key, where)
    return None if value is None else [code.strip().upper() for code in value]


def parse_table(table: Mapping[str, object], root: Path, source: Optional[Path],
                registry: Mapping[str, Type[Rule]]) -> Config:
    where = str(source) if source else "[tool.memlint]"
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key `{unknown[0]}` (known: {', '.join(KEYS)})")
    config = Config(root=root, source=source)
    config.selection = Selection(
        select=_codes(table, "select", where),
        extend_select=_codes(table, "extend-select", where) or [],
        ignore=_codes(table, "ignore", where) or [],
    )
    config.exclude = _string_list(table, "exclude", where) or []
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict):
        raise ConfigError(f"{where}: `per-file-ignores` must be a table of glob = [codes]")
    for glob in per_file:
        config.per_file_ignores[glob] = _codes(per_file, glob, f"{where}: per-file-ignores") or []
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


class _NotToml(Exception):
    """A file that does not read as TOML; the message says why, in one line."""


def _toml(text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise _NotToml(str(error)) from None
    except (RecursionError, MemoryError):  # tomllib recurses once per nested bracket
        raise _NotToml("nested too deep") from None


def _table(path: Path, warnings: List[str], named: bool = False) -> Optional[Mapping[str, object]]:
    """memlint's table in a configuration file: the top level of a memlint.toml, [tool.memlint]
    of a pyproject.toml, or None for a pyproject.toml that is not memlint's (one that is not
    TOML and shows no such table gets a warning). `named`: given with --config, so a
    pyproject.toml without the table is an error, not someone else's file."""
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would never finish reading
        raise ConfigError(f"{path}: cannot read: not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None
    pyproject = path.name == "pyproject.toml"
    try:
        data = _toml(text)
    except _NotToml as error:
        if pyproject and not named and not _OURS.search(text):
            warnings.append(f"{path}: not valid TOML ({error}); it has no [tool.memlint], so it is skipped")
            return None
        raise ConfigError(f"{path}: cannot read: {error}") from None
    if not pyproject:
        return data
    tool = data.get("tool")
    if not isinstance(tool, dict) or "memlint" not in tool:
        if named:
            raise ConfigError(f"{path}: no [tool.memlint] table")
        return None
    if not isinstance(tool["memlint"], dict):
        raise ConfigError(f"{path}: [tool.memlint] must be a table")
    return tool["memlint"]


@dataclass
class Overrides:
    """The command line's settings, applied on top of every file's configuration."""

    select: Optional[List[str]] = None
    extend_select: List[str] = field(default_factory=list)
    ignore: List[str] = field(default_factory=list)
    unsafe_fixes: Optional[bool] = None
    target_torch: Optional[TorchVersion] = None
    file_timeout: Optional[float] = None

    def apply(self, config: Config) -> Config:
        if self.select is not None:
            config.selection.select = list(self.select)
        config.selection.extend_select += self.extend_select
        config.selection.ignore += self.ignore
        if self.unsafe_fixes is not None:
            config.unsafe_fixes = self.unsafe_fixes
        if self.target_torch is not None:
            config.target_torch = self.target_torch
        if self.file_timeout is not None:
            config.file_timeout = self.file_timeout
        return config

    def describe(self) -> List[str]:
        """The options as they were written, for --show-settings."""
        words = []
        if self.select is not None:
            words.append(f"--select {','.join(self.select)}")
        words += [f"--extend-select {','.join(self.extend_select)}"] if self.extend_select else []
        words += [f"--ignore {','.join(self.ignore)}"] if self.ignore else []
        if self.unsafe_fixes is not None:
            words.append("--unsafe-fixes" if self.unsafe_fixes else "--no-unsafe-fixes")
        words += [f"--target-torch {self.target_torch}"] if self.target_torch is not None else []
        words += [f"--file-timeout {self.file_timeout:g}"] if self.file_timeout is not None else []
        return words


class Configurations:
    """The configuration of every file of a run. `root` is the one found from the folder the
    run starts in (or named with --config): files with none above them use it, and it holds
    the settings of the run as a whole (unsafe-fixes, file-timeout, where the cache lives).
    Each file is found once per folder; a configuration is read once."""

    def __init__(self, start: Path, registry: Mapping[str, Type[Rule]], explicit: Optional[Path] = None,
                 overrides: Optional[Overrides] = None) -> None:
        forget_folders()  # read from the disk as it is now (the editor's server reads afresh per lint)
        self._registry = registry
        self._overrides = overrides or Overrides()
        self.warnings: List[str] = []  # for the user, one line each
        self._by_folder: Dict[str, Optional[Config]] = {}
        self._named = explicit is not None
        if explicit is not None:
            table = _table(explicit, self.warnings, named=True)
            self.root = self._config(explicit, table or {})
        else:
            self.root = self._closest(str(start.resolve())) or self._overrides.apply(Config(root=start))
        self.root.warnings = self.warnings

    @property
    def overrides(self) -> Overrides:
        return self._overrides

    def _config(self, path: Path, table: Mapping[str, object]) -> Config:
        return self._overrides.apply(parse_table(table, path.parent, path, self._registry))

    def _closest(self, folder: str) -> Optional[Config]:
        """The configuration in `folder` (absolute) or the nearest folder above it; None when
        none has one."""
        if folder in self._by_folder:
            return self._by_folder[folder]
        found = None
        for name in CONFIG_NAMES:
            candidate = Path(folder, name)
            if os.path.isfile(candidate):
                table = _table(candidate, self.warnings)
                if table is not None:
                    found = self._config(candidate, table)
                    break
        parent = os.path.dirname(folder)
        if found is None and parent != folder:
            found = self._closest(parent)
        self._by_folder[folder] = found
        return found

    def for_file(self, path: Path) -> Config:
        """The configuration that applies to `path` (a file, or a folder about to be walked)."""
        if self._named:
            return self.root
        return self._closest(os.path.dirname(location(path))) or self.root

    def is_excluded(self, path: Path) -> bool:
        return self.for_file(path).is_excluded(path)


def load(start: Path, registry: Mapping[str, Type[Rule]], explicit: Optional[Path] = None) -> Config:
    """The configuration for a run started in `start` (or read from `explicit`): the closest one
    at or above it, else the defaults."""
    return Configurations(start, registry, explicit).root


AnyConfig = Union[Config, Configurations]  # what a run takes: one configuration, or one per file
