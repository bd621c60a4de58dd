"""Each fix's own diff: made from the statements it edits, the same as a whole-file diff, and
at a cost that does not grow with the file."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from memlint.edits import apply_edits
from memlint.engine import check, fix_diff, unified_diff
from memlint.rules import registry

RULES = list(registry().values())

SHAPES = {
    "insert before a loop, replace inside it": """\
        import torch

        def sample(model, n, device):
            # fresh noise every step
            for step in range(100):
                noise = torch.randn(n, n, device=device)
                print(model(noise).sum().item())
        """,
    "an import at the top and a call deep below": """\
        import torch
        from torch.cuda.amp import GradScaler


        class Trainer:
            @property
            def name(self):
                return "t"

            def fit(self, model, loader, optimizer):
                scaler = GradScaler()
                for x, y in loader:
                    with torch.autocast("cuda"):
                        loss = model(x).sum()
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()
        """,
    "tabs, a decorator and a multi-line string": """\
        import torch

        @torch.no_grad()
        def evaluate(model, loader, device):
        \tdoc = '''
        keep this text
          as it is'''
        \tfor batch in loader:
        \t\tx = torch.zeros(4096, 4096, device=device)
        \t\tprint(model(x + batch).sum().item(), doc)
        """,
}


def _whole_file(checked, finding, path):
    return unified_diff(checked.source, apply_edits(checked.module, finding.fix.edits).code, path)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_fix_diff_is_the_whole_file_diff(shape, newline):
    source = textwrap.dedent(SHAPES[shape]).replace("\n", newline)
    checked = check(source, "t.py", RULES)
    fixable = [f for f in checked.findings if f.fix is not None]
    assert fixable, "the example must have a fix"
    for finding in fixable:
        diff = fix_diff(checked, finding, "t.py")
        assert diff == _whole_file(checked, finding, "t.py")
        assert diff.startswith("--- a/t.py\n+++ b/t.py\n@@ ")


def test_the_last_line_without_a_newline_still_gets_its_diff():
    source = "import torch\nfor step in range(9):\n    x = torch.zeros(4096, 4096)\n    print(model(x).sum().item())"
    checked = check(source, "t.py", RULES)
    [finding] = [f for f in checked.findings if f.fix is not None]
    assert fix_diff(checked, finding, "t.py") == _whole_file(checked, finding, "t.py")


def _functions(count: int) -> str:
    body = "".join(
        f"\ndef sample_{i}(model, n, device):\n    for step in range(100):\n"
        f"        noise = torch.randn(n, n, device=device)\n        print(model(noise).sum().item())\n"
        for i in range(count))
    return "import torch\n" + body


def test_the_work_per_fix_diff_does_not_grow_with_the_file(monkeypatch):
    """Count the nodes printed per diff: at 4x the file, the same."""
    printed = {"nodes": 0}
    codegen = cst.CSTNode._codegen

    def counted(self, state, **kwargs):
        printed["nodes"] += 1
        return codegen(self, state, **kwargs)

    per_diff = []
    for count in (25, 100):
        checked = check(_functions(count), "t.py", RULES)
        assert len(checked.findings) == 2 * count  # MEM101 and MEM203 in each function
        monkeypatch.setattr(cst.CSTNode, "_codegen", counted)
        printed["nodes"] = 0
        for finding in checked.findings:
            fix_diff(checked, finding, "t.py")
        monkeypatch.setattr(cst.CSTNode, "_codegen", codegen)
        per_diff.append(printed["nodes"] / len(checked.findings))
    assert per_diff[0] == per_diff[1] < 400  # a whole-file diff would print 60 nodes a function
