"""MEM202 retained-outputs."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from memlint.analysis.tree import dotted_name
from memlint.findings import Fix, Replace, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import detached, show

_STORING = frozenset({"append", "extend", "insert", "appendleft"})


def _root(expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    return expr if dotted_name(expr) is not None else None


def _detach_before_move(value: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """`out.detach()`; `out.detach().cpu()` for `out.cpu()` (and `.to(...)` alike); None for a
    tuple, list or dict (each element would need it)."""
    if isinstance(value, (cst.Tuple, cst.List, cst.Dict, cst.Set, cst.StarredElement)):
        return None
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and \
            value.func.attr.value in ("cpu", "to"):
        return value.with_changes(func=value.func.with_changes(value=detached(value.func.value)))
    return detached(value)


def _moved_to_cpu(value: cst.BaseExpression) -> bool:
    if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute):
        return False
    if value.func.attr.value == "cpu":
        return True
    return value.func.attr.value == "to" and any(
        isinstance(a.value, cst.SimpleString) and "cpu" in a.value.value for a in value.args)


class RetainedOutputs(Rule):
    """
    ## What it does
    Finds model outputs or losses that carry an autograd graph stored into a container that
    outlives the loop: `outputs.append(model(x))`, `self.preds.append(logits)`, also CPU copies
    `preds.append(out.cpu())`: `.cpu()` and `.to()` do not detach.

    ## Why is this bad?
    Each stored tensor keeps its graph, and the graph keeps the activations it saved for a
    backward, on the GPU, until the container is dropped. Where nothing backwards (evaluation),
    memory grows with every batch; on an H200 `.cpu()` copies of graph-attached outputs kept
    233 MB on the GPU that `.detach().cpu()` released. In a training loop `backward()` frees the
    saved tensors, so there the cost is the linked autograd history, not GPU memory.

    ## Example
    ```python
    preds = []
    for x in loader:
        preds.append(model(x).cpu())
    ```

    Use instead:
    ```python
    preds = []
    for x in loader:
        preds.append(model(x).detach().cpu())
    ```

    ## When it is not reported
    Outputs collected to be backwarded later (`losses.append(l)` then `sum(losses).backward()`),
    collected inside a forward or loss function that returns them, values under `no_grad` /
    `inference_mode`, already detached ones, and `generate()` results.

    ## Fix
    `.detach()` on the stored value, before `.cpu()` / `.to()` when it is moved.

    ## Fix safety
    Safe: the stored values are the same numbers; only their graph is dropped. Tuples and dicts
    of outputs are reported without a fix.
    """

    CODE = "MEM202"
    NAME = "retained-outputs"
    MESSAGE = "an output with its autograd graph is stored in a container that outlives the loop"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.PEAK_LOWER
    REQUIRES = ("append", "extend", "insert")

    VALID = (
        "import torch\npreds = []\nwith torch.no_grad():\n    for x in loader:\n        preds.append(model(x))\n",
        "import torch\npreds = []\nfor x in loader:\n    preds.append(model(x).detach().cpu())\n",
        "import torch\nlosses = []\nfor x, y in loader:\n    loss = criterion(model(x), y)\n"
        "    loss.backward()\n    losses.append(loss.item())\n",
        # collected, then backwarded
        "import torch\nlosses = []\nfor chunk in chunks:\n    losses.append(criterion(model(chunk.x), chunk.y))\n"
        "torch.stack(losses).mean().backward()\n",
        "import torch\nfor batch in loader:\n    outs = []\n    for chunk in batch.split(4):\n"
        "        outs.append(model(chunk))\n    loss = criterion(torch.cat(outs), batch.y)\n    loss.backward()\n",
        # inside a forward: the caller backwards the result
        "import torch\nimport torch.nn as nn\nclass Net(nn.Module):\n    def forward(self, x):\n"
        "        hidden = []\n        for layer in self.layers:\n            x = self.net(x)\n"
        "            hidden.append(x)\n        return torch.stack(hidden)\n",
        # a helper decorated @torch.no_grad()
        "import torch\n@torch.no_grad()\ndef predict(model, loader):\n    out = []\n    for x in loader:\n"
        "        out.append(model(x))\n    return out\n",
        # HF generate() runs without grad
        "import torch\ntexts = []\nfor batch in loader:\n    texts.append(model.generate(**batch))\n",
        # a random tensor appended to a list (it must stay fresh)
        "import torch\nnoises = []\nfor _ in range(10):\n    noises.append(torch.randn(4, 4))\n",
        # labels and predictions without a graph
        "import torch\npreds = []\nfor x in loader:\n    preds.append(model(x).argmax(-1))\n",
        # Lightning runs validation_step without grad
        "import torch\nimport lightning as L\nclass Lit(L.LightningModule):\n    def validation_step(self, batch, i):\n"
        "        for x in batch:\n            self.val_outputs.append(self.model(x))\n",
        # stored where other code may backward it
        "import torch\ndef embeds(pipe, prompts, inputs):\n    out = []\n    for p in prompts:\n"
        "        out.append(text_encoder(p)[0])\n    inputs['pos'], inputs['neg'] = out\n",
        # the list is made anew every iteration
        "import torch\nfor x in loader:\n    parts = []\n    parts.append(model(x))\n    print(len(parts))\n",
    )
    INVALID = (
        Invalid(
            "import torch\n\ndef evaluate(model, loader):\n    preds = []\n    for x, _ in loader:\n"
            "        preds.append(model(x).cpu())\n    return torch.cat(preds)\n",
            "import torch\n\ndef evaluate(model, loader):\n    preds = []\n    for x, _ in loader:\n"
            "        preds.append(model(x).detach().cpu())\n    return torch.cat(preds)\n",
        ),
        Invalid(
            "import torch\nlosses = []\nfor x, y in loader:\n    out = model(x)\n    loss = criterion(out, y)\n"
            "    loss.backward()\n    optimizer.step()\n    losses.append(loss)\n",
            "import torch\nlosses = []\nfor x, y in loader:\n    out = model(x)\n    loss = criterion(out, y)\n"
            "    loss.backward()\n    optimizer.step()\n    losses.append(loss.detach())\n",
        ),
        Invalid(
            "import torch\nclass Evaluator:\n    def run(self, loader):\n        for x in loader:\n"
            "            logits = self.model(x)\n            self.outputs.append(logits.to('cpu'))\n",
            "import torch\nclass Evaluator:\n    def run(self, loader):\n        for x in loader:\n"
            "            logits = self.model(x)\n            self.outputs.append(logits.detach().to('cpu'))\n",
        ),
        # a tuple: reported without a fix
        Invalid("import torch\nkeep = []\nfor x in loader:\n    out = model(x)\n    keep.append((out, x))\n"),
    )

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in _STORING or not node.args:
            return
        container = _root(func.value)
        if container is None or not any(isinstance(a, (cst.For, cst.While)) for a in self.context.ancestors):
            return
        facts = self.facts
        loops = facts.tree.loops_around(node)
        if not loops or facts.regions.grad_enabled(node) is not True:
            return
        value = node.args[-1].value
        if not facts.values.carries_grad(value, node):
            return
        dotted = dotted_name(container) or ""
        root = dotted.split(".")[0]
        if isinstance(container, cst.Name) and facts.values.reset_in_iteration(loops[0], root, node):
            return
        scope = facts.tree.scope_of(node)
        if facts.values.reaches_backward(scope, {root, dotted}):
            return
        if not isinstance(container, cst.Name) and facts.values.attribute_backwarded(dotted):
            return  # `self.losses` backwarded by another method
        if facts.phase.in_training_function(node) and (
                not isinstance(container, cst.Name) or facts.values.leaves_scope(scope, {root})):
            return  # a forward or loss function collecting what its caller backwards
        if isinstance(container, cst.Name) and facts.values.leaves_scope(scope, {root}) and \
                facts.phase.eval_evidence(loops[0]) is None and not facts.values.backwarded_in(value, loops[0]):
            return  # handed to the caller (or stored), which may backward it
        if any(facts.roles.backwards_in(loop) for loop in loops):
            context = "training"
        elif facts.values.hands_graph_away(loops[0]):
            context = "unknown"  # the graph goes to code that may backward it
        else:
            context = "no-backward"
        fixed = _detach_before_move(value)
        fix = None
        if fixed is not None:
            fix = Fix((Replace(value, fixed),), Safety.SAFE, f"store `{show(fixed)}`")
        self.report(node, self._message(dotted, value, fixed, context), fix)

    @staticmethod
    def _message(container: str, value: cst.BaseExpression, fixed: Optional[cst.BaseExpression],
                 context: str) -> str:
        moved = _moved_to_cpu(value)
        advice = f"store `{show(fixed)}`" if fixed is not None else "store detached tensors"
        if context == "training":
            return (f"`{container}` keeps a tensor with its autograd graph; in this training loop "
                    f"backward() frees the graph's saved tensors, so the cost is the linked autograd "
                    f"history, not GPU memory: {advice}")
        if context == "unknown":
            return (f"`{container}` keeps a tensor with its autograd graph, and with it the graph's "
                    f"saved activations unless a backward frees them: {advice}")
        if moved:
            return (f"`{container}` keeps CPU copies that still hold the autograd graph (`.cpu()` / "
                    f"`.to()` do not detach), so each batch's saved activations stay on the GPU "
                    f"(233 MB kept in a measured eval loop on an H200): {advice}")
        return (f"`{container}` keeps a tensor with its autograd graph, so every batch's saved "
                f"activations stay on the GPU until `{container}` is dropped: {advice}")
