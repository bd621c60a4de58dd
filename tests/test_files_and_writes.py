"""Awkward trees through the command line: links, FIFOs, unreadable folders, files the user
may not write. Every run ends in findings, one-line errors or a clean pass, and a fix lands in
the file itself with its owner, group, mode and hard links kept.

The cases that need an unprivileged user run memlint as `nobody` (through setpriv) when the
tests run as root, and as the current user otherwise.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, List

import pytest

from test_cli import BAD, FIXED, REPO, memlint, with_opt_in, write


def test_looping_and_broken_links_in_a_folder_are_skipped_with_a_warning(tmp_path):
    write(tmp_path, "d/train.py", BAD)
    (tmp_path / "d/x.py").symlink_to("x.py")  # points at itself
    (tmp_path / "d/gone.py").symlink_to("nowhere.py")
    result = memlint(tmp_path, "d")
    assert result.returncode == 1  # the findings of d/train.py; the links fail nothing
    assert "d/train.py:4:5: MEM101" in result.stdout
    assert sorted(result.stderr.splitlines()) == [
        "d/gone.py: warning: broken symbolic link (to nowhere.py), skipped",
        "d/x.py: warning: symbolic link loop, skipped",
    ]


def test_a_looping_link_named_on_the_command_line_is_an_error(tmp_path):
    (tmp_path / "x.py").symlink_to("x.py")
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "x.py", "train.py")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["x.py: error: symbolic link loop"]
    assert "train.py:4:5: MEM101" in result.stdout


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / "f.py")
    os.mkfifo(tmp_path / "pkg_fifo.py")
    write(tmp_path, "train.py", BAD)
    # memlint() gives up after 120 s: reading a FIFO blocks until a writer comes, here never
    result = memlint(tmp_path, "f.py", "train.py")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["f.py: error: is a FIFO, not a source file"]
    assert "train.py:4:5: MEM101" in result.stdout
    walked = memlint(tmp_path, ".")  # found by walking, a FIFO is no source: not even opened
    assert walked.returncode == 1 and walked.stderr == ""
    config = memlint(tmp_path, "--config", "f.py", "train.py")
    assert config.returncode == 2
    assert config.stderr.splitlines() == ["memlint: error: f.py: cannot read: not a regular file"]


def test_fix_through_a_symlink_writes_the_target_and_keeps_the_link(tmp_path):
    target = write(tmp_path, "src/train.py", BAD)
    link = tmp_path / "train.py"
    link.symlink_to("src/train.py")
    result = memlint(tmp_path, "--fix", "train.py")
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == "src/train.py"
    assert target.read_text() == FIXED
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".memlint_cache") == ["src", "train.py"]


def test_fix_keeps_owner_group_mode_and_hard_links(tmp_path):
    path = write(tmp_path, "train.py", BAD)
    twin = tmp_path / "twin.py"
    os.link(path, twin)
    single = write(tmp_path, "single.py", BAD)
    if os.geteuid() == 0:  # root fixing another user's files must leave them that user's
        nobody = pwd.getpwnam("nobody")
        for file in (path, single):
            os.chown(file, nobody.pw_uid, nobody.pw_gid)
    path.chmod(0o604)
    single.chmod(0o640)
    before = {p: os.stat(p) for p in (path, single)}
    result = memlint(tmp_path, "--fix", "train.py", "single.py")
    assert result.returncode == 0, result.stderr
    for file, old in before.items():
        new = os.stat(file)
        assert (new.st_uid, new.st_gid, stat.S_IMODE(new.st_mode)) == (
            old.st_uid, old.st_gid, stat.S_IMODE(old.st_mode))
        assert file.read_text() == FIXED
    assert os.stat(twin).st_ino == os.stat(path).st_ino and os.stat(path).st_nlink == 2
    assert twin.read_text() == FIXED


def test_a_file_name_in_no_encoding_is_printed_as_its_bytes(tmp_path):
    name = b"caf\xe9.py"  # Latin-1 bytes, not UTF-8: such a name can be made, and must be reported
    with open(os.path.join(os.fsencode(tmp_path), name), "wb") as file:
        file.write(BAD.encode())
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "utf-8"}  # strict, as in many CIs
    result = subprocess.run([sys.executable, "-m", "memlint", *with_opt_in(["."])], cwd=tmp_path, env=env,
                            capture_output=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(name + b":4:5: MEM101")


def test_a_binary_file_without_nul_bytes_is_not_text(tmp_path):
    (tmp_path / "blob.py").write_bytes(bytes(range(1, 256)) * 8)
    (tmp_path / "latin.py").write_bytes(b"import torch\nname = 'caf\xe9'\n")
    (tmp_path / "cookie.py").write_bytes(b"# -*- coding: no-such-codec -*-\nimport torch\n")
    result = memlint(tmp_path, "blob.py", "latin.py", "cookie.py")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "blob.py: error: binary file (not text), not Python source",
        "latin.py: error: not valid utf-8 text",
        "cookie.py: error: bad encoding declaration: unknown encoding: no-such-codec",
    ]


class Unprivileged:
    """memlint run as a user without root's powers, in a folder that user owns."""

    def __init__(self, folder: Path, prefix: List[str], uid: int, gid: int) -> None:
        self.folder, self._prefix, self._uid, self._gid = folder, prefix, uid, gid

    def own(self, *paths: Path) -> None:
        for path in paths:
            os.lchown(path, self._uid, self._gid)

    def memlint(self, *args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        result = subprocess.run([*self._prefix, sys.executable, "-m", "memlint", *with_opt_in(args)], cwd=self.folder,
                                env=env, capture_output=True, text=True, timeout=120)
        assert "Traceback" not in result.stderr, result.stderr
        return result


@pytest.fixture
def unprivileged() -> Iterator[Unprivileged]:
    if os.geteuid() != 0:
        folder = Path(tempfile.mkdtemp())
        yield Unprivileged(folder, [], os.getuid(), os.getgid())
    else:
        setpriv = shutil.which("setpriv")
        try:
            nobody = pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("running as root, and there is no user `nobody` to drop to")
        if setpriv is None:
            pytest.skip("running as root, and there is no setpriv to drop to an unprivileged user")
        prefix = [setpriv, f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
        probe = subprocess.run([*prefix, sys.executable, "-c", "import memlint.cli, libcst"],
                               env={**os.environ, "PYTHONPATH": str(REPO)}, cwd="/", capture_output=True)
        if probe.returncode != 0:
            pytest.skip("running as root, and `nobody` cannot read this checkout or its Python")
        folder = Path(tempfile.mkdtemp())
        os.chown(folder, nobody.pw_uid, nobody.pw_gid)
        yield Unprivileged(folder, prefix, nobody.pw_uid, nobody.pw_gid)
    for root, folders, _ in os.walk(folder):
        for name in folders:
            os.chmod(os.path.join(root, name), 0o700)
    shutil.rmtree(folder)


@pytest.mark.parametrize("mode", [0o000, 0o644], ids=["closed", "listed but not entered"])
def test_an_unreadable_folder_is_one_error_and_the_rest_is_linted(unprivileged, mode):
    top = unprivileged.folder
    closed = top / "p" / "closed"
    closed.mkdir(parents=True)
    train = write(top, "p/train.py", BAD)
    write(top, "p/closed/hidden.py", BAD)
    unprivileged.own(top / "p", closed, train, closed / "hidden.py")
    closed.chmod(mode)  # 644: its names can be read, but nothing in it can be opened or even looked at
    result = unprivileged.memlint("p")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["p/closed: error: cannot read folder: permission denied"]
    assert "p/train.py:4:5: MEM101" in result.stdout
    named = unprivileged.memlint("p/closed/hidden.py", "p/train.py")
    assert named.returncode == 2
    assert named.stderr.splitlines() == ["p/closed/hidden.py: error: permission denied"]
    assert "p/train.py:4:5: MEM101" in named.stdout


def test_fix_refuses_a_read_only_file_of_its_own_user(unprivileged):
    path = write(unprivileged.folder, "train.py", BAD)
    unprivileged.own(path)
    path.chmod(0o444)
    result = unprivileged.memlint("--fix", "train.py")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["train.py: error: cannot write: permission denied; fixes not applied"]
    assert "train.py:4:5: MEM101" in result.stdout  # not fixed, so still reported
    assert path.read_text() == BAD
    assert stat.S_IMODE(path.stat().st_mode) == 0o444


def test_fix_in_a_read_only_folder_writes_the_file_in_place(unprivileged):
    folder = unprivileged.folder / "locked"
    folder.mkdir()
    path = write(folder, "train.py", BAD)
    unprivileged.own(folder, path)
    inode = path.stat().st_ino
    folder.chmod(0o555)  # no temporary file can be made here; the file itself is writable
    result = unprivileged.memlint("--fix", "locked/train.py")
    assert result.returncode == 0, result.stderr
    assert path.read_text() == FIXED and path.stat().st_ino == inode
