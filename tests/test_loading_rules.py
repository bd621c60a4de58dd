"""Loading rules beyond their examples: MEM505 follows the project's target torch, the API data
of MEM503 is the installed torch's and is never imported at lint time, and the facts behind
MEM502/504/602 (calls through wrappers, out-of-memory handlers)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from memlint.analysis import Facts
from memlint.analysis.apicalls import ABSENT, GIVEN, UNKNOWN
from memlint.analysis.torchapi import DATA, REMOVED, names_absent_api, torch_api
from memlint.engine import check, fix
from memlint.rules import registry
from memlint.rules.nonexistent_torch_api import NEVER_TORCH, REFILL
from memlint.torch_target import TorchVersion

ROOT = Path(__file__).resolve().parents[1]
RULES = registry()
LOAD = "import torch\nstate = torch.load(path, map_location=\"cpu\")\n"


def _codes(source, code, target=None):
    return [f.code for f in check(source, "x.py", [RULES[code]], target_torch=target).findings]


@pytest.mark.parametrize("target,reported", [(None, True), (TorchVersion(1, 8), True), (TorchVersion(2, 5), True),
                                             (TorchVersion(2, 6), False), (TorchVersion(2, 9), False)])
def test_weights_only_matters_only_before_torch_2_6(target, reported):
    assert _codes(LOAD, "MEM505", target) == (["MEM505"] if reported else [])


def test_weights_only_fix_needs_torch_1_13():
    old = check(LOAD, "x.py", [RULES["MEM505"]], target_torch=TorchVersion(1, 12)).findings
    assert old[0].fix is None and "needs torch >= 1.13" in old[0].message
    fixed = fix(LOAD, "x.py", [RULES["MEM505"]], unsafe=True, target_torch=TorchVersion(1, 13)).source
    assert "weights_only=True" in fixed


def test_target_torch_from_the_project_silences_mem505(tmp_path):
    (tmp_path / "requirements.txt").write_text("torch>=2.6\n")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "requirements.txt").write_text("torch>=2.0\n")
    for folder in (tmp_path, tmp_path / "old"):
        (folder / "load.py").write_text(LOAD)
    done = subprocess.run([sys.executable, "-m", "memlint", "--select", "MEM505", "--output-format", "json",
                           "--exit-zero", str(tmp_path / "load.py"), str(tmp_path / "old" / "load.py")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [Path(f["filename"]).parent.name for f in json.loads(done.stdout)] == ["old"]


def test_api_data_is_the_installed_torch():
    torch = pytest.importorskip("torch")
    data = json.loads(DATA.read_text(encoding="utf-8"))
    if torch.__version__.split("+")[0] != data["torch"]:
        pytest.skip(f"the data is torch {data['torch']}'s")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "torch_api.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_named_corrections_hold_for_the_recorded_torch():
    api = torch_api()
    for wrong, right in NEVER_TORCH.items():
        assert not api.has(wrong) and api.has(right)
    for factory, (method, _) in REFILL.items():
        assert api.has(f"torch.{factory}") and not api.has(f"torch.{factory}_") and api.has(f"torch.Tensor.{method}")
    # what the data must know whole, and what it must leave alone
    assert api.has("torch.backends.cudnn.benchmark") and api.has("torch.utils.tensorboard")
    assert api.has("torch.onnx")  # served lazily
    for removed, replacement in REMOVED.items():  # stubs that raise since torch 2.0: nothing can call them
        assert not api.has(removed) and api.has(replacement)
    assert not api.known_module("torch.ops") and not api.known_module("torch._C")


@pytest.mark.parametrize("example", RULES["MEM503"].INVALID, ids=lambda e: e.code.splitlines()[-1][:40])
def test_what_mem503_reports_shows_in_pythons_own_ast(example):
    """A test module is parsed by LibCST only where its AST names something torch lacks: each
    of MEM503's examples does, so no finding of it is ever skipped."""
    assert names_absent_api(ast.parse(example.code))
    assert [f.code for f in check(example.code, "tests/test_x.py", [RULES["MEM503"]]).findings]


