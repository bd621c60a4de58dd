"""MEM301-MEM404 on one script with every problem: their fixes compose into a correct step."""

from __future__ import annotations

from memlint.engine import check, fix
from memlint.rules import registry

BAD = '''import torch
from torch.cuda.amp import autocast

opt = torch.optim.SGD(model.parameters(), lr=0.1)
opt.zero_grad()
for step in range(5):
    with autocast():
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.zero_grad(set_to_none=False)
        opt.step()
'''

GOOD = '''import torch
from torch.amp import autocast

opt = torch.optim.SGD(model.parameters(), lr=0.1)
opt.zero_grad()
scaler = torch.amp.GradScaler("cuda")
for step in range(5):
    with autocast("cuda"):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
'''


def test_all_fixes_compose():
    rules = [r for code, r in registry().items() if code[:4] in ("MEM3", "MEM4")]
    codes = sorted(f.code for f in check(BAD, "t.py", rules).findings)
    assert codes == ["MEM302", "MEM303", "MEM401", "MEM402", "MEM404"]
    result = fix(BAD, "t.py", rules, unsafe=True)
    assert result.source == GOOD
    assert not result.remaining


def test_safe_fixes_alone_leave_the_unsafe_ones_reported():
    rules = [r for code, r in registry().items() if code[:4] in ("MEM3", "MEM4")]
    result = fix(BAD, "t.py", rules)
    assert sorted(f.code for f in result.remaining) == ["MEM302", "MEM303"]
