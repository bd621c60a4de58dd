"""Import-aware names: what a name or call means, from the module's own imports."""

from __future__ import annotations

import libcst as cst
import pytest

from memlint.analysis.torchnames import TorchNames


def _resolve(source: str, expression: str):
    return TorchNames(cst.parse_module(source)).qualified_name(cst.parse_expression(expression))


@pytest.mark.parametrize("source,expression,expected", [
    ("import torch", "torch.randn", "torch.randn"),
    ("import torch as t", "t.randn", "torch.randn"),
    ("import torch as t", "torch.randn", None),
    ("from torch import randn", "randn", "torch.randn"),
    ("from torch import randn as rn", "rn", "torch.randn"),
    ("import torch.nn as nn", "nn.Linear", "torch.nn.Linear"),
    ("import torch.nn", "torch.nn.Linear", "torch.nn.Linear"),
    ("from torch.cuda.amp import autocast", "autocast", "torch.cuda.amp.autocast"),
    ("from torch.cuda import amp", "amp.GradScaler", "torch.cuda.amp.GradScaler"),
    ("def f():\n    import torch as th\n", "th.zeros", "torch.zeros"),
    ("try:\n    import torch\nexcept ImportError:\n    pass\n", "torch.ones", "torch.ones"),
    ("from . import torch", "torch.randn", None),
    ("import numpy as np", "np.random.randn", "numpy.random.randn"),
    ("randn = 1", "randn", None),
    # rebound at module level after the import: unsure, so unresolved
    ("from torch import randn\nrandn = my_randn", "randn", None),
    ("from torch import randn\ndef randn(*a):\n    pass\n", "randn", None),
    # two meanings for one name: unresolved
    ("import torch as t\nimport tensorflow as t", "t.zeros", None),
    ("import torch", "model(x)", None),
])
def test_qualified_name(source, expression, expected):
    assert _resolve(source, expression) == expected


def test_local_spelling_of_a_qualified_name():
    names = TorchNames(cst.parse_module("import torch as t\nfrom torch import randn\n"))
    assert names.local_name_for("torch.empty") == "t.empty"
    assert names.local_name_for("torch.randn") == "randn"
    assert TorchNames(cst.parse_module("from torch import randn")).local_name_for("torch.empty") is None


def test_an_answer_is_never_given_for_another_expression_made_at_the_same_address():
    names = TorchNames(cst.parse_module("import torch as t\nimport numpy as np\n"))
    for _ in range(200):  # temporary expressions: CPython reuses their addresses at once
        assert names.qualified_name(cst.parse_expression("t.randn")) == "torch.randn"
        assert names.qualified_name(cst.parse_expression("np.zeros")) == "numpy.zeros"
        assert names.call_name(cst.parse_expression("t.ones(1)")) == "torch.ones"
