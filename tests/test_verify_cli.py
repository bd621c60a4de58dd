"""`python -m memlint.verify`: exit codes, the table, JSON, fixtures folders, missing torch/matplotlib."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch (the verify extra)")
on_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="host RSS is read from /proc")

# MEM101 with a safe fix: a 32 MiB tensor allocated afresh each step while the previous one is alive
ALLOC = """\
import os
import sys

import torch

n = int(os.environ.get("MEMLINT_SCALE", "1")) * 2048
device = "cuda" if torch.cuda.is_available() else "cpu"
total = 0.0
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 4):
    noise = torch.randn(n, n, device=device)
    total += noise.sum().item()
print(f"steps {step + 1} total {total:.3f}")
"""
# MEM101's fix makes this crash: the refilled buffer is a leaf that requires grad
# A module whose forward keeps its input: MEM101 does not look inside `model(x)` (a callable
# instance), so it offers a "safe" fix that makes every kept input the same buffer. Running
# both versions shows it: the verifier exists for what static analysis cannot see.
KEEPS_INPUT = """\
import torch


class Keeper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.kept = []

    def forward(self, x):
        self.kept.append(x)
        return x.sum()


model = Keeper()
side = int("64")  # not a literal shape: MEM101 stays silent for small literal ones
for step in range(3):
    w = torch.randn(side, side)
    out = model(w)
