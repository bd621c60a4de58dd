"""Standard input as editors and formatters-on-save pipe it: `memlint - --stdin-filename PATH`
lints the text as the file PATH (its configuration, per-file ignores, notebook by suffix), and
with --fix writes the fixed source to standard output, the input unchanged when it cannot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_cli import BAD, FIXED, OPT_IN, REPO, write


def piped(cwd: Path, text, *args: str, opt_in: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    data = text.encode() if isinstance(text, str) else text
    result = subprocess.run([sys.executable, "-m", "memlint", *(OPT_IN if opt_in else ()), *args], cwd=cwd,
                            env=env, input=data, capture_output=True, timeout=120)
    assert b"Traceback" not in result.stderr, result.stderr.decode()
    return result


def test_stdin_is_linted_as_the_named_file(tmp_path):
    result = piped(tmp_path, BAD, "-", "--stdin-filename", "pkg/train.py")
    assert result.returncode == 1
    assert result.stdout.decode().startswith("pkg/train.py:4:5: MEM101 [*] `noise`")
    unnamed = piped(tmp_path, BAD, "-")
    assert unnamed.stdout.decode().startswith("-:4:5: MEM101")
    implied = piped(tmp_path, BAD, "--stdin-filename", "train.py")  # no path: standard input
    assert implied.stdout.decode().startswith("train.py:4:5: MEM101")


def test_stdin_takes_the_configuration_of_the_file_it_names(tmp_path):
    write(tmp_path, "pkg/pyproject.toml", '[tool.memlint]\nextend-select = ["MEM101"]\n'
                                          'per-file-ignores = {"tests/*.py" = ["MEM1"]}\nexclude = ["gen/"]\n')
    assert piped(tmp_path, BAD, "-", "--stdin-filename", "pkg/train.py", opt_in=False).returncode == 1
    assert piped(tmp_path, BAD, "-", "--stdin-filename", "other/train.py", opt_in=False).returncode == 0
    ignored = piped(tmp_path, BAD, "-", "--stdin-filename", "pkg/tests/test_x.py", opt_in=False)
    assert ignored.returncode == 0 and ignored.stdout.decode() == "All checks passed!\n"
    excluded = piped(tmp_path, BAD, "--force-exclude", "--fix", "-", "--stdin-filename", "pkg/gen/x.py",
                     opt_in=False)
    assert excluded.returncode == 0 and excluded.stdout == BAD.encode()  # left as it came


def test_fix_writes_the_fixed_source_to_stdout_and_the_summary_to_stderr(tmp_path):
    result = piped(tmp_path, BAD, "--fix", "-", "--stdin-filename", "train.py")
    assert result.returncode == 0
    assert result.stdout == FIXED.encode()
    assert result.stderr.decode().splitlines() == ["Found 1 error (1 fixed, 0 remaining)."]
    assert not (tmp_path / "train.py").exists()  # nothing is written, nothing read


def test_fix_echoes_what_it_cannot_fix(tmp_path):
    broken = "import torch\ndef broken(:\n"
    result = piped(tmp_path, broken, "--fix", "-", "--stdin-filename", "train.py")
    assert result.returncode == 2
    assert result.stdout == broken.encode()
    assert "train.py: error: cannot parse" in result.stderr.decode()
    latin = b"# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n" + BAD.encode()
    kept = piped(tmp_path, latin, "--fix", "-", "--stdin-filename", "train.py")
    assert kept.returncode == 0
    assert kept.stdout == b"# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n" + FIXED.encode()


def test_diff_of_stdin(tmp_path):
    result = piped(tmp_path, BAD, "--diff", "-", "--stdin-filename", "train.py")
    assert result.returncode == 1
    assert "--- a/train.py" in result.stdout.decode() and "+    noise.normal_()" in result.stdout.decode()


def test_a_notebook_on_stdin_by_its_suffix(tmp_path):
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": BAD.splitlines(keepends=True)}
    text = json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"
    result = piped(tmp_path, text, "-", "--stdin-filename", "study.ipynb")
    assert result.stdout.decode().startswith("study.ipynb:cell 1:4:5: MEM101")
    fixed = piped(tmp_path, text, "--fix", "-", "--stdin-filename", "study.ipynb")
    assert json.loads(fixed.stdout)["cells"][0]["source"] == FIXED.splitlines(keepends=True)


def test_stdin_with_other_paths_is_a_usage_error(tmp_path):
    write(tmp_path, "train.py", BAD)
    result = piped(tmp_path, BAD, "-", "train.py")
    assert result.returncode == 2 and b"standard input" in result.stderr
