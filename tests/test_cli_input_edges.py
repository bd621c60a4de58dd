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


def test_noqa_naming_an_unknown_memlint_code_is_a_warning(tmp_path):
    source = BAD.replace("torch.randn(n, n)", "torch.randn(n, n)  # noqa: MEM999, E501")
    write(tmp_path, "train.py", source)
    result = memlint(tmp_path, "train.py")
    assert result.returncode == 1  # MEM999 hides nothing: MEM101 is still reported
    assert "train.py:4:5: MEM101" in result.stdout
    assert result.stderr.splitlines() == ["train.py:4: warning: `# noqa` names MEM999, which is no memlint rule"]
    again = memlint(tmp_path, "train.py")  # from the cache: the warning stays
    assert again.stderr == result.stderr


def test_out_of_memory_while_compiling_says_why(tmp_path, monkeypatch):
    from memlint import engine

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(engine, "compile", no_memory, raising=False)
    with pytest.raises(engine.SourceError) as error:
        engine.compiles("x = 1\n", "x.py")
    assert str(error.value).startswith(f"cannot parse as {engine.SYNTAX}: out of memory")
    assert os.linesep not in str(error.value)
