"""Syncs: calls that make the host wait for the device, on values known to be tensors.

Asked as `facts.syncs`:

- `sync(call)`: what kind of host-device synchronisation a call is, or None: `t.item()`,
  `t.tolist()`, `t.cpu()` (copies to the host and waits for the kernels that make `t`),
  `int(t)` / `float(t)` / `bool(t)` of a tensor, `torch.cuda.synchronize()`. Only on values
  `is_tensor` recognises: a `.item()` on a NumPy value is no sync;
- `is_tensor(expr, at)`: the value is a torch tensor: made by a torch function, a model or a
  loss, a tensor method of a tensor, indexing or arithmetic of one, an element of a tensor or of
  `model.parameters()`, or a name bound only to such values;
- `on_device(expr, at)`: the tensor lives where the model runs: in a method of an `nn.Module`
  (module code runs on the module's device), or made by a model, a loss, a move
  (`.to(device)`, `.cuda()`) or a factory given a device, and what torch computes from those;
- `repeats_over(node)`: the iterable of the innermost loop or comprehension around `node` in
  its function (None for `while` loops), and `many(iterable, at)`: whether iterating it runs
  many times: a model's parameters, a tensor's elements, a `range` that is not a small literal,
  `zip` / `enumerate` of such (not a dict's `.items()`, not a literal tuple).

Asked by MEM105.
"""

from __future__ import annotations

import re
from typing import Dict, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.dataflow import SCALAR_METHODS
from memlint.analysis.purity import Purity
from memlint.analysis.roles import Roles
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import TreeIndex

_TENSOR_FUNCTION = re.compile(r"^torch\.(\w+|nn\.functional\.\w+|linalg\.\w+|fft\.\w+|special\.\w+)$")
_NOT_TENSOR_FUNCTIONS = frozenset({
    "torch.is_tensor", "torch.numel", "torch.device", "torch.Size", "torch.no_grad", "torch.enable_grad",
    "torch.inference_mode", "torch.set_grad_enabled", "torch.is_grad_enabled", "torch.get_default_dtype",
    "torch.manual_seed", "torch.seed", "torch.load", "torch.save", "torch.compile", "torch.autocast",
    "torch.Generator", "torch.set_default_dtype", "torch.is_floating_point", "torch.is_complex",
    "torch.equal", "torch.allclose", "torch.initial_seed", "torch.get_rng_state", "torch.typename",
})
# Tensor methods whose result is not a tensor (or not a new one worth following).
_NOT_TENSOR_METHODS = frozenset(SCALAR_METHODS | {"numpy", "type", "equal", "allclose", "is_floating_point",
                                                  "register_hook", "backward", "keys", "values", "items",
                                                  "get", "pop", "format", "split_with_sizes"})
_PARAMETER_ITERABLES = frozenset({"parameters", "named_parameters", "buffers", "named_buffers"})
_FEW_METHODS = frozenset({"items", "values", "keys"})
_SMALL_RANGE = 16
_MAX_DEPTH = 6


_SYNC_METHODS = frozenset({"item", "tolist", "cpu", "synchronize"})
_SYNC_BUILTINS = frozenset({"int", "float", "bool"})


def may_sync(call: cst.Call) -> bool:
    """By its shape alone, `call` may be a sync (`x.item()`, `int(x)`, `torch.cuda.synchronize()`):
    the cheap test to make before asking `Syncs.sync`."""
    func = call.func
    return isinstance(func, cst.Attribute) and func.attr.value in _SYNC_METHODS or \
        isinstance(func, cst.Name) and func.value in _SYNC_BUILTINS


