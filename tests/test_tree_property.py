"""A property of the walker and the writer over generated trees: files of every kind of
content, folders, hard links, symbolic links (to files, folders, FIFOs, out of the tree,
nowhere, in loops), FIFOs, odd `.gitignore`s and modes. `memlint --fix` on such a tree

- ends with findings, one-line errors or warnings, or a clean pass (exit 0, 1 or 2; never an
  exception, never a hang);
- loses nothing: every path is still there, of the same type, mode, owner and link target,
  hard links still share their inode, and no temporary file is left;
- writes nothing outside the tree, and inside it only the fix of a file's own content;
- fixes every file the walk reaches, or says on stderr why it could not.

memlint runs in this process (a subprocess per example would cost a second each), with an alarm
against hangs.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import signal
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlint.cli import main
from test_cli import BAD, CLEAN, FIXED, MOVED, with_opt_in

CONTENTS: Dict[str, bytes] = {
    "fixable": BAD.encode(),
    "unsafe-only": MOVED.encode(),
    "clean": CLEAN.encode(),
    "syntax-error": b"import torch\ndef broken(:\n",
    "binary": bytes(range(1, 256)),
    "latin-1": b"import torch\nx = '\xe9'\n",
    "empty": b"",
}
FIXES = {BAD.encode(): FIXED.encode()}  # what --fix makes of a content; the others stay as they are
FILE_MODES = (0o644, 0o600, 0o444, 0o755, 0o000)
FOLDER_MODES = (0o755, 0o700, 0o555, 0o000)
LINK_TARGETS = ("earlier", "outside-file", "outside-folder", "nowhere", "itself", "pair-loop", "parent")
GITIGNORES = ("fifo", "loop", "folder", "dangling", "ignore-all")

entry = st.one_of(
    st.tuples(st.just("file"), st.sampled_from(sorted(CONTENTS)), st.sampled_from(FILE_MODES)),
    st.tuples(st.just("folder"), st.sampled_from(FOLDER_MODES), st.booleans()),
    st.tuples(st.just("hardlink"), st.integers(0, 99)),
    st.tuples(st.just("symlink"), st.sampled_from(LINK_TARGETS), st.integers(0, 99)),
    st.tuples(st.just("fifo")),
    st.tuples(st.just("gitignore"), st.sampled_from(GITIGNORES)),
)
trees = st.lists(st.tuples(st.integers(0, 99), entry), min_size=1, max_size=14)


@dataclass(frozen=True)
class Seen:
    """One path as lstat and readlink show it, and a regular file's bytes."""

    kind: int
    mode: int
    owner: Tuple[int, int]
    inode: int
    target: Optional[str]
    data: Optional[bytes]


def _snapshot(top: Path) -> Dict[str, Seen]:
    seen = {}
    for root, folders, files in os.walk(top):
        for name in folders + files:
            path = os.path.join(root, name)
            info = os.lstat(path)
            target = os.readlink(path) if stat.S_ISLNK(info.st_mode) else None
            data = None
            if stat.S_ISREG(info.st_mode) and os.access(path, os.R_OK):  # else compared by the rest
                with open(path, "rb") as file:
                    data = file.read()
            seen[os.path.relpath(path, top)] = Seen(stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode),
                                                    (info.st_uid, info.st_gid), info.st_ino, target, data)
    return seen


