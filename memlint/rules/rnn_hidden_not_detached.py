"""MEM206 rnn-hidden-not-detached."""

from __future__ import annotations

import re
from typing import List, Optional, Set

import libcst as cst

from memlint.analysis.dataflow import leaf_targets, sources_of
from memlint.analysis.tree import dotted_name, own_method, walk_scope
from memlint.findings import Fix, InsertAfter, Safety
from memlint.rule import Claim, Invalid, Rule

_TENSOR_STATE = frozenset({"torch.nn.GRU", "torch.nn.RNN", "torch.nn.GRUCell", "torch.nn.RNNCell"})
_TUPLE_STATE = frozenset({"torch.nn.LSTM"})


def _state_names(target: cst.BaseExpression, whole: bool = True) -> List[cst.Name]:
    if type(target) is cst.Name:
        return [target]
    if type(target) in (cst.Tuple, cst.List):
        return [n for e in target.elements for n in _state_names(e.value, False)]
    return []


# What a name says it holds, where it is no recurrent state: weights, a mask.
_NOT_STATE = re.compile(r"(^|_)(weights?|masks?)(_|$)")


def _weights_handed_back(call: cst.Call, name: str) -> bool:
    """`pred, loss, weight_mat = model.forward_boosting(x, weight_mat)`: a variant of `forward`
    named for its use, handing back weights or a mask it was given (adaRNN's boosting returns
    its weights unchanged). Recurrent state goes through the model's call (`rnn(x, h)`), or is
    named for what it is (`model.forward_step(x, hidden)`)."""
    func = call.func
    return type(func) is cst.Attribute and func.attr.value.startswith("forward_") and \
        _NOT_STATE.search(name) is not None


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

    Also state kept on the module itself and fed back by every forward
    (`out, self.hidden = self.rnn(x, self.hidden)`), or on a trainer by its step method, which
    backwards and runs every step (or every few steps: each run still links its graph to the
    last one's), when no other method resets or detaches it.

    ## When it is not reported
    State reset or detached in the loop (`h = h.detach()`, `h.detach_()`, `h = None`,
    `h = repackage_hidden(h)`, a fresh `init_hidden()`), state unrolled over time steps with
    one backward after the loop (backpropagation through time), loops without a backward, and
    weights or a mask handed to and back from a variant of `forward` named for its use
    (`pred, loss, weight_mat = model.forward_boosting(x, weight_mat)`: adaRNN's returns them
    unchanged), and
    state an instance's `__init__`, or a method only `__init__` calls, binds (it runs once:
    `self.net = self.net_ddp(self.net)` wraps a network, it feeds nothing back).

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
        # ... a streaming predictor that never backwards: no graph history to link (MEM203's concern)
        "import torch\nclass Streamer:\n    def __init__(self, model):\n        self.model = model\n        self.state = None\n\n"
        "    def push(self, x):\n        out, self.state = self.model(x, self.state)\n        return out.argmax(-1)\n\n"
        "    def run(self, chunks):\n        return [self.push(c.cuda()) for c in chunks]\n",
        # ... a trainer whose model (code out of sight) may detach the state it returns, or whose
        # caller resets the state before each step
        "import torch\nclass Trainer:\n    def train_step(self, data, target):\n"
        "        loss, self.mems = self.model(data, target, self.mems)\n        self.optimizer.zero_grad()\n"
        "        loss.backward()\n        self.optimizer.step()\n\n    def fit(self, loader):\n"
        "        for data, target in loader:\n            self.train_step(data.cuda(), target.cuda())\n",
        "import torch\nclass Trainer:\n    def __init__(self):\n        self.model = torch.nn.LSTM(8, 8)\n\n"
        "    def train_step(self, x, y):\n        out, self.hidden = self.model(x, self.hidden)\n"
        "        loss = (out - y).pow(2).mean()\n        self.optimizer.zero_grad()\n        loss.backward()\n"
        "        self.optimizer.step()\n\ntrainer = Trainer()\nfor x, y in loader:\n    trainer.hidden = None\n"
        "    trainer.train_step(x.cuda(), y.cuda())\n",
        # ... a trainer that detaches the state after each step
        "import torch\nclass Trainer:\n    def step(self, x, y):\n        out, self.hidden = self.model(x, self.hidden)\n"
        "        loss = torch.nn.functional.mse_loss(out, y)\n        self.opt.zero_grad()\n        loss.backward()\n"
        "        self.opt.step()\n        self.hidden = tuple(h.detach() for h in self.hidden)\n\n"
        "    def fit(self, loader):\n        for x, y in loader:\n            self.step(x.cuda(), y.cuda())\n",
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
        # a computing method that hands back the weights it was given (adaRNN's boosting)
        "import torch\nweight_mat = None\nfor x, y in loader:\n"
        "    pred, loss_transfer, dist, weight_mat = model.forward_boosting(x, weight_mat)\n"
        "    loss = criterion(pred, y) + loss_transfer\n    optimizer.zero_grad()\n    loss.backward()\n"
        "    optimizer.step()\n",
        # generation without a backward
        "import torch\nwith torch.no_grad():\n    for t in range(n):\n        tok, h = model(tok, h)\n",
        "import torch\nh = None\nfor x, y in loader:\n    out, h = rnn(x, h)\n    h.detach_()\n"
        "    criterion(out, y).backward()\n",
        # a network wrapped once, in `__init__`, when the model is built: nothing is fed back
        "import torch\nclass SRModel(BaseModel):\n    def __init__(self, opt):\n        super().__init__(opt)\n"
        "        self.net_g = build_network(opt['network_g'])\n        self.net_g = self.net_ddp(self.net_g)\n\n"
        "    def optimize_parameters(self, step):\n        self.output = self.net_g(self.lq)\n",
        # ... or in a method only `__init__` calls
        "import torch\nclass SRModel(BaseModel):\n    def __init__(self, opt):\n        super().__init__(opt)\n"
        "        self.net_g = build_network(opt['network_g'])\n        self._setup()\n\n"
        "    def _setup(self):\n        self.net_g = self.net_ddp(self.net_g)\n\n"
        "    def optimize_parameters(self, step):\n        self.output = self.net_g(self.lq)\n",
        # `model_to_device` moves a model: calling it runs none
        "import torch\nclass SRModel(BaseModel):\n    def setup(self, opt):\n"
        "        self.net_g = self.model_to_device(self.net_g)\n\n"
        "    def optimize_parameters(self, step):\n        self.output = self.net_g(self.lq)\n",
        # state on the module, reset between sequences by another method
        "import torch\nimport torch.nn as nn\nclass Tagger(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.gru = nn.GRU(8, 8)\n        self.state = None\n    def reset(self):\n        self.state = None\n"
        "    def forward(self, x):\n        out, self.state = self.gru(x, self.state)\n        return out\n",
    )
    INVALID = (
        # a variant of `forward` that carries recurrent state (named for what it is)
        Invalid(
            "import torch\n\n\ndef train(model, loader, optimizer, criterion):\n    state = None\n"
            "    for x, y in loader:\n        x, y = x.cuda(), y.cuda()\n"
            "        out, state = model.forward_with_state(x, state)\n"
            "        loss = criterion(out, y)\n        optimizer.zero_grad()\n"
            "        loss.backward()\n        optimizer.step()\n"
        ),
        # a step method run on some steps only: each run still links to the previous one's graph
        Invalid(
            "import torch\n\nclass Agent:\n    def __init__(self):\n        self.rnn = torch.nn.GRU(8, 8).cuda()\n"
            "        self.opt = torch.optim.Adam(self.rnn.parameters())\n        self.hidden = None\n\n"
            "    def update(self, step, obs, target):\n        if step % 4 != 0:\n            return\n"
            "        out, self.hidden = self.rnn(obs, self.hidden)\n"
            "        loss = torch.nn.functional.mse_loss(out, target)\n        self.opt.zero_grad()\n"
            "        loss.backward()\n        self.opt.step()\n\n    def run(self, env):\n"
            "        for step, (obs, target) in enumerate(env):\n            self.update(step, obs.cuda(), target.cuda())\n"
        ),
        # a trainer's step keeps the state on the instance, run every step from its loop
        Invalid("import torch\nclass Trainer:\n    def __init__(self, opt):\n        self.model = torch.nn.GRU(8, 8)\n"
                "        self.opt = opt\n        self.hidden = None\n\n    def step(self, x, y):\n"
                "        out, self.hidden = self.model(x, self.hidden)\n"
                "        loss = torch.nn.functional.mse_loss(out, y)\n        self.opt.zero_grad()\n"
                "        loss.backward()\n        self.opt.step()\n\n    def fit(self, loader):\n"
                "        for x, y in loader:\n            self.step(x.cuda(), y.cuda())\n"),
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
        # state kept on the module and fed back by every forward: reported, no fix
        Invalid("import torch\nimport torch.nn as nn\nclass Stream(nn.Module):\n    def __init__(self):\n"
                "        super().__init__()\n        self.lstm = nn.LSTM(16, 16)\n        self.memory = None\n"
                "    def forward(self, x):\n        out, self.memory = self.lstm(x, self.memory)\n        return out\n"),
    )

    def visit_Assign(self, node: cst.Assign) -> None:
        call = node.value
        if len(node.targets) != 1 or not type(call) is cst.Call or not call.args:
            return
        facts = self.facts
        if not any(type(a) in (cst.For, cst.While) for a in self.context.ancestors):
            # (state on the instance is a target `self.h`: most assignments outside loops have none)
            if any(_on_self(leaf) for leaf in leaf_targets(node.targets[0].target)) and facts.roles.is_forward(call):
                self._attribute_state(node, call)
            return
        if not facts.roles.is_forward(call):
            return
        names = _state_names(node.targets[0].target)
        args: Set[str] = set().union(*(sources_of(a.value) for a in call.args)) if call.args else set()
        state = [n for n in names if n.value in args and not _weights_handed_back(call, n.value)]
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
        carried = "is carried to the next iteration with its autograd graph" if len(state) == 1 else \
            "are carried to the next iteration with their autograd graphs"
        self.report(call, (
            f"{text} {carried}, linking every "
            f"step's graph to the previous ones: backward() then fails on the freed graph or, "
            f"with retain_graph=True, keeps the whole history and memory grows every step; "
            f"detach the state each iteration (this truncates backpropagation there)"), fix)

    @staticmethod
    def _detached_in_place(loop: cst.CSTNode, names: Set[str]) -> bool:
        for node in walk_scope(loop):
            if type(node) is cst.Call and type(node.func) is cst.Attribute and \
                    node.func.attr.value in ("detach_", "zero_") and sources_of(node.func.value) & names:
                return True
        return False

    def _fix(self, node: cst.Assign, loop: cst.CSTNode, call: cst.Call, state: List[cst.Name]) -> Optional[Fix]:
        facts = self.facts
        line = facts.tree.parent(node)
        if not type(line) is cst.SimpleStatementLine or len(line.body) != 1:
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
        if type(target) in (cst.Tuple, cst.List):
            for element in target.elements:
                if type(element.value) in (cst.Tuple, cst.List) and any(
                        e.value is name for e in element.value.elements):
                    return True
        return False

    def _read_later(self, node: cst.Assign, loop: cst.CSTNode, names: Set[str]) -> bool:
        facts = self.facts
        position = facts.tree.order(node)
        for other in walk_scope(loop.body):  # type: ignore[attr-defined]
            if type(other) is cst.Name and other.value in names and facts.tree.order(other) > position \
                    and not facts.tree.contains(node, other):
                return True
        return False

    def _attribute_state(self, node: cst.Assign, call: cst.Call) -> None:
        """`out, self.hidden = self.rnn(x, self.hidden)` in a model's method, or in a trainer's
        method that backwards and runs every step: the state lives on the instance and every
        forward feeds it back, unless another method resets or detaches it."""
        facts = self.facts
        klass = facts.scopes.enclosing_class(node)
        method = facts.tree.function_of(node)
        if klass is None or method is None or self._runs_once(klass, method):
            return  # run once, as the instance is built: nothing is fed back
        read = {dotted for a in call.args for dotted in _dotted_names(a.value)}
        state = [leaf for leaf in leaf_targets(node.targets[0].target) if _on_self(leaf) and dotted_name(leaf) in read]
        if not state or facts.regions.grad_enabled(node) is not True:
            return
        for leaf in state:
            attr = leaf.attr.value  # type: ignore[attr-defined]
            if self._reset_elsewhere(klass, node, attr):
                return
        if facts.receivers.is_model_class(klass):  # (what the class is, asked late: it may go to the project)
            where = "on the module and fed back into every forward"
        else:  # a trainer's step method that backwards, run every step, with a recurrent module it can see
            if not facts.roles.backwards_in(method.body) or \
                    facts.per_step(node) is None and not facts.steps.periodic(node) or \
                    facts.receivers.constructor_of(call.func) not in _TENSOR_STATE | _TUPLE_STATE or \
                    self._assigned_outside(klass, [leaf.attr.value for leaf in state]):  # type: ignore[attr-defined]
                return  # (a model of unknown code may detach the state it returns: Transformer-XL's memories)
            where = "on the instance and fed back into every step's forward"
        text = ", ".join(f"`{dotted_name(leaf)}`" for leaf in state)
        self.report(call, (
            f"{text} is kept {where} with its autograd graph, linking "
            f"each call's graph to all the previous ones: backward() then fails on the freed graph or, with "
            f"retain_graph=True, keeps the whole history and memory grows every step; detach it in each "
            f"forward or reset it between sequences (this truncates backpropagation there)"))

    def _runs_once(self, klass: cst.ClassDef, method: cst.FunctionDef) -> bool:
        """`method` is `__init__`, or a method that only `__init__` calls (`self._setup()`): it
        runs as the instance is built."""
        if method.name.value == "__init__":
            return True
        init = own_method(klass, "__init__")
        calls = [call for call in self.facts.scopes.calls
                 if type(call.func) is cst.Attribute and call.func.attr.value == method.name.value]  # type: ignore[attr-defined]
        return init is not None and bool(calls) and all(self.facts.tree.contains(init, call) for call in calls)

    def _assigned_outside(self, klass: cst.ClassDef, attrs: List[str]) -> bool:
        """Code outside the class binds one of these attributes of an instance (`trainer.hidden =
        None` before each step)."""
        for assign in self.facts.scopes.assigns:
            if self.facts.tree.contains(klass, assign):
                continue
            if any(type(leaf) is cst.Attribute and leaf.attr.value in attrs  # type: ignore[attr-defined]
                   for target in assign.targets for leaf in leaf_targets(target.target)):
                return True
        return False

    @staticmethod
    def _reset_elsewhere(klass: cst.ClassDef, node: cst.Assign, attr: str) -> bool:
        """Another method (not `__init__`), or another statement, binds `self.<attr>` or detaches it in place."""
        for method in klass.body.body:
            if not type(method) is cst.FunctionDef or method.name.value == "__init__":
                continue
            for other in walk_scope(method):
                if type(other) is cst.Assign and other is not node and any(
                        dotted_name(leaf) == f"self.{attr}" for t in other.targets for leaf in leaf_targets(t.target)):
                    return True
                if type(other) is cst.Call and type(other.func) is cst.Attribute and \
                        other.func.attr.value in ("detach_", "zero_") and \
                        (dotted_name(other.func.value) or "").startswith(f"self.{attr}"):
                    return True
        return False


def _on_self(leaf: cst.BaseExpression) -> bool:
    """`self.h`: an attribute of the instance itself."""
    return type(leaf) is cst.Attribute and type(leaf.value) is cst.Name and leaf.value.value == "self"  # type: ignore[attr-defined]


def _dotted_names(expr: cst.BaseExpression) -> Set[str]:
    """`self.h` and `self.c` in `(self.h, self.c)`."""
    dotted = dotted_name(expr)
    if dotted is not None:
        return {dotted}
    if type(expr) in (cst.Tuple, cst.List):
        return {d for e in expr.elements for d in _dotted_names(e.value)}
    return set()
