"""`# noqa` in the grammar flake8 and ruff share (ruff's where they differ), form by form."""

from __future__ import annotations

import pytest

from memlint import lint_source
from test_cli import BAD, memlint, write

TWO_RULES = BAD + "scaler = torch.cuda.amp.GradScaler()\n"  # and MEM402 on the last line


def _codes(source: str):
    return [f.code for f in lint_source(source, select=["MEM1", "MEM2", "MEM3", "MEM4", "MEM101", "MEM402"])]


@pytest.mark.parametrize("comment,hidden", [
    ("# noqa", True),
    ("#noqa", True),
    ("# NOQA", True),
    ("# noqa why: a reason after a space", True),  # bare: flake8 and ruff alike
    ("# noqa #why", True),
    ("# noqa:MEM101", True),
    ("# noqa: MEM101", True),
    ("# noqa:  MEM101", True),
    ("# noqa: mem101", True),
    ("# noqa: MEM1", True),  # a prefix, as flake8 matches them
    ("# noqa: MEM202,MEM101", True),
    ("# noqa: MEM202, MEM101", True),
    ("# noqa: MEM202 MEM101", True),
    ("# noqa: MEM202,,MEM101", True),
    ("# noqa:MEM101#why", True),
    ("# noqa: MEM101 keeps a fresh tensor on purpose", True),
    ("# type: ignore  # noqa: MEM101", True),
    ("# noqa: MEM202", False),
    ("# noqa: MEM202 because MEM101", False),  # the list ends at the first word that is no code
    ("# noqaxyz", False),
    ("# noqa-all", False),
    ("# noqa:", False),  # no codes: nothing is hidden (ruff), not everything (flake8)
    ("# noqa: because", False),
    ("# noqa: MEM101abc", False),
    ("# not a noqa comment", False),
    ("# mynoqa", False),
])
def test_inline_noqa_forms(comment, hidden):
    source = BAD.replace("torch.randn(n, n)", f"torch.randn(n, n)  {comment}")  # MEM101's line
    assert ("MEM101" not in _codes(source)) is hidden


@pytest.mark.parametrize("first_line,left", [
    ("# memlint: noqa", []),
    ("# memlint:noqa", []),
    ("# memlint: noqa: MEM101", ["MEM402"]),
    ("# memlint: noqa: MEM101, MEM402", []),
    ("# memlint: noqa: MEM4", ["MEM101"]),
    ("# memlint: noqaxyz", ["MEM101", "MEM402"]),
    ("# see memlint: noqa", ["MEM101", "MEM402"]),
    ("x = 1  # memlint: noqa", []),  # a trailing comment is a whole comment too
])
def test_file_level_noqa_forms(first_line, left):
    assert _codes(first_line + "\n" + TWO_RULES) == left


def test_the_reported_noqa_forms_through_the_command_line(tmp_path):
    write(tmp_path, "spaces.py", BAD.replace("torch.randn(n, n)", "torch.randn(n, n)  # noqa: MEM202 MEM101"))
    write(tmp_path, "suffix.py", BAD.replace("torch.randn(n, n)", "torch.randn(n, n)  # noqaxyz"))
    write(tmp_path, "file_codes.py", "# memlint: noqa: MEM101\n" + TWO_RULES)
    result = memlint(tmp_path, "--extend-select", "MEM101,MEM402", "spaces.py", "suffix.py", "file_codes.py", opt_in=False)
    reported = sorted(line.split(" ")[0] + line.split(" ")[1] for line in result.stdout.splitlines() if ": MEM" in line)
    assert reported == ["file_codes.py:7:10:MEM402", "suffix.py:4:5:MEM101"]


def test_a_file_that_never_says_noqa_is_not_tokenized(monkeypatch):
    import tokenize

    from memlint.suppressions import Suppressions

    def fail(*args, **kwargs):
        raise AssertionError("tokenized")

    monkeypatch.setattr(tokenize, "generate_tokens", fail)
    assert _codes(TWO_RULES) == ["MEM101", "MEM402"]  # reported: no directive to look for
    with pytest.raises(AssertionError, match="tokenized"):
        Suppressions("x = 1  # NoQA\n")  # any case of the word is looked into
