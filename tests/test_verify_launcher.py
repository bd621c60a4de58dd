"""Scripts started through a launcher: torchrun's processes measured as one run, a fixture's
verify.toml, and the command line's --launcher. The end-to-end test runs the MEM601 fixture's
DDP script under torchrun with two CPU processes (gloo)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.verify.measure import Launcher, Measurement, merge_ranks
from memlint.verify.variants import LaunchError, launchers

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20


def test_ranks_merge_into_one_run_per_gpu():
    rank0 = {"status": "ok", "seconds": 2.0, "rss_start": 100, "rss_peak": 300,
             "devices": [[0, 500 * MiB, 600 * MiB], [1, 0, 0]], "peak_at": {"rank": 0}}
    rank1 = {"status": "ok", "seconds": 3.0, "rss_start": 100, "rss_peak": 250,
             "devices": [[0, 2 * MiB, 2 * MiB], [1, 480 * MiB, 512 * MiB]]}
    merged = merge_ranks([rank0, rank1])
    assert merged["devices"] == [[0, 502 * MiB, 602 * MiB], [1, 480 * MiB, 512 * MiB]]
    assert merged["device_peak"] == 502 * MiB and merged["seconds"] == 3.0 and merged["processes"] == 2
    assert (merged["rss_start"], merged["rss_peak"]) == (200, 550) and merged["peak_at"] == {"rank": 0}


def test_the_worst_rank_decides_the_status():
    crashed = {"status": "oom", "error": "OutOfMemoryError: CUDA out of memory", "seconds": 1.0}
    merged = merge_ranks([{"status": "ok", "seconds": 2.0}, crashed])
    assert (merged["status"], merged["error"]) == ("oom", "OutOfMemoryError: CUDA out of memory")
    assert merge_ranks([]) == {}


def test_imbalance_is_over_the_gpus_a_run_used():
    def run(*peaks):
        return Measurement("ok", 0, "device", max(peaks), devices=[[i, p, p] for i, p in enumerate(peaks)])

    assert run(400, 100).imbalance() == 0.75
    assert run(300, 300, 0, 0).imbalance() == 0.0  # two of four GPUs used, evenly
    assert run(300, 0).imbalance() is None and Measurement("ok", 0, "host", 1).imbalance() is None


def test_torchrun_command_uses_the_interpreter_and_a_free_port():
    assert Launcher("torchrun", 2).command("/opt/py") == [
        "/opt/py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


def test_a_fixture_names_its_launcher_per_script(tmp_path):
    (tmp_path / "verify.toml").write_text('[after]\nlauncher = "torchrun"\nnproc-per-node = 2\n')
    found = launchers(tmp_path, None)
    assert found == {"before": None, "after": Launcher("torchrun", 2)}
    default = Launcher("torchrun", None)
    assert launchers(tmp_path / "missing", default) == {"before": default, "after": default}


@pytest.mark.parametrize("text", ['[after]\nlauncher = "mpirun"\n', '[after]\nlauncher = "torchrun"\nnproc-per-node = 0\n',
                                  '[middle]\nlauncher = "torchrun"\n', "[after\n"])
def test_a_verify_toml_that_cannot_be_used_is_an_error(tmp_path, text):
    (tmp_path / "verify.toml").write_text(text)
    with pytest.raises(LaunchError):
        launchers(tmp_path, None)


def test_nproc_without_torchrun_is_a_usage_error():
    done = subprocess.run([sys.executable, "-m", "memlint.verify", str(ROOT / "fixtures"), "--nproc-per-node", "2"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--launcher torchrun" in done.stderr


def test_dataparallel_fixture_against_ddp_under_torchrun_on_the_cpu():
    """before.py runs as one process; after.py under torchrun as two (gloo), each training on half
    of every batch: the losses printed are the same as DataParallel's."""
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "-m", "memlint.verify", str(ROOT / "fixtures" / "MEM601-dataparallel"),
                           "--device", "cpu", "--repeat", "1", "-q", "--output-format", "json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)["results"][0]
    assert result["launcher"] == {"before": None, "after": "torchrun --nproc-per-node 2"}
    before, after = result["before_runs"][0], result["after_runs"][0]
    assert (before["status"], before["processes"]) == ("ok", 1)
    assert (after["status"], after["processes"]) == ("ok", 2)
    losses = [line for line in before["stdout_tail"].splitlines() if line.startswith("step")]
    assert len(losses) == 4 and losses == [line for line in after["stdout_tail"].splitlines() if line.startswith("step")]
    assert result["claims"][0]["verdict"] == "inconclusive"  # no GPU: no imbalance to measure
