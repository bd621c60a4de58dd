"""Purity: what a torch expression computes, and whether computing it again changes anything.

An expression is *pure* when evaluating it has no effect and gives the same value every time
its inputs are the same: an allow-list of deterministic torch factories (`eye`, `ones`,
`zeros`, `full`, `arange`, `linspace`, `tensor` of constants ...), of tensor operations and
methods (`tril`, `@`, `.to(device)`, `.float()` ...), arithmetic, indexing, constants and the
pure builtins. Anything else (a call not on the list, an in-place method, `out=` or
`inplace=True`, a lambda, a comprehension, a walrus) makes it impure. A random factory
(`randn`, `randint`, `rand_like` ...) is deterministic given the generator's state, but drawing
advances it: it is *random*, never pure.

Asked as `facts.purity`:

- `of(expr)` (`Computation`): pure or not, random, *exact* (bit-identical on any device: no
  matmul, reduction, division or transcendental, whose results differ between CPU and GPU
  kernels), *placed* (it puts its result on a device: a `device=` that is not the CPU,
  `.cuda()`, `.to(device)`), and its inputs: the plain names and attribute chains it reads
  (`Input`, with whether the value is used as a tensor or only as a size, a device or a flag);
- `factory(call)`: the torch factory a call is (`torch.zeros`, ...), with whether it is random;
- `mover(call)` (`Move`): `.cuda()` / `.to(<device>)`, and the device it moves to; `.to(x)`
  whose argument may be a dtype or a tensor is not taken for a move;
- `is_device(expr)`: whether an expression names a device (`"cuda:0"`, `device`, `x.device`,
  `torch.device(...)`, `local_rank`);
- `constant(expr)`: a literal number, a nested list or tuple of them, `math.pi`, `float("inf")`.

Asked by: memlint.analysis.hoisting (what may move out of a loop), MEM102 and MEM103.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Tuple

import libcst as cst

from memlint.analysis.dataflow import SIZE_METHODS
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import argument, dotted_name

# Factories whose values depend only on their arguments.
DETERMINISTIC_FACTORIES = frozenset({
    "torch.zeros", "torch.ones", "torch.full", "torch.eye", "torch.arange", "torch.linspace",
    "torch.logspace", "torch.zeros_like", "torch.ones_like", "torch.full_like", "torch.tril_indices",
    "torch.triu_indices",
})
# Factories whose memory is left uninitialised: placing them is free, but their content is no value.
UNINITIALISED_FACTORIES = frozenset({"torch.empty", "torch.empty_like"})
RANDOM_FACTORIES = frozenset({
    "torch.rand", "torch.randn", "torch.randint", "torch.randperm", "torch.normal", "torch.rand_like",
    "torch.randn_like", "torch.randint_like",
})
# Draws from the distribution a tensor holds: random, made where that tensor lives, and given no
# `device=` (no factory: `torch.multinomial(probs, 1, device=...)` is a TypeError).
RANDOM_DRAWS = frozenset({"torch.multinomial", "torch.bernoulli", "torch.poisson"})
# Tensors made from host data: pure only when that data is a constant.
_FROM_DATA = frozenset({"torch.tensor", "torch.as_tensor"})
_NEW_FROM_RECEIVER = frozenset({"new_tensor", "new_zeros", "new_ones", "new_full"})
# torch functions computing a tensor from tensors, without effect; the exact ones give
# bit-identical results on every device.
_EXACT_FUNCTIONS = frozenset({
    "torch.tril", "torch.triu", "torch.cat", "torch.concat", "torch.stack", "torch.where", "torch.abs",
    "torch.transpose", "torch.reshape", "torch.flip", "torch.roll", "torch.diag", "torch.diag_embed",
    "torch.masked_fill", "torch.clamp", "torch.meshgrid", "torch.cartesian_prod", "torch.repeat_interleave",
    "torch.block_diag", "torch.logical_not", "torch.eq", "torch.ne", "torch.lt", "torch.le", "torch.gt",
    "torch.ge", "torch.maximum", "torch.minimum", "torch.neg", "torch.flatten", "torch.squeeze",
    "torch.unsqueeze", "torch.permute", "torch.t",
})
_INEXACT_FUNCTIONS = frozenset({
    "torch.matmul", "torch.mm", "torch.bmm", "torch.outer", "torch.einsum", "torch.kron", "torch.exp",
    "torch.log", "torch.sqrt", "torch.rsqrt", "torch.sin", "torch.cos", "torch.pow", "torch.sum",
    "torch.mean", "torch.cumsum", "torch.cumprod", "torch.softmax", "torch.log_softmax", "torch.sigmoid",
    "torch.tanh", "torch.polar", "torch.cdist", "torch.inverse", "torch.linalg.inv", "torch.norm",
    "torch.div", "torch.true_divide", "torch.reciprocal", "torch.erf", "torch.exp2", "torch.log2",
})
_EXACT_METHODS = frozenset({
    "to", "cuda", "float", "half", "double", "bfloat16", "long", "int", "bool", "byte", "short", "type",
    "t", "transpose", "permute", "view", "reshape", "unsqueeze", "squeeze", "expand", "expand_as", "repeat",
    "contiguous", "clone", "tril", "triu", "masked_fill", "flip", "roll", "diag", "eq", "ne", "lt", "le",
    "gt", "ge", "logical_not", "neg", "abs", "flatten", "unflatten", "index_select", "gather", "narrow",
    "detach", "view_as", "reshape_as", "type_as", "repeat_interleave", "clamp", "chunk", "split",
})
_INEXACT_METHODS = frozenset({
    "sum", "mean", "exp", "log", "sqrt", "rsqrt", "pow", "matmul", "mm", "bmm", "cumsum", "cumprod",
    "outer", "sin", "cos", "reciprocal", "softmax", "log_softmax", "sigmoid", "tanh", "norm", "div",
    "true_divide", "inverse", "erf",
})
_PURE_BUILTINS = frozenset({"len", "int", "float", "bool", "min", "max", "abs", "round", "tuple", "list",
                            "range", "sum"})
_EXACT_OPERATORS = (cst.Add, cst.Subtract, cst.Multiply, cst.BitAnd, cst.BitOr, cst.BitXor,
                    cst.LeftShift, cst.RightShift)
# Arguments that only shape, place or type the result: what they read is not used as a tensor.
_NON_TENSOR_KEYWORDS = frozenset({"device", "dtype", "layout", "requires_grad", "pin_memory", "diagonal",
                                  "dim", "non_blocking", "memory_format", "size", "steps", "base", "start",
                                  "end", "step", "fill_value", "n", "m", "copy", "row", "col", "offset"})
# Attributes that are views of their tensor.
_TENSOR_VIEWS = frozenset({"T", "mT", "H", "mH", "real", "imag"})
# Attributes that describe a tensor without being one.
_DESCRIPTIVE = frozenset({"shape", "device", "dtype", "ndim", "is_cuda", "layout"})
_DEVICE_NAME = re.compile(r"(^|_)(device|dev|devices|gpu|gpu_id|rank|local_rank|device_id|cuda)$", re.IGNORECASE)
_DTYPE_NAME = re.compile(r"dtype|^(float|half|double|long|int|bool|bfloat16|float16|float32|float64|int64|"
                         r"int32|uint8|int8)$", re.IGNORECASE)


@dataclass(frozen=True)
class Input:
    """A plain name or attribute chain an expression reads (`n`, `self.size`, `x.device`)."""

    node: cst.BaseExpression  # the Name or Attribute
    dotted: str
    as_tensor: bool  # used as a tensor operand (not only as a size, device, dtype or flag)


@dataclass(frozen=True)
class Computation:
    pure: bool  # no effect, same value from the same inputs, no generator drawn
    random: bool  # draws from a random generator
    exact: bool  # bit-identical results on every device
    placed: bool  # puts its result on a device that is not the CPU
    factories: Tuple[cst.Call, ...]  # the torch factory calls in it
    inputs: Tuple[Input, ...]


_IN_PLACE_FILLS = frozenset({"random_", "normal_", "uniform_", "fill_", "zero_", "bernoulli_", "exponential_"})
_LEGACY_CONSTRUCTOR = re.compile(r"^torch\.(Float|Double|Half|BFloat16|Long|Int|Short|Char|Byte|Bool)Tensor$")


@dataclass(frozen=True)
class Move:
    """`t.cuda()` / `t.to(device)` / `t.to(device=device)`: `device` is the argument naming the
    device (None for a bare `.cuda()`); `only_device`: the call does nothing else (no dtype,
    no copy=, no memory_format=; `non_blocking` allowed)."""

    call: cst.Call
    device: Optional[cst.BaseExpression]
    only_device: bool


def _number(expr: cst.BaseExpression) -> bool:
    """A literal number, `-1.5`, `math.inf`, `float("inf")`: what a tensor can be filled with."""
    return Purity.constant(expr) and type(expr) not in (cst.Tuple, cst.List, cst.Name)


class Purity:
    """The purity model (see the module docstring) for the calls of one module."""

    def __init__(self, names: TorchNames) -> None:
        self.names = names
        self._memo: Dict[int, Computation] = {}

    # -- small pieces ------------------------------------------------------------------------
    def factory(self, call: cst.Call) -> Optional[str]:
        """The qualified torch factory `call` calls, when it is one (random ones included)."""
        name = self.names.call_name(call)
        if name in DETERMINISTIC_FACTORIES or name in RANDOM_FACTORIES or name in UNINITIALISED_FACTORIES:
            return name
        return None

    def host_made(self, call: cst.Call) -> Optional[str]:
        """The torch call that makes `call`'s tensor on the host from sizes or constants alone:
        a factory without a device (`torch.zeros(n)`), a tensor of a literal number
        (`torch.tensor(0.0)`), a legacy constructor given a size and filled in place
        (`torch.LongTensor(n).random_(k)`). None for anything else (data: `torch.tensor(values)`)."""
        if any(a.keyword is not None and a.keyword.value == "device" or a.star == "**" for a in call.args):
            return None
        factory = self.factory(call)
        if factory is not None:
            return factory
        name = self.names.call_name(call)
        if name == "torch.tensor" and call.args and self.constant(call.args[0].value):
            return name
        func = call.func
        if type(func) is cst.Attribute and func.attr.value in _IN_PLACE_FILLS and type(func.value) is cst.Call:
            legacy = self.names.call_name(func.value)
            if legacy is not None and _LEGACY_CONSTRUCTOR.match(legacy) and func.value.args and all(
                    not type(a.value) in (cst.List, cst.Tuple, cst.ListComp) for a in func.value.args):
                return legacy
        return None

    def constant_fill(self, expr: cst.BaseExpression) -> Optional[Tuple[cst.BaseExpression, cst.BaseExpression, bool]]:
        """(the number, the tensor whose shape it takes, whether `torch.where` promotes the
        number against that tensor to the same dtype for every dtype) for a tensor filled with
        one number: `c * torch.ones_like(x)` or `torch.ones_like(x) * c` (the product promotes as
        `torch.where` does: exact), `torch.ones_like(x)`, `torch.zeros_like(x)`,
        `torch.full_like(x, n)` with a whole number (not exact: they keep `x`'s dtype, where a
        bool `x` against the number 0 makes `torch.where` give int64). None for anything else (a
        dtype, device or other option given, a fill that is not a literal number)."""
        number: Optional[cst.BaseExpression] = None
        if type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Multiply:  # type: ignore[attr-defined]
            left, right = expr.left, expr.right  # type: ignore[attr-defined]
            number, expr = (left, right) if type(right) is cst.Call else (right, left)
            if not _number(number):
                return None
        if type(expr) is not cst.Call:
            return None
        name = self.names.call_name(expr)  # type: ignore[arg-type]
        args = expr.args  # type: ignore[attr-defined]
        if any(a.keyword is not None or a.star for a in args):
            return None
        if name == "torch.ones_like" and len(args) == 1 and number is not None:
            return number, args[0].value, True
        if number is not None:
            return None  # `c * zeros_like(x)`, `c * full_like(x, n)`: kept as written
        if name in ("torch.ones_like", "torch.zeros_like") and len(args) == 1:
            return cst.Integer("1" if name == "torch.ones_like" else "0"), args[0].value, False
        fill = args[1].value if len(args) == 2 else None
        if type(fill) is cst.UnaryOperation and type(fill.operator) is cst.Minus:  # type: ignore[attr-defined]
            fill = fill.expression  # type: ignore[attr-defined]
        if name == "torch.full_like" and type(fill) is cst.Integer:  # (a float is cast to an integer `x`'s dtype)
            return args[1].value, args[0].value, False
        return None

    def one_number(self, call: cst.Call) -> Optional[cst.BaseExpression]:
        """The number of `torch.tensor(-math.inf)`: a tensor of one literal number, no dtype,
        device or other option given; else None."""
        if self.names.call_name(call) != "torch.tensor" or len(call.args) != 1:
            return None
        arg = call.args[0]
        return arg.value if arg.keyword is None and not arg.star and _number(arg.value) else None

    @staticmethod
    def constant(expr: cst.BaseExpression) -> bool:
        """A literal number or bool, a nested tuple or list of them, `-1`, `math.pi`, `float("inf")`."""
        if type(expr) in (cst.Integer, cst.Float, cst.Imaginary):
            return True
        if type(expr) is cst.Name:
            return expr.value in ("True", "False", "None")
        if type(expr) is cst.UnaryOperation and type(expr.operator) in (cst.Minus, cst.Plus):
            return Purity.constant(expr.expression)
        if type(expr) in (cst.Tuple, cst.List):
            return all(type(e) is cst.Element and Purity.constant(e.value) for e in expr.elements)
        if type(expr) is cst.Attribute:
            return dotted_name(expr) in ("math.pi", "math.e", "math.inf", "math.tau")
        if type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "float":
            return len(expr.args) == 1 and type(expr.args[0].value) is cst.SimpleString
        return False

    def is_device(self, expr: cst.BaseExpression) -> bool:
        """Whether `expr` names a device that may be a GPU (not the literal CPU)."""
        if type(expr) is cst.SimpleString:
            value = expr.evaluated_value
            return isinstance(value, str) and value.split(":")[0] not in ("cpu", "meta")
        if type(expr) is cst.FormattedString:
            return bool(expr.parts) and type(expr.parts[0]) is cst.FormattedStringText and \
                expr.parts[0].value.startswith("cuda")
        if type(expr) is cst.Integer:
            return True  # `.to(0)`: cuda:0
        if type(expr) is cst.Call:
            if self.names.call_name(expr) == "torch.device":
                first = argument(expr, "type", 0)
                return first is not None and (not type(first.value) is cst.SimpleString
                                              or self.is_device(first.value))
            return False
        if type(expr) is cst.Attribute and expr.attr.value == "device":
            return True
        if type(expr) in (cst.Name, cst.Attribute):
            last = expr.value if type(expr) is cst.Name else expr.attr.value
            return bool(_DEVICE_NAME.search(last)) and self.names.qualified_name(expr) is None
        return False

    def mover(self, call: cst.Call) -> Optional[Move]:
        """`x.cuda(...)` or `x.to(<a device>)`; None for `.to(dtype)`, `.to(other_tensor)` and
        anything whose argument may not be a device."""
        func = call.func
        if type(func) is not cst.Attribute or func.attr.value not in ("cuda", "to"):
            return None
        positional = [a for a in call.args if a.keyword is None]
        if any(a.star for a in call.args):
            return None
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        if func.attr.value == "cuda":
            device = keywords.get("device", positional[0].value if positional else None)
            if positional and not type(positional[0].value) is cst.Integer:
                return None
            return Move(call, device, set(keywords) <= {"device", "non_blocking"} and len(positional) <= 1)
        device = keywords.get("device")
        if device is None and positional and self.is_device(positional[0].value):
            device = positional[0].value
            positional = positional[1:]
        if device is None or not self.is_device(device):
            return None
        return Move(call, device, not positional and set(keywords) <= {"device", "non_blocking"})

    def _placed_by_keyword(self, call: cst.Call) -> bool:
        device = argument(call, "device")
        return device is not None and self.is_device(device.value)

    # -- the model ---------------------------------------------------------------------------
    def of(self, expr: cst.BaseExpression) -> Computation:
        """What evaluating `expr` does (see the module docstring)."""
        found = self._memo.get(id(expr))
        if found is None:
            found = _Walk(self).run(expr)
            self._memo[id(expr)] = found
        return found


class _Walk:
    """One classification: walks the expression once, collecting inputs and flags."""

    def __init__(self, purity: Purity) -> None:
        self.purity = purity
        self.names = purity.names
        self.pure = True
        self.random = False
        self.exact = True
        self.placed = False
        self.factories: List[cst.Call] = []
        self.inputs: List[Input] = []

    def run(self, expr: cst.BaseExpression) -> Computation:
        self.visit(expr, as_tensor=True)
        return Computation(self.pure and not self.random, self.random, self.exact, self.placed,
                           tuple(self.factories), tuple(self.inputs))

    def impure(self) -> None:
        self.pure = False

    def visit(self, node: cst.CSTNode, as_tensor: bool) -> None:
        if not self.pure and not self.random:
            return
        if type(node) is cst.Attribute and node.attr.value in _TENSOR_VIEWS:
            self.visit(node.value, as_tensor)  # `w.T`: a view of `w`
            return
        if type(node) in (cst.Name, cst.Attribute) and dotted_name(node) is not None:
            if type(node) is cst.Name and node.value in ("True", "False", "None"):
                return
            qualified = self.names.qualified_name(node)
            if qualified is not None and not type(node) is cst.Name:
                return  # `torch.float32`, `math.pi`: a constant of an imported module
            if qualified is not None:
                return  # an imported name itself
            dotted = dotted_name(node) or ""
            sized = any(part in _DESCRIPTIVE for part in dotted.split(".")[1:])
            self.inputs.append(Input(node, dotted, as_tensor and not sized))  # type: ignore[arg-type]
            return
        if type(node) is cst.Attribute:  # `(a @ b).T`, `f(x).shape`
            self.visit(node.value, as_tensor and node.attr.value not in _DESCRIPTIVE)
            return
        if type(node) in (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString):
            return
        if type(node) is cst.Call:
            self.call(node, as_tensor)
            return
        if type(node) is cst.BinaryOperation:
            if not isinstance(node.operator, _EXACT_OPERATORS):
                self.exact = False
            self.visit(node.left, as_tensor)
            self.visit(node.right, as_tensor)
            return
        if type(node) is cst.UnaryOperation:
            self.visit(node.expression, as_tensor)
            return
        if type(node) is cst.Comparison:
            self.visit(node.left, as_tensor)
            for target in node.comparisons:
                self.visit(target.comparator, as_tensor)
            return
        if type(node) is cst.Subscript:
            self.visit(node.value, as_tensor)
            for element in node.slice:
                self.visit(element.slice, False)
            return
        if type(node) in (cst.Index,):
            self.visit(node.value, as_tensor)
            return
        if type(node) is cst.Slice:
            for part in (node.lower, node.upper, node.step):
                if part is not None:
                    self.visit(part, False)
            return
        if type(node) in (cst.Tuple, cst.List):
            for element in node.elements:
                if not type(element) is cst.Element:
                    self.impure()
                    return
                self.visit(element.value, as_tensor)
            return
        if type(node) is cst.IfExp:
            self.visit(node.test, False)
            self.visit(node.body, as_tensor)
            self.visit(node.orelse, as_tensor)
            return
        self.impure()  # lambdas, comprehensions, walrus, f-strings, await, yield, dicts, sets ...

    def args(self, call: cst.Call, tensors: bool) -> None:
        for arg in call.args:
            if arg.star:
                self.impure()
                return
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword in ("out", "inplace", "generator", "requires_grad"):
                if not (keyword in ("inplace", "requires_grad") and literal_false(arg.value)):
                    self.impure()  # writes into a tensor, or makes a leaf that autograd tracks
                    return
            self.visit(arg.value, tensors and keyword not in _NON_TENSOR_KEYWORDS)

    def call(self, call: cst.Call, as_tensor: bool) -> None:
        purity = self.purity
        qualified = self.names.call_name(call)
        func = call.func
        if qualified is not None:
            if qualified in DETERMINISTIC_FACTORIES or qualified in RANDOM_FACTORIES or \
                    qualified in UNINITIALISED_FACTORIES:
                self.factories.append(call)
                if qualified in RANDOM_FACTORIES:
                    self.random = True
                elif qualified in UNINITIALISED_FACTORIES:
                    self.impure()
                    return
                self.placed = self.placed or purity._placed_by_keyword(call)
                self.args(call, qualified.endswith("_like"))
                return
            if qualified in RANDOM_DRAWS:
                self.random = True
                self.args(call, True)
                return
            if qualified in _FROM_DATA:
                data = argument(call, "data", 0)
                if data is None or not Purity.constant(data.value):
                    self.impure()
                    return
                self.placed = self.placed or purity._placed_by_keyword(call)
                self.args(call, False)
                return
            if qualified in _EXACT_FUNCTIONS or qualified in _INEXACT_FUNCTIONS:
                if qualified in _INEXACT_FUNCTIONS:
                    self.exact = False
                self.args(call, as_tensor)
                return
            if qualified == "torch.device" or qualified.startswith("math."):
                self.args(call, False)
                return
            self.impure()
            return
        if type(func) is cst.Name:
            if func.value in _PURE_BUILTINS:
                self.args(call, False)
                return
            self.impure()
            return
        if not type(func) is cst.Attribute:
            self.impure()
            return
        method = func.attr.value
        if method in _NEW_FROM_RECEIVER:
            data = argument(call, "data", 0)
            if method == "new_tensor" and (data is None or not Purity.constant(data.value)):
                self.impure()
                return
            self.visit(func.value, False)  # only its device and dtype are taken
            self.args(call, False)
            return
        if method in _EXACT_METHODS or method in _INEXACT_METHODS:
            if method in _INEXACT_METHODS:
                self.exact = False
            move = purity.mover(call)
            if method in ("to", "cuda"):
                if move is None and not _casts_only(call, self.names):
                    self.impure()  # `.to(other)`: a tensor's device and dtype, or unknown
                    return
                if move is not None:
                    self.placed = True
            self.visit(func.value, as_tensor)
            self.args(call, method in ("masked_fill", "where", "expand_as", "view_as", "reshape_as", "type_as",
                                       "matmul", "mm", "bmm", "outer", "index_select", "gather"))
            return
        if method in SIZE_METHODS:
            self.visit(func.value, False)
            self.args(call, False)
            return
        self.impure()


def literal_false(expr: cst.BaseExpression) -> bool:
    return type(expr) is cst.Name and expr.value == "False"


def _casts_only(call: cst.Call, names: TorchNames) -> bool:
    """`.to(torch.float16)` / `.to(dtype=torch.float16)`: a cast, no move."""
    if len(call.args) != 1 or call.args[0].star:
        return False
    arg = call.args[0]
    if arg.keyword is not None and arg.keyword.value != "dtype":
        return False
    qualified = names.qualified_name(arg.value)
    if qualified is not None:
        return qualified.startswith("torch.") and bool(_DTYPE_NAME.search(qualified.rsplit(".", 1)[-1]))
    last = dotted_name(arg.value)
    return last is not None and bool(_DTYPE_NAME.search(last.rsplit(".", 1)[-1]))


def inputs_read(computation: Computation) -> FrozenSet[str]:
    """The plain names at the root of what a computation reads."""
    return frozenset(i.dotted.split(".")[0] for i in computation.inputs)
