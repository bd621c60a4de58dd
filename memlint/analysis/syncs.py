"""Syncs: calls that make the host wait for the device, on values known to be tensors.

Asked as `facts.syncs`:

- `sync(call)`: what kind of host-device synchronisation a call is, or None: `t.item()`,
  `t.tolist()`, `t.cpu()` (copies to the host and waits for the kernels that make `t`),
  `int(t)` / `float(t)` / `bool(t)` of a tensor, `torch.cuda.synchronize()`. Only on values
  `is_tensor` recognises: a `.item()` on a NumPy value is no sync;
- `is_tensor(expr, at)`: the value is a torch tensor: made by a torch function, a model or a
  loss, a tensor method of a tensor, indexing, arithmetic or an elementwise comparison of one,
  an element of a tensor or of `model.parameters()`, a parameter or buffer the class registers
  (`self.table`), a field of a model's output (`out.logits`), a floating cast of anything but
  a model (`g.float()`: only torch has it), a name whose slice a model is
  called with in the same function (`model.forward_decoder(tokens[:, :step + 1])`: the batch of
  a decoding loop, however it was made), what a function of this module
  returns when every `return` gives one, what an accelerator gathers of tensors, a field of
  a data loader's batch unpacked by position (`for x, y in loader`, `imgs, _ = batch` in a
  Lightning step hook), a name bound only to such values (a loop's `tokens = tokens[keep]` is
  decided by its other bindings; `x += y` keeps a tensor one), a dict's item that the block
  stored a tensor under (`kwargs["mapping"] = mapping.to(device)`), a parameter declared a
  tensor (`ids: Tensor`; `mapping: Optional[Tensor]` in a module's method, whose caller hands
  the model its inputs: a helper's optional argument is often never passed);
- `on_device(expr, at)`: the tensor lives where the model runs: in a method of an `nn.Module`
  (module code runs on the module's device), or made by a model, a loss, a move
  (`.to(device)`, `.cuda()`) or a factory given a device, and what torch computes from those;
  a helper's parameter declared a tensor that every call passes on the device (a call in a
  module's method passes what lives there);
  a tensor's `.grad` (a gradient is where backward ran: the device, in device code);
  not a copy on the host (`.cpu()`); `on_host(expr, at)`: it is such a copy, or made on the host
  (a factory given no device), or taken or computed from those alone;
- `in_module_method(at)`: `at` runs in a method of an `nn.Module` class (the fact `on_device`
  stands on there; MEM103 asks it of a tensor it knows only by the move into it);
- `repeats_over(node)`: the iterable of the innermost loop or comprehension around `node` in
  its function (None for `while` loops), and `many(iterable, at)`: whether iterating it runs
  many times: a model's parameters (also handed over as an argument, known by the gradient
  the loop reads of each), a tensor's elements, a `range` that is not a small literal, `zip` /
  `enumerate` of such (not a dict's `.items()`, not a literal tuple); `over_parameters(iterable)`:
  it walks a model's parameters (whose per-element waits one foreach kernel removes together);
- `implicit(node)`: the wait a node makes with no call asking for it (a slice bound, a mask,
  an `if` test or a `not` of a device tensor, Python's `max`/`min` over one), and
  `truth_tested(call)`: the device tensor that `any(...)`/`all(...)` tests per element of a
  comprehension;
- `reads_back(func)`: a function that runs a model and returns only values copied to the host;
- `printed(call)`: the GPU tensor (not a loss) a builtin `print` formats, which waits for it:
  a name, an item, or a tensor computed in the call (`print((v * g.float()).mean())`).

Asked by MEM105, by MEM103 (where a tensor lives) and by MEM104.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.dataflow import SCALAR_METHODS, SIZE_METHODS, VALUES_INDICES, target_names, unpacked_position
from memlint.analysis.loops import FEW_ITERATIONS, range_span
from memlint.analysis.purity import Purity
from memlint.analysis.regions import Regions
from memlint.analysis.roles import Roles
from memlint.analysis.scopes import Binding, Scopes
from memlint.analysis.steps import LOADER_NAME
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import (OWN_SCOPE_EXPRESSIONS, TreeIndex, argument, children, dotted_name, is_docstring,
                                   last_part, string_key, walk)

# What only a tensor has: a field read like this is one
_TENSOR_ATTRIBUTES = frozenset({"shape", "size", "device", "dtype", "dim", "ndim", "numel"})
_TENSOR_FUNCTION = re.compile(r"^torch\.(\w+|nn\.functional\.\w+|linalg\.\w+|fft\.\w+|special\.\w+)$")
# What an evaluation may call besides models, losses, pure torch and its own values' methods
_GRAD_MODES = frozenset({"torch.no_grad", "torch.inference_mode", "torch.enable_grad", "torch.set_grad_enabled"})
_PURE_BUILTINS = frozenset({"len", "float", "int", "bool", "abs", "round", "min", "max", "sum", "range", "zip",
                            "enumerate", "isinstance", "tuple", "list"})
# Builtins that, given sizes, queue no device work: `len(batch)`, `max(n, 1)` (`SIZE_METHODS` read them)
_SIZE_BUILTINS = frozenset({"len", "int", "min", "max"})
_NOT_TENSOR_FUNCTIONS = frozenset({
    "torch.is_tensor", "torch.numel", "torch.device", "torch.Size", "torch.no_grad", "torch.enable_grad",
    "torch.inference_mode", "torch.set_grad_enabled", "torch.is_grad_enabled", "torch.get_default_dtype",
    "torch.manual_seed", "torch.seed", "torch.load", "torch.save", "torch.compile", "torch.autocast",
    "torch.Generator", "torch.set_default_dtype", "torch.is_floating_point", "torch.is_complex",
    "torch.equal", "torch.allclose", "torch.initial_seed", "torch.get_rng_state", "torch.typename",
})
# Tensor methods whose result is not a tensor (or not a new one worth following).
# Predicates of torch and of tensors (`torch.is_autocast_enabled()`, `t.is_complex()`): they
# give Python bools, read from the host's state or the tensor's metadata.
_PREDICATE = re.compile(r"^(is|are|has)_\w+$")
_NOT_TENSOR_METHODS = frozenset(SCALAR_METHODS | {"numpy", "type", "equal", "allclose", "is_floating_point",
                                                  "register_hook", "backward", "keys", "values", "items",
                                                  "get", "pop", "format", "split_with_sizes"})
# Floating casts only torch has (a NumPy array, a number, a list have none of them): what they
# give is a tensor. Integer casts are torch's too, but they mostly read lengths and masks, often
# on the host: those are left to what their value is known to be.
_TENSOR_CASTS = frozenset({"float", "half", "double", "bfloat16"})
# Methods only a tensor has (a NumPy array, a list, a number have none of them): what they are
# called on, and what they give, is a tensor.
_TENSOR_ONLY_METHODS = frozenset({"contiguous", "masked_fill", "masked_fill_", "unsqueeze", "permute", "detach",
                                  "type_as", "view_as", "expand_as", "index_select", "masked_select",
                                  "new_zeros", "new_ones", "new_full", "new_empty"})
# Methods that give a view or a copy of a tensor with the same values: a mask stays a mask.
_MASK_VIEWS = frozenset({"contiguous", "view", "reshape", "flatten", "squeeze", "unsqueeze", "transpose",
                         "permute", "bool", "clone", "detach"})
# What a model's output holds as tensors, by name (HF's ModelOutput: `out.logits`)
_OUTPUT_FIELDS = frozenset({"logits", "loss", "last_hidden_state", "pooler_output", "start_logits", "end_logits"})
# An accelerator's collectives, which give back tensors shaped like the ones they are handed
_GATHERS = frozenset({"gather", "gather_for_metrics", "reduce", "pad_across_processes", "all_gather", "all_reduce"})
_ACCELERATOR = re.compile(r"(^|\.)(accelerator|fabric)$", re.IGNORECASE)
_LOSS_NAME = re.compile(r"loss", re.IGNORECASE)
_SIZES = frozenset({"size", "sizes", "count", "counts", "num", "shape", "shapes"})
# tqdm's progress bars: `trange(n)` runs as `range(n)` (`Syncs.many`); `tqdm(x)` as `x`.
_PROGRESS_RANGES = frozenset({"tqdm.trange", "tqdm.auto.trange", "tqdm.notebook.trange", "tqdm.std.trange"})
_PROGRESS_BARS = frozenset({"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm"})
_PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
_PARAMETER_ITERABLES = frozenset({"parameters", "named_parameters", "buffers", "named_buffers"})
_NAMED_TENSORS = {"named_parameters": "parameters", "named_buffers": "buffers"}  # (name, tensor) pairs: the tensors
_FEW_METHODS = frozenset({"items", "values", "keys"})
_MAX_DEPTH = 6  # in one expression
_MAX_NAMES = 8  # names followed to their values, one inside another


_SYNC_METHODS = frozenset({"item", "tolist", "cpu", "synchronize"})
_SYNC_BUILTINS = frozenset({"int", "float", "bool"})
_READS_ELEMENTS = frozenset({"max", "min", "sum"})
# Torch factories whose positional arguments are sizes or bounds, and tensor methods given sizes
# or counts: a GPU value there is read on the host (`torch.randn((n,))`, `x.topk(k)`).
_SIZED_FACTORIES = frozenset({"torch.zeros", "torch.ones", "torch.empty", "torch.randn", "torch.rand",
                              "torch.arange", "torch.randperm", "torch.eye"})
_SIZE_METHODS = frozenset({"topk", "kthvalue", "repeat", "view", "reshape", "expand", "narrow",
                           "new_zeros", "new_ones", "new_empty"})
_FACTORY_NAMES = frozenset(name.split(".")[1] for name in _SIZED_FACTORIES)
_SIZE_CALLEES = _SIZE_METHODS | _FACTORY_NAMES  # how such a call ends, by its shape alone
# Functions whose result's size depends on the data: the host reads it from the device
_SIZED_BY_DATA = frozenset({"torch.nonzero", "torch.masked_select", "torch.unique", "torch.argwhere"})
# Methods of frameworks that copy a batch to the device (from pageable host memory: the host waits)
_COPIES_IN = frozenset({"to_device", "move_to_cuda", "move_to_device"})


def _only_return(func: cst.FunctionDef) -> Optional[cst.BaseExpression]:
    """What a function returns when its body is that one `return` (a docstring aside)."""
    body = [s for s in func.body.body if not is_docstring(s)]  # type: ignore[attr-defined]
    if len(body) != 1 or type(body[0]) is not cst.SimpleStatementLine or type(body[0].body[0]) is not cst.Return:
        return None
    return body[0].body[0].value  # type: ignore[attr-defined]


def may_sync(call: cst.Call) -> bool:
    """By its shape alone, `call` may be a sync (`x.item()`, `int(x)`, `torch.cuda.synchronize()`):
    the cheap test to make before asking `Syncs.sync`."""
    func = call.func
    if type(func) is cst.Attribute:
        name = func.attr.value
        return name in _SYNC_METHODS or name in _SIZE_CALLEES
    return type(func) is cst.Name and (func.value in _SYNC_BUILTINS or func.value in _READS_ELEMENTS or
                                       func.value in _FACTORY_NAMES)


def _compared(expr: cst.BaseExpression) -> Optional[Tuple[cst.BaseExpression, cst.BaseExpression]]:
    """The two sides of one elementwise comparison (`done != 1`, `x > y`), whose value is a
    tensor of bools when a side is a tensor; None for anything else: `is`, `in` and a chain
    (`a < b < c` is an `and`, read on the host)."""
    if type(expr) is not cst.Comparison or len(expr.comparisons) != 1:  # type: ignore[attr-defined]
        return None
    comparison = expr.comparisons[0]  # type: ignore[attr-defined]
    if type(comparison.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn):
        return None
    return expr.left, comparison.comparator  # type: ignore[attr-defined]


def _shown(call: cst.Call) -> List[cst.BaseExpression]:
    """The values a print formats: its positional arguments, and the expressions of an f-string."""
    shown: List[cst.BaseExpression] = []
    for arg in call.args:
        if arg.keyword is not None or arg.star:
            continue
        value = arg.value
        if type(value) is cst.FormattedString:
            shown += [part.expression for part in value.parts  # type: ignore[attr-defined]
                      if type(part) is cst.FormattedStringExpression]
        else:
            shown.append(value)
    return shown


def _printed_name(value: cst.BaseExpression) -> str:
    """The name a printed value goes by: `acc` for `acc`, `acc[0]` and `acc.mean()`; none for
    `(a * g.float()).mean()`."""
    while type(value) in (cst.Subscript, cst.Call):
        value = value.value if type(value) is cst.Subscript else value.func  # type: ignore[attr-defined]
        if type(value) is cst.Attribute and type(value.value) is not cst.Name:  # type: ignore[attr-defined]
            value = value.value  # type: ignore[attr-defined]
    return dotted_name(value) or ""


def _holds_sizes(name: str) -> bool:
    """A parameter holding lengths or sizes, often on the host, by a part of its name
    (`lengths`, `seq_lens`, `ilens`, `seqlen`, `num_tokens`); not flash-attention's cumulative
    offsets (`cu_seqlens`, on the device) nor `discount`."""
    parts = name.lower().split("_")
    return parts[0] != "cu" and any(part in _SIZES or part.endswith(("len", "lens", "length", "lengths"))
                                    for part in parts)


def _empty_dict(value: Optional[cst.BaseExpression]) -> bool:
    """`{}` or `dict()`."""
    return type(value) is cst.Dict and not value.elements or \
        type(value) is cst.Call and dotted_name(value.func) == "dict" and not value.args  # type: ignore[attr-defined]


def _to_host(expr: cst.BaseExpression) -> bool:
    """`x.cpu()`, `x.numpy()`, `x.to("cpu")`: a copy on the host, wherever `x` lives."""
    if type(expr) is not cst.Call or type(expr.func) is not cst.Attribute:  # type: ignore[attr-defined]
        return False
    method = expr.func.attr.value  # type: ignore[attr-defined]
    if method in ("cpu", "numpy"):
        return True
    device = argument(expr, "device", 0) if method == "to" else None  # type: ignore[arg-type]
    return device is not None and type(device.value) is cst.SimpleString and \
        str(device.value.evaluated_value).split(":")[0] == "cpu"  # type: ignore[attr-defined]


def element_source(target: cst.BaseExpression, iterable: cst.BaseExpression, name: str) -> Optional[cst.BaseExpression]:
    """What `name`, bound by `for target in iterable`, takes its values from: `iterable` itself
    when `target` is the name; through `enumerate` and `zip`, the one iterable whose elements
    it takes (`for i, (s, t) in enumerate(zip(a, b))`: `s` from `a`); through a module's
    `named_parameters()` / `named_buffers()`, its `parameters()` / `buffers()` (`for n, p in
    model.named_parameters()`: `p` from `model.parameters()`); None when it cannot be told."""
    if type(target) is cst.Name:
        return iterable if target.value == name else None
    if not type(target) in (cst.Tuple, cst.List) or not type(iterable) is cst.Call:
        return None
    parts = [e.value for e in target.elements]
    func = iterable.func
    if type(func) is cst.Attribute and func.attr.value in _NAMED_TENSORS and len(parts) == 2 and \
            type(parts[1]) is cst.Name and parts[1].value == name:
        return cst.Call(cst.Attribute(func.value, cst.Name(_NAMED_TENSORS[func.attr.value])))
    if not type(func) is cst.Name or any(a.keyword is not None or a.star for a in iterable.args):
        return None
    if iterable.func.value == "enumerate" and len(parts) == 2 and len(iterable.args) == 1:
        return element_source(parts[1], iterable.args[0].value, name)
    if iterable.func.value == "zip" and len(parts) == len(iterable.args):
        for part, arg in zip(parts, iterable.args):
            found = element_source(part, arg.value, name)
            if found is not None:
                return found
    return None


def batch_field(target: cst.BaseExpression, iterable: cst.BaseExpression, name: str) -> bool:
    """`x` in `for x, y in loader` (or `for i, (x, y) in enumerate(train_loader)`): a field of a
    data loader's batch unpacked by position, which the loader's collation stacks into a tensor."""
    if type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value == "enumerate" and \
            len(iterable.args) == 1 and type(target) is cst.Tuple and len(target.elements) == 2:
        return batch_field(target.elements[1].value, iterable.args[0].value, name)
    if type(target) not in (cst.Tuple, cst.List) or not LOADER_NAME.search(last_part(dotted_name(iterable))):
        return False
    return any(type(e.value) is cst.Name and e.value.value == name for e in target.elements)  # type: ignore[attr-defined]


def _unpacked(bind: Binding, name: str) -> Optional[cst.BaseExpression]:
    """The element a tuple of values gives `name` (`x, y = x.cuda(), y.cuda()`: `x.cuda()`)."""
    value = bind.value
    if bind.whole or type(value) not in (cst.Tuple, cst.List) or \
            any(type(e) is not cst.Element for e in value.elements):  # type: ignore[union-attr]
        return None
    target = bind.node.targets[0].target if type(bind.node) is cst.Assign and len(bind.node.targets) == 1 else None
    elements = value.elements  # type: ignore[union-attr]
    if type(target) not in (cst.Tuple, cst.List) or len(target.elements) != len(elements) or \
            any(type(e) is not cst.Element for e in target.elements):  # type: ignore[union-attr]
        return None
    position = unpacked_position(bind.node, name)
    return elements[position].value if position is not None else None


class _Bindings:
    """Answers, by (name, id(at)), to a test that holds of a name when it holds of every value
    in effect there (`is_tensor`, `on_device`). In a loop a name often reads its own earlier value
    (`tokens = tokens.view(...)[keep]`): a test met again while it is being decided is assumed to
    hold, and the bindings outside the cycle decide it. An answer that leaned on an assumption
    still being decided is not kept, unless it is no (assuming more never turns a no into a yes)."""

    def __init__(self) -> None:
        self._answers: Dict[Tuple[str, int], bool] = {}
        self._deciding: Set[Tuple[str, int]] = set()
        self._assumed: Set[Tuple[str, int]] = set()  # of those being decided, the ones assumed to hold

    def known(self, key: Tuple[str, int]) -> Optional[bool]:
        """The answer kept, True while `key` is being decided, or None: decide it, then call
        `decided`."""
        answer = self._answers.get(key)
        if answer is not None:
            return answer
        if key in self._deciding:
            self._assumed.add(key)
            return True
        if len(self._deciding) >= _MAX_NAMES:
            return False  # too long a chain of names to follow: not known to hold
        self._deciding.add(key)
        return None

    def decided(self, key: Tuple[str, int], answer: bool) -> bool:
        self._deciding.discard(key)
        self._assumed.discard(key)
        if not answer or not self._assumed:
            self._answers[key] = answer
        return answer


def _reads_sizes_only(statement: cst.SimpleStatementLine) -> bool:
    """Every call the statement makes reads a size (`bsz = lengths.size(0)`, `n = len(batch)`):
    it queues no device work."""
    for node in walk(statement):
        if type(node) is cst.Call:
            func = node.func  # type: ignore[attr-defined]
            if not (type(func) is cst.Attribute and func.attr.value in SIZE_METHODS or
                    type(func) is cst.Name and func.value in _SIZE_BUILTINS):
                return False
    return True


class Syncs:
    """Host-device syncs and tensor values of one module (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes, regions: Regions, roles: Roles,
                 purity: Purity, from_project: Callable[[cst.Call], bool] = lambda call: False) -> None:
        """`from_project`: whether a call returns a tensor on the device by the summary of the
        project module that defines its function (memlint.analysis.values.Values.returned_on_device)."""
        self.names = names
        self.tree = tree
        self.scopes = scopes
        self.regions = regions
        self.roles = roles
        self.purity = purity
        self._from_project = from_project
        self._tensors = _Bindings()  # (name, id(at)) -> bound only to tensors
        self._placed = _Bindings()  # (name, id(at)) -> bound only to device tensors
        self._copied = _Bindings()  # (name, id(at)) -> bound only to copies on the host
        self._loop_syncs: Dict[int, List[Tuple[cst.CSTNode, str]]] = {}
        self._registers: Optional[Dict[int, FrozenSet[str]]] = None  # id(class) -> what it registers by name
        self._model_slices: Dict[int, FrozenSet[str]] = {}  # id(scope) -> names a model is called with a slice of
        self._stored: Dict[Tuple[int, int], Optional[cst.BaseExpression]] = {}  # (`_stored_item`)
        self._properties: Dict[int, Dict[str, cst.Call]] = {}  # id(class) -> `syncing_property`

    def returns_device(self, func: cst.FunctionDef) -> bool:
        """Whether every `return` of `func` gives a tensor on the device, where it moves or makes
        one there (for the module's summary, `from_project`)."""
        if not any(type(call.func) is cst.Attribute and call.func.attr.value in ("to", "cuda") or  # type: ignore[attr-defined]
                   any(arg.keyword is not None and arg.keyword.value == "device" for arg in call.args)
                   for call in self.scopes.calls_of(func)):
            return False  # (the cheap test first: nothing placed on a device)
        returned = self.tree.scope_nodes(func, cst.Return)
        return bool(returned) and all(
            ret.value is not None and self.is_tensor(ret.value, ret) and self.on_device(ret.value, ret)  # type: ignore[attr-defined]
            for ret in returned)

    def sync(self, call: cst.Call) -> Optional[str]:
        """`item`, `tolist`, `cpu`, `int`/`float`/`bool` or `synchronize` when `call` makes the
        host wait for the device; else None."""
        func = call.func
        if self.names.call_name(call) == "torch.cuda.synchronize":
            return "synchronize"
        if type(func) is cst.Attribute and func.attr.value in ("item", "tolist", "cpu") and not call.args:
            receiver = func.value
            if func.attr.value == "cpu" and self.roles.receivers.is_model(receiver):
                return None
            return func.attr.value if self.is_tensor(receiver, call) and not self.on_host(receiver, call) else None
        if type(func) is cst.Name and func.value in ("int", "float", "bool") and len(call.args) == 1 and \
                self.names.qualified_name(func) is None and self.is_tensor(call.args[0].value, call) and \
                not self.on_host(call.args[0].value, call):
            return func.value
        return None

    def syncing_properties(self, klass: cst.ClassDef) -> Dict[str, cst.Call]:
        """The properties of `klass` that return a sync, by name (`@property def r(self): return
        self.decoder.r.item()`): reading `self.r` in a method waits as the call does."""
        found = self._properties.get(id(klass))
        if found is None:
            found = self._properties[id(klass)] = {}
            for method in klass.body.body:  # type: ignore[attr-defined]
                if type(method) is cst.FunctionDef and any(
                        type(d.decorator) is cst.Name and d.decorator.value == "property"  # type: ignore[attr-defined]
                        for d in method.decorators):
                    returned = _only_return(method)
                    if type(returned) is cst.Call and may_sync(returned) and self.sync(returned) is not None:
                        found[method.name.value] = returned  # type: ignore[assignment]
        return found

    def printed(self, call: cst.Call) -> Optional[Tuple[cst.BaseExpression, str]]:
        """The GPU tensor a builtin `print(...)` formats (an argument, or a value in an
        f-string argument), which copies it to the host and waits for the kernels that make
        it, or a dict of them, with what it is ("a GPU tensor", "a dict of GPU tensors"); None
        when it prints none, or only losses (a loss printed per step is the price of logging,
        like its `.item()`)."""
        func = call.func
        if type(func) is not cst.Name or func.value != "print" or self.names.qualified_name(func) is not None or \
                self.scopes.bindings_seen("print", call):  # type: ignore[attr-defined]
            return None
        for value in _shown(call):
            if _LOSS_NAME.search(_printed_name(value)):
                continue
            if self._formats_device_tensor(value, call):
                return value, "a GPU tensor"
            if self._filled_with_device_tensors(value, call):
                return value, "a dict of GPU tensors"
        return None

    def _filled_with_device_tensors(self, value: cst.BaseExpression, call: cst.Call) -> bool:
        """A dict its function makes empty and fills with GPU tensors other than losses
        (`metrics = {}`, then `metrics["kl"] = (logp - ref).mean()`): printing it formats, and
        copies to the host, every one of them."""
        if type(value) is not cst.Name:
            return False
        name = value.value  # type: ignore[attr-defined]
        binds = self._bindings_at(name, call)
        if not binds or not all(bind.kind == "assign" and bind.whole and _empty_dict(bind.value) for bind in binds):
            return False
        for assign in self.scopes.assigns_of(self.tree.scope_of(call)):
            block = self.tree.parent(self.tree.parent(assign))  # (the block of its statement line)
            while block is not None and type(self.tree.parent(block)) is cst.With:  # a `with` runs its body
                block = self.tree.parent(self.tree.parent(block))
            if self.tree.order(assign) > self.tree.order(call) or block is None or not self.tree.contains(block, call):
                continue  # a store after the print, or in a branch the print need not follow
            stored = [target.target for target in assign.targets]
            if any(type(target) is cst.Subscript and dotted_name(target.value) == name and  # type: ignore[attr-defined]
                   not _LOSS_NAME.search(string_key(target) or "") for target in stored) and \
                    not _LOSS_NAME.search(_printed_name(assign.value)) and self._device_tensor(assign.value, assign):
                return True
        return False

    def logged(self, call: cst.Call) -> Optional[cst.BaseExpression]:
        """What a log line reads from the GPU, losses included: a GPU tensor that `print(...)`
        or a `.print(...)` (Accelerate's, Fabric's) formats, or a value it reads back itself
        (`loss.item()`); None when it reads none."""
        func = call.func
        if not (type(func) is cst.Name and func.value == "print" or
                type(func) is cst.Attribute and func.attr.value == "print"):  # type: ignore[attr-defined]
            return None
        return next((value for value in _shown(call)
                     if type(value) is cst.Call and may_sync(value) and self.sync(value) is not None  # type: ignore[arg-type]
                     or self._formats_device_tensor(value, call)), None)

    def _formats_device_tensor(self, value: cst.BaseExpression, call: cst.Call) -> bool:
        """A value a print formats (a name, attribute, item or call's result) that is a GPU tensor."""
        return type(value) in (cst.Name, cst.Attribute, cst.Subscript, cst.Call) and self._device_tensor(value, call)

    def reads_back(self, func: cst.FunctionDef) -> bool:
        """A function of this module that runs a model and returns only values it copies to the
        host (`return loss.item(), acc.item()`), and does nothing else a caller could rely on
        (no backward, no optimizer step, no attribute or global stored): an evaluation, every
        call of which waits for its forward."""
        returned = self.tree.scope_nodes(func.body, cst.Return, cst.Yield)
        if not returned or any(type(node) is cst.Yield or node.value is None for node in returned):  # type: ignore[attr-defined]
            return False
        confirmed = False
        for node in returned:
            value = node.value  # type: ignore[attr-defined]
            parts = [e.value for e in value.elements] if type(value) is cst.Tuple else [value]
            if not all(type(part) is cst.Call and may_sync(part) for part in parts):
                return False
            # each read back by its shape, one at least known to read a tensor
            confirmed = confirmed or any(self.sync(part) not in (None, "synchronize") for part in parts)  # type: ignore[arg-type]
        if not confirmed or not any(self.roles.is_forward(call) for call in self.scopes.calls_of(func)):
            return False
        return self._keeps_to_itself(func)

    def _keeps_to_itself(self, func: cst.FunctionDef) -> bool:
        """Nothing `func` does outlives its call but its return value (and a model's eval/train
        mode): it stores no attribute, subscript or global, and calls only models, losses, pure
        torch functions, a few builtins, and methods of values it made itself."""
        for node in self.tree.walk_scope(func.body):
            kind = type(node)
            if kind is cst.Global or kind is cst.Nonlocal:
                return False
            if kind is cst.AssignTarget and type(node.target) in (cst.Attribute, cst.Subscript):  # type: ignore[attr-defined]
                return False
            if kind is cst.AugAssign and not self._made_here(node.target, func):  # type: ignore[attr-defined]
                return False
            if kind is cst.Call and not self._call_keeps_to_itself(node, func):  # type: ignore[arg-type]
                return False
        return True

    def _call_keeps_to_itself(self, call: cst.Call, func: cst.FunctionDef) -> bool:
        roles = self.roles
        if roles.is_forward(call) or roles.is_loss(call):
            return True
        qualified = self.names.call_name(call)
        if qualified is not None:
            return qualified in _GRAD_MODES or bool(_TENSOR_FUNCTION.match(qualified)) and self.purity.of(call).pure
        callee = call.func
        if type(callee) is cst.Name:
            return callee.value in _PURE_BUILTINS
        if not type(callee) is cst.Attribute:
            return False
        if callee.attr.value in ("eval", "train") and roles.receivers.is_model(callee.value):
            return True  # a model's mode: the step sets its own
        return self._made_here(callee.value, func)

    def _made_here(self, expr: cst.BaseExpression, func: cst.FunctionDef) -> bool:
        """A value `func` computed itself: an expression, or a name only it binds (no parameter)."""
        root = expr
        while type(root) in (cst.Attribute, cst.Subscript, cst.Call):
            root = root.func if type(root) is cst.Call else root.value
        if not type(root) is cst.Name:
            return True  # (a comparison, arithmetic: a fresh value)
        binds = self.scopes.bindings(func, root.value)
        return bool(binds) and all(b.kind not in ("param", "append") for b in binds)

    # -- tensors -----------------------------------------------------------------------------
    def is_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        if depth > _MAX_DEPTH:
            return False
        if type(expr) is cst.Name:
            return self._name_is_tensor(expr.value, at)
        if type(expr) is cst.Attribute:
            if expr.attr.value in ("grad", "data", "T", "mT", "real", "imag", "values", "indices"):
                return self.is_tensor(expr.value, at, depth + 1)
            value = expr.value  # `model(x).logits`, `out.loss`
            if type(value) is cst.Name and expr.attr.value in _OUTPUT_FIELDS:  # `out = model(x)` ... `out.logits`
                return self.is_tensor(value, at, depth + 1)
            return type(value) is cst.Call and self.roles.is_forward(value) or self._registered(expr, at)
        if type(expr) is cst.Subscript:
            stored = self._stored_item(expr, at)
            return self.is_tensor(stored if stored is not None else expr.value, at, depth + 1)
        if type(expr) is cst.BinaryOperation:
            return self.is_tensor(expr.left, at, depth + 1) or self.is_tensor(expr.right, at, depth + 1)
        if type(expr) is cst.UnaryOperation and not type(expr.operator) is cst.Not:
            return self.is_tensor(expr.expression, at, depth + 1)
        if type(expr) is cst.Call:
            return self._call_is_tensor(expr, at, depth)
        compared = _compared(expr)
        return compared is not None and any(self.is_tensor(side, at, depth + 1) for side in compared)

    def _stored_item(self, expr: cst.Subscript, at: cst.CSTNode) -> Optional[cst.BaseExpression]:
        """What the last statement of `at`'s block before it stores under the same string key of
        the same name (`model_kwargs["mapping"] = mapping.to(device)`, then
        `model_kwargs["mapping"]`): a dict's item is what was put there."""
        if type(expr.value) is not cst.Name or len(expr.slice) != 1 or type(expr.slice[0].slice) is not cst.Index or \
                type(expr.slice[0].slice.value) is not cst.SimpleString:  # type: ignore[attr-defined]
            return None
        key = (id(expr), id(at))
        if key not in self._stored:
            self._stored[key] = self._last_stored(expr, at)
        return self._stored[key]

    def _last_stored(self, expr: cst.Subscript, at: cst.CSTNode) -> Optional[cst.BaseExpression]:
        code = self.tree.module.code_for_node
        key = code(expr)
        line = next((a for a in self.tree.ancestors(at) if type(a) is cst.SimpleStatementLine), None)
        block = self.tree.parent(line) if line is not None else None
        body = getattr(block, "body", None)
        if not isinstance(body, (list, tuple)) or line not in body:
            return None
        for statement in reversed(body[:body.index(line)]):
            smalls = statement.body if type(statement) is cst.SimpleStatementLine else ()
            if len(smalls) == 1 and type(smalls[0]) is cst.Assign and len(smalls[0].targets) == 1 and \
                    type(smalls[0].targets[0].target) is cst.Subscript and code(smalls[0].targets[0].target) == key:
                return smalls[0].value  # type: ignore[attr-defined]
            if self._changes(statement, expr.value.value):  # type: ignore[attr-defined]
                return None  # the dict is bound or changed again after: what it holds is not known
        return None

    def _changes(self, statement: cst.CSTNode, name: str) -> bool:
        """`statement` may bind the dict `name` or change what it holds: `name = ...`,
        `name[k] = ...` (in a branch, too), `name.update(...)`, or any call it is handed to."""
        for node in self.tree.walk_scope(statement):
            if type(node) is not cst.Name or node.value != name:  # type: ignore[attr-defined]
                continue
            parent = self.tree.parent(node)
            if type(parent) is cst.AssignTarget or type(parent) is cst.Arg or \
                    type(parent) is cst.Subscript and type(self.tree.parent(parent)) is cst.AssignTarget or \
                    type(parent) is cst.Attribute and type(self.tree.parent(parent)) is cst.Call:
                return True
        return False

    def _registered(self, expr: cst.Attribute, at: cst.CSTNode) -> bool:
        """`self.<name>` in a method of a class that registers `<name>` as a parameter or a
        buffer (`self.table = nn.Parameter(...)`, every value the class gives it;
        `self.register_buffer("index", ...)`); `self.<part>.<name>` where every value the class
        gives `<part>` is an instance of a class of this module that registers `<name>`
        (`self.decoder = Decoder(...)`, whose `__init__` registers the buffer `r`)."""
        owner = expr.value
        func = self.tree.function_of(at)
        klass = self.tree.class_of(func) if func is not None else None
        if klass is None:
            return False
        if type(owner) is cst.Attribute and type(owner.value) is cst.Name and owner.value.value == "self":  # type: ignore[attr-defined]
            parts = self.scopes.attribute_values(klass, owner.attr.value)  # type: ignore[attr-defined]
            classes = self.scopes.classes
            return bool(parts) and all(
                type(v) is cst.Call and type(v.func) is cst.Name and v.func.value in classes and  # type: ignore[attr-defined]
                self._registers_name(classes[v.func.value], expr.attr.value) for v in parts)  # type: ignore[attr-defined]
        if type(owner) is not cst.Name or owner.value != "self":  # type: ignore[attr-defined]
            return False
        return self._registers_name(klass, expr.attr.value)

    def _registers_name(self, klass: cst.ClassDef, name: str) -> bool:
        if name in self._buffers(klass):
            return True
        values = self.scopes.attribute_values(klass, name)
        return bool(values) and all(type(v) is cst.Call and self.names.call_name(v) in _PARAMETER_CLASSES
                                    for v in values)

    def _buffers(self, klass: cst.ClassDef) -> FrozenSet[str]:
        """The names `klass` registers with `self.register_buffer(...)` / `register_parameter(...)`
        in its methods: read off the module's list of calls once, for every class, where walking
        each class's body would read all of its nodes."""
        if self._registers is None:
            found: Dict[int, Set[str]] = {}
            for call in self.scopes.calls:
                func = call.func
                if type(func) is cst.Attribute and func.attr.value in ("register_buffer", "register_parameter") and \
                        dotted_name(func.value) == "self" and call.args and \
                        type(call.args[0].value) is cst.SimpleString:  # type: ignore[attr-defined]
                    owner = self.scopes.enclosing_class(call)
                    if owner is not None:
                        found.setdefault(id(owner), set()).add(call.args[0].value.evaluated_value)  # type: ignore[attr-defined]
            self._registers = {key: frozenset(names) for key, names in found.items()}
        return self._registers.get(id(klass), frozenset())

    def _call_is_tensor(self, call: cst.Call, at: cst.CSTNode, depth: int) -> bool:
        qualified = self.names.call_name(call)
        if qualified is not None:
            last = qualified.split(".")[-1]
            return bool(_TENSOR_FUNCTION.match(qualified)) and qualified not in _NOT_TENSOR_FUNCTIONS and \
                not last[:1].isupper() and not _PREDICATE.match(last)
        if self.roles.is_forward(call) or self.roles.is_loss(call):
            return True
        helper = self.scopes.resolve(call)
        if helper is not None:  # `self._weight(n, t)`, a function of this module returning a tensor
            return self._returns_tensors(helper, None, depth + 1)
        if self._from_project(call):
            return True  # a helper of another module of the project returning a device tensor
        func = call.func
        if type(func) is cst.Attribute and func.attr.value in _TENSOR_CASTS and not call.args and \
                not self.roles.receivers.is_model(func.value):
            return True  # `g.float()` (not of a model: `model.half()` gives the model)
        if type(func) is cst.Attribute and func.attr.value in _TENSOR_ONLY_METHODS:
            return True  # `labels.masked_fill(...)`, `x.contiguous()`
        if type(func) is cst.Attribute and _PREDICATE.match(func.attr.value):
            return False  # `h.is_complex()`, `x.has_names()`: a Python bool
        if type(func) is cst.Attribute and (func.attr.value not in _NOT_TENSOR_METHODS or
                                                func.attr.value == "type" and call.args):
            return self.is_tensor(func.value, at, depth + 1)
        return False

    def _name_is_tensor(self, name: str, at: cst.CSTNode) -> bool:
        key = (name, id(at))
        known = self._tensors.known(key)
        if known is not None:
            return known
        depth = 0  # each value is an expression of its own: the names followed are counted in _Bindings
        binds = self._bindings_at(name, at)
        comprehension = self._comprehension_target(name, at) if not binds else None
        if comprehension is not None:  # `[int(t) for t in ids]`
            return self._tensors.decided(key, self._iterates_tensors(comprehension, at, depth))
        result = bool(binds)
        for bind in binds:
            if bind.kind == "param":
                result = self._annotated_tensor(bind.node)
            elif bind.value is None:
                result = False
            elif bind.kind == "for":
                source = element_source(bind.node.target, bind.value, name)  # type: ignore[attr-defined]
                result = source is not None and self._iterates_tensors(source, bind.node, depth) or \
                    batch_field(bind.node.target, bind.value, name)  # type: ignore[attr-defined]
            elif bind.kind == "aug":  # `x += y`: a tensor stays one; a number plus a tensor becomes one
                result = self.is_tensor(bind.value, bind.node, depth + 1) or self._name_is_tensor(name, bind.node)
            elif bind.kind in ("assign", "walrus"):
                value = bind.value
                gathered = self._gathered(bind, name) or _unpacked(bind, name)
                if gathered is not None:
                    result = self.is_tensor(gathered, bind.node, depth + 1)
                elif not bind.whole and type(value) is cst.Call and \
                        (position := unpacked_position(bind.node, name)) is not None and \
                        self._returns_tensors(self.scopes.resolve(value), position, depth + 1):
                    result = True  # `error, accuracy = fast_adapt(...)`, a helper returning a tensor there
                elif not bind.whole and type(value) is cst.Name and self._hook_batch_field(bind, name):
                    result = True  # `imgs, _ = batch` in a Lightning step hook
                elif not bind.whole and not (type(value) is cst.Call and (
                        self.roles.is_forward(value) or self._call_is_tensor(value, bind.node, depth + 1))):
                    result = False
                else:
                    result = self.is_tensor(value, bind.node, depth + 1)
            else:
                result = False
            if not result:
                break
        if not result:  # however it was made, a model is called with a slice of it
            result = name in self._sliced_into_models(self.tree.scope_of(at))
        return self._tensors.decided(key, result)

    def _hook_batch_field(self, bind: Binding, name: str) -> bool:
        """`name` is a field of the batch a Lightning step hook is given, unpacked by position
        (`imgs, _ = batch` in `training_step(self, batch, batch_idx)`): the data loader's
        collation stacked it into a tensor, and Lightning moved it to the module's device."""
        position = unpacked_position(bind.node, name)
        hook = self.regions.lightning_step_hook(bind.node)
        if position is None or hook is None or len(bind.node.targets) != 1 or \
                type(bind.node.targets[0].target.elements[position]) is not cst.Element:  # type: ignore[attr-defined]
            return False  # (not `pair = imgs, labels = batch`: one target, one field)
        params = hook.params.params
        batch = bind.value.value  # type: ignore[union-attr]
        return len(params) > 1 and params[1].name.value == batch and \
            all(b.kind == "param" for b in self._bindings_at(batch, bind.node)) and self._used_as_tensor(name, hook)

    def _used_as_tensor(self, name: str, func: cst.FunctionDef) -> bool:
        """`name` is read in `func` as only a tensor is: its `.shape`, `.size()`, `.device` or
        `.dtype`, or handed to a model (a batch's field may be a list of captions or file names)."""
        for node in self.tree.walk_scope(func.body):
            if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == name and \
                    node.attr.value in _TENSOR_ATTRIBUTES:  # type: ignore[attr-defined]
                return True
            if type(node) is cst.Call and self.roles.is_forward(node) and any(  # type: ignore[arg-type]
                    type(a.value) is cst.Name and a.value.value == name for a in node.args):  # type: ignore[attr-defined]
                return True
        return False

    def _sliced_into_models(self, scope: cst.CSTNode) -> FrozenSet[str]:
        """The names `scope` calls a model with a slice of, over more than one dimension
        (`model(tokens[:, :step + 1])`): a list takes no such index, so the model's input is a
        tensor, whatever its bindings say (`sents[i:i + bs]` could be a list of sentences)."""
        found = self._model_slices.get(id(scope))
        if found is None:
            names: Set[str] = set()
            for call in self.scopes.calls_of(scope):  # type: ignore[arg-type]
                sliced = [arg.value.value.value for arg in call.args  # type: ignore[attr-defined]
                          if type(arg.value) is cst.Subscript and type(arg.value.value) is cst.Name and
                          len(arg.value.slice) > 1 and  # type: ignore[attr-defined]
                          any(type(element.slice) is cst.Slice for element in arg.value.slice)]  # type: ignore[attr-defined]
                if sliced and self.roles.is_forward(call):
                    names.update(sliced)
            found = self._model_slices[id(scope)] = frozenset(names)
        return found

    def _bindings_at(self, name: str, at: cst.CSTNode) -> List[Binding]:
        """The bindings of `name` that may be the one seen at `at`; else, the target of a loop
        around `at`."""
        if self.scopes.comprehension_clause(name, at) is not None:
            return []  # the comprehension's own name (`_comprehension_target`)
        return self.scopes.in_effect(name, at) or [
            b for b in self.scopes.bindings_seen(name, at) if b.kind == "for" and self.tree.contains(b.node, at)]

    def _binds_device_value(self, bind: "Binding", name: str, depth: int) -> bool:
        """`name = <a device tensor>`, or `for name in <a device tensor>` (through `zip`/`enumerate`),
        or `name += <a device tensor>` (or added to while on the device), or a parameter declared
        a tensor that every call of its function in this module passes one on the device."""
        if bind.kind == "param":  # (a call in a module's method passes what lives on the module's device)
            passed = self._passed_tensors(bind)
            return bool(passed) and all(self.on_device(value, site, _MAX_DEPTH - 1) or
                                        self.in_module_method(site) and self.on_device(value, site)
                                        for site, value in passed)
        if bind.value is None:
            return False
        if bind.kind == "for":
            source = element_source(bind.node.target, bind.value, name)  # type: ignore[attr-defined]
            return source is not None and self.on_device(source, bind.node, depth + 1)
        if bind.kind == "aug":  # `x += y`: on the device if either was
            return self.on_device(bind.value, bind.node, depth + 1) or \
                self.on_device(cst.Name(name), bind.node, depth + 1)
        gathered = self._gathered(bind, name) or _unpacked(bind, name) if bind.kind == "assign" else None
        if gathered is not None:  # gathered across processes on the device
            return self.on_device(gathered, bind.node, depth + 1)
        operand = self._sorted_operand(bind.value) if bind.kind == "assign" and not bind.whole else None
        if operand is not None:  # `sorted_y, order = torch.sort(y)`: both where `y` is
            return self.on_device(operand, bind.node, depth + 1)
        return bind.kind == "assign" and bind.whole and self.on_device(bind.value, bind.node, depth + 1)

    def _sorted_operand(self, value: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
        """The tensor a call returning (values, indices) works on: `y` of `torch.sort(y)`,
        `y.topk(k)`, `torch.max(y, dim=1)`; None for any other value."""
        if type(value) is not cst.Call or type(value.func) is not cst.Attribute or \
                value.func.attr.value not in VALUES_INDICES:  # type: ignore[attr-defined]
            return None
        qualified = self.names.call_name(value)  # type: ignore[arg-type]
        if qualified is None:
            return value.func.value  # type: ignore[attr-defined]
        given = value.args[0] if value.args else None  # type: ignore[attr-defined]
        return given.value if qualified.startswith("torch.") and given is not None and given.keyword is None else None

    def _passed_tensors(self, bind: "Binding") -> List[Tuple[cst.Call, cst.BaseExpression]]:
        """What every call of its function in this module passes for a parameter declared a
        tensor (`_annotated_tensor`), each with its call; empty when one passes nothing (its
        default) or the parameter is not declared one."""
        passed = self.scopes.arguments_for(bind.node) if self._annotated_tensor(bind.node) else None  # type: ignore[arg-type]
        if not passed or any(value is None for _, value in passed):
            return []
        return passed  # type: ignore[return-value]

    def _annotated_tensor(self, param: cst.CSTNode) -> bool:
        """A parameter declared a tensor by its author (`prev_input_ids: Tensor`, `x:
        torch.LongTensor`). In a module's method, where every tensor is taken for the device's,
        not one whose name says it holds lengths or sizes (`lengths: Tensor`, which
        `pack_padded_sequence` takes on the host)."""
        if type(param) is not cst.Param or \
                self.in_module_method(param) and _holds_sizes(param.name.value):  # type: ignore[attr-defined]
            return False
        annotation = param.annotation  # type: ignore[attr-defined]
        if annotation is None:
            return False
        declared = self._optional_of(annotation.annotation)
        if declared is not annotation.annotation and not self.in_module_method(param):
            return False  # an optional argument of a helper: often never passed (`indices=None`)
        qualified = self.names.qualified_name(declared) if declared is not None else None
        return qualified is not None and qualified.startswith("torch.") and qualified.endswith("Tensor")

    def _optional_of(self, annotation: cst.BaseExpression) -> cst.BaseExpression:
        """The type an annotation declares where it may also be None: `torch.Tensor` of
        `Optional[torch.Tensor]` or `torch.Tensor | None` (a parameter that defaults to None)."""
        if type(annotation) is cst.Subscript and len(annotation.slice) == 1 and \
                type(annotation.slice[0].slice) is cst.Index and \
                self.names.qualified_name(annotation.value) == "typing.Optional":  # type: ignore[attr-defined]
            return annotation.slice[0].slice.value  # type: ignore[attr-defined]
        if type(annotation) is cst.BinaryOperation and type(annotation.operator) is cst.BitOr:  # type: ignore[attr-defined]
            left, right = annotation.left, annotation.right  # type: ignore[attr-defined]
            if type(right) is cst.Name and right.value == "None":
                return left
            if type(left) is cst.Name and left.value == "None":
                return right
        return annotation

    def _gathered(self, bind: "Binding", name: str) -> Optional[cst.BaseExpression]:
        """What `name` holds gathered from the processes by an accelerator (`preds, refs =
        accelerator.gather_for_metrics((preds, batch["labels"]))`: `preds` at 0), which gives
        tensors shaped like the ones it is handed, on the device."""
        value = bind.value
        if type(value) is not cst.Call or type(value.func) is not cst.Attribute or \
                value.func.attr.value not in _GATHERS or not value.args or value.args[0].keyword is not None or \
                not _ACCELERATOR.search(dotted_name(value.func.value) or ""):  # type: ignore[attr-defined]
            return None
        handed = value.args[0].value  # type: ignore[attr-defined]
        if bind.whole:
            return handed
        position = unpacked_position(bind.node, name)
        if position is None or type(handed) not in (cst.Tuple, cst.List) or \
                len(handed.elements) <= position:  # type: ignore[attr-defined]
            return None
        return handed.elements[position].value  # type: ignore[attr-defined]

    def implicit(self, node: cst.CSTNode) -> Optional[str]:
        """The host-device sync that `node` makes without calling for one: a device tensor as a
        slice bound (`x[:n]`, "slice"), a boolean mask of device tensors as an index (`x[x > 0]`:
        the result's size is read from the device, "mask"), a device tensor as an `if` or
        `while` condition, or under a `not` elsewhere (`any(not g.isfinite().all() for g in
        grads)`: "condition"), Python's `max`/`min`/`sum` over a device tensor, which reads
        it element by element ("iterate"), a device value given as a size, bound or count
        (`torch.randn((n,))`, `x.topk(k)`: "size")."""
        if type(node) is cst.Subscript:
            for element in node.slice:  # type: ignore[attr-defined]
                index = element.slice
                if type(index) is cst.Slice:
                    if any(bound is not None and self._device_tensor(bound, node)
                           for bound in (index.lower, index.upper, index.step)):
                        return "slice"
                elif self._mask(index.value, node):
                    return "mask"
            return None
        if type(node) is cst.If or type(node) is cst.While:
            return "condition" if self._condition_on_device(node.test, node) else None  # type: ignore[attr-defined]
        if type(node) is cst.UnaryOperation and type(node.operator) is cst.Not and not self._in_test(node):  # type: ignore[attr-defined]
            return "condition" if self._device_tensor(node.expression, node) else None  # type: ignore[attr-defined]
        if type(node) is cst.Call and self._sized_by_data(node):  # type: ignore[arg-type]
            return "mask"
        if type(node) is cst.Call and self._device_sizes(node):  # type: ignore[arg-type]
            return "size"
        if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value in _READS_ELEMENTS and \
                len(node.args) == 1 and self.names.qualified_name(node.func) is None and \
                self._device_tensor(node.args[0].value, node):  # type: ignore[attr-defined]
            return "iterate"
        return None

    def _in_test(self, node: cst.CSTNode) -> bool:
        """`node` is part of an `if` or `while` test (through `not`, `and`, `or`): the test's
        own sync, found there."""
        child = node
        for ancestor in self.tree.ancestors(node):
            kind = type(ancestor)
            if (kind is cst.If or kind is cst.While) and ancestor.test is child:  # type: ignore[attr-defined]
                return True
            if kind is not cst.UnaryOperation and kind is not cst.BooleanOperation:
                return False
            child = ancestor
        return False

    def truth_tested(self, call: cst.Call) -> Optional[cst.BaseExpression]:
        """The device tensor that Python's `any(...)` or `all(...)` tests for truth once per
        element of the comprehension it is given (`any(torch.isnan(p.grad).any() for p in
        params)`: one wait per parameter); None otherwise."""
        func = call.func
        if type(func) is not cst.Name or func.value not in ("any", "all") or len(call.args) != 1 or \
                call.args[0].star or call.args[0].keyword is not None or \
                self.names.qualified_name(func) is not None or self.scopes.bindings_seen(func.value, call):  # type: ignore[attr-defined]
            return None  # (the builtin, not a function of the module's own named so)
        given = call.args[0].value
        if type(given) not in (cst.GeneratorExp, cst.ListComp) or given.for_in.inner_for_in is not None:  # type: ignore[attr-defined]
            return None
        element = given.elt  # type: ignore[attr-defined]
        if type(element) is cst.UnaryOperation and type(element.operator) is cst.Not:  # type: ignore[attr-defined]
            return None  # (the `not`'s own wait: `implicit`)
        return element if self._device_tensor(element, element) else None

    def _mask(self, index: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """A boolean mask of device tensors: a comparison, `&`, `|` or `~` of them, a view or a
        slice of one (`mask[..., k].contiguous().view(-1)`), or a name bound to one (`mask =
        (x > 0) & keep`, then `x[mask]`)."""
        if type(index) is cst.Comparison:
            return self._device_tensor(index.left, at)
        if type(index) is cst.Call and type(index.func) is cst.Attribute and \
                index.func.attr.value in _MASK_VIEWS:  # type: ignore[attr-defined]
            return self._mask(index.func.value, at, depth)  # type: ignore[attr-defined]
        if type(index) is cst.Subscript:  # any part of a boolean tensor is boolean
            return self._mask(index.value, at, depth)  # type: ignore[attr-defined]
        if type(index) is cst.BinaryOperation and type(index.operator) in (cst.BitAnd, cst.BitOr):
            return self._mask(index.left, at, depth) or self._mask(index.right, at, depth)
        if type(index) is cst.UnaryOperation and type(index.operator) is cst.BitInvert:
            return self._mask(index.expression, at, depth)
        if type(index) is cst.Name and depth < 3:
            binds = self.scopes.in_effect(index.value, at)
            return bool(binds) and all(b.kind == "assign" and b.whole and b.value is not None
                                       and self._mask(b.value, b.node, depth + 1) for b in binds)
        return False

    def _device_sizes(self, call: cst.Call) -> List[cst.BaseExpression]:
        """The GPU values `call` takes as sizes, bounds or counts, which torch reads on the host
        (`torch.randn((seq_len,), device=d)`, `scores.topk(num_keep)`, where `seq_len` and
        `num_keep` are elements of a GPU tensor). Asked of every call a loop makes: a method of
        another name is passed over before its name is resolved."""
        func = call.func
        if type(func) is cst.Attribute and func.attr.value not in _SIZE_CALLEES:
            return []
        qualified = self.names.call_name(call)
        if qualified in _SIZED_FACTORIES:
            operands = [a.value for a in call.args if a.keyword is None and not a.star]
        elif qualified is None and type(func) is cst.Attribute and func.attr.value in _SIZE_METHODS:
            operands = [a.value for a in call.args if not a.star and (a.keyword is None or a.keyword.value == "k")]
            if not operands or not self.is_tensor(func.value, call):
                return []
        else:
            return []
        sizes = [e.value for o in operands if type(o) in (cst.Tuple, cst.List) for e in o.elements]  # type: ignore[attr-defined]
        sizes += [o for o in operands if type(o) not in (cst.Tuple, cst.List)]
        return [size for size in sizes if type(size) in (cst.Name, cst.Subscript) and self._device_tensor(size, call)]

    def _sized_by_data(self, call: cst.Call) -> bool:
        """A call whose result's size the host reads from the device (`torch.where(cond)`,
        `x.nonzero()`, `torch.masked_select`), on device tensors."""
        qualified = self.names.call_name(call) or ""
        func = call.func
        if qualified in _SIZED_BY_DATA or qualified == "torch.where" and len(call.args) == 1:
            return bool(call.args) and (self._device_tensor(call.args[0].value, call) or self._mask(call.args[0].value, call))
        if type(func) is cst.Attribute and func.attr.value in ("nonzero", "masked_select", "unique") and \
                not qualified:
            return self._device_tensor(func.value, call)
        return False

    def condition_reads_tensor(self, test: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Testing `test` for truth reads a tensor's value on the host, wherever the tensor is
        (on a GPU, a sync)."""
        return self._condition_on_device(test, at, self.is_tensor)

    def _condition_on_device(self, test: cst.BaseExpression, at: cst.CSTNode,
                             read: Optional[Callable[[cst.BaseExpression, cst.CSTNode], bool]] = None) -> bool:
        read = read or self._device_tensor
        if type(test) is cst.BooleanOperation:
            return self._condition_on_device(test.left, at, read) or self._condition_on_device(test.right, at, read)
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            return self._condition_on_device(test.expression, at, read)
        if type(test) is cst.Comparison:
            if any(type(c.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn) for c in test.comparisons):
                return False
            return any(read(part, at) for part in (test.left, *(c.comparator for c in test.comparisons)))
        return read(test, at)

    def _device_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        return self.is_tensor(expr, at) and self.on_device(expr, at)

    def _returns_tensors(self, func: Optional[cst.FunctionDef], position: Optional[int], depth: int) -> bool:
        """A function of this module whose every `return` gives a tensor (`position` None), or
        a tuple with a tensor at `position` (`error, accuracy = fast_adapt(...)`: `error` at 0)."""
        if func is None or depth > _MAX_DEPTH:
            return False
        returned = self.tree.scope_nodes(func.body, cst.Return)
        if not returned:
            return False
        for node in returned:
            value = node.value  # type: ignore[attr-defined]
            if position is not None:
                if not type(value) is cst.Tuple or len(value.elements) <= position:
                    return False
                value = value.elements[position].value
            if value is None or not self.is_tensor(value, node, depth):
                return False
        return True

    def _comprehension_target(self, name: str, at: cst.CSTNode) -> Optional[cst.BaseExpression]:
        """What the `for` of the comprehension around `at` that binds `name` takes it from
        (`element_source`: its iterable, or the one an unpacked element comes from)."""
        clause = self.scopes.comprehension_clause(name, at)
        return element_source(clause.target, clause.iter, name) if clause is not None else None

    def _iterates_tensors(self, iterable: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """Each element of `iterable` is a tensor: the elements of a tensor or of `.parameters()`,
        or of anything whose elements' gradients the loop reads."""
        if type(iterable) is cst.Call:
            func = iterable.func
            if type(func) is cst.Attribute and func.attr.value in ("parameters", "buffers"):
                return True
            if type(func) is cst.Name and func.value == "zip":
                return all(self._iterates_tensors(a.value, at, depth + 1) for a in iterable.args)
        return self.is_tensor(iterable, at, depth + 1) or self._reads_grads_of_elements(iterable)

    def in_module_method(self, at: cst.CSTNode) -> bool:
        """`at` runs in a method of an `nn.Module` class: its tensors are on the module's device
        unless known to be on the host."""
        func = self.tree.function_of(at)
        klass = self.tree.class_of(func) if func is not None else None
        return klass is not None and klass.name.value in self.roles.receivers.module_classes

    def on_device(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """The tensor lives where the model runs (see the module docstring)."""
        if depth == 0 and self.in_module_method(at):
            return self.is_tensor(expr, at) and not self.on_host(expr, at)
        if depth > _MAX_DEPTH:
            return False
        if type(expr) is cst.Name:
            key = (expr.value, id(at))
            known = self._placed.known(key)
            if known is None:
                binds = self._bindings_at(expr.value, at)
                known = self._placed.decided(key, bool(binds) and all(  # (names followed: counted in _Bindings)
                    self._binds_device_value(b, expr.value, 0) for b in binds))
            return known
        if type(expr) is cst.Attribute and expr.attr.value == "grad":  # where its tensor is, else where
            return self.on_device(expr.value, at, depth + 1) or \
                self.is_tensor(expr, at) and not self.on_host(expr.value, at)  # backward ran: the device
        if type(expr) is cst.Attribute and (expr.attr.value in ("data", "T", "mT") or
                                                type(expr.value) is cst.Name and expr.attr.value in _OUTPUT_FIELDS):
            return self.on_device(expr.value, at, depth + 1)
        if type(expr) is cst.Subscript:
            stored = self._stored_item(expr, at)
            return self.on_device(stored if stored is not None else expr.value, at, depth + 1)
        if type(expr) is cst.BinaryOperation:
            return self.on_device(expr.left, at, depth + 1) or self.on_device(expr.right, at, depth + 1)
        compared = _compared(expr)
        if compared is not None:
            return any(self.on_device(side, at, depth + 1) for side in compared)
        if not type(expr) is cst.Call or _to_host(expr):
            return False
        if self.purity.mover(expr) is not None or self.roles.is_forward(expr) or self.roles.is_loss(expr) or \
                self._from_project(expr):
            return True
        device = next((a.value for a in expr.args if a.keyword is not None and a.keyword.value == "device"), None)
        if device is not None and self.purity.is_device(device):
            return True
        if not self._call_is_tensor(expr, at, depth):
            return False
        func = expr.func
        operands = [a.value for a in expr.args if a.keyword is None]
        if type(func) is cst.Attribute and self.names.call_name(expr) is None:
            operands.append(func.value)
        return any(self.on_device(operand, at, depth + 1) for operand in operands)

    def on_host(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """The tensor is on the host: a copy there (`scores = logits.cpu()`), made there (a factory
        given no device), taken from one by indexing, iterating or its own methods (`for rank in
        scores.argsort(-1):`), or computed by torch from such tensors alone: reading it waits
        for nothing."""
        if depth > _MAX_DEPTH:
            return False
        kind = type(expr)
        if kind is cst.Name:
            key = (expr.value, id(at))  # type: ignore[attr-defined]
            known = self._copied.known(key)
            if known is None:
                binds = self._bindings_at(expr.value, at)  # type: ignore[attr-defined]
                known = self._copied.decided(key, bool(binds) and all(
                    self._binds_host_copy(b, expr.value) for b in binds))  # type: ignore[attr-defined]
            return known
        if kind is cst.Subscript:
            return self.on_host(expr.value, at, depth + 1)  # type: ignore[attr-defined]
        if kind is cst.ListComp:  # a list of host copies (`[p.detach().cpu() for p in params]`)
            return self.on_host(expr.elt, expr.elt, depth + 1)  # type: ignore[attr-defined]
        if kind is cst.BinaryOperation:
            return self._host_operands([expr.left, expr.right], at, depth)  # type: ignore[attr-defined]
        if kind is not cst.Call:
            return False
        if _to_host(expr):
            return True
        func = expr.func  # type: ignore[attr-defined]
        qualified = self.names.call_name(expr)  # type: ignore[arg-type]
        if qualified is None:
            if type(func) is not cst.Attribute or func.attr.value == "cuda" or \
                    self.purity.mover(expr) is not None:  # type: ignore[arg-type]
                return False  # (a move to the device)
            if func.attr.value in ("to", "type_as"):
                where = [a.value for a in expr.args if a.keyword is None or a.keyword.value == "device"]  # type: ignore[attr-defined]
                if where and not (func.attr.value == "to" and (self.names.qualified_name(where[0]) or "").startswith("torch.")):
                    return self.on_host(where[0], at, depth + 1)  # (to another tensor's device), not to a dtype
            return self.on_host(func.value, at, depth + 1)  # type: ignore[arg-type]
        if self.purity.factory(expr) is not None:  # type: ignore[arg-type]
            if argument(expr, "device") is not None:
                return False
            if qualified.endswith("_like"):  # made where its model tensor lives
                model = argument(expr, "input", 0)  # type: ignore[arg-type]
                return model is not None and self.on_host(model.value, at, depth + 1)
            return True  # (made without a device: on the host)
        return bool(_TENSOR_FUNCTION.match(qualified)) and \
            self._host_operands([a.value for a in expr.args if a.keyword is None], at, depth)  # type: ignore[attr-defined]

    def _host_operands(self, operands: List[cst.BaseExpression], at: cst.CSTNode, depth: int) -> bool:
        """Every operand known to be a tensor is on the host, and one is: torch computes the
        result there (`torch.nn.functional.conv2d(mask, kernel)`, `n - target_len`)."""
        tensors = [operand for operand in operands if self.is_tensor(operand, at)]
        return bool(tensors) and all(self.on_host(operand, at, depth + 1) for operand in tensors)

    def _binds_host_copy(self, bind: "Binding", name: str) -> bool:
        """`name = <a host copy>`, or `for name in <a host copy>` (through `zip`/`enumerate`), or
        `name += <a number or a host tensor>` while on the host, or a parameter declared a tensor
        that every call of its function in this module passes one on the host."""
        if bind.kind == "param":
            passed = self._passed_tensors(bind)
            return bool(passed) and all(self.on_host(value, site, _MAX_DEPTH - 1) for site, value in passed)
        if bind.value is None:
            return False
        if bind.kind == "aug":
            return (not self.is_tensor(bind.value, bind.node) or self.on_host(bind.value, bind.node)) and \
                self.on_host(cst.Name(name), bind.node)
        if bind.kind == "for":
            source = element_source(bind.node.target, bind.value, name)  # type: ignore[attr-defined]
            return source is not None and self.on_host(source, bind.node)
        return bind.kind == "assign" and bind.whole and self.on_host(bind.value, bind.node)

    def loop_syncs(self, loop: cst.CSTNode, besides: cst.CSTNode, moves: bool = True, calls: bool = True,
                   masks: bool = True) -> bool:
        """`loop` already makes the host wait for the device on every iteration, besides the
        wait `besides` (in its body or the helpers it calls): a sync no call asks for (a GPU
        value as an `if` condition, and with `masks` a boolean mask: `implicit`); with `calls`, a
        sync call (`print(loss.item())`, `next_word.item()` in decoding); with `moves`, a move to
        the device (`batch.to(device)`: a copy from pageable host memory waits). Without
        `masks`, the masks of a loop do not excuse each other: one fix (a loss that ignores the
        masked positions) removes them all."""
        found = self._loop_syncs.get(id(loop))
        if found is None:
            found = [(node, self._waits(node)) for node in self.tree.walk_scope(loop.body)]  # type: ignore[attr-defined]
            found += [(site, self._waits(call)) for call, site in self.roles.calls.calls_in(loop) if call is not site]
            found = [(node, how) for node, how in found if how is not None]
            self._loop_syncs[id(loop)] = found
        wanted = {"implicit", *(("move",) if moves else ()), *(("call",) if calls else ())}
        return any(how in wanted and node is not besides
                   and (masks or how != "implicit" or self.implicit(node) != "mask")
                   and (how == "implicit" or not self.tree.contains(besides, node))  # (`x[mask].item()`: two waits)
                   and getattr(node, "test", None) is not besides  # (an `if` whose condition is `besides`)
                   and not self._reads_elements(node, loop)
                   for node, how in found)

    def waited_before(self, node: cst.CSTNode) -> bool:
        """A statement before `node`'s, in the same block and the same iteration, makes the host
        wait for the device whenever it runs (`n = torch.max(lengths).item()`, then
        `torch.arange(n).to(lengths.device)`), and nothing between them queues device work (only
        sizes are read: `bsz = lengths.size(0)`): the queue is drained there, so a wait at `node`
        finds nothing queued to wait for. Not a wait under a condition in that statement
        (`x.item() if training else 0`, `a and b.item()`), in a lambda or comprehension, or of
        a tensor known to be on the host."""
        statement = self.tree.statement_around(node)
        block = self.tree.parent(statement) if statement is not None else None
        if type(block) is not cst.IndentedBlock:
            return False
        body = list(block.body)  # type: ignore[attr-defined]
        for previous in reversed(body[:body.index(statement)]):
            if type(previous) is not cst.SimpleStatementLine:
                return False
            if self._always_waits(previous):
                return True
            if not _reads_sizes_only(previous):
                return False
        return False

    def _always_waits(self, statement: cst.SimpleStatementLine) -> bool:
        """The statement makes the host wait for the device whenever it runs."""
        pending: List[cst.CSTNode] = list(statement.body)
        while pending:
            current = pending.pop()
            kind = type(current)
            if kind is cst.IfExp:
                pending.append(current.test)  # type: ignore[attr-defined]
                continue
            if kind is cst.BooleanOperation:
                pending.append(current.left)  # type: ignore[attr-defined]
                continue
            if kind in OWN_SCOPE_EXPRESSIONS:  # a lambda's body, a comprehension's: they may not run
                continue
            if self._waits(current) in ("call", "implicit") and not self._waits_on_host(current):
                return True
            pending.extend(children(current))
        return False

    def _waits_on_host(self, wait: cst.CSTNode) -> bool:
        """`torch.tensor(sizes).max().item()`: the value waited on is on the host."""
        func = getattr(wait, "func", None)
        return type(func) is cst.Attribute and self.on_host(func.value, wait)  # type: ignore[attr-defined]

    def _reads_elements(self, wait: cst.CSTNode, loop: cst.CSTNode) -> bool:
        """`wait` reads on the host one element of a device tensor per iteration of `loop`:
        one read of the whole tensor before the loop (`.tolist()`) removes it with the others,
        so it is not a wait the iteration pays anyway."""
        if type(loop) is not cst.For:
            return False
        if type(wait) is cst.Subscript:  # `out[j, :n]`: its bounds
            read = [bound for element in wait.slice if type(element.slice) is cst.Slice  # type: ignore[attr-defined]
                    for bound in (element.slice.lower, element.slice.upper, element.slice.step) if bound is not None]
        elif type(wait) is cst.If:
            read = [wait.test]  # type: ignore[attr-defined]
        elif type(wait) is cst.Call:  # `torch.randn((n,))`: its sizes; `x[j].item()`: what it reads
            read = self._device_sizes(wait) or (  # type: ignore[arg-type]
                [wait.func.value] if type(wait.func) is cst.Attribute else [])  # type: ignore[attr-defined]
        else:
            return False
        indices = target_names(loop.target)  # type: ignore[attr-defined]
        return bool(read) and all(self._element_of(value, indices, loop, 0) for value in read)

    def _element_of(self, expr: cst.BaseExpression, indices: Set[str], loop: cst.CSTNode, depth: int) -> bool:
        """`expr` is an element of a tensor taken by the loop's own variable (`done[j, i]`), a name
        the loop's body binds to one (`prev = tokens[j, step]`), or arithmetic, a comparison or a
        test of those."""
        if depth > _MAX_DEPTH:
            return False
        kind = type(expr)
        if kind is cst.Subscript:  # indexed by the loop's variable, or by a name made from it (`idx // beam`)
            return any(type(node) is cst.Name and (node.value in indices or  # type: ignore[attr-defined]
                                                   self._element_of(node, indices, loop, depth + 1))  # type: ignore[arg-type]
                       for element in expr.slice for node in walk(element))  # type: ignore[attr-defined]
        if kind is cst.Name:
            if expr.value in indices:  # type: ignore[attr-defined]
                return True  # (`for t in ids: if t == unk:`: each element read in turn)
            binds = self.scopes.in_effect(expr.value, expr)  # type: ignore[attr-defined]
            return bool(binds) and all(
                b.kind == "assign" and b.whole and b.value is not None and self.tree.contains(loop.body, b.node)  # type: ignore[attr-defined]
                and self._element_of(b.value, indices, loop, depth + 1) for b in binds)
        if kind is cst.BinaryOperation or kind is cst.BooleanOperation:
            return self._element_of(expr.left, indices, loop, depth + 1) or \
                self._element_of(expr.right, indices, loop, depth + 1)  # type: ignore[attr-defined]
        if kind is cst.Comparison:
            return self._element_of(expr.left, indices, loop, depth + 1) or any(  # type: ignore[attr-defined]
                self._element_of(c.comparator, indices, loop, depth + 1) for c in expr.comparisons)  # type: ignore[attr-defined]
        if kind is cst.UnaryOperation:
            return self._element_of(expr.expression, indices, loop, depth + 1)  # type: ignore[attr-defined]
        return False

    def _waits(self, node: cst.CSTNode) -> Optional[str]:
        """How `node` makes the host wait for the device: "call" (`x.item()`), "implicit" (see
        `implicit`), "move" (a copy to the device); None when it does not."""
        kind = type(node)
        if kind is cst.Call:
            func = node.func  # type: ignore[attr-defined]
            if self.implicit(node) is not None:
                return "implicit"
            if may_sync(node) and self.sync(node) is not None:  # type: ignore[arg-type]
                return "call"
            if self.purity.mover(node) is not None or type(func) is cst.Attribute and func.attr.value in _COPIES_IN:  # type: ignore[arg-type]
                return "move"
            return None
        if (kind is cst.Subscript or kind is cst.If) and self.implicit(node) is not None:
            return "implicit"
        return None

    # -- repetition --------------------------------------------------------------------------
    def repeats_over(self, node: cst.CSTNode) -> Optional[cst.BaseExpression]:
        """The iterable of the innermost `for` loop or comprehension around `node` in its function."""
        child = node
        for ancestor in self.tree.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
                return None
            if type(ancestor) is cst.While and child is ancestor.body:
                return None
            if type(ancestor) is cst.For and child is ancestor.body:
                return ancestor.iter
            if type(ancestor) in (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp) and \
                    not self.tree.contains(ancestor.for_in.iter, node):
                return ancestor.for_in.iter
            child = ancestor
        return None

    def many(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Iterating `iterable` runs many times (see the module docstring)."""
        if type(iterable) is cst.NamedExpr:  # `for _ in (pbar := trange(n)):`
            return self.many(iterable.value, at)  # type: ignore[attr-defined]
        if type(iterable) is cst.Call:
            func = iterable.func
            qualified = self.names.qualified_name(func)
            if qualified in _PROGRESS_RANGES or qualified is None and type(func) is cst.Name and func.value == "range":
                if any(a.keyword is not None for a in iterable.args):  # `trange(n, desc=...)`: no bound
                    iterable = iterable.with_changes(args=[a for a in iterable.args if a.keyword is None])
                span = range_span(iterable)
                return span >= FEW_ITERATIONS if span is not None else bool(iterable.args)
            if qualified in _PROGRESS_BARS and iterable.args:  # `tqdm(loader)`: what it wraps
                return self.many(iterable.args[0].value, at)
            if type(func) is cst.Attribute and func.attr.value in _FEW_METHODS:
                return False
            if type(func) is cst.Name and qualified is None:
                if func.value in ("zip", "enumerate", "reversed"):
                    return bool(iterable.args) and any(self.many(a.value, at) for a in iterable.args
                                                       if a.keyword is None)
        if type(iterable) in (cst.Tuple, cst.List, cst.Set, cst.Dict):
            return False
        return self.is_tensor(iterable, at) or self.over_parameters(iterable)

    def over_parameters(self, iterable: cst.BaseExpression) -> bool:
        """Iterating `iterable` walks a model's parameters (`model.named_parameters()`, or a list
        whose elements' gradients the loop reads): nothing in such a loop needs its values on
        the host one by one (a foreach or stacked kernel does the work of every wait in it)."""
        func = iterable.func if type(iterable) is cst.Call else None  # type: ignore[attr-defined]
        if type(func) is cst.Attribute and func.attr.value in _PARAMETER_ITERABLES:  # type: ignore[attr-defined]
            return True
        return self._reads_grads_of_elements(iterable)

    def _reads_grads_of_elements(self, iterable: cst.BaseExpression) -> bool:
        """The loop over `iterable` reads the gradient of each element (`for p in parameters:
        p.grad.norm()`): what it walks are a model's parameters, however they were handed over
        (a grad-norm helper's `parameters` argument; also a comprehension's: `any(not
        p.grad.isfinite().all() for p in self.model_params)`)."""
        loop = self.tree.parent(iterable)
        if type(loop) is cst.For and loop.iter is iterable:  # type: ignore[union-attr]
            body = loop.body  # type: ignore[union-attr]
        elif type(loop) is cst.CompFor and loop.iter is iterable and loop.inner_for_in is None and \
                type(self.tree.parent(loop)) in (cst.ListComp, cst.SetComp, cst.GeneratorExp):  # type: ignore[union-attr]
            body = self.tree.parent(loop).elt  # type: ignore[union-attr]
        else:
            return False
        names = target_names(loop.target)  # type: ignore[union-attr]
        return any(type(read.value) is cst.Name and read.value.value in names  # type: ignore[attr-defined]
                   for read in self.roles.grad_reads(body))
