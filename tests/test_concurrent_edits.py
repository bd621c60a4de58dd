"""--fix never loses what someone else saved, and never leaves a file cut short.

A fix is made from the text read at the start of a run and written at the end; an edit saved
in between (an editor, `git checkout`, another tool) must win: the file is skipped with a
warning that names it. A file deleted or moved meanwhile is not brought back, nor reported as
"permission denied". And a write that fails midway (a full disk) puts the original bytes back.
"""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import memlint.run as run_module
import memlint.sourcefile as sourcefile
from memlint.config import Config, Selection
from memlint.rules import registry
from memlint.run import Options, run
from test_cli import BAD, FIXED, REPO, with_opt_in, write

EDITED = BAD.replace("range(10)", "range(20)")  # the user's edit: still fixable, so a stale fix would show


def _save_in_place(path: Path) -> None:
    path.write_text(EDITED, encoding="utf-8")


def _save_by_rename(path: Path) -> None:  # as most editors save: a new file renamed over the old
    new = path.with_name(path.name + ".new")
    new.write_text(EDITED, encoding="utf-8")
    os.replace(new, path)


def _delete(path: Path) -> None:
    path.unlink()


def _move(path: Path) -> None:
    path.rename(path.with_name("moved.py"))


def _fix_while(monkeypatch, tmp_path: Path, change, linked: bool):
    """Run --fix on train.py (a hard-linked one: written in place) while `change` happens to it
    between the read and the write."""
    path = write(tmp_path, "train.py", BAD)
    if linked:
        os.link(path, tmp_path / "twin.py")
    fix = run_module.fix

    def fix_then_change(source, display, *args, **kwargs):
        result = fix(source, display, *args, **kwargs)
        change(path)  # after memlint read it, before it writes
        return result

    monkeypatch.setattr(run_module, "fix", fix_then_change)
    monkeypatch.chdir(tmp_path)
    config = Config(root=tmp_path, selection=Selection(extend_select=["MEM101"]))
    [outcome] = run(["train.py"], config, registry(), Options(fix=True))
    return path, outcome


@pytest.mark.parametrize("linked", [False, True], ids=["renamed over", "written in place"])
@pytest.mark.parametrize("change", [_save_in_place, _save_by_rename])
def test_an_edit_saved_while_fixing_is_kept_and_the_file_named(monkeypatch, tmp_path, change, linked):
    path, outcome = _fix_while(monkeypatch, tmp_path, change, linked)
    assert path.read_text(encoding="utf-8") == EDITED
    assert (outcome.error, outcome.warning) == (None, "not fixed: it was edited while memlint ran")
    assert outcome.findings == outcome.fixed == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["train.py", *(["twin.py"] if linked else [])])


@pytest.mark.parametrize("change", [_delete, _move])
def test_a_file_deleted_or_moved_while_fixing_is_not_brought_back(monkeypatch, tmp_path, change):
    path, outcome = _fix_while(monkeypatch, tmp_path, change, linked=False)
    assert not path.exists()
    assert (outcome.error, outcome.warning) == (None, "not fixed: it was deleted or moved while memlint ran")
    if change is _move:
        assert (tmp_path / "moved.py").read_text(encoding="utf-8") == BAD


def test_an_unchanged_file_is_still_fixed(monkeypatch, tmp_path):
    path, outcome = _fix_while(monkeypatch, tmp_path, lambda path: path.touch(), linked=False)  # saved as it was
    assert path.read_text(encoding="utf-8") == FIXED
    assert (outcome.error, outcome.warning, len(outcome.fixed)) == (None, None, 1)


def test_a_hard_linked_file_on_a_full_disk_keeps_every_byte(tmp_path):
    """A file with other hard links is written in place; a disk that fills up midway must not
    leave it cut short. The file-size limit stands for the full disk: writes past it fail."""
    padding = "".join(f"# line {n} of a long header\n" for n in range(50))
    path = write(tmp_path, "train.py", padding + BAD)
    os.link(path, tmp_path / "twin.py")
    limit = path.stat().st_size + 10  # the fix adds more than 10 bytes
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "memlint", *with_opt_in(["--no-cache", "--fix", "train.py"])], cwd=tmp_path,
        env=env, capture_output=True, text=True, timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert result.returncode == 2
    assert result.stderr == "train.py: error: cannot write: file too large; fixes not applied\n"
    assert "train.py:54:5: MEM101" in result.stdout  # not fixed, so still reported
    assert path.read_text(encoding="utf-8") == padding + BAD
    assert os.stat(tmp_path / "twin.py").st_ino == path.stat().st_ino


def test_an_overwrite_that_fails_midway_puts_the_original_back(monkeypatch, tmp_path):
    path = write(tmp_path, "train.py", BAD)
    os.link(path, tmp_path / "twin.py")
    write_bytes = os.write
    calls = []

    def short_then_full(handle, data):
        calls.append(len(data))
        if len(calls) == 1:  # the fix's first write: half of it lands, then the disk is full
            write_bytes(handle, bytes(data[:len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_bytes(handle, data)

    monkeypatch.setattr(sourcefile.os, "write", short_then_full)
    monkeypatch.setattr(sourcefile.os, "posix_fallocate", lambda *args: None, raising=False)  # no reservation
    source = sourcefile.read(path)
    with pytest.raises(OSError, match="No space left"):
        sourcefile.write_back(path, sourcefile.SourceText(FIXED, "utf-8"), source.digest)
    assert path.read_text(encoding="utf-8") == BAD and len(calls) == 2