@pytest.mark.parametrize("source,absent", [
    ("import torch\nx = torch.cuda.memory_reserved()\ny = torch.nn.functional.relu(x)\n", False),
    ("import torch\nx = torch._C._cuda_getDeviceCount()\n", False),  # private: never judged
    ("import mylib as torch\nimport numpy as np\ntorch.randn_(x)\nnp.randn_(x)\n", False),
    ("from torch.nn import Linear, functional\nfrom .torch import randn_\n", False),
    ("def test_it():\n    import torch.cuda as tc\n    tc.memory_cache()\n", True),  # an import in a function
    ("from torch import nn\nlayer = nn.Batchnorm2d(3)\n", True),
    ("from torch.nn import Batchnorm2d\n", True),
    ("import torch\nf = torch.npu.device_count\n", True),  # absent from the data; MEM503 decides
])
def test_names_absent_from_torch_read_off_the_ast(source, absent):
    assert names_absent_api(ast.parse(source)) is absent


def test_linting_never_imports_torch():
    code = ("import sys\nfrom memlint import lint_source\n"
            "lint_source('import torch\\ntorch.cuda.memory_cache()\\n', 'x.py', select=['ALL'])\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def _facts(source):
    return Facts(cst.parse_module(textwrap.dedent(source)))


def test_wrappers_of_wrappers_reach_the_api():
    facts = _facts("""
        import torch

        def read(path, map_location=None):
            return torch.load(path, map_location=map_location)

        def restore(path, **kwargs):
            return read(path, **kwargs)

        a = restore(p)
        b = restore(p, map_location="cpu")
        c = restore(p, **options)
        d = read(p, "cpu")
    """)
    sites = facts.apicalls.sites("torch.load", "map_location", 1)
    assert [(s.via, s.given) for s in sites] == [("restore", ABSENT), ("restore", GIVEN), ("restore", UNKNOWN),
                                                  ("read", GIVEN)]


def test_oom_path_of_a_broad_handler():
    facts = _facts("""
        import torch
        try:
            out = model(x)
        except RuntimeError as e:
            if "out of memory" not in str(e):
                raise
            log(e)
            out = model(x[:1])
        try:
            out = model(x)
        except (ValueError, RuntimeError) as e:
            out = model(x.double())
    """)
    (handler,) = facts.oom.handlers
    assert [cst.Module([]).code_for_node(c) for c in facts.oom.retries(handler)] == ["model(x[:1])"]


def test_a_name_spelled_with_compatibility_characters_is_the_name_python_reads():
    """Python reads identifiers NFKC-normalised: `KLDivLoss` written with the Kelvin sign is
    `torch.nn.KLDivLoss`, which exists; MEM503 reads it so too, in a test module or not."""
    source = "import torch\nloss = torch.nn.\u212aLDivLoss()\n"
    assert ast.parse(source).body[1].value.func.attr == "KLDivLoss"  # type: ignore[attr-defined]
    for path in ("x.py", "tests/test_x.py"):
        assert check(source, path, [RULES["MEM503"]]).findings == []


HYDRATE = """
import torch

class {name}{bases}:
    @classmethod
    def from_state(cls, config, state):
        made = cls(**config)
        made.load_state_dict(state)
        return made

    @classmethod
    def hydrate(cls, path):
        pkg = torch.load(path)
        return {name}.from_state(pkg["config"], pkg["state"])
"""


def test_a_model_its_class_method_builds_is_on_the_cpu_when_loaded():
    model = check(HYDRATE.format(name="Unet", bases="(torch.nn.Module)"), "m.py", [RULES["MEM502"]]).findings
    vocab = check(HYDRATE.format(name="Vocab", bases=""), "m.py", [RULES["MEM502"]]).findings
    assert [f.code for f in model] == ["MEM502"] and "still on the CPU" in model[0].message
    assert "still on the CPU" not in "".join(f.message for f in vocab)  # no model: nothing said of where it is


def test_a_load_passed_inline_to_a_function_that_loads_it_is_followed():
    inline = HYDRATE.format(name="Unet", bases="(torch.nn.Module)").replace(
        "        pkg = torch.load(path)\n        return Unet.from_state(pkg[\"config\"], pkg[\"state\"])",
        "        return Unet.from_state(config_of(path), torch.load(path))")
    assert "torch.load(path))" in inline
    assert [f.code for f in check(inline, "m.py", [RULES["MEM502"]]).findings] == ["MEM502"]


@pytest.mark.parametrize("target,reported", [(None, True), (TorchVersion(1, 7), False), (TorchVersion(1, 8), True)])
def test_a_removed_linalg_function_is_reported_where_its_replacement_exists(target, reported):
    """`torch.symeig` raises since torch 2.0; `torch.linalg.eigh` came in 1.8. A project that
    still supports 1.7 cannot switch, and is left alone."""
    source = "import torch\nd, Q = torch.symeig(m, eigenvectors=True)\n"
    assert (_codes(source, "MEM503", target) == ["MEM503"]) is reported
