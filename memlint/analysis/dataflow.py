"""Name-level data flow of a block of statements, in evaluation order.

One walk of a block yields what every loop question needs:

- `uses`: each load and store of a plain name, in the order Python evaluates them (the value
  of an assignment before its targets), flagged when it happens only conditionally (inside
  if/try/while/for/match) or inside a nested function, lambda or class (a capture);
- `flows`: for each binding, the names its value is computed from (`y = f(x)` flows x -> y);
- `sinks`: places where a value leaves the names of the block: returned, yielded, awaited,
  stored into an attribute or subscript, passed to a call that keeps it (`xs.append(x)`,
  `q.put(x)`, any call whose result is thrown away), declared global, deleted.

Values that cannot alias a tensor (`x.item()`, `float(x)`, `x.shape`, `len(x)`) are not
counted as coming from `x`: `total += loss.item()` does not keep `loss`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterator, List, Optional, Sequence, Set

import libcst as cst

from memlint.analysis.tree import children

# Calls returning (values, indices), both tensors on the operand's device: `torch.sort(x)`,
# `x.topk(k)`, `torch.max(x, dim)`.
VALUES_INDICES = frozenset({"max", "min", "topk", "sort", "kthvalue", "median", "mode", "nanmedian",
                            "cummax", "cummin"})

# Tensor methods that read its shape, not its data: they queue no device work.
SIZE_METHODS = frozenset({"size", "dim", "numel"})
# Methods and builtins whose result is a plain Python value, never an alias of a tensor.
SCALAR_METHODS = frozenset({"item", "tolist", *SIZE_METHODS, "nelement", "element_size",
                            "data_ptr", "is_contiguous", "get_device"})
SCALAR_FUNCTIONS = frozenset({"float", "int", "bool", "len", "str", "repr", "format", "isinstance",
                              "type", "id", "hash", "round"})
SCALAR_ATTRIBUTES = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad",
                               "grad_fn", "is_leaf"})
# Method calls that keep their argument alive in the receiver.
STORING_METHODS = frozenset({"append", "extend", "insert", "add", "appendleft", "extendleft", "put",
                             "put_nowait", "update", "setdefault", "push", "register_buffer",
                             "register_parameter", "add_module", "__setitem__", "send"})
# Methods that change their receiver (besides torch's in-place `*_` methods).
MUTATING_METHODS = STORING_METHODS | frozenset({"pop", "popitem", "remove", "clear", "discard",
                                                "sort", "reverse", "popleft"})
# Builtins whose use makes any name reachable: give up on the block.
DYNAMIC_FUNCTIONS = frozenset({"locals", "vars", "eval", "exec", "globals", "setattr"})


@dataclass(frozen=True)
class Use:
    name: str
    store: bool
    node: cst.CSTNode
    conditional: bool
    nested: bool
    scalar: bool = False  # a load from which only a plain value is taken (`x.item()`, `x.shape`)


@dataclass(frozen=True)
class Flow:
    targets: FrozenSet[str]
    sources: FrozenSet[str]
    # Attribute/subscript targets: the names their containers come from (`obj.a = v`, `d[k] = v`).
    containers: FrozenSet[str] = frozenset()


@dataclass(frozen=True)
class Sink:
    """A value leaving the block's names: `sources` escape unless they own the `receiver`."""

    kind: str
    sources: FrozenSet[str]
    receiver: FrozenSet[str] = frozenset()
    node: Optional[cst.CSTNode] = None


@dataclass
class BlockFlow:
    uses: List[Use] = field(default_factory=list)
    flows: List[Flow] = field(default_factory=list)
    sinks: List[Sink] = field(default_factory=list)
    mutated: Set[str] = field(default_factory=set)  # receivers of `xs.append()`, `t.add_()`...
    calls: List[cst.Call] = field(default_factory=list)  # every call of the block, in order
    dynamic: bool = False  # locals()/eval()/setattr(): every name may escape


_CONDITIONAL_BLOCKS = (cst.If, cst.Try, cst.TryStar, cst.While, cst.For, cst.Match)
_NESTED_SCOPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})


def _is_scalar_call(call: cst.Call) -> bool:
    func = call.func
    return (type(func) is cst.Attribute and func.attr.value in SCALAR_METHODS) or (
        type(func) is cst.Name and func.value in SCALAR_FUNCTIONS)


