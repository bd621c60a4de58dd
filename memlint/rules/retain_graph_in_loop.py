"""MEM205 retain-graph-in-loop."""

from __future__ import annotations

from typing import List

import libcst as cst

from memlint.analysis.tree import literal_bool
from memlint.rule import Invalid, Rule


class RetainGraphInLoop(Rule):
    """
    ## What it does
    Finds `backward(retain_graph=True)` in a loop that builds a new graph every iteration (it
    runs a forward) and backwards only once per iteration, directly or in a helper the loop
    calls.

    ## Why is this bad?
    `retain_graph=True` keeps the graph's saved tensors after the backward, for a second
    backward through the same graph. With one backward per iteration nothing uses them, and
    they stay alive until the loss is dropped, so the next forward runs next to them. It is
    usually added to silence "Trying to backward through the graph a second time", which means
    state carried across iterations (an RNN hidden state, a running value) links each step's
    graph to the previous ones: then the retained graphs pile up and memory grows every step.

    ## Example
    ```python
    for x, y in loader:
        out, h = rnn(x, h)
        loss = criterion(out, y)
        loss.backward(retain_graph=True)
    ```

    Use instead:
    ```python
    for x, y in loader:
        h = h.detach()
        out, h = rnn(x, h)
        loss = criterion(out, y)
        loss.backward()
    ```

    ## When it is not reported
    Several backward calls per iteration through a shared graph (GAN updates, multi-loss
    steps), loops that do not run a forward (Jacobian/Hessian rows of one graph), and
    `retain_graph` given a variable.

    ## Fix
    None automatic: detach the carried state (MEM206) and drop `retain_graph=True`.

    ## Fix safety
    No fix is offered: whether a later backward needs the graph is a design decision.
    """

    CODE = "MEM205"
    NAME = "retain-graph-in-loop"
    MESSAGE = "`backward(retain_graph=True)` in a loop keeps every iteration's graph alive"
    FIX_SAFETY = None
    REQUIRES = ("retain_graph",)

    VALID = (
        "import torch\nfor x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n",
        # two backward calls through a shared graph (GAN)
        "import torch\nfor x in loader:\n    fake = generator(noise)\n    d_loss = criterion(discriminator(fake), ones)\n"
        "    d_loss.backward(retain_graph=True)\n    g_loss = criterion(discriminator(fake), zeros)\n    g_loss.backward()\n",
        # rows of a Jacobian of one graph: no forward in the loop
        "import torch\ny = model(x)\nfor i in range(y.shape[0]):\n    y[i].backward(retain_graph=True)\n",
        # a variable decides
        "import torch\nfor i, x in enumerate(loader):\n    loss = criterion(model(x), y)\n"
        "    loss.backward(retain_graph=i < n - 1)\n",
        # not in a loop
        "import torch\nloss = criterion(model(x), y)\nloss.backward(retain_graph=True)\n",
    )
    INVALID = (
        Invalid("import torch\nh = None\nfor x, y in loader:\n    out, h = rnn(x, h)\n"
                "    loss = criterion(out, y)\n    loss.backward(retain_graph=True)\n    optimizer.step()\n"),
        Invalid("import torch\ndef step(x, y):\n    loss = criterion(model(x), y)\n"
                "    scaler.scale(loss).backward(retain_graph=True)\n"
                "for x, y in loader:\n    step(x, y)\n"),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if not any(arg.keyword is not None and arg.keyword.value == "retain_graph" for arg in node.args):
            return
        facts = self.facts
        backward = facts.roles.backward_of(node)
        if backward is None or backward.kind == "grad" or literal_bool(backward.retain_graph) is not True:
            return
        loops: List[cst.CSTNode] = facts.tree.loops_around(node)
        if not loops:
            func = facts.tree.function_of(node)
            if func is None:
                return
            loops = [loop for site in facts.scopes.call_sites(func) for loop in facts.tree.loops_around(site)[:1]]
        for loop in loops[:1]:
            if len(facts.roles.backwards_in(loop)) != 1 or not facts.roles.forwards_in(loop):
                return
            self.report(node, (
                "`backward(retain_graph=True)` in a loop that builds a new graph every iteration: "
                "nothing backwards through it again, so its saved tensors stay alive until the loss "
                "is dropped, and if carried state links the iterations' graphs (an RNN hidden state) "
                "memory grows every step; detach the carried state (MEM206) and drop retain_graph"))
