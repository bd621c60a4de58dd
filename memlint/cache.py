"""The result cache: what a lint of a file found, kept until the file, the configuration or
memlint changes, so that a run over an unchanged tree parses nothing.

One entry per file and setting, in `.memlint_cache/` next to the configuration (or where
`--cache-dir` says). An entry's name is a digest of the file's real path, the effective
configuration (every field of it, so a setting added later is covered without more code), the
rules that apply to the file (per-file ignores included), the torch its fixes must run on
(configured, or declared by its project), and the Python, LibCST and memlint
that made it (memlint by its version and the digest of its own source); the entry holds a
digest of the file's text and the result for that text. Editing the file makes its entry
stale, and the next lint overwrites it, so the cache grows with the tree, not its history.

Entries are written atomically (a temporary file renamed over the entry), so runs at the same
time never read half an entry. An entry starts with the SHA-256 of the JSON that follows, and
is read only if it is a regular file of reasonable size (opened without blocking: a FIFO in
its place is not waited on), its checksum matches and its findings are findings of the rules
that apply to the file; anything else is a miss, never a result. The cache is an
optimisation: when its folder cannot be made or written, the run goes on without it.

memlint deletes only what it marked as its own: the folders of other memlint versions in a
cache root it made (tagged with its CACHEDIR.TAG), or that hold such a tag themselves (every
version folder does); `--cache-dir` may name a folder that holds folders of the same look.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import functools
import os
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Type

import libcst

from memlint import __version__
from memlint.analysis.summary import ModuleSummary
from memlint.config import Config
from memlint.findings import Finding, Fix, Range, Safety
from memlint.rule import Rule
from memlint.torch_target import TorchVersion

FOLDER_NAME = ".memlint_cache"
SUMMARIES = "summaries"  # the modules' summaries (memlint.analysis.summary), beside the results
_GITIGNORE = "# Made by memlint: its result cache, never committed.\n*\n"
_VERSION_FOLDER = re.compile(r"^[0-9][0-9A-Za-z.+!-]*-[0-9a-f]{16}$")  # what _prepare makes
_CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                 "# This file is a cache directory tag created by memlint.\n")
MAX_ENTRY_BYTES = 16 * 2**20  # far above any real entry; a larger file is not read


@functools.lru_cache(maxsize=None)
def _own_digest() -> str:
    """memlint's version and a digest of its own source: a changed rule invalidates the cache
    even when the version number stays (an editable install during development)."""
    digest = hashlib.sha256(__version__.encode())
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        try:
            digest.update(path.read_bytes())
        except OSError:
            pass
    return digest.hexdigest()[:16]


def settings_digest(config: Config) -> str:
    """Everything besides the file that decides what a lint finds."""
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "warnings"}
    text = json.dumps([sys.version, libcst_version(), _own_digest(), repr(fields)])
    return hashlib.sha256(text.encode()).hexdigest()


def libcst_version() -> str:
    try:
        from importlib.metadata import version

        return version("libcst")
    except Exception:  # an uninstalled copy: its path stands for its version
        return os.path.dirname(libcst.__file__)


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Entry:
    """The result of linting one text: findings (detached, no path), or the one-line error
    that text gets; each finding's fix diff without its file header, when computed; and the
    questions the lint asked of the project with their answers (memlint.analysis.project),
    which must be the same for the result to stand."""

    findings: List[Finding]
    error: Optional[str] = None
    diffs: Optional[List[Optional[str]]] = None
    asked: Dict[str, object] = field(default_factory=dict)


def _encode(finding: Finding) -> list:
    r = finding.range
    fix = finding.fix
    return [finding.code, finding.name, finding.message, r.line, r.column, r.end_line, r.end_column,
            finding.statement_line, None if fix is None else fix.safety.value,
            None if fix is None else fix.description]


def _decode(item: list, names: Dict[str, str]) -> Finding:
    """A finding of one of the rules `names` (code -> name) maps, else ValueError."""
    code, name, message, line, column, end_line, end_column, statement_line, safety, description = item
    if not isinstance(message, str) or not isinstance(code, str) or names.get(code) != name:
        raise ValueError("not a finding of these rules")
    for number in (line, column, end_line, end_column, statement_line):
        if type(number) is not int or number < 1:
            raise ValueError("not a finding")
    fix = None
    if safety is not None:
        if not isinstance(description, str):
            raise ValueError("not a fix")
        fix = Fix((), Safety(safety), description)
    return Finding(code, name, message, "", Range(line, column, end_line, end_column), statement_line, fix)


class Cache:
    """The entries of one run's settings, in `folder` (made on first write)."""

    def __init__(self, root: Path, settings: str) -> None:
        self.root = root  # the .memlint_cache folder
        self.folder = root / f"{__version__}-{_own_digest()}"
        self.settings = settings
        self._ready = False

    def _entry_path(self, path: Path, rules: Sequence[Type[Rule]], target: Optional[TorchVersion]) -> Path:
        name = "\0".join((self.settings, os.path.realpath(path), ",".join(r.CODE for r in rules), str(target)))
        return self.folder / (hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest() + ".json")

    def get(self, path: Path, rules: Sequence[Type[Rule]], target: Optional[TorchVersion],
            text: str) -> Optional[Entry]:
        """The entry for this text of this file, linted with `rules` for `target` (the torch its
        fixes must run on), or None (missing, stale or unreadable)."""
        try:
            data = _load(self._entry_path(path, rules, target))
            if data is None or data["text"] != text_digest(text):
                return None
            names = {rule.CODE: rule.NAME for rule in rules}
            findings = [_decode(item, names) for item in data["findings"]]
            error, diffs = data["error"], data["diffs"]
            if error is not None and not isinstance(error, str):
                return None
            if diffs is not None and (len(diffs) != len(findings)
                                      or not all(d is None or isinstance(d, str) for d in diffs)):
                return None
            asked = data["asked"]
            if not isinstance(asked, dict):
                return None
            return Entry(findings, error, diffs, asked)
        except (OSError, ValueError, KeyError, TypeError, RecursionError, MemoryError):  # missing or damaged
            return None

    def put(self, path: Path, rules: Sequence[Type[Rule]], target: Optional[TorchVersion], text: str,
            entry: Entry) -> None:
        """Store `entry` for this text of this file; quietly nothing when the folder cannot be written."""
        data = {"text": text_digest(text), "error": entry.error,
                "findings": [_encode(f) for f in entry.findings], "diffs": entry.diffs, "asked": entry.asked}
        self._write(self._entry_path(path, rules, target), data)

    def _summary_path(self, path: Path, module: Tuple[str, ...]) -> Path:
        name = "\0".join((os.path.realpath(path), *module))
        digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()
        return self.folder / SUMMARIES / f"{digest}.json"

    def get_summary(self, path: Path, module: Tuple[str, ...], text: str) -> Optional[ModuleSummary]:
        """The summary of this text of this file as module `module` (its root and name, and
        whatever else it depends on), or None."""
        try:
            data = _load(self._summary_path(path, module))
            if data is None or data["text"] != text_digest(text):
                return None
            return ModuleSummary.from_json(data["summary"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, MemoryError):  # a miss
            return None

    def put_summary(self, path: Path, module: Tuple[str, ...], text: str, summary: ModuleSummary) -> None:
        """Keep the summary of this text of this file; quietly nothing when the folder cannot be written."""
        self._write(self._summary_path(path, module), {"text": text_digest(text), "summary": summary.to_json()})

    def _write(self, entry_path: Path, data: dict) -> None:
        try:
            self._prepare()
            handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=".entry.", suffix=".tmp")
            try:
                with os.fdopen(handle, "wb") as file:
                    file.write(_seal(json.dumps(data, separators=(",", ":")).encode("utf-8")))
                os.replace(temporary, entry_path)
            except BaseException:
                if os.path.lexists(temporary):
                    os.unlink(temporary)
                raise
        except OSError:
            pass

    def _prepare(self) -> None:
        """Make the folder; a cache root memlint makes is tagged so that git (and backup tools)
        pass over it, and so is each version folder, which marks it as memlint's own. Folders
        of other memlint versions are dropped; nothing else in the root is touched
        (`--cache-dir` may name a folder that holds other things)."""
        if self._ready:
            return
        if not self.folder.is_dir():
            try:
                self.root.mkdir(parents=True)
            except FileExistsError:
                pass
            else:
                for name, text in ((".gitignore", _GITIGNORE), ("CACHEDIR.TAG", _CACHEDIR_TAG)):
                    _write_atomically(self.root / name, text)
            whole = _tagged(self.root)  # a root memlint made: its version folders are memlint's too
            for old in self.root.iterdir():
                if old.name != self.folder.name and _VERSION_FOLDER.match(old.name) and (whole or _tagged(old)):
                    shutil.rmtree(old, ignore_errors=True)
            self.folder.mkdir(exist_ok=True)
        if not _tagged(self.folder):
            _write_atomically(self.folder / "CACHEDIR.TAG", _CACHEDIR_TAG)
        (self.folder / SUMMARIES).mkdir(exist_ok=True)
        self._ready = True


