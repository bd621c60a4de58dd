"""`memlint snapshot` on snapshots that torch recorded on a GPU from the fixtures
(tests/data/snapshots/record.py), read here without a GPU; and one recorded now, on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
SNAPSHOTS = ROOT / "tests" / "data" / "snapshots"


def _snapshot(path, *paths):
    done = subprocess.run([sys.executable, "-m", "memlint", "snapshot", str(path), *map(str, paths),
                           "--output-format", "json"], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=ENV)
    assert done.returncode == 0, done.stderr
    (device,) = json.loads(done.stdout)["devices"]
    return device


def _line(fixture, text):
    source = (ROOT / "fixtures" / fixture / "before.py").read_text().splitlines()
    return next(number for number, line in enumerate(source, 1) if text in line)


def _check_accumulated_history(device):
    """MEM201's validation loop: every batch's activations, made by the forward line, are kept
    alive by `total += loss` on the next line; that line is named with MEM201 in its loop."""
    fixture = "MEM201-accumulate-history"
    forward, total = _line(fixture, "loss = criterion(model(x), y)"), _line(fixture, "total += loss")
    top = device["lines"][0]
    assert (Path(top["file"]), top["line"], top["function"]) == \
        ((ROOT / "fixtures" / fixture / "before.py").resolve(), forward, "validate")
    assert {(f["code"], f["line"], f["where"]) for f in top["findings"]} == {("MEM203", forward, "at"),
                                                                            ("MEM201", total, "loop")}
    assert top["bytes"] > device["peak_bytes"] / 2  # the kept activations are most of the peak
    assert device["summary"].startswith("peak ") and f"before.py:{forward}, where MEM203 points" in device["summary"]


def test_a_recorded_snapshot_of_kept_activations():
    _check_accumulated_history(_snapshot(SNAPSHOTS / "MEM201-accumulate-history.pickle.gz", "fixtures"))


def test_a_recorded_snapshot_of_retained_outputs():
    fixture = "MEM202-retained-outputs"
    device = _snapshot(SNAPSHOTS / f"{fixture}.pickle.gz", "fixtures")
    append = _line(fixture, "probs.append(model(x).softmax(-1).cpu())")
    top = device["lines"][0]
    assert (top["line"], top["function"]) == (append, "predict")
    assert "MEM202" in {f["code"] for f in top["findings"] if f["where"] == "at"}


def test_recorded_snapshots_stay_small():
    sizes = {path.name: path.stat().st_size for path in SNAPSHOTS.glob("*.pickle.gz")}
    assert len(sizes) == 2 and max(sizes.values()) < 300_000, sizes


@pytest.mark.gpu
def test_a_snapshot_recorded_now_on_the_gpu(tmp_path):
    done = subprocess.run([sys.executable, str(SNAPSHOTS / "record.py"), "--one", "MEM201-accumulate-history", "2",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    _check_accumulated_history(_snapshot(tmp_path / "MEM201-accumulate-history.pickle.gz", "fixtures"))
