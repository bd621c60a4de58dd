"""MEM401 beyond the examples: dtype and device resolution, where the autocast is, the fix's limits."""

from __future__ import annotations

import textwrap

from memlint.engine import check, fix
from memlint.rules import registry

RULE = registry()["MEM401"]


def _findings(source: str):
    return check(textwrap.dedent(source), "t.py", [RULE]).findings


LOOP = """
    import torch
    {setup}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in loader:
        with {autocast}:
            loss = model(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
"""


def _reported(autocast: str, setup: str = "") -> bool:
    source = textwrap.dedent(LOOP).format(autocast=autocast, setup=setup)
    return bool(check(source, "t.py", [RULE]).findings)


def test_device_and_dtype_resolution():
    assert _reported('torch.autocast("cuda")')
    assert _reported('torch.autocast(device_type="cuda:0")')
    assert _reported("torch.cuda.amp.autocast()")
    assert _reported("torch.autocast(device_type=device)", 'device = "cuda" if torch.cuda.is_available() else "cpu"')
    assert _reported("torch.autocast(device.type)", 'device = torch.device("cuda")')
    assert _reported("torch.autocast(str(device), dtype=dtype)", 'device = "cuda"\ndtype = torch.half')
    assert _reported("torch.autocast(dev, dtype=torch.float16)", "dev = get_device()")  # fp16 said outright
    assert _reported("torch.autocast(device.type)", 'device = torch.device(f"cuda:{rank}")')
    assert not _reported("torch.autocast(device_type=device)", 'device = "cpu"')
    assert not _reported('torch.autocast("cuda", dtype=dt)', "dt = torch.bfloat16")
    # a dtype chosen at run time: where the run picks float16, it has no scaler
    assert _reported('torch.autocast("cuda", dtype=dt)', "dt = torch.bfloat16 if ok else torch.float16")
    assert _reported('torch.autocast("cuda", dtype=getattr(torch, name))', 'name = "float16"')
    assert not _reported('torch.autocast("cpu", dtype=torch.float16)')
    assert not _reported("torch.autocast(device_type=device)", "device = get_device()")
    assert not _reported('torch.autocast("cuda", enabled=False)')


def test_from_torch_amp_import_autocast():
    assert _reported('autocast("cuda")', "from torch.amp import autocast")
    assert _reported("autocast()", "from torch.cuda.amp import autocast")


def test_forward_under_autocast_loss_outside():
    assert _findings("""
        import torch
        for x, y in loader:
            with torch.autocast("cuda"):
                out = model(x)
            loss = criterion(out.float(), y)
            loss.backward()
            opt.step()
    """)


def test_autocast_in_a_helper_the_loss_comes_from():
    src = """
        import torch

        def forward(x):
            with torch.autocast("cuda"):
                return model(x).sum()

        for x in loader:
            loss = forward(x)
            loss.backward()
            opt.step()
    """
    [finding] = _findings(src)
    assert finding.line == 10


def test_a_scaler_read_anywhere_silences_and_one_never_read_does_not():
    assert not _reported('torch.autocast("cuda")', 'scaler = torch.cuda.amp.GradScaler()\nsetup(scaler)')
    assert not _reported('torch.autocast("cuda")', 'self_scaler = torch.cuda.amp.GradScaler(enabled=amp)\nlog(self_scaler)')
    assert _reported('torch.autocast("cuda")', 'scaler = torch.cuda.amp.GradScaler()')


def test_a_scaler_made_and_never_read_is_the_one_the_fix_uses():
    source = textwrap.dedent(LOOP).format(autocast='torch.autocast("cuda")', setup="amp_scaler = torch.amp.GradScaler(\"cuda\")")
    fixed = fix(source, "t.py", [RULE]).source
    assert "amp_scaler.scale(loss).backward()" in fixed and "amp_scaler.step(opt)" in fixed
    assert fixed.count("GradScaler(") == 1  # no second scaler made


def test_gradients_read_while_scaled_means_no_fix():
    src = """
        import torch
        scaler_ok = 1
        for x in loader:
            with torch.autocast("cuda"):
                loss = model(x).sum()
            loss.backward()
            norm = sum(p.grad.norm() for p in model.parameters())
            opt.step()
    """
    [finding] = _findings(src)
    assert finding.fix is None


def test_fix_keeps_backward_arguments_and_accumulation():
    src = textwrap.dedent("""
        import torch
        for i, x in enumerate(loader):
            with torch.autocast("cuda"):
                loss = model(x).sum() / k
            loss.backward(retain_graph=False)
            if (i + 1) % k == 0:
                opt.step()
                opt.zero_grad()
    """)
    assert fix(src, "t.py", [RULE]).source == textwrap.dedent("""
        import torch
        scaler = torch.amp.GradScaler("cuda")
        for i, x in enumerate(loader):
            with torch.autocast("cuda"):
                loss = model(x).sum() / k
            scaler.scale(loss).backward(retain_graph=False)
            if (i + 1) % k == 0:
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
    """)


def test_the_binding_in_effect_decides():
    src = """
        import torch
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
        model.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).sum()
        loss.backward()
    """
    assert not _findings(src)


def test_autocast_around_the_whole_loop():
    src = textwrap.dedent("""
        import torch
        with torch.autocast("cuda"):
            for x in loader:
                loss = model(x).sum()
                loss.backward()
                opt.step()
    """)
    [finding] = check(src, "t.py", [RULE]).findings
    assert fix(src, "t.py", [RULE]).source == textwrap.dedent("""
        import torch
        with torch.autocast("cuda"):
            scaler = torch.amp.GradScaler("cuda")
            for x in loader:
                loss = model(x).sum()
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
    """)


def test_other_clipping_means_no_fix():
    [finding] = _findings("""
        import torch
        for x in loader:
            with torch.autocast("cuda"):
                loss = model(x).sum()
            loss.backward()
            model.clip_grad_norm_(1.0)
            opt.step()
    """)
    assert finding.fix is None


def test_a_scaler_made_per_epoch_call_is_unsafe():
    [finding] = _findings("""
        import torch
        def train_one_epoch(loader):
            for x in loader:
                with torch.autocast("cuda"):
                    loss = model(x).sum()
                loss.backward()
                opt.step()
        for epoch in range(10):
            train_one_epoch(loader)
    """)
    assert finding.fix is not None and finding.fix.safety.value == "unsafe"


def test_a_benchmark_module_keeps_no_weights():
    """A benchmark trains only to time its steps: what the model learns there is thrown away."""
    source = textwrap.dedent(LOOP.format(setup="", autocast='torch.autocast("cuda")'))
    assert check(source, "train.py", [RULE]).findings
    for path in ("bench.py", "benchmark_step.py", "benchmarks/amp_loop.py", "repo/bench/train.py"):
        assert not check(source, path, [RULE]).findings, path
    assert check(source, "workbench/train.py", [RULE]).findings  # a word containing "bench" is no benchmark
    assert check(source, "/home/me/bench/project/train.py", [RULE]).findings  # a folder further up is not
