"""A module's summary: what other modules of the project need to know about it.

Made once per file from its own facts (no other module's), kept in the result cache with the
file's text, and read by memlint.analysis.project:

- `imports`: the absolute name each local name is imported as (relative imports resolved), so
  that a name another module imports through this one (`from pkg import Accuracy`, where
  `pkg/__init__.py` imports it from `.metrics`) is followed to its definition;
- `aliases`: likewise, the name each of its module-level aliases stands for (`ResNetBlockBase =
  CNNBlockBase`, of a name it imports or of a function or class it defines);
- `functions` and `classes` (module level; a class with its bases as this module names them,
  whether it is known here to be an nn.Module, whether a method learns (backwards, steps an
  optimizer or asks for gradients), and its methods): for each function, its
  parameters and what it does with them (`FunctionSummary`), whether it is decorated to run
  without grad, for a `forward` the modes it computes without grad, and for a context manager
  the no_grad or autocast it enters;
- `saves`: the module's `torch.save` calls that name their file, whether they write from the
  CPU and what objects they write (memlint.analysis.checkpoints);
- `calls`: every call of a function of the project (this module's, or one it imports from a
  project module, or a method on `self`) from a module-level function or method, or from the
  module's own code, with how often the call runs in its function (memlint.analysis.often)
  and, for another module's function, whether it is made with grad off; a call of this
  module's own function only where that function leads to a call out of the module;
  a call in a function nested in one counts as the outer function's, where the nested
  function tells how often it runs by itself;
- `device`: the module's own code names a device (`Facts.names_device`): the helpers it calls
  in other modules get their tensors there;
- `forward_asks_for_grad`: a class's `forward` asks for gradients (a force field's
  `torch.autograd.grad(energy, positions)`): a model of the project may fail under no_grad.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Dict, FrozenSet, Iterator, List, Optional, Set, Tuple, Union

import libcst as cst

from memlint.analysis.cache import only_empties_cache
from memlint.analysis.dataflow import binding_targets
from memlint.analysis.often import BOUNDARY, EVAL_FUNCTION, INNER, STEP, TRAINING_METHOD, at_site, intrinsic_often
from memlint.analysis.tree import base_class, dotted_name, expression_nodes, own_method

if TYPE_CHECKING:
    from memlint.analysis import Facts
    from memlint.analysis.regions import Regions


@dataclass(frozen=True)
class FunctionSummary:
    """What a function does that its callers in other modules need to know."""

    params: Tuple[str, ...]  # positional and keyword parameters, `self` included
    keeps_graph: Tuple[str, ...] = ()  # parameters appended to the instance with their graph
    keeps_output: Tuple[str, ...] = ()  # parameters appended to the instance as device tensors
    returns_graph: bool = False  # returns a value carrying an autograd graph
    returns_output: bool = False  # returns a model's output (on its device, whatever the grad mode)
    accumulates_graph: Tuple[str, ...] = ()  # parameters added with their graph into a sum the instance keeps
    empties_cache: bool = False  # does nothing but empty the allocator's cache (memlint.analysis.cache)
    quiet_modes: Tuple[str, ...] = ()  # a forward's modes run without grad, `mode=inference` (Regions.quiet_modes)
    context: Tuple[str, ...] = ()  # a context manager's no_grad or autocast around its yield (Regions.context_of)
    grad_off: bool = False  # decorated to run without grad (`@torch.no_grad()`)
    returns_device: bool = False  # returns a tensor on the device (`torch.from_numpy(path).to(device=device)`)

    def to_json(self) -> list:
        return [list(self.params), list(self.keeps_graph), list(self.keeps_output), self.returns_graph,
                self.returns_output, list(self.accumulates_graph), self.empties_cache, list(self.quiet_modes),
                list(self.context), self.grad_off, self.returns_device]

    @classmethod
    def from_json(cls, data: list) -> "FunctionSummary":
        params, keeps_graph, keeps_output, returns_graph, returns_output, accumulates_graph, empties_cache, \
            quiet_modes, context, grad_off, returns_device = data
        if not all(isinstance(flag, bool) for flag in (returns_graph, returns_output, empties_cache, grad_off,
                                                       returns_device)):
            raise ValueError("not a function summary")
        return cls(_names(params), _names(keeps_graph), _names(keeps_output), returns_graph, returns_output,
                   _names(accumulates_graph), empties_cache, _names(quiet_modes), _names(context), grad_off,
                   returns_device)


@dataclass(frozen=True)
class ClassSummary:
    bases: Tuple[str, ...]  # a class of the same module by its name, else the absolute imported name
    module: bool  # known in its own module to be an nn.Module
    methods: Dict[str, FunctionSummary] = field(default_factory=dict)
    learns: bool = True  # a method backwards, steps an optimizer or asks for gradients (True: not known)

    def to_json(self) -> list:
        return [list(self.bases), self.module, {k: v.to_json() for k, v in self.methods.items()}, self.learns]

    @classmethod
    def from_json(cls, data: list) -> "ClassSummary":
        bases, module, methods, learns = data
        if not isinstance(module, bool) or not isinstance(methods, dict) or not isinstance(learns, bool):
            raise ValueError("not a class summary")
        return cls(_names(bases), module, {_name(k): FunctionSummary.from_json(v) for k, v in methods.items()},
                   learns)


@dataclass(frozen=True)
class Edge:
    """A call of a project function."""

    caller: str  # the function calling: `f`, `Class.method`, or "" for module-level code
    callee: str  # `f` / `Class.method` of this module (`local`), `Class.method` called on `self`
    # (`on_self`: overrides in subclasses are called too), or the absolute name it is imported as
    kind: str  # how often it runs in its function (memlint.analysis.often: a frequency, CALLER, REPEATED)
    local: bool = False
    on_self: bool = False
    grad_off: bool = False  # the call is made with grad off (under `torch.no_grad()`, `_quiet`)

    def to_json(self) -> list:
        return [self.caller, self.callee, self.kind, self.local, self.on_self, self.grad_off]

    @classmethod
    def from_json(cls, data: list) -> "Edge":
        caller, callee, kind, local, on_self, grad_off = data
        if not all(isinstance(flag, bool) for flag in (local, on_self, grad_off)):
            raise ValueError("not an edge")
        return cls(_name(caller), _name(callee), _name(kind), local, on_self, grad_off)


@dataclass(frozen=True)
class SavedFile:
    """A `torch.save` whose path names its file (memlint.analysis.checkpoints): another
    module loading a file of that name reads what it wrote."""

    files: Tuple[str, ...]
    cpu: bool  # everything it writes is on the CPU
    objects: Tuple[str, ...]  # what it writes that `weights_only=True` refuses

    def to_json(self) -> list:
        return [list(self.files), self.cpu, list(self.objects)]

    @classmethod
    def from_json(cls, data: list) -> "SavedFile":
        files, cpu, objects = data
        if not isinstance(cpu, bool):
            raise ValueError("not a saved file")
        return cls(_names(files), cpu, _names(objects))


@dataclass(frozen=True)
class ModuleSummary:
    name: str
    imports: Dict[str, str]
    functions: Dict[str, FunctionSummary]
    classes: Dict[str, ClassSummary]
    calls: Tuple[Edge, ...]
    saves: Tuple[SavedFile, ...] = ()
    device: bool = False
    stars: Tuple[str, ...] = ()  # the modules it imports everything of (`from .models import *`), absolute
    forward_asks_for_grad: bool = True  # a model's forward here asks for gradients (True: not known)
    sets: Tuple[str, ...] = ()  # the names of imported modules it assigns (`nerf.DEBUG = args.debug`), absolute
    language_model: bool = False  # what it builds is a language model (Outputs.builds_language_model)
    # the methods named for evaluation it calls on objects (not `self`), with whether each call runs with grad off
    evaluation_calls: Tuple[Tuple[str, bool], ...] = ()
    # its aliases of a name it imports or of a function or class it defines, with the absolute name each stands for
    aliases: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def empty(cls, name: str) -> "ModuleSummary":
        """The summary of a module that says nothing to the others (no torch, or no valid code)."""
        return cls(name, {}, {}, {}, (), forward_asks_for_grad=False)

    def to_json(self) -> dict:
        return {"name": self.name, "imports": self.imports,
                "functions": {k: v.to_json() for k, v in self.functions.items()},
                "classes": {k: v.to_json() for k, v in self.classes.items()},
                "calls": [e.to_json() for e in self.calls], "saves": [s.to_json() for s in self.saves],
                "device": self.device, "stars": list(self.stars), "forward_asks_for_grad": self.forward_asks_for_grad,
                "sets": list(self.sets), "language_model": self.language_model,
                "evaluation_calls": [[name, quiet] for name, quiet in self.evaluation_calls], "aliases": self.aliases}

    @classmethod
    def from_json(cls, data: dict) -> "ModuleSummary":
        imports, device, asks = data["imports"], data.get("device", False), data.get("forward_asks_for_grad", True)
        language_model = data.get("language_model", False)
        evaluation_calls, aliases = data.get("evaluation_calls", []), data.get("aliases", {})
        if not isinstance(imports, dict) or not isinstance(aliases, dict) or \
                not all(isinstance(flag, bool) for flag in (device, asks, language_model)) \
                or not isinstance(evaluation_calls, list) or not all(
                    isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], bool) for pair in evaluation_calls):
            raise ValueError("not a module summary")
        return cls(_name(data["name"]), {_name(k): _name(v) for k, v in imports.items()},
                   {_name(k): FunctionSummary.from_json(v) for k, v in data["functions"].items()},
                   {_name(k): ClassSummary.from_json(v) for k, v in data["classes"].items()},
                   tuple(Edge.from_json(e) for e in data["calls"]),
                   tuple(SavedFile.from_json(s) for s in data.get("saves", [])), device,
                   _names(data.get("stars", [])), asks, _names(data.get("sets", [])), language_model,
                   tuple((_name(name), quiet) for name, quiet in evaluation_calls),
                   {_name(k): _name(v) for k, v in aliases.items()})


def _name(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("not a name")
    return value


def _names(values: object) -> Tuple[str, ...]:
    if not isinstance(values, list):
        raise ValueError("not a list of names")
    return tuple(_name(v) for v in values)


def summarize(facts: "Facts", imported: bool = True, source: Union[str, ast.Module, None] = None) -> ModuleSummary:
    """The summary of the module `facts` describes (its name: `facts.project.name`), from what
    it alone says; `imported`: another module of the project imports it, so its functions may
    be called there (a module nobody imports has no callers elsewhere, only overrides of
    what its classes' bases call: their names, parameters and grad mode are all it needs).
    `source`: the module's text (else made again from its tree) or Python's tree of it, read
    where the module may alias a name (`module_aliases`)."""
    module = facts.module
    names = facts.names
    # the module's code may ask for gradients somewhere (it names what does: `torch.autograd.grad`,
    # `enable_grad`, `requires_grad_`, `register_hook`, ...)
    asks = bool(_ASKING_NAMES & facts.identifiers)
    functions: Dict[str, FunctionSummary] = {}
    classes: Dict[str, ClassSummary] = {}
    for statement in module.body:
        if type(statement) is cst.FunctionDef and imported:
            functions[statement.name.value] = replace(_function(facts, statement),
                                                      empties_cache=only_empties_cache(statement, names.call_name),
                                                      context=facts.regions.context_of(statement))
        elif type(statement) is cst.ClassDef:
            bases = tuple(base for base in (_base_name(facts, b.value) for b in statement.bases) if base)
            methods = {s.name.value: _function(facts, s) if imported else
                       FunctionSummary(_params(s), grad_off=facts.regions.runs_without_grad(s))
                       for s in statement.body.body if type(s) is cst.FunctionDef}
            classes[statement.name.value] = ClassSummary(
                bases, statement.name.value in facts.receivers.local_module_classes, methods,
                _learns(facts, statement, asks))
    imports = names.absolute_imports()
    aliases = module_aliases(source if isinstance(source, ast.Module) else ast.parse(
        source if source is not None else module.code), facts.project.name, facts.project.package) \
        if _may_alias(module) else {}
    return ModuleSummary(facts.project.name, imports, functions, classes, tuple(_edges(facts)),
                         _saved_files(facts), facts.names_device, names.star_modules,
                         _forward_asks_for_grad(facts, asks), _sets(facts, imports),
                         facts.outputs.builds_language_model, _evaluation_calls(facts), aliases)


def _evaluation_calls(facts: "Facts") -> Tuple[Tuple[str, bool], ...]:
    """The methods named for evaluation (memlint.analysis.phase: `EVAL_FUNCTION`) the module
    calls on an object other than `self` (`self.task_helper.eval_step(batch)`, its class not
    known here), each with whether a call of it runs with grad off: where every call of such a
    method in the project does, the method records no graph (PET's task helpers)."""
    quiet = facts.regions.turns_grad_off  # (grad is off at no call of a module that turns it off nowhere)
    found: Dict[Tuple[str, bool], None] = {}
    for call in facts.scopes.calls:
        func = call.func
        if type(func) is cst.Attribute and EVAL_FUNCTION.search(func.attr.value) and \
                not (type(func.value) is cst.Name and func.value.value == "self") and \
                not (func.attr.value == "eval" and not call.args):  # (`model.eval()`: a mode, no evaluation)  # type: ignore[attr-defined]
            found[(func.attr.value, quiet and _quiet(facts.regions, call))] = None  # type: ignore[attr-defined]
    return tuple(sorted(found))


def _sets(facts: "Facts", imports: Dict[str, str]) -> Tuple[str, ...]:
    """The names of the project's modules the module assigns, anywhere in it (`nerf.DEBUG =
    args.debug` in `main`), `module.*` where it may set any (`setattr(nerf, key, value)`,
    `vars(nerf).update(...)`, `nerf.__dict__`): a switch another module sets is not what its
    own module binds."""
    found: Dict[str, None] = {}

    def absolute(owner: Optional[str], attr: str) -> None:
        head, _, rest = (owner or "").partition(".")
        module = imports.get(head)
        name = ".".join(filter(None, (module, rest, attr))) if module else ""
        if name and facts.project.knows(name):  # (a module of the project's, not torch's)
            found[name] = None

    for node, _ in facts.tree.listed:
        kind = type(node)
        if kind is cst.Assign:
            targets = [t.target for t in node.targets]  # type: ignore[attr-defined]
        elif kind is cst.AugAssign or kind is cst.AnnAssign or kind is cst.For:
            targets = [node.target]  # type: ignore[attr-defined]
        elif kind is cst.Call and type(node.func) is cst.Name and node.func.value in ("setattr", "vars") and node.args:  # type: ignore[attr-defined]
            absolute(dotted_name(node.args[0].value), "*")  # type: ignore[attr-defined]
            continue
        else:
            if kind is cst.Call and type(node.func) is cst.Attribute and type(node.func.value) is cst.Attribute and \
                    node.func.value.attr.value == "__dict__":  # type: ignore[attr-defined]
                absolute(dotted_name(node.func.value.value), "*")  # type: ignore[attr-defined]
            continue
        for target in targets:
            for leaf in ([e.value for e in target.elements] if type(target) in (cst.Tuple, cst.List) else [target]):  # type: ignore[attr-defined]
                if type(leaf) is cst.Attribute:
                    absolute(dotted_name(leaf.value), leaf.attr.value)  # type: ignore[attr-defined]
                elif type(leaf) is cst.Subscript and type(leaf.value) is cst.Attribute and \
                        leaf.value.attr.value == "__dict__":  # type: ignore[attr-defined]
                    absolute(dotted_name(leaf.value.value), "*")  # type: ignore[attr-defined]
    return tuple(found)


# names a module spells where its code may ask for gradients (memlint.analysis.roles.Roles.asks_for_grad)
_ASKING_NAMES = frozenset({"autograd", "enable_grad", "requires_grad_", "requires_grad", "retain_grad", "register_hook",
                           "jacobian", "hessian", "set_grad_enabled"})


def _forward_asks_for_grad(facts: "Facts", asks: bool) -> bool:
    """A `forward` (or `__call__`) of a class of the module asks for gradients (a force field's
    `torch.autograd.grad(energy, positions)`): run under no_grad, it would fail."""
    return asks and any(
        method.name.value in ("forward", "__call__") and facts.roles.asks_for_grad(method)
        for klass in facts.scopes.classes.values() for method in klass.body.body if type(method) is cst.FunctionDef)


def _learns(facts: "Facts", klass: cst.ClassDef, asks: bool) -> bool:
    """A method of the class backwards, steps an optimizer or asks for gradients (helpers of
    its module followed), or its `forward` (or `__call__`) hands what it is given to another
    module's function, or keeps it on the instance (`self.pending.append(loss)`, for a backward
    elsewhere): what its instances are handed may be trained on."""
    roles, values, tree = facts.roles, facts.values, facts.tree
    training = [b.call for b in roles.backwards] + [s.call for s in roles.optimizer_steps]
    if any(tree.contains(klass, call) for call in training):
        return True
    helpers_train = bool(training)  # (elsewhere in the module: a helper a method calls may train)
    for method in klass.body.body:
        if not type(method) is cst.FunctionDef:
            continue
        if helpers_train and (roles.backwards_in(method.body) or roles.steps_in(method.body)) or \
                asks and roles.asks_for_grad(method):
            return True
        if method.name.value not in ("forward", "__call__"):
            continue
        given = frozenset(_params(method)[1:])  # (what the instance is called with may carry a graph)
        if _hands_on(facts, method, given):
            return True
        for node in facts.tree.scope_nodes(method.body, *_STORING):
            stored = _stored_on_self(node)
            if stored is not None and values.carries_grad_from(stored, node, given):
                return True
    return False


def _hands_on(facts: "Facts", method: cst.FunctionDef, given: FrozenSet[str]) -> bool:
    """The method passes what it is given, or what it computes from that, to a function of
    another module of the project named for training (`backward_step(loss)`), which may
    backward it."""
    values = facts.values
    for call, _ in facts.calls.calls_in(method.body, follow=False):
        callee = values.project_callee(call)
        if callee is not None and TRAINING_METHOD.search(callee.rpartition(".")[2]) and \
                any(values.carries_grad_from(arg.value, call, given) for arg in call.args):
            return True
    return False


# the statements and calls `_stored_on_self` reads
_STORING = (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Call)


def _stored_on_self(node: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """What `node` stores on `self` (`self.x = v`, `self.x += v`, `self.items.append(v)`), if it does."""
    if type(node) in (cst.Assign, cst.AugAssign, cst.AnnAssign):
        targets = binding_targets(node)
        if any(dotted_name(t) is not None and (dotted_name(t) or "").startswith("self.") or
               type(t) is cst.Subscript and (dotted_name(t.value) or "").startswith("self.") for t in targets):
            return node.value  # type: ignore[attr-defined]
    if type(node) is cst.Call and type(node.func) is cst.Attribute and node.args and \
            node.func.attr.value in ("append", "extend", "insert", "add", "put") and \
            (dotted_name(node.func.value) or "").startswith("self."):  # type: ignore[attr-defined]
        return node.args[-1].value  # type: ignore[attr-defined]
    return None


def _saved_files(facts: "Facts") -> Tuple[SavedFile, ...]:
    """The module's `torch.save` calls whose path names a file."""
    return tuple(SavedFile(tuple(sorted(save.files)), save.cpu, save.objects)
                 for save in facts.checkpoints.saves if save.files)


def summarize_plain(source: Union[str, ast.Module], name: str, package: Optional[str]) -> ModuleSummary:
    """The summary of a module no rule looks into (it never mentions torch), or of a module of
    tests alone that no other module imports (memlint.engine): only what other modules may reach through it, its imports
    (a package's `__init__.py` re-exporting its modules' classes), its aliases, and its classes'
    bases (a base class of a project's models). Read with Python's own parser (`source` may be its AST
    already), a fraction of the cost of LibCST's, since nothing else is needed."""
    imports: Dict[str, str] = {}
    stars: List[str] = []
    classes: Dict[str, ClassSummary] = {}
    tree = ast.parse(source) if isinstance(source, str) else source
    for statement in tree.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            for local, full in _imported(statement, package):
                if local == "*":
                    stars.append(full)
                else:
                    imports[local] = full
        elif isinstance(statement, ast.ClassDef):
            bases = []
            for base_expr in statement.bases:
                dotted = _ast_dotted(base_expr.value if isinstance(base_expr, ast.Subscript) else base_expr)  # `Base[T]`
                if dotted is not None:
                    head, _, rest = dotted.partition(".")
                    full = imports.get(head)
                    bases.append(dotted if dotted in classes or full is None else ".".join(filter(None, (full, rest))))
            methods = {f.name: FunctionSummary(tuple(a.arg for a in (*f.args.posonlyargs, *f.args.args,
                                                                      *f.args.kwonlyargs)))
                       for f in statement.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
            classes[statement.name] = ClassSummary(tuple(bases), False, methods)
    return ModuleSummary(name, imports, {}, classes, (), stars=tuple(dict.fromkeys(stars)), forward_asks_for_grad=False,
                         sets=_plain_sets(tree, imports), aliases=module_aliases(tree, name, package))


def _imported(statement: Union[ast.Import, ast.ImportFrom], package: Optional[str]) -> Iterator[Tuple[str, str]]:
    """Each local name an import statement binds, with the absolute name it stands for (a
    relative import resolved from `package`; none where it cannot be); `("*", module)` for a
    star import."""
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            head = alias.name.split(".")[0]
            yield (alias.asname, alias.name) if alias.asname else (head, head)
        return
    base = statement.module or ""
    if statement.level:
        if package is None:
            return
        parts = package.split(".") if package else []
        if statement.level - 1 > len(parts):
            return
        base = ".".join([*parts[:len(parts) - (statement.level - 1)], *([base] if base else [])])
    if base:
        for alias in statement.names:
            yield ("*", base) if alias.name == "*" else (alias.asname or alias.name, f"{base}.{alias.name}")


def _may_alias(module: cst.Module) -> bool:
    """Whether a top-level statement of `module` is `alias = name` or `alias = name.attr` (not
    `flag = True`)."""
    return any(type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name
               and type(small.value) in (cst.Name, cst.Attribute) and dotted_name(small.value) not in _CONSTANTS
               for statement in module.body if type(statement) is cst.SimpleStatementLine for small in statement.body)


_CONSTANTS = (None, "True", "False", "None")


def module_aliases(tree: ast.Module, module: str, package: Optional[str]) -> Dict[str, str]:
    """The module's aliases (`ResNetBlockBase = CNNBlockBase`, an old name kept for the code
    written against it; `ConvBnAct = ConvNormAct`), each with the absolute name it stands for, so
    that a module importing the alias is followed to what it names, as through an import: a
    top-level `alias = name` or `alias = name.attr`, where `name` is imported (`package`: where
    relative imports start) or defined, as a function or class, by a top-level statement before
    it, undecorated. Only where nothing else in the module binds either name, in any scope
    (another assignment, import, definition, `global`, `del`, `except ... as`, `match` capture or
    walrus; a function's own local of the same name counts too, its parameters aside), and the
    module neither imports everything of another nor names what binds names out of sight
    (`globals`, `vars`, `exec`, `setattr`, `sys.modules`). Read from Python's tree for a module a
    rule reads and for one no rule reads alike."""
    assigned = [(index, statement) for index, statement in enumerate(tree.body)
                if isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name) and _ast_dotted(statement.value) is not None]
    if not assigned:
        return {}
    binders: Dict[str, List[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in _BINDING_OUT_OF_SIGHT or \
                isinstance(node, ast.Attribute) and node.attr == "modules" and _ast_dotted(node) == "sys.modules":
            return {}
        for bound in _bound_names(node):
            if bound == "*":
                return {}
            binders.setdefault(bound, []).append(node)
    place = {id(statement): index for index, statement in enumerate(tree.body)}
    found: Dict[str, str] = {}
    for index, statement in assigned:
        local, dotted = statement.targets[0].id, _ast_dotted(statement.value)  # type: ignore[attr-defined]
        head, _, rest = dotted.partition(".")  # type: ignore[union-attr]
        if len(binders.get(local, ())) != 1 or len(binders.get(head, ())) != 1:
            continue
        binder = binders[head][0]
        if place.get(id(binder), index) >= index:  # (not a top-level statement before the alias)
            continue
        if isinstance(binder, (ast.Import, ast.ImportFrom)):
            full = dict(_imported(binder, package)).get(head)
            if full is not None:
                found[local] = ".".join(filter(None, (full, rest)))
        elif isinstance(binder, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not binder.decorator_list:
            found[local] = f"{module}.{dotted}"
    return found


_BINDING_OUT_OF_SIGHT = frozenset({"globals", "vars", "exec", "setattr"})


def _bound_names(node: ast.AST) -> Iterator[str]:
    """The names `node` binds in its scope (`*` for a star import)."""
    if isinstance(node, ast.Name):
        if not isinstance(node.ctx, ast.Load):
            yield node.id
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            yield alias.asname or (alias.name if isinstance(node, ast.ImportFrom) else alias.name.split(".")[0])
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        yield from node.names
    elif isinstance(node, _NAMED_CAPTURES):
        if node.name is not None:  # type: ignore[attr-defined]
            yield node.name  # type: ignore[attr-defined]
    elif isinstance(node, _MAPPING_CAPTURE):
        if node.rest is not None:  # type: ignore[attr-defined]
            yield node.rest  # type: ignore[attr-defined]


# `except ... as name` and the captures of `match` patterns (Python 3.10 on)
_NAMED_CAPTURES = (ast.ExceptHandler, *(getattr(ast, kind) for kind in ("MatchAs", "MatchStar") if hasattr(ast, kind)))
_MAPPING_CAPTURE = getattr(ast, "MatchMapping", ())


def _plain_sets(tree: ast.Module, imports: Dict[str, str]) -> Tuple[str, ...]:
    """`_sets` of a module summarised plain (a launcher that sets `nerf.DEBUG = args.debug` and
    names nothing a rule needs): the assignments at its top level, and in the bodies of its
    top-level `if`s and functions."""
    found: Dict[str, None] = {}
    blocks = [tree.body] + [s.body for s in tree.body if isinstance(s, (ast.If, ast.FunctionDef))]
    for statement in (s for block in blocks for s in block):
        targets = statement.targets if isinstance(statement, ast.Assign) else \
            [statement.target] if isinstance(statement, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            owner = _ast_dotted(target.value) if isinstance(target, ast.Attribute) else None
            head, _, rest = (owner or "").partition(".")
            if head in imports:
                found[".".join(filter(None, (imports[head], rest, target.attr)))] = None  # type: ignore[attr-defined]
    return tuple(found)


def _ast_dotted(expr: ast.expr) -> Optional[str]:
    """`a.b.c` for a chain of names and attributes of Python's tree, else None (walked, not
    recursed: a chain may be longer than Python's recursion allows)."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


def _base_name(facts: "Facts", base: cst.BaseExpression) -> Optional[str]:
    dotted = dotted_name(base_class(base))
    if dotted is None:
        return None
    if dotted in facts.scopes.classes:
        return dotted
    return facts.names.absolute_name(dotted) or dotted


def _params(func: cst.FunctionDef) -> Tuple[str, ...]:
    return tuple(p.name.value for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params))


def _function(facts: "Facts", func: cst.FunctionDef) -> FunctionSummary:
    summary = replace(_what_it_does(facts, func), grad_off=facts.regions.runs_without_grad(func))
    if func.name.value == "forward":
        summary = replace(summary, quiet_modes=facts.regions.quiet_modes(func))
    return summary


def _what_it_does(facts: "Facts", func: cst.FunctionDef) -> FunctionSummary:
    params = _params(func)
    values, roles = facts.values, facts.roles
    method = params[:1] == ("self",)
    positional = {p.name.value for p in (*func.params.posonly_params, *func.params.params)}
    # (only what a call passes by position or by its own name: a keyword-only parameter has no position)
    kept = tuple(tuple(n for n in names if n in positional) for names in values.kept_parameters(func)) \
        if method else ((), ())
    summed = tuple(n for n in values.accumulated_parameters(func) if n in positional) if method else ()
    scopes = facts.scopes
    device = facts.syncs.returns_device(func)
    if not scopes.returned(func) or not any(
            roles.is_forward(call) or roles.is_loss(call) or scopes.resolve(call) is not None
            or values.project_callee(call) for call in scopes.calls_of(func)):
        # returns nothing (an `__init__`), or runs no model and calls no helper: none of its outputs
        return FunctionSummary(params, kept[0], kept[1], accumulates_graph=summed, returns_device=device)
    return FunctionSummary(params, kept[0], kept[1], values.returns_grad(func), values.returns_output(func), summed,
                           returns_device=device)


def _edges(facts: "Facts") -> List[Edge]:
    """Every call of a function of the project that a module-level function or method, or the
    module's own code, makes; in nested functions, only the calls `_nested_caller` can place
    (lambdas are not followed). A call of this module's own function is kept only where that
    function leads out of the module (`_leading_out`): the project follows the calls into a
    function of another module back up through their callers, never down, so a local call that
    leads nowhere else is never read, and how often it runs is not worked out. A call on `self`
    of what `__init__` always puts on the instance (`self.conv(x)` after `self.conv =
    nn.Conv2d(...)`) calls that object, not a method a subclass could override: no edge."""
    tree, scopes, regions = facts.tree, facts.scopes, facts.regions
    quiet = regions.turns_grad_off  # (grad is off at no call of a module that turns it off nowhere)
    found: List[Tuple[cst.Call, Edge]] = []  # each with its call; its kind "" until the edge is known to be kept
    held: Dict[Tuple[int, str], bool] = {}  # (id(class), attribute) -> `_held_by_instance`
    named: Dict[int, Optional[str]] = {}  # id(scope) -> `_qualified` (a scope makes many calls)
    for call in scopes.calls:
        scope = tree.scope_of(call)
        caller = named.get(id(scope), _UNNAMED)
        if caller is _UNNAMED:
            caller = named[id(scope)] = _qualified(facts, scope)
        kind = ""
        if caller is None:
            caller, kind = _nested_caller(facts, scope, call)
            if caller is None:
                continue
        target = scopes.resolve(call)
        if target is not None:
            callee = named.get(id(target), _UNNAMED)
            if callee is _UNNAMED:
                callee = named[id(target)] = _qualified(facts, target)
            if callee:
                found.append((call, Edge(caller, callee, kind, local=True)))
        func = call.func
        if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
            klass = scopes.enclosing_class(call)
            if klass is not None and tree.scope_of(klass) is tree.module and klass is tree.class_of(scope) and \
                    not _held(held, klass, func.attr.value):
                found.append((call, Edge(caller, f"{klass.name.value}.{func.attr.value}", kind, on_self=True)))
            continue
        if target is None:
            dotted = facts.values.project_callee(call)
            if dotted is not None:
                found.append((call, Edge(caller, dotted, kind)))
    leading_out = _leading_out([edge for _, edge in found])
    return [Edge(edge.caller, edge.callee, edge.kind or facts.steps.site(call), edge.local, edge.on_self,
                 quiet and _quiet(regions, call))
            for call, edge in found if not edge.local or edge.callee in leading_out]


_UNNAMED = "<not yet named>"  # (`_edges`: `_qualified` not yet asked of a scope)


def _held(held: Dict[Tuple[int, str], bool], klass: cst.ClassDef, attr: str) -> bool:
    """`_held_by_instance`, kept in `held` for the module's calls on `self`."""
    key = (id(klass), attr)
    found = held.get(key)
    if found is None:
        found = held[key] = _held_by_instance(klass, attr)
    return found


def _held_by_instance(klass: cst.ClassDef, attr: str) -> bool:
    """The class's own `__init__` always sets `self.<attr>` (at the top of its body) to
    something other than the method of that name (`self.conv = nn.Conv2d(...)`, not `self.step
    = torch.compile(self.step)`, which still calls the method, nor one set only on a condition):
    a call of it on `self` reaches the object the instance holds, which hides any method of
    that name, a subclass's too."""
    init = own_method(klass, "__init__")
    for line in init.body.body if init is not None else ():
        for statement in line.body if type(line) is cst.SimpleStatementLine else ():  # type: ignore[attr-defined]
            if type(statement) is not cst.Assign:
                continue
            value = statement.value  # type: ignore[attr-defined]
            if any(_self_attribute(target.target) == attr for target in statement.targets) and \
                    all(_self_attribute(node) != attr for node in expression_nodes(value)):  # type: ignore[attr-defined]
                return True
    return False


def _self_attribute(node: cst.CSTNode) -> Optional[str]:
    """`conv` for `self.conv`; None for any other node."""
    if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self":  # type: ignore[attr-defined]
        return node.attr.value  # type: ignore[attr-defined]
    return None


def _leading_out(edges: List[Edge]) -> Set[str]:
    """The callers that make a call another module's function may answer (`on_self` too: an
    override in a subclass elsewhere), and those that reach one of them through the module's
    own functions."""
    leading = {edge.caller for edge in edges if not edge.local}
    callers: Dict[str, Set[str]] = {}
    for edge in edges:
        if edge.local:
            callers.setdefault(edge.callee, set()).add(edge.caller)
    pending = list(leading)
    while pending:
        for caller in callers.get(pending.pop(), ()):
            if caller not in leading:
                leading.add(caller)
                pending.append(caller)
    return leading


def _quiet(regions: "Regions", call: cst.Call) -> bool:
    """The call is made with grad off: in a no-grad region or a function only called so, or in
    a module that turns grad off as a statement at its top."""
    return regions.grad_enabled(call) is False or regions.off_at_top


def _nested_caller(facts: "Facts", scope: cst.CSTNode, call: cst.Call) -> Tuple[Optional[str], Optional[str]]:
    """A call in a function nested in a module-level one (ijepa's `def train_step():` inside
    `main`'s batch loop, handed to a timer): the outer function as its caller, with how often
    the call runs when the nested function tells by itself (its loops, or its name: a
    `train_step` is a step). (None, None) when it does not: how often a closure runs depends
    on who calls it, which this module's summary cannot know."""
    tree = facts.tree
    outer = scope
    while type(outer) is cst.FunctionDef and _qualified(facts, outer) is None:
        outer = tree.scope_of(outer)
    caller = _qualified(facts, outer) if outer is not scope and type(scope) is cst.FunctionDef else None
    if caller is None:
        return None, None
    often = at_site(facts.steps.site(call), intrinsic_often(scope.name.value, False))  # type: ignore[attr-defined]
    return (caller, often) if often in (STEP, INNER, BOUNDARY) else (None, None)


def _qualified(facts: "Facts", scope: cst.CSTNode) -> Optional[str]:
    """`f` or `Class.method` for a module-level function or a method of a module-level class,
    "" for the module, None for anything nested."""
    tree = facts.tree
    if scope is tree.module:
        return ""
    if not type(scope) is cst.FunctionDef:
        return None
    parent = tree.scope_of(scope)
    if parent is not tree.module:
        return None
    klass = tree.class_of(scope)
    if klass is None:
        return scope.name.value
    return f"{klass.name.value}.{scope.name.value}" if tree.scope_of(klass) is tree.module else None
