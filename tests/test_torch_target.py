"""target-torch: fixes that need a newer torch than the project supports are not offered.

The target comes from `[tool.memlint] target-torch` (or `--target-torch`), else from the
project's declared torch requirement (pyproject dependencies, requirements*.txt, a literal
`install_requires` read without running setup.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from memlint.analysis import Facts
from memlint.analysis.requirement import exists_test, since
from memlint.config import ConfigError, load
from memlint.engine import check, fix, parse
from memlint.rules import registry
from memlint.torch_target import DeclaredTargets, TorchVersion, lower_bound

REPO = Path(__file__).resolve().parent.parent
RULES = registry()

AMP = textwrap.dedent("""\
    import torch
    from torch.cuda.amp import autocast

    scaler = torch.cuda.amp.GradScaler()
    for x in loader:
        with autocast():
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
""")


@pytest.mark.parametrize("line,bound", [
    ("torch>=1.8.0  # see the install page", (1, 8)),
    ("torch (>=2.0, <3)", (2, 0)),
    ("torch>=1.13,<2; python_version < '3.8'", (1, 13)),
    ("torch==2.1.*", (2, 1)),
    ("torch[opt]~=2.2", (2, 2)),
    ("Torch >=2.1.0, <2.9.0", (2, 1)),
    ("https://download.pytorch.org/whl/cpu/torch-1.8.1%2Bcpu-cp37-cp37m-linux_x86_64.whl", (1, 8)),
    ("torch", None),
    ("torch<3", None),
    ("torchvision>=0.9.0", None),
    ("https://download.pytorch.org/whl/cpu/torchvision-0.9.1%2Bcpu-cp37-cp37m-linux_x86_64.whl", None),
])
def test_lower_bound_of_a_requirement(line, bound):
    assert lower_bound(line) == (TorchVersion(*bound) if bound else None)


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_declared_in_pyproject_dependencies(tmp_path):
    _write(tmp_path, "pyproject.toml", """\
        [project]
        name = "x"
        dependencies = ["numpy", "torch>=2.1,<3"]
        [project.optional-dependencies]
        old = ["torch>=1.6"]
    """)
    train = _write(tmp_path, "src/pkg/train.py", "import torch\n")
    assert DeclaredTargets().for_file(train) == TorchVersion(2, 1)  # optional extras do not count


def test_declared_in_requirements_files_the_lowest_wins(tmp_path):
    _write(tmp_path, "requirements.txt", "torch>=2.0\nnumpy\n")
    _write(tmp_path, "requirements-cpu.txt", "--extra-index-url https://example.org\ntorch>=1.12\n")
    _write(tmp_path, "setup.cfg", "[flake8]\nmax-line-length = 100\n")  # a project root
    assert DeclaredTargets().for_file(_write(tmp_path, "train.py", "")) == TorchVersion(1, 12)


def test_setup_py_is_read_never_run(tmp_path):
    marker = tmp_path / "ran"
    _write(tmp_path, "setup.py", f"""\
        import pathlib
        pathlib.Path({str(marker)!r}).write_text("setup.py was executed")
        from setuptools import setup
        REQUIRES = ["tqdm", "torch>=1.9.0"]
        setup(name="x", install_requires=REQUIRES)
    """)
    assert DeclaredTargets().for_file(_write(tmp_path, "x/train.py", "")) == TorchVersion(1, 9)
    assert not marker.exists()


def test_a_project_root_without_torch_sets_no_target(tmp_path):
    _write(tmp_path, "requirements.txt", "torch>=1.8\n")  # outside the inner project
    _write(tmp_path, "inner/pyproject.toml", "[project]\nname = 'inner'\ndependencies = ['numpy']\n")
    train = _write(tmp_path, "inner/train.py", "")
    assert DeclaredTargets().for_file(train) is None
    # the nearest declaration wins: an example folder with its own requirements
    _write(tmp_path, "inner/examples/old/requirements.txt", "torch>=1.6\n")
    assert DeclaredTargets().for_file(_write(tmp_path, "inner/examples/old/run.py", "")) == TorchVersion(1, 6)


def test_a_deprecated_api_whose_replacement_is_newer_than_the_target_asks_for_a_branch():
    rule = RULES["MEM402"]
    scaler, autocast = check(AMP, "t.py", [rule], TorchVersion(1, 13)).findings
    assert (scaler.line, autocast.line) == (4, 6)
    # torch.amp's GradScaler came in 2.3: on 1.13 the old class must stay, behind a check
    assert scaler.fix is None
    assert 'call `torch.amp.GradScaler("cuda", ...)` where `hasattr(torch.amp, "GradScaler")`' in scaler.message
    assert "(1.13)" in scaler.message
    assert autocast.fix is not None and autocast.fix.min_torch == TorchVersion(1, 12)
    fixed = fix(AMP, "t.py", [rule], target_torch=TorchVersion(1, 13)).source
    assert "torch.cuda.amp.GradScaler()" in fixed and 'from torch.amp import autocast' in fixed
    assert "torch.amp.GradScaler(\"cuda\")" in fix(AMP, "t.py", [rule], target_torch=TorchVersion(2, 3)).source


def test_below_the_namespace_the_check_asks_for_it_too():
    [scaler] = [f for f in check(AMP, "t.py", [RULES["MEM402"]], TorchVersion(1, 8)).findings if f.line == 4]
    assert '`hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler")`' in scaler.message
    # spelled as the module spells torch, as MEM401's fix writes it
    [aliased] = check("import torch as t\ns = t.cuda.amp.GradScaler()\n", "t.py", [RULES["MEM402"]],
                      TorchVersion(1, 8)).findings
    assert 'call `t.amp.GradScaler("cuda", ...)` where `hasattr(t, "amp") and hasattr(t.amp, "GradScaler")`' in \
        aliased.message


@pytest.mark.parametrize("target,fixed", [(TorchVersion(1, 8), []), (TorchVersion(1, 11), []), (TorchVersion(1, 12), [6]),
                                          (TorchVersion(2, 3), [4, 6]), (None, [4, 6])])
def test_mem402_fixes_where_each_replacement_exists(target, fixed):
    findings = check(AMP, "t.py", [RULES["MEM402"]], target).findings
    assert [f.line for f in findings] == [4, 6]
    assert [f.line for f in findings if f.fix is not None] == fixed


def test_the_branch_mem402_asks_for_is_not_reported():
    source = ('import torch\nscaler = torch.amp.GradScaler("cuda") if hasattr(torch, "amp") and '
              'hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()\n'
              'with (torch.autocast("cuda") if hasattr(torch, "autocast") else torch.cuda.amp.autocast()):\n'
              '    y = m(x)\n')
    assert check(source, "t.py", [RULES["MEM402"]], TorchVersion(1, 8)).findings == []


def test_torch_amp_autocast_needs_torch_1_12_before_it_torch_autocast_is_named():
    source = "import torch\nwith torch.cuda.amp.autocast():\n    y = m(x)\n"
    [old] = check(source, "t.py", [RULES["MEM402"]], TorchVersion(1, 11)).findings
    assert old.fix is None and "call `torch.autocast(\"cuda\", ...)`" in old.message
    assert "needs torch >= 1.12, project targets 1.11" in old.message
    [new] = check(source, "t.py", [RULES["MEM402"]], TorchVersion(1, 12)).findings
    assert new.fix is not None and "call `torch.amp.autocast(\"cuda\", ...)`" in new.message


def test_custom_fwd_needs_torch_2_4():
    source = "import torch\n\n@torch.cuda.amp.custom_fwd\ndef forward(ctx, x):\n    return x\n"
    [old] = check(source, "t.py", [RULES["MEM402"]], TorchVersion(2, 3)).findings
    assert old.fix is None and 'where `hasattr(torch.amp, "custom_fwd")`' in old.message
    [new] = check(source, "t.py", [RULES["MEM402"]], TorchVersion(2, 4)).findings
    assert new.fix is not None


def test_an_import_moved_to_torch_amp_needs_every_name_it_imports():
    source = "from torch.cuda.amp import autocast, GradScaler\ns = GradScaler()\nwith autocast():\n    y = m(x)\n"
    scaler, autocast = check(source, "t.py", [RULES["MEM402"]], TorchVersion(2, 2)).findings
    assert autocast.line == 3 and autocast.fix is None  # the import cannot move: GradScaler stays
    assert scaler.line == 2 and scaler.fix is None


def test_mem401_uses_the_scaler_the_target_torch_has():
    source = textwrap.dedent("""\
        import torch
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = criterion(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
    """)
    [old] = check(source, "t.py", [RULES["MEM401"]], TorchVersion(2, 1)).findings
    assert "`torch.amp.GradScaler(\"cuda\")` (torch 2.3 and later; `torch.cuda.amp.GradScaler()` before)" in old.message
    for target, test in ((TorchVersion(2, 1), 'hasattr(torch.amp, "GradScaler")'),
                         (TorchVersion(1, 8), 'hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler")')):
        fixed = fix(source, "t.py", [RULES["MEM401"]], target_torch=target).source
        made = f'scaler = torch.amp.GradScaler("cuda") if {test} else torch.cuda.amp.GradScaler()\n'
        assert made in fixed and "scaler.scale(loss).backward()" in fixed
        # the fixed code is what the project's torch needs: no other rule asks to change it
        assert check(fixed, "t.py", list(RULES.values()), target).findings == []
        # and on this torch it makes the new class
        torch = pytest.importorskip("torch")
        namespace = {"torch": torch}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (no CUDA here: the scaler disables itself, and says so)
            exec(made, namespace)
        assert type(namespace["scaler"]) is torch.amp.GradScaler
    [new] = check(source, "t.py", [RULES["MEM401"]], TorchVersion(2, 4)).findings
    assert new.fix is not None and new.fix.min_torch == TorchVersion(2, 3)
    assert 'scaler = torch.amp.GradScaler("cuda")' in fix(source, "t.py", [RULES["MEM401"]],
                                                          target_torch=TorchVersion(2, 4)).source


def test_config_key_and_bad_values(tmp_path):
    _write(tmp_path, "pyproject.toml", "[tool.memlint]\ntarget-torch = \"2.1\"\n")
    assert load(tmp_path, RULES).target_torch == TorchVersion(2, 1)
    for bad in ('"latest"', "2.1", '"2"'):
        _write(tmp_path, "pyproject.toml", f"[tool.memlint]\ntarget-torch = {bad}\n")
        with pytest.raises(ConfigError, match="target-torch` must be a torch version"):
            load(tmp_path, RULES)


def _memlint(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """memlint with MEM402 (opt-in) selected too: what a target torch changes is its fixes."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "memlint", "--extend-select", "MEM402", *args], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_cli_reads_the_declared_requirement_and_the_config_overrides_it(tmp_path):
    _write(tmp_path, "requirements.txt", "torch>=1.8.0\n")
    train = _write(tmp_path, "train.py", AMP)
    result = _memlint(tmp_path, "--fix", "train.py")
    assert result.returncode == 1, result.stdout
    assert train.read_text() == AMP  # nothing on torch 1.8 can replace either call: each asks for a branch
    assert result.stdout.count("is newer than the oldest torch the project supports (1.8)") == 2

    diff = _memlint(tmp_path, "--diff", "--target-torch", "2.4", "train.py").stdout
    assert '+scaler = torch.amp.GradScaler("cuda")' in diff
    _write(tmp_path, "pyproject.toml", "[tool.memlint]\ntarget-torch = \"2.4\"\n")
    assert _memlint(tmp_path, "--fix", "train.py").returncode == 0
    assert "torch.amp.GradScaler(\"cuda\")" in train.read_text()


def test_the_cache_follows_the_declared_requirement(tmp_path):
    """The declared torch lives outside the linted file and the configuration: changing it must
    still change what a cached run offers."""
    _write(tmp_path, "pyproject.toml", "[project]\nname = \"p\"\ndependencies = [\"torch>=1.8\"]\n")
    _write(tmp_path, "train.py", AMP)
    old = _memlint(tmp_path, "train.py").stdout
    assert old.count("MEM402 `") == 2 and "[*]" not in old  # on torch 1.8: a branch, no fix
    assert _memlint(tmp_path, "train.py").stdout == old  # the warm run says the same
    _write(tmp_path, "pyproject.toml", "[project]\nname = \"p\"\ndependencies = [\"torch>=2.4\"]\n")
    assert _memlint(tmp_path, "train.py").stdout.count("MEM402 [*]") == 2


def test_cli_bad_target_is_a_one_line_error(tmp_path):
    _write(tmp_path, "train.py", AMP)
    result = _memlint(tmp_path, "--target-torch", "two", "train.py")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        'memlint: error: --target-torch must be a torch version such as "2.1", not \'two\'']


