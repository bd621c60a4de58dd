"""The result cache: what a lint of a file found, kept until the file, the configuration or
memlint changes, so that a run over an unchanged tree parses nothing.

The cache lives in `.memlint_cache/` next to the configuration (or where `--cache-dir` says),
in a folder named by the memlint that made it (its version and the digest of its own source).
There, each configuration has two bundles: one file of results and one of module summaries,
each read whole when a run first needs it and written whole when the run has added to it. A
bundle is named by a digest of the effective configuration (every field of it, so a setting
added later is covered without more code) and the Python, LibCST and memlint that made it.
Within a bundle, a record's key is a digest of the file as the run names it (its display path,
which decides whether it is a test module) and where it stands, the rules that apply to it
(per-file ignores included) and the torch its fixes must run on (configured, or declared by
its project); the record holds a digest of the file's text and the result for that text.
Editing the file makes its record stale, and the next run replaces it, so a bundle grows with
the files linted, not with their edits. One file per bundle, not one per record: a warm run over thousands
of files reads two files instead of thousands, and one that needs no module's summary (every
result stands, below) reads one.

A result records the questions its lint asked of the project and their answers
(memlint.analysis.project), and the project they were answered by (memlint.run's project key:
every module's place, name, settings and text). A run over the same project reuses the result
outright, since the same summaries give the same answers; in any other project the questions
are asked again, and the result stands only if every answer is the same.

A bundle is written atomically (a temporary file renamed over it), so runs at the same time
never read half of one; a run that finds the bundle rewritten since it read it adds its records
to the newer one, and when two runs write at the same moment, the records of one may be lost:
a miss for the next run, never a wrong result. A bundle starts with the SHA-256 of the JSON
that follows, and is read only if it is a regular file of reasonable size (opened without
blocking: a FIFO in its place is not waited on) and its checksum matches; a record is used only
if it is well formed and its findings are findings of the rules that apply to the file.
Anything else is a miss, never a result: a damaged bundle is an empty one, and the run that
finds it writes a good one. The cache is an optimisation: when its folder cannot be made or
written, the run goes on without it.

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
from memlint.config import Config, location
from memlint.findings import Finding, Fix, Range, Safety
from memlint.rule import Rule
from memlint.torch_target import TorchVersion

FOLDER_NAME = ".memlint_cache"
_GITIGNORE = "# Made by memlint: its result cache, never committed.\n*\n"
_VERSION_FOLDER = re.compile(r"^[0-9][0-9A-Za-z.+!-]*-[0-9a-f]{16}$")  # what _prepare makes
_CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                 "# This file is a cache directory tag created by memlint.\n")
# Far above any real bundle (a summary takes some 2.4 KB, a result 0.25 KB: a 100,000-file
# tree's summaries take 240 MB); a larger file is not read.
MAX_BUNDLE_BYTES = 2**30


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


def file_key(display: str, path: Path, rules: Sequence[Type[Rule]], target: Optional[TorchVersion]) -> str:
    """What a file's result depends on besides its text and the run's settings: its name as the
    run shows it (a file under `tests/` is a test module), where it stands (its folders' links
    resolved), the rules that lint it and the torch its fixes must run on."""
    name = "\0".join((display, str(location(path)), ",".join(r.CODE for r in rules), str(target)))
    return hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class Entry:
    """The result of linting one text: findings (detached, no path; a notebook's located in
    their cells), or the one-line error that text gets; each finding's fix diff without its
    file header, when computed; the questions the lint asked of the project with their
    answers (memlint.analysis.project), which must be the same for the result to stand; the
    key of the project that gave those answers (memlint.run), in which they need not be asked
    again; and, for a notebook, whether the lint read it as one (its outcome places findings
    in the file)."""

    findings: List[Finding]
    error: Optional[str] = None
    diffs: Optional[List[Optional[str]]] = None
    asked: Dict[str, object] = field(default_factory=dict)
    project: str = ""
    notebook: bool = False


def _encode(finding: Finding) -> list:
    r = finding.range
    fix = finding.fix
    return [finding.code, finding.name, finding.message, r.line, r.column, r.end_line, r.end_column,
            finding.statement_line, None if fix is None else fix.safety.value,
            None if fix is None else fix.description, finding.cell]


def _decode(item: list, names: Dict[str, str]) -> Finding:
    """A finding of one of the rules `names` (code -> name) maps, else ValueError."""
    code, name, message, line, column, end_line, end_column, statement_line, safety, description, cell = item
    if not isinstance(message, str) or not isinstance(code, str) or names.get(code) != name:
        raise ValueError("not a finding of these rules")
    for number in (line, column, end_line, end_column, statement_line, 1 if cell is None else cell):
        if type(number) is not int or number < 1:
            raise ValueError("not a finding")
    fix = None
    if safety is not None:
        if not isinstance(description, str):
            raise ValueError("not a fix")
        fix = Fix((), Safety(safety), description)
    return Finding(code, name, message, "", Range(line, column, end_line, end_column), statement_line, fix, cell)


class Cache:
    """The results and summaries of one run's settings, in `folder` (made on first write). A
    bundle is read when first asked of, and what the run adds is written by `save`."""

    def __init__(self, root: Path, settings: str) -> None:
        self.root = root  # the .memlint_cache folder
        self.folder = root / f"{__version__}-{_own_digest()}"
        self.settings = settings
        self._ready = False
        self._results = _Bundle(self.folder / f"results-{settings[:32]}.json")
        self._summaries = _Bundle(self.folder / f"summaries-{settings[:32]}.json")

    def get(self, key: str, text: str, rules: Sequence[Type[Rule]]) -> Optional[Entry]:
        """The entry of the file `key` (file_key) for the text of digest `text`, linted with
        `rules`, or None (missing, stale or damaged)."""
        try:
            data = self._results.get(key)
            if data is None or data["text"] != text:
                return None
            names = {rule.CODE: rule.NAME for rule in rules}
            findings = [_decode(item, names) for item in data["findings"]]
            error, diffs, asked, project, notebook = (data["error"], data["diffs"], data["asked"], data["project"],
                                                      data["notebook"])
            if error is not None and not isinstance(error, str):
                return None
            if diffs is not None and (len(diffs) != len(findings)
                                      or not all(d is None or isinstance(d, str) for d in diffs)):
                return None
            if not isinstance(asked, dict) or not isinstance(project, str) or not isinstance(notebook, bool):
                return None
            return Entry(findings, error, diffs, asked, project, notebook)
        except (ValueError, KeyError, TypeError, RecursionError, MemoryError):  # damaged
            return None

    def put(self, key: str, text: str, entry: Entry) -> None:
        """Keep `entry` for the file `key`'s text of digest `text` (written by `save`)."""
        self._results.put(key, {"text": text, "error": entry.error, "findings": [_encode(f) for f in entry.findings],
                                "diffs": entry.diffs, "asked": entry.asked, "project": entry.project,
                                "notebook": entry.notebook})

    @staticmethod
    def _summary_key(key: str, module: Tuple[str, ...]) -> str:
        return hashlib.sha256("\0".join((key, *module)).encode("utf-8", "surrogateescape")).hexdigest()

    def get_summary(self, key: str, module: Tuple[str, ...], text: str) -> Optional[ModuleSummary]:
        """The summary of the file `key`'s text of digest `text` as module `module` (its root
        and name, and whatever else it depends on), or None."""
        try:
            data = self._summaries.get(self._summary_key(key, module))
            if data is None or data["text"] != text:
                return None
            return ModuleSummary.from_json(data["summary"])
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError, MemoryError):  # a miss
            return None

    def put_summary(self, key: str, module: Tuple[str, ...], text: str, summary: ModuleSummary) -> None:
        """Keep the summary of the file `key`'s text of digest `text` (written by `save`)."""
        self._summaries.put(self._summary_key(key, module), {"text": text, "summary": summary.to_json()})

    def save(self) -> None:
        """Write what this run added; quietly nothing when the folder cannot be written."""
        for bundle in (self._results, self._summaries):
            if bundle.changed:
                try:
                    self._prepare()
                    bundle.save()
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
                    _write_atomically(self.root / name, text.encode())
            whole = _tagged(self.root)  # a root memlint made: its version folders are memlint's too
            for old in self.root.iterdir():
                if old.name != self.folder.name and _VERSION_FOLDER.match(old.name) and (whole or _tagged(old)):
                    shutil.rmtree(old, ignore_errors=True)
            self.folder.mkdir(exist_ok=True)
        if not _tagged(self.folder):
            _write_atomically(self.folder / "CACHEDIR.TAG", _CACHEDIR_TAG.encode())
        self._ready = True


