"""`memlint snapshot`: a user's memory snapshot read without a GPU (or torch), its peak attributed
to the lines of the user's files, with memlint's findings there. Synthetic snapshots here; ones
recorded on a GPU from the fixtures are in tests/data/snapshots (test_snapshot_recorded.py)."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.snapshot.sources import Sources

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
MiB = 2**20
FIXTURE = ROOT / "fixtures" / "MEM201-accumulate-history" / "before.py"
RECORDED = "/cluster/home/someone/project/before.py"  # where the job ran: not this machine's path


def _frame(line, name, filename=RECORDED):
    return {"filename": filename, "line": line, "name": name}


FORWARD = [_frame(125, "forward", "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py"),
           _frame(25, "validate"), _frame(30, "<module>")]
OPTIMIZER = [_frame(100, "step", "/opt/venv/lib/python3.12/site-packages/torch/optim/adam.py")]


def _snapshot():
    """A history in which three batches' activations (line 25) are alive at the peak, beside a
    backward's memory (no Python frame), a library's, and a block older than the history."""
    trace = [{"action": "alloc", "addr": 1, "size": 100 * MiB, "time_us": 1_000_000, "frames": FORWARD},
             {"action": "alloc", "addr": 2, "size": 100 * MiB, "time_us": 1_100_000, "frames": FORWARD},
             {"action": "alloc", "addr": 3, "size": 50 * MiB, "time_us": 1_200_000, "frames": []},
             {"action": "free_requested", "addr": 3, "size": 50 * MiB, "time_us": 1_250_000, "frames": []},
             {"action": "free_completed", "addr": 3, "size": 50 * MiB, "time_us": 1_300_000, "frames": []},
             {"action": "alloc", "addr": 4, "size": 8 * MiB, "time_us": 1_400_000, "frames": OPTIMIZER},
             {"action": "alloc", "addr": 5, "size": 100 * MiB, "time_us": 3_500_000, "frames": FORWARD},
             *({"action": "free_completed", "addr": a, "size": s * MiB, "time_us": 4_000_000, "frames": []}
               for a, s in ((1, 100), (2, 100), (5, 100), (4, 8)))]
    older = {"address": 99, "size": 32 * MiB, "requested_size": 32 * MiB, "state": "active_allocated",
             "frames": [_frame(17, "<module>")]}
    return {"segments": [{"device": 0, "address": 99, "total_size": 40 * MiB, "blocks": [
        older, {"address": 99 + 32 * MiB, "size": 8 * MiB, "state": "inactive", "frames": []}]}],
            "device_traces": [trace], "allocator_settings": {}}


def _project(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(FIXTURE, project / "before.py")  # MEM201 at line 26: `total += loss` in validate's loop
    return project


def _memlint(*args, cwd):
    return subprocess.run([sys.executable, "-m", "memlint", "snapshot", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=120, env=ENV)


def test_the_peak_is_named_by_the_users_line_with_the_finding_in_its_loop(tmp_path):
    project = _project(tmp_path)
    (tmp_path / "snap.pickle").write_bytes(pickle.dumps(_snapshot()))
    done = _memlint(tmp_path / "snap.pickle", ".", cwd=project)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"memlint snapshot {tmp_path / 'snap.pickle'}: device 0, 11 allocator events; " \
                       "32.0 MiB allocated when it was taken"
    assert lines[1] == "peak 340.0 MiB; 300.0 MiB allocated at before.py:25, where MEM203 points; MEM201 at " \
                       "line 26 in its loop (lines 24-26) (2.5 s into the history)"
    assert lines[3:6] == ["   300.0 MiB  before.py:25 in validate, where MEM203 points; MEM201 at line 26 in its loop "
                          "(lines 24-26)",
                          "    32.0 MiB  before.py:17 in <module>",
                          "     8.0 MiB  by code outside your files (no frame of the stack in them)"]
    assert "no Python frame" not in done.stdout  # the backward's 50 MiB was freed before the peak


def test_json_and_a_gzipped_snapshot(tmp_path):
    project = _project(tmp_path)
    (tmp_path / "snap.pickle.gz").write_bytes(gzip.compress(pickle.dumps(_snapshot())))
    done = _memlint(tmp_path / "snap.pickle.gz", "--output-format", "json", cwd=project)
    assert done.returncode == 0, done.stderr
    (device,) = json.loads(done.stdout)["devices"]
    assert (device["peak_bytes"], device["peak_seconds"], device["outside_bytes"], device["unattributed_bytes"]) == \
        (340 * MiB, 2.5, 8 * MiB, 0)
    top = device["lines"][0]
    assert (top["file"], top["line"], top["function"], top["bytes"]) == \
        (str((project / "before.py").resolve()), 25, "validate", 300 * MiB)
    assert [(f["code"], f["line"], f["where"]) for f in top["findings"]] == [("MEM203", 25, "at"), ("MEM201", 26, "loop")]
    assert device["summary"].startswith("peak 340.0 MiB; 300.0 MiB allocated at before.py:25")


def test_the_finding_at_the_line_itself_is_said_to_point_there(tmp_path):
    project = _project(tmp_path)
    snapshot = _snapshot()
    for entry in snapshot["device_traces"][0]:
        if entry["frames"] == FORWARD:
            entry["frames"] = [FORWARD[0], _frame(26, "validate"), FORWARD[2]]
    (tmp_path / "snap.pickle").write_bytes(pickle.dumps(snapshot))
    done = _memlint(tmp_path / "snap.pickle", cwd=project)
    assert "peak 340.0 MiB; 300.0 MiB allocated at before.py:26, where MEM201 points; MEM203 at line 25 in its " \
           "loop (lines 24-26)" in done.stdout


def test_a_pickle_of_anything_but_plain_data_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "evil.pickle").write_bytes(
        b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.")
    done = _memlint(tmp_path / "evil.pickle", cwd=tmp_path)
    assert done.returncode == 2 and not marker.exists()
    assert done.stderr.strip() == f"memlint snapshot: error: {tmp_path / 'evil.pickle'}: it is a pickle of more " \
                                  "than plain data (it names os.system); a memory snapshot holds only dicts, " \
                                  "lists, strings and numbers"


@pytest.mark.parametrize("content, message", [
    (b"not a pickle at all", "not a pickle"),
    (pickle.dumps([1, 2, 3]), "not a memory snapshot"),
])
def test_what_is_not_a_snapshot_is_one_line_and_exit_2(tmp_path, content, message):
    (tmp_path / "bad.pickle").write_bytes(content)
    done = _memlint(tmp_path / "bad.pickle", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and message in done.stderr
    missing = _memlint(tmp_path / "missing.pickle", cwd=tmp_path)
    assert missing.returncode == 2 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr


def test_a_snapshot_without_history_says_how_to_record_one(tmp_path):
    (tmp_path / "empty.pickle").write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))
    done = _memlint(tmp_path / "empty.pickle", cwd=tmp_path)
    assert done.returncode == 0 and "_record_memory_history()" in done.stdout


def test_torch_is_not_needed_to_read_a_snapshot(tmp_path):
    project = _project(tmp_path)
    (tmp_path / "snap.pickle").write_bytes(pickle.dumps(_snapshot()))
    (tmp_path / "blocker").mkdir()
    (tmp_path / "blocker" / "torch.py").write_text("raise ImportError('torch is not installed here')\n")
    done = subprocess.run([sys.executable, "-m", "memlint", "snapshot", str(tmp_path / "snap.pickle")],
                          capture_output=True, text=True, cwd=project, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "blocker"), str(ROOT)])})
    assert done.returncode == 0 and "before.py:25" in done.stdout, done.stderr


def test_a_recorded_frame_is_placed_by_its_trailing_folders_and_its_function(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "train.py").write_text("import torch\n\ndef step():\n    return torch.ones(3)\n")
    (tmp_path / "module.py").write_text("x = 1\n" * 2000)
    sources = Sources([tmp_path / "a" / "train.py", tmp_path / "b" / "train.py", tmp_path / "module.py"])
    assert sources.match("/elsewhere/b/train.py", 4, "step") == (tmp_path / "b" / "train.py").resolve()
    assert sources.match("/elsewhere/c/train.py", 4, "step") is None  # a and b as likely: neither
    assert sources.match("/elsewhere/b/train.py", 4, "other") is None  # not that function's line
    assert sources.match("/elsewhere/b/train.py", 40, "step") is None  # no such line here
    # torch's module.py, even from a source checkout, is not the user's module.py: the line is
    # in a module-level stretch here, in a method there
    assert sources.match("/src/pytorch/torch/nn/modules/module.py", 1775, "_call_impl") is None
    assert sources.match("/usr/lib/python3/site-packages/module.py", 5, "<module>") is None
    assert sources.match("/job/module.py", 5, "<module>") == (tmp_path / "module.py").resolve()


def test_select_narrows_the_findings_named_and_an_out_of_memory_is_said(tmp_path):
    project = _project(tmp_path)
    snapshot = _snapshot()
    snapshot["device_traces"][0].append({"action": "oom", "addr": 0, "size": 2 * 2**30, "time_us": 4_100_000,
                                         "frames": FORWARD})
    (tmp_path / "snap.pickle").write_bytes(pickle.dumps(snapshot))
    done = _memlint(tmp_path / "snap.pickle", "--select", "MEM201", cwd=project)
    assert done.returncode == 0, done.stderr
    assert "300.0 MiB allocated at before.py:25, MEM201 at line 26 in its loop (lines 24-26)" in done.stdout
    assert "MEM203" not in done.stdout
    assert done.stdout.splitlines()[-1] == "the history ends with an out-of-memory: 2.00 GiB asked for at before.py:25"
