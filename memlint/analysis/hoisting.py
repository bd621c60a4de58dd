"""Hoisting: GPU work that computes the same value every time it runs, and where it can move.

A statement `name = <expr>` can move out of a loop (or out of a module's `forward`, into
`__init__`) when computing it again would give the same value and nothing can tell that it
ran once:

- `expr` is pure and puts its result on a device (memlint.analysis.purity), directly, or
  through a pure helper of this module (a function that only binds pure values to local names
  and returns one) called with pure arguments;
- every input is invariant: no name it reads is rebound in the loop or changed in place there
  or in the functions of this module the loop calls; no attribute it reads is stored there or
  reachable by a call on its owner that cannot be followed; nothing is set that changes what a
  factory makes (`torch.set_default_dtype`, `torch.cuda.set_device`);
- every value it uses *as a tensor* (not as a size, a device or a flag) is itself made by
  pure factories before the loop (a parameter, a model's weight, an optimizer's state or a
  function argument may require grad or be changed by `step()`: never invariant);
- `name` is bound once in the loop, by this statement, which runs unconditionally (directly in
  the loop body: no `if`, `with` or `try` around it that hoisting would leave), and its value
  never outlives the iteration nor is changed in place (memlint.analysis.loops: `escapes`;
  names computed from it are not changed in place, not passed to `out=` / `inplace=True`).

Asked as `facts.hoisting`: `in_loop(statement, loop)` and `in_forward(statement)` (`Hoistable`,
or None). Asked by MEM102. What a helper of this module computes, `helper(func)`, whether it
returns a tensor it made on the host and only wrote into, `host_buffer(func)`, or computed there
from a factory's tensor, `host_computed(func)`, and what is
written into a tensor between its making and its move, `filled(name, made, until)`, are asked
by MEM103 too (a tensor filled on the host, then moved).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.calls import CallGraph
from memlint.analysis.dataflow import binding_targets, block_flow, parameter_names, stored_attributes
from memlint.analysis.loops import Loop, LoopFacts, few_literal
from memlint.analysis.purity import Computation, Input, Purity
from memlint.analysis.receivers import Receivers
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import TreeIndex, dotted_name, is_docstring, last_part, walk

# Calls that change what a factory makes or where `.cuda()` puts it.
_CHANGES_FACTORIES = frozenset({
    "torch.set_default_dtype", "torch.set_default_tensor_type", "torch.set_default_device",
    "torch.cuda.set_device", "torch.set_default_device",
})
_MAX_DEPTH = 4
# Factories whose positional arguments are the shape (`torch.full`: its first one)
_SHAPED_BY_ARGUMENTS = frozenset({"torch.eye", "torch.zeros", "torch.ones", "torch.empty", "torch.full",
                                  "torch.rand", "torch.randn"})
_TINY_TABLE = 4096  # elements: a table rebuilt per forward below this is one small kernel, not worth a buffer
_FILLS = frozenset({"torch.zeros", "torch.ones", "torch.empty", "torch.full"})
_PER_SAMPLE = 16  # values per sample: a fill of a batch size and literal sizes up to this holds labels
_BATCH_SIZE = re.compile(r"^(batch_?size|bs|b|mini_?batch_?size|micro_?batch_?size|n_?samples|num_?samples)$",
                         re.IGNORECASE)
# Calls that place or convert a tensor, and keep its size
_PLACING = frozenset({"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "bool", "long", "int", "type"})
# Builtins that never write into their arguments.
_HARMLESS_BUILTINS = frozenset({"print", "len", "range", "int", "float", "bool", "str", "repr", "isinstance",
                                "min", "max", "abs", "round", "enumerate", "zip", "tuple", "list", "sum"})


@dataclass(frozen=True)
class Hoistable:
    statement: cst.SimpleStatementLine
    name: str  # the name it binds
    value: cst.BaseExpression
    computation: Computation
    helper: Optional[cst.FunctionDef]  # the pure helper the value is computed in, if any


@dataclass(frozen=True)
class Helper:
    """What a function of this module computes, by the purity model."""

    pure: bool  # it only binds pure values to local names and returns one
    placed: bool  # what it returns is on a device (a `device=` it is given counts)
    tensor_params: FrozenSet[str]  # parameters it uses as tensors
    free: Tuple[Input, ...]  # what it reads besides its parameters and locals
    fresh: bool  # every tensor it computes comes from its own factories


@dataclass(frozen=True)
class HostBuffer:
    """A tensor a helper makes on the host and only writes into (`Hoisting.host_buffer`)."""

    factory: str  # the torch factory that makes it
    writes: Tuple[cst.BaseExpression, ...]  # the values written into it


def single_assignment(statement: cst.CSTNode) -> Optional[Tuple[str, cst.Assign]]:
    """`name = value` alone on its line: (name, the Assign)."""
    if not type(statement) is cst.SimpleStatementLine or len(statement.body) != 1:
        return None
    assign = statement.body[0]
    if not type(assign) is cst.Assign or len(assign.targets) != 1 or \
            not type(assign.targets[0].target) is cst.Name:
        return None
    return assign.targets[0].target.value, assign


# A name that speaks of a device: code that may place what it makes there (`device`, `dev`, `cuda`).
_SPEAKS_OF_A_DEVICE = re.compile(r"(^|_)(device|dev|cuda|gpu)s?($|_)", re.IGNORECASE)


class Hoisting:
    """Which statements compute loop-invariant GPU work (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes, calls: CallGraph,
                 receivers: Receivers, purity: Purity, loop_facts: Callable[[Loop], LoopFacts]) -> None:
        self.names = names
        self.tree = tree
        self.scopes = scopes
        self.calls = calls
        self.receivers = receivers
        self.purity = purity
        self._loop_facts = loop_facts
        self._helpers: Dict[int, Helper] = {}
        self._changes: Dict[int, Tuple[FrozenSet[str], FrozenSet[str], bool]] = {}
        self._settled: Dict[int, FrozenSet[str]] = {}  # id(class) -> its attributes set only in __init__

    # -- in a loop ---------------------------------------------------------------------------
    def in_loop(self, statement: cst.CSTNode, loop: Loop) -> Optional[Hoistable]:
        """`statement`, directly in `loop`'s body, as work that can move before the loop."""
        found = single_assignment(statement)
        if found is None or self.tree.parent(statement) is not loop.body:
            return None
        name, assign = found
        value = assign.value
        if self._small(value, in_forward=False):
            return None
        computation, helper = self._computation(value)
        if computation is None or not computation.pure or not self._placed(computation, loop):
            return None  # not GPU work, or work on tensors of unknown place: nothing known to save
        facts = self._loop_facts(loop)
        rebound, stored, opaque = self._changed_in(loop, facts)
        if opaque:
            return None
        if not all(self._invariant_input(item, facts, rebound, stored, loop) for item in computation.inputs):
            return None
        if facts.bindings_of(name) != 1 or facts.escapes(name) or self._changed_through(name, facts):
            return None
        return Hoistable(statement, name, value, computation, helper)  # type: ignore[arg-type]

    def _placed(self, computation: Computation, loop: Loop) -> bool:
        """The work puts its result on a device, itself or through a tensor it is computed from."""
        return computation.placed or any(
            item.as_tensor and "." not in item.dotted and self._made_by_factories(item.dotted, loop, 0)
            for item in computation.inputs)

    def _computation(self, value: cst.BaseExpression) -> Tuple[Optional[Computation], Optional[cst.FunctionDef]]:
        """What `value` computes: itself, or a call of a pure helper with pure arguments."""
        computation = self.purity.of(value)
        if computation.pure and computation.placed or not type(value) is cst.Call:
            return computation, None
        helper = self.scopes.resolve(value)
        if helper is None or any(arg.star or arg.keyword is not None for arg in value.args):
            return None, None
        summary = self.helper(helper)
        if not summary.pure or not summary.placed:
            return None, None
        params = [p.name.value for p in helper.params.params]
        if type(value.func) is cst.Attribute:  # a method: `self` is bound by the call
            params = params[1:]
        if len(value.args) > len(params) or type(helper.params.star_arg) is cst.Param or \
                helper.params.star_kwarg is not None or helper.params.kwonly_params or \
                any(p.default is not None and not Purity.constant(p.default) for p in helper.params.params):
            return None, None
        inputs: List[Input] = list(summary.free)
        for param, arg in zip(params, value.args):
            argument = self.purity.of(arg.value)
            if not argument.pure:
                return None, None
            tensor = param in summary.tensor_params
            inputs += [Input(i.node, i.dotted, i.as_tensor and tensor) for i in argument.inputs]
        return Computation(True, False, False, True, (), tuple(inputs)), helper

    def helper(self, func: cst.FunctionDef) -> Helper:
        """What `func` computes: whether it only binds pure values to local names and returns one."""
        found = self._helpers.get(id(func))
        if found is not None:
            return found
        impure = Helper(False, False, frozenset(), (), False)
        self._helpers[id(func)] = impure  # recursion is not pure
        body = func.body
        if not type(body) is cst.IndentedBlock or func.decorators or func.asynchronous is not None:
            return impure
        params = parameter_names(func.params)
        locals_: Set[str] = set()
        placed = False
        tensor_params: Set[str] = set()
        free: List[Input] = []
        factories = False
        statements = list(body.body)
        if statements and is_docstring(statements[0]):
            statements = statements[1:]
        if not statements:
            return impure
        for position, statement in enumerate(statements):
            last = position == len(statements) - 1
            small = statement.body[0] if type(statement) is cst.SimpleStatementLine and \
                len(statement.body) == 1 else None
            if last and type(small) is cst.Return and small.value is not None:
                value: cst.BaseExpression = small.value
                target = None
            elif not last and type(small) is cst.Assign and len(small.targets) == 1 and \
                    type(small.targets[0].target) is cst.Name:
                value, target = small.value, small.targets[0].target.value
            else:
                return impure
            computation = self.purity.of(value)
            if not computation.pure:
                return impure
            placed = placed or computation.placed
            factories = factories or bool(computation.factories)
            for item in computation.inputs:
                root = item.dotted.split(".")[0]
                if root in locals_:
                    continue
                if root in params and not (root == "self" and "." in item.dotted):
                    if item.as_tensor:
                        tensor_params.add(root)
                    if self.purity.is_device(item.node) and item.dotted == root:
                        placed = True  # `device=device`: placed where the caller says
                    continue
                free.append(item)
            if target is not None:
                if target in params:
                    return impure
                locals_.add(target)
        fresh = factories and not tensor_params and not any(item.as_tensor for item in free)
        summary = Helper(True, placed, frozenset(tensor_params), tuple(free), fresh)
        self._helpers[id(func)] = summary
        return summary

    def host_buffer(self, func: cst.FunctionDef) -> Optional[HostBuffer]:
        """The tensor `func` returns, when it makes that tensor on the host (`weights =
        torch.zeros(b, t, s)`, no device) and only writes into it before returning it
        (`weights[i, :t, :s] = w`, `weights.fill_(0)`, in loops too). None otherwise (the
        tensor read, handed on, aliased or bound again; another return)."""
        body = func.body
        statements = body.body if type(body) is cst.IndentedBlock else ()
        last = statements[-1] if statements else None
        if last is None or type(last) is not cst.SimpleStatementLine or len(last.body) != 1 or \
                type(last.body[0]) is not cst.Return or type(last.body[0].value) is not cst.Name or \
                any(type(d.decorator) is not cst.Name or d.decorator.value not in ("staticmethod", "classmethod")
                    for d in func.decorators):
            return None
        returned = last.body[0].value
        name = returned.value
        binds = self.scopes.bindings(func, name)
        if len(binds) != 1 or binds[0].kind != "assign" or not binds[0].whole or \
                type(binds[0].value) is not cst.Call or \
                not any(self.tree.parent(binds[0].node) is statement for statement in statements):
            return None
        made = binds[0].value
        factory = self.purity.factory(made) if self.purity.host_made(made) is not None else None
        if factory is None:
            return None
        writes: List[cst.BaseExpression] = []
        for node in self.tree.walk_scope(body):
            kind = type(node)
            if kind is cst.Return and node is not last.body[0]:
                return None
            if kind is cst.Name and node.value == name and node is not returned:  # type: ignore[attr-defined]
                written = self._written_into(node, binds[0].node)  # type: ignore[arg-type]
                if written is None:
                    return None
                writes.extend(written)
        return HostBuffer(factory, tuple(writes))

    def host_computed(self, func: cst.FunctionDef) -> Optional[str]:
        """The torch factory that makes, on the host, the tensor `func` returns: its one return
        reads names that its own assignments derive from that factory's tensor, and nothing in it
        speaks of a device (no `.to()`, `.cuda()`, `device=`, no name of a device), so what it
        computes stays on the CPU, or the function would fail mixing devices (SwinIR's
        `calculate_mask`: `img_mask = torch.zeros((1, H, W, 1))`, filled over a few spelled
        slices, windowed and masked, returned as `attn_mask`). Not where a loop of it runs more
        than a few spelled times (filled item by item, the host is the cheaper place), nor where
        a call is made for its effect (`fill(w, lens)` may do just that)."""
        returned = self.scopes.returned(func)
        if len(returned) != 1 or func.asynchronous is not None:
            return None
        for node in self.tree.walk_scope(func.body):
            kind = type(node)
            if kind in (cst.For, cst.While) and not few_literal(node, self.scopes) or \
                    kind is cst.Expr and type(node.value) is cst.Call or \
                    kind is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in ("to", "cuda") or \
                    kind is cst.Arg and node.keyword is not None and node.keyword.value == "device" or \
                    kind is cst.Name and _SPEAKS_OF_A_DEVICE.search(node.value):  # type: ignore[attr-defined]
                return None
        seen: Set[str] = set()
        pending = [node.value for node in walk(returned[0]) if type(node) is cst.Name]  # type: ignore[attr-defined]
        while pending:
            name = pending.pop()
            seen.add(name)
            for bind in self.scopes.bindings(func, name):
                value = bind.value
                if bind.kind not in ("assign", "aug") or value is None:
                    continue
                if type(value) is cst.Call and self.purity.host_made(value) is not None:
                    return self.purity.factory(value) or self.names.call_name(value)
                pending.extend(node.value for node in walk(value) if type(node) is cst.Name  # type: ignore[attr-defined]
                               and node.value not in seen and self.scopes.bindings(func, node.value))  # type: ignore[attr-defined]
        return None

    def filled(self, name: str, made: cst.CSTNode, until: cst.CSTNode) -> List[cst.BaseExpression]:
        """The values written into the tensor that `made` binds to `name`, after `made` and
        before `until` in their function, when it is filled item by item: written in a loop that
        `made` is not in (`for i, hyp in enumerate(hyps): buf[i] = len(hyp)`); else none (one
        `fill_` or one write before a move would be one launch on the device too)."""
        tree = self.tree
        start, end = tree.order(made), tree.order(until)
        outer = tree.loops_around(made)[:1]
        writes: List[cst.BaseExpression] = []
        in_loop = False
        for node in tree.walk_scope(tree.scope_of(until)):
            if type(node) is cst.Name and node.value == name and start < tree.order(node) < end:  # type: ignore[attr-defined]
                written = self._written_into(node, made) or []  # type: ignore[arg-type]
                writes.extend(written)
                in_loop = in_loop or bool(written) and tree.loops_around(node)[:1] != outer
        return writes if in_loop else []

    def _written_into(self, name: cst.Name, made: cst.CSTNode) -> Optional[List[cst.BaseExpression]]:
        """What is written into the tensor `name` here: `name[...] = v`, `name[...] += v`,
        `name.fill_(v)`, `name[...].zero_()` (their values), or nothing when `name` is the
        target of its own binding `made`; None when `name` is used another way."""
        parent = self.tree.parent(name)
        if type(parent) is cst.AssignTarget:
            return [] if self.tree.parent(parent) is made else None
        node: cst.CSTNode = name
        while type(parent) is cst.Subscript and parent.value is node:  # type: ignore[attr-defined]
            node, parent = parent, self.tree.parent(parent)
        if node is not name and type(parent) is cst.AssignTarget:
            return [self.tree.parent(parent).value]  # type: ignore[union-attr]
        if node is not name and type(parent) is cst.AugAssign and parent.target is node:  # type: ignore[attr-defined]
            return [parent.value]  # type: ignore[attr-defined]
        if type(parent) is cst.Attribute and parent.value is node and parent.attr.value.endswith("_") and \
                not parent.attr.value.startswith("_"):  # type: ignore[attr-defined]
            call = self.tree.parent(parent)
            if type(call) is cst.Call and call.func is parent and type(self.tree.parent(call)) is cst.Expr:  # type: ignore[attr-defined]
                return [arg.value for arg in call.args]  # type: ignore[attr-defined]
        return None

    def _changed_in(self, loop: Loop, facts: LoopFacts) -> Tuple[FrozenSet[str], FrozenSet[str], bool]:
        """(names rebound or changed in place, attribute names stored, whether something changes
        what factories make) in the loop and the functions of this module it calls."""
        found = self._changes.get(id(loop))
        if found is not None:
            return found
        rebound: Set[str] = set()
        stored: Set[str] = set()
        opaque = facts.flow.dynamic
        for root in [loop.body, *(f.body for f in self.calls.functions_reached(loop))]:
            flow = block_flow(root)
            opaque = opaque or flow.dynamic
            rebound |= flow.mutated
            for node in walk(root):
                kind = type(node)
                if kind is cst.Assign or kind is cst.AugAssign or kind is cst.AnnAssign:
                    for target in binding_targets(node):
                        stored |= stored_attributes(target)
                elif kind is cst.Call and self.names.call_name(node) in _CHANGES_FACTORIES:
                    opaque = True
                elif kind is cst.With and any(
                        type(i.item) is cst.Call and self.names.call_name(i.item) == "torch.cuda.device"
                        for i in node.items):
                    opaque = True
        for function in self.calls.functions_reached(loop):  # a helper's globals and `global` names
            rebound |= {name for name in _globals_declared(function)}
        found = (frozenset(rebound), frozenset(stored), opaque)
        self._changes[id(loop)] = found
        return found

    def _invariant_input(self, item: Input, facts: LoopFacts, rebound: FrozenSet[str],
                         stored: FrozenSet[str], at: cst.CSTNode) -> bool:
        """`item` cannot change in the loop; a tensor it uses is made by factories before it."""
        parts = item.dotted.split(".")
        root = parts[0]
        if facts.changes(root) or root in rebound:
            return False
        if any(part in stored for part in parts[1:]):
            return False
        if len(parts) > 1 and self._opaque_calls_on(root, facts):
            return False
        if len(parts) > 1 and self._model_like(parts):
            return False  # a model's weights and state change with every optimizer step
        if not item.as_tensor:
            return True
        if len(parts) > 1 or self._handed_to_unknown(root, facts):
            return False  # a call that is not known to be pure may write into it
        return self._made_by_factories(root, at, 0) is not None

    def _handed_to_unknown(self, name: str, facts: LoopFacts) -> bool:
        """`name` is an argument of a call in the loop that may write into it: a torch function
        that works in place (`torch.nn.init.normal_(w)`, `out=`, `inplace=True`) or a function
        that cannot be followed (`fill(w)`)."""
        for call in facts.flow.calls:
            if not any(type(a.value) is cst.Name and a.value.value == name for a in call.args):
                continue
            qualified = self.names.call_name(call)
            if qualified is not None:
                if qualified.endswith("_") or any(
                        a.keyword is not None and a.keyword.value in ("out", "inplace") for a in call.args):
                    return True
            elif not (type(call.func) is cst.Name and call.func.value in _HARMLESS_BUILTINS):
                return True
        return False

    def _made_by_factories(self, name: str, at: cst.CSTNode, depth: int) -> Optional[bool]:
        """Whether every binding of `name` that may be in effect at `at` is a pure computation
        whose tensors come from factories (a value no optimizer and no autograd graph can
        reach): None if not; else whether it is placed on a device."""
        if depth >= _MAX_DEPTH:
            return None
        binds = self.scopes.in_effect(name, at)
        if not binds:
            return None
        placed = True
        for bind in binds:
            if bind.kind != "assign" or not bind.whole or bind.value is None:
                return None
            if _plain_number(bind.value):
                placed = False  # `n = int(os.environ[...])`: a Python number, never a tensor
                continue
            computation = self.purity.of(bind.value)
            if not computation.pure:
                return None
            this = computation.placed
            for item in computation.inputs:
                if not item.as_tensor:
                    continue
                inner = self._made_by_factories(item.dotted, bind.node, depth + 1) if "." not in item.dotted else None
                if inner is None:
                    return None
                this = this or inner
            placed = placed and this
        return placed

    def _opaque_calls_on(self, root: str, facts: LoopFacts) -> bool:
        """A call in the loop that cannot be followed and gets `root` (as receiver or argument):
        it may store any attribute of it."""
        for call in facts.flow.calls:
            if self.scopes.resolve(call) is not None or self.names.call_name(call) is not None:
                continue
            func = call.func
            receiver = dotted_name(func.value) if type(func) is cst.Attribute else None
            if receiver is not None and receiver.split(".")[0] == root:
                return True
            if any(type(a.value) is cst.Name and a.value.value == root for a in call.args):
                return True
        return False

    def _model_like(self, parts: List[str]) -> bool:
        if parts[-1] in ("weight", "bias", "data", "grad") or parts[0] in self.receivers.optimizers:
            return True
        for end in range(1, len(parts) + 1):
            if self.receivers.is_model(cst.parse_expression(".".join(parts[:end]))):
                return True
        return False

    def _changed_through(self, name: str, facts: LoopFacts) -> bool:
        """A name computed from `name` in the loop is changed in place (`m = mask.view(...);
        m.add_(1)` writes into `mask`), or handed to `out=` / `inplace=True` / a torch `*_` function."""
        derived = facts.derived_from(name)
        if any(facts.changes_in_place(n) for n in derived):
            return True
        for call in facts.flow.calls:
            qualified = self.names.call_name(call) or ""
            writes = qualified.endswith("_") or any(
                a.keyword is not None and a.keyword.value in ("out", "inplace") for a in call.args)
            if writes and any(type(a.value) is cst.Name and a.value.value in derived for a in call.args):
                return True
        return False

    # -- in a module's forward ---------------------------------------------------------------
    def in_forward(self, statement: cst.CSTNode) -> Optional[Hoistable]:
        """`statement`, directly in the body of `forward` of an `nn.Module` of this module, as
        work whose inputs are constants and attributes set only in `__init__`."""
        found = single_assignment(statement)
        if found is None:
            return None
        func = self.tree.function_of(statement)
        if func is None or func.name.value != "forward" or self.tree.parent(statement) is not func.body:
            return None
        klass = self.tree.class_of(func)
        if klass is None:
            return None
        name, assign = found
        if self._small(assign.value, in_forward=True):
            return None
        computation = self.purity.of(assign.value)
        if not computation.pure or not computation.placed:
            return None
        if klass.name.value not in self.receivers.module_classes:  # (asked late: it may go to the project)
            return None
        settled = self._settled_attributes(klass)
        for item in computation.inputs:
            parts = item.dotted.split(".")
            if self.purity.is_device(item.node) or (parts[-1] == "device" and len(parts) > 1):
                continue  # where it goes: the buffer follows the module instead
            if item.as_tensor or parts[0] != "self" or len(parts) != 2 or parts[1] not in settled:
                return None
        flow = block_flow(func.body)
        if sum(1 for use in flow.uses if use.store and use.name == name) != 1:
            return None
        if name in flow.mutated or any(name in f.containers for f in flow.flows):
            return None
        if any(use.nested and use.name == name for use in flow.uses):
            return None
        return Hoistable(statement, name, assign.value, computation, None)  # type: ignore[arg-type]

    def _small(self, value: cst.BaseExpression, in_forward: bool) -> bool:
        """A tensor too small for its one allocation to be worth a change, however placed
        (`torch.zeros(()).cuda()`): one number; in a loop, a batch's labels; in `forward`, a
        table of a literal shape under `_TINY_TABLE` elements, which no maintainer registers a
        buffer for (in a loop, moving it out is one line, and it is reported)."""
        while type(value) is cst.Call and type(value.func) is cst.Attribute and \
                value.func.attr.value in _PLACING:  # type: ignore[attr-defined]
            value = value.func.value  # type: ignore[attr-defined]
        if self._one_number(value):
            return True
        return self._tiny_table(value) if in_forward else self._labels(value)

    def _labels(self, value: cst.BaseExpression) -> bool:
        """A fill of a batch size and literal sizes of at most `_PER_SAMPLE` values
        (`torch.ones(batch_size, 1)`, `torch.full((args.batch_size,), -100)`): a GAN's real and
        fake labels, one value a sample, small beside the step's forward; read on real code,
        labelled not worth a change twice."""
        if type(value) is not cst.Call or self.names.call_name(value) not in _FILLS:
            return False
        sizes = self._sizes(value)
        if sizes is None:
            return False
        free = [part for part in sizes if type(part) is not cst.Integer]
        if len(free) != 1 or not _BATCH_SIZE.match(last_part(dotted_name(free[0])) or ""):
            return False
        count = 1
        for part in sizes:
            if type(part) is cst.Integer:
                count *= int(part.value, 0)  # type: ignore[attr-defined]
        return count <= _PER_SAMPLE

    def _sizes(self, value: cst.Call) -> Optional[List[cst.BaseExpression]]:
        """The sizes a factory's positional arguments or its `size=` give, a shape tuple
        unpacked (`torch.zeros((n, 1))`), `torch.full`'s fill value left out; None when given
        otherwise (`*shape`)."""
        if any(a.star for a in value.args):
            return None
        sizes = [a.value for a in value.args if a.keyword is None]
        if self.names.call_name(value) == "torch.full":
            sizes = sizes[:1]
        if not sizes:
            sizes = [a.value for a in value.args if a.keyword is not None and a.keyword.value == "size"]
        if not sizes:
            return None
        return [e.value for size in sizes
                for e in (size.elements if type(size) in (cst.Tuple, cst.List) else [cst.Element(size)])]

    def _one_number(self, value: cst.BaseExpression) -> bool:
        """`torch.tensor(1.0, ...)`, `torch.scalar_tensor(0)`, `torch.zeros(())`: a tensor of
        one number, made from a literal. Rebuilt per call it costs one tiny copy, nothing a
        maintainer would change."""
        if type(value) is not cst.Call or not value.args:
            return False
        name = self.names.call_name(value)
        if name in _FILLS:
            return self._sizes(value) == []
        return name == "torch.scalar_tensor" or name == "torch.tensor" and _plain_number(value.args[0].value)

    def _tiny_table(self, value: cst.BaseExpression) -> bool:
        """A factory of a shape given in literal integers under `_TINY_TABLE` elements (`torch.eye(3,
        device=d)`, `torch.zeros(2, 4)`): rebuilt per call it costs one launch of a kernel that
        writes a few values, nothing a maintainer would register a buffer for."""
        if type(value) is not cst.Call or self.names.call_name(value) not in _SHAPED_BY_ARGUMENTS:  # type: ignore[arg-type]
            return False
        name = self.names.call_name(value)  # type: ignore[arg-type]
        sizes = self._sizes(value)  # type: ignore[arg-type]
        if sizes is None or any(type(part) is not cst.Integer for part in sizes):
            return False
        dims = [int(part.value, 0) for part in sizes]  # type: ignore[attr-defined]
        if name == "torch.eye":
            dims = dims[:2] if len(dims) > 1 else dims * 2  # `eye(n)` is n x n
        count = 1
        for dim in dims:
            count *= dim
        return count < _TINY_TABLE  # (`torch.zeros(())`: one number)

    def _settled_attributes(self, klass: cst.ClassDef) -> FrozenSet[str]:
        """Attributes of `self` assigned in `__init__` and nowhere else in the module (found
        once a class: every statement of its `forward` asks)."""
        found = self._settled.get(id(klass))
        if found is not None:
            return found
        init = next((s for s in klass.body.body if type(s) is cst.FunctionDef and s.name.value == "__init__"),
                    None)
        in_init: Set[str] = set()
        elsewhere: Set[str] = set()
        for node, _ in self.tree.listed if init is not None else ():  # every binding statement
            node_type = type(node)
            if node_type is cst.Assign or node_type is cst.AugAssign or node_type is cst.AnnAssign:
                inside = self.tree.contains(init, node)  # type: ignore[arg-type]
                for target in binding_targets(node):
                    attributes = stored_attributes(target)
                    if inside and node_type is cst.Assign:
                        in_init |= attributes
                    else:
                        elsewhere |= attributes
        found = frozenset(in_init - elsewhere)
        self._settled[id(klass)] = found
        return found


def _plain_number(expr: cst.BaseExpression) -> bool:
    """A literal number, or what `int()`, `float()`, `len()`, `round()` or `bool()` return."""
    if type(expr) in (cst.Integer, cst.Float):
        return True
    if type(expr) is cst.UnaryOperation:
        return _plain_number(expr.expression)
    return type(expr) is cst.Call and type(expr.func) is cst.Name and \
        expr.func.value in ("int", "float", "len", "round", "bool")


def _globals_declared(func: cst.FunctionDef) -> Set[str]:
    return {name.name.value for node in walk(func.body) if type(node) in (cst.Global, cst.Nonlocal)
            for name in node.names}