_Identity = Optional[Tuple[int, int, int, int]]  # a file's device, inode, size and modification time


class _Bundle:
    """Records (JSON) by key, kept in one sealed file: read whole on the first `get`, and
    written whole by `save` with the records `put` since."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._records: Optional[Dict[str, object]] = None
        self._identity: _Identity = None  # of the file the records were read from
        self._new: Dict[str, object] = {}

    @property
    def changed(self) -> bool:
        return bool(self._new)

    def get(self, key: str) -> Optional[object]:
        if key in self._new:
            return self._new[key]
        if self._records is None:
            self._records, self._identity = _read_bundle(self.path)
        return self._records.get(key)

    def put(self, key: str, record: object) -> None:
        self._new[key] = record

    def save(self) -> None:
        """Write the bundle with the records put since it was read; when another run rewrote
        it meanwhile, with that run's records under these."""
        records, identity = self._records, self._identity
        if records is None or identity != _identity(self.path):
            records, identity = _read_bundle(self.path)
        records = {**records, **self._new}
        payload = json.dumps(records, separators=(",", ":")).encode("utf-8", "surrogatepass")
        _write_atomically(self.path, _seal(payload))
        self._records, self._identity, self._new = records, _identity(self.path), {}


def _identity(path: Path) -> _Identity:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def _read_bundle(path: Path) -> Tuple[Dict[str, object], _Identity]:
    """The records of the bundle at `path` and the identity of the file they were read from;
    none when it is missing or damaged."""
    try:
        data, info = _read_regular(path, MAX_BUNDLE_BYTES)
        payload = _unseal(data)
        records = None if payload is None else json.loads(payload)
    except (OSError, ValueError, RecursionError, MemoryError):
        return {}, None
    identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    return (records, identity) if isinstance(records, dict) else ({}, identity)


