"""No rule or fact does work that grows faster than the file.

Counted, not timed: the Python function calls one lint makes, for a file of n repeated shapes
and of 4n. Linear work gives 4x the calls; an analysis that scans the module (or a scope) once
per loop or per finding gives about 16x. Each shape is what a real file repeats: training
functions, evaluation functions, fp16 steps, allocations in loops, and a script whose loops
all run in the module's one scope.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from memlint.engine import check, fix
from memlint.rules import registry

RULES = list(registry().values())

SHAPES = {
    "allocations in loops": ("import torch\n", """
        def sample_{i}(model, n, device):
            for step in range(100):
                noise = torch.randn(n, n, device=device)
                print(model(noise).sum().item())
        """),
    "training steps": ("import torch\n", """
        def train_{i}(model, loader, optimizer):
            model.train()
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.zero_grad()
                optimizer.step()
            return loss
        """),
    "training without zero_grad": ("import torch\n", """
        def train_{i}(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
                print(model.weight.grad.norm())
        """),
    "evaluation keeping outputs": ("import torch\n", """
        def evaluate_{i}(model, loader):
            model.eval()
            total = 0
            outs = []
            for x, y in loader:
                out = model(x)
                outs.append(out)
                total += out.sum()
            return outs
        """),
    "fp16 steps on the old API": ("import torch\nfrom torch.cuda.amp import autocast, GradScaler\n", """
        def step_{i}(model, x, opt):
            scaler = GradScaler()
            with autocast():
                loss = model(x).sum()
                loss.backward(retain_graph=True)
            opt.step()
            opt.zero_grad(set_to_none=False)
            h = None
            for t in x:
                out, h = rnn(t, h)
            torch.cuda.empty_cache()
        """),
    "recurrent state and retained graphs": ("import torch\nfrom apex import amp\n", """
        def tbptt_{i}(rnn, loader, opt):
            rnn, opt = amp.initialize(rnn, opt)
            h = None
            for x in loader:
                out, h = rnn(x, h)
                loss = out.sum()
                loss.backward(retain_graph=True)
                opt.step()
                opt.zero_grad()
        """),
    "fp16 without a scaler": ("import torch\n", """
        def half_{i}(model, loader, opt):
            for x in loader:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = model(x).sum()
                loss.backward()
                opt.step()
                opt.zero_grad()
        """),
    "a model class of many methods": ("import torch\nclass Block(torch.nn.Module):\n    pass\n"
                                      "class Model(torch.nn.Module):\n", """
        # a method of Model (this comment sets the margin: the methods sit one level in)
            def forward_{i}(self, loader):
                self.net_{i} = Block()
                for x in loader:
                    mask = torch.ones(4, 4).to(x.device)
                    out = self.net_{i}(x) + self.net_{i}(mask)
                return out
        """),
    "a script of module-level loops": ("import torch\nmodel = Net()\nopt = torch.optim.SGD(model.parameters())\n", """
        for x_{i} in loader:
            out_{i} = model(x_{i})
            loss_{i} = out_{i}.sum()
            total += loss_{i}
            loss_{i}.backward()
            opt.step()
            print(w.grad)
        """),
}


def _source(shape: str, count: int) -> str:
    header, body = SHAPES[shape]
    body = textwrap.dedent(body)
    return header + "".join(body.replace("{i}", str(i)) for i in range(count))


def _calls(function, *args) -> int:
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(count)
    try:
        function(*args)
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_linting_4x_the_code_makes_at_most_4x_the_calls(shape):
    small = _calls(check, _source(shape, 30), "t.py", RULES)
    large = _calls(check, _source(shape, 120), "t.py", RULES)
    assert check(_source(shape, 30), "t.py", RULES).findings, "the shape must have findings"
    assert large / small < 4.4, f"{large / small:.1f}x the calls for 4x the code"


@pytest.mark.parametrize("shape", ["fp16 steps on the old API", "training without zero_grad"])
def test_fixing_4x_the_code_makes_at_most_4x_the_calls(shape):
    small = _calls(fix, _source(shape, 30), "t.py", RULES, True)
    large = _calls(fix, _source(shape, 120), "t.py", RULES, True)
    assert large / small < 4.4, f"{large / small:.1f}x the calls for 4x the code"
