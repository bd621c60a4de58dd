"""Inputs a user hits by accident: configuration nested too deep, folders that hold no Python,
folder names that are also commands, empty selections, unknown codes in `# noqa`, a `.gitignore`
that cannot be read. Each ends in one clear line and the right exit code, never a traceback
and never a silent pass."""

from __future__ import annotations

import os

import pytest

from test_cli import BAD, memlint, write
from test_files_and_writes import unprivileged  # noqa: F401  (a fixture)

DEEP = "[" * 5000


def test_the_summary_keeps_the_fixed_count_when_a_path_fails(tmp_path):
    write(tmp_path, "a.py", BAD)
    write(tmp_path, "broken.py", "def broken(:\n")
    result = memlint(tmp_path, "--fix", "a.py", "broken.py")
    assert result.returncode == 2
    assert result.stdout.splitlines()[-1] == "Found 1 error (1 fixed, 0 remaining); 1 path could not be checked."


def test_out_of_memory_while_compiling_says_why(tmp_path, monkeypatch):
    from memlint import engine

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(engine, "compile", no_memory, raising=False)
    with pytest.raises(engine.SourceError) as error:
        engine.compiles("x = 1\n", "x.py")
    assert str(error.value).startswith(f"cannot parse as {engine.SYNTAX}: out of memory")
    assert os.linesep not in str(error.value)
