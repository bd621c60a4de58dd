"""Names, scope by scope: where each is bound and to what, and which function a call calls.

One pass over the nodes the tree index lists (memlint.analysis.tree) builds, per scope (a
function, a lambda or the module), every binding of every name in source order, and the
module's inventory in source order. Asked as `facts.scopes`:

- `bindings(scope, name)`: the name's bindings in that scope (`Binding`: assignment, augmented
  assignment, for target, `with ... as`, walrus, parameter, def, and an append into it:
  `xs.append(v)` flows v into xs); `bindings_seen(name, at)` looks in enclosing scopes too;
  `in_effect(name, at)` keeps only those that may be the one seen at `at`;
  `every_binding()` runs over all of them; `flows(scope)` says what each is computed from;
  `comprehension_clause(name, at)`: the `for` clause of a comprehension around `at` that binds
  the name seen there (a comprehension's names are its own);
- `resolve(call)`: the function or method of this module a call calls (a def in an enclosing
  scope, `self.method` through the class and its bases, `self(...)` its `__call__` or an
  nn.Module's `forward`, `acc.update(...)` when `acc` surely holds an instance of a class of
  this module); `call_sites(func)` the reverse, `arguments_for(param)` what each passes;
- `functions` and `classes` (top level by name); `calls`, `assigns`, `withs` (every one, in
  source order), `calls_of(scope)` and `assigns_of(scope)` (those a scope runs itself: a
  question about one function reads its own, not the module's); `returned(scope)`: the
  values a scope returns or yields;
- attributes of a class's instances: `emptied(klass, attr)` (a method other than `__init__`
  rebinds or clears `self.<attr>`), `class_list(klass, attr)` (a list in the class body, shared
  by every instance), `assigned_on_instances(klass, attr)`; `enclosing_class(node)`: the class
  of the method a node runs in.

The other facts read these: values (a name's grad follows its bindings in effect), receivers
(optimizers and models by what names are bound to), regions (with statements, grad mode of a
function from its call sites), calls (following `resolve`), roles (every call). Rules MEM203 and
MEM206 ask `bindings`, MEM401 and MEM205 `call_sites`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.dataflow import Flow, leaf_targets, sources_of, target_names
from memlint.analysis.tree import NEW_SCOPES, OWN_SCOPE_EXPRESSIONS, Scope, TreeIndex, constructed, dotted_name, own_method

# methods that hand back the module they are called on (`Model(...).to(device).eval()`)
MOVES_ITSELF = frozenset({"to", "cuda", "cpu", "eval", "train", "half", "float", "bfloat16", "requires_grad_"})
_APPENDING = ("append", "extend", "insert", "appendleft", "add")
# Statements and expressions with one target, and the kind of binding they make.
_SINGLE_TARGET = {cst.AnnAssign: "assign", cst.AugAssign: "aug", cst.NamedExpr: "walrus"}


@dataclass(frozen=True)
class Binding:
    """A name bound in a scope: by assignment, augmented assignment, a for target, `with ... as`,
    or an append-like call into it (`xs.append(v)`: v flows into xs)."""

    name: str
    node: cst.CSTNode  # the small statement / For / With / Call that binds
    value: Optional[cst.BaseExpression]  # the value it is bound to (the iterable for a for target)
    kind: str  # "assign", "aug", "for", "with", "append", "walrus", "param"
    whole: bool = True  # False when the value is unpacked (`a, b = f()`)


def _binding_targets(target: cst.CSTNode) -> Iterator[Tuple[cst.Name, bool]]:
    """Names a target binds, each with whether it gets the whole value."""
    if type(target) is cst.Name:
        yield target, True
        return
    for leaf in leaf_targets(target):
        if type(leaf) is cst.Name:
            yield leaf, False


class Scopes:
    """The bindings and the inventory of one module (see the module docstring)."""

    def __init__(self, tree: TreeIndex) -> None:
        self.tree = tree
        self.module = tree.module
        self.functions: Dict[str, cst.FunctionDef] = {}  # module-level functions
        self.classes: Dict[str, cst.ClassDef] = {}  # module-level classes (the first of a name)
        self.classes_defined_again: Set[str] = set()  # module-level class names defined more than once
        self.calls: List[cst.Call] = []
        self.assigns: List[cst.Assign] = []
        self.withs: List[cst.With] = []
        self._bindings: Dict[int, Dict[str, List[Binding]]] = {}  # id(scope) -> name -> bindings
        self._returned: Dict[int, List[cst.BaseExpression]] = {}  # id(scope) -> returned/yielded values
        self._calls_of: Dict[int, List[cst.Call]] = {}  # id(scope) -> the calls it runs itself
        self._assigns_of: Dict[int, List[cst.Assign]] = {}
        self._flows: Dict[int, List[Flow]] = {}
        self._in_effect: Dict[Tuple[str, int], Tuple[cst.CSTNode, List[Binding]]] = {}  # (name, id(node)) -> (node, ...)
        self._attribute_classes: Dict[int, Dict[str, Optional[str]]] = {}  # id(ClassDef) -> its instances' attributes
        self._attribute_values: Dict[int, Dict[str, List[cst.BaseExpression]]] = {}  # id(ClassDef) -> attr -> values
        self._index()
        # the names of the methods the module's classes define: a call of another name on an
        # instance of one of them resolves to none of them, whatever the instance (`x.view()`)
        self._method_names = frozenset(statement.name.value for klass in self.classes.values()  # type: ignore[attr-defined]
                                       for statement in klass.body.body if type(statement) is cst.FunctionDef)
        self._resolved: Dict[int, cst.FunctionDef] = {}
        self._call_sites: Dict[int, List[cst.Call]] = {}  # id(FunctionDef) -> calls resolving to it
        for call in self.calls:
            target = self._resolve(call)
            if target is not None:
                self._resolved[id(call)] = target
                self._call_sites.setdefault(id(target), []).append(call)

    # -- the pass ------------------------------------------------------------------------------
    def _index(self) -> None:
        module, tree = self.module, self.tree
        for node, scope in tree.listed:
            node_type = type(node)
            if node_type is cst.FunctionDef or node_type is cst.Lambda:
                self._bindings.setdefault(id(node), {})
                self._params(node)
                if node_type is cst.FunctionDef:
                    if scope is module and tree.class_of(node) is None:
                        self.functions.setdefault(node.name.value, node)  # type: ignore[attr-defined]
                    self._bind(scope, node.name.value, node, None, "def")  # type: ignore[attr-defined]
            elif node_type is cst.ClassDef:
                if scope is module:
                    if node.name.value in self.classes:  # type: ignore[attr-defined]
                        self.classes_defined_again.add(node.name.value)  # type: ignore[attr-defined]
                    self.classes.setdefault(node.name.value, node)  # type: ignore[attr-defined]
            else:
                self._index_node(node, scope)

    def _params(self, node: cst.CSTNode) -> None:
        params = getattr(node, "params", None)
        if not type(params) is cst.Parameters:
            return
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            self._bind(node, param.name.value, param, None, "param")
        for star in (params.star_arg, params.star_kwarg):
            if type(star) is cst.Param:
                self._bind(node, star.name.value, star, None, "param")

    def _bind(self, scope: Scope, name: str, node: cst.CSTNode, value: Optional[cst.BaseExpression],
              kind: str, whole: bool = True) -> None:
        self._bindings.setdefault(id(scope), {}).setdefault(name, []).append(
            Binding(name, node, value, kind, whole))

    def _index_node(self, node: cst.CSTNode, scope: Scope) -> None:
        node_type = type(node)
        if node_type is cst.Return or node_type is cst.Yield:
            value = node.value  # type: ignore[attr-defined]
            if value is not None:
                self._returned.setdefault(id(scope), []).append(value.item if type(value) is cst.From else value)
        elif node_type is cst.Call:
            self.calls.append(node)  # type: ignore[arg-type]
            self._calls_of.setdefault(id(scope), []).append(node)  # type: ignore[arg-type]
            func = node.func  # type: ignore[attr-defined]
            if type(func) is cst.Attribute and func.attr.value in _APPENDING and node.args:  # type: ignore[attr-defined]
                root = func.value
                while type(root) in (cst.Attribute, cst.Subscript):
                    root = root.value
                if type(root) is cst.Name:
                    self._bind(scope, root.value, node, node.args[-1].value, "append")  # type: ignore[attr-defined]
        elif node_type is cst.Assign:
            self.assigns.append(node)  # type: ignore[arg-type]
            self._assigns_of.setdefault(id(scope), []).append(node)  # type: ignore[arg-type]
            for target in node.targets:  # type: ignore[attr-defined]
                for name, whole in _binding_targets(target.target):
                    self._bind(scope, name.value, node, node.value, "assign", whole)  # type: ignore[attr-defined]
        elif node_type in _SINGLE_TARGET:
            value = node.value  # type: ignore[attr-defined]
            if value is not None:  # `x: int` binds nothing
                for name, whole in _binding_targets(node.target):  # type: ignore[attr-defined]
                    self._bind(scope, name.value, node, value, _SINGLE_TARGET[node_type], whole)
        elif node_type is cst.For:
            for name, _ in _binding_targets(node.target):  # type: ignore[attr-defined]
                self._bind(scope, name.value, node, node.iter, "for", False)  # type: ignore[attr-defined]
        elif node_type is cst.With:
            self.withs.append(node)  # type: ignore[arg-type]
            for item in node.items:  # type: ignore[attr-defined]
                if item.asname is not None:
                    for name, whole in _binding_targets(item.asname.name):
                        self._bind(scope, name.value, node, item.item, "with", whole)

    # -- bindings ------------------------------------------------------------------------------
    def bindings(self, scope: Scope, name: str) -> List[Binding]:
        return self._bindings.get(id(scope), {}).get(name, [])

    def every_binding(self) -> Iterator[Binding]:
        """Every binding of every scope."""
        for bindings in self._bindings.values():
            for binds in bindings.values():
                yield from binds

    def bindings_seen(self, name: str, at: cst.CSTNode) -> List[Binding]:
        """Every binding of `name` in the scope `at` runs in, else in the nearest enclosing scope
        that binds it (a closure or a global)."""
        scope = self.tree.scope_of(at)
        while True:
            binds = self.bindings(scope, name)
            if binds or scope is self.module:
                return binds
            scope = self.tree.scope_of(scope)

    def in_effect(self, name: str, at: cst.CSTNode) -> List[Binding]:
        """The bindings of `name` that may be the one seen at `at`, latest first: those before
        `at` back to the last one that surely ran (in a block enclosing `at`), then those after
        it that a loop around it carries into its next iteration; those of an enclosing scope
        when its own scope binds none. Kept per name and node: a fifth of the questions are
        asked again (a name's tensor-ness, then its constructor, then its use)."""
        known = self._in_effect.get((name, id(at)))
        if known is not None and known[0] is at:
            return list(known[1])
        found = self._bindings_in_effect(name, at)
        self._in_effect[(name, id(at))] = (at, found)
        return list(found)

    def _bindings_in_effect(self, name: str, at: cst.CSTNode) -> List[Binding]:
        tree = self.tree
        scope = tree.scope_of(at)
        binds = self.bindings(scope, name)
        while not binds and scope is not self.module:
            scope = tree.scope_of(scope)
            binds = self.bindings(scope, name)
            if binds:  # a closure or global: any of them may be the one seen
                return binds
        position = tree.order(at)
        before = [b for b in binds if tree.order(b.node) < position and self._bound_before(b, at)]
        if not before:
            return [b for b in binds if self._bound_before(b, at)]
        # the last binding before `at` in a block enclosing `at` hides everything before it
        relevant: List[Binding] = []
        hidden_by = None
        for bind in reversed(before):
            relevant.append(bind)
            block = tree.dominating_block(bind.node)
            if bind.kind not in ("aug", "append") and block is not None and block is not at and \
                    tree.contains(block, at):
                hidden_by = bind
                break
        return relevant + self._carried(binds, at, position, hidden_by)

    def _carried(self, binds: List[Binding], at: cst.CSTNode, position: int,
                 hidden_by: Optional[Binding]) -> List[Binding]:
        """The bindings after `at` in the loops around it, which `at` sees from the next
        iteration on (`imgs.append(img)` before `img = step(img)`), unless a binding of the
        same loop that surely runs before `at` hides them."""
        tree = self.tree
        later = [b for b in binds if tree.order(b.node) > position]
        if not later:
            return []
        carried: List[Binding] = []
        for loop in tree.loops_around(at):
            if hidden_by is not None and tree.contains(loop, hidden_by.node):
                break
            seen = {id(b) for b in carried}
            carried.extend(b for b in reversed(later) if id(b) not in seen and tree.contains(loop.body, b.node))  # type: ignore[attr-defined]
        return carried

    def _bound_before(self, bind: Binding, at: cst.CSTNode) -> bool:
        """Whether `bind` binds its name before `at` runs, when its statement holds `at`: a for
        target before the body (`for v in d.values(): total += v`), not `x = f(x)` before `f(x)`."""
        tree = self.tree
        if not tree.contains(bind.node, at):
            return True
        node = bind.node
        if type(node) is cst.For:
            return tree.contains(node.body, at)
        if type(node) is cst.With:
            return tree.contains(node.body, at)
        return False

    def flows(self, scope: Scope) -> List[Flow]:
        """What each binding of `scope` is computed from (one Flow per binding with a value):
        `dataflow.derived` follows them."""
        found = self._flows.get(id(scope))
        if found is None:
            found = [Flow(frozenset({name}), frozenset(sources_of(bind.value)))
                     for name, binds in self._bindings.get(id(scope), {}).items()
                     for bind in binds if bind.value is not None]
            self._flows[id(scope)] = found
        return found

    def calls_of(self, scope: Scope) -> List[cst.Call]:
        """The calls `scope` runs itself (not those of functions nested in it), in source order."""
        return self._calls_of.get(id(scope), [])

    def assigns_of(self, scope: Scope) -> List[cst.Assign]:
        """The assignments `scope` runs itself, in source order."""
        return self._assigns_of.get(id(scope), [])

    def returned(self, scope: Scope) -> List[cst.BaseExpression]:
        """The values `scope` returns or yields (`yield from x`: x)."""
        return self._returned.get(id(scope), [])

    # -- calls -------------------------------------------------------------------------------
    def _resolve(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        tree = self.tree
        func = call.func
        if type(func) is cst.Name:
            if func.value == "self":  # `self(batch)`: the class's __call__ (an nn.Module's forward)
                klass = self.enclosing_class(call)
                return self.method_of(klass, "__call__") or self.method_of(klass, "forward")
            scope = tree.scope_of(call)
            while True:  # a nested def in an enclosing function, else a module-level function
                for binding in self.bindings(scope, func.value):
                    if binding.kind == "def" and type(binding.node) is cst.FunctionDef:
                        return binding.node
                if scope is self.module:
                    return None
                if self.bindings(scope, func.value):
                    return None  # bound to something else locally
                scope = tree.scope_of(scope)
        if type(func) is cst.Attribute and type(func.value) is cst.Name:
            if func.value.value in ("self", "cls"):
                method = self.method_of(self.enclosing_class(call), func.attr.value)
                if method is not None:
                    return method
                klass = self._attribute_class(call, func.attr.value)  # `self.model(x)`
                return self.method_of(klass, "__call__") or self.method_of(klass, "forward")
            if func.attr.value not in self._method_names:
                return None
            if self.on_class(call):  # `Unet.from_config(...)`: a class or static method
                return self.method_of(self.classes[func.value.value], func.attr.value)
            return self.method_of(self.instance_class(func.value), func.attr.value)
        if type(func) is cst.Attribute and func.attr.value in self._method_names and dotted_name(func.value) is not None and \
                (dotted_name(func.value) or "").count(".") == 1 and (dotted_name(func.value) or "").startswith("self."):
            return self.method_of(self._attribute_class(call, (dotted_name(func.value) or "")[5:]), func.attr.value)
        return None

    def _attribute_class(self, at: cst.CSTNode, attr: str) -> Optional[cst.ClassDef]:
        """The class of this module that `self.<attr>` surely holds an instance of: every
        assignment to it in the class is `self.<attr> = Class(...)`."""
        klass = self.enclosing_class(at)
        if klass is None:
            return None
        found = self._instance_attributes(klass).get(attr)
        return self.classes[found] if found else None

    def _instance_attributes(self, klass: cst.ClassDef) -> Dict[str, Optional[str]]:
        """`self.<attr>` -> the one class of this module its assignments in `klass`'s methods
        construct, or None when any assignment is something else (one walk per class, not one
        per call)."""
        found = self._attribute_classes.get(id(klass))
        if found is not None:
            return found
        kinds: Dict[str, Set[Optional[str]]] = {}
        for method in klass.body.body:
            if not type(method) is cst.FunctionDef:
                continue
            for node in self.assigns_of(method):
                for target in node.targets:
                    name = dotted_name(target.target)
                    if name is None or not name.startswith("self."):
                        continue
                    value = node.value
                    while type(value) is cst.Call and type(value.func) is cst.Attribute and \
                            value.func.attr.value in ("cuda", "to", "eval", "cpu") and type(value.func.value) is cst.Call:
                        value = value.func.value  # `Wrapper(path).cuda(gpu)`
                    built = value.func.value if type(value) is cst.Call and type(value.func) is cst.Name \
                        and value.func.value in self.classes else None
                    kinds.setdefault(name[5:], set()).add(built)
        found = {attr: next(iter(built)) if len(built) == 1 else None for attr, built in kinds.items()}
        self._attribute_classes[id(klass)] = found
        return found

    def comprehension_clause(self, name: str, at: cst.CSTNode) -> Optional[cst.CompFor]:
        """The `for` clause of a comprehension around `at` whose target binds the `name` seen
        there: a comprehension's names are its own, whatever the function binds to the same
        name (`for i in range(n): [int(i) for i in ids]`), except in the iterable of that
        clause or an earlier one, which runs before the name is bound."""
        for ancestor in self.tree.ancestors(at):
            kind = type(ancestor)
            if kind in NEW_SCOPES:
                return None
            if kind in OWN_SCOPE_EXPRESSIONS:  # (a lambda stopped the search above)
                clause: Optional[cst.CompFor] = ancestor.for_in  # type: ignore[attr-defined]
                while clause is not None and not self.tree.contains(clause.iter, at):
                    if name in target_names(clause.target):
                        return clause
                    clause = clause.inner_for_in
        return None

    def enclosing_class(self, node: cst.CSTNode) -> Optional[cst.ClassDef]:
        """The class of the method `node` runs in (through nested functions)."""
        tree = self.tree
        method = tree.function_of(node)
        while method is not None and tree.class_of(method) is None:
            method = tree.function_of(method)
        return tree.class_of(method) if method is not None else None

    def instance_class(self, name: cst.Name) -> Optional[cst.ClassDef]:
        """The class of this module that `name` surely holds an instance of: every binding it
        can have there is `name = Class(...)` (`acc = Accuracy()`)."""
        binds = self.bindings_seen(name.value, name)
        classes = set()
        for bind in binds:
            value = bind.value
            if bind.kind != "assign" or not bind.whole or not type(value) is cst.Call or \
                    not type(value.func) is cst.Name or value.func.value not in self.classes:
                return None
            classes.add(value.func.value)
        return self.classes[classes.pop()] if len(classes) == 1 else None

    def instance_method_name(self, call: cst.Call, absolute: Callable[[Optional[str]], Optional[str]]) -> Optional[str]:
        """`pkg.metrics.Accuracy.update` for `acc.update(...)` or `self.acc.update(...)` when
        `acc` surely holds an instance of a class this module imports (`acc = Accuracy()`, the
        bindings in effect at the call: `acc = acc.result()` after the loop is not one;
        `from pkg.metrics import Accuracy`, the absolute name `absolute` gives a local one):
        the method another module of the project defines."""
        func = call.func
        if type(func) is not cst.Attribute:
            return None
        constructor = self.imported_class_of(func.value, absolute)  # type: ignore[attr-defined]
        return f"{constructor}.{func.attr.value}" if constructor else None  # type: ignore[attr-defined]

    def imported_class_of(self, receiver: cst.BaseExpression,
                          absolute: Callable[[Optional[str]], Optional[str]]) -> Optional[str]:
        """The absolute name of the imported class whose instance `receiver` (`acc`, `self.acc`)
        surely holds where it is read: every binding of it in effect there builds one."""
        if type(receiver) is cst.Name:
            binds = self.in_effect(receiver.value, receiver)  # type: ignore[attr-defined]
            if any(b.kind != "assign" or not b.whole for b in binds):
                return None
            values = [b.value for b in binds]
        elif dotted_name(receiver) is not None and (dotted_name(receiver) or "").count(".") == 1 and \
                (dotted_name(receiver) or "").startswith("self."):
            klass = self.enclosing_class(receiver)
            values = self.attribute_values(klass, (dotted_name(receiver) or "")[5:]) if klass is not None else []
        else:
            return None
        values = [constructed(v, MOVES_ITSELF) if v is not None else v for v in values]
        built = {absolute(dotted_name(v.func)) for v in values
                 if type(v) is cst.Call and type(v.func) in (cst.Name, cst.Attribute)}
        if len(built) != 1 or len(values) == 0 or any(not type(v) is cst.Call for v in values):
            return None
        return built.pop()

    def attribute_values(self, klass: cst.ClassDef, attr: str) -> List[cst.BaseExpression]:
        """What the methods of `klass` assign to `self.<attr>` (read once per class: asked for
        each `self.<attr>.method(...)` call, a scan per call cost a class's assignments times its
        calls). The list is the class's own record: read it, do not change it."""
        found = self._attribute_values.get(id(klass))
        if found is None:
            found = self._attribute_values[id(klass)] = {}
            for method in klass.body.body:
                if type(method) is cst.FunctionDef:
                    for node in self.assigns_of(method):
                        for target in node.targets:
                            name = dotted_name(target.target)
                            if name is not None and name.startswith("self."):
                                found.setdefault(name[5:], []).append(node.value)
        return found.get(attr, [])

    def method_of(self, klass: Optional[cst.ClassDef], name: str) -> Optional[cst.FunctionDef]:
        """The method `name` of `klass`, or of its first base in this module that defines it."""
        return next((found for each in self.lineage(klass) for found in (own_method(each, name),)
                     if found is not None), None)

    def lineage(self, klass: Optional[cst.ClassDef]) -> Iterator[cst.ClassDef]:
        """`klass`, then its first base in this module, then that one's, and so on."""
        seen: Set[int] = set()
        while klass is not None and id(klass) not in seen:
            seen.add(id(klass))
            yield klass
            klass = next((self.classes[b] for b in (dotted_name(a.value) for a in klass.bases)
                          if b in self.classes), None)

    # -- attributes of a class's instances ------------------------------------------------------
    def emptied(self, klass: cst.ClassDef, attr: str) -> bool:
        """Whether a method of `klass` (other than `__init__`) rebinds or empties `self.<attr>`:
        `self.attr = []`, `self.attr.clear()`, `del self.attr[:]`, `self.attr[:] = []`."""
        return bool(self.emptied_by(klass, attr))

    def emptied_by(self, klass: cst.ClassDef, attr: str) -> List[cst.FunctionDef]:
        """The methods of `klass` (other than `__init__`) that rebind or empty `self.<attr>`."""
        return [method for method in klass.body.body if type(method) is cst.FunctionDef
                and method.name.value != "__init__" and self._empties(method, attr)]

    def _empties(self, method: cst.FunctionDef, attr: str) -> bool:
        """Whether `method` rebinds or empties `self.<attr>`."""
        for node in self.tree.walk_scope(method):
            if type(node) is cst.Call and type(node.func) is cst.Attribute and \
                    node.func.attr.value in ("clear", "pop", "popleft", "remove") and \
                    dotted_name(node.func.value) == f"self.{attr}":
                return True
            targets: List[cst.BaseExpression] = []
            if type(node) is cst.Assign:
                targets = [t.target for t in node.targets]
            elif type(node) in (cst.AnnAssign, cst.AugAssign):
                targets = [node.target]
            elif type(node) is cst.Del:
                targets = [node.target]
            for target in targets:
                for leaf in leaf_targets(target):
                    while type(leaf) is cst.Subscript:
                        leaf = leaf.value
                    if dotted_name(leaf) == f"self.{attr}":  # type: ignore[arg-type]
                        return True
        return False

    @staticmethod
    def class_list(klass: cst.ClassDef, attr: str) -> bool:
        """`attr = []` (or `list()`) in the class body: one list shared by every instance."""
        for line in klass.body.body:
            if type(line) is cst.SimpleStatementLine:
                for small in line.body:
                    value = getattr(small, "value", None)
                    is_list = type(value) is cst.List or (type(value) is cst.Call and
                                                             dotted_name(value.func) == "list" and not value.args)
                    if is_list and type(small) in (cst.Assign, cst.AnnAssign) and any(
                            dotted_name(t) == attr for t in ([t.target for t in small.targets]
                                                             if type(small) is cst.Assign else [small.target])):
                        return True
        return False

    def assigned_on_instances(self, klass: cst.ClassDef, attr: str) -> bool:
        """Whether any method of `klass` binds `self.<attr>` (which then hides a class attribute)."""
        return any(type(node) in (cst.Assign, cst.AnnAssign, cst.AugAssign) and any(
            dotted_name(leaf) == f"self.{attr}" for t in (node.targets if type(node) is cst.Assign else [node])
            for leaf in leaf_targets(t.target))
            for method in klass.body.body if type(method) is cst.FunctionDef
            for node in self.tree.walk_scope(method))

    def resolve(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        """The function or method of this module that `call` calls, when it can be told."""
        return self._resolved.get(id(call))

    def call_sites(self, func: cst.FunctionDef) -> List[cst.Call]:
        """Calls in this module that call `func`, in source order."""
        return self._call_sites.get(id(func), [])

    def sees_lineage(self, node: cst.CSTNode) -> bool:
        """The class whose method holds `node` derives only from classes of this module (or
        from nothing): no method it inherits is out of sight."""
        method = self.tree.function_of(node)
        klass = self.tree.class_of(method) if method is not None else None
        stack, seen = [klass] if klass is not None else [], set()
        while stack:
            klass = stack.pop()
            if id(klass) in seen:
                continue
            seen.add(id(klass))
            bases = [dotted_name(base.value) for base in klass.bases if dotted_name(base.value) != "object"]  # type: ignore[union-attr]
            if any(base not in self.classes for base in bases):
                return False
            stack.extend(self.classes[base] for base in bases)  # type: ignore[index]
        return True

    def constructions(self, klass: cst.ClassDef) -> List[cst.Call]:
        """The calls of this module that make an instance of `klass` by its name (`Trainer(...)`)."""
        name = klass.name.value
        return [call for call in self.calls if type(call.func) is cst.Name and call.func.value == name  # type: ignore[attr-defined]
                and self.classes.get(name) is klass]

    def arguments_for(self, param: cst.Param) -> Optional[List[Tuple[cst.Call, Optional[cst.BaseExpression]]]]:
        """What each call of the function in this module passes for `param`, by keyword or by
        position (`parameters_given`), None where a call passes nothing for it (its default
        applies); None for them all when a call may pass it through `*args` / `**kwargs`, or
        when `param` is a lambda's."""
        func = self.tree.scope_of(param)
        if type(func) is not cst.FunctionDef:
            return None
        name = param.name.value
        passed: List[Tuple[cst.Call, Optional[cst.BaseExpression]]] = []
        sites = self.call_sites(func)  # type: ignore[arg-type]
        klass = self.tree.class_of(func)
        if klass is not None and func.name.value == "__init__":  # type: ignore[attr-defined]
            sites = [*sites, *self.constructions(klass)]  # `Trainer(model, optimizer)` calls `__init__`
        for site in sites:
            if any(a.star for a in site.args):
                return None
            found = next((arg for arg, given in self.parameters_given(site, func) if given == name), None)  # type: ignore[arg-type]
            passed.append((site, None if found is None else found.value))
        return passed

    def parameters_given(self, call: cst.Call, func: cst.FunctionDef) -> List[Tuple[cst.Arg, str]]:
        """Each argument of `call` (up to the first `*args` / `**kwargs`) with the parameter of
        `func` it binds: by keyword, or by position after a method's instance or a class
        method's class, which the call does not pass; a method called on its class by name
        (`Base.forward(self, x)`) is passed its instance first."""
        params = [p.name.value for p in (*func.params.posonly_params, *func.params.params)]
        decorators = {dotted_name(d.decorator) for d in func.decorators}
        bound = self.tree.class_of(func) is not None and "staticmethod" not in decorators and (
            "classmethod" in decorators or not self.on_class(call))
        if bound:
            params = params[1:]
        named = set(params) | {p.name.value for p in func.params.kwonly_params}
        given: List[Tuple[cst.Arg, str]] = []
        for position, arg in enumerate(call.args):
            if arg.star:
                break
            if arg.keyword is not None:
                if arg.keyword.value in named:
                    given.append((arg, arg.keyword.value))
            elif position < len(params):
                given.append((arg, params[position]))
        return given

    def on_class(self, call: cst.Call) -> bool:
        """`Unet.from_config(...)`: a method called on a class of this module by its name."""
        func = call.func
        return type(func) is cst.Attribute and type(func.value) is cst.Name and \
            func.value.value in self.classes and not self.bindings_seen(func.value.value, call)  # type: ignore[attr-defined]
