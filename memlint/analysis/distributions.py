"""Distributions: `torch.distributions` objects whose parameters live on the host, and their draws.

A distribution object draws on the device of its parameters: built from Python numbers or from
tensors made on the CPU (`Normal(0.0, eps)`, `Uniform(torch.tensor([-1.0]), torch.tensor([1.0]))`),
its `.sample()` is drawn by the host's generator into host memory, whatever the device of the
code that asks for it. (Numbers are turned into tensors on the device of the first tensor
parameter: one parameter on the device puts the whole distribution there.)

Asked as `facts.distributions`:

- `host_draw(call)`: for `d.sample(...)` / `d.rsample(...)` / `d.sample_n(...)`, the qualified
  class of `d` (`torch.distributions.normal.Normal`) when `d` surely is a torch distribution
  built from host parameters: the constructor itself (`torch.distributions.Normal(0, 1).sample()`),
  a name whose every binding in effect is one, or `self.<attr>` when every assignment to it in
  the methods of the enclosing class is one (and nothing else assigns into it);
- `host_distribution(expr, at)`: the same question of the object alone;
- `host_number(expr, at)`: a value surely on the host (see `host_number`'s own docstring).

When unsure, the answer is no: a parameter that may be a tensor on the device (a `forward`
argument, a model's attribute, a registered buffer, an `nn.Parameter`) makes the distribution
not known to be on the host.

Asked by: MEM103 (a host draw moved to the device every step).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from memlint.analysis.purity import DETERMINISTIC_FACTORIES, Purity
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import TreeIndex, argument, dotted_name

_DRAWS = frozenset({"sample", "rsample", "sample_n"})
# Parts of torch.distributions that are no distributions (their classes draw nothing).
_NOT_DISTRIBUTIONS = ("torch.distributions.transforms", "torch.distributions.constraints",
                      "torch.distributions.constraint_registry", "torch.distributions.kl",
                      "torch.distributions.utils")
# Roots of configuration objects: their attributes are settings, numbers and strings.
_CONFIG_ROOTS = frozenset({"args", "cfg", "config", "conf", "hparams", "hp", "opts", "options"})
# Annotations of a constructor parameter that say it is a number.
_NUMBER_ANNOTATIONS = frozenset({"float", "int", "Number", "numbers.Number", "numbers.Real", "Real"})
_CASTS = frozenset({"float", "double", "half", "bfloat16", "long", "int"})
_NUMBER_BUILTINS = frozenset({"abs", "round", "min", "max"})
_DEPTH = 6


class Distributions:
    """Host distributions and their draws, for one module (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes, purity: Purity) -> None:
        self.names = names
        self.purity = purity
        self.tree = tree
        self.scopes = scopes
        self._attributes: Dict[Tuple[int, str], Optional[List[cst.BaseExpression]]] = {}

    def host_draw(self, call: cst.Call) -> Optional[Tuple[str, ...]]:
        """The qualified classes of the distribution `call` draws from (one per construction it
        may come from), when it is a `.sample()`/`.rsample()`/`.sample_n()` of one built from
        host parameters; else None."""
        func = call.func
        if type(func) is not cst.Attribute or func.attr.value not in _DRAWS:  # type: ignore[attr-defined]
            return None
        return self.host_distribution(func.value, call)  # type: ignore[attr-defined]

    def host_distribution(self, expr: cst.BaseExpression, at: cst.CSTNode,
                          depth: int = 0) -> Optional[Tuple[str, ...]]:
        """The qualified classes of the torch distributions `expr` may hold at `at`, when every
        one it may hold is built from host parameters; else None."""
        if depth > _DEPTH:
            return None
        if type(expr) is cst.Call:
            built = self._constructed(expr, depth)
            return None if built is None else (built,)
        values = self._values(expr, at)
        if not values:
            return None
        found: List[str] = []
        for value, where in values:
            classes = self.host_distribution(value, where, depth + 1)
            if classes is None:
                return None
            found.extend(c for c in classes if c not in found)
        return tuple(found)

    def _constructed(self, call: cst.Call, depth: int) -> Optional[str]:
        """The class a torch distribution constructor `call` builds, when all its arguments are
        on the host (numbers, host tensors, host distributions for the wrapping ones)."""
        name = self.names.call_name(call)
        if name is None or not name.startswith("torch.distributions.") or name.startswith(_NOT_DISTRIBUTIONS):
            return None
        if not name.rsplit(".", 1)[-1][:1].isupper():
            return None  # a function or a module, not a class
        for arg in call.args:
            if arg.star:
                return None
            value = arg.value
            if not self.host_number(value, call, depth + 1) and \
                    self.host_distribution(value, call, depth + 1) is None:
                return None
        return name

    def host_number(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """`expr` is surely a Python number or a tensor on the host: a literal, arithmetic of
        such values, `float(...)`, `math.*(...)`, `.item()`, `torch.tensor` of such values and
        torch's size-only factories without a device (`torch.zeros(n)`, not `zeros_like`), an
        attribute of a configuration object (`args.eps`, `cfg.sigma`), a name whose every binding
        in effect is one, a parameter of a constructor (`_constructor_parameter`), or
        `self.<attr>` when every assignment to it in the class's methods is one."""
        if depth > _DEPTH:
            return False
        if Purity.constant(expr):
            return True
        if type(expr) is cst.UnaryOperation:
            return type(expr.operator) in (cst.Minus, cst.Plus) and self.host_number(expr.expression, at, depth + 1)
        if type(expr) is cst.BinaryOperation:
            return self.host_number(expr.left, at, depth + 1) and self.host_number(expr.right, at, depth + 1)
        if type(expr) in (cst.List, cst.Tuple):
            return all(type(e) is cst.Element and self.host_number(e.value, at, depth + 1) for e in expr.elements)
        if type(expr) is cst.Call:
            return self._host_call(expr, at, depth)
        dotted = dotted_name(expr)
        if dotted is None:
            return False
        parts = dotted.split(".")
        if type(expr) is cst.Attribute:
            if self.names.qualified_name(expr) is not None:
                return False  # an imported module's attribute that is no literal constant
            if parts[0] in _CONFIG_ROOTS or parts[0] == "self" and len(parts) > 2 and parts[1] in _CONFIG_ROOTS:
                return True
        values = self._values(expr, at)
        if values is None:
            return self._constructor_parameter(expr, at)
        return bool(values) and all(self.host_number(value, where, depth + 1) for value, where in values)

    def _host_call(self, call: cst.Call, at: cst.CSTNode, depth: int) -> bool:
        func = call.func
        if any(a.star for a in call.args):
            return False
        name = self.names.call_name(call)
        if name is not None:
            if name.startswith("math."):
                return True
            if name in ("torch.tensor", "torch.as_tensor"):
                data = argument(call, "data", 0)
                return argument(call, "device") is None and data is not None and \
                    self.host_number(data.value, at, depth + 1)
            return name in DETERMINISTIC_FACTORIES and not name.endswith("_like") and argument(call, "device") is None
        if type(func) is cst.Name:
            if func.value in ("float", "int"):
                return True  # a Python number, whatever it is made from
            return func.value in _NUMBER_BUILTINS and all(self.host_number(a.value, at, depth + 1) for a in call.args)
        if type(func) is cst.Attribute:
            if func.attr.value == "item" and not call.args:
                return True
            if func.attr.value in _CASTS and not call.args:
                return self.host_number(func.value, at, depth + 1)
        return False

    # -- what a name or an attribute of `self` holds -------------------------------------------
    def _values(self, expr: cst.BaseExpression, at: cst.CSTNode
                ) -> Optional[List[Tuple[cst.BaseExpression, cst.CSTNode]]]:
        """Every value `expr` (a name, or `self.<attr>`) may hold at `at`, each with the node it
        is evaluated at; None when some binding is not a plain assignment of a whole value (a
        parameter, a loop target, an unpacking, an augmented assignment) or `expr` is neither."""
        if type(expr) is cst.Name:
            binds = self.scopes.in_effect(expr.value, at)
            if not binds or any(b.kind != "assign" or not b.whole or b.value is None for b in binds):
                return None
            return [(b.value, b.node) for b in binds]  # type: ignore[misc]
        dotted = dotted_name(expr)
        if dotted is None or dotted.count(".") != 1 or not dotted.startswith("self."):
            return None
        klass = self.scopes.enclosing_class(at)
        if klass is None:
            return None
        attr = dotted[5:]
        key = (id(klass), attr)
        if key not in self._attributes:
            self._attributes[key] = self._attribute_values(klass, attr)
        values = self._attributes[key]
        return None if values is None else [(v, v) for v in values]

    def _attribute_values(self, klass: cst.ClassDef, attr: str) -> Optional[List[cst.BaseExpression]]:
        """What the methods of `klass` assign to `self.<attr>`; None when one stores into it
        otherwise (an annotated or augmented assignment, an unpacking, an assignment into one
        of its attributes or items, `setattr`) or none assigns it."""
        whole = f"self.{attr}"
        values: List[cst.BaseExpression] = []
        for method in klass.body.body:
            if not type(method) is cst.FunctionDef:
                continue
            for node in self.tree.walk_scope(method):
                if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value == "setattr":
                    return None
                if type(node) is cst.Assign:
                    targets = [t.target for t in node.targets]
                elif type(node) in (cst.AnnAssign, cst.AugAssign):
                    targets = [node.target]
                else:
                    continue
                for target in targets:
                    for leaf in _leaves(target):
                        name = dotted_name(leaf) if not type(leaf) is cst.Subscript else \
                            f"{dotted_name(leaf.value)}[]"
                        if name is None or not (name == whole or name.startswith((whole + ".", whole + "["))):
                            continue
                        if name != whole or not type(node) is cst.Assign or leaf is not target:
                            return None
                        values.append(node.value)
        return values or None

    def _constructor_parameter(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """`expr` is a parameter of the constructor it is read in (`def __init__(self, eps)`):
        a setting, not annotated as anything but a number, not `*args`, and no other binding; a
        constructor that also takes a device (`def __init__(self, std, device)`) may be handed
        tensors made there, and its parameters are not taken for host values; nor one that this
        module hands anything but a number where it constructs the class."""
        if not type(expr) is cst.Name:
            return False
        binds = self.scopes.in_effect(expr.value, at)
        if len(binds) != 1 or binds[0].kind != "param":
            return False
        param = binds[0].node
        function = self.tree.scope_of(at)
        if not type(param) is cst.Param or not type(function) is cst.FunctionDef or \
                function.name.value != "__init__" or self.tree.class_of(function) is None:
            return False
        params = function.params
        if param is params.star_arg or param is params.star_kwarg or \
                not any(p is param for p in (*params.posonly_params, *params.params, *params.kwonly_params)):
            return False
        if param.annotation is not None and dotted_name(param.annotation.annotation) not in _NUMBER_ANNOTATIONS:
            return False
        every = (*params.posonly_params, *params.params, *params.kwonly_params)
        if any(self.purity.is_device(p.name) for p in every):
            return False
        if param.default is not None and not Purity.constant(param.default):
            return False
        return self._constructed_with_numbers(self.tree.class_of(function), param, params)  # type: ignore[arg-type]

    def _constructed_with_numbers(self, klass: cst.ClassDef, param: cst.Param, params: cst.Parameters) -> bool:
        """Where this module constructs the class (`Noise(torch.zeros(d, device=dev))`), what it
        hands the parameter is a host number too."""
        positional = (*params.posonly_params, *params.params)  # `self` first
        position = next((i - 1 for i, p in enumerate(positional) if p is param), None)
        for call in self.scopes.calls:
            if dotted_name(call.func) != klass.name.value:
                continue
            given = argument(call, param.name.value, position)
            if given is not None and not self.host_number(given.value, call, 1):
                return False
        return True


def _leaves(target: cst.BaseExpression) -> List[cst.BaseExpression]:
    """The stores an assignment target makes (`a, (b, c)`: a, b, c), starred ones included."""
    if type(target) in (cst.Tuple, cst.List):
        return [leaf for element in target.elements for leaf in _leaves(element.value)]
    if type(target) is cst.StarredElement:
        return _leaves(target.value)
    return [target]
