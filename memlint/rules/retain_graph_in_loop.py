"""MEM205 retain-graph-in-loop."""

from __future__ import annotations

from typing import FrozenSet, List, Tuple

import libcst as cst

from memlint.analysis.dataflow import target_names
from memlint.analysis.roles import Backward
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

    Also the last of several backwards of an iteration (`loss1.backward(retain_graph=True)`,
    then `loss2.backward(retain_graph=True)`): the first needs the graph kept, the last does
    not.

    Also a loop over the terms of a loss that backwards each with `retain_graph=True` and does
    nothing with the gradients in between: gradients add up, so one backward of the sum gives
    the same result, walks the graph once, and keeps nothing.

    ## When it is not reported
    Several backward calls per iteration through a shared graph (GAN updates, multi-loss
    steps) where only those before the last keep it, or where they run in different branches;
    a loop that backwards through a graph built before it (a list of them a comprehension made
    included: MEM203 asks whether that graph should exist); loops that do not run a forward
    (Jacobian/Hessian rows of one graph); per-term backwards that read or reset the gradients
    in between (gradient surgery, per-task gradients); and `retain_graph` given a variable.

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
        # ... through a graph built before the loop, which every iteration backwards again
        "import torch\nemb = encoder(context)\nfor x, y in loader:\n    out = decoder(emb, x)\n"
        "    crit1(out, y).backward(retain_graph=True)\n    crit2(out, y).backward(retain_graph=True)\n",
        # ... in branches of their own: which one runs last depends on the step
        "import torch\nfor i, x in enumerate(loader):\n    out = model(x)\n    if i % 2:\n"
        "        d_loss(out).backward(retain_graph=True)\n    else:\n        g_loss(out).backward(retain_graph=True)\n"
        "    opt.step()\n",
        # rows of a Jacobian of one graph: no forward in the loop
        "import torch\ny = model(x)\nfor i in range(y.shape[0]):\n    y[i].backward(retain_graph=True)\n",
        # a variable decides
        "import torch\nfor i, x in enumerate(loader):\n    loss = criterion(model(x), y)\n"
        "    loss.backward(retain_graph=i < n - 1)\n",
        # not in a loop
        "import torch\nloss = criterion(model(x), y)\nloss.backward(retain_graph=True)\n",
        # per-task gradients: each term's gradients are read before the next
        "import torch\nfor x, y in loader:\n    terms = model(x, y)\n    grads = []\n    for term in terms:\n"
        "        opt.zero_grad()\n        term.backward(retain_graph=True)\n"
        "        grads.append([p.grad.clone() for p in model.parameters()])\n    combine(grads)\n    opt.step()\n",
        # the loss reads a list of graphs a comprehension computed above the loop: the graph must be kept (MEM203 asks why it exists)
        "import torch\n\n\ndef match(vgg, image, styles, steps):\n"
        "    targets = [vgg(style) for style in styles]\n"
        "    opt = torch.optim.Adam([image], lr=0.01)\n    for _ in range(steps):\n"
        "        feats = vgg(image)\n        loss = sum(gram_loss(feats, t) for t in targets)\n"
        "        loss.backward(retain_graph=True)\n        opt.step()\n        opt.zero_grad()\n",
    )
    INVALID = (
        # a list of graphs above the loop, one item read per iteration: nothing is backwarded twice
        Invalid(
            "import torch\nimport torch.nn.functional as F\n\n\n"
            "def train_sequence(encoder, rnn, head, chunks, targets, optimizer):\n"
            "    embedded = [encoder(c.cuda()) for c in chunks]\n    h = None\n"
            "    for t in range(len(chunks)):\n        out, h = rnn(embedded[t], h)\n"
            "        loss = F.cross_entropy(head(out[:, -1]), targets[t].cuda())\n"
            "        optimizer.zero_grad()\n        loss.backward(retain_graph=True)\n"
            "        optimizer.step()\n"
        ),
        Invalid("import torch\nh = None\nfor x, y in loader:\n    out, h = rnn(x, h)\n"
                "    loss = criterion(out, y)\n    loss.backward(retain_graph=True)\n    optimizer.step()\n"),
        Invalid("import torch\ndef step(x, y):\n    loss = criterion(model(x), y)\n"
                "    scaler.scale(loss).backward(retain_graph=True)\n"
                "for x, y in loader:\n    step(x, y)\n"),
        # the last of two backwards keeps the graph too: nothing backwards through it again
        Invalid("import torch\nfor x, y in loader:\n    out = model(x)\n    loss1 = crit1(out, y)\n"
                "    loss2 = crit2(out, y)\n    optimizer.zero_grad()\n    loss1.backward(retain_graph=True)\n"
                "    loss2.backward(retain_graph=True)\n    optimizer.step()\n"),
        # each term of the loss backwarded alone: sum them and backward once
        Invalid("import torch\nfor x, y in loader:\n    out = model(x)\n"
                "    terms = [criterion(out, y), 0.1 * out.pow(2).mean()]\n    for term in terms:\n"
                "        term.backward(retain_graph=True)\n    opt.step()\n    opt.zero_grad()\n"),
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
        if len(loops) > 1 and self._per_term(loops[0], backward.names) and facts.roles.forwards_in(loops[1]):
            self.report(node, (
                "`backward(retain_graph=True)` on each term of a loss, one by one: every backward walks "
                "the shared graph again, and the last one keeps it alive into the next iteration's "
                "forward; gradients add up, so sum the terms and call backward() once"))
            return
        for loop in loops[:1]:
            backwards = facts.roles.backwards_in(loop)
            if not facts.roles.forwards_in(loop) or len(backwards) != 1 and not self._last(node, backwards):
                return
            if facts.values.graphs_from_before(loop):
                return  # every iteration backwards through a graph built before the loop: it must be kept (MEM203 asks whether it should exist)
            self.report(node, (
                "`backward(retain_graph=True)` in a loop that builds a new graph every iteration: "
                "nothing backwards through it again, so its saved tensors stay alive until the loss "
                "is dropped, and if carried state links the iterations' graphs (an RNN hidden state) "
                "memory grows every step; detach the carried state (MEM206) and drop retain_graph"))

    def _last(self, call: cst.Call, backwards: List[Tuple[Backward, cst.Call]]) -> bool:
        """`call` is the iteration's last backward: every other one runs before it, in the same
        block (`loss1.backward(retain_graph=True)` then `loss2.backward(retain_graph=True)`), so
        nothing backwards again through the graph it keeps."""
        tree = self.facts.tree
        site = next((s for b, s in backwards if b.call is call), None)
        statement = tree.statement_around(site) if site is not None else None
        if statement is None:
            return False
        block, index = tree.parent(statement), tree.siblings(statement)[1]
        for _, other in backwards:
            before = tree.statement_around(other)
            if other is not site and (before is None or tree.parent(before) is not block or
                                      tree.siblings(before)[1] >= index):
                return False
        return True

    def _per_term(self, loop: cst.CSTNode, backwarded: FrozenSet[str]) -> bool:
        """A loop over the terms of a loss that backwards each one (`for t in terms: t.backward(...)`)
        and does nothing between them with the gradients: no forward, no `.grad` read, no reset
        or step. Then one backward of the sum gives the same gradients."""
        roles = self.facts.roles
        if not type(loop) is cst.For or not backwarded & target_names(loop.target):
            return False
        return not (roles.forwards_in(loop) or roles.grad_reads(loop) or roles.steps_in(loop) or any(
            roles.resets_grads(call) for call, _ in self.facts.calls.calls_in(loop)))