def sources_of(expr: cst.CSTNode) -> Set[str]:
    """The plain names an expression's value can alias or carry the graph of."""
    found: Set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        kind = type(node)  # identity, not ABC isinstance (memlint.analysis.tree)
        if kind is cst.Name:
            found.add(node.value)  # type: ignore[attr-defined]
            continue
        if kind is cst.Attribute:
            if node.attr.value in SCALAR_ATTRIBUTES:  # type: ignore[attr-defined]
                continue
            stack.append(node.value)  # type: ignore[attr-defined]
            continue
        if kind is cst.Call and _is_scalar_call(node):  # type: ignore[arg-type]
            continue
        if kind is cst.Arg:
            stack.append(node.value)  # type: ignore[attr-defined]  # skip the keyword's Name
            continue
        if kind is cst.Lambda:
            stack.append(node.body)
            continue
        stack.extend(children(node))
    return found


def conjuncts(test: cst.BaseExpression) -> List[cst.BaseExpression]:
    """The parts of an `and` chain (`a and b and c`), or the test itself."""
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:  # type: ignore[attr-defined]
        return conjuncts(test.left) + conjuncts(test.right)  # type: ignore[attr-defined]
    return [test]


def leaf_targets(target: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The names, attributes and subscripts an assignment target stores into (`a, (b.c, *d[0])`)."""
    kind = type(target)  # identity, not ABC isinstance (memlint.analysis.tree): every target passes here
    if kind is cst.Tuple or kind is cst.List:
        for element in target.elements:  # type: ignore[attr-defined]
            yield from leaf_targets(element.value)
    elif kind is cst.StarredElement:
        yield from leaf_targets(target.value)
    else:
        yield target


def unpacked_position(statement: cst.CSTNode, name: str) -> Optional[int]:
    """Where `name` sits in the tuple an assignment unpacks (`a, b = f()`: `b` at 1; also in
    a chained one, `pair = a, b = f()`)."""
    if not type(statement) is cst.Assign:
        return None
    for target in statement.targets:
        if type(target.target) in (cst.Tuple, cst.List) and \
                not any(type(e) is cst.StarredElement for e in target.target.elements):  # (`a, *rest, b`)
            for position, element in enumerate(target.target.elements):
                if type(element.value) is cst.Name and element.value.value == name:
                    return position
    return None


def target_names(target: cst.CSTNode) -> Set[str]:
    """Plain names a target binds."""
    return {leaf.value for leaf in leaf_targets(target) if type(leaf) is cst.Name}


def binding_targets(statement: cst.CSTNode) -> List[cst.BaseAssignTargetExpression]:
    """The targets of an assignment, augmented or annotated assignment (`a = b = v`: both)."""
    if type(statement) is cst.Assign:
        return [t.target for t in statement.targets]  # type: ignore[attr-defined]
    return [statement.target]  # type: ignore[attr-defined]


def stored_attributes(target: cst.CSTNode) -> Set[str]:
    """The attribute names a target stores (`self.a = ...`, `x.a, y.b = ...`)."""
    return {leaf.attr.value for leaf in leaf_targets(target) if type(leaf) is cst.Attribute}


def _containers(target: cst.CSTNode) -> Set[str]:
    """For `a.b = v` / `a[i] = v` (also inside tuples): the names the containers come from."""
    found: Set[str] = set()
    for leaf in leaf_targets(target):
        if type(leaf) in (cst.Attribute, cst.Subscript):
            found |= sources_of(leaf.value) or {"<expr>"}
    return found


def parameter_names(params: cst.Parameters) -> Set[str]:
    names = {param.name.value for param in (*params.posonly_params, *params.params, *params.kwonly_params)}
    for star in (params.star_arg, params.star_kwarg):
        if type(star) is cst.Param:
            names.add(star.name.value)
    return names


def _local_bindings(scope: cst.CSTNode) -> Set[str]:
    """Names a nested function or lambda binds itself (its parameters and assignments)."""
    params = getattr(scope, "params", None)
    names = parameter_names(params) if type(params) is cst.Parameters else set()
    collector = _Collector()
    collector.block(getattr(scope, "body", scope), conditional=False, nested=True)
    names |= {use.name for use in collector.flow.uses if use.store}
    return names


class _Collector:
    def __init__(self) -> None:
        self.flow = BlockFlow()
        self._hidden: Set[str] = set()  # names local to the nested scope being walked

    # -- recording ---------------------------------------------------------------------------
    def _use(self, name: cst.Name, store: bool, conditional: bool, nested: bool,
             scalar: bool = False) -> None:
        if nested and name.value in self._hidden:
            return
        self.flow.uses.append(Use(name.value, store, name, conditional, nested, scalar))

    def _store(self, target: cst.CSTNode, conditional: bool, nested: bool) -> None:
        for leaf in leaf_targets(target):
            if type(leaf) is cst.Name:
                self._use(leaf, True, conditional, nested)
            else:  # attribute or subscript target: its parts are loads
                self.expr(leaf, conditional, nested)

    def _bind(self, targets: List[cst.CSTNode], value: Optional[cst.CSTNode], node: cst.CSTNode,
              conditional: bool, nested: bool, augmented: bool = False) -> None:
        if augmented:
            for target in targets:
                self.expr(target, conditional, nested)
        if value is not None:
            self.expr(value, conditional, nested)
        for target in targets:
            self._store(target, conditional, nested)
        if value is None or nested:
            return
        sources = frozenset(sources_of(value))
        names: Set[str] = set()
        containers: Set[str] = set()
        for target in targets:
            names |= target_names(target)
            containers |= _containers(target)
        self.flow.flows.append(Flow(frozenset(names), sources, frozenset(containers)))
        if containers and sources:
            self.flow.sinks.append(Sink("stored", sources, frozenset(containers), node))
        for target in targets:
            for leaf in leaf_targets(target):
                if type(leaf) is cst.Attribute and leaf.attr.value == "requires_grad":
                    self._made_leaf(leaf.value, node)

    def _made_leaf(self, tensor: cst.CSTNode, node: cst.CSTNode) -> None:
        """`t.requires_grad_()` / `t.requires_grad = True`: autograd now tracks `t` itself, and
        changing it in place is an error (it is kept, in autograd's sense)."""
        self.flow.sinks.append(Sink("made-leaf", frozenset(sources_of(tensor)), node=node))

    # -- statements --------------------------------------------------------------------------
    def block(self, node: cst.CSTNode, conditional: bool, nested: bool) -> None:
        body = node.body if isinstance(node, cst.BaseSuite) else node
        if isinstance(body, (tuple, list)):
            for stmt in body:
                self.statement(stmt, conditional, nested)
        else:
            self.statement(body, conditional, nested)

    def statement(self, stmt: cst.CSTNode, conditional: bool, nested: bool) -> None:
        if type(stmt) is cst.SimpleStatementLine:
            for small in stmt.body:
                self.small(small, conditional, nested)
        elif type(stmt) in (cst.FunctionDef, cst.ClassDef):
            self.scope(stmt, conditional)
            self._use(stmt.name, True, conditional, nested)
        elif type(stmt) is cst.For:
            self.expr(stmt.iter, conditional, nested)
            self._bind([stmt.target], None, stmt, True, nested)
            if not nested:
                self.flow.flows.append(
                    Flow(frozenset(target_names(stmt.target)), frozenset(sources_of(stmt.iter)))
                )
            self.block(stmt.body, True, nested)
            if stmt.orelse is not None:
                self.block(stmt.orelse.body, True, nested)
        elif type(stmt) is cst.With:
            for item in stmt.items:
                targets = [item.asname.name] if item.asname is not None else []
                self._bind(targets, item.item, stmt, conditional, nested)
            self.block(stmt.body, conditional, nested)
        elif isinstance(stmt, cst.BaseCompoundStatement):
            inner = conditional or isinstance(stmt, _CONDITIONAL_BLOCKS)
            for child in children(stmt):
                if isinstance(child, (cst.BaseSuite, cst.BaseStatement)):
                    self.block(child, inner, nested)
                elif type(child) in (cst.Else, cst.Finally):
                    self.block(child.body, inner, nested)
                elif type(child) in (cst.ExceptHandler, cst.ExceptStarHandler):
                    if child.type is not None:
                        self.expr(child.type, inner, nested)
                    if child.name is not None:
                        self._store(child.name.name, inner, nested)
                    self.block(child.body, inner, nested)
                elif type(child) is cst.MatchCase:
                    self.expr(child.pattern, inner, nested)
                    self.block(child.body, inner, nested)
                else:
                    self.expr(child, conditional, nested)  # tests, subjects
        else:
            self.small(stmt, conditional, nested)

    def small(self, small: cst.CSTNode, conditional: bool, nested: bool) -> None:
        if type(small) is cst.Assign:
            self._bind([t.target for t in small.targets], small.value, small, conditional, nested)
        elif type(small) is cst.AnnAssign:
            self._bind([small.target], small.value, small, conditional, nested)
        elif type(small) is cst.AugAssign:
            self._bind([small.target], small.value, small, conditional, nested, augmented=True)
            if not nested and type(small.target) is cst.Name:
                # `acc += x` folds x into acc (a list would keep x itself)
                self.flow.sinks.append(Sink(
                    "accumulated", frozenset(sources_of(small.value)),
                    frozenset(target_names(small.target)), small,
                ))
        elif type(small) is cst.Expr:
            self.expr(small.value, conditional, nested)
            call = small.value
            if type(call) is cst.Call and not nested:
                self._discarded_call(call)
        elif type(small) in (cst.Return,):
            if small.value is not None:
                self.expr(small.value, conditional, nested)
                if not nested:
                    self.flow.sinks.append(Sink("returned", frozenset(sources_of(small.value)), node=small))
        elif type(small) in (cst.Global, cst.Nonlocal):
            if not nested:
                names = frozenset(item.name.value for item in small.names)
                self.flow.sinks.append(Sink("global", names, node=small))
        elif type(small) is cst.Del:
            self.expr(small.target, conditional, nested)
            if not nested:
                self.flow.sinks.append(Sink("deleted", frozenset(sources_of(small.target)), node=small))
        elif type(small) in (cst.Import, cst.ImportFrom):
            if type(small.names) is cst.ImportStar:
                self.flow.dynamic = True
                return
            for alias in small.names:
                bound = alias.asname.name if alias.asname is not None else alias.name
                while type(bound) is cst.Attribute:
                    bound = bound.value
                if type(bound) is cst.Name:
                    self._use(bound, True, conditional, nested)
        else:  # Raise, Assert, Pass, Break, Continue
            for child in children(small):
                self.expr(child, conditional, nested)

    def _discarded_call(self, call: cst.Call) -> None:
        """A call whose result is thrown away is called for its effect: it may keep its arguments."""
        args = frozenset().union(*(sources_of(arg.value) for arg in call.args)) if call.args else frozenset()
        if not args:
            return
        receiver: FrozenSet[str] = frozenset()
        if type(call.func) is cst.Attribute:
            receiver = frozenset(sources_of(call.func.value))
        self.flow.sinks.append(Sink("called", args, receiver, call))

    def scope(self, node: cst.CSTNode, conditional: bool) -> None:
        """A nested function, class or lambda: what it reads from outside is captured."""
        outer_hidden = self._hidden
        self._hidden = outer_hidden | _local_bindings(node)
        if type(node) is cst.FunctionDef:
            for decorator in node.decorators:
                self.expr(decorator.decorator, conditional, nested=False)
            self._defaults(node.params, conditional)
            self.block(node.body, conditional, nested=True)
        elif type(node) is cst.ClassDef:
            for part in (*node.bases, *node.keywords):
                self.expr(part.value, conditional, nested=False)
            self.block(node.body, conditional, nested=True)
        elif type(node) is cst.Lambda:
            self._defaults(node.params, conditional)
            self.expr(node.body, conditional, nested=True)
        self._hidden = outer_hidden

    def _defaults(self, params: cst.Parameters, conditional: bool) -> None:
        # A default is evaluated once, when the function is made, and kept with it: a capture.
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            if param.default is not None:
                self.expr(param.default, conditional, nested=True)

    # -- expressions -------------------------------------------------------------------------
    def expr(self, node: cst.CSTNode, conditional: bool, nested: bool) -> None:
        stack = [(node, False)]  # (node, only a plain value such as `x.item()` is taken from it)
        while stack:
            current, scalar = stack.pop()
            kind = type(current)  # identity, not ABC isinstance (memlint.analysis.tree): every node passes here
            if kind is cst.Name:
                self._use(current, False, conditional, nested, scalar)
            elif kind is cst.Attribute:
                stack.append((current.value, scalar or current.attr.value in SCALAR_ATTRIBUTES))
            elif kind is cst.Arg:
                stack.append((current.value, scalar))
            elif kind in _NESTED_SCOPES:
                self.scope(current, conditional)
            elif kind is cst.NamedExpr:
                self._bind([current.target], current.value, current, conditional, nested)
            elif kind is cst.Yield or kind is cst.Await:
                inner = current.value if type(current) is cst.Yield else current.expression
                if type(inner) is cst.From:
                    inner = inner.item
                if inner is not None:
                    stack.append((inner, scalar))
                    if not nested:
                        self.flow.sinks.append(Sink(type(current).__name__.lower(),
                                                    frozenset(sources_of(inner)), node=current))
            elif kind is cst.Call:
                self._call(current, nested)
                scalar = scalar or _is_scalar_call(current)
                stack.extend((child, scalar) for child in reversed(tuple(children(current))))
            elif kind is cst.CompFor:
                self._store(current.target, True, nested)
                stack.append((current.iter, scalar))
                stack.extend((condition.test, scalar) for condition in current.ifs)
                if current.inner_for_in is not None:
                    stack.append((current.inner_for_in, scalar))
            else:
                stack.extend((child, scalar) for child in reversed(tuple(children(current))))

    def _call(self, call: cst.Call, nested: bool) -> None:
        func = call.func
        if type(func) is cst.Name and func.value in DYNAMIC_FUNCTIONS:
            self.flow.dynamic = True
        if not nested:
            self.flow.calls.append(call)
        if nested or not type(func) is cst.Attribute:
            return
        method = func.attr.value
        if method in MUTATING_METHODS or (method.endswith("_") and not method.startswith("_")):
            self.flow.mutated |= sources_of(func.value)
        if method == "requires_grad_":
            self._made_leaf(func.value, call)
        if method not in STORING_METHODS:
            return
        args = frozenset().union(*(sources_of(arg.value) for arg in call.args)) if call.args else frozenset()
        if args:
            self.flow.sinks.append(Sink("stored", args, frozenset(sources_of(func.value)), call))


class Derivation:
    """Which names are computed from which, over a set of flows indexed once by source: each
    question then costs what it reaches, not a pass over every flow until nothing changes."""

    def __init__(self, flows: Sequence[Flow]) -> None:
        self._by_source: Dict[str, List[Flow]] = {}
        for item in flows:
            for source in item.sources:
                self._by_source.setdefault(source, []).append(item)

    def of(self, names: Set[str]) -> Set[str]:
        """`names` and every name the flows bind from a value computed from them (any order)."""
        found = set(names)
        pending = list(found)
        while pending:
            for item in self._by_source.get(pending.pop(), ()):
                for target in item.targets:
                    if target not in found:
                        found.add(target)
                        pending.append(target)
        return found


def derived(flows: Sequence[Flow], names: Set[str]) -> Set[str]:
    """`names` and every name the flows bind from a value computed from them (any order)."""
    return Derivation(flows).of(names)


def keeps_parameters(func: cst.FunctionDef) -> bool:
    """Whether a function may keep what it is passed beyond the call: a parameter (or a value
    derived from it) stored, yielded, captured, declared global, or handed to a call that may
    keep it. Returning it is not keeping it: the caller gets it back."""
    flow = block_flow(func.body)
    if flow.dynamic:
        return True
    kept = derived(flow.flows, parameter_names(func.params))
    if any(use.nested and use.name in kept for use in flow.uses):
        return True
    # A parameter's value stored into another parameter (`self.last = t`) outlives the call;
    # stored into itself (`t[0] = t[1]`, `t.add_(t)`) it does not.
    return any(sink.sources & kept and sink.kind != "returned"
               and not (sink.receiver and sink.receiver <= sink.sources)
               for sink in flow.sinks)


def block_flow(body: cst.CSTNode) -> BlockFlow:
    """The data flow of a block (a suite, a statement, or a list of statements)."""
    collector = _Collector()
    collector.block(body, conditional=False, nested=False)
    return collector.flow