assert not torch.equal(model.kept[0], model.kept[1]), "every kept input is the same tensor"
print("done")
"""


def verify(*args, env=None, cwd=None):
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), (env or {}).pop(
        "PYTHONPATH", ""), os.environ.get("PYTHONPATH", "")]))}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "memlint.verify", *map(str, args)], capture_output=True,
                          text=True, env=full_env, cwd=cwd or ROOT, timeout=300)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_usage_errors_exit_2_in_one_line(tmp_path):
    done = verify(tmp_path / "missing.py")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no such file" in done.stderr
    done = verify(write(tmp_path, "a.py", "x = 1\n"), "--repeat", "0")
    assert done.returncode == 2 and "--repeat" in done.stderr and "Traceback" not in done.stderr
    for timeout in ("nan", "inf", "-1"):  # nan compares false to everything: it would disable the timeout
        done = verify(write(tmp_path, "a.py", "x = 1\n"), "--timeout", timeout)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--timeout" in done.stderr, done.stderr
    done = verify(write(tmp_path, "a.py", "x = 1\n"), "--jobs", "0")
    assert done.returncode == 2 and "--jobs" in done.stderr and done.stderr.count("\n") == 1
    done = verify(write(tmp_path, "a.py", "x = 1\n"), "--bogus")
    assert done.returncode == 2 and "unrecognized" in done.stderr and "Traceback" not in done.stderr
    done = verify(write(tmp_path, "bad.py", "import torch\nfor x in :\n"))
    assert done.returncode == 2 and "cannot parse" in done.stderr
    done = verify(tmp_path)
    assert done.returncode == 2 and "no fixtures" in done.stderr
    write(tmp_path, "fx/MEM101-x/before.py", "print(1)\n")
    write(tmp_path, "fx/MEM101-x/after.py", "print(1)\n")
    done = verify(tmp_path / "fx", "--select", "MEM2")
    assert done.returncode == 2 and "no fixture matches --select MEM2" in done.stderr
    done = verify(write(tmp_path, "s.py", ALLOC), "--python", tmp_path / "no-python")
    assert done.returncode == 2 and "cannot run" in done.stderr and done.stderr.count("\n") == 1
    done = verify(write(tmp_path, "s.py", ALLOC), "--select", "MEM999")
    assert done.returncode == 2 and "unknown rule code MEM999" in done.stderr


def test_help_exits_0():
    done = verify("--help")
    assert done.returncode == 0 and "--unsafe-fixes" in done.stdout


def test_nothing_fixable_says_so_and_exits_0(tmp_path):
    done = verify(write(tmp_path, "clean.py", "import torch\nx = torch.zeros(3)\nprint(x)\n"))
    assert done.returncode == 0, done.stderr
    assert "nothing to verify (no findings)" in done.stdout
    done = verify(write(tmp_path, "clean.py", "print(1)\n"), "--output-format", "json")
    data = json.loads(done.stdout)
    assert done.returncode == 0 and data["results"] == [] and data["message"] == "nothing to verify (no findings)"


def test_unsafe_fix_is_skipped_without_unsafe_fixes(tmp_path):
    script = write(tmp_path, "moved.py", """
        import torch
        side = int("64")
        for _ in range(3):
            x = torch.rand(side, side).cuda()
            print(x.sum().item())
    """)
    done = verify(script)
    assert done.returncode == 0
    assert "no finding has a fix to verify" in done.stdout and "--unsafe-fixes" in done.stdout


def test_torch_missing_is_one_line_naming_the_extra(tmp_path):
    fake = write(tmp_path, "fake/torch.py", "raise ImportError('No module named torch (simulated)')\n").parent
    done = verify(write(tmp_path, "s.py", ALLOC), env={"PYTHONPATH": str(fake)})
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "pip install 'memlint[verify]'" in done.stderr


def test_matplotlib_missing_for_plot_is_one_line(tmp_path):
    fake = write(tmp_path, "fake/matplotlib.py", "raise ImportError('simulated')\n").parent
    done = verify(write(tmp_path, "s.py", ALLOC), "--plot", tmp_path / "p.png", env={"PYTHONPATH": str(fake)})
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "matplotlib" in done.stderr


@needs_torch
@on_linux
def test_json_confirms_mem101_on_host_memory_and_plots(tmp_path):
    script = write(tmp_path, "train.py", ALLOC)
    out = tmp_path / "memory.png"
    plot = ["--plot", out] if HAS_MATPLOTLIB else []
    done = verify(script, "--device", "cpu", "--repeat", "1", "--output-format", "json", *plot, "--", "3")
    assert done.returncode == 0, done.stderr
    if plot:  # host RSS sampled during the measured runs
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"wrote {out}" in done.stderr
    data = json.loads(done.stdout)
    assert data["version"] == 1 and data["repeat"] == 1
    assert data["device"]["kind"] == "cpu" and data["device"]["memory"] == "host"
    assert [(r["code"], r["line"]) for r in data["results"]] == [("MEM101", 10), ("all", None)]
    first = data["results"][0]
    assert first["verdict"] == "confirmed" and first["safety"] == "safe"
    claim = first["claims"][0]
    assert set(claim) >= {"claim", "metric", "unit", "before", "after", "ratio", "verdict", "reason"}
    assert claim["claim"] == "peak-lower" and claim["ratio"] < 0.8
    run = first["before_runs"][0]
    assert run["status"] == "ok" and run["memory"] == "host" and run["stdout_tail"].startswith("steps 3 ")
    assert data["summary"] == {"confirmed": 2}
    assert "[2/2]" in done.stderr  # progress: one line per run


@needs_torch
def test_refuted_fix_exits_1_and_shows_the_crash(tmp_path):
    done = verify(write(tmp_path, "keeps.py", KEEPS_INPUT), "--device", "cpu", "--repeat", "1", "-q")
    assert done.returncode == 1, done.stderr
    assert "refuted" in done.stdout
    assert "every kept input is the same tensor" in done.stdout
    assert "no GPU" in done.stdout or "--device cpu" in done.stdout
    assert done.stderr == ""  # -q: no progress


@needs_torch
@on_linux
def test_fixtures_folder_runs_before_against_after_with_scale(tmp_path):
    before = ALLOC
    after = ALLOC.replace("total = 0.0\n", "total = 0.0\nnoise = torch.empty(n, n, device=device)\n").replace(
        "    noise = torch.randn(n, n, device=device)", "    noise.normal_()")
    write(tmp_path, "fixtures/MEM101-tensor-alloc-in-loop/before.py", before)
    write(tmp_path, "fixtures/MEM101-tensor-alloc-in-loop/after.py", after)
    write(tmp_path, "fixtures/not-a-fixture/before.py", "raise SystemExit(1)\n")
    done = verify(tmp_path / "fixtures", "--device", "cpu", "--repeat", "2", "--scale", "1", "-q", "--jobs", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "up to 2 runs at once" in lines[0]
    row = next(line for line in lines if line.startswith("MEM101"))
    assert "MEM101-tensor-alloc-in-loop" in row and "peak-lower" in row and row.endswith("confirmed")
    assert "host memory" in lines[0]
    assert not any("not-a-fixture" in line for line in lines)


@needs_torch
@on_linux
def test_what_a_killed_run_left_outside_its_session_is_killed(tmp_path):
    """The child dies at once (as under the kernel's OOM killer): its setsid grandchild is
    re-parented to `memlint verify`, which kills it."""
    pid_file = tmp_path / "escaped.pid"
    write(tmp_path, "fixtures/MEM204-x/before.py", f"""
        import os, signal, subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        open({str(pid_file)!r}, "w").write(str(child.pid))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    write(tmp_path, "fixtures/MEM204-x/after.py", "print('fine')\n")
    done = verify(tmp_path / "fixtures", "--device", "cpu", "--repeat", "1", "-q")
    assert "MEM204" in done.stdout, done.stderr
    pid = int(pid_file.read_text())
    try:
        with open(f"/proc/{pid}/stat") as handle:
            alive = handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        alive = False
    if alive:
        os.kill(pid, 9)
    assert not alive, "the grandchild of a killed run outlived memlint verify"


@needs_torch
def test_nothing_measured_exits_1_and_says_why_without_quoting_unrelated_stderr(tmp_path):
    script = write(tmp_path, "train.py", ALLOC.replace(
        'device = "cuda"', 'print("warning: an unrelated line", file=sys.stderr)\nsys.exit(3)\ndevice = "cuda"'))
    done = verify(script, "--device", "cpu", "--repeat", "1", "-q")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "nothing could be measured: the original crashed (exit 3): the script called sys.exit(3)" in done.stderr
    assert "unrelated" not in done.stderr and "inconclusive" in done.stdout
    reasons = [line for line in done.stdout.splitlines() if "(peak-lower):" in line]
    assert reasons and all("sys.exit(3)" in line and "unrelated" not in line for line in reasons)


@needs_torch
def test_gradient_fixtures_are_confirmed_and_right_gradients_stay_unconfirmed(tmp_path):
    """MEM301 (no zero_grad in the loop) and MEM302 (zero_grad before the step) leave finite,
    non-zero gradients that are wrong: the gradient error sees it. Two scripts whose gradients
    are both right must not confirm anything."""
    for name in ("MEM301-missing-zero-grad", "MEM302-zero-grad-before-step"):
        for side in ("before.py", "after.py"):
            write(tmp_path, f"fixtures/{name}/{side}", (ROOT / "fixtures" / name / side).read_text())
    fixed = (ROOT / "fixtures" / "MEM301-missing-zero-grad" / "after.py").read_text()
    cleared_first = fixed.replace("optimizer.zero_grad()\nfor step in range(5):\n",
                                  "for step in range(5):\n    optimizer.zero_grad()\n")
    assert cleared_first != fixed
    write(tmp_path, "fixtures/MEM301-right/before.py", cleared_first)
    write(tmp_path, "fixtures/MEM301-right/after.py", fixed)
    done = verify(tmp_path / "fixtures", "--device", "cpu", "--repeat", "1", "-q", "--output-format", "json")
    assert done.returncode == 0, done.stderr
    claims = {r["fixture"]: r["claims"][0] for r in json.loads(done.stdout)["results"]}
    wrong, lost, right = (claims["MEM301-missing-zero-grad"], claims["MEM302-zero-grad-before-step"],
                          claims["MEM301-right"])
    assert wrong["verdict"] == lost["verdict"] == "confirmed"
    assert wrong["metric"] == lost["metric"] == right["metric"] == "grad error"
    assert wrong["before"] > 2.0 and lost["before"] == 1.0 and wrong["after"] == lost["after"] == 0.0
    assert (right["verdict"], right["before"], right["after"]) == ("inconclusive", 0.0, 0.0)


def test_linter_never_imports_torch():
    code = ("import sys, memlint, memlint.engine, memlint.rules, memlint.verify.cli, memlint.verify.judge, "
            "memlint.verify.report, memlint.verify.variants, memlint.verify.plot\n"
            "memlint.rules.registry(); assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr


@pytest.mark.gpu
def test_gpu_mem101_8192_float32_peak_halves(tmp_path):
    """On a GPU: 8192x8192 float32 noise in a loop, 512 MiB peak -> 256 MiB with one buffer."""
    from memlint.verify.measure import probe

    if not probe().get("cuda"):
        pytest.skip("needs a CUDA GPU")
    done = verify(write(tmp_path, "train.py", ALLOC), "--device", "cuda", "--repeat", "2", "--scale", "4",
                  "--output-format", "json", "--plot", tmp_path / "gpu.png")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["device"]["kind"] == "cuda"
    claim = data["results"][0]["claims"][0]
    assert claim["verdict"] == "confirmed"
    MiB = 2**20
    assert abs(claim["before"] - 512 * MiB) < 16 * MiB and abs(claim["after"] - 256 * MiB) < 16 * MiB
    assert (tmp_path / "gpu.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.gpu
def test_gpu_out_of_memory_avoided_by_the_fix_confirms(tmp_path):
    """Capped at 400 MiB, two 256 MiB tensors alive at once run out of memory; one buffer fits."""
    from memlint.verify.measure import probe

    if not probe().get("cuda"):
        pytest.skip("needs a CUDA GPU")
    capped = ALLOC.replace('device = "cuda" if torch.cuda.is_available() else "cpu"\n',
                           'device = "cuda"\ntorch.cuda.set_per_process_memory_fraction(\n'
                           '    400 * 2**20 / torch.cuda.get_device_properties(0).total_memory)\n')
    done = verify(write(tmp_path, "capped.py", capped), "--device", "cuda", "--repeat", "1", "--scale", "4",
                  "--output-format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    first = data["results"][0]
    assert first["before_runs"][0]["status"] == "oom"
    assert first["after_runs"][0]["status"] == "ok"
    assert first["verdict"] == "confirmed" and "out-of-memory avoided" in first["claims"][0]["reason"]


@pytest.mark.gpu
def test_gpu_gradient_and_missing_del_fixtures_confirmed_with_the_peak_line():
    """Scale 8: MEM301/MEM302 by the gradient error, MEM204 by its peak, which is at its line."""
    from memlint.verify.measure import probe

    if not probe().get("cuda"):
        pytest.skip("needs a CUDA GPU")
    done = verify(ROOT / "fixtures", "--select", "MEM204,MEM301,MEM302", "--device", "cuda", "--scale", "8",
                  "--repeat", "2", "--output-format", "json", "-q")
    assert done.returncode == 0, done.stderr
    results = {r["code"]: r for r in json.loads(done.stdout)["results"]}
    assert {code: r["verdict"] for code, r in results.items()} == \
        {"MEM204": "confirmed", "MEM301": "confirmed", "MEM302": "confirmed"}
    source = (ROOT / "fixtures" / "MEM204-missing-del" / "before.py").read_text().splitlines()
    logits = next(n for n, line in enumerate(source, 1) if "logits = model(tokens)" in line)
    where = results["MEM204"]["peak_attribution"]
    assert where["before"]["lines"][0]["line"] == logits and where["before"]["lines"][0]["codes"] == ["MEM204"]
    assert f"before.py:{logits}" in where["summary"] and "where MEM204 points" in where["summary"]
    claim = results["MEM204"]["claims"][0]
    assert claim["before"] - claim["after"] >= 120 * 2**20  # one 128 MiB batch of logits fewer at the peak
