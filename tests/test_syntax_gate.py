"""One syntax for every file: what the Python memlint runs on compiles. A file it rejects is an
error naming that Python, whether or not the file mentions torch, and is never rewritten."""

from __future__ import annotations

import sys

import pytest

from test_cli import BAD, memlint, write

PYTHON = f"Python {sys.version_info[0]}.{sys.version_info[1]}"


@pytest.mark.parametrize("source,reason", [
    ("x = " + "(" * 1000 + ")" * 1000 + "\n", "too many nested parentheses"),
    ("def step():\n    pass\nreturn 1\n", "'return' outside function"),  # the compiler's check, not the parser's
])
@pytest.mark.parametrize("mentions_torch", [False, True])
@pytest.mark.parametrize("name", ["bad.py", "test_bad.py"])  # a test module's gate keeps Python's AST
def test_code_cpython_rejects_is_an_error_with_or_without_torch(tmp_path, source, reason, mentions_torch, name):
    head = "import torch\n" if mentions_torch else ""
    path = write(tmp_path, name, head + source)
    result = memlint(tmp_path, "--fix", name)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{name}: error: cannot parse as {PYTHON}: {reason}"), line
    assert path.read_text() == head + source


def test_newer_grammar_follows_the_running_python(tmp_path):
    """`type X = ...` is Python 3.12 grammar: an error before 3.12, linted and fixed from it on."""
    path = write(tmp_path, "train.py", "type Batch = list\n" + BAD)
    result = memlint(tmp_path, "--fix", "train.py")
    if sys.version_info < (3, 12):
        assert result.returncode == 2
        assert result.stderr.splitlines() == [
            f"train.py: error: cannot parse as {PYTHON}: invalid syntax (line 1, column 6)"]
        assert path.read_text() == "type Batch = list\n" + BAD
    else:
        assert result.returncode == 0, result.stderr
        assert "noise.normal_()" in path.read_text()


@pytest.mark.parametrize("head", ["import torch\n", ""])
def test_a_syntax_error_is_reported_on_its_own_line(tmp_path, head):
    write(tmp_path, "broken.py", head + "def broken(:\n    pass\n")
    result = memlint(tmp_path, "broken.py")
    line = 2 if head else 1
    assert result.stderr.splitlines() == [
        f"broken.py: error: cannot parse as {PYTHON}: invalid syntax (line {line}, column 12)"]



@pytest.mark.parametrize("name", ["golden.py", "test_golden.py"])
def test_deep_code_python_compiles_passes_the_gate_in_a_test_module_too(tmp_path, name):
    """Python's AST objects nest no deeper than its recursion limit, where compiling the text
    goes deeper: a test module's gate, which keeps the AST, falls back to compiling the text."""
    source = "import torch\nGOLDEN = (" + " + ".join(["'ab'"] * 1000) + ")\n"
    write(tmp_path, name, source)
    result = memlint(tmp_path, name)
    assert result.returncode == 0, result.stdout + result.stderr
