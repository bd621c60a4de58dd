"""Memory: a file too large to be hand-written code is skipped unread, and a worker may use
only its share of the memory, so that one huge file (LibCST's parser takes about 300 bytes per
byte of source) cannot abort the run, nor `-j N` multiply the damage."""

from __future__ import annotations

import os

import pytest

import memlint.jobs as jobs
from memlint.config import Config, Selection
from memlint.rules import registry
from memlint.run import Options, run
from memlint.sourcefile import MAX_SOURCE_BYTES
from test_cli import BAD, memlint, write

on_linux = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="memory is read from /proc")


def test_a_file_over_the_size_limit_is_skipped_unread_with_a_warning(tmp_path):
    big = tmp_path / "tables.py"
    line = "# " + "x" * 77 + "\n"
    big.write_text(line * (MAX_SOURCE_BYTES // len(line) + 1), encoding="utf-8")
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "--file-timeout", "0", "-j", "1", "tables.py", "train.py")
    assert result.returncode == 1  # train.py's finding; the skipped file fails nothing
    assert result.stderr == "tables.py: warning: not linted: 4.0 MiB, more than the 4 MiB memlint reads\n"
    assert "train.py:4:5: MEM101" in result.stdout


def _data_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmData")


@on_linux
@pytest.mark.skipif(not jobs.budgets_enforced(), reason="no resource limits on this platform")
def test_a_file_over_the_memory_budget_is_a_warning_and_the_others_are_linted(tmp_path, monkeypatch):
    trainer = "".join(f"def step_{n}(model, batch):\n    return model(batch).sum() + {n}\n" for n in range(12_000))
    write(tmp_path, "huge.py", "import torch\n" + trainer)  # 0.8 MiB: some 250 MiB to parse
    write(tmp_path, "train.py", BAD)
    monkeypatch.chdir(tmp_path)
    budget = _data_bytes() + 128 * 2**20  # what this process holds, and enough to compile it, not to parse it
    config = Config(root=tmp_path, selection=Selection(extend_select=["MEM101"]))
    for count in (1, 2):
        huge, train = run(["huge.py", "train.py"], config, registry(),
                          Options(jobs=count, file_timeout=0, memory_budget=budget))
        assert (huge.error, huge.warning) == (None, f"not linted: it needs more than the {budget / 2**20:.0f} MiB "
                                                     f"of memory a worker may use")
        assert train.error is None and [f.code for f in train.findings] == ["MEM101"]


def test_each_worker_gets_a_share_of_the_memory_within_bounds(monkeypatch):
    monkeypatch.setattr(jobs, "available_memory", lambda: 16 * 2**30)
    assert jobs.memory_budget(1) == jobs.MEMORY_CEILING
    assert jobs.memory_budget(8) == 2 * 2**30  # a share of what is available
    assert jobs.memory_budget(64) == jobs.MEMORY_FLOOR  # never less than a large file needs
