"""Figures: whether a figure measured on a fixture holds for a piece of code.

Rules quote what a GPU showed on their fixtures (an evaluation loop keeping its outputs peaked
at 1792 MB against 537 MB under `no_grad`). Those fixtures are loops over a dataset, batch after
batch; a figure from one says nothing about a unit test that runs two iterations, an interactive
loop translating one sentence at a time, or a helper called once. A message quotes a figure only
where the code has its fixture's shape, and explains the mechanism without a number elsewhere.

`over_dataset(facts, node)`: the node runs in a loop over a data loader (memlint.analysis.steps:
`for batch in loader`, `enumerate(tqdm(val_loader))`, `self.val_dataloader()`), and not in a test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from memlint.analysis.steps import Steps

if TYPE_CHECKING:
    from memlint.analysis import Facts


def over_dataset(facts: "Facts", node: cst.CSTNode) -> bool:
    """Whether `node` runs in a loop over a data loader, outside tests (see the module docstring)."""
    loops = [node] if type(node) is cst.For else []
    loops += facts.tree.loops_around(node)
    return any(Steps.iterates_loader(loop) for loop in loops) and not facts.in_test(node)
