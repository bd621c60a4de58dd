"""Roles: what a call does in a training step.

Asked as `facts.roles`, for every call of the module:

- `backwards` (`Backward`): `loss.backward()`, `scaler.scale(loss).backward()`,
  `accelerator.backward(loss)` / `manual_backward`, `torch.autograd.backward/grad`, a model's
  own `model.backward(input, output, grad)` (what it is handed counts as backwarded);
  `backward_of(call)`;
- `optimizer_steps` (`OptimizerStep`): `optimizer.step()` and `scaler.step(optimizer)` on a
  receiver that is an optimizer (memlint.analysis.receivers); `step_of(call)`;
  `after_step(step, stmt)`: where code after the step goes (after `scaler.update()`);
- `zero_grads` (`ZeroGrad`): `x.zero_grad(...)` and `p.grad = None`; `resets_grads(call)`: any
  call that clears gradients (`p.grad.zero_()`, `torch._foreach_zero_`, a helper named so);
  `grad_reads(node)`: `.grad` read under a node; `grads_updated_in_place` (`p.grad += g`
  somewhere); `is_grad_clip(call)`;
- `mode_calls` (`ModeCall`): `model.eval()` / `model.train()`; `latest_modes(scope, at)`: the
  latest mode call per receiver that `scope` made up to a position;
- `is_forward(call)` (a model called: `model(x)`, `self.net(x)`, `model.forward(x)`,
  `model.encode(x)`; not HF `generate()` nor a chat model's `chat()`, which `is_generate` tells), `is_loss(call)`
  (`criterion(out, y)`, `F.cross_entropy`), `uses_grad_scaler`, `step_hooked` (a hook on an
  optimizer's step), `asks_for_grad(node)` (code that needs autograd on: `torch.autograd.grad`,
  `requires_grad_()`, `enable_grad()`);
- under a node, helpers followed (memlint.analysis.calls), each with its call site in the node:
  `backwards_in`, `steps_in`, `forwards_in`, `optimizer_resets_in`; anywhere under a node, nested functions included,
  helpers not followed: `backwards_under`, `steps_under` (a binary search, not a scan);
  `backwards_of(scope)`: the backwards a scope runs itself; `backwarded_attributes`: the
  attributes a backward backwards (`self.total`).

Asked by: values (forwards and losses make graphs; what is backwarded), phase (does a loop
backward or step), MEM201/202/203/205/206 (`backwards_in`, `forwards_in`, `is_forward`),
MEM301/302 (steps, zero_grads, resets, `.grad` reads), MEM401/404 (backwards, the scaler).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from functools import cached_property
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

import libcst as cst

from memlint.analysis.calls import CallGraph
from memlint.analysis.dataflow import sources_of
from memlint.analysis.memo import per_node
from memlint.analysis.receivers import GRAD_SCALER, LOSS_NAME, Receivers, is_loss_class
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import TreeIndex, argument, children, dotted_name, last_part, literal_bool

# Helpers whose name says they clear gradients (`zero_grads(model)`, `self.reset_grad()`).
_RESET_NAME = re.compile(r"zero_?grad|reset_?grad|clear_?grad|grad\w*_?(zero|reset|clear|none)", re.IGNORECASE)
AUTOGRAD_BACKWARD = frozenset({"torch.autograd.backward"})
_AUTOGRAD_GRAD = frozenset({"torch.autograd.grad"})
_GENERATING = frozenset({"generate", "chat", "stream_chat", "batch_chat"})  # methods that decode a sequence
_TOKENIZER = re.compile(r"(^|_)tokeni[sz]er$", re.IGNORECASE)
_STEP_HOOKS = frozenset({"register_step_post_hook", "register_step_pre_hook", "register_optimizer_step_post_hook"})
# Objects whose `.backward(loss)` backwards its argument.
_BACKWARD_OWNER = re.compile(r"(accelerator|fabric|engine|trainer|manual_backward)$", re.IGNORECASE)
# Calls that show code wants gradients even without a backward of its own (saliency, adversarial
# examples, physics-informed losses).
_ASKS_FOR_GRAD_METHODS = frozenset({"requires_grad_", "retain_grad", "register_hook"})
_ASKS_FOR_GRAD_CALLS = frozenset({"torch.enable_grad", "torch.autograd.grad", "torch.autograd.backward",
                                  "torch.autograd.functional.jacobian", "torch.autograd.functional.hessian",
                                  "torch.func.grad", "torch.set_grad_enabled"})
# Methods of a model that run (part of) its forward.
_FORWARD_METHOD = re.compile(r"^(forward\w*|encode\w*|decode\w*|embed\w*|extract_features?|inference)$")
_FUNCTIONAL_LOSS = re.compile(r"^torch\.nn\.functional\.(\w+_loss|cross_entropy|binary_cross_entropy\w*|"
                              r"kl_div|nll_loss|mse_loss|l1_loss)$")


def _is_grad(expr: cst.BaseExpression) -> bool:
    """`p.grad`, `p.grad.data`, `p.grad[i]`."""
    while type(expr) is cst.Subscript or (type(expr) is cst.Attribute and expr.attr.value == "data"):
        expr = expr.value
    return type(expr) is cst.Attribute and expr.attr.value == "grad"


@dataclass(frozen=True)
class Backward:
    """A call that backpropagates: `loss.backward()`, `accelerator.backward(loss)`,
    `scaler.scale(loss).backward()`, `torch.autograd.backward(loss)`, `torch.autograd.grad(...)`."""

    call: cst.Call
    loss: Optional[cst.BaseExpression]  # what is backwarded (`loss`), when known
    kind: str  # "method", "owner" (accelerator.backward), "scaled", "autograd", "grad"
    scaler: Optional[cst.BaseExpression]  # `scaler` in `scaler.scale(loss).backward()`
    retain_graph: Optional[cst.BaseExpression]  # the value given for retain_graph=, if any
    names: FrozenSet[str]  # plain names the backwarded value comes from


@dataclass(frozen=True)
class OptimizerStep:
    call: cst.Call
    optimizer: Optional[str]  # dotted: "optimizer", "self.opt"; None when not a plain name
    scaler: Optional[str]  # "scaler" in `scaler.step(optimizer)`


@dataclass(frozen=True)
class ZeroGrad:
    """A gradient reset: `x.zero_grad(...)`, or an assignment `p.grad = None`."""

    node: cst.CSTNode  # the Call, or the Assign
    target: Optional[str]  # dotted receiver
    set_to_none: Optional[cst.BaseExpression]  # the value given for set_to_none, if any
    is_optimizer: bool


@dataclass(frozen=True)
class ModeCall:
    """`model.eval()` / `model.train()` (`train(False)` counts as eval)."""

    call: cst.Call
    target: str
    mode: str  # "eval" or "train"


class Roles:
    """The calls of one module by role (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes, calls: CallGraph,
                 receivers: Receivers) -> None:
        self.names = names
        self.tree = tree
        self.scopes = scopes
        self.calls = calls
        self.receivers = receivers
        self.mode_calls: List[ModeCall] = []
        for call in scopes.calls:
            func = call.func
            if type(func) is cst.Attribute and func.attr.value in ("eval", "train"):
                receiver = dotted_name(func.value) or self._bound_to(call)
                if receiver is not None:
                    mode = func.attr.value
                    flag = argument(call, "mode", 0)
                    if mode == "train" and flag is not None and literal_bool(flag.value) is False:
                        mode = "eval"
                    self.mode_calls.append(ModeCall(call, receiver, mode))
        self._grad_assigns = [assign for assign in scopes.assigns for target in assign.targets
                              if type(target.target) is cst.Attribute and target.target.attr.value == "grad"]
        self.backwards: List[Backward] = [b for b in map(self._backward, scopes.calls) if b is not None]
        self._backward_of = {id(b.call): b for b in self.backwards}
        self.optimizer_steps: List[OptimizerStep] = [
            s for s in map(self._optimizer_step, scopes.calls) if s is not None]
        self._step_of = {id(s.call): s for s in self.optimizer_steps}
        self.zero_grads: List[ZeroGrad] = self._find_zero_grads()
        self._optimizer_resets = {id(z.node) for z in self.zero_grads if z.is_optimizer}
        self._grad_reads: Dict[int, Tuple[List[cst.Attribute], List[int]]] = {}

    def _bound_to(self, call: cst.Call) -> Optional[str]:
        """The name a model made in place and put in a mode is bound to (`net =
        nn.DataParallel(model).to(device).eval()`: `net`), where the call is the value
        assigned."""
        statement = self.tree.parent(call)
        if type(statement) is not cst.Assign or statement.value is not call or len(statement.targets) != 1:  # type: ignore[attr-defined]
            return None
        return dotted_name(statement.targets[0].target)  # type: ignore[attr-defined]

    def _backward(self, call: cst.Call) -> Optional[Backward]:
        func = call.func
        qualified = self.names.call_name(call)
        retain = argument(call, "retain_graph")
        if qualified in AUTOGRAD_BACKWARD or qualified in _AUTOGRAD_GRAD:
            loss = argument(call, "tensors" if qualified in AUTOGRAD_BACKWARD else "outputs", 0)
            value = loss.value if loss is not None else None
            kind = "autograd" if qualified in AUTOGRAD_BACKWARD else "grad"
            return Backward(call, value, kind, None, retain.value if retain else None,
                            frozenset(sources_of(value)) if value is not None else frozenset())
        if qualified is not None and qualified.endswith(".backward"):  # torch.distributed.autograd ...
            names = frozenset().union(*(sources_of(a.value) for a in call.args)) if call.args else frozenset()
            return Backward(call, None, "autograd", None, retain.value if retain else None, names)
        if qualified is not None or type(func) is not cst.Attribute or \
                func.attr.value not in ("backward", "manual_backward"):
            return None
        receiver = func.value
        owner = dotted_name(receiver)
        if func.attr.value == "manual_backward" or call.args and call.args[0].keyword is None and (
                owner is not None and _BACKWARD_OWNER.search(last_part(owner)) or self.receivers.is_engine(receiver, call)):
            value = call.args[0].value if call.args else None
            return Backward(call, value, "owner", None, retain.value if retain else None,
                            frozenset(sources_of(value)) if value is not None else frozenset())
        if type(receiver) is cst.Call and type(receiver.func) is cst.Attribute and \
                receiver.func.attr.value == "scale" and receiver.args:
            value = receiver.args[0].value
            return Backward(call, value, "scaled", receiver.func.value, retain.value if retain else None,
                            frozenset(sources_of(value)))
        names = frozenset(sources_of(receiver))
        if call.args and self.receivers.is_model(receiver):
            # `model.backward(input_tensor, output_tensor, grad)`: a module has no `backward` of
            # torch's; its class's own (a pipeline stage's) backwards what it is handed
            names = names.union(*(sources_of(a.value) for a in call.args))
        return Backward(call, receiver, "method", None, retain.value if retain else None, names)

    def backward_of(self, call: cst.Call) -> Optional[Backward]:
        return self._backward_of.get(id(call))

    def _optimizer_step(self, call: cst.Call) -> Optional[OptimizerStep]:
        func = call.func
        if type(func) is not cst.Attribute or func.attr.value != "step":
            return None
        if self.names.call_name(call) is not None:
            return None
        receiver = func.value
        if call.args and call.args[0].keyword is None and self.receivers.is_scaler(receiver):
            return OptimizerStep(call, dotted_name(call.args[0].value), dotted_name(receiver))
        if self.receivers.is_optimizer(receiver):
            return OptimizerStep(call, dotted_name(receiver), None)
        return None

    def step_of(self, call: cst.Call) -> Optional[OptimizerStep]:
        return self._step_of.get(id(call))

    def _find_zero_grads(self) -> List[ZeroGrad]:
        found: List[ZeroGrad] = []
        for call in self.scopes.calls:
            func = call.func
            if type(func) is cst.Attribute and func.attr.value == "zero_grad":
                receiver = dotted_name(func.value)
                arg = argument(call, "set_to_none", 0)
                found.append(ZeroGrad(call, receiver, arg.value if arg else None,
                                      self.receivers.is_optimizer(func.value)))
        for assign in self._grad_assigns:
            target = assign.targets[0].target
            found.append(ZeroGrad(assign, dotted_name(target), None, False))
        return found

    @per_node
    def is_forward(self, call: cst.Call) -> bool:
        """A call of a model: `model(x)`, `self.net(x)`, `model(**batch)`, `model.forward(x)`,
        and its computing methods (`model.encode(x)`, `model.decode(z)`, `model.forward_features(x)`).
        Not `model.generate(...)` (HF runs it without grad), nor a computing method other than a
        forward in a module that loads code from the hub (`_loads_remote_code`)."""
        func = call.func
        target = self.scopes.resolve(call)
        if target is not None and target.name.value == "__call__":
            klass = self.tree.class_of(target)
            if klass is not None and not self.receivers.is_model_class(klass):
                return False  # a wrapper of this module (`Predictor.__call__`): its body is followed instead
        elif target is not None and target.name.value != "forward":
            return False  # a helper of this module named like a model (`self.optimize_model(m)`): followed instead
        if type(func) is cst.Attribute and _FORWARD_METHOD.match(func.attr.value) and \
                self.receivers.is_model(func.value):
            return func.attr.value.startswith("forward") or not self._loads_remote_code
        return self.receivers.is_model(func)

    @cached_property
    def _loads_remote_code(self) -> bool:
        """The module loads a model with `trust_remote_code=True`: its methods other than
        `forward` (an embedder's `encode`, often decorated `@torch.no_grad()` there) are code
        from the hub, whose grad mode cannot be read here."""
        for call in self.scopes.calls:
            func = call.func
            if type(func) is cst.Attribute and func.attr.value == "from_pretrained":
                trust = argument(call, "trust_remote_code")
                if trust is not None and literal_bool(trust.value) is True:
                    return True
        return False

    def is_generate(self, call: cst.Call) -> bool:
        """`model.generate(...)`, or a chat model's answer (`model.chat(tokenizer, pixel_values,
        question, ...)`, the API of the hub's chat models: InternVL, Qwen, ChatGLM), which
        decodes a sequence token by token: one handed the tokenizer, as those are (an API
        client's `llm.chat(messages)` runs nothing here)."""
        func = call.func
        if type(func) is not cst.Attribute or func.attr.value not in _GENERATING:
            return False
        return self.receivers.is_model(func.value) and (func.attr.value == "generate" or any(
            arg.keyword is not None and arg.keyword.value == "tokenizer" or
            _TOKENIZER.search(last_part(dotted_name(arg.value) or "")) for arg in call.args))

    def is_loss(self, call: cst.Call) -> bool:
        """`criterion(out, y)`, `F.cross_entropy(...)`, `nn.MSELoss()(...)`."""
        qualified = self.names.call_name(call) or ""
        if _FUNCTIONAL_LOSS.search(qualified):
            return True
        func = call.func
        if type(func) is cst.Call:  # nn.CrossEntropyLoss()(out, y)
            return is_loss_class(self.names.call_name(func) or "")
        dotted = dotted_name(func)
        if dotted is None or qualified:
            return False
        return dotted in self.receivers.loss_objects or bool(LOSS_NAME.search(last_part(dotted)))

    def is_grad_clip(self, call: cst.Call) -> bool:
        """`torch.nn.utils.clip_grad_norm_(...)` / `clip_grad_value_(...)` (any import spelling)."""
        qualified = self.names.call_name(call) or ""
        return qualified.startswith("torch.nn.utils") and last_part(qualified) in (
            "clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grads_with_norm_")

    def resets_grads(self, call: cst.Call) -> bool:
        """A call that clears gradients: `x.zero_grad()`, `p.grad.zero_()` / `.detach_()` /
        `.fill_(0)`, `torch._foreach_zero_(...)`, or a helper named like it (`zero_grads(model)`)."""
        func = call.func
        if type(func) is cst.Attribute:
            method = func.attr.value
            if method == "zero_grad":
                return True
            if method in ("zero_", "detach_", "fill_", "requires_grad_"):
                receiver = func.value
                while type(receiver) is cst.Attribute and receiver.attr.value == "data":
                    receiver = receiver.value
                if type(receiver) is cst.Attribute and receiver.attr.value == "grad":
                    return True
        qualified = self.names.call_name(call)
        if qualified == "torch._foreach_zero_":
            return True
        last = last_part(dotted_name(func))
        return bool(_RESET_NAME.search(last))

    def grad_reads(self, node: cst.CSTNode) -> List[cst.Attribute]:
        """`.grad` read under `node` (nested functions not entered): `p.grad.norm()`, `w.grad is None`;
        not the target of `p.grad = None`. In source order; each node is searched once."""
        return self._grad_reads_found(node)[0]

    def grad_read_orders(self, node: cst.CSTNode) -> List[int]:
        """The pre-order positions of `grad_reads(node)`, ascending."""
        return self._grad_reads_found(node)[1]

    def _grad_reads_found(self, node: cst.CSTNode) -> Tuple[List[cst.Attribute], List[int]]:
        found = self._grad_reads.get(id(node))
        if found is None:
            reads = sorted(self._find_grad_reads(node), key=self.tree.order)
            found = (reads, [self.tree.order(read) for read in reads])
            self._grad_reads[id(node)] = found
        return found

    def _find_grad_reads(self, node: cst.CSTNode) -> List[cst.Attribute]:
        found: List[cst.Attribute] = []
        stack: List[cst.CSTNode] = [node]
        while stack:
            current = stack.pop()
            if current is not node and type(current) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
                continue
            if type(current) is cst.Assign:
                stack.append(current.value)
                stack.extend(t.target.value for t in current.targets
                             if type(t.target) is cst.Attribute and t.target.attr.value == "grad")
                stack.extend(t.target for t in current.targets
                             if not (type(t.target) is cst.Attribute and t.target.attr.value == "grad"))
                continue
            if type(current) is cst.Attribute and current.attr.value == "grad":
                found.append(current)
            stack.extend(children(current))
        return found

    @property
    def grads_updated_in_place(self) -> bool:
        """Somewhere the module adds into or rewrites `.grad` tensors in place (`p.grad += g`,
        `p.grad /= n`, `p.grad.add_(g)`, `p.grad.copy_(g)`): code that needs them to exist
        between a `zero_grad()` and the next backward."""
        for call in self.scopes.calls:
            func = call.func
            if type(func) is cst.Attribute and func.attr.value.endswith("_") and \
                    func.attr.value not in ("zero_", "detach_", "requires_grad_") and _is_grad(func.value):
                return True
        for node in self.tree.nodes:
            if type(node) is cst.AugAssign and _is_grad(node.target):  # type: ignore[attr-defined]
                return True
        return False

    def after_step(self, step: OptimizerStep, stmt: cst.CSTNode) -> cst.CSTNode:
        """Where code that runs after the step goes: after `scaler.update()` when that follows it."""
        following = self.tree.next_statement(stmt)
        if step.scaler is not None and type(following) is cst.SimpleStatementLine and len(following.body) == 1:
            expr = following.body[0]
            if type(expr) is cst.Expr and type(expr.value) is cst.Call and \
                    dotted_name(expr.value.func) == f"{step.scaler}.update":
                return following
        return stmt

    @cached_property
    def step_hooked(self) -> bool:
        """A hook is registered on an optimizer's step somewhere in the module (it may clear the
        gradients)."""
        return any(type(c.func) is cst.Attribute and c.func.attr.value in _STEP_HOOKS for c in self.scopes.calls)

    @cached_property
    def uses_grad_scaler(self) -> bool:
        """A loss is scaled / a step taken through a GradScaler anywhere in the module, or one is
        made and then read (handed to a helper that may use it); not one made and never read
        again (`unread_grad_scalers`)."""
        if any(b.kind == "scaled" for b in self.backwards) or any(s.scaler for s in self.optimizer_steps):
            return True
        made = 0
        for call in self.scopes.calls:
            if self.names.call_name(call) in GRAD_SCALER:
                made += 1
            elif type(call.func) is cst.Attribute and call.func.attr.value in ("scale", "unscale_") and \
                    "scaler" in last_part(dotted_name(call.func.value)).lower():
                return True  # `loss = self.scaler.scale(loss)`
        return made > len(self.unread_grad_scalers)

    @cached_property
    def unread_grad_scalers(self) -> Dict[str, cst.Call]:
        """The names (`scaler`, `self.scaler`) a GradScaler is made into and nothing reads:
        `self.scaler = GradScaler()` in `__init__` that no backward goes through. Not an
        attribute of a class with a base defined elsewhere: what it inherits may read it."""
        made: Dict[str, cst.Call] = {}
        for call in self.scopes.calls:
            statement = self.tree.parent(call)
            if self.names.call_name(call) not in GRAD_SCALER or type(statement) is not cst.Assign or \
                    len(statement.targets) != 1:  # type: ignore[union-attr]
                continue
            bound = dotted_name(statement.targets[0].target)  # type: ignore[union-attr]
            if bound is None or bound.startswith("self.") and not self.scopes.sees_lineage(call):
                continue
            made.setdefault(bound, call)
        if not made:
            return {}
        targets = {id(self.tree.parent(call).targets[0].target) for call in made.values()}  # type: ignore[union-attr]
        read = {dotted_name(node) for node in self.tree.nodes
                if type(node) in (cst.Name, cst.Attribute) and id(node) not in targets}
        return {bound: call for bound, call in made.items() if bound not in read}

    def asks_for_grad(self, node: cst.CSTNode) -> bool:
        """Code under `node` (helpers followed) that needs autograd on: `torch.autograd.grad`,
        `enable_grad()`, `x.requires_grad_()`, `x.requires_grad = True`, `register_hook`."""
        for call, _ in self.calls.calls_in(node):
            func = call.func
            if type(func) is cst.Attribute and func.attr.value in _ASKS_FOR_GRAD_METHODS:
                return True
            if self.names.call_name(call) in _ASKS_FOR_GRAD_CALLS:
                return True
        roots = [node, *self.calls.functions_reached(node)]
        return any(any(
            type(t.target) is cst.Attribute and t.target.attr.value == "requires_grad" and
            literal_bool(n.value) is not False for t in n.targets)  # type: ignore[attr-defined]
            for root in roots for n in self.tree.scope_nodes(root, cst.Assign))

    @cached_property
    def _backwards_by_order(self) -> Tuple[List[Backward], List[int]]:
        ordered = sorted(self.backwards, key=lambda b: self.tree.order(b.call))
        return ordered, [self.tree.order(b.call) for b in ordered]

    @cached_property
    def _steps_by_order(self) -> Tuple[List[OptimizerStep], List[int]]:
        ordered = sorted(self.optimizer_steps, key=lambda s: self.tree.order(s.call))
        return ordered, [self.tree.order(s.call) for s in ordered]

    @cached_property
    def _backwards_by_scope(self) -> Dict[int, List[Backward]]:
        found: Dict[int, List[Backward]] = {}
        for backward in self.backwards:
            found.setdefault(id(self.tree.scope_of(backward.call)), []).append(backward)
        return found

    def backwards_of(self, scope: cst.CSTNode) -> List[Backward]:
        """The backwards `scope` runs itself (`tree.scope_of` their call is `scope`)."""
        return self._backwards_by_scope.get(id(scope), [])

    @cached_property
    def backwarded_attributes(self) -> FrozenSet[str]:
        """The dotted name of every backward's loss that is an attribute (`self.total`): an
        attribute outlives the scope that backwards it, a local name does not."""
        names = (dotted_name(b.loss) or "" for b in self.backwards if b.loss is not None)
        return frozenset(name for name in names if "." in name)

    @cached_property
    def _modes_by_scope(self) -> Dict[int, Tuple[List[int], List[Dict[str, ModeCall]]]]:
        """Per scope, in source order: each mode call's position, and the latest mode call per
        receiver once it has run (copies only where a receiver changed: they are few)."""
        found: Dict[int, Tuple[List[int], List[Dict[str, ModeCall]]]] = {}
        for mode_call in sorted(self.mode_calls, key=lambda m: self.tree.order(m.call)):
            orders, states = found.setdefault(id(self.tree.scope_of(mode_call.call)), ([], []))
            latest = dict(states[-1]) if states else {}
            latest[mode_call.target] = mode_call
            orders.append(self.tree.order(mode_call.call))
            states.append(latest)
        return found

    def latest_modes(self, scope: cst.CSTNode, position: int) -> Dict[str, ModeCall]:
        """Receiver -> the latest of its mode calls that `scope` makes at or before `position`
        (a pre-order position)."""
        orders, states = self._modes_by_scope.get(id(scope), ([], []))
        at = bisect_right(orders, position)
        return states[at - 1] if at else {}

    def backwards_under(self, node: cst.CSTNode) -> Sequence[Backward]:
        """The backwards whose call lies under `node` (itself included), in source order."""
        return self.tree.in_subtree(node, *self._backwards_by_order)

    def steps_under(self, node: cst.CSTNode) -> Sequence[OptimizerStep]:
        """The optimizer steps whose call lies under `node` (itself included), in source order."""
        return self.tree.in_subtree(node, *self._steps_by_order)

    def backwards_in(self, node: cst.CSTNode, follow: bool = True) -> List[Tuple[Backward, cst.Call]]:
        """Backward calls under `node` (and in helpers it calls), each with its call site in `node`."""
        return [(self._backward_of[id(call)], site) for call, site in self.calls.calls_in(node, follow)
                if id(call) in self._backward_of]

    def steps_in(self, node: cst.CSTNode, follow: bool = True) -> List[Tuple[OptimizerStep, cst.Call]]:
        return [(self._step_of[id(call)], site) for call, site in self.calls.calls_in(node, follow)
                if id(call) in self._step_of]

    def optimizer_resets_in(self, node: cst.CSTNode, follow: bool = True) -> bool:
        """An optimizer's `zero_grad()` under `node` (or in a helper it calls): only training
        clears an optimizer's gradients, even where the backward and the step are out of sight
        (`loss_scaler(loss, optimizer)`, an object whose `__call__` does both)."""
        return any(id(call) in self._optimizer_resets for call, _ in self.calls.calls_in(node, follow))

    def forwards_in(self, node: cst.CSTNode, follow: bool = True,
                    recording: bool = False) -> List[Tuple[cst.Call, cst.Call]]:
        """Forward calls under `node` (and in helpers it calls), each with its call site in `node`;
        with `recording`, not in helpers reached through a call made under no_grad."""
        return [(call, site) for call, site in self.calls.calls_in(node, follow, recording) if self.is_forward(call)]