def _tagged(folder: Path) -> bool:
    """The folder holds the CACHEDIR.TAG memlint writes: memlint made it (not a link to one)."""
    try:
        return not folder.is_symlink() and _read_regular(folder / "CACHEDIR.TAG", 4096)[0] == _CACHEDIR_TAG.encode()
    except OSError:
        return False


def _seal(payload: bytes) -> bytes:
    return hashlib.sha256(payload).hexdigest().encode("ascii") + b"\n" + payload


def _unseal(data: bytes) -> Optional[bytes]:
    """The JSON of a bundle whose checksum matches, else None."""
    digest, _, payload = data.partition(b"\n")
    return payload if digest == hashlib.sha256(payload).hexdigest().encode("ascii") else None


def _read_regular(path: Path, limit: int) -> Tuple[bytes, os.stat_result]:
    """The bytes of a regular file no larger than `limit`, and its status, else OSError. Opened
    without blocking and without following a link, and checked on the open descriptor."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    with os.fdopen(os.open(path, flags), "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            raise OSError(f"{path}: not a bundle")
        return file.read(limit + 1), info


def _write_atomically(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise


def open_cache(config: Config, folder: Optional[Path] = None) -> Cache:
    """The cache for a run under `config`: in `folder`, else `.memlint_cache` next to the
    configuration file (the folder the run started in when there is none)."""
    if folder is None:
        folder = (config.source.parent if config.source is not None else config.root) / FOLDER_NAME
    return Cache(Path(os.path.abspath(folder)), settings_digest(config))
