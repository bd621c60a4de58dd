"""Guards: the conditions a piece of code runs under, and whether they are the user's choice.

Some code is right or wrong depending on who decided that it runs. `nn.DataParallel` that a
script applies whenever CUDA is available is the script's decision; the same line under
`if args.multi_gpu:` is the user's, who could have launched the script with torchrun instead.
Asked as `facts.guards`:

- `tests(node)`: the tests of the `if` statements and conditional expressions around a node in
  its function (or the module), the innermost first; an `elif` or `else` branch counts the
  tests before it too (they were false); `holding(node)`: the conditions found true on the way
  there (each part of an `and` test whose true branch holds the node, with that branch);
- `chosen(node)`: the node runs only because of something other than the hardware: a test
  reads a command-line argument, a configuration, an environment variable, a parameter, an
  attribute (not one its class sets only to the hardware's answer: `self.n_gpu =
  torch.cuda.device_count()`) or a module-level setting (`num_gpus = 1; if num_gpus > 1:` is a setting, and dead
  as written), or a literal false test; also when every call of the node's function in the
  module is so guarded. Tests about the hardware alone (`torch.cuda.is_available()`,
  `torch.cuda.device_count() > 1`, `x.is_cuda`, `device.type == "cuda"` for a device chosen
  by such a test) are not a choice.

- `off_by_default(node)`: the node runs only under an instance's switch whose every value is
  a parameter defaulting to `False` or `None` (`if self.proximal_bias:`);
- `dead(node)`: the node is in the body of an `if` whose test is surely false as written
  (`debug = False`, then `if debug and ...:`), or in the `else` of one whose test is surely
  true (`if not debug:`): it never runs;
- `exclusive(a, b)`: `a` and `b` never run in one pass through their function: one only where
  a flag holds, the other only where it fails, the flag tested twice and not rebound between
  (`if use_amp: <autocast forward> else: <plain forward>`, then `if use_amp: scaler(loss)
  else: loss.backward()`).

`a_setting(test)`: the test reads settings alone, the same on every step: a flag of the parsed
configuration (`if not args.fp16:`, `if self.args.batch_eval_metrics:`) or a switch of the
instance (`if self.use_liger_loss:`), not the state a trainer keeps (`self.control.should_log`)
nor a flag about memory (`if args.empty_cache:` is the user asking for it).

Asked by MEM601 (`chosen`), MEM501 (`a_setting`), MEM401 (`exclusive`), MEM602 (`holding`)
every rule of a per-step cost (`dead`, through `Facts.per_step`), MEM203 and receivers (`dead`:
a forward, or a model's binding, that never runs), MEM103 (`off_by_default`).
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Tuple

import libcst as cst

from memlint.analysis.cache import speaks_of_memory
from memlint.analysis.dataflow import binding_targets, conjuncts, leaf_targets
from memlint.analysis.scopes import Binding, Scopes
from memlint.analysis.settled import lineage, own_lineage, stores_any_attribute
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import TreeIndex, compares_name_to_main, dotted_name, literal_bool

if TYPE_CHECKING:
    from memlint.analysis.project import ProjectView

# Calls that only ask what hardware there is.
HARDWARE_CALLS = frozenset({
    "torch.cuda.is_available", "torch.cuda.device_count", "torch.cuda.is_initialized",
    "torch.backends.mps.is_available", "torch.backends.cudnn.is_available",
    "torch.xpu.is_available", "torch.xpu.device_count",
    "torch.accelerator.is_available", "torch.accelerator.device_count",
})
_PLACEMENT = frozenset({"is_cuda", "is_xpu", "is_mps", "is_cpu"})  # `x.is_cuda`: where a tensor is
_DEVICE = frozenset({"torch.device"})
_MAX_DEPTH = 4  # names followed to their values this deep
_FUNCTION_DEPTH = 2  # call sites of call sites

# Where settings are read from: the parsed command line or a configuration, also as the
# instance keeps it (`self.args.x`); and the instance's own switches (`self.use_liger_loss`).
_SETTINGS = frozenset({"args", "opt", "opts", "config", "cfg", "conf", "hparams", "flags", "FLAGS"})
_SWITCH = re.compile(r"^(use|enable|with)_|_enabled$")
# Parts of a setting's name or value that speak of what is shown, not computed (and `debug...`)
_LOGGING = frozenset({"verbose", "verbosity", "log", "logging", "print", "trace", "tracing", "profile", "profiling"})

# What a condition depends on, from the least to the most telling.
_LITERAL, _HARDWARE, _CHOICE = 0, 1, 2


class Guards:
    """The conditions around the code of one module (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes,
                 project: Optional["ProjectView"] = None) -> None:
        self.names = names
        self.tree = tree
        self.scopes = scopes
        self.project = project  # (None: nothing known of other modules)
        self._chosen: Dict[int, bool] = {}

    def tests(self, node: cst.CSTNode) -> List[cst.BaseExpression]:
        """The tests deciding whether `node` runs, within its function (see the module docstring);
        not a script's `if __name__ == "__main__":`, which runs it whenever the script runs."""
        found: List[cst.BaseExpression] = []
        child = node
        for ancestor in self.tree.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
                break
            if type(ancestor) in (cst.If, cst.IfExp) and child is not ancestor.test and \
                    not _main_guard(ancestor.test):
                found.append(ancestor.test)
            child = ancestor
        return found

    def holding(self, node: cst.CSTNode) -> List[Tuple[cst.BaseExpression, cst.CSTNode]]:
        """The conditions found true on the way to `node`, within its function: each part of
        the `and` test of every `if` (or conditional expression) whose true branch holds it
        (`if self.with_cp and x.requires_grad:` gives both parts), with that branch, the
        innermost first. They held when tested: whether they still hold at `node` depends on
        what the branch rebinds before it, which the asker checks."""
        found: List[Tuple[cst.BaseExpression, cst.CSTNode]] = []
        child = node
        for ancestor in self.tree.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
                break
            if type(ancestor) in (cst.If, cst.IfExp) and child is ancestor.body:
                found.extend((part, child) for part in conjuncts(ancestor.test))
            child = ancestor
        return found

    def chosen(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Whether `node` runs only by the user's choice, or never (see the module docstring)."""
        if any(self._depends_on(test, test, 0) == _CHOICE or self._depends_on(test, test, 0) == _LITERAL
               and literal_bool(test) is False for test in self.tests(node)):
            return True
        func = self.tree.function_of(node)
        if func is None or depth >= _FUNCTION_DEPTH:
            return False
        key = id(func)
        if key not in self._chosen:
            self._chosen[key] = False  # a recursive call does not decide
            sites = self.scopes.call_sites(func)
            self._chosen[key] = bool(sites) and all(self.chosen(site, depth + 1) for site in sites)
        return self._chosen[key]

    def off_by_default(self, node: cst.CSTNode) -> bool:
        """`node` runs only under a switch of its instance that is off unless a caller turns it
        on: `if self.proximal_bias:` where every assignment of `self.proximal_bias` in the class
        is a parameter of the method whose default is `False` or `None` (VITS's attention)."""
        klass = self.scopes.enclosing_class(node)
        if klass is None:
            return False
        for test in self.tests(node):
            name = dotted_name(test) or ""
            if not name.startswith("self.") or name.count(".") != 1:
                continue
            values = self.scopes.attribute_values(klass, name[5:])
            if values and all(type(value) is cst.Name and self._defaults_off(value) for value in values):
                return True
        return False

    def _defaults_off(self, name: cst.Name) -> bool:
        binds = self.scopes.bindings_seen(name.value, name)
        return bool(binds) and all(
            bind.kind == "param" and type(bind.node) is cst.Param and bind.node.default is not None and  # type: ignore[attr-defined]
            type(bind.node.default) is cst.Name and bind.node.default.value in ("False", "None")  # type: ignore[attr-defined]
            for bind in binds)

    def dead(self, node: cst.CSTNode) -> bool:
        """`node` never runs as written: it is in the body of an `if` (or a conditional
        expression) of its function whose test is surely false (`if False:`; `distributed_loss
        = False`, then `if distributed_loss and ...:`), or in the `else` of one whose test is
        surely true (`if not HF_MODE:` after `HF_MODE = False`)."""
        child = node
        for ancestor in self.tree.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
                return False
            if type(ancestor) in (cst.If, cst.IfExp) and (
                    child is ancestor.body and self._surely_false(ancestor.test, ancestor.test, 0) or
                    child is ancestor.orelse and self._surely_true(ancestor.test)):
                return True
            child = ancestor
        return False

    def surely_false(self, test: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """`test` is false wherever `at` runs: `False`, `None`, `0`, a conjunction with such a
        part, or a switch every binding of which in effect at `at` is one (`DEBUG = False`).
        For a finding that needs it false, so another module of the project may set a module's
        switch, and where the others are not known, one may (`dead`, which hides code and so
        serves findings both ways, reads the module's own code alone, whatever is linted)."""
        return self._surely_false(test, at, 0, True)

    def _surely_true(self, test: cst.BaseExpression) -> bool:
        """`True`, or `not` of a surely false test (`if not HF_MODE:` after `HF_MODE = False`)."""
        if type(test) is cst.Name:
            return test.value == "True"  # type: ignore[attr-defined]
        return type(test) is cst.UnaryOperation and type(test.operator) is cst.Not and \
            self._surely_false(test.expression, test.expression, 0)  # type: ignore[attr-defined]

    def _surely_false(self, test: cst.BaseExpression, at: cst.CSTNode, depth: int, asks_project: bool = False) -> bool:
        """`False`, `None`, `0`, a conjunction with such a part, or a name whose every binding
        in effect at `at` is one (a switch set off in the code)."""
        kind = type(test)
        if kind is cst.Name:
            if test.value in ("False", "None"):  # type: ignore[attr-defined]
                return True
            if test.value in self._declared_global or test.value in self._imported:  # type: ignore[attr-defined]
                return False  # (`global VERBOSE; VERBOSE = args.verbose` in some function, or `nonlocal`;
                # `from local_settings import DEBUG` after `DEBUG = False`)
            binds = self.scopes.in_effect(test.value, at) if depth < _MAX_DEPTH else []  # type: ignore[attr-defined]
            if self._rebinds_dynamically(binds):
                return False  # (nanoGPT's `exec(open("configurator.py").read())` sets its switches from the command line)
            return bool(binds) and all(b.kind == "assign" and b.whole and b.value is not None and
                                       self._surely_false(b.value, b.node, depth + 1, asks_project) for b in binds) and \
                not (asks_project and self._set_elsewhere(test.value, binds))  # type: ignore[attr-defined]
        if kind is cst.Integer:
            return test.value == "0"  # type: ignore[attr-defined]
        if kind is cst.BooleanOperation:
            left, right = (self._surely_false(part, at, depth, asks_project) for part in (test.left, test.right))  # type: ignore[attr-defined]
            return left or right if type(test.operator) is cst.And else left and right  # type: ignore[attr-defined]
        return False

    def _rebinds_dynamically(self, binds: List["Binding"]) -> bool:
        """A module-level name of `binds` may be bound in ways no assignment shows: the module
        runs code (`exec(...)`, `eval(...)`) or writes its namespace (`globals()`, `vars()`), or
        imports everything of another module (`from config.override import *`) with no
        binding of the name after it that surely runs (NeRF's `from run_nerf_helpers import *`
        above `DEBUG = False` at the top level; not above `if FAST: DEBUG = False`)."""
        tree = self.tree
        at_top = self._module_level(binds)
        if not at_top:
            return False
        if self._runs_code or self._reaches_itself:
            return True
        stars = self._star_imports
        return bool(stars) and not any(tree.order(node) > max(stars) and self._at_top_level(node) for node in at_top)

    def _set_elsewhere(self, name: str, binds: List[Binding]) -> bool:
        """A module-level `name` that another module of the project assigns (`nerf.DEBUG =
        args.debug` in `main.py`), or may, where the others are not known; asked last, of a
        switch the module itself sets off."""
        return self.project is not None and bool(self._module_level(binds)) and self.project.set_elsewhere(name)

    def _module_level(self, binds: List[Binding]) -> List[cst.CSTNode]:
        """The bindings of `binds` made in the module's own scope (which other code may rebind)."""
        return [b.node for b in binds if self.tree.scope_of(b.node) is self.tree.module]

    def _at_top_level(self, node: cst.CSTNode) -> bool:
        """`node` is (in) a statement of the module's own body: it runs whenever the module does."""
        for ancestor in self.tree.ancestors(node):
            if type(ancestor) is cst.Module:
                return True
            if type(ancestor) is not cst.SimpleStatementLine:
                return False
        return False

    @cached_property
    def _runs_code(self) -> bool:
        """`exec(...)`, `eval(...)`, `globals()` or `vars()`, `vars` of anything but a name
        (`vars(sys.modules[__name__])`; `vars(args)` reads another object's); not a function of
        the module's own by those names."""
        own = {node.name.value for node in self.tree.nodes_of(cst.FunctionDef)}  # type: ignore[attr-defined]
        return any(type(call.func) is cst.Name and call.func.value not in own and _writes_namespace(call)  # type: ignore[attr-defined]
                   for call in self.scopes.calls)

    @cached_property
    def _reaches_itself(self) -> bool:
        """The module takes itself from `sys.modules` (`this = sys.modules[__name__]`), through
        which it may set its own names (`this.DEBUG = flag`)."""
        return any(type(node) is cst.Subscript and dotted_name(node.value) == "sys.modules"  # type: ignore[attr-defined]
                   for node in self.tree.nodes)

    @cached_property
    def _imported(self) -> FrozenSet[str]:
        """The names the module's imports bind, anywhere in it."""
        names = set()
        for node in self.tree.nodes_of(cst.Import, cst.ImportFrom):
            if type(node) is cst.Import or type(node.names) is not cst.ImportStar:  # type: ignore[attr-defined]
                for alias in node.names:  # type: ignore[attr-defined]
                    bound = alias.asname.name if alias.asname is not None else alias.name
                    names.add((dotted_name(bound) or "").split(".")[0])
        return frozenset(names)

    @cached_property
    def _star_imports(self) -> List[int]:
        """The source order of each `from ... import *`."""
        return [self.tree.order(node) for node in self.tree.nodes_of(cst.ImportFrom)
                if type(node.names) is cst.ImportStar]  # type: ignore[attr-defined]

    @cached_property
    def _declared_global(self) -> FrozenSet[str]:
        """The names some function of the module declares `global` or `nonlocal` (and may
        rebind: `def on_oom(): nonlocal fallback; fallback = True`)."""
        return frozenset(item.name.value for node in self.tree.nodes if type(node) in (cst.Global, cst.Nonlocal)
                         for item in node.names)  # type: ignore[attr-defined]

    def exclusive(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        """Whether `a` and `b` never both run (see the module docstring)."""
        scope = self.tree.scope_of(a)
        if self.tree.scope_of(b) is not scope:
            return False
        sides = self._flag_sides(a)
        first = min(self.tree.order(a), self.tree.order(b))
        return any(sides.get(flag) is (not holds) and self._fixed(flag, scope, first)
                   for flag, holds in self._flag_sides(b).items())

    def _flag_sides(self, node: cst.CSTNode) -> Dict[str, bool]:
        """The flags (a name or an attribute, tested alone or negated) of the `if` statements
        around `node` in its function, each with whether `node` runs where it holds."""
        sides: Dict[str, bool] = {}
        child = node
        for ancestor in self.tree.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
                break
            if type(ancestor) is cst.If and child is not ancestor.test:
                test, holds = ancestor.test, child is ancestor.body
                while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
                    test, holds = test.expression, not holds
                flag = dotted_name(test) if type(test) in (cst.Name, cst.Attribute) else None
                if flag is not None:
                    sides.setdefault(flag, holds)
            child = ancestor
        return sides

    def _fixed(self, flag: str, scope: cst.CSTNode, first: int) -> bool:
        """`flag` keeps its value through `scope` from position `first` on: its name is a
        parameter, bound outside, or bound once before `first` and outside any loop, and no
        assignment in `scope` sets the attribute it reads."""
        tree = self.tree
        binds = [b for b in self.scopes.bindings(scope, flag.split(".")[0]) if b.kind != "param"]  # type: ignore[arg-type]
        if binds and (len(binds) > 1 or binds[0].kind != "assign" or tree.order(binds[0].node) > first
                      or tree.loops_around(binds[0].node)):
            return False
        return "." not in flag or not any(dotted_name(t.target) == flag for assign in self.scopes.assigns_of(scope)  # type: ignore[arg-type]
                                          for t in assign.targets)

    def _depends_on(self, expr: Optional[cst.BaseExpression], at: cst.CSTNode, depth: int) -> int:
        """_LITERAL, _HARDWARE or _CHOICE: the most telling thing `expr` reads."""
        if expr is None:
            return _CHOICE
        if type(expr) in (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString):
            return _LITERAL
        if type(expr) is cst.Name:
            if expr.value in ("True", "False", "None"):
                return _LITERAL
            return self._name(expr.value, at, depth)
        if type(expr) is cst.BooleanOperation:
            return max(self._depends_on(expr.left, at, depth), self._depends_on(expr.right, at, depth))
        if type(expr) is cst.UnaryOperation:
            return self._depends_on(expr.expression, at, depth)
        if type(expr) is cst.Comparison:
            if _main_guard(expr):
                return _LITERAL  # (`__name__ == "__main__" and ...`: the script runs it)
            return max([self._depends_on(expr.left, at, depth),
                        *(self._depends_on(target.comparator, at, depth) for target in expr.comparisons)])
        if type(expr) is cst.IfExp:
            return max(self._depends_on(part, at, depth) for part in (expr.test, expr.body, expr.orelse))
        if type(expr) is cst.Attribute:
            if expr.attr.value in _PLACEMENT:
                return _HARDWARE
            if expr.attr.value == "type":  # `device.type`: whatever chose the device
                return self._depends_on(expr.value, at, depth)
            if type(expr.value) is cst.Name and expr.value.value == "self":
                return self._attribute(expr.attr.value, at, depth)
            return _CHOICE
        if type(expr) is cst.Call:
            name = self.names.call_name(expr)
            if name in HARDWARE_CALLS:
                return _HARDWARE
            if name in _DEVICE and expr.args:
                return max(self._depends_on(arg.value, at, depth) for arg in expr.args)
            return _CHOICE
        return _CHOICE

    def _name(self, name: str, at: cst.CSTNode, depth: int) -> int:
        """A name is the hardware's answer when every value it may hold is; a name bound only
        to literals is a setting (`num_gpus = 1`): the user's choice."""
        if depth >= _MAX_DEPTH:
            return _CHOICE
        binds = self.scopes.in_effect(name, at)
        if not binds or any(b.kind not in ("assign", "walrus") or not b.whole or b.value is None for b in binds):
            return _CHOICE  # a parameter, a loop variable, a name from elsewhere
        found = max(self._depends_on(b.value, b.node, depth + 1) for b in binds)
        return _CHOICE if found == _LITERAL else found

    def _stores_of(self, name: str, klass: cst.ClassDef) -> int:
        """How many places of this module store an attribute `name` on `klass`'s instances: in
        its methods, its bases' or its subclasses' of this module, by `setattr`, or on any
        object but `self` anywhere (other classes' own `self.name` are theirs)."""
        classes = self.scopes.classes
        owners = {c.name.value for c in lineage(klass, self.scopes)[0]}  # it and its bases of this module
        owners |= {c.name.value for c in classes.values() if any(dotted_name(b.value) == klass.name.value for b in c.bases)}
        count = sum(1 for call in self.scopes.calls if type(call.func) is cst.Name and call.func.value == "setattr"
                    and len(call.args) > 1 and type(call.args[1].value) is cst.SimpleString
                    and call.args[1].value.evaluated_value == name)  # type: ignore[attr-defined]
        for node, scope in self.tree.listed:
            if type(node) in (cst.Assign, cst.AugAssign, cst.AnnAssign):
                owner = self.tree.class_of(scope) if type(scope) is cst.FunctionDef else None
                count += _stores_in(node, name, on_self=owner is not None and owner.name.value in owners)
        return count

    def _attribute(self, name: str, at: cst.CSTNode, depth: int) -> int:
        """`self.n_gpu` is the hardware's answer where every value its class gives it is
        (`self.n_gpu = torch.cuda.device_count()`), its class has no base of another module
        (which may set it: `self.n_gpu = args.n_gpu`), and no other statement of this module
        stores it (`trainer.n_gpu = args.n_gpu`, `self.device, self.n_gpu = setup(args)`,
        `self.n_gpu //= 2`); else the user's choice."""
        func = self.tree.function_of(at)
        klass = self.tree.class_of(func) if func is not None else None
        if klass is None or depth >= _MAX_DEPTH or not own_lineage(klass, self.scopes, self.names):
            return _CHOICE
        values = self.scopes.attribute_values(klass, name)
        if not values or self._stores_of(name, klass) != len(values) or stores_any_attribute(self.scopes):
            return _CHOICE
        found = max(self._depends_on(value, value, depth + 1) for value in values)
        return _CHOICE if found == _LITERAL else found


def _stores_in(statement: cst.CSTNode, name: str, on_self: bool) -> int:
    """How many targets of a binding statement store an attribute `name` (`x.name = ...`, in a
    tuple too, or augmented): on any object but `self`, and on `self` where `on_self`."""
    return sum(1 for target in binding_targets(statement) for leaf in leaf_targets(target)
               if type(leaf) is cst.Attribute and leaf.attr.value == name and  # type: ignore[attr-defined]
               (on_self or dotted_name(leaf.value) != "self"))  # type: ignore[attr-defined]


def _main_guard(test: cst.BaseExpression) -> bool:
    """`__name__ == "__main__"` (either way round)."""
    return compares_name_to_main(test) and type(test.comparisons[0].operator) is cst.Equal  # type: ignore[attr-defined]


def _writes_namespace(call: cst.Call) -> bool:
    """A call of a builtin that runs code or may write a module's names (see `_runs_code`)."""
    name, args = call.func.value, call.args  # type: ignore[attr-defined]
    if name in ("exec", "eval", "globals"):
        return True
    return name == "vars" and not (len(args) == 1 and type(args[0].value) is cst.Name)


def selects_a_mode(test: cst.BaseExpression) -> bool:
    """`args.train_impl == "kto"`, `cfg.loss in ("dpo", "ipo")`: a name or attribute compared with
    the name of a way the code can run. It picks the algorithm, not whether to log; unless the
    setting or the name speaks of logging (`args.log_level == "all"`, `args.mode == "debug"`)."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1 or dotted_name(test.left) is None:  # type: ignore[attr-defined]
        return False
    comparison = test.comparisons[0]  # type: ignore[attr-defined]
    if type(comparison.operator) is cst.Equal:
        named = [comparison.comparator]
    elif type(comparison.operator) is cst.In and type(comparison.comparator) in (cst.Tuple, cst.List, cst.Set):
        named = [element.value for element in comparison.comparator.elements]
    else:
        return False
    return bool(named) and not speaks_of_logging(dotted_name(test.left) or "") and all(  # type: ignore[attr-defined]
        type(name) is cst.SimpleString and isinstance(name.evaluated_value, str)  # type: ignore[attr-defined]
        and not speaks_of_logging(name.evaluated_value) for name in named)  # type: ignore[attr-defined]


def speaks_of_logging(name: str) -> bool:
    """A name or a value of a setting about what the code shows, not what it computes
    (`args.log_level`, `"debug"`, `self.verbose`), by a part of it (not `logits`, `catalog`)."""
    return any(part.startswith("debug") or part in _LOGGING for part in re.split(r"[\W_]+", name.lower()))


def a_setting(test: cst.BaseExpression) -> bool:
    """A test of flags alone (see the module docstring): `args.fp16`, `self.args.batch_eval_metrics`,
    an instance's switch (`self.use_liger_loss`, `self.ema_enabled`), negated or joined by `and` /
    `or`. Not the state a trainer keeps (`self.control.should_log`, `self.is_last_step`)."""
    kind = type(test)
    if kind is cst.UnaryOperation and type(test.operator) is cst.Not:  # type: ignore[attr-defined]
        return a_setting(test.expression)  # type: ignore[attr-defined]
    if kind is cst.BooleanOperation:
        return a_setting(test.left) and a_setting(test.right)  # type: ignore[attr-defined]
    if kind is not cst.Attribute:
        return False
    parts = (dotted_name(test) or "").split(".")
    if parts[0] == "self":
        if len(parts) == 2:  # the instance's own switch
            return bool(_SWITCH.search(parts[1])) and not speaks_of_memory(parts[1])
        parts = parts[1:]  # the settings it keeps (`self.args.x`), not its state (`self.control.should_log`)
    return parts[0] in _SETTINGS and not speaks_of_memory(".".join(parts))
