"""MEM206 rnn-hidden-not-detached."""

from __future__ import annotations

from typing import List, Optional, Set

import libcst as cst

from memlint.analysis.dataflow import sources_of
from memlint.analysis.tree import walk_scope
from memlint.findings import Fix, InsertAfter, Safety
from memlint.rule import Claim, Invalid, Rule

_TENSOR_STATE = frozenset({"torch.nn.GRU", "torch.nn.RNN", "torch.nn.GRUCell", "torch.nn.RNNCell"})
_TUPLE_STATE = frozenset({"torch.nn.LSTM"})


def _state_names(target: cst.BaseExpression, whole: bool = True) -> List[cst.Name]:
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _state_names(e.value, False)]
    return []


class RnnHiddenNotDetached(Rule):
    """
    ## What it does
    Finds recurrent state carried from one iteration of a training loop to the next with its
    autograd graph: `out, h = rnn(x, h)` in a loop that calls `backward()` every iteration and
    never detaches or resets `h`.

    ## Why is this bad?
    The new `h` is computed from the old one, so each iteration's graph hangs off all the
    previous ones. The second `backward()` then either fails ("Trying to backward through the
    graph a second time") or, with `retain_graph=True` (MEM205), walks and keeps the whole
    history: memory and step time grow every iteration.

    ## Example
    ```python
    h = None
    for x, y in loader:
        out, h = rnn(x, h)
        loss = criterion(out, y)
        loss.backward(retain_graph=True)
    ```

    Use instead:
    ```python
    h = None
    for x, y in loader:
        out, h = rnn(x, h)
        h = h.detach()
        loss = criterion(out, y)
        loss.backward(retain_graph=True)
    ```

    ## When it is not reported
    State reset or detached in the loop (`h = h.detach()`, `h.detach_()`, `h = None`,
    `h = repackage_hidden(h)`, a fresh `init_hidden()`), state unrolled over time steps with
    one backward after the loop (backpropagation through time), and loops without a backward.

    ## Fix
    `h = h.detach()` right after the recurrent call (`tuple(s.detach() for s in h)` for an
    `nn.LSTM` state), when the state is not read again in that iteration. Reported without a
    fix when the type of the state is unknown.

    ## Fix safety
    Unsafe: detaching truncates backpropagation at the iteration boundary by design: the
    gradients no longer flow into earlier iterations.
    """

    CODE = "MEM206"
    NAME = "rnn-hidden-not-detached"
    MESSAGE = "recurrent state is carried across iterations with its autograd graph"
    FIX_SAFETY = Safety.UNSAFE
    CLAIM = Claim.PEAK_LOWER

    VALID = (
        "import torch\nh = None\nfor x, y in loader:\n    if h is not None:\n        h = h.detach()\n"
        "    out, h = rnn(x, h)\n    criterion(out, y).backward()\n",
        "import torch\nfor x, y in loader:\n    h = model.init_hidden(x.size(0))\n    out, h = model(x, h)\n"
        "    criterion(out, y).backward()\n",
        "import torch\nhidden = init()\nfor x, y in loader:\n    hidden = repackage_hidden(hidden)\n"
        "    out, hidden = model(x, hidden)\n    criterion(out, y).backward()\n",
        # backpropagation through time: one backward after the unrolled loop
        "import torch\nh = h0\nouts = []\nfor t in range(T):\n    out, h = cell(x[t], h)\n    outs.append(out)\n"
        "loss = criterion(torch.stack(outs), y)\nloss.backward()\n",
        "import torch\nfor x, y in loader:\n    h = None\n    for t in range(x.size(0)):\n"
        "        out, h = rnn(x[t], h)\n    criterion(out, y).backward()\n",
        # generation without a backward
        "import torch\nwith torch.no_grad():\n    for t in range(n):\n        tok, h = model(tok, h)\n",
        "import torch\nh = None\nfor x, y in loader:\n    out, h = rnn(x, h)\n    h.detach_()\n"
        "    criterion(out, y).backward()\n",
    )
    INVALID = (
        Invalid(
            "import torch\nimport torch.nn as nn\nrnn = nn.GRU(8, 16)\nh = None\nfor x, y in loader:\n"
            "    out, h = rnn(x, h)\n    loss = criterion(out, y)\n    loss.backward(retain_graph=True)\n"
            "    optimizer.step()\n",
            "import torch\nimport torch.nn as nn\nrnn = nn.GRU(8, 16)\nh = None\nfor x, y in loader:\n"
            "    out, h = rnn(x, h)\n    h = h.detach()\n    loss = criterion(out, y)\n"
            "    loss.backward(retain_graph=True)\n    optimizer.step()\n",
        ),
        Invalid(
            "import torch\nlstm = torch.nn.LSTM(8, 16)\nstate = None\nfor x, y in loader:\n"
            "    out, state = lstm(x, state)\n    criterion(out, y).backward(retain_graph=True)\n",
            "import torch\nlstm = torch.nn.LSTM(8, 16)\nstate = None\nfor x, y in loader:\n"
            "    out, state = lstm(x, state)\n    state = tuple(s.detach() for s in state)\n"
            "    criterion(out, y).backward(retain_graph=True)\n",
        ),
        Invalid(
            "import torch\nfor x, y in loader:\n    out, (h, c) = model(x, (h, c))\n"
            "    criterion(out, y).backward(retain_graph=True)\n",
            "import torch\nfor x, y in loader:\n    out, (h, c) = model(x, (h, c))\n    h = h.detach()\n"
            "    c = c.detach()\n    criterion(out, y).backward(retain_graph=True)\n",
        ),
        Invalid(
            "import torch\ncell = torch.nn.GRUCell(8, 16)\nfor x, y in loader:\n    h = cell(x, h)\n"
            "    criterion(h, y).backward()\n",
        ),
        # the state's type is unknown: reported without a fix
        Invalid("import torch\nfor x, y in loader:\n    out, hidden = model(x, hidden)\n"
                "    criterion(out, y).backward(retain_graph=True)\n"),
    )

    def visit_Assign(self, node: cst.Assign) -> None:
        call = node.value
        if len(node.targets) != 1 or not isinstance(call, cst.Call) or not call.args or \
                not any(isinstance(a, (cst.For, cst.While)) for a in self.context.ancestors):
            return
        facts = self.facts
        if not facts.roles.is_forward(call):
            return
        names = _state_names(node.targets[0].target)
        args: Set[str] = set().union(*(sources_of(a.value) for a in call.args)) if call.args else set()
        state = [n for n in names if n.value in args]
        if not state or facts.regions.grad_enabled(node) is not True:
            return
        loop = next((outer for outer in facts.tree.loops_around(node) if facts.roles.backwards_in(outer)), None)
        if loop is None:
            return
        scope = facts.tree.scope_of(node)
        for name in state:
            for bind in facts.scopes.bindings(scope, name.value):
                if bind.node is not node and facts.tree.contains(loop.body, bind.node):  # type: ignore[attr-defined]
                    return  # reset or detached in the loop
        if self._detached_in_place(loop, {n.value for n in state}):
            return
        text = ", ".join(f"`{n.value}`" for n in state)
        fix = self._fix(node, loop, call, state)
        self.report(call, (
            f"{text} {'is' if len(state) == 1 else 'are'} carried to the next iteration with its autograd graph, linking every "
            f"step's graph to the previous ones: backward() then fails on the freed graph or, "
            f"with retain_graph=True, keeps the whole history and memory grows every step; "
            f"detach the state each iteration (this truncates backpropagation there)"), fix)

    @staticmethod
    def _detached_in_place(loop: cst.CSTNode, names: Set[str]) -> bool:
        for node in walk_scope(loop):
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
                    node.func.attr.value in ("detach_", "zero_") and sources_of(node.func.value) & names:
                return True
        return False

    def _fix(self, node: cst.Assign, loop: cst.CSTNode, call: cst.Call, state: List[cst.Name]) -> Optional[Fix]:
        facts = self.facts
        line = facts.tree.parent(node)
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return None
        constructor = facts.receivers.constructor_of(call.func)
        lines = []
        for name in state:
            if self._is_tuple_element(node, name) or constructor in _TENSOR_STATE:
                code = f"{name.value} = {name.value}.detach()"
            elif constructor in _TUPLE_STATE and name is not node.targets[0].target:
                code = f"{name.value} = tuple(s.detach() for s in {name.value})"
            else:
                return None
            lines.append(cst.parse_statement(code))
        if self._read_later(node, loop, {n.value for n in state}):
            return None
        return Fix((InsertAfter(line, tuple(lines)),), Safety.UNSAFE,
                   "detach the recurrent state after the call")

    @staticmethod
    def _is_tuple_element(node: cst.Assign, name: cst.Name) -> bool:
        """`(h, c)` inside `out, (h, c) = ...`: an element of a nested tuple target."""
        target = node.targets[0].target
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                if isinstance(element.value, (cst.Tuple, cst.List)) and any(
                        e.value is name for e in element.value.elements):
                    return True
        return False

    def _read_later(self, node: cst.Assign, loop: cst.CSTNode, names: Set[str]) -> bool:
        facts = self.facts
        position = facts.tree.order(node)
        for other in walk_scope(loop.body):  # type: ignore[attr-defined]
            if isinstance(other, cst.Name) and other.value in names and facts.tree.order(other) > position \
                    and not facts.tree.contains(node, other):
                return True
        return False
