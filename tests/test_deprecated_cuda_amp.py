"""MEM402 cases beyond the rule's examples: import forms, arguments that cannot be mapped."""

from __future__ import annotations

import pytest

from memlint.engine import check, fix
from memlint.rules import registry

RULE = registry()["MEM402"]


def _fix(source: str) -> str:
    return fix(source, "t.py", [RULE]).source


def _findings(source: str):
    return check(source, "t.py", [RULE]).findings


def test_module_alias_import_moves():
    src = "import torch.cuda.amp as amp\nwith amp.autocast():\n    pass\n"
    assert _fix(src) == "import torch.amp as amp\nwith amp.autocast(\"cuda\"):\n    pass\n"


def test_star_args_are_reported_without_fix():
    src = "import torch\nwith torch.cuda.amp.autocast(*flags):\n    pass\n"
    [finding] = _findings(src)
    assert finding.fix is None


def test_points_at_each_call_site_not_the_import():
    src = "from torch.cuda.amp import autocast\n\nwith autocast():\n    pass\nwith autocast(False):\n    pass\n"
    findings = _findings(src)
    assert [(f.line, f.column) for f in findings] == [(3, 6), (5, 6)]
    assert _fix(src) == ("from torch.amp import autocast\n\nwith autocast(\"cuda\"):\n    pass\n"
                         "with autocast(\"cuda\", enabled=False):\n    pass\n")


def test_from_torch_import_cuda_uses_torch_spelling():
    src = "import torch\nfrom torch import cuda\nwith cuda.amp.autocast(dtype=torch.float16):\n    pass\n"
    assert _fix(src) == ("import torch\nfrom torch import cuda\n"
                         "with torch.amp.autocast(\"cuda\", dtype=torch.float16):\n    pass\n")


def test_mixed_import_keeps_other_names():
    src = "from torch.cuda.amp import autocast, common\nwith autocast():\n    pass\n"
    [finding] = _findings(src)
    assert finding.fix is None


def test_kwargs_kept():
    src = "import torch\ns = torch.cuda.amp.GradScaler(**cfg)\n"
    assert _fix(src) == "import torch\ns = torch.amp.GradScaler(\"cuda\", **cfg)\n"


def test_noqa():
    src = "import torch\ns = torch.cuda.amp.GradScaler()  # noqa: MEM402\n"
    assert not _findings(src)


def test_fixed_code_runs_on_cpu_torch():
    torch = pytest.importorskip("torch")
    src = ("import torch\nscaler = torch.cuda.amp.GradScaler(enabled=False)\n"
           "with torch.cuda.amp.autocast(False):\n    y = torch.ones(2) * 2\n")
    fixed = _fix(src)
    assert "torch.amp.autocast(\"cuda\", enabled=False)" in fixed
    namespace: dict = {}
    exec(compile(fixed, "t.py", "exec"), namespace)
    assert namespace["y"].dtype == torch.float32


def test_the_message_says_the_warning_shows_once_per_call_site():
    [finding] = _findings("import torch\ns = torch.cuda.amp.GradScaler()\n")
    assert "once for this call site" in finding.message and "every use" not in finding.message


def test_a_file_that_spells_no_amp_api_is_not_read_for_it():
    from memlint.engine import wanted_rules

    rule = registry()["MEM402"]
    assert wanted_rules("import torch\nx = torch.zeros(3).cuda()\n", [rule]) == []
    for spelled in ("from torch.cuda import amp\n", "from helpers import autocast\n", "from helpers import GradScaler\n",
                    "from helpers import custom_fwd\n", "from helpers import custom_bwd\n"):
        assert wanted_rules(spelled, [rule]) == [rule]