class Syncs:
    """Host-device syncs and tensor values of one module (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes, roles: Roles, purity: Purity) -> None:
        self.names = names
        self.tree = tree
        self.scopes = scopes
        self.roles = roles
        self.purity = purity
        self._memo: Dict[Tuple[str, int], bool] = {}
        self._busy: Set[Tuple[str, int]] = set()
        self._placed: Dict[Tuple[str, int], bool] = {}

    def sync(self, call: cst.Call) -> Optional[str]:
        """`item`, `tolist`, `cpu`, `int`/`float`/`bool` or `synchronize` when `call` makes the
        host wait for the device; else None."""
        func = call.func
        if self.names.call_name(call) == "torch.cuda.synchronize":
            return "synchronize"
        if isinstance(func, cst.Attribute) and func.attr.value in ("item", "tolist", "cpu") and not call.args:
            receiver = func.value
            if func.attr.value == "cpu" and self.roles.receivers.is_model(receiver):
                return None
            return func.attr.value if self.is_tensor(receiver, call) else None
        if isinstance(func, cst.Name) and func.value in ("int", "float", "bool") and len(call.args) == 1 and \
                self.names.qualified_name(func) is None and self.is_tensor(call.args[0].value, call):
            return func.value
        return None

    # -- tensors -----------------------------------------------------------------------------
    def is_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        if depth > _MAX_DEPTH:
            return False
        if isinstance(expr, cst.Name):
            return self._name_is_tensor(expr.value, at, depth)
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in ("grad", "data", "T", "mT", "real", "imag"):
                return self.is_tensor(expr.value, at, depth + 1)
            value = expr.value  # `model(x).logits`, `out.loss`
            return isinstance(value, cst.Call) and self.roles.is_forward(value)
        if isinstance(expr, cst.Subscript):
            return self.is_tensor(expr.value, at, depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            return self.is_tensor(expr.left, at, depth + 1) or self.is_tensor(expr.right, at, depth + 1)
        if isinstance(expr, cst.UnaryOperation) and not isinstance(expr.operator, cst.Not):
            return self.is_tensor(expr.expression, at, depth + 1)
        if isinstance(expr, cst.Call):
            return self._call_is_tensor(expr, at, depth)
        return False

    def _call_is_tensor(self, call: cst.Call, at: cst.CSTNode, depth: int) -> bool:
        qualified = self.names.call_name(call)
        if qualified is not None:
            return bool(_TENSOR_FUNCTION.match(qualified)) and qualified not in _NOT_TENSOR_FUNCTIONS and \
                not qualified.split(".")[-1][:1].isupper()
        if self.roles.is_forward(call) or self.roles.is_loss(call):
            return True
        func = call.func
        if isinstance(func, cst.Attribute) and (func.attr.value not in _NOT_TENSOR_METHODS or
                                                func.attr.value == "type" and call.args):
            return self.is_tensor(func.value, at, depth + 1)
        return False

    def _name_is_tensor(self, name: str, at: cst.CSTNode, depth: int) -> bool:
        key = (name, id(at))
        if key in self._memo:
            return self._memo[key]
        if key in self._busy:
            return False
        self._busy.add(key)
        binds = self.scopes.in_effect(name, at) or [  # the target of a loop around `at`
            b for b in self.scopes.bindings_seen(name, at) if b.kind == "for" and self.tree.contains(b.node, at)]
        comprehension = self._comprehension_target(name, at) if not binds else None
        if comprehension is not None:  # `[int(t) for t in ids]`
            result = self._iterates_tensors(comprehension, at, depth)
            self._busy.discard(key)
            self._memo[key] = result
            return result
        result = bool(binds)
        for bind in binds:
            if bind.value is None:
                result = False
            elif bind.kind == "for":
                result = self._iterates_tensors(bind.value, bind.node, depth)
            elif bind.kind in ("assign", "walrus", "aug"):
                value = bind.value
                if not bind.whole and not (isinstance(value, cst.Call) and (
                        self.roles.is_forward(value) or self._call_is_tensor(value, bind.node, depth + 1))):
                    result = False
                else:
                    result = self.is_tensor(value, bind.node, depth + 1)
            else:
                result = False
            if not result:
                break
        self._busy.discard(key)
        self._memo[key] = result
        return result

    def _comprehension_target(self, name: str, at: cst.CSTNode) -> Optional[cst.BaseExpression]:
        """The iterable of the comprehension around `at` whose `for` binds `name`."""
        for ancestor in self.tree.ancestors(at):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return None
            if isinstance(ancestor, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
                clause: Optional[cst.CompFor] = ancestor.for_in
                while clause is not None:
                    if isinstance(clause.target, cst.Name) and clause.target.value == name:
                        return clause.iter
                    clause = clause.inner_for_in
        return None

    def _iterates_tensors(self, iterable: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """Each element of `iterable` is a tensor: the elements of a tensor or of `.parameters()`."""
        if isinstance(iterable, cst.Call):
            func = iterable.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("parameters", "buffers"):
                return True
            if isinstance(func, cst.Name) and func.value == "zip":
                return all(self._iterates_tensors(a.value, at, depth + 1) for a in iterable.args)
        return self.is_tensor(iterable, at, depth + 1)

    def on_device(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """The tensor lives where the model runs (see the module docstring)."""
        if depth == 0:
            func = self.tree.function_of(at)
            klass = self.tree.class_of(func) if func is not None else None
            if klass is not None and klass.name.value in self.roles.receivers.module_classes:
                return self.is_tensor(expr, at)
        if depth > _MAX_DEPTH:
            return False
        if isinstance(expr, cst.Name):
            key = (expr.value, id(at))
            if key not in self._placed:
                self._placed[key] = False  # a cycle decides nothing
                binds = self.scopes.in_effect(expr.value, at)
                self._placed[key] = bool(binds) and all(
                    b.kind == "assign" and b.whole and b.value is not None
                    and self.on_device(b.value, b.node, depth + 1) for b in binds)
            return self._placed[key]
        if isinstance(expr, cst.Attribute) and expr.attr.value in ("grad", "data", "T", "mT"):
            return self.on_device(expr.value, at, depth + 1)
        if isinstance(expr, cst.Subscript):
            return self.on_device(expr.value, at, depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            return self.on_device(expr.left, at, depth + 1) or self.on_device(expr.right, at, depth + 1)
        if not isinstance(expr, cst.Call):
            return False
        if self.purity.mover(expr) is not None or self.roles.is_forward(expr) or self.roles.is_loss(expr):
            return True
        device = next((a.value for a in expr.args if a.keyword is not None and a.keyword.value == "device"), None)
        if device is not None and self.purity.is_device(device):
            return True
        if not self._call_is_tensor(expr, at, depth):
            return False
        func = expr.func
        operands = [a.value for a in expr.args if a.keyword is None]
        if isinstance(func, cst.Attribute) and self.names.call_name(expr) is None:
            operands.append(func.value)
        return any(self.on_device(operand, at, depth + 1) for operand in operands)

    # -- repetition --------------------------------------------------------------------------
    def repeats_over(self, node: cst.CSTNode) -> Optional[cst.BaseExpression]:
        """The iterable of the innermost `for` loop or comprehension around `node` in its function."""
        child = node
        for ancestor in self.tree.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return None
            if isinstance(ancestor, cst.While) and child is ancestor.body:
                return None
            if isinstance(ancestor, cst.For) and child is ancestor.body:
                return ancestor.iter
            if isinstance(ancestor, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)) and \
                    not self.tree.contains(ancestor.for_in.iter, node):
                return ancestor.for_in.iter
            child = ancestor
        return None

    def many(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Iterating `iterable` runs many times (see the module docstring)."""
        if isinstance(iterable, cst.Call):
            func = iterable.func
            if isinstance(func, cst.Attribute):
                if func.attr.value in _PARAMETER_ITERABLES:
                    return True
                if func.attr.value in _FEW_METHODS:
                    return False
            if isinstance(func, cst.Name) and self.names.qualified_name(func) is None:
                if func.value == "range":
                    bounds = [a.value for a in iterable.args]
                    if all(isinstance(b, cst.Integer) for b in bounds) and bounds:
                        values = [int(b.value, 0) for b in bounds]  # type: ignore[attr-defined]
                        span = values[0] if len(values) == 1 else values[1] - values[0]
                        return span >= _SMALL_RANGE
                    return bool(bounds)
                if func.value in ("zip", "enumerate", "reversed"):
                    return bool(iterable.args) and any(self.many(a.value, at) for a in iterable.args
                                                       if a.keyword is None)
        if isinstance(iterable, (cst.Tuple, cst.List, cst.Set, cst.Dict)):
            return False
        return self.is_tensor(iterable, at)
