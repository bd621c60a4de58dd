"""MEM301 beyond the examples: where a reset counts, what an optimizer is, fix safety."""

from __future__ import annotations

import textwrap

from memlint.engine import check, fix
from memlint.findings import Safety
from memlint.rules import registry

RULE = registry()["MEM301"]


def _findings(source: str):
    return check(textwrap.dedent(source), "t.py", [RULE]).findings


def test_zero_grad_in_if_counts():
    assert not _findings("""
        import torch
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i, x in enumerate(loader):
            if i % 1 == 0:
                opt.zero_grad(set_to_none=True)
            model(x).sum().backward()
            opt.step()
    """)


def test_grad_zero_in_place_counts():
    assert not _findings("""
        import torch
        opt = torch.optim.SGD(params, lr=0.1)
        for x in loader:
            loss = model(x).sum()
            loss.backward()
            opt.step()
            for p in params:
                p.grad.data.zero_()
    """)


def test_optimizer_known_by_param_groups_and_annotation():
    src = """
        import torch
        def train(model, optimizer: torch.optim.Optimizer, loader):
            for x in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
    """
    [finding] = _findings(src)
    assert finding.line == 6  # at the backward() call
    src2 = """
        import torch
        def train(model, opt, loader):
            print(opt.param_groups[0]["lr"])
            for x in loader:
                loss = model(x).sum()
                loss.backward()
                opt.step()
    """
    assert len(_findings(src2)) == 1


def test_step_in_helper_reported_at_backward_without_fix():
    src = """
        import torch
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            loss = model(x).sum()
            loss.backward()
            opt.step()

        while True:
            step(next(it))
    """
    [finding] = _findings(src)
    assert finding.line == 7 and finding.fix is None


def test_reading_grad_after_the_step_makes_the_fix_unsafe():
    src = """
        import torch
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            loss = model(x).sum()
            loss.backward()
            opt.step()
            print(model.weight.grad.norm())
    """
    [finding] = _findings(src)
    assert finding.fix is not None and finding.fix.safety is Safety.UNSAFE
    assert fix(textwrap.dedent(src), "t.py", [RULE]).source == textwrap.dedent(src)


def test_two_optimizers_each_get_a_reset():
    src = textwrap.dedent("""
        import torch
        opt_g = torch.optim.Adam(g.parameters())
        opt_d = torch.optim.Adam(d.parameters())
        for x in loader:
            loss_d = d(x).mean()
            loss_d.backward()
            opt_d.step()
            loss_g = d(g(z)).mean()
            loss_g.backward()
            opt_g.step()
    """)
    fixed = fix(src, "t.py", [RULE]).source
    assert "opt_d.step()\n    opt_d.zero_grad(set_to_none=True)\n" in fixed
    assert "opt_g.step()\n    opt_g.zero_grad(set_to_none=True)\n" in fixed


def test_noqa_on_the_backward_line():
    assert not _findings("""
        import torch
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            model(x).sum().backward()  # noqa: MEM301
            opt.step()
    """)


def test_step_nested_under_autocast_in_a_while_loop_is_seen():
    src = textwrap.dedent("""
        import torch
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        while True:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(next(it)).sum()
                loss.backward()
                opt.step()
    """)
    [finding] = check(src, "t.py", [RULE]).findings
    assert finding.line == 7
    assert fix(src, "t.py", [RULE]).source.endswith("        opt.step()\n        opt.zero_grad(set_to_none=True)\n")


def test_closure_optimizers_and_reset_in_except_are_left_alone():
    assert not _findings("""
        import torch
        opt = torch.optim.LBFGS(model.parameters())
        for x in loader:
            def closure():
                opt.zero_grad()
                loss = model(x).sum()
                loss.backward()
                return loss
            opt.step(closure)
    """)
    assert not _findings("""
        import torch
        netD_opt = torch.optim.Adam(netD.parameters())
        for x in loader:
            netD.zero_grad()
            err = netD(x).mean()
            err.backward()
            netD_opt.step()
    """)


def test_zero_grad_in_a_method_called_on_self():
    assert not _findings("""
        import torch
        class Trainer:
            def __init__(self, model):
                self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
            def clear(self):
                self.opt.zero_grad()
            def fit(self, loader):
                for x in loader:
                    loss = self.model(x).sum()
                    loss.backward()
                    self.opt.step()
                    self.clear()
    """)


def test_optimizer_passed_to_the_training_function():
    src = """
        import torch
        def run_epoch(model, loader, optimizer, mode):
            for x in loader:
                loss = model(x).sum()
                if mode == "train":
                    loss.backward()
                    optimizer.step()

        opt = torch.optim.Adam(model.parameters())
        run_epoch(model, train_dl, opt, "train")
        run_epoch(model, train_dl, optimizer=opt, mode="train")
    """
    [finding] = _findings(src)
    assert finding.line == 7
    # one call passes something else: unsure, silent
    assert not _findings(textwrap.dedent(src) + "run_epoch(model, dl, planner, 'train')\n")


def test_optimizer_parameter_no_call_passes_is_known_by_its_name():
    # a training function that a script beside it calls: nothing here passes its optimizer
    src = """
        import torch
        def train(model, loader, optimizer):
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
    """
    [finding] = _findings(src)
    assert finding.line == 6
    # named like something else: unknown, silent
    assert not _findings(src.replace("optimizer", "planner"))
    # a call here passes something that is no optimizer: silent
    assert not _findings(textwrap.dedent(src) + "train(model, dl, planner)\n")


def test_optimizer_known_by_what_it_is_built_on():
    assert len(_findings("""
        import torch
        optimizer = hydra.utils.instantiate(cfg.optimizer, model.parameters())
        for x in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
    """)) == 1
    assert not _findings("""
        import torch
        ema = EMA(model.parameters())
        for x in loader:
            loss = model(x).sum()
            loss.backward()
            ema.step()
    """)


def test_a_helper_called_from_two_loops_is_reported_once():
    findings = _findings("""
        import torch
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        def step(x):
            loss = model(x).sum()
            loss.backward()
            opt.step()
        for x in a:
            step(x)
        for x in b:
            step(x)
    """)
    assert len(findings) == 1
