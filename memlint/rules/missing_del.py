"""MEM204 missing-del (opt-in)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from memlint.analysis.loops import innermost_loop
from memlint.findings import Fix, InsertAfter, Safety
from memlint.rule import Claim, Invalid, Rule

_LEAVES = (cst.Return, cst.Continue, cst.Break, cst.Raise)


def _forward_of(value: cst.BaseExpression) -> Optional[cst.Call]:
    """`model(x)`, also reached through `.logits`, `[0]` or `.float()`."""
    while True:
        if isinstance(value, cst.Call):
            return value
        if isinstance(value, (cst.Attribute, cst.Subscript)):
            value = value.value
        else:
            return None


class MissingDel(Rule):
    """
    ## What it does
    Finds a model output bound in a loop body and still referenced when the next iteration's
    forward runs: nothing frees it between the end of one iteration and the rebinding in the
    next. Opt-in: whether it matters depends on the output's size, so the verifier decides.

    ## Why is this bad?
    `out = model(x)` allocates the new output while the name still holds the previous one, so
    peak memory holds two outputs (large for language-model logits: batch x sequence x vocab).
    `del out` at the end of the body frees it before the next forward.

    ## Example
    ```python
    for x, y in loader:
        logits = model(x)
        loss = criterion(logits, y)
        loss.backward()
        optimizer.step()
    ```

    Use instead:
    ```python
    for x, y in loader:
        logits = model(x)
        loss = criterion(logits, y)
        loss.backward()
        optimizer.step()
        del logits
    ```

    ## When it is not reported
    Outputs that outlive the iteration anyway (appended, stored, returned, read after the loop
    or in the next iteration), outputs bound only on some paths (a `del` could fail), and
    bodies that already `del` them.

    ## Fix
    `del name` after the last statement of the loop body.

    ## Fix safety
    Safe: the name is not read after the loop nor in the next iteration before it is bound
    again. No fix when the body ends by leaving the loop (`return`, `continue`, `raise`).
    """

    CODE = "MEM204"
    NAME = "missing-del"
    MESSAGE = "a forward output is still alive while the next iteration's forward runs"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.PEAK_LOWER
    DEFAULT_ON = False

    VALID = (
        "import torch\nfor x, y in loader:\n    out = model(x)\n    loss = criterion(out, y)\n    loss.backward()\n"
        "    del out\n",
        "import torch\nouts = []\nfor x in loader:\n    out = model(x)\n    outs.append(out)\n",
        "import torch\nfor x in loader:\n    out = model(x)\nprint(out)\n",
        "import torch\nfor x in loader:\n    if x is not None:\n        out = model(x)\n        print(out.sum())\n",
        "import torch\nfor x in loader:\n    y = torch.relu(x)\n    print(y.sum())\n",
        "import torch\nprev = None\nfor x in loader:\n    if prev is not None:\n        print(prev)\n"
        "    out = model(x)\n    prev = out\n",
        # HF generate() results are not forward outputs with activations
        "import torch\nfor batch in loader:\n    ids = model.generate(**batch)\n    print(ids.shape)\n",
    )
    INVALID = (
        Invalid(
            "import torch\nfor x, y in loader:\n    logits = model(x)\n    loss = criterion(logits, y)\n"
            "    loss.backward()\n    optimizer.step()\n",
            "import torch\nfor x, y in loader:\n    logits = model(x)\n    loss = criterion(logits, y)\n"
            "    loss.backward()\n    optimizer.step()\n    del logits\n",
        ),
        Invalid(
            "import torch\ndef run(model, loader):\n    for batch in loader:\n        out = model(**batch).logits\n"
            "        if out.isnan().any():\n            print('nan')\n",
            "import torch\ndef run(model, loader):\n    for batch in loader:\n        out = model(**batch).logits\n"
            "        if out.isnan().any():\n            print('nan')\n        del out\n",
        ),
        Invalid("import torch\nfor x in loader:\n    out = model(x)\n    print(out.sum())\n    continue\n"),
    )

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
            return
        call = _forward_of(node.value)
        if call is None:
            return
        loop = innermost_loop(self.context.ancestors)
        facts = self.facts
        if loop is None or not facts.roles.is_forward(call):
            return
        line = facts.tree.parent(node)
        if not isinstance(line, cst.SimpleStatementLine) or facts.tree.parent(line) is not loop.body:
            return  # bound only on some paths: `del` could meet an unbound name
        name = node.targets[0].target.value
        loop_facts = self.facts.loop(loop, self.context.scope())
        if loop_facts.bindings_of(name) != 1 or loop_facts.escapes(name):
            return
        body = loop.body.body
        last = body[-1] if isinstance(body, (tuple, list)) else body
        fix = None
        if last is not line and not (isinstance(last, cst.SimpleStatementLine)
                                     and any(isinstance(s, _LEAVES) for s in last.body)):
            fix = Fix((InsertAfter(last, (cst.parse_statement(f"del {name}"),)),), Safety.SAFE,
                      f"`del {name}` at the end of the loop body")
        self.report(node, (
            f"`{name}` (a forward output) is still alive when the next iteration's forward runs, so "
            f"peak memory holds two of them: `del {name}` at the end of the loop body"), fix)