def _tagged(folder: Path) -> bool:
    """The folder holds the CACHEDIR.TAG memlint writes: memlint made it (not a link to one)."""
    try:
        return not folder.is_symlink() and _read_entry(folder / "CACHEDIR.TAG") == _CACHEDIR_TAG.encode()
    except OSError:
        return False


def _load(path: Path):
    """The JSON of the entry at `path`, or None when its checksum does not match (OSError,
    ValueError, RecursionError when it cannot be read or parsed)."""
    payload = _unseal(_read_entry(path))
    return None if payload is None else json.loads(payload)


def _seal(payload: bytes) -> bytes:
    return hashlib.sha256(payload).hexdigest().encode("ascii") + b"\n" + payload


def _unseal(data: bytes) -> Optional[bytes]:
    """The JSON of an entry whose checksum matches, else None."""
    digest, _, payload = data.partition(b"\n")
    return payload if digest == hashlib.sha256(payload).hexdigest().encode("ascii") else None


def _read_entry(path: Path) -> bytes:
    """The bytes of a regular file no larger than MAX_ENTRY_BYTES, else OSError. Opened without
    blocking and without following a link, and checked on the open descriptor."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    with os.fdopen(os.open(path, flags), "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES:
            raise OSError(f"{path}: not an entry")
        return file.read(MAX_ENTRY_BYTES + 1)


def _write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(text)
    os.replace(temporary, path)


def open_cache(config: Config, folder: Optional[Path] = None) -> Cache:
    """The cache for a run under `config`: in `folder`, else `.memlint_cache` next to the
    configuration file (the folder the run started in when there is none)."""
    if folder is None:
        folder = (config.source.parent if config.source is not None else config.root) / FOLDER_NAME
    return Cache(Path(os.path.abspath(folder)), settings_digest(config))
