"""--fix never loses what someone else saved, and never leaves a file cut short.

A fix is made from the text read at the start of a run and written at the end; an edit saved
in between (an editor, `git checkout`, another tool) must win: the file is skipped with a
warning that names it. A file deleted or moved meanwhile is not brought back, nor reported as
"permission denied". And a write that fails midway (a full disk) puts the original bytes back.
"""

from __future__ import annotations

import errno
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Optional

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


PADDING = "".join(f"value_{n} = [{n}, {n} * 2, str({n})]\n" for n in range(200))  # a tenth of a second to lint


class _Editor:
    """Another process's edits, as a user's editor, `git checkout` and `mv` make them, with a
    record of what each path should hold now (None: nothing)."""

    def __init__(self, folder: Path, rng) -> None:
        self.folder, self.rng = folder, rng
        self.last: Dict[str, Optional[str]] = {}
        self.versions = 0
        self.left = {"delete": 4, "move": 4}  # most files stay, to be edited

    def create(self, name: str) -> None:
        self._write(name, self._version(name))

    def _version(self, name: str) -> str:
        self.versions += 1
        return f"# {name}, version {self.versions}\n" + BAD + PADDING

    def _write(self, name: str, text: str) -> None:
        (self.folder / name).write_text(text, encoding="utf-8")
        self.last[name] = text

    def act(self) -> None:
        present = sorted(name for name, text in self.last.items() if text is not None)
        if not present:
            return
        name = self.rng.choice(present)
        path = self.folder / name
        action = self.rng.choices(["in place", "by rename", "delete", "move"],
                                  weights=[10, 10, self.left["delete"] > 0, self.left["move"] > 0])[0]
        self.left[action] = self.left.get(action, 0) - 1
        if action == "in place":
            self._write(name, self._version(name))
        elif action == "by rename":
            text = self._version(name)
            (self.folder / f".{name}.swp").write_text(text, encoding="utf-8")
            os.replace(self.folder / f".{name}.swp", path)
            self.last[name] = text
        elif action == "delete":
            path.unlink()
            self.last[name] = None
        else:
            moved = f"moved_{self.versions}_{name}"
            self.versions += 1
            path.rename(self.folder / moved)
            self.last[moved], self.last[name] = self.last[name], None


@pytest.mark.parametrize("seed", range(4))
def test_fix_while_another_process_edits_deletes_and_moves_files_loses_no_edit(tmp_path, seed):
    """Property: whatever another process does to the files while --fix runs, each file ends
    as that process left it, or as memlint fixed exactly that text; no file deleted or moved
    away comes back, none is cut short, and no temporary file is left."""
    rng = random.Random(seed)
    editor = _Editor(tmp_path, rng)
    for index in range(24):
        editor.create(f"f_{index:02}.py")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "memlint", *with_opt_in(
        ["--no-cache", "--fix", "-j", "2", "--file-timeout", "0", "."])], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while process.poll() is None:
        editor.act()
        time.sleep(rng.uniform(0, 0.05))
    out, err = process.communicate(timeout=120)
    assert "Traceback" not in err and process.returncode in (0, 1, 2), err
    for name, text in editor.last.items():
        path = tmp_path / name
        if text is None:
            assert not path.exists(), f"{name} came back"
        else:
            assert path.read_text(encoding="utf-8") in (text, text.replace(BAD, FIXED)), f"{name}: an edit was lost"
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        sorted(name for name, text in editor.last.items() if text is not None)
