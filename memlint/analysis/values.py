"""Values: which carry an autograd graph, and where they go.

Asked as `facts.values`:

- `carries_grad(expr, at)`: whether `expr`, evaluated at `at`, holds an autograd graph: it comes
  from a forward or a loss computed in grad mode (memlint.analysis.regions), through the
  bindings in effect (memlint.analysis.scopes), arithmetic, indexing, `.cpu()` / `.to()` (which
  keep the graph) or a function of this module that returns one (`returns_grad`), or a backward
  of its scope backwards it as bound (`loss = helper(batch)`, then `loss.backward()`), and no
  `.item()`, `float()`, `.detach()`, `.tolist()`, `.numpy()` or `.data` ended it (nor is it an
  element of a call's result unpacked into a name that counts: `loss, n_tokens = model(batch)`).
  Unknown calls carry nothing: the answer leans towards not reporting. `requires_grad_off`: the
  file freezes parameters somewhere (then a forward alone is not taken to record a graph);
  `in_a_quiet_mode(call)`: a model called in a mode its class computes without grad
  (`model(data, mode="inference")`, Regions.quiet_modes, read here or through the project);
- where values go: `derived_names(scope, names)` (names bound from them, `dataflow.derived` over
  the scope's bindings), `reaches_backward(scope, names)` (backwarded there or handed to a helper
  that backwards), `leaves_scope(scope, names)` (returned, yielded, or stored into an attribute
  or subscript by an assignment), `reset_in_iteration(loop, name, at)` (surely rebound in the
  iteration before `at`), `reset_each_step(at, name)` (rebound before `at` within one optimizer
  step: in the loop or function that steps), `hands_graph_away(loop)` (a graph passed to a call
  that may backward it, outside no_grad), `kept_from_backward(scope, names)` (no path to a
  backward at all: read and dropped), `handed_to_backward(scope, names)`,
  `backwarded_in(value, loop)`, `attribute_backwarded(dotted)`;
- device tensors: `holds_output(expr, at)` (a model's output on its device, whatever the grad
  mode), `kept_arguments(call, graph)` (what a method of this module appends to its instance;
  `accumulated_arguments(call)`: what it adds into a running sum it keeps, `self.sum += val`),
  `use_after_loop(loop, name)` (what a loop collected is not used on the device afterwards),
  `class_predictions_from(loop, name)` (a classifier's scores: one class per
  example taken and compared with labels);
- `constant_int(expr)`: an integer the code spells in literals (or names bound once to them);
- backwards: `origins(backward)` (the statements and helpers the backwarded value is computed
  from), `accumulates_grad(backward)` (it adds into `.grad`, of something that surely is a loss).

`leaves_scope` is narrower than the dataflow sinks of memlint.analysis.dataflow on purpose:
an append into a container or an augmented store is not counted as leaving.

Asked by: phase (samples returned with their graph), MEM201 and MEM202 (all of the flow
questions; MEM202 the device questions too), MEM203 (`reaches_backward`, `hands_graph_away`,
`kept_from_backward`, `requires_grad_off`), MEM301, MEM302, MEM401, MEM404 (`accumulates_grad`), MEM401 (`origins`,
`returns_grad`), MEM101 (`constant_int`), MEM204 (`class_predictions_from`).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.calls import CallGraph
from memlint.analysis.dataflow import (SCALAR_ATTRIBUTES, SCALAR_FUNCTIONS, SCALAR_METHODS, VALUES_INDICES, Derivation,
                                       leaf_targets, sources_of, target_names, unpacked_position)
from memlint.analysis.frameworks import is_torch_library
from memlint.analysis.memo import per_node
from memlint.analysis.often import TRAINING_METHOD
from memlint.analysis.project import ProjectView
from memlint.analysis.regions import Regions
from memlint.analysis.roles import AUTOGRAD_BACKWARD, Backward, Roles
from memlint.analysis.scopes import MOVES_ITSELF, Binding, Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import (Scope, TreeIndex, argument, children, constructed, dotted_name, expression_nodes, holder,
                                   last_part, literal_bool, own_method, root_name, string_key, walk_scope)

# a keyword choosing a mode for inference, as `Values.in_a_quiet_mode` spells it (`mode=inference`)
_INFERENCE_MODE = re.compile(r"^(mode|phase|stage)=(inference|infer|test|testing|eval|evaluation|predict|"
                             r"prediction|sample|sampling|generate|generation|val|valid|validation)$")
_APPENDING = frozenset({"append", "extend", "insert", "appendleft"})
_NAMEDTUPLE = frozenset({"collections.namedtuple", "typing.NamedTuple"})
_TO_HOST = frozenset({"cpu", "numpy", "tolist", "item"})
# What hands back the model it is given, moved, cast or wrapped to run on several devices.
_MODEL_MOVES = frozenset({"to", "cuda", "half", "bfloat16", "float", "train", "eval"})
_DATA_PARALLEL = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                            "torch.nn.parallel.DistributedDataParallel"})
# Return annotations that hold no tensor (`-> List[int]`, `-> Optional[str]`): integers, text and
# flags, and the containers that hold only them (by the container's last name: `typing.List`,
# `t.Dict`, `collections.abc.Sequence`). Not `float`: a loss helper annotated `-> float` often
# returns the loss tensor itself.
_PLAIN_TYPES = frozenset({"int", "str", "bool", "bytes", "None"})
_CONTAINER_TYPES = frozenset({"List", "list", "Tuple", "tuple", "Dict", "dict", "Set", "set", "FrozenSet",
                              "frozenset", "Optional", "Union", "Sequence", "Iterable", "Iterator", "Mapping"})
# A helper named for running the model (`_model_call`, `_model_forward`, `run_model`, `forward_model`).
_MODEL_CALL_HELPER = re.compile(r"^_*(model_(call|forward|run)|(call|forward|run)_model)$")
# A model's own computation, which its class defines: other classes of a module that define a
# method by that name say nothing of a model whose class the code does not name (unlike a
# project's convention for a helper such as PyG's `@torch.no_grad() def inference`).
_OWN_COMPUTATION = re.compile(r"^(forward\w*|encode\w*|decode\w*|embed\w*|extract_features?)$")
_CLASS_PICKS = frozenset({"argmax", "max", "topk"})
# Methods whose result carries no autograd graph.
DETACHING_METHODS = frozenset(SCALAR_METHODS | {
    "detach", "detach_", "numpy", "argmax", "argmin", "eq", "ne", "gt", "lt", "ge", "le",
    "isnan", "isinf", "isfinite", "nonzero", "long", "int", "bool", "short", "byte", "char",
    "logical_and", "logical_or", "logical_not", "logical_xor", "sign", "count_nonzero",
    "zero_grad", "eval", "train", "parameters", "named_parameters", "state_dict", "generate",
    "append", "extend", "insert", "update", "keys", "values", "items", "requires_grad_",
    "argsort", "argwhere", "multinomial", "unique", "bincount", "histc", "bucketize", "searchsorted",
    "floor_divide", "is_nonzero", "equal", "allclose", "isclose", "any", "all",
    "index",  # a list's position of an item (a tensor has no `index` method)
    "new_tensor", "new_zeros", "new_ones", "new_full", "new_empty",  # fresh tensors, shaped or typed alike
})
DETACHING_ATTRIBUTES = frozenset(SCALAR_ATTRIBUTES | {"data", "grad", "indices"})
# integer and boolean tensor types: a cast to one ends the graph (`out.to(torch.long)`)
INTEGER_DTYPES = frozenset({"torch.long", "torch.int", "torch.int64", "torch.int32", "torch.int16", "torch.int8",
                            "torch.uint8", "torch.bool", "torch.short", "torch.LongTensor", "torch.IntTensor",
                            "torch.BoolTensor", "torch.cuda.LongTensor", "torch.cuda.IntTensor"})
# A model's output field named as a metric that counts or compares (`out["accuracy"]`, `outputs.correct`):
# computed through argmax or a comparison, it carries no graph, whatever the rest of the output does.
_METRIC_FIELD = re.compile(r"^(acc|accuracy|(n|num)_?correct|correct|top\d+(_acc(uracy)?)?|precision|recall|f1)$")
# A name an element of a call's result is unpacked into that says it counts (`loss, n_tokens =
# model(batch)`, flair's `loss, datapoint_count = model.forward_loss(batch)`): a count is an integer,
# and autograd records no graph for integers, whatever the rest of the result carries.
_COUNT_NAME = re.compile(r"^((n|num)_\w+|(\w+_)?counts?)$")
# dtypes of torch and NumPy, by their last part (`torch.float32`, `np.int16`)
_DTYPES = frozenset({"float16", "float32", "float64", "bfloat16", "half", "float", "double", "int8", "int16", "int32",
                     "int64", "uint8", "long", "int", "short", "bool", "complex64", "complex128", "cfloat"})
_NON_DIFF_TORCH = frozenset({
    "torch.argmax", "torch.argmin", "torch.eq", "torch.ne", "torch.gt", "torch.lt", "torch.ge",
    "torch.le", "torch.isnan", "torch.isinf", "torch.isfinite", "torch.nonzero", "torch.tensor",
    "torch.argsort", "torch.multinomial", "torch.unique", "torch.bincount", "torch.bucketize",
    "torch.searchsorted", "torch.equal", "torch.allclose", "torch.isclose", "torch.any", "torch.all",
    "torch.no_grad", "torch.inference_mode", "torch.count_nonzero", "torch.numel", "torch.is_tensor",
    "torch.zeros_like", "torch.ones_like", "torch.empty_like", "torch.full_like", "torch.rand_like",
    "torch.randn_like", "torch.randint_like",
})
# torch functions whose result is a tensor computed from their arguments
_TENSOR_FUNCTION = re.compile(r"^torch\.(\w+|nn\.functional\.\w+|linalg\.\w+|fft\.\w+|special\.\w+)$")
_HARMLESS_FUNCTIONS = frozenset({"print", "len", "float", "int", "str", "repr", "isinstance", "list", "tuple",
                                 "sorted", "zip", "enumerate", "max", "min", "sum", "abs", "round", "format",
                                 "type", "id", "dict", "map"})
# What a value only read and dropped may be passed to (`Values._only_reads`)
_READING_BUILTINS = frozenset({"print", "len", "float", "int", "str", "repr", "round", "abs", "format", "isinstance",
                               "bool", "sum", "min", "max"})
_LOGGING_METHODS = frozenset({"log", "info", "debug", "warning", "add_scalar", "add_scalars", "set_postfix",
                              "log_dict", "print", "write"})
_HARMLESS_METHODS = _LOGGING_METHODS | {"update", "append", "extend", "insert", "add", "put", "format", "join"}
# A metric of HF's `evaluate` or `datasets` takes predictions and references by name, to read them.
_METRIC_INPUTS = frozenset({"predictions", "references"})
# torch calls that make a tensor, not a model: `torch.Tensor(lr).requires_grad_(False)` freezes nothing.
_TENSOR_FACTORIES = frozenset({"torch.Tensor", "torch.tensor", "torch.as_tensor", "torch.from_numpy", "torch.zeros",
                               "torch.ones", "torch.empty", "torch.full", "torch.rand", "torch.randn", "torch.arange",
                               "torch.FloatTensor", "torch.LongTensor"})


def _names_a_metric(expr: cst.BaseExpression) -> bool:
    """`out["accuracy"]`, `outputs.correct`: a field named as a metric that counts or compares."""
    if type(expr) is cst.Subscript:
        return bool(_METRIC_FIELD.match(string_key(expr) or ""))  # type: ignore[arg-type]
    return type(expr) is cst.Attribute and bool(_METRIC_FIELD.match(expr.attr.value))  # type: ignore[attr-defined]


@dataclass(frozen=True)
class _Trace:
    """What a value is followed for: an autograd graph (`graph`), or a model output on its device
    whatever the grad mode; `through`: names taken to hold one (a helper's parameters)."""

    graph: bool
    through: FrozenSet[str] = frozenset()


def _indices_of(node: cst.Subscript) -> bool:
    """`out.max(1)[1]`, `torch.topk(out, 5)[1]`: the indices a values-and-indices call returns."""
    value = node.value
    if type(value) is not cst.Call or len(node.slice) != 1:
        return False
    func = value.func  # type: ignore[attr-defined]
    if (func.attr.value if type(func) is cst.Attribute else last_part(dotted_name(func))) not in VALUES_INDICES:
        return False
    index = node.slice[0].slice
    return type(index) is cst.Index and type(index.value) is cst.Integer and index.value.value == "1"  # type: ignore[attr-defined]


def _moves_off_device(call: cst.Call) -> bool:
    """`t.cpu()`, `t.to("cpu")`, `t.to(device="cpu")`."""
    method = call.func.attr.value if type(call.func) is cst.Attribute else ""
    return method == "cpu" or method == "to" and any(
        type(a.value) is cst.SimpleString and a.value.value.strip("'\"").startswith("cpu") for a in call.args)


def _stores_into_container(target: cst.CSTNode) -> bool:
    """`obj.a = v`, `d[k] = v`, also inside a tuple target."""
    return any(type(leaf) in (cst.Attribute, cst.Subscript) for leaf in leaf_targets(target))


class Values:
    """Grad-carrying values of one module and where they go (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes, regions: Regions, calls: CallGraph,
                 roles: Roles, project: ProjectView) -> None:
        self.names = names
        self.project = project
        self.tree = tree
        self.scopes = scopes
        self.regions = regions
        self.calls = calls
        self.roles = roles
        self.requires_grad_off = False  # `x.requires_grad_(False)` / `p.requires_grad = False` seen
        self._switched_by_name = False  # `p.requires_grad = flag` / `x.requires_grad_(flag)` seen: a helper may freeze
        for call in scopes.calls:
            func = call.func
            if type(func) is cst.Attribute and func.attr.value == "requires_grad_" and not (
                    type(func.value) is cst.Call and names.call_name(func.value) in _TENSOR_FACTORIES):
                flag = argument(call, "requires_grad", 0)  # (`torch.Tensor(lr).requires_grad_(False)`: a tensor made there)
                if flag is not None and literal_bool(flag.value) is False:
                    self.requires_grad_off = True
                self._switched_by_name |= flag is not None and type(flag.value) is cst.Name
        for assign in scopes.assigns:
            for target in assign.targets:
                if type(target.target) is cst.Attribute and target.target.attr.value == "requires_grad":
                    self.requires_grad_off |= literal_bool(assign.value) is False
                    self._switched_by_name |= type(assign.value) is cst.Name
        self._memo_grad: Dict[Tuple[str, int, _Trace], bool] = {}
        self._memo_returns: Dict[Tuple[int, bool], bool] = {}
        self._memo_returns_from: Dict[Tuple[int, bool, FrozenSet[str]], bool] = {}
        self._in_progress: Set[Tuple[str, int, _Trace]] = set()
        self._scope_summaries: Dict[int, _ScopeSummary] = {}
        self._self_appends: Dict[int, List[Tuple[cst.Call, cst.BaseExpression]]] = {}
        self._kept: Dict[int, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {}  # id(method) -> kept_parameters
        self._accumulated: Dict[int, Tuple[str, ...]] = {}  # id(method) -> accumulated_parameters
        self._sums: Dict[int, List[Tuple[cst.CSTNode, cst.BaseExpression]]] = {}  # id(method) -> its running sums

    def frozen_by_a_helper(self, model: Optional[str]) -> bool:
        """`model` is handed to a function of this module that sets `requires_grad` on its
        parameters from another parameter (DiT's and SiT's `requires_grad(vae, False)`, whose
        body runs `p.requires_grad = flag` over `model.parameters()`; CycleGAN's
        `set_requires_grad(nets, requires_grad=False)`, a list of models or one), with False (or
        its default False), and by no call of the module with anything else: it records no graph."""
        return model is not None and self._switched_by_name and model in self._frozen_by_helpers

    @cached_property
    def _frozen_by_helpers(self) -> FrozenSet[str]:
        frozen: Set[str] = set()
        thawed: Set[str] = set()
        switches_of: Dict[int, FrozenSet[Tuple[str, str]]] = {}
        for call in self.scopes.calls:
            target = self.scopes.resolve(call)
            if target is None:
                continue
            switches = switches_of.get(id(target))
            if switches is None:
                switches = switches_of[id(target)] = self._grad_switches(target)
            if not switches:
                continue
            given = {param: arg.value for arg, param in self.scopes.parameters_given(call, target)}
            defaults = {p.name.value: p.default for p in (*target.params.params, *target.params.kwonly_params)
                        if p.default is not None}
            for model, switch in switches:
                flag = given.get(switch, defaults.get(switch))
                handed = given.get(model)
                models = [e.value for e in handed.elements] if type(handed) in (cst.List, cst.Tuple) else [handed]  # type: ignore[union-attr]
                names = {dotted for m in models if m is not None for dotted in (dotted_name(m),) if dotted is not None}
                (frozen if flag is not None and literal_bool(flag) is False else thawed).update(names)
        return frozenset(frozen - thawed)

    def _grad_switches(self, func: cst.FunctionDef) -> FrozenSet[Tuple[str, str]]:
        """(model, switch) for each parameter `switch` of `func` that it assigns to the
        `requires_grad` of the parameters of its parameter `model` (`for p in model.parameters():
        p.requires_grad = flag`, also through `for net in nets:`), or hands to
        `model.requires_grad_(...)`. Not a part of the model (`model.backbone.parameters()`)."""
        params = {p.name.value for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)}
        found: Set[Tuple[str, str]] = set()
        for node in self.tree.walk_scope(func):
            if type(node) is cst.Assign and type(node.value) is cst.Name and node.value.value in params:  # type: ignore[attr-defined]
                for target in node.targets:  # type: ignore[attr-defined]
                    held = target.target
                    if type(held) is cst.Attribute and held.attr.value == "requires_grad" and type(held.value) is cst.Name:
                        model = self._iterated_parameters_of(held.value.value, node, params)
                        if model is not None:
                            found.add((model, node.value.value))  # type: ignore[attr-defined]
            elif type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "requires_grad_" \
                    and type(node.func.value) is cst.Name and node.func.value.value in params:  # type: ignore[attr-defined]
                found.update((node.func.value.value, a.value.value) for a in node.args  # type: ignore[attr-defined]
                             if type(a.value) is cst.Name and a.value.value in params)  # type: ignore[attr-defined]
        return frozenset(found)

    def _iterated_parameters_of(self, name: str, at: cst.CSTNode, params: Set[str]) -> Optional[str]:
        """The parameter (of `params`, those of the function around `at`) whose model's `.parameters()` the loop around `at` binds `name`
        to (`for p in model.parameters()`, or `for net in nets: for p in net.parameters()`)."""
        loops = [loop for loop in self.tree.loops_around(at) if type(loop) is cst.For]
        owner = next((loop.iter.func.value for loop in loops if type(loop.target) is cst.Name and loop.target.value == name  # type: ignore[attr-defined]
                      and type(loop.iter) is cst.Call and type(loop.iter.func) is cst.Attribute  # type: ignore[attr-defined]
                      and loop.iter.func.attr.value == "parameters"), None)  # type: ignore[attr-defined]
        if type(owner) is not cst.Name:
            return None
        if owner.value in params:  # type: ignore[attr-defined]
            return owner.value  # type: ignore[attr-defined]
        outer = next((loop.iter for loop in loops if type(loop.target) is cst.Name and loop.target.value == owner.value), None)  # type: ignore[attr-defined]
        return outer.value if type(outer) is cst.Name and outer.value in params else None  # type: ignore[attr-defined]

    def carries_grad(self, expr: cst.BaseExpression, at: Optional[cst.CSTNode] = None) -> bool:
        """Whether `expr`, evaluated at `at` (default: itself), holds an autograd graph: it comes
        from a forward or loss computed in grad mode and no `.item()`, `float()`, `.detach()`,
        `.tolist()`, `.numpy()` or `.data` ended it. `.cpu()` and `.to()` keep the graph. A field
        of an output named as a metric (`out["accuracy"]`) is taken as it is, not one read inside
        a computation (`F.mse_loss(out["acc"], y)`: there `acc` may be an acceleration)."""
        if _names_a_metric(expr):
            return False
        return self._traces(expr, at if at is not None else expr, _Trace(graph=True))

    def carries_grad_from(self, expr: cst.BaseExpression, at: cst.CSTNode, given: FrozenSet[str]) -> bool:
        """`carries_grad`, where the names `given` (a method's parameters) may hold a graph too:
        what a loss module's `forward` computes from the outputs it is handed."""
        return self._traces(expr, at, _Trace(graph=True, through=given))

    def graphless(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """Whether `expr` surely carries no autograd graph, whatever it is computed from: what a
        method or torch function that ends the graph returns (`out.argmax(1)`, `loss.item()`,
        `torch.eq(a, b)`), a method of such a value given nothing else that may carry one
        (`.numpy().squeeze()`), a comparison, a tuple of those, or a name bound only to those."""
        kind = type(expr)
        if kind is cst.Comparison or kind is cst.Integer or kind is cst.Float:
            return True
        if kind is cst.BinaryOperation:  # `out.size(0) / x.size(0)`
            return self.graphless(expr.left, at, depth) and self.graphless(expr.right, at, depth)  # type: ignore[attr-defined]
        if kind is cst.Tuple or kind is cst.List:
            return all(type(e) is cst.Element and self.graphless(e.value, at, depth) for e in expr.elements)  # type: ignore[attr-defined]
        if kind is cst.Call:
            func, qualified = expr.func, self.names.call_name(expr)  # type: ignore[attr-defined, arg-type]
            if qualified is None:
                return type(func) is cst.Attribute and (func.attr.value in DETACHING_METHODS or (  # type: ignore[attr-defined]
                    func.attr.value != "requires_grad_" and self.graphless(func.value, at, depth) and  # type: ignore[attr-defined]
                    all(self._constant(a.value) or self.graphless(a.value, at, depth)
                        for a in expr.args)))  # type: ignore[attr-defined]  # `out.detach().cpu().numpy().squeeze()`
            if qualified in _NON_DIFF_TORCH:
                return True
            operands = [a.value for a in expr.args if a.keyword is None]  # type: ignore[attr-defined]
            return qualified in ("torch.cat", "torch.stack") and bool(operands) and \
                all(self.graphless(operand, at, depth + 1) for operand in operands)  # (of graphless pieces)
        if kind is cst.Name and depth < 4:  # bound, or appended to, only such values
            binds = self.scopes.bindings_seen(expr.value, at)  # type: ignore[attr-defined]
            return bool(binds) and all(b.kind in ("assign", "append") and b.whole and b.value is not None and
                                       self.graphless(b.value, b.node, depth + 1) for b in binds)
        return False

    def _constant(self, expr: cst.BaseExpression) -> bool:
        """An argument that carries no graph whatever runs: a literal (`.squeeze(0)`,
        `.astype("int16")`, `.view(-1)`) or a dtype of torch or NumPy (`.to(torch.float32)`); not an
        attribute of anything else (`.div(scaler.temperature)`: a learnt parameter, maybe)."""
        if type(expr) is cst.UnaryOperation:
            expr = expr.expression  # type: ignore[attr-defined]
        if type(expr) in (cst.Integer, cst.Float, cst.SimpleString):
            return True
        qualified = self.names.qualified_name(expr) if type(expr) is cst.Attribute else None
        return qualified is not None and qualified.startswith(("torch.", "numpy.")) and \
            qualified.count(".") == 1 and last_part(qualified) in _DTYPES

    def holds_output(self, expr: cst.BaseExpression, at: Optional[cst.CSTNode] = None) -> bool:
        """Whether `expr` holds a model's output (or a loss) on its device, whatever the grad
        mode: what would carry a graph with grad on, unless moved off it (`.cpu()`,
        `.to("cpu")`) or ended (`.item()`, `.argmax()`, `.numpy()`)."""
        return self._traces(expr, at if at is not None else expr, _Trace(graph=False))

    def _traces(self, expr: cst.BaseExpression, at: cst.CSTNode, trace: "_Trace") -> bool:
        stack: List[cst.CSTNode] = [expr]
        while stack:
            node = stack.pop()
            if type(node) is cst.Name:
                if node.value in trace.through and self._as_given(node.value, at) or \
                        self._name_traces(node.value, at, trace):
                    return True
            elif type(node) is cst.Attribute:
                if node.attr.value not in DETACHING_ATTRIBUTES:
                    stack.append(node.value)
            elif type(node) is cst.Subscript:
                if not _indices_of(node):
                    stack.append(node.value)
            elif type(node) is cst.Call:
                if self._call_traces(node, at, stack, trace):
                    return True
            elif type(node) in (cst.BinaryOperation,):
                stack.extend((node.left, node.right))
            elif type(node) is cst.UnaryOperation:
                if not type(node.operator) is cst.Not:
                    stack.append(node.expression)
            elif type(node) is cst.BooleanOperation:
                stack.extend((node.left, node.right))
            elif type(node) is cst.IfExp:
                stack.extend((node.body, node.orelse))
            elif type(node) in (cst.Tuple, cst.List, cst.Set):
                stack.extend(e.value for e in node.elements)
            elif type(node) is cst.Dict:
                stack.extend(e.value for e in node.elements if type(e) in (cst.DictElement, cst.StarredDictElement))
            elif type(node) is cst.StarredElement:
                stack.append(node.value)
            elif type(node) is cst.NamedExpr:
                stack.append(node.value)
            # constants, comparisons, f-strings, lambdas, comprehensions: no graph (or unknown)
        return False

    def _as_given(self, name: str, at: cst.CSTNode) -> bool:
        """`name` holds, at `at`, what its function was handed: it is not bound again on the way
        (`k = k.detach()`)."""
        binds = self.scopes.in_effect(name, at)
        return bool(binds) and all(b.kind == "param" for b in binds)

    def _recording(self, call: cst.Call, trace: "_Trace") -> bool:
        return not trace.graph or self.regions.grad_enabled(call) is True and not self.in_a_quiet_mode(call) \
            and not self.runs_without_grad(call)

    def runs_without_grad(self, forward: cst.Call) -> bool:
        """The method a forward calls runs without grad (`@torch.no_grad() def inference`, a
        body in `with torch.no_grad():`, or one that hands its calls to such methods): the
        method of the receiver's class, where the code says which class it is (a class of this
        module or of the project, by its constructor or by the annotation of the parameter it was
        handed: `def __init__(self, model: Transformer)`, unless a subclass of this module
        defines the method again), or the `forward` of an instance called (`teacher(x)`); else,
        for a model whose class it does not say (one from a factory), or a class of this module
        that inherits the method from another module, every class of this module that defines a
        method by that name decorates it so, or, where none does, every importable class of the
        project; not for a model's own computing methods (`forward`, `encode_image`), which
        other classes' say nothing of."""
        func = forward.func
        receivers = self.roles.receivers
        called = self._instance_class(func)
        if called is not None:  # `teacher(x)`, an instance of a class the code names: its forward
            return self._method_records_nothing(called, "forward", annotated=False) is True
        if type(func) is not cst.Attribute:
            return False
        name = func.attr.value
        made = receivers.class_of(func.value)
        annotated = receivers.annotated_class(func.value) if made is None else None
        made = made or annotated
        if made is not None:
            known = self._method_records_nothing(made, name, annotated is not None)
            if known is not None:
                return known
        if _OWN_COMPUTATION.match(name):
            return False  # (a factory's model: the module's other classes say nothing of its own forward)
        local_flags = self._local_method_grad_off.get(name)
        if local_flags is not None:
            return local_flags == {True}
        return self._imports_project and self.project.grad_off_method(name)

    def _instance_class(self, func: cst.BaseExpression) -> Optional[str]:
        """The class whose instance `func` holds where it is called, where the code names it:
        every assignment to the name constructs it (memlint.analysis.receivers.Receivers.class_of),
        and what the call sees is such an assignment (not a parameter of its function), or, for
        `self.<attr>`, one made by the methods of the caller's own class."""
        kind = type(func)
        if kind is not cst.Name and not (kind is cst.Attribute and type(func.value) is cst.Name and  # type: ignore[attr-defined]
                                         func.value.value == "self"):  # type: ignore[attr-defined]
            return None
        made = self.roles.receivers.class_of(func)
        if made is None:
            return None
        if kind is cst.Name:
            binds = self.scopes.bindings_seen(func.value, func)  # type: ignore[attr-defined]
            return made if binds and all(bind.kind == "assign" for bind in binds) else None
        klass = self.scopes.enclosing_class(func)
        return made if klass is not None and self.scopes.attribute_values(klass, func.attr.value) else None  # type: ignore[attr-defined]

    def _method_records_nothing(self, made: str, name: str, annotated: bool) -> Optional[bool]:
        """Whether the method `name` of the class `made` (of this module, or of the project)
        records no graph; for an annotated class, a subclass of this module may run its own
        (the annotation bounds the class), and it does not; None where a class of this module
        inherits the method from another module."""
        local = self.scopes.classes.get(made)
        if local is None:
            return self.project.knows(made) and self.project.grad_off(f"{made}.{name}")
        if made in self.scopes.classes_defined_again:
            return False  # (`if fast: class Encoder: ... else: class Encoder: ...`: which one runs is not told)
        if annotated and self._defined_again_below(local, name):
            return False
        method = self.scopes.method_of(local, name)  # (or of a base of this module that defines it)
        return None if method is None else self._records_nothing(local, method, annotated)

    def _records_nothing(self, klass: cst.ClassDef, method: cst.FunctionDef, annotated: bool) -> bool:
        """`method` runs without grad (memlint.analysis.regions.Regions.runs_without_grad), or
        only hands its calls to methods of its class that do (RWKV's `def forward(self, idx,
        state): ... return self.forward_seq(idx, state)`, whose `forward_seq` works in `with
        torch.no_grad():`): it returns nothing else, and reads nothing of the instance besides
        (no `self.backbone(x)`, `for block in self.blocks`, `super().forward(x)`, whose
        activations the step would keep)."""
        regions = self.regions
        if regions.runs_without_grad(method):
            return True
        returned: List[cst.Call] = []
        for node in self.tree.walk_scope(method.body):
            if type(node) is cst.Return:
                value = node.value  # type: ignore[attr-defined]
                if type(value) is not cst.Call or type(value.func) is not cst.Attribute or \
                        type(value.func.value) is not cst.Name or value.func.value.value != "self":  # type: ignore[attr-defined]
                    return False
                returned.append(value)  # type: ignore[arg-type]
        handed = {id(call.func.value) for call in returned}  # type: ignore[attr-defined]
        if not returned or any(type(node) is cst.Name and node.value in ("self", "super") and id(node) not in handed  # type: ignore[attr-defined]
                               for node in self.tree.walk_scope(method.body)):
            return False
        for call in returned:
            name = call.func.attr.value  # type: ignore[attr-defined]
            callee = self.scopes.method_of(klass, name)
            if callee is None or callee is method or not regions.runs_without_grad(callee) or \
                    annotated and self._defined_again_below(klass, name):
                return False
        return True

    def _defined_again_below(self, klass: cst.ClassDef, name: str) -> bool:
        """A class of this module derived from `klass` defines the method `name` itself."""
        return any(other is not klass and own_method(other, name) is not None and
                   any(base is klass for base in self.scopes.lineage(other))
                   for other in self.scopes.classes.values())

    @cached_property
    def _local_method_grad_off(self) -> Dict[str, Set[bool]]:
        """For each method name of this module's classes, whether each definition runs without
        grad (memlint.analysis.regions.Regions.runs_without_grad)."""
        regions = self.regions
        found: Dict[str, Set[bool]] = {}
        for klass in self.scopes.classes.values():
            for method in klass.body.body:
                if type(method) is cst.FunctionDef:
                    found.setdefault(method.name.value, set()).add(regions.runs_without_grad(method))
        return found

    @per_node
    def in_a_quiet_mode(self, forward: cst.Call) -> bool:
        """`model(data, mode="inference")`, where the model's class computes that mode under
        no_grad (Regions.quiet_modes): its output carries no graph. A class that neither this
        module, nor the project, nor a library built on torch defines may: its call of a mode
        for inference (`mode="inference"`, `phase="test"`) is taken to, so that a module linted
        without the rest of its project reports no more than with it."""
        given = {f"{arg.keyword.value}={arg.value.evaluated_value}" for arg in forward.args  # type: ignore[attr-defined]
                 if arg.keyword is not None and type(arg.value) is cst.SimpleString
                 and isinstance(arg.value.evaluated_value, str)}  # type: ignore[attr-defined]
        klass = self.roles.receivers.constructor_of(forward.func) if given else None
        if klass is None or is_torch_library(klass):
            return False
        local = self.scopes.classes.get(klass)
        if local is not None:
            own = own_method(local, "forward")
            return own is not None and bool(given & set(self.regions.quiet_modes(own)))
        modes = self.project.quiet_modes(klass)
        if modes is None:  # not known here: a mode for inference may be one
            return any(_INFERENCE_MODE.match(pair) for pair in given)
        return bool(given & set(modes))

    def _call_traces(self, call: cst.Call, at: cst.CSTNode, stack: List[cst.CSTNode], trace: "_Trace") -> bool:
        func = call.func
        if type(func) is cst.Name and func.value in SCALAR_FUNCTIONS:
            return False
        if self.roles.is_forward(call):
            # a forward records a graph in grad mode (unless the file freezes parameters: then
            # only inputs that require grad would, and we do not guess)
            return self._recording(call, trace) and not (trace.graph and self.requires_grad_off)
        if self.roles.is_loss(call):  # a loss of detached values has no graph
            return self._recording(call, trace) and any(self._traces(a.value, at, trace) for a in call.args)
        if self.roles.receivers.is_parameter_free(func):  # `cos(a, b)`, `nn.Softmax(dim=1)(logits)`
            stack.extend(arg.value for arg in call.args)
            return False
        qualified = self.names.call_name(call)
        if qualified is not None:
            if _TENSOR_FUNCTION.match(qualified) and qualified not in _NON_DIFF_TORCH:
                stack.extend(arg.value for arg in call.args)
                return False
            return self._returned_by_another_module(call, trace)
        if type(func) is cst.Name and func.value in self._record_types:
            stack.extend(arg.value for arg in call.args)  # `ModelPrediction(noise, x0)`: it holds them
            return False
        target = self.scopes.resolve(call)
        if target is not None:  # a function or method of this module (`self.p_sample(x, t)`)
            if self._returns(target, trace):
                return True
            handed = self._handed_through(call, target, at, trace) if trace.through else frozenset()
            return bool(handed) and self._returns_from(target, handed, trace.graph)
        if self.project_callee(call) is not None:
            return self._returned_by_another_module(call, trace)
        if type(func) is cst.Attribute:
            if func.attr.value in DETACHING_METHODS or (not trace.graph and _moves_off_device(call)) or \
                    func.attr.value in ("to", "type") and any(
                        self.names.qualified_name(a.value) in INTEGER_DTYPES for a in call.args):
                return False
            stack.append(func.value)  # out.softmax(-1), loss.cpu(), out.to(device)
            if trace.through and root_name(func) == "self" and not (  # `self.distance(embeddings, ref)`: a part
                    trace.graph and self.regions.grad_enabled(call) is False):  # of the module computing from them
                stack.extend(arg.value for arg in call.args)
        return False

    @per_node
    def project_callee(self, call: cst.Call) -> Optional[str]:
        """The absolute name of what `call` calls when another module of the project may define it
        (asked of a call by the summary's edges, the traces of what functions return and several
        rules: kept per call)."""
        if not self._imports_project:
            return None  # linted alone, or nothing of the project imported
        func = call.func
        local = dotted_name(func) if type(func) in (cst.Name, cst.Attribute) else None
        dotted = self.names.absolute_name(local) or self._instance_method_name(call) or self._imported_name(local, call)
        return dotted if self.project.knows(dotted) else None

    def _instance_method_name(self, call: cst.Call) -> Optional[str]:
        """`Scopes.instance_method_name` of `call`, names read as this module imports them; at
        once None for a method called on a name no assignment of the module binds to what an
        import may name (`x.view()`, `loss.backward()`): which bindings are in effect at the
        call is asked of the rest only."""
        func = call.func
        if type(func) is cst.Attribute and type(func.value) is cst.Name and \
                func.value.value not in self._bound_to_imported_calls:  # type: ignore[attr-defined]
            return None
        return self.scopes.instance_method_name(call, lambda name: self._imported_name(name, call))

    @cached_property
    def _bound_to_imported_calls(self) -> FrozenSet[str]:
        """The names some assignment of the module binds, whole, to a call of what an import
        (or a star import) may name, a chain of moves after it (`acc = Accuracy().to(device)`):
        the only names `Scopes.imported_class_of` can find an instance of an imported class in."""
        names = self.names
        found: Set[str] = set()
        for binding in self.scopes.every_binding():
            if binding.kind != "assign" or not binding.whole or binding.value is None:
                continue
            value = constructed(binding.value, MOVES_ITSELF)
            if type(value) is cst.Call and type(value.func) in (cst.Name, cst.Attribute):  # type: ignore[attr-defined]
                dotted = dotted_name(value.func)  # type: ignore[attr-defined]
                if dotted is not None and (names.absolute_name(dotted) is not None or names.star_names(dotted)):
                    found.add(binding.name)
        return frozenset(found)

    def _imported_name(self, local: Optional[str], at: cst.CSTNode) -> Optional[str]:
        """The absolute name of `local` at `at`: imported by name, or through a star import of
        a project module that defines it (the last module so imported, as Python takes it: a
        later star import shadows an earlier one), where nothing of this module binds it."""
        if local is None:
            return None
        dotted = self.names.absolute_name(local)
        if dotted is None and self._imports_project:
            candidates = self.names.star_names(local)  # (none without a star import: asked first, it is cheaper)
            if candidates and not self.scopes.in_effect(local.partition(".")[0], at):
                dotted = next((name for name in reversed(candidates) if self.project.defines(name)), None)
        return dotted

    def forward_through_helper(self, call: cst.Call) -> bool:
        """`call` runs a model through a method or function of this module named for it
        (lm-evaluation-harness's `self._model_forward(input_ids, ...)`, `self._model_call(inps)`)
        whose every `return` hands back the output as the forward made it (or its `.logits`,
        its `[0]`), not a loss, a choice or anything else computed from it."""
        target = self.scopes.resolve(call)
        if target is None or not _MODEL_CALL_HELPER.match(target.name.value):
            return False
        returns = self.tree.scope_nodes(target, cst.Return)
        return bool(returns) and all(node.value is not None and self._the_output(node.value, node, 0)  # type: ignore[attr-defined]
                                     for node in returns)

    def _the_output(self, value: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """`value` is a forward's output, a part of it by name or position, or a name every
        binding of which seen at `at` is."""
        while type(value) is cst.Subscript or type(value) is cst.Attribute and value.attr.value != "loss":  # type: ignore[attr-defined]
            value = value.value  # type: ignore[attr-defined]
        if type(value) is cst.Call:
            return self.roles.is_forward(value)  # type: ignore[arg-type]
        if type(value) is not cst.Name or depth > 2:
            return False
        binds = self.scopes.in_effect(value.value, at)  # type: ignore[attr-defined]
        return bool(binds) and all(bind.kind == "assign" and bind.whole and bind.value is not None and
                                   self._the_output(bind.value, bind.node, depth + 1) for bind in binds)

    def built_in_language_model_module(self, forward: cst.Call) -> bool:
        """The model `forward` calls (a plain name) is what a function of another module of the
        project returns, a module that names a language model's class and no classifier nor a
        number of classes (memlint.analysis.outputs.Outputs.builds_language_model; CodeT5's
        `config, model, tokenizer = build_or_load_gen_model(args)`, its `models.py` naming
        `T5ForConditionalGeneration`), also through a move or a data-parallel wrapper of it
        bound to the same name; every binding that may be the one seen must say so."""
        if type(forward.func) is not cst.Name or not self._imports_project:
            return False
        return self._built_in_language_model_module(forward.func.value, forward, 0)  # type: ignore[attr-defined]

    def _built_in_language_model_module(self, name: str, at: cst.CSTNode, depth: int) -> bool:
        binds = self.scopes.in_effect(name, at)
        if not binds or depth > 2:
            return False
        for bind in binds:
            value = bind.value
            if bind.kind != "assign" or type(value) is not cst.Call:
                return False
            dotted = self.project_callee(value)  # type: ignore[arg-type]
            if dotted is not None:
                if not self.project.language_model(dotted):
                    return False
                continue
            func = value.func  # type: ignore[attr-defined]
            if type(func) is cst.Attribute and func.attr.value in _MODEL_MOVES:  # `model = model.to(device)`
                wrapped: Optional[cst.BaseExpression] = func.value
            else:  # `model = torch.nn.DataParallel(model)`
                wrapped = value.args[0].value if value.args and self.names.call_name(value) in _DATA_PARALLEL else None  # type: ignore[attr-defined, arg-type]
            if not (bind.whole and type(wrapped) is cst.Name and wrapped.value == name):  # type: ignore[attr-defined]
                return False
            if not self._built_in_language_model_module(name, bind.node, depth + 1):
                return False
        return True

    def returned_on_device(self, call: cst.Call) -> bool:
        """`call` calls a function of another module of the project that returns a tensor on
        the device, by its summary (StyleTTS2's `maximum_path`, under `from utils import *`)."""
        dotted = self.project_callee(call)
        return dotted is not None and self.project.returns_device(dotted)

    def _returned_by_another_module(self, call: cst.Call, trace: "_Trace") -> bool:
        """A function or method of another module of the project that returns a graph (or an
        output), by its summary (memlint.analysis.project); anything else: do not guess."""
        dotted = self.project_callee(call)
        if dotted is None or (trace.graph and not self._recording(call, trace)):
            return False
        return self.project.returns(dotted, trace.graph)

    def returns_grad(self, func: cst.FunctionDef) -> bool:
        """Whether a function of this module returns a grad-carrying value."""
        return self._returns(func, _Trace(graph=True))

    def returns_output(self, func: cst.FunctionDef) -> bool:
        """Whether a function of this module returns a model's output on its device."""
        return self._returns(func, _Trace(graph=False))

    def _returns(self, func: cst.FunctionDef, trace: "_Trace") -> bool:
        key = (id(func), trace.graph)
        if key in self._memo_returns:
            return self._memo_returns[key]
        self._memo_returns[key] = False
        result = False
        if not _annotated_tensorless(func) and (
                not trace.graph or self.regions.grad_enabled_by_decorator(func) is not False):
            # (the last `return` first, as a walk of the body from its end would meet them)
            for ret in reversed(self.tree.scope_nodes(func, cst.Return)):
                if ret.value is not None:  # type: ignore[attr-defined]
                    result = self._traces(ret.value, ret, _Trace(trace.graph))  # type: ignore[attr-defined]
                    if result:
                        break
        self._memo_returns[key] = result
        return result

    def _handed_through(self, call: cst.Call, target: cst.FunctionDef, at: cst.CSTNode,
                        trace: "_Trace") -> FrozenSet[str]:
        """The parameters of `target` that `call` hands a value followed through `trace.through`
        (`self.compute_loss_with_labels(embeddings, labels)`: `embeddings`)."""
        return frozenset(name for arg, name in self.scopes.parameters_given(call, target)
                         if self._traces(arg.value, at, trace))

    def _returns_from(self, func: cst.FunctionDef, params: FrozenSet[str], graph: bool) -> bool:
        """Whether `func` returns a value computed from `params` (with its graph, for `graph`)."""
        key = (id(func), graph, params)
        if key not in self._memo_returns_from:
            self._memo_returns_from[key] = False  # a recursive call does not decide
            trace = _Trace(graph, through=params)
            self._memo_returns_from[key] = not _annotated_tensorless(func) and any(
                ret.value is not None and not (graph and self.regions.grad_enabled(ret) is False)  # type: ignore[attr-defined]
                and self._traces(ret.value, ret, trace)  # type: ignore[attr-defined]
                for ret in self.tree.scope_nodes(func, cst.Return))
        return self._memo_returns_from[key]

    def _name_traces(self, name: str, at: cst.CSTNode, trace: "_Trace") -> bool:
        key = (name, id(at), trace)
        if key in self._memo_grad:
            return self._memo_grad[key]
        if key in self._in_progress:
            return False
        self._in_progress.add(key)
        result = False
        for bind in self.scopes.in_effect(name, at):
            if bind.value is None or bind.kind == "param":
                continue
            if bind.kind == "for":  # `for loss in losses`: an element of a grad-carrying container
                if self._iter_traces(bind.value, bind.node, trace):
                    result = True
                    break
                continue
            if trace.graph and self.regions.grad_enabled(bind.node) is False and bind.kind != "append":
                continue
            if not bind.whole and type(bind.value) is cst.Call and (
                    last_part(dotted_name(bind.value.func)) in VALUES_INDICES or _COUNT_NAME.match(bind.name)
                    or self._graphless_element(bind)):
                continue  # `_, predicted = out.max(1)`: do not guess which element it is; a count has no graph
            if self._traces(bind.value, bind.node, trace) or trace.graph and self._backwarded_binding(bind):
                result = True
                break
        self._in_progress.discard(key)
        self._memo_grad[key] = result
        return result

    def _graphless_element(self, bind: Binding) -> bool:
        """`out, _, ratio = model(data)`, where every `return` of the `forward` of the model's
        class (in this module) gives a tuple whose element there carries no graph
        (`ratio = out.size(0) / x.size(0)`, a Python float)."""
        call: cst.Call = bind.value  # type: ignore[assignment]
        target = bind.node.targets[0].target if type(bind.node) is cst.Assign and len(bind.node.targets) == 1 else None  # type: ignore[attr-defined]
        if type(target) not in (cst.Tuple, cst.List) or not self.roles.is_forward(call):
            return False
        elements = target.elements  # type: ignore[union-attr]
        position = next((i for i, e in enumerate(elements) if type(e) is cst.Element and type(e.value) is cst.Name
                         and e.value.value == bind.name), None)
        klass = self.scopes.classes.get(self.roles.receivers.class_of(call.func) or "")
        forward = own_method(klass, "forward") if klass is not None else None
        if position is None or forward is None or any(type(e) is not cst.Element for e in elements):
            return False
        returns = self.tree.scope_nodes(forward, cst.Return)
        return bool(returns) and all(
            type(ret.value) is cst.Tuple and len(ret.value.elements) == len(elements)  # type: ignore[attr-defined]
            and self.graphless(ret.value.elements[position].value, ret) for ret in returns)  # type: ignore[attr-defined]

    def _backwarded_binding(self, bind: Binding) -> bool:
        """`loss = step_loss(batch)`, a call memlint cannot see into, whose value a backward of
        the same scope backwards as bound here (`accelerator.backward(loss)`; `loss.backward()`
        of a name that reads like a loss, where `planner.backward()` may be anything's method):
        only a tensor with an autograd graph can be backwarded. Also one element of what the
        call returns (`loss, top1 = self.compute_loss(batch)`, then `loss.backward()`), and a
        value backwarded under another name (`loss = ce_loss`, then `loss.backward()`)."""
        if bind.kind != "assign" or type(bind.value) is not cst.Call or \
                not bind.whole and unpacked_position(bind.node, bind.name) is None:
            return False
        for backward in self.roles.backwards_of(self.tree.scope_of(bind.node)):
            loss = backward.loss
            if backward.kind == "method" and "loss" not in bind.name.lower() or type(loss) is not cst.Name:
                continue
            if loss.value == bind.name and self._in_effect_at(bind, backward.call):
                return True
            aliases = self.scopes.in_effect(loss.value, backward.call)  # type: ignore[attr-defined]
            if len(aliases) == 1 and aliases[0].kind == "assign" and aliases[0].whole and \
                    type(aliases[0].value) is cst.Name and aliases[0].value.value == bind.name and \
                    self._in_effect_at(bind, aliases[0].node):  # type: ignore[attr-defined]
                return True
        return False

    def _in_effect_at(self, bind: Binding, at: cst.CSTNode) -> bool:
        return any(b is bind for b in self.scopes.in_effect(bind.name, at))

    def _iter_traces(self, iterable: cst.BaseExpression, at: cst.CSTNode, trace: "_Trace") -> bool:
        if type(iterable) is cst.Call and type(iterable.func) is cst.Name and \
                iterable.func.value in ("zip", "enumerate", "reversed"):
            return any(self._iter_traces(a.value, at, trace) for a in iterable.args)
        if type(iterable) is cst.Call and type(iterable.func) is cst.Attribute and \
                iterable.func.attr.value in ("items", "values") and not iterable.args:
            return self._iter_traces(iterable.func.value, at, trace)  # `for k, v in losses.items()`
        if type(iterable) is cst.Name:
            return self._traces(iterable, at, trace)
        return False

    @cached_property
    def _record_types(self) -> FrozenSet[str]:
        """Names this module binds to a `namedtuple(...)` type: a call of one holds its arguments."""
        return frozenset(dotted for assign in self.scopes.assigns if type(assign.value) is cst.Call
                         and self.names.call_name(assign.value) in _NAMEDTUPLE
                         for dotted in (dotted_name(t.target) for t in assign.targets) if dotted)

    def use_after_loop(self, loop: cst.CSTNode, name: str) -> Optional[str]:
        """How what the loop collects in `name` is used afterwards, when not on the device:
        "unused" (never read), "host" (read only to be moved to the host: `torch.cat(preds).cpu()`,
        `.numpy()`, `.tolist()`), "some-paths" (read only on some paths: `frames if keep else x`);
        None when it may be used on the device (then keeping it there was the point)."""
        tree = self.tree
        scope = tree.scope_of(loop)
        end = tree.span(loop)[1]  # the first node after the loop (a lambda's inside included)
        uses = set()
        for node in tree.walk_scope(scope):
            if type(node) is not cst.Name or node.value != name or tree.order(node) < end:  # type: ignore[attr-defined]
                continue
            if tree.scope_of(node) is not scope:
                return None  # captured by a nested function: unknown use
            parent = tree.parent(node)
            if type(parent) is cst.AssignTarget or (type(parent) in (cst.AugAssign, cst.AnnAssign)
                                                        and parent.target is node):
                continue
            statement = tree.statement_around(node)
            if self._conditional_read(node, statement):
                uses.add("some-paths")
            elif self._moved_to_host(statement):
                uses.add("host")
            else:
                return None
        return "some-paths" if "some-paths" in uses else "host" if uses else "unused"

    def _conditional_read(self, node: cst.CSTNode, statement: Optional[cst.CSTNode]) -> bool:
        for ancestor in self.tree.ancestors(node):
            if ancestor is statement:
                return False
            if type(ancestor) is cst.IfExp and not self.tree.contains(ancestor.test, node):
                return True
        return False

    @staticmethod
    def _moved_to_host(statement: Optional[cst.CSTNode]) -> bool:
        return statement is not None and any(
            type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value in _TO_HOST
            for n in walk_scope(statement))

    def class_predictions_from(self, loop: cst.CSTNode, name: str) -> bool:
        """Whether the loop scores a classifier with `name`: it takes one class per example from
        the whole of it (`name.argmax(1)`, `name.max(1)`, `torch.max(name, 1)`) and compares the
        classes with labels (`pred.eq(y)`, `pred == y`). A classifier's scores, one per class,
        are small next to the activations that made them."""
        picks = [n for n in self.tree.scope_nodes(loop, cst.Call) if self._picks_classes(n, name)]
        if not picks:
            return False
        predicted = {name for pick in picks for name in self._bound_from(pick, loop)}
        for node in self.tree.walk_scope(loop):
            compared: List[cst.BaseExpression] = []
            if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "eq":
                compared = [node.func.value, *(a.value for a in node.args)]
            elif type(node) is cst.Comparison and any(type(c.operator) is cst.Equal for c in node.comparisons):
                compared = [node.left, *(c.comparator for c in node.comparisons)]
            for side in compared:
                if any(n in picks for n in expression_nodes(side)) or sources_of(side) & predicted:
                    return True
        return False

    def _picks_classes(self, call: cst.Call, name: str) -> bool:
        func = call.func
        if type(func) is cst.Attribute and func.attr.value in _CLASS_PICKS and call.args:
            return dotted_name(func.value) == name
        return self.names.call_name(call) in ("torch.argmax", "torch.max") and len(call.args) > 1 and \
            dotted_name(call.args[0].value) == name

    def _bound_from(self, call: cst.Call, loop: cst.CSTNode) -> Set[str]:
        """The names the statement holding `call` binds from it (`_, pred = out.max(1)`)."""
        statement = self.tree.statement_around(call)
        found: Set[str] = set()
        for node in self.tree.walk_scope(statement) if statement is not None and self.tree.contains(loop, statement) else ():
            if type(node) is cst.Assign and self.tree.contains(node.value, call):
                found |= {n for t in node.targets for n in target_names(t.target)}
        return found

    def constant_int(self, expr: cst.BaseExpression, depth: int = 0) -> Optional[int]:
        """The value of an integer known from the code: a literal, arithmetic of such, or a name
        bound once to one (`batch = 32`, `batch, seq = 8, 256`); None otherwise."""
        if depth > 8:
            return None
        if type(expr) is cst.Integer:
            return int(expr.evaluated_value)
        if type(expr) is cst.BinaryOperation and type(expr.operator) in (cst.Multiply, cst.Add, cst.FloorDivide):
            left, right = self.constant_int(expr.left, depth + 1), self.constant_int(expr.right, depth + 1)
            if left is None or right is None or (type(expr.operator) is cst.FloorDivide and not right):
                return None
            if type(expr.operator) is cst.Multiply:
                return left * right
            return left + right if type(expr.operator) is cst.Add else left // right
        if not type(expr) is cst.Name:
            return None
        binds = self.scopes.bindings_seen(expr.value, expr)
        if len(binds) != 1 or binds[0].kind != "assign" or binds[0].value is None:
            return None
        value = binds[0].value
        if not binds[0].whole:  # `batch, seq = 8, 256`
            targets = getattr(binds[0].node, "targets", ())
            target = targets[0].target if len(targets) == 1 else None
            if not (type(target) is cst.Tuple and type(value) is cst.Tuple and
                    len(target.elements) == len(value.elements)):
                return None
            position = [i for i, e in enumerate(target.elements)
                        if type(e.value) is cst.Name and e.value.value == expr.value]
            if len(position) != 1:
                return None
            value = value.elements[position[0]].value
        return self.constant_int(value, depth + 1)

    def kept_arguments(self, call: cst.Call, graph: bool) -> List[cst.Arg]:
        """The arguments of `call` that the method it calls on an instance (`acc.update(pred, y)`)
        appends to a list of that instance (`self.preds.append(pred)`), still holding their graph
        (`graph`), or their device tensor: they live as long as the instance does. Of a method
        of this module, or of another module of the project (its summary)."""
        return self._arguments_into_self(call, lambda method: self.kept_parameters(method)[0 if graph else 1],
                                         lambda dotted: self.project.keeps(dotted, graph))

    def may_keep_arguments(self, call: cst.Call, summed: bool = False) -> bool:
        """Whether `call` may be of a method that keeps what it is passed (appends it to its
        instance; with `summed`, adds it into a running sum there): one of this module that
        does, or, where the module imports from the project, one of another module's class
        (`kept_arguments` and `accumulated_arguments` tell which arguments)."""
        if type(call.func) is not cst.Attribute:
            return False
        method = self.scopes.resolve(call)
        if method is not None:
            return bool(self._accumulates_into_self(method) if summed else self._appends_to_self(method))
        return self._imports_project

    @cached_property
    def _imports_project(self) -> bool:
        """The module imports a module of the project, or something of one (`import meters`,
        `from pkg.meters import AverageMeter`)."""
        project = self.project
        return bool(project.names) and any(full in project.names or project.knows(full)
                                           for full in (*self.names.absolute_imports().values(),
                                                        *self.names.star_modules))

    def accumulated_arguments(self, call: cst.Call) -> List[cst.Arg]:
        """The arguments of `call` that the method it calls on an instance adds, with their
        graph, into a running sum that instance keeps (`meter.update(loss, n)`, whose method does
        `self.sum += val * n`), and backwards nowhere: the sum links every value added while the
        instance lives. Of a method of this module, or of another module of the project."""
        return self._arguments_into_self(call, self.accumulated_parameters, self.project.accumulates)

    def _arguments_into_self(self, call: cst.Call, parameters: Callable[[cst.FunctionDef], Tuple[str, ...]],
                             elsewhere: Callable[[str], Dict[str, int]]) -> List[cst.Arg]:
        """The arguments of `call`, a method called on an instance, given to the parameters
        that `parameters` names for a method of this module, or that `elsewhere` names (with
        their positions after `self`) for a method of another module of the project."""
        if type(call.func) is not cst.Attribute:
            return []
        method = self.scopes.resolve(call)
        if method is None:
            if not self._imports_project:
                return []  # linted alone, or nothing of the project imported: no class of another module here
            dotted = self._instance_method_name(call)
            if dotted is None or not self.project.knows(dotted):
                return []
            positions = elsewhere(dotted)
        else:
            names = [p.name.value for p in (*method.params.posonly_params, *method.params.params)]
            if self.tree.class_of(method) is None or names[:1] != ["self"]:
                return []
            taken = parameters(method)
            positions = {name: position for position, name in enumerate(names[1:]) if name in taken}
            positions.update((p.name.value, -1) for p in method.params.kwonly_params if p.name.value in taken)
        if not positions:
            return []
        given = enumerate(itertools.takewhile(lambda a: not a.star, call.args))
        return [arg for position, arg in given
                if ((arg.keyword.value in positions) if arg.keyword is not None else position in positions.values())]

    def accumulated_parameters(self, method: cst.FunctionDef) -> Tuple[str, ...]:
        """The parameters of a method that it adds, with their graph, into a running sum its
        instance keeps, and that reach no backward there (`accumulated_arguments`)."""
        found = self._accumulated.get(id(method))
        if found is None:
            accumulations = self._accumulates_into_self(method)
            params = self._plain_parameters(method) if accumulations else []
            found = tuple(name for name in params if any(
                self._traces(value, at, _Trace(graph=True, through=frozenset({name}))) for at, value in accumulations)
                and not self.reaches_backward(method, {name}))
            self._accumulated[id(method)] = found
        return found

    def _plain_parameters(self, method: cst.FunctionDef) -> List[str]:
        """A method's parameters after `self` that it never binds again: one rebound
        (`val = float(val)`) no longer holds what the caller passed."""
        return [p.name.value for p in (*method.params.posonly_params, *method.params.params,
                                       *method.params.kwonly_params)[1:]
                if all(b.kind == "param" for b in self.scopes.bindings(method, p.name.value))]

    def _accumulates_into_self(self, method: cst.FunctionDef) -> List[Tuple[cst.CSTNode, cst.BaseExpression]]:
        """(statement, what it adds) for each running sum `method` keeps on its instance:
        `self.sum += val * n`, `self.totals[k] = self.totals[k] + v`, a moving average
        (`self.avg = self.momentum * self.avg + (1 - self.momentum) * val`); not one computed with
        grad off (a method decorated `@torch.no_grad()`: the sum records no graph), nor one that a backward
        of this module reads (`self.total.backward()`: gradient accumulation on purpose). Found
        once a method."""
        known = self._sums.get(id(method))
        if known is not None:
            return known
        found: List[Tuple[cst.CSTNode, cst.BaseExpression]] = []
        self._sums[id(method)] = found
        if self.regions.runs_without_grad(method):
            return found  # `@torch.no_grad() def update(...)`: its arithmetic records nothing
        for statement in self.tree.scope_nodes(method.body, cst.AugAssign, cst.Assign):
            kind = type(statement)
            if kind is cst.AugAssign and type(statement.operator) is cst.AddAssign:  # type: ignore[attr-defined]
                target, added = statement.target, statement.value  # type: ignore[attr-defined]
            elif kind is cst.Assign and len(statement.targets) == 1 and \
                    type(statement.value) is cst.BinaryOperation and type(statement.value.operator) is cst.Add:  # type: ignore[attr-defined]
                target, value = statement.targets[0].target, statement.value  # type: ignore[attr-defined]
                if type(target) is cst.Name or root_name(target) != "self":
                    continue  # (`x = x + self.block(x)`: no sum of the instance's; the cheap test first)
                if self._kept_of(value.left, target):
                    added = value.right
                elif self._kept_of(value.right, target):
                    added = value.left
                else:
                    continue
            else:
                continue
            if root_name(target) == "self" and type(target) is not cst.Name and \
                    self.regions.grad_enabled(statement) is not False and \
                    not self.attribute_backwarded(dotted_name(holder(target)) or ""):
                found.append((statement, added))
        return found

    def _kept_of(self, term: cst.BaseExpression, target: cst.BaseExpression) -> bool:
        """`term` is what `target` held, whole or scaled: the `self.avg` or `momentum * self.avg`
        of a running sum or a moving average (`self.avg = 0.9 * self.avg + 0.1 * val`)."""
        code = self.tree.module.code_for_node
        if type(term) is cst.BinaryOperation and type(term.operator) is cst.Multiply:  # type: ignore[attr-defined]
            return code(term.left) == code(target) or code(term.right) == code(target)  # type: ignore[attr-defined]
        return code(term) == code(target)

    def from_loss_inputs(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Whether `expr`, in a method of a loss module, is (or is computed from, undetached) what
        the module is handed to score: a model's outputs, which carry the graph its caller
        backwards (`loss_inputs`)."""
        func = self.tree.function_of(at)
        scored = self.loss_inputs(func) if func is not None else frozenset()
        return bool(scored) and self._traces(expr, at, _Trace(graph=True, through=scored))

    def loss_inputs(self, func: cst.FunctionDef) -> FrozenSet[str]:
        """The parameters of `func` that hold what a loss module scores (`_scored`), where
        `func` is the `forward` of a class named `...Loss`, or a method of it that `forward`
        hands them to (`self.update_memory_bank(output, idx)`). A class that inherits its
        `forward` and defines `compute_loss` is handed the outputs there (pytorch-metric-learning's
        losses)."""
        klass = self.tree.class_of(func)
        if klass is None or not klass.name.value.endswith("Loss"):
            return frozenset()
        forward = own_method(klass, "forward") or own_method(klass, "compute_loss")
        if forward is None:
            return frozenset()
        scored = self._scored(forward)
        if func is forward or not scored:
            return scored
        trace = _Trace(graph=True, through=scored)
        return frozenset().union(*(self._handed_through(call, func, call, trace) for call in self.scopes.calls_of(forward)
                                   if self.scopes.resolve(call) is func))

    def _scored(self, forward: cst.FunctionDef) -> FrozenSet[str]:
        """The parameter of a loss module's `forward` that holds the model's outputs: the first
        after `self` (`forward(self, output, target)`; targets, labels, indices and a MoCo
        loss's keys, computed without grad by its caller, come after it), when the loss it
        returns is computed from it, and it is annotated as nothing but a tensor."""
        params = forward.params.params[1:2]
        summary = self._summary(forward)
        return frozenset(
            p.name.value for p in params
            if (p.annotation is None or last_part(dotted_name(p.annotation.annotation)) == "Tensor")
            and summary.derivation.of({p.name.value}) & summary.returned)

    def kept_parameters(self, method: cst.FunctionDef) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
        """The parameters of a method that it appends to a list of its instance: still holding
        their graph, and as device tensors (for the summary other modules read)."""
        known = self._kept.get(id(method))
        if known is not None:
            return known
        appends = self._appends_to_self(method)
        params = self._plain_parameters(method) if appends else []
        found = [tuple(name for name in params if any(
            self._traces(value, at, _Trace(graph=graph, through=frozenset({name}))) for at, value in appends))
            for graph in (True, False)]
        self._kept[id(method)] = known = (found[0], found[1])
        return known

    def backwards_what_it_keeps(self, method: cst.FunctionDef, params: Set[str]) -> bool:
        """The method appends what it is handed in `params` to a list of its instance, which a
        backward of the module reads (`GradAccumulator.add_batch(loss)`, then
        `torch.stack(self.losses).mean().backward()`)."""
        return any(sources_of(value) & params and self.attribute_backwarded(dotted_name(call.func.value) or "")  # type: ignore[attr-defined]
                   for call, value in self._appends_to_self(method))

    def _appends_to_self(self, method: cst.FunctionDef) -> List[Tuple[cst.Call, cst.BaseExpression]]:
        """(call, what it appends) for each `self....append(value)` in `method` (found once a
        method: a module calls the same few methods many times)."""
        found = self._self_appends.get(id(method))
        if found is None:
            found = [(node, node.args[-1].value) for node in self.scopes.calls_of(method)
                     if type(node.func) is cst.Attribute and node.args
                     and node.func.attr.value in _APPENDING and root_name(node.func.value) == "self"]
            self._self_appends[id(method)] = found
        return found

    def _summary(self, scope: Scope) -> "_ScopeSummary":
        found = self._scope_summaries.get(id(scope))
        if found is None:
            found = _ScopeSummary(self, scope)
            self._scope_summaries[id(scope)] = found
        return found

    def derived_names(self, scope: Scope, names: Set[str]) -> Set[str]:
        """`names` and every name of `scope` bound from a value computed from them (any order)."""
        return self._summary(scope).derivation.of(names)

    @per_node
    def graphs_from_before(self, loop: cst.CSTNode) -> List[Binding]:
        """The bindings, above `loop`, of the names it reads that carry a graph (`emb =
        encoder(context)` above the loop, `decoder(emb, x)` in it; a list a comprehension fills
        with them, `targets = [embed_text(model, t) for t in texts]`, read whole): each
        iteration's backward goes through them again."""
        found: List[Binding] = []
        asked: Set[str] = set()
        for node in walk_scope(loop.body):  # type: ignore[attr-defined]
            if type(node) is not cst.Name or node.value in asked:  # type: ignore[attr-defined]
                continue
            asked.add(node.value)  # type: ignore[attr-defined]
            binds = self.scopes.bindings_seen(node.value, node)  # type: ignore[attr-defined]
            if not binds or any(self.tree.contains(loop, b.node) for b in binds):
                continue
            if self.carries_grad(node, node):
                found.extend(b for b in binds if b not in found)
            elif self._read_whole(node.value, loop):  # type: ignore[attr-defined]
                found.extend(b for b in binds if b not in found and type(b.value) is cst.ListComp
                             and self.carries_grad(b.value.elt, b.node))  # type: ignore[union-attr]
        return found

    def _read_whole(self, name: str, loop: cst.CSTNode) -> bool:
        """`loop` reads the list `name` whole somewhere (`for t in targets`, `f(targets)`), not
        only an item of it (`embedded[t]`: one element's graph an iteration, used once)."""
        return any(type(node) is cst.Name and node.value == name and not (  # type: ignore[attr-defined]
            type(self.tree.parent(node)) is cst.Subscript and self.tree.parent(node).value is node)  # type: ignore[attr-defined]
            for node in walk_scope(loop.body))  # type: ignore[attr-defined]

    def reaches_backward(self, scope: Scope, names: Set[str]) -> bool:
        """Whether anything derived from `names` in `scope` is backwarded there, or handed to a
        function of this module that backwards."""
        if names & self.roles.backwarded_attributes:
            return True  # `self.total.backward()`, in any method
        summary = self._summary(scope)
        tainted = summary.derivation.of(names)
        return bool(summary.backwarded & tainted or summary.handed_to_backward & tainted)

    def leaves_scope(self, scope: Scope, names: Set[str], besides: Optional[cst.CSTNode] = None) -> bool:
        """Whether anything derived from `names` is returned or yielded from `scope`, or stored
        into an attribute or item (where other code may backward it), by a statement other than
        `besides` (the accumulation `ema[k] = 0.9 * ema[k] + 0.1 * loss` stores into itself)."""
        summary = self._summary(scope)
        tainted = summary.derivation.of(names)
        return bool(summary.returned & tainted) or any(
            assign is not besides and sources & tainted for assign, sources in summary.stores)

    def stores_from(self, scope: Scope, names: Set[str]) -> bool:
        """Whether anything derived from `names` is stored into an attribute or item in `scope`."""
        summary = self._summary(scope)
        tainted = summary.derivation.of(names)
        return any(sources & tainted for _, sources in summary.stores)

    def callers_backward(self, func: Optional[cst.FunctionDef]) -> bool:
        """Whether a call of `func` in this module backwards what it returns
        (`forward_test(model, x).sum().backward()`, `loss = f(x); loss.backward()`)."""
        return func is not None and any(self.feeds_backward(site) for site in self.scopes.call_sites(func))

    def feeds_backward(self, node: cst.CSTNode) -> bool:
        """Whether what `node` computes is backwarded: in the statement that holds it
        (`criterion(model(x), y).backward()`), or through a name that statement binds, which
        reaches a backward of its scope (`loss = criterion(model(x), y)`, then `loss.backward()`)."""
        statement = self.tree.statement_around(node)
        if statement is None:
            return False
        if any(type(inner) is cst.Call and self.roles.backward_of(inner) is not None  # type: ignore[arg-type]
               for inner in self.tree.walk_scope(statement)):
            return True
        bound = set()
        for small in (statement.body if type(statement) is cst.SimpleStatementLine else ()):
            if type(small) is cst.Assign:
                bound |= {name for t in small.targets for name in target_names(t.target)}
        return bool(bound) and self.reaches_backward(self.tree.scope_of(node), bound)

    def reset_in_iteration(self, loop: cst.CSTNode, name: str, at: cst.CSTNode) -> bool:
        """Whether `name` is surely rebound (not by `+=` or an append) in `loop`'s body before `at`:
        then what it holds at `at` does not outlive the iteration (`loop` may be a function: a
        call of it)."""
        position = self.tree.order(at)
        at_ancestors = {id(a) for a in self.tree.ancestors(at)}
        for bind in self.scopes.bindings(self.tree.scope_of(at), name):
            if bind.kind in ("aug", "append", "param", "def") or bind.node is at:
                continue
            if self.tree.order(bind.node) >= position or not self.tree.contains(loop.body, bind.node):  # type: ignore[attr-defined]
                continue
            block = self.tree.dominating_block(bind.node)
            if block is not None and id(block) in at_ancestors:
                return True
        return False

    def reset_each_step(self, at: cst.CSTNode, name: str) -> bool:
        """Whether `name` is surely rebound (as `reset_in_iteration`) before `at` within one
        optimizer step: in the iteration of the innermost loop around `at` that steps an optimizer
        (`for batch in loader: d = 0; for head in heads: d += ...; optimizer.step()`), or, where no
        loop around `at` steps one, in a call of its function that steps one outside its loops
        (DomainBed's `update(minibatches)`: `total = 0`, a loop over the environments, then
        `opt.step()`). What it holds at `at` then belongs to one step: no step's graph is linked to
        the next one's. A loop around `at` that steps only in a loop nested in it (an epoch loop)
        runs many steps an iteration: a reset there is no reset per step."""
        tree, roles = self.tree, self.roles
        for loop in tree.loops_around(at):
            steps = roles.steps_in(loop)
            if any(self._steps_in_own_body(loop, step.call, site) for step, site in steps):
                return self.reset_in_iteration(loop, name, at)
            if steps:
                return False
        func = tree.function_of(at)
        return func is not None and any(self._steps_in_own_body(func, step.call, site)
                                        for step, site in roles.steps_in(func.body)) \
            and self.reset_in_iteration(func, name, at)

    def _steps_in_own_body(self, owner: cst.CSTNode, call: cst.Call, site: cst.Call) -> bool:
        """The step `call`, made at `site` (itself, or a call of a helper that makes it in no loop
        of its own), runs once per iteration of the loop `owner`, or, for a function, outside its
        loops."""
        tree = self.tree
        if call is not site and tree.loops_around(call):
            return False
        around = tree.loops_around(site)
        return around[:1] == [owner] if type(owner) is not cst.FunctionDef else not around

    def hands_graph_away(self, loop: cst.CSTNode) -> bool:
        """A graph-carrying value passed to a call that may backward it (`trainer.update(loss)`),
        not one made under no_grad (`with torch.no_grad(): idx = quantizer.lookup(z)`): code that
        turns grad off around a call does not train in it."""
        return any(self.may_backward(call) and any(self.carries_grad(arg.value, call) for arg in call.args)
                   for call, _ in self.calls.calls_in(loop, follow=False))

    def handed_to_backward(self, scope: Scope, names: Set[str]) -> bool:
        """Whether something derived from `names` in `scope` is passed to a call that may
        backward it (`balancer.backward(terms)`, `trainer.update(total)`)."""
        summary = self._summary(scope)
        tainted = summary.derivation.of(names)
        return any(self.may_backward(call) for name in tainted for call in summary.calls_passed(name))

    def kept_from_backward(self, scope: Scope, names: Set[str], returns: bool = False) -> bool:
        """Whether nothing derived from `names` in `scope` can reach a backward: none is
        backwarded there, returned (unless `returns`: the caller knows what the scope returns
        carries no graph), yielded or stored, and every call it is passed to only reads it
        (`_only_reads`): no helper, of this module or another, that might backward it or keep
        it (`learner.update(out)`, `collect(out)`). What they hold is read (for a metric, a
        log) and dropped."""
        if self.reaches_backward(scope, names) or \
                (self.stores_from(scope, names) if returns else self.leaves_scope(scope, names)):
            return False
        summary = self._summary(scope)
        tainted = summary.derivation.of(names)
        calls = {id(call): call for name in tainted for call in summary.calls_passed(name)}
        return all(self._only_reads(call, scope, tainted) for call in calls.values())

    def _only_reads(self, call: cst.Call, scope: Scope, tainted: Set[str]) -> bool:
        """`call` reads what it is passed and keeps nothing of its graph: it runs under no_grad,
        is torch's, a builtin that reads (`print`, `float`, `len`), a forward or a loss (what
        they return is followed as derived), a method of the value itself (`out.argmax(-1)`), a
        logging method, or an append to a list of this scope (the list is followed as derived)."""
        region = self.regions.region_at(call)
        if region is not None and region.grad_enabled is False:
            return True
        handed = [a.value for a in call.args if sources_of(a.value) & tainted]
        if handed and all(self._detached_at(value, call) for value in handed):
            return True  # `preds = preds.detach()`, then `task.add(preds)`: the name no longer holds the graph
        func = call.func
        if type(func) is cst.Name and func.value in _READING_BUILTINS and self.names.qualified_name(func) is None:
            return True
        if (self.names.call_name(call) or "").startswith("torch.") or self.roles.is_forward(call) or \
                self.roles.is_loss(call):
            return True
        if type(func) is not cst.Attribute:
            return False
        if func.attr.value in _LOGGING_METHODS or sources_of(func.value) & tainted:
            return True
        receiver = func.value
        return func.attr.value in _APPENDING and type(receiver) is cst.Name and \
            any(b.kind == "assign" for b in self.scopes.bindings(scope, receiver.value))  # type: ignore[attr-defined]

    def _detached_at(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """`value` is a name whose binding in effect at `at` surely carries no graph (the last
        of `preds = model(x)`, `preds = preds.detach()`), whatever it held before."""
        if type(value) is not cst.Name:
            return False
        binds = self.scopes.in_effect(value.value, at)  # type: ignore[attr-defined]
        return bool(binds) and all(b.kind == "assign" and b.whole and b.value is not None and
                                   self.graphless(b.value, b.node) for b in binds)

    def may_backward(self, call: cst.Call) -> bool:
        """Whether `call` may backward a graph passed to it: not when it is made under no_grad,
        is a builtin, a function of this module (followed instead), a call of a known import
        (torch's, a library's), a forward, a loss, a torch module without parameters
        (`cos(a, b)`), an instance of a project class that never learns, or its method, a
        logging or container method, a metric's `add_batch(predictions=...,
        references=...)`, a method of a value that carries the graph itself (`out.sum()`), or a
        model's method or part run for its value, not to train (`_computes`:
        `decoder.attention(encoder_out, h)`)."""
        region = self.regions.region_at(call)
        if region is not None and region.grad_enabled is False:
            return False
        func = call.func
        if type(func) is cst.Name and (func.value in _HARMLESS_FUNCTIONS or self.scopes.resolve(call)):
            return False
        if self.names.call_name(call) is not None or self.roles.is_forward(call) or self.roles.is_loss(call) or \
                self.roles.receivers.is_parameter_free(func) or self._of_a_class_that_never_learns(call):
            return False
        return not (type(func) is cst.Attribute and (
            func.attr.value in _HARMLESS_METHODS or self.carries_grad(func.value, call) or
            self._computes(call) or func.attr.value == "add_batch" and all(
                arg.keyword is not None and arg.keyword.value in _METRIC_INPUTS for arg in call.args)))

    def _of_a_class_that_never_learns(self, call: cst.Call) -> bool:
        """`call` calls an instance of a project class of another module, or a method of one
        (`valid_loss(batch, outputs)` where `valid_loss = LossCompute(...)`), and no method of
        that class or of its project bases backwards, steps or asks for gradients."""
        if not self._imports_project:
            return False
        func = call.func
        receiver = func.value if type(func) is cst.Attribute else func  # type: ignore[attr-defined]
        klass = self.scopes.imported_class_of(receiver, lambda name: self._imported_name(name, call))
        return klass is not None and self.project.knows(klass) and not self.project.learns(klass)

    def _computes(self, call: cst.Call) -> bool:
        """`call` is a model's method or part run for its value (`awe, _ = decoder.attention(enc,
        h)`, `decoder.sigmoid(decoder.f_beta(h))`, `h, c = decoder.init_hidden_state(enc)`), with a
        name that does not speak of training (`TRAINING_METHOD`): it computes, and backwards
        nothing handed to it. A call whose result is dropped is made for what it does (a
        test-time adaptation's `model.adapt(out)`)."""
        func = call.func
        return type(self.tree.parent(call)) is not cst.Expr and \
            not TRAINING_METHOD.search(func.attr.value) and self.roles.receivers.is_model(func.value)  # type: ignore[attr-defined]

    def backwarded_in(self, value: cst.BaseExpression, loop: cst.CSTNode) -> bool:
        """Whether `value` is (built from) something `loop` already backwards itself: its graph
        is spent, so handing it on cannot be for another backward."""
        names = sources_of(value)
        return any(b.names & names for b, site in self.roles.backwards_in(loop, follow=False))

    def attribute_backwarded(self, dotted: str) -> bool:
        """Whether an attribute (`self.total`) reaches a backward anywhere in the module: read in
        the backwarded expression, or into a name that some backward of its scope uses."""
        for backward in self.roles.backwards:
            if backward.loss is not None and self._mentions(backward.loss, dotted):
                return True
        for assign in self.scopes.assigns:
            if not self._mentions(assign.value, dotted) or self.graphless(assign.value, assign):
                continue
            names = {name for t in assign.targets for name in target_names(t.target)}
            if names and self.reaches_backward(self.tree.scope_of(assign), names):
                return True
        return False

    @staticmethod
    def _mentions(expr: cst.CSTNode, dotted: str) -> bool:
        """`expr` reads the attribute `dotted` with its graph: not only inside what it detaches
        (`torch.cat(self.values).detach()`)."""
        stack = [expr]
        attr = dotted.rpartition(".")[2]  # (tested first: no dotted name built for every attribute read)
        while stack:
            node = stack.pop()
            if type(node) is cst.Attribute and node.attr.value == attr and dotted_name(node) == dotted:  # type: ignore[attr-defined, arg-type]
                return True
            if type(node) is cst.Call and type(node.func) is cst.Attribute and \
                    node.func.attr.value in DETACHING_METHODS:  # type: ignore[attr-defined]
                stack.extend(arg.value for arg in node.args)  # type: ignore[attr-defined]
                continue
            stack.extend(children(node))
        return False

    def origins(self, backward: Backward) -> Tuple[List[cst.CSTNode], List[cst.FunctionDef]]:
        """What the backwarded value is computed from, in its function: the binding statements in
        effect that it comes from (transitively) and the functions of this module their values call."""
        if backward.loss is None:
            return [], []
        nodes: Dict[int, cst.CSTNode] = {}
        functions: Dict[int, cst.FunctionDef] = {}
        seen: Set[Tuple[str, int]] = set()
        values: List[Tuple[cst.CSTNode, cst.CSTNode]] = [(backward.loss, backward.call)]
        while values:
            value, at = values.pop()
            for call in (n for n in expression_nodes(value) if type(n) is cst.Call):
                target = self.scopes.resolve(call)
                if target is not None:
                    functions.setdefault(id(target), target)
            for name in sources_of(value):
                if (name, id(at)) in seen:
                    continue
                seen.add((name, id(at)))
                for bind in self.scopes.in_effect(name, at):
                    if bind.value is not None and bind.kind != "param":
                        nodes.setdefault(id(bind.node), bind.node)
                        values.append((bind.value, bind.node))
        return list(nodes.values()), list(functions.values())

    def accumulates_grad(self, backward: Backward) -> bool:
        """A backward that adds into `.grad`, of something that surely is a loss (not
        `torch.autograd.grad`, not `planner.backward()`)."""
        if backward.kind == "autograd":  # not torch.distributed.autograd: it fills its context, not .grad
            return self.names.call_name(backward.call) in AUTOGRAD_BACKWARD
        if backward.kind in ("scaled", "owner"):
            return True
        if backward.kind != "method" or backward.loss is None:
            return False
        if self.carries_grad(backward.loss, backward.call):
            return True
        loss = backward.loss
        while type(loss) is cst.Call and type(loss.func) is cst.Attribute:  # loss.mean().backward()
            loss = loss.func.value
        return type(loss) is cst.Name and "loss" in loss.value.lower()


class _ScopeSummary:
    """What the questions about one scope's values need, gathered once per scope: each question
    (one per accumulator or container a rule meets) then costs what its names reach, where
    scanning the scope's backwards, calls and assignments would cost the scope's size."""

    def __init__(self, values: Values, scope: Scope) -> None:
        scopes, roles = values.scopes, values.roles
        self.derivation = Derivation(scopes.flows(scope))
        # names a backward there backwards
        self.backwarded: FrozenSet[str] = frozenset().union(*(b.names for b in roles.backwards_of(scope)))
        # names passed to a function of this module that backwards
        handed: Set[str] = set()
        for call in scopes.calls_of(scope):
            target = scopes.resolve(call)
            if target is not None and roles.backwards_in(target.body):
                for arg in call.args:
                    handed |= sources_of(arg.value)
        self.handed_to_backward = frozenset(handed)
        self.returned: FrozenSet[str] = frozenset().union(*(sources_of(v) for v in scopes.returned(scope)))
        self._scope, self._scopes = scope, scopes
        self._calls_passed: Optional[Dict[str, List[cst.Call]]] = None
        self.stores: List[Tuple[cst.Assign, FrozenSet[str]]] = [  # into an attribute or item, and what from
            (assign, frozenset(sources_of(assign.value))) for assign in scopes.assigns_of(scope)
            if any(_stores_into_container(t.target) for t in assign.targets)]

    def calls_passed(self, name: str) -> List[cst.Call]:
        """The calls of the scope that are passed something made from `name` (`f(x)`, `f(y=x[0])`):
        an index built on the first question, where asking every call would cost the scope's size
        for each name."""
        if self._calls_passed is None:
            self._calls_passed = {}
            for call in self._scopes.calls_of(self._scope):
                for source in set().union(*(sources_of(arg.value) for arg in call.args)):
                    self._calls_passed.setdefault(source, []).append(call)
        return self._calls_passed.get(name, [])


def _annotated_tensorless(func: cst.FunctionDef) -> bool:
    """`func` is annotated to return no tensor (llama2.c's `Tokenizer.encode(...) -> List[int]`,
    whose body calls SentencePiece's `sp_model.encode`, which reads like a model's encoder)."""
    return func.returns is not None and _holds_no_tensor(func.returns.annotation)


def _holds_no_tensor(annotation: cst.BaseExpression) -> bool:
    """Whether a value of the type `annotation` holds no tensor: one of `_PLAIN_TYPES`, or a
    container of them; `-> Tensor`, `-> List[torch.Tensor]`, `-> float` and anything else may."""
    if type(annotation) is cst.BinaryOperation and type(annotation.operator) is cst.BitOr:
        return _holds_no_tensor(annotation.left) and _holds_no_tensor(annotation.right)
    if type(annotation) is cst.Subscript:
        return last_part(dotted_name(annotation.value)) in _CONTAINER_TYPES and all(
            type(element.slice) is cst.Index and _holds_no_tensor(element.slice.value)
            for element in annotation.slice)
    return dotted_name(annotation) in _PLAIN_TYPES or type(annotation) is cst.Ellipsis