@pytest.mark.parametrize("call,target,offered", [
    ("checkpoint(block, x)", TorchVersion(1, 10), False), ("checkpoint(block, x)", TorchVersion(1, 11), True),
    ("checkpoint_sequential(blocks, 2, x)", TorchVersion(1, 13), False),
    ("checkpoint_sequential(blocks, 2, x)", TorchVersion(2, 0), True),
])
def test_use_reentrant_exists_from_torch_1_11_and_2_0(call, target, offered):
    source = f"from torch.utils.checkpoint import checkpoint, checkpoint_sequential\ny = {call}\n"
    [finding] = check(source, "t.py", [RULES["MEM602"]], target).findings
    assert (finding.fix is not None) is offered


def test_an_api_release_is_read_from_the_most_specific_entry():
    assert since("torch.amp.GradScaler") == TorchVersion(2, 3)  # not its namespace's 1.12
    assert since("torch.amp.GradScaler.scale") == TorchVersion(2, 3)
    assert since("torch.amp.autocast_mode") == TorchVersion(1, 12)
    assert since("torch.nn.Linear") is None


def test_the_check_before_a_newer_api_tests_each_part_newer_than_the_target():
    assert exists_test("torch.amp.GradScaler", "t", TorchVersion(1, 8)) == \
        'hasattr(t, "amp") and hasattr(t.amp, "GradScaler")'
    assert exists_test("torch.amp.GradScaler", "torch", TorchVersion(2, 1)) == 'hasattr(torch.amp, "GradScaler")'
    # code behind the check needs no newer torch; the same call unchecked needs 2.3
    test = exists_test("torch.amp.GradScaler", "torch", TorchVersion(1, 8))
    checked = f'import torch\ns = torch.amp.GradScaler("cuda") if {test} else torch.cuda.amp.GradScaler()\n'
    assert Facts(parse(checked)).requirement.needs is None
    unchecked = 'import torch\ns = torch.amp.GradScaler("cuda")\n'
    assert Facts(parse(unchecked)).requirement.needs == TorchVersion(2, 3)
