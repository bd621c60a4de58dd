"""MEM302 zero-grad-before-step."""

from __future__ import annotations

from typing import Optional, Sequence

import libcst as cst

from memlint.analysis import Facts
from memlint.findings import Fix, InsertAfter, Remove, Safety
from memlint.rule import Claim, Invalid, Rule


class ZeroGradBeforeStep(Rule):
    """
    ## What it does
    Finds `optimizer.zero_grad()` between `loss.backward()` and `optimizer.step()` of the same
    optimizer, in one block.

    ## Why is this bad?
    The step runs after the gradients were cleared: with `set_to_none=True` (the default) every
    parameter is skipped and nothing is learned; with zeros, only momentum and weight decay
    move the weights. The loss stays flat and the memory of the backward is spent for nothing.

    ## Example
    ```python
    loss.backward()
    optimizer.zero_grad()
    optimizer.step()
    ```

    Use instead:
    ```python
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    ```

    ## Fix
    Moves the `zero_grad()` statement to just after the step (after `scaler.update()` when that
    follows it).

    ## Fix safety
    Unsafe: it changes what the program computes - on purpose, the parameters now change.
    """

    CODE = "MEM302"
    NAME = "zero-grad-before-step"
    MESSAGE = "`zero_grad()` between `backward()` and `step()` clears the gradients the step needs"
    FIX_SAFETY = Safety.UNSAFE
    CLAIM = Claim.GRADIENTS_FIXED

    VALID = (
        "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in loader:\n"
        "    opt.zero_grad()\n    model(x).sum().backward()\n    opt.step()\n",
        "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in loader:\n"
        "    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n    opt.zero_grad()\n",
        # GAN: clearing the other network's gradients between its backward and this step is intended
        "import torch\nfor x in loader:\n    loss_g = netD(netG(z)).mean()\n    loss_g.backward()\n"
        "    opt_d.zero_grad()\n    opt_g.step()\n",
        # the model cleared is not the one this optimizer steps
        "import torch\nopt_g = torch.optim.Adam(netG.parameters())\nfor x in loader:\n    err_g = netD(netG(z)).mean()\n"
        "    err_g.backward()\n    netD.zero_grad()\n    opt_g.step()\n",
        # a fresh backward between the reset and the step
        "import torch\nfor x in loader:\n    warmup_loss.backward()\n    opt.zero_grad()\n"
        "    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n",
        # the step of another iteration: accumulation with the reset on top
        "import torch\nfor i, x in enumerate(loader):\n    loss = model(x).sum()\n    loss.backward()\n"
        "    if (i + 1) % k == 0:\n        opt.step()\n        opt.zero_grad()\n",
    )
    INVALID = (
        # model.zero_grad() clears what the optimizer built on its parameters needs
        Invalid(
            "import torch\nopt = torch.optim.Adam(model.parameters())\nfor x in loader:\n    loss = model(x).sum()\n"
            "    loss.backward()\n    model.zero_grad()\n    opt.step()\n",
            "import torch\nopt = torch.optim.Adam(model.parameters())\nfor x in loader:\n    loss = model(x).sum()\n"
            "    loss.backward()\n    opt.step()\n    model.zero_grad()\n",
        ),
        Invalid(
            "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in loader:\n"
            "    loss = model(x).sum()\n    loss.backward()\n    # start clean\n    opt.zero_grad()\n    opt.step()\n",
            "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in loader:\n"
            "    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n    # start clean\n    opt.zero_grad()\n",
        ),
        Invalid(
            "import torch\ndef train_step(self, batch):\n    loss = self.model(batch).mean()\n"
            "    self.scaler.scale(loss).backward()\n    self.optimizer.zero_grad(set_to_none=True)\n"
            "    self.scaler.step(self.optimizer)\n    self.scaler.update()\n",
            "import torch\ndef train_step(self, batch):\n    loss = self.model(batch).mean()\n"
            "    self.scaler.scale(loss).backward()\n    self.scaler.step(self.optimizer)\n    self.scaler.update()\n"
            "    self.optimizer.zero_grad(set_to_none=True)\n",
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if not (type(node.func) is cst.Attribute and node.func.attr.value == "zero_grad"):
            return
        facts = self.facts
        zero = next((z for z in facts.roles.zero_grads if z.node is node), None)
        statement = facts.tree.statement_of(node)
        if zero is None or zero.target is None or statement is None:
            return
        body, index = facts.tree.siblings(statement)
        if index < 0:
            return
        optimizer = self._cleared_optimizer(facts, body, index, zero.target)
        step_at = self._step_after(facts, body, index, optimizer) if optimizer else None
        if step_at is None or not self._backward_before(facts, body, index, optimizer):  # type: ignore[arg-type]
            return
        step_statement = body[step_at]
        step = facts.roles.steps_under(step_statement)[0]
        anchor = facts.roles.after_step(step, step_statement)
        moved = statement.with_changes(leading_lines=[line for line in statement.leading_lines if line.comment])
        fix = Fix((Remove(statement), InsertAfter(anchor, (moved,))), Safety.UNSAFE,  # type: ignore[arg-type]
                  f"move `{zero.target}.zero_grad()` after the step")
        message = (f"`{zero.target}.zero_grad()` runs after `backward()` and before `{optimizer}.step()`: "
                   f"the step finds no gradients and the parameters do not learn; clear them after the step")
        self.report(node, message, fix)

    @staticmethod
    def _cleared_optimizer(facts: Facts, body: Sequence[cst.CSTNode], index: int, target: str) -> Optional[str]:
        """The optimizer whose gradients `target.zero_grad()` clears: itself, or for a model the
        optimizer stepped next that is built on that model's parameters."""
        if not facts.receivers.is_model(cst.parse_expression(target)):
            return target
        for stmt in body[index + 1:]:
            for step in facts.roles.steps_under(stmt):
                if step.optimizer is not None:
                    return step.optimizer if target in facts.receivers.parameters_owners(step.optimizer) else None
        return None

    @staticmethod
    def _step_after(facts: Facts, body: Sequence[cst.CSTNode], index: int, optimizer: str) -> Optional[int]:
        """The next statement of the block that steps `optimizer`, with no backward before it."""
        for position in range(index + 1, len(body)):
            stmt = body[position]
            if facts.roles.backwards_under(stmt):
                return None
            steps = [s for s in facts.roles.steps_under(stmt) if s.optimizer == optimizer]
            if any(facts.tree.statement_of(s.call) is stmt for s in steps):
                return position
            if steps:
                return None  # a conditional step: not this simple shape
        return None

    @staticmethod
    def _backward_before(facts: Facts, body: Sequence[cst.CSTNode], index: int, optimizer: str) -> bool:
        """The nearest earlier statement of the block that backwards or steps does backward."""
        for position in range(index - 1, -1, -1):
            stmt = body[position]
            if any(s.optimizer == optimizer for s in facts.roles.steps_under(stmt)):
                return False
            if any(facts.values.accumulates_grad(b) for b in facts.roles.backwards_under(stmt)):
                return True
        return False
