"""The facts memlint.analysis gives the 3xx/4xx rules: devices, autocast dtypes, optimizers
known by how they are passed or built, gradient resets and reads, a loss's origins."""

from __future__ import annotations

import textwrap

import libcst as cst

from memlint.analysis import Facts
from memlint.analysis.tree import walk


def facts(source: str):
    return Facts(cst.parse_module(textwrap.dedent(source)))


def calls(f, text: str):
    return [n for n in walk(f.module) if isinstance(n, cst.Call) and cst.Module([]).code_for_node(n) == text]


def test_autocast_devices_and_dtypes():
    f = facts("""
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        amp_dtype = torch.bfloat16
        half = torch.half
        with torch.autocast(device_type=device): pass
        with torch.autocast("cpu"): pass
        with torch.autocast(str(torch.device("cuda:1")), dtype=amp_dtype): pass
        with torch.cuda.amp.autocast(dtype=half): pass
        with torch.autocast(dev): pass
        with torch.autocast("cuda", dtype=torch.float16 if fp16 else torch.bfloat16): pass
    """)
    got = [(f.regions.autocast_devices(a), f.regions.autocast_dtypes(a)) for a in f.regions.autocasts]
    assert got == [
        ({"cuda", "cpu"}, {"torch.float16"}),
        ({"cpu"}, {"torch.bfloat16"}),
        ({"cuda"}, {"torch.bfloat16"}),
        ({"cuda"}, {"torch.float16"}),
        (None, None),
        ({"cuda"}, {"torch.float16", "torch.bfloat16"}),
    ]


def test_grad_scaler_use():
    assert facts("import torch\ns = torch.amp.GradScaler('cuda')\ntrain(model, s)\n").roles.uses_grad_scaler
    assert not facts("import torch\ns = torch.amp.GradScaler('cuda')\n").roles.uses_grad_scaler  # made, never read
    # ... on an instance whose base class, defined elsewhere, may read it
    assert facts("import torch\nfrom .amp import AmpMixin\nclass T(AmpMixin):\n"
                 "    def __init__(self):\n        self.scaler = torch.amp.GradScaler('cuda')\n").roles.uses_grad_scaler
    assert facts("import torch\nscaler.scale(loss).backward()\n").roles.uses_grad_scaler
    assert facts("import torch\nloss = self.grad_scaler.scale(loss)\nloss.backward()\n").roles.uses_grad_scaler
    assert not facts("import torch\nloss.backward()\n").roles.uses_grad_scaler


def test_known_optimizers():
    f = facts("""
        import torch
        def fit(model, o, sched):
            o.step()
            sched.step()
        def annotated(opt: torch.optim.Optimizer):
            opt.step()
        built = make_optimizer(cfg, model.parameters())
        built.step()
        fit(model, torch.optim.SGD(model.parameters(), lr=1), s)
        fit(model, built, s)
    """)
    o_step, sched_step, opt_step = calls(f, "o.step()")[0], calls(f, "sched.step()")[0], calls(f, "opt.step()")[0]
    assert "built" in f.receivers.optimizers and "opt" in f.receivers.optimizers
    assert not f.receivers.is_known_optimizer("o", o_step)  # one call passes a call, not a name
    f2 = facts("""
        import torch
        def fit(model, o):
            o.step()
        opt = torch.optim.SGD(model.parameters(), lr=1)
        fit(model, opt)
        fit(model, o=opt)
    """)
    assert f2.receivers.is_known_optimizer("o", calls(f2, "o.step()")[0])
    assert not f.receivers.is_known_optimizer("sched", sched_step)
    assert f.receivers.is_known_optimizer("opt", opt_step)


def test_resets_and_reads():
    f = facts("""
        import torch
        opt.zero_grad()
        p.grad.data.zero_()
        p.grad.mul_(2)
        torch._foreach_zero_(grads)
        zero_grads(model)
        n = p.grad.norm()
        p.grad = None
    """)
    resets = {cst.Module([]).code_for_node(c): f.roles.resets_grads(c) for c in f.scopes.calls}
    assert resets["opt.zero_grad()"] and resets["p.grad.data.zero_()"] and resets["torch._foreach_zero_(grads)"]
    assert resets["zero_grads(model)"] and not resets["p.grad.mul_(2)"] and not resets["p.grad.norm()"]
    reads = [cst.Module([]).code_for_node(r) for r in f.roles.grad_reads(f.module)]
    assert reads.count("p.grad") == 3  # .data.zero_(), .mul_(2), .norm(); not `p.grad = None`


def test_origins_follow_the_binding_in_effect():
    f = facts("""
        import torch
        out = model(x)
        def helper(y):
            return model(y)
        loss = criterion(helper(out), t)
        loss.backward()
    """)
    [backward] = f.roles.backwards
    nodes, functions = f.values.origins(backward)
    assert {cst.Module([]).code_for_node(n).strip() for n in nodes} == {
        "out = model(x)", "loss = criterion(helper(out), t)"}
    assert [fn.name.value for fn in functions] == ["helper"]
