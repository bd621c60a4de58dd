"""MEM101 beyond its examples: each factory's buffer and refill, and when no fix is offered.

Shapes are names (`n`), not literals: MEM101 is silent for literal shapes under 2**20 elements."""

from __future__ import annotations

import textwrap

import pytest

from memlint.engine import check, fix
from memlint.findings import Safety
from memlint.rules.alloc_in_loop import TensorAllocInLoop


def _loop(statement: str, imports: str = "import torch") -> str:
    return f"{imports}\nfor step in range(steps):\n    {statement}\n    out = model(x)\n"


def _fixed_lines(source: str):
    result = fix(source, "t.py", [TensorAllocInLoop], unsafe=True).source
    return [line.strip() for line in result.splitlines() if "x" in line and "model" not in line]


@pytest.mark.parametrize("statement,buffer,refill", [
    ("x = torch.randn(n, n)", "x = torch.empty(n, n)", "x.normal_()"),
    ("x = torch.randn((n, n), dtype=torch.float16, device=dev)",
     "x = torch.empty((n, n), dtype=torch.float16, device=dev)", "x.normal_()"),
    ("x = torch.randn(size=(n, n))", "x = torch.empty(size=(n, n))", "x.normal_()"),
    ("x = torch.rand(*shape, generator=g)", "x = torch.empty(*shape)", "x.uniform_(generator=g)"),
    ("x = torch.zeros(n, layout=torch.strided)", "x = torch.empty(n, layout=torch.strided)", "x.zero_()"),
    ("x = torch.ones(n, pin_memory=True)", "x = torch.empty(n, pin_memory=True)", "x.fill_(1)"),
    ("x = torch.full((n,), 0.5)", "x = torch.empty((n,))", "x.fill_(0.5)"),
    ("x = torch.full((n,), 3, dtype=torch.int32)", "x = torch.empty((n,), dtype=torch.int32)", "x.fill_(3)"),
    ("x = torch.randint(10, (n,))", "x = torch.empty((n,), dtype=torch.int64)", "x.random_(0, 10)"),
    ("x = torch.randint(low=2, high=9, size=(n,), dtype=torch.int32)",
     "x = torch.empty(size=(n,), dtype=torch.int32)", "x.random_(2, 9)"),
    ("x = torch.zeros(n).to(device)", "x = torch.empty(n, device=device)", "x.zero_()"),
    ("x = torch.zeros(n).cuda(1)", 'x = torch.empty(n, device="cuda:1")', "x.zero_()"),
    ("x = torch.ones(n, requires_grad=False)", "x = torch.empty(n)", "x.fill_(1)"),
])
def test_buffer_and_refill(statement, buffer, refill):
    assert _fixed_lines(_loop(statement)) == [buffer, refill]


def test_names_follow_the_module_imports():
    source = _loop("x = rn(n)", imports="import torch as th\nfrom torch import randn as rn")
    assert _fixed_lines(source) == ["x = th.empty(n)", "x.normal_()"]


@pytest.mark.parametrize("statement,safety", [
    ("x = torch.zeros(n).cuda()", Safety.SAFE),  # zeros are zeros wherever they are made
    ("x = torch.randn(n).cuda()", Safety.UNSAFE),  # the numbers would come from the GPU's generator
    ("x = torch.randn(n, device='cuda')", Safety.SAFE),
])
def test_fix_safety(statement, safety):
    [finding] = check(_loop(statement), "t.py", [TensorAllocInLoop]).findings
    assert finding.fix is not None and finding.fix.safety is safety


@pytest.mark.parametrize("statement,imports", [
    ("x = torch.full((n,), 0)", "import torch"),  # full(..., 0) makes int64: empty() would not
    ("x = torch.zeros(n).to(torch.float16)", "import torch"),  # .to() a dtype, not a device
    ("x = torch.zeros(n).to(other)", "import torch"),  # may be a tensor: dtype and device unknown
    ("x = randn(n)", "from torch import randn"),  # no name for torch.empty in this module
    ("x = torch.zeros(n, out=buf)", "import torch"),
])
def test_reported_without_a_fix_when_it_cannot_be_made_equal(statement, imports):
    [finding] = check(_loop(statement, imports), "t.py", [TensorAllocInLoop]).findings
    assert finding.fix is None


def test_buffer_goes_before_the_innermost_loop_and_keeps_other_statements_on_the_line():
    source = textwrap.dedent("""\
        import torch
        for epoch in range(3):
            for step in range(10):
                y = 1; x = torch.zeros(width)
                x.add_(y)
    """)
    assert fix(source, "t.py", [TensorAllocInLoop]).source == textwrap.dedent("""\
        import torch
        for epoch in range(3):
            x = torch.empty(width)
            for step in range(10):
                y = 1; x.zero_()
                x.add_(y)
    """)


def test_fixed_code_draws_the_same_numbers():
    torch = pytest.importorskip("torch")
    source = textwrap.dedent("""\
        import torch
        torch.manual_seed(0)
        g = torch.Generator().manual_seed(1)
        rows = int("3")  # a shape the code does not spell as literals
        seen = []
        for step in range(4):
            a = torch.randn(rows, 5, dtype=torch.float64)
            b = torch.rand(rows, generator=g)
            c = torch.randint(3, 17, (rows * 2,))
            seen.append(float(a.sum()) + float(b.sum()) + float(c.sum()))
    """)
    fixed = fix(source, "t.py", [TensorAllocInLoop]).source
    assert fixed.count(".normal_()") == 1 and ".uniform_(generator=g)" in fixed and ".random_(3, 17)" in fixed
    before, after = {}, {}
    exec(compile(source, "before", "exec"), before)
    exec(compile(fixed, "after", "exec"), after)
    assert before["seen"] == after["seen"]
    assert torch is not None


@pytest.mark.parametrize("statement,reported", [
    ("x = torch.randn(1024, 1023)", False),  # 1,047,552 elements: under 2**20
    ("x = torch.randn(1024, 1024)", True),
    ("x = torch.zeros((rows, 256))", False),  # rows is a constant below
    ("x = torch.zeros((rows, 4096))", True),
    ("x = torch.randint(0, 9, (rows * 2, 8))", False),
    ("x = torch.randn(n, 4)", True),  # unknown: reported
])
def test_silent_for_small_known_shapes(statement, reported):
    source = f"import torch\nrows = 256\nfor step in range(steps):\n    {statement}\n    out = model(x)\n"
    assert bool(check(source, "t.py", [TensorAllocInLoop]).findings) is reported
