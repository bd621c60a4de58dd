"""The language server's text edits: a fix's unified diff applied back gives the text `--fix`
would write, and the one edit of whole lines between two texts rebuilds the new one, whatever
the line endings and whether the last line has one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlint.engine import unified_diff
from memlint.server.edits import StaleDiff, apply_diff, line_edit, lines_of

_LINE = st.builds(lambda body, end: body + end, st.text("ab #\t", max_size=4), st.sampled_from(["\n", "\r\n", "\r"]))
_TEXT = st.builds(lambda lines, last: "".join(lines) + last, st.lists(_LINE, max_size=8), st.text("xy", max_size=2))


@given(_TEXT, _TEXT)
def test_a_diff_applied_to_its_text_gives_the_new_text(old, new):
    assert apply_diff(old, unified_diff(old, new, "x.py")) == new


@given(_TEXT, _TEXT)
def test_one_line_edit_turns_the_old_text_into_the_new(old, new):
    edit = line_edit(old, new)
    if edit is None:
        assert old == new
        return
    lines = lines_of(old)
    assert "".join(lines[:edit.start]) + edit.text + "".join(lines[edit.end:]) == new


def test_a_diff_made_from_another_text_is_refused():
    diff = unified_diff("a\nb\nc\n", "a\nB\nc\n", "x.py")
    with pytest.raises(StaleDiff):
        apply_diff("a\nchanged\nc\n", diff)
