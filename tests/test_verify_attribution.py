"""Where the peak is, before and after a fix: lines followed through the fix, the sentence that
names a finding's line."""

from __future__ import annotations

import os

from memlint.verify.attribution import attribute, largest, line_map
from memlint.verify.history import NO_PYTHON, OTHER

MiB = 2**20
BEFORE = "import torch\nouts = []\nfor x in data:\n    out = model(x)\n    outs.append(out)\nprint(len(outs))\n"
AFTER = "import torch\nouts = []\nfor x in data:\n    out = model(x)\n    outs.append(out.detach())\nprint(len(outs))\n"
PATH = os.path.abspath("train.py")


def peak(total, *lines):
    return {"bytes": total, "unattributed": 0,
            "lines": [{"file": PATH if line else OTHER, "line": line, "function": "<module>", "bytes": size}
                      for line, size in lines]}


def test_line_map_follows_lines_through_inserted_and_replaced_lines():
    before = "a\nb\nc\nd\n"
    after = "a\nnew\nb\nC\nd\n"  # a line inserted after 1, line 3 replaced
    assert line_map(before, after) == {1: 1, 2: 3, 3: 4, 4: 5}
    assert line_map(BEFORE, AFTER)[5] == 5


def test_the_peak_at_a_findings_line_says_so_and_what_is_left_after_the_fix():
    found = attribute(peak(1200 * MiB, (5, 900 * MiB), (4, 200 * MiB)), peak(400 * MiB, (4, 300 * MiB), (5, 50 * MiB)),
                      {5: ["MEM202"]}, BEFORE, AFTER, "train.py")
    assert found["summary"] == ("peak 1.17 GiB at train.py:5 (900.0 MiB allocated there), where MEM202 points; "
                                "after the fix 400.0 MiB, 50.0 MiB of it at train.py:5")
    assert found["before"]["lines"][0]["codes"] == ["MEM202"] and found["before"]["lines"][1]["codes"] == []
    assert [x["original_line"] for x in found["after"]["lines"]] == [4, 5]


def test_a_findings_line_that_is_not_the_largest_is_still_named():
    found = attribute(peak(500 * MiB, (4, 300 * MiB), (5, 100 * MiB)), None, {5: ["MEM202", "MEM204"]},
                      BEFORE, AFTER, "train.py")
    assert found["summary"] == ("peak 500.0 MiB at train.py:4 (300.0 MiB allocated there); "
                                "train.py:5 (MEM202, MEM204) holds 100.0 MiB")
    assert found["after"] is None


def test_findings_that_hold_nothing_at_the_peak_and_a_moved_line():
    before, after = "x = 1\ny = big()\n", "buf = 0\nx = 1\ny = big()\n"
    found = attribute(peak(64 * MiB, (2, 64 * MiB), (0, MiB)), peak(64 * MiB, (3, 64 * MiB)), {1: ["MEM101"]},
                      before, after, "train.py")
    assert found["summary"] == ("peak 64.0 MiB at train.py:2 (64.0 MiB allocated there); "
                                "the findings' lines (line 1) hold nothing at the peak; "
                                "after the fix 64.0 MiB, 64.0 MiB of it at train.py:3 (line 2 before)")


def test_fixtures_name_their_own_files_and_memory_outside_the_script():
    found = attribute(peak(10 * MiB, (0, 6 * MiB), (2, 4 * MiB)), peak(4 * MiB, (2, 4 * MiB)), {2: ["MEM204"]},
                      "a\nb\n", "a\nb\n", "fixtures/MEM204-x/after.py")
    assert found["summary"] == ("peak 10.0 MiB, the most of it (6.0 MiB) allocated outside the script; "
                                "train.py:2 (MEM204) holds 4.0 MiB; after the fix 4.0 MiB")
    assert largest(peak(10 * MiB, (0, 6 * MiB), (2, 4 * MiB)), 2) == "outside the script 6.0 MiB, train.py:2 4.0 MiB"


def test_memory_allocated_with_no_python_frame_is_said_to_be_so():
    found = attribute({"bytes": 9 * MiB, "unattributed": 0, "lines": [
        {"file": NO_PYTHON, "line": 0, "function": "", "bytes": 5 * MiB},
        {"file": PATH, "line": 4, "function": "<module>", "bytes": 4 * MiB}]}, None, {4: ["MEM301"]},
        BEFORE, AFTER, "train.py")
    assert found["summary"] == ("peak 9.0 MiB, the most of it (5.0 MiB) allocated with no Python frame on the stack "
                                "(as by a backward, which runs on the autograd engine's thread); "
                                "train.py:4 (MEM301) holds 4.0 MiB")
    assert found["before"]["lines"][0]["codes"] == []


def test_a_scalar_at_a_findings_line_is_not_rounded_to_nothing():
    found = attribute(peak(300 * MiB, (25, 297 * MiB), (26, 512)), None, {26: ["MEM201"]}, BEFORE, AFTER, "t.py")
    assert found["summary"].endswith("train.py:26 (MEM201) holds 0.5 KiB")


def test_no_attribution_without_the_originals_peak():
    assert attribute(None, peak(1, (1, 1)), {}, "", "", "t.py") is None
    assert attribute({"bytes": 5, "lines": [], "unattributed": 5}, None, {}, "", "", "t.py") is None


def test_sizes_read_as_bytes_below_a_tenth_of_a_kib():
    from memlint.verify.attribution import mib

    assert [mib(v) for v in (0, 4, 512, 3 * 2**20, 3 * 2**30)] == ["0.0 MiB", "4 B", "0.5 KiB", "3.0 MiB", "3.00 GiB"]