def _build(top: Path, spec) -> Tuple[List[str], Dict[str, int]]:
    """Make the tree under top/tree (and top/outside); the folders' modes are set by the caller
    last. Returns the walk-reachable source files and the folders' modes."""
    outside = top / "outside"
    outside.mkdir()
    (outside / "elsewhere.py").write_bytes(CONTENTS["fixable"])
    tree = top / "tree"
    tree.mkdir()
    folders = ["tree"]
    entries: List[str] = []  # every path made, relative to top
    files: List[str] = []
    modes: Dict[str, int] = {}
    for number, (where, (kind, *args)) in enumerate(spec):
        parent = folders[where % len(folders)]
        name = f"{parent}/e{number}.py"
        path = top / name
        if kind == "file":
            content, mode = args
            path.write_bytes(CONTENTS[content])
            path.chmod(mode)
            files.append(name)
        elif kind == "folder":
            mode, py_suffix = args
            name = name if py_suffix else f"{parent}/d{number}"
            (top / name).mkdir()
            folders.append(name)
            modes[name] = mode
        elif kind == "hardlink" and files:
            os.link(top / files[args[0] % len(files)], path)
            files.append(name)
        elif kind == "symlink":
            target, pick = args
            link = {
                "earlier": os.path.relpath(top / entries[pick % len(entries)], path.parent) if entries else "x",
                "outside-file": str(outside / "elsewhere.py"),
                "outside-folder": str(outside),
                "nowhere": "nowhere.py",
                "itself": path.name,
                "pair-loop": f"{path.name}.twin",
                "parent": "..",
            }[target]
            path.symlink_to(link)
            if target == "pair-loop":
                Path(f"{path}.twin").symlink_to(path.name)
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "gitignore":
            ignore = top / parent / ".gitignore"
            if os.path.lexists(ignore):
                continue
            variant = args[0]
            if variant == "fifo":
                os.mkfifo(ignore)
            elif variant == "loop":
                ignore.symlink_to(".gitignore")
            elif variant == "folder":
                ignore.mkdir()
            elif variant == "dangling":
                ignore.symlink_to("nowhere")
            else:
                ignore.write_text("*.py\n")
            continue
        else:
            continue
        entries.append(name)
    ignored = {f for f in files if _under_ignore_all(top, f)}
    return [f for f in files if f not in ignored], modes


def _under_ignore_all(top: Path, name: str) -> bool:
    parts = Path(name).parts
    for depth in range(1, len(parts)):
        ignore = top.joinpath(*parts[:depth], ".gitignore")
        if ignore.is_file() and not ignore.is_symlink():
            return True
    return False


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang("memlint did not finish in 30 s")


def _run(top: Path, *args: str) -> Tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(30)
    try:
        os.chdir(top)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(with_opt_in(args))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(cwd)
    return code, out.getvalue(), err.getvalue()


def _remove(top: str) -> None:
    for root, folders, _ in os.walk(top):
        for name in folders:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o700)
    shutil.rmtree(top)


_MESSAGE = re.compile(r"^(memlint|\S.*?): (error|warning): \S.*$")
_FINDING = re.compile(r"^\S.*:\d+:\d+: MEM\d{3} ")


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trees)
def test_fix_on_any_tree_loses_nothing_and_writes_only_inside(spec):
    top = Path(tempfile.mkdtemp())
    try:
        reachable, modes = _build(top, spec)
        before = _snapshot(top)
        for folder in sorted(modes, key=len, reverse=True):  # innermost first: root could, others not
            os.chmod(top / folder, modes[folder])

        code, out, err = _run(top, "--fix", "--no-cache", "tree")  # the walk and the writes alone

        for folder in sorted(modes, key=len):  # outermost first, each opened to look inside again
            assert stat.S_IMODE(os.lstat(top / folder).st_mode) == modes[folder], folder
            os.chmod(top / folder, stat.S_IMODE(before[folder].mode))

        assert code in (0, 1, 2)
        messages = err.splitlines()
        assert all(_MESSAGE.match(line) for line in messages), messages
        assert (code == 2) == any(": error: " in line for line in messages)
        assert all(_FINDING.match(line) or line.startswith(("Found ", "All checks passed", "[*] "))
                   for line in out.splitlines()), out

        after = _snapshot(top)
        assert sorted(after) == sorted(before), "a path appeared or went missing"
        inodes: Dict[int, set] = {}
        for name, old in before.items():
            new = after[name]
            assert (new.kind, new.mode, new.owner, new.target) == (old.kind, old.mode, old.owner, old.target), name
            if name.startswith("outside"):
                assert new == old, f"{name} outside the tree changed"
            elif old.data is not None:
                assert new.data in (old.data, FIXES.get(old.data, old.data)), name
            if old.kind == stat.S_IFREG:
                inodes.setdefault(old.inode, set()).add(new.inode)
        assert all(len(new) == 1 for new in inodes.values()), "hard links were split"

        blamed = {os.path.realpath(top / line.split(": ")[0]) for line in messages}
        for name in reachable:
            if before[name].data in FIXES and after[name].data != FIXES[before[name].data]:
                real = Path(os.path.realpath(top / name))  # a link to it may have been read first
                assert any(str(path) in blamed for path in (real, *real.parents)), f"{name} silently not fixed"
    finally:
        _remove(str(top))
