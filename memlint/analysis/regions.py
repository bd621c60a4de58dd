"""Regions: where grad mode, autocast and gradient accumulation change, and grad mode at a node.

Asked as `facts.regions`:

- `grad_regions` (`Region`): `with torch.no_grad()` / `inference_mode()` / `set_grad_enabled(...)`
  / `enable_grad()`; `autocasts` (`Autocast`: device, dtype, enabled, deprecated spelling):
  `with torch.autocast(...)`, its older spellings, a name bound to a `functools.partial` of
  one (`with self.amp_autocast():`) and a name whose every value in effect is an autocast
  context, or a choice between one and `nullcontext()` (`with ctx:`, `with self.ctx:`)
  (`autocasts_for(roots, node)`: those under some roots or around a node); both also where a
  `@contextmanager` of the module or of the project is entered that makes one around its
  `yield` (`context_of`: `with _inference_mode():`, `with torch_autocast(enabled=fp16):`);
  `accumulate_regions`: `with accelerator.accumulate(...)`;
- at a node: `region_at` (the innermost grad-mode region), `autocast_at`, `in_accumulate`,
  `expects_error` (inside `pytest.raises` / `assertRaises`), `flops_counted`
  (inside `FlopCounterMode()`: run to be counted), and
  `grad_enabled`: whether autograd records there, from the regions around it, its function's
  decorators (`grad_enabled_by_decorator`: `@torch.no_grad()`, Lightning's `validation_step`-style
  hooks, which Lightning runs without grad) and, for a helper, the grad mode at its call sites
  (functions that call each other in a cycle answered together: the cycle's calls of its own do
  not decide);
  `runs_without_grad(func)`: a function that records no graph whoever calls it (so decorated,
  or its whole body in `with torch.no_grad():`).
  It is None when that cannot be told (a bare `set_grad_enabled(...)`, an unknown decorator),
  and rules then do not report;
- `quiet_modes(forward)`: the modes a model's `forward` computes under no_grad itself
  (`mode=inference` of `elif mode == "inference": with torch.no_grad(): ...`);
- `autocast_devices` / `autocast_dtypes`: what an autocast region can run on and compute in
  (`device_types` follows `"cuda" if ... else "cpu"`, `str(device)`, `device.type`, a name bound
  once, a parameter's default and what the module's calls pass for it);
- `is_lightning_training_step(func)`, `lightning_step_hook(node)`: the per-batch hook
  (`training_step`, `validation_step`, ...) a node runs in; `in_hf_trainer(func)`: a method of
  an HF Trainer subclass, `hf_step_hook(node)`: the one of its methods the HF loop calls on
  every batch that a node runs in; `simuleval_action_hook(func)`: a SimulEval agent's per-action hook
  (`policy`, `update_states_read`, ...), which SimulEval calls with grad enabled.

Asked by: values (a forward carries grad only where grad is enabled), calls (helpers that run
without grad are not followed), phase (`accelerator.accumulate`, Lightning's training_step),
MEM201, MEM202, MEM203, MEM206 (`grad_enabled`; MEM203 `flops_counted` too), MEM301
(`in_accumulate`, `accumulate_regions`), MEM401 (`autocasts`, `autocast_devices`,
`autocast_dtypes`, `grad_enabled`), MEM404 (`autocast_at`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

import libcst as cst

from memlint.analysis.dataflow import target_names
from memlint.analysis.frameworks import (HF_STEP_HOOKS, HF_TRAINER_BASES, LIGHTNING_BASES, SIMULEVAL_ACTION_HOOKS,
                                         is_simuleval_agent)
from memlint.analysis.project import ProjectView
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import TreeIndex, argument, dotted_name, last_part, literal_bool, walk

_GRAD_OFF = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad",
                       "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode",
                       # MONAI's `with eval_mode(net):` puts the nets in eval mode and turns grad off
                       "monai.networks.eval_mode", "monai.networks.utils.eval_mode"})
_CONTEXT_MANAGER = frozenset({"contextlib.contextmanager", "contextmanager"})
GRAD_SET = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled",
                       "torch.autograd.grad_mode.set_grad_enabled"})
_GRAD_ON = frozenset({"torch.enable_grad", "torch.autograd.enable_grad",
                      "torch.autograd.grad_mode.enable_grad"})
# Contexts that do nothing: the other branch of `nullcontext() if cpu else torch.autocast(...)`
_NO_OP_CONTEXTS = frozenset({"contextlib.nullcontext", "contextlib.suppress"})
_AUTOCAST = frozenset({"torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast",
                       "torch.cpu.amp.autocast", "torch.amp.autocast_mode.autocast"})
# Contexts that count the operations run inside them: a forward there is run to be counted. (Not
# a profiler: an evaluation profiled with grad on measures the graph it should not keep.)
_FLOP_COUNTERS = frozenset({"torch.utils.flop_counter.FlopCounterMode"})
_DTYPE_ALIASES = {"torch.half": "torch.float16", "torch.bfloat16": "torch.bfloat16",
                  "torch.float": "torch.float32"}
# dtypes as strings name them (`getattr(torch, "float16")`, a table's keys)
_DTYPE_WORDS = frozenset({"float16", "half", "bfloat16", "float32", "float", "float64", "double"})
# Hooks Lightning runs under no_grad / inference_mode.
_LIGHTNING_NO_GRAD = frozenset({"validation_step", "test_step", "predict_step"})
_LIGHTNING_TRAINING = frozenset({"training_step"})
_GRAD_DECORATOR = re.compile(r"no_?grad|inference", re.IGNORECASE)
_NEUTRAL_DECORATORS = frozenset({"staticmethod", "classmethod", "property", "setter", "getter", "deleter",
                                 "abstractmethod", "wraps", "lru_cache", "cache", "cached_property", "overload",
                                 "override", "contextmanager", "dataclass", "fixture", "parametrize", "mark",
                                 "skipif", "skip", "slow", "require_torch", "require_torch_gpu", ""})
# Context managers in which the code is expected to fail (tests).
_RAISES = re.compile(r"^(raises|assertRaises|assertRaisesRegex|assertRaisesRegexp)$")


@dataclass(frozen=True)
class Region:
    """A `with` item that changes grad mode, autocast or gradient accumulation."""

    node: cst.With
    item: cst.WithItem
    kind: str  # "no_grad", "inference_mode", "set_grad_enabled", "enable_grad", "autocast", "accumulate"
    grad_enabled: Optional[bool]  # what it sets grad mode to; None when unknown (a variable)


@dataclass(frozen=True)
class Autocast:
    region: Region
    call: cst.Call
    device_type: Optional[str]  # "cuda", "cpu"; None when not a literal
    dtype: Optional[str]  # "torch.float16", ...; None when not given (device default)
    enabled: Optional[bool]  # False/True literal, None when not given or not a literal
    deprecated: bool  # torch.cuda.amp.autocast
    wrapped: bool = False  # entered through a context manager that may do more around its yield


_NOT_YET = object()  # (`Regions._function_grad_enabled`: a function of a cycle not yet answered)


class Regions:
    """The regions of one module and grad mode at its nodes (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes, project: ProjectView) -> None:
        self.names = names
        self.project = project
        self.tree = tree
        self.scopes = scopes
        self.grad_regions: List[Region] = []
        self.autocasts: List[Autocast] = []
        self.accumulate_regions: List[Region] = []
        self._grad_region_of: Dict[int, Region] = {}  # id(With) -> innermost grad item
        self._accumulate_withs: Set[int] = set()
        self._raises_withs: Set[int] = set()  # `with pytest.raises(...)`, `with self.assertRaises(...)`
        self._flop_counting_withs: Set[int] = set()  # `with FlopCounterMode():`
        # scope -> its bare `set_grad_enabled(...)` statements (and grad modes entered by hand): after
        # one, or in a loop around one, the grad mode cannot be told
        self._toggles: Dict[int, List[cst.Call]] = {}
        self._memo_enabled: Dict[int, Optional[bool]] = {}
        # `_function_grad_enabled`'s walk up the call sites: the functions met and not yet answered
        # for good, in the order met, each with its place in that order and its answer so far; the
        # earliest place a cycle below the current function reached; the functions asked again
        # while not yet answered; a cycle's answers while it is settled
        self._walk: List[cst.FunctionDef] = []
        self._met: Dict[int, Tuple[int, object]] = {}
        self._reached = 0
        self._cyclic: Set[int] = set()
        self._solving: Dict[int, object] = {}
        self._calls_entered: List[Tuple[cst.With, cst.WithItem]] = []  # `with f(...):` of no known API
        for node in scopes.withs:
            for item in node.items:
                self._region(node, item)
        for node, item in self._calls_entered:  # once every region a wrapper's body may hold is known
            self._wrapped(node, item)
        for call in scopes.calls:
            statement = tree.parent(call)
            if type(statement) is cst.Expr and type(tree.parent(statement)) is cst.SimpleStatementLine and \
                    (names.call_name(call) in GRAD_SET or self._entered_by_hand(call)):
                self._toggles.setdefault(id(tree.scope_of(call)), []).append(call)

    @cached_property
    def off_at_top(self) -> bool:
        """The module's own code turns grad off as a statement (`torch.set_grad_enabled(False)`,
        `torch.no_grad().__enter__()`): from its import on, what its functions call runs without
        grad, unless they turn it on again."""
        for call in self._toggles.get(id(self.tree.module), ()):
            func = call.func
            if type(func) is cst.Attribute and func.attr.value == "__enter__":  # type: ignore[attr-defined]
                if self.names.call_name(func.value) in _GRAD_OFF:  # type: ignore[attr-defined, arg-type]
                    return True
            elif call.args and literal_bool(call.args[0].value) is False:
                return True
        return False

    @cached_property
    def turns_grad_off(self) -> bool:
        """Some code of the module may run without grad: a block or a statement that turns it
        off, a function decorated to (a home-made no_grad too), or a hook Lightning may run
        without it. Where none does, `grad_enabled` is False nowhere: what looks for the calls
        made without grad, over every call of a module, has its answer at once."""
        if self.off_at_top or any(region.grad_enabled is False for region in self.grad_regions):
            return True
        return any(  # (a hook's class is not asked after: any such name may be one)
            node.name.value in _LIGHTNING_NO_GRAD or node.decorators and self.grad_enabled_by_decorator(node) is False  # type: ignore[attr-defined]
            for node in self.tree.nodes_of(cst.FunctionDef))

    def _toggled_at(self, node: cst.CSTNode, toggle: cst.Call) -> bool:
        """A bare grad-mode statement `toggle` of `node`'s scope may be in force at `node`: it
        comes before it, or a loop runs both."""
        tree = self.tree
        return tree.order(node) > tree.order(toggle) or any(tree.contains(loop, node) for loop in tree.loops_around(toggle))

    def _entered_by_hand(self, call: cst.Call) -> bool:
        """`torch.no_grad().__enter__()`: a grad mode entered as a statement (asteroid's eval
        scripts), in force from there on, as a bare `set_grad_enabled(False)` is."""
        func = call.func
        return type(func) is cst.Attribute and func.attr.value == "__enter__" and type(func.value) is cst.Call and \
            self.names.call_name(func.value) in _GRAD_OFF | _GRAD_ON | GRAD_SET

    def _region(self, node: cst.With, item: cst.WithItem) -> None:
        call = item.item
        if type(call) is cst.Call and _RAISES.search(last_part(dotted_name(call.func))):
            self._raises_withs.add(id(node))
        if self._counts_flops(call, node):
            self._flop_counting_withs.add(id(node))
        if not type(call) is cst.Call:
            qualified = self.names.qualified_name(call)
            if qualified in _GRAD_OFF:  # `with torch.no_grad:` is an error, but mean it kindly
                region = Region(node, item, "no_grad", False)
                self.grad_regions.append(region)
                self._grad_region_of[id(node)] = region
            elif (bound := self._autocast_bound(call, node)) is not None:
                self.autocasts.append(self._autocast(node, item, *bound))
            return
        qualified = self.names.call_name(call)
        region: Optional[Region] = None
        if qualified in _GRAD_OFF:
            kind = "inference_mode" if qualified.endswith("inference_mode") else "no_grad"
            mode = argument(call, "mode", 0) if kind == "inference_mode" else None
            on = True if mode is None else literal_bool(mode.value)
            if on is not False:  # inference_mode(False) changes nothing
                region = Region(node, item, kind, None if on is None else False)
        elif qualified in GRAD_SET:
            mode = argument(call, "mode", 0)
            region = Region(node, item, "set_grad_enabled", literal_bool(mode.value) if mode else None)
        elif qualified in _GRAD_ON:
            region = Region(node, item, "enable_grad", True)
        elif qualified in _AUTOCAST:
            autocast = self._autocast(node, item, call, qualified)
            self.autocasts.append(autocast)
        elif qualified is None and not call.args and (preset := self._autocast_partial(call.func)) is not None:
            self.autocasts.append(self._autocast(node, item, *preset))
        elif type(call.func) is cst.Attribute and call.func.attr.value == "accumulate" and \
                "accelerat" in (dotted_name(call.func.value) or "").lower():
            accumulate = Region(node, item, "accumulate", None)
            self.accumulate_regions.append(accumulate)
            self._accumulate_withs.add(id(node))
        elif qualified is None or self.project.knows(qualified):
            self._calls_entered.append((node, item))
        if region is not None:
            self.grad_regions.append(region)
            if id(node) not in self._grad_region_of or region.grad_enabled is not None:
                self._grad_region_of[id(node)] = region

    def _wrapped(self, node: cst.With, item: cst.WithItem) -> None:
        """`with _inference_mode():`, `with torch_autocast(enabled=fp16):`: a context manager of
        this module or of the project that enters no_grad or an autocast around its `yield`
        (`context_of`) is that region here."""
        call: cst.Call = item.item  # type: ignore[assignment]
        func = self.scopes.resolve(call)
        if func is not None:
            context: Optional[Sequence[str]] = self.context_of(func)
        else:
            dotted = self.names.absolute_name(dotted_name(call.func)) if type(call.func) in (cst.Name, cst.Attribute) else None
            context = self.project.context(dotted) if self.project.knows(dotted) else None  # type: ignore[arg-type]
        if not context:
            return
        if context[0] == "no_grad":
            region = Region(node, item, "no_grad", False)
            self.grad_regions.append(region)
            found = self._grad_region_of.get(id(node))  # (an item after it, `torch.enable_grad()`, is inner)
            if found is None or node.items.index(found.item) < node.items.index(item):
                self._grad_region_of[id(node)] = region
        elif context[0] == "autocast":
            made = _autocast_call(context, call)
            if made is not None:
                self.autocasts.append(replace(self._autocast(node, item, made, context[1]), wrapped=True))

    def context_of(self, func: cst.FunctionDef) -> Tuple[str, ...]:
        """What a `@contextmanager` function enters around every `yield` it makes: ("no_grad",)
        when grad is off there; ("autocast", API, its arguments, the function's parameters),
        each a JSON list of code, for the autocast around the first; () for anything else."""
        if not any(self.names.qualified_name(d.decorator) in _CONTEXT_MANAGER or
                   last_part(dotted_name(d.decorator)) == "contextmanager" for d in func.decorators):
            return ()
        yields = self.tree.scope_nodes(func, cst.Yield)
        if not yields:
            return ()
        if all(self.region_at(y) is not None and self.grad_enabled(y) is False for y in yields):
            return ("no_grad",)
        by_with = {id(a.region.node): a for a in self.autocasts}  # (`autocast_at` caches: regions are still being found)
        autocasts = [next((by_with[id(w)] for w in self.tree.ancestors(y) if id(w) in by_with), None) for y in yields]
        code = cst.Module([]).code_for_node
        if None in autocasts or len({_dtype_arguments(a.call, code) for a in autocasts}) != 1:  # type: ignore[union-attr]
            return ()  # (an autocast on some paths, or another dtype on each: not `torch.amp` or
            # `torch.cuda.amp` by the torch version, with the same arguments)
        first: Autocast = autocasts[0]  # type: ignore[assignment]
        api = self.names.call_name(first.call)
        if api not in _AUTOCAST:
            return ()
        every = [*func.params.posonly_params, *func.params.params]
        if self.tree.class_of(func) is not None and not any(
                dotted_name(d.decorator) == "staticmethod" for d in func.decorators):
            every = every[1:]  # (`self` or `cls`: not the caller's first argument)
        every += list(func.params.kwonly_params)
        names = {p.name.value for p in every}
        splat = func.params.star_kwarg.name.value if type(func.params.star_kwarg) is cst.Param else None
        args = []
        for arg in first.call.args:
            read = {n.value for n in walk(arg.value) if type(n) is cst.Name} & (names | {splat})
            if read and not (type(arg.value) is cst.Name and (arg.value.value in names or arg.star == "**")):
                return ()  # a parameter read inside an expression (`float16 if fp16 else bfloat16`): not known here
            args.append([arg.star, arg.keyword.value if arg.keyword is not None else "", code(arg.value)])
        handed = sum(arg.star == "**" and type(arg.value) is cst.Name and arg.value.value == splat
                     for a in autocasts for arg in a.call.args)  # type: ignore[union-attr]
        if splat is not None and sum(type(n) is cst.Name and n.value == splat for n in self.tree.walk_scope(func.body)) > handed:
            return ()  # `kwargs.setdefault("dtype", ...)`: what reaches the autocast is not the caller's alone
        params = [[p.name.value, "", code(p.default) if p.default else ""] for p in every]
        if splat is not None:
            params.append([splat, "**", ""])
        return ("autocast", api, json.dumps(args), json.dumps(params))

    def _autocast_partial(self, func: cst.BaseExpression) -> Optional[Tuple[cst.Call, str]]:
        """`self.amp_autocast` in `with self.amp_autocast():`, where the module binds it to
        `functools.partial(torch.autocast, device_type=..., dtype=...)` (and maybe, on another
        branch, to a context that does nothing, `contextlib.suppress`): the autocast call the
        partial makes, and the API's name."""
        dotted = dotted_name(func)
        return self._named_autocasts.get(dotted) if dotted is not None else None

    def _autocast_bound(self, expr: cst.BaseExpression, at: cst.With) -> Optional[Tuple[cst.Call, str]]:
        """`ctx` in `with ctx:` (or `self.ctx` in a method), where every value bound to it there
        is an autocast context (`ctx = torch.autocast("cuda", dtype=ptdtype)`), or a choice
        between one and a context that does nothing (`nullcontext() if device_type == "cpu" else
        torch.amp.autocast(...)`, or `if`/`else` binding the two): that autocast call, and the
        API's name. None where any value may be something else (a parameter, `nullcontext()`
        alone, `model.no_sync()`)."""
        if type(expr) is cst.Name:
            binds = self.scopes.in_effect(expr.value, at)
            if not binds or any(b.kind != "assign" or not b.whole or b.value is None for b in binds):
                return None
            values: List[cst.BaseExpression] = [b.value for b in binds]  # type: ignore[misc]
        elif type(expr) is cst.Attribute and type(expr.value) is cst.Name and expr.value.value == "self":
            klass = self.scopes.enclosing_class(at)
            values = self.scopes.attribute_values(klass, expr.attr.value) if klass is not None else []
        else:
            return None
        options = [option for value in values for option in
                   ((value.body, value.orelse) if type(value) is cst.IfExp else (value,))]  # type: ignore[attr-defined]
        found = None
        for option in options:  # (`if amp: ctx = torch.autocast(...)` / `else: ctx = nullcontext()` too)
            api = self.names.call_name(option) if type(option) is cst.Call else None  # type: ignore[arg-type]
            if api in _AUTOCAST:
                found = found or (option, api)
            elif api not in _NO_OP_CONTEXTS:
                return None
        return found  # type: ignore[return-value]

    @cached_property
    def _named_autocasts(self) -> Dict[str, Tuple[cst.Call, str]]:
        """The names the module binds to `functools.partial(torch.autocast, ...)`, entered as
        `with name():` (the first binding of each): read off the module's assignments once,
        for every `with` that calls a name."""
        partials: Dict[str, Tuple[cst.Call, str]] = {}
        for assign in self.scopes.assigns:
            value = assign.value
            if type(value) is cst.Call and value.args and self.names.call_name(value) == "functools.partial":
                api = self.names.qualified_name(value.args[0].value)
                if api in _AUTOCAST:
                    for name in (dotted_name(t.target) for t in assign.targets):
                        if name:
                            partials.setdefault(name, (cst.Call(value.args[0].value, value.args[1:]), api))
        return partials

    def _autocast(self, node: cst.With, item: cst.WithItem, call: cst.Call, qualified: str) -> Autocast:
        deprecated = qualified.startswith(("torch.cuda.amp", "torch.cpu.amp"))
        device: Optional[str]
        if deprecated:
            device = "cuda" if qualified.startswith("torch.cuda") else "cpu"
            enabled_arg, dtype_arg = argument(call, "enabled", 0), argument(call, "dtype", 1)
        else:
            device_arg = argument(call, "device_type", 0)
            device = None
            if device_arg is not None and type(device_arg.value) is cst.SimpleString:
                device = device_arg.value.evaluated_value.split(":")[0]  # type: ignore[union-attr]
            dtype_arg, enabled_arg = argument(call, "dtype", 1), argument(call, "enabled", 2)
        dtype = self.names.qualified_name(dtype_arg.value) if dtype_arg is not None else None
        if dtype_arg is not None and dtype is None:
            dtype = "<unknown>"
        enabled = literal_bool(enabled_arg.value) if enabled_arg is not None else None
        return Autocast(Region(node, item, "autocast", None), call, device, dtype, enabled, deprecated)

    def grad_enabled_by_decorator(self, func: cst.FunctionDef) -> Optional[bool]:
        """False for `@torch.no_grad()` / `@torch.inference_mode()` functions and Lightning's
        no-grad hooks, True for `@torch.enable_grad()`, None when nothing says."""
        for decorator in func.decorators:
            expr = decorator.decorator
            call = expr if type(expr) is cst.Call else None
            qualified = self.names.call_name(call) if call is not None else self.names.qualified_name(expr)
            if qualified in _GRAD_OFF:
                if call is not None and qualified.endswith("inference_mode"):
                    mode = argument(call, "mode", 0)
                    if mode is not None and literal_bool(mode.value) is not True:
                        return None if literal_bool(mode.value) is None else True
                return False
            if qualified in _GRAD_ON:
                return True
            if qualified in GRAD_SET and call is not None:
                mode = argument(call, "mode", 0)
                return literal_bool(mode.value) if mode is not None else None
            dotted = dotted_name(call.func if call is not None else expr) or ""
            if _GRAD_DECORATOR.search(last_part(dotted)):
                return False  # `@smart_inference_mode()`, `@no_grad_wrapper`: a home-made no_grad
        if func.name.value in _LIGHTNING_NO_GRAD and self._in_lightning_module(func):
            return False
        return None

    def runs_without_grad(self, func: cst.FunctionDef) -> bool:
        """`func` records no graph whoever calls it: decorated to run without grad, or its whole
        body (a docstring aside) is `with` statements that turn grad off (RWKV's `def forward(self,
        token, state): with torch.no_grad(): ...`), with nothing inside that turns it on again."""
        if self.grad_enabled_by_decorator(func) is False:
            return True
        body = func.body.body if type(func.body) is cst.IndentedBlock else ()
        if not body or type(body[-1]) is not cst.With:
            return False
        if type(body[0]) is cst.SimpleStatementLine and type(body[0].body[0]) is cst.Expr and \
                type(body[0].body[0].value) in (cst.SimpleString, cst.ConcatenatedString):  # type: ignore[attr-defined]
            body = body[1:]  # the docstring
        return all(type(statement) is cst.With and self._turns_grad_off(statement)  # type: ignore[arg-type]
                   for statement in body) and \
            not self._toggles.get(id(func)) and not any(  # (no `with torch.enable_grad():` inside)
                region.grad_enabled is not False and self.tree.contains(func, region.node)
                for region in self.grad_regions)

    def _turns_grad_off(self, node: cst.With) -> bool:
        region = self._grad_region_of.get(id(node))
        return region is not None and region.grad_enabled is False

    def _unknown_decorator(self, func: cst.FunctionDef) -> bool:
        for decorator in func.decorators:
            expr = decorator.decorator
            target = expr.func if type(expr) is cst.Call else expr
            if self.names.qualified_name(target) is None and \
                    last_part(dotted_name(target)) not in _NEUTRAL_DECORATORS:
                return True
        return False

    def _in_lightning_module(self, func: cst.FunctionDef) -> bool:
        klass = self.tree.class_of(func)
        if klass is None:
            return False
        names = {dotted_name(b.value) or "" for b in klass.bases}
        if any(LIGHTNING_BASES.search(n) for n in names):
            return True
        for name in names:  # a base of another module of the project that is one
            absolute = self.names.absolute_name(name)
            if absolute is not None and self.project.knows(absolute) and self.project.is_lightning_module(absolute):
                return True
        methods = {s.name.value for s in klass.body.body if type(s) is cst.FunctionDef}
        return "configure_optimizers" in methods

    def in_hf_trainer(self, func: cst.FunctionDef) -> bool:
        """A method of a subclass of HF's `Trainer` (through the project's own classes too)."""
        klass = self.tree.class_of(func)
        if klass is None:
            return False
        for base in klass.bases:
            dotted = dotted_name(base.value)
            qualified = self.names.qualified_name(base.value) or ""
            if HF_TRAINER_BASES.match(qualified):
                return True
            absolute = self.names.absolute_name(dotted)
            if absolute is not None and self.project.knows(absolute) and self.project.is_hf_trainer(absolute):
                return True
        return False

    def hf_step_hook(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """The method of an HF Trainer subclass that the HF loop calls on every batch
        (`training_step`, `compute_loss`, `prediction_step`) that `node` runs in, directly."""
        func = self.tree.function_of(node)
        if func is not None and func.name.value in HF_STEP_HOOKS and self.in_hf_trainer(func):
            return func
        return None

    def simuleval_action_hook(self, func: cst.FunctionDef) -> bool:
        """A method SimulEval calls on every read or write action, with grad enabled (`policy`,
        `update_states_read`, ...), of a class deriving from one of its agents."""
        klass = self.tree.class_of(func)
        return klass is not None and func.name.value in SIMULEVAL_ACTION_HOOKS and \
            is_simuleval_agent(klass, self.names.qualified_name)

    def is_lightning_training_step(self, func: cst.FunctionDef) -> bool:
        return func.name.value in _LIGHTNING_TRAINING and self._in_lightning_module(func)

    def lightning_step_hook(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """The hook Lightning calls on every batch (`training_step`, `validation_step`,
        `test_step`, `predict_step`) that `node` runs in, directly."""
        func = self.tree.function_of(node)
        if func is not None and func.name.value in _LIGHTNING_NO_GRAD | _LIGHTNING_TRAINING and \
                self._in_lightning_module(func):
            return func
        return None

    def region_at(self, node: cst.CSTNode) -> Optional[Region]:
        """The innermost grad-mode `with` whose body holds `node`."""
        if not self._grad_region_of:  # (most modules enter none: no ancestors to climb)
            return None
        child = node
        for ancestor in self.tree.ancestors(node):
            kind = type(ancestor)  # identity, not ABC isinstance (memlint.analysis.tree)
            if kind is cst.FunctionDef or kind is cst.Lambda:
                return None
            if kind is cst.With and child is ancestor.body:  # type: ignore[attr-defined]
                region = self._grad_region_of.get(id(ancestor))
                if region is not None:
                    return region
            child = ancestor
        return None

    def grad_enabled(self, node: cst.CSTNode) -> Optional[bool]:
        """Whether autograd records at `node`: False inside no_grad/inference_mode regions, in
        decorated functions and in functions called only from such places; None when it cannot
        be told (a bare `set_grad_enabled(...)`, `set_grad_enabled(flag)`); else True."""
        region = self.region_at(node)
        if region is not None:
            return region.grad_enabled
        scope = self.tree.scope_of(node)
        if any(self._toggled_at(node, toggle) for toggle in self._toggles.get(id(scope), ())):
            return None
        if type(scope) is cst.FunctionDef:
            return self._function_grad_enabled(scope)
        if type(scope) is cst.Lambda:
            return self.grad_enabled(scope)
        return True

    def _function_grad_enabled(self, func: cst.FunctionDef) -> Optional[bool]:
        """The grad mode a function runs in, from its decorators, else from its call sites
        (`_from_callers`). Functions that call each other in a cycle are answered together,
        whichever is asked first: the walk up the call sites keeps the functions it has met
        and not yet answered for good (`_walk`, in the order met), each with the answer it
        has so far (`_NOT_YET` while its own is worked out), which is what asking it again
        gives; the outermost function of a cycle settles the cycle (`_solved`), once."""
        key = id(func)
        known = self._memo_enabled.get(key, _NOT_YET)
        if known is not _NOT_YET:
            return known
        if key in self._solving:  # (a function of the cycle being settled: its answer so far)
            return self._solving[key]  # type: ignore[return-value]
        met = self._met.get(key)
        if met is not None:  # met and not yet answered for good: a cycle of calls
            self._reached = min(self._reached, met[0])
            self._cyclic.add(key)
            return met[1]  # type: ignore[return-value]
        order = len(self._walk)
        self._met[key] = (order, _NOT_YET)
        self._walk.append(func)
        outer, self._reached = self._reached, order  # (the earliest function a cycle below this one reached)
        try:
            found = self._from_callers(func)
        except BaseException:  # (a walk too deep for Python: nothing of it is kept)
            self._met, self._walk, self._cyclic = {}, [], set()
            raise
        reached, self._reached = self._reached, min(outer, self._reached)
        self._met[key] = (order, found)
        if reached < order:  # in a cycle through a function met before: settled with it
            return found  # type: ignore[return-value]
        cycle = [(member, self._met.pop(id(member))[1]) for member in self._walk[order:]]
        del self._walk[order:]
        if len(cycle) > 1 or key in self._cyclic:
            self._solved(cycle)
        else:
            self._memo_enabled[key] = found  # type: ignore[assignment]
        return self._memo_enabled[key]

    def _solved(self, cycle: List[Tuple[cst.FunctionDef, object]]) -> None:
        """Settle the grad mode of functions that call each other, asking each again until
        none changes: the least answers that agree (a call within the cycle does not decide,
        and a cycle entered only from itself runs as a function no one calls, with grad).
        Each answer only grows (`_NOT_YET`, False, True, None: a function's is the greatest of
        its call sites'), from below the least answers, so this ends there."""
        solving = self._solving = {id(func): found for func, found in cycle}
        try:
            changed = True
            while changed:
                changed = False
                for func, _ in cycle:
                    found = self._from_callers(func)
                    if found is not solving[id(func)]:
                        solving[id(func)] = found
                        changed = True
        finally:
            self._solving = {}
        for func, _ in cycle:
            self._cyclic.discard(id(func))
            found = solving[id(func)]
            self._memo_enabled[id(func)] = True if found is _NOT_YET else found  # type: ignore[assignment]

    def _from_callers(self, func: cst.FunctionDef) -> object:
        """A function's grad mode from its decorators, else the greatest of its call sites'
        (False below True below None; with grad where it has none): `_NOT_YET` where every
        site waits on a cycle's answer."""
        decorated = self.grad_enabled_by_decorator(func)
        if decorated is not None:
            return decorated
        if self._unknown_decorator(func):
            return None  # an unknown decorator may switch grad off: do not guess
        sites = self.scopes.call_sites(func)
        modes = {self.grad_enabled(site) for site in sites}
        modes.discard(_NOT_YET)  # type: ignore[arg-type]
        if sites and not modes:
            return _NOT_YET
        if sites and modes == {False}:
            return False
        return None if None in modes else True

    def quiet_modes(self, func: cst.FunctionDef) -> Tuple[str, ...]:
        """The modes a model's `forward` runs in without grad, as `param=value`: the branch of
        `if mode == "inference":` (or `elif`, `mode in ("test", "inference")`) that computes what
        it returns under `torch.no_grad()` (SPADE's `model(data, mode="inference")`). Such a
        branch holds only no-grad blocks and returns of names they bind, or of no call."""
        params = {p.name.value for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)}
        found: List[str] = []
        for statement in func.body.body:
            branch: Optional[cst.CSTNode] = statement if type(statement) is cst.If else None
            while type(branch) is cst.If:
                named = _modes_named(branch.test, params)  # type: ignore[attr-defined]
                if named and self._computes_without_grad(branch.body):  # type: ignore[attr-defined]
                    found.extend(f"{param}={value}" for param, value in named)
                branch = branch.orelse  # type: ignore[attr-defined]
        return tuple(found)

    def _computes_without_grad(self, body: cst.BaseSuite) -> bool:
        """The branch ends in a return, and every statement is a no-grad block (no
        `enable_grad()` inside), or a return or assignment whose value calls nothing and reads
        only names those blocks bind at their own level (not on some paths only), or no name."""
        statements = list(body.body) if type(body) is cst.IndentedBlock else []
        quiet = [s for s in statements if type(s) is cst.With and id(s) in self._grad_region_of and
                 self._grad_region_of[id(s)].grad_enabled is False]
        if not quiet or not statements or not self._returns_last(statements[-1], quiet):
            return False
        bound: Set[str] = set()
        for block in quiet:
            for line in block.body.body:  # type: ignore[attr-defined]
                if type(line) is not cst.SimpleStatementLine or self.grad_enabled(line) is not False:
                    continue
                for small in line.body:
                    if type(small) is cst.Assign:
                        bound.update(name for target in small.targets for name in target_names(target.target))
        for statement in statements:
            if statement in quiet:
                if any(type(node) is cst.With and self.grad_enabled(node.body) is not False
                       for node in walk(statement.body)):  # type: ignore[attr-defined]
                    return False  # `with torch.enable_grad():` inside
                continue
            if type(statement) is not cst.SimpleStatementLine:
                return False
            for small in statement.body:
                value = small.value if type(small) in (cst.Return, cst.Assign) else None  # type: ignore[attr-defined]
                if value is None or any(type(node) is cst.Call for node in walk(value)) or \
                        not {n.value for n in walk(value) if type(n) is cst.Name} <= bound:
                    return False
        return True

    def _returns_last(self, statement: cst.BaseStatement, quiet: List[cst.BaseStatement]) -> bool:
        """`statement` returns a value: `return fake`, or a no-grad block that ends so."""
        if statement in quiet:
            inner = statement.body.body  # type: ignore[attr-defined]
            return bool(inner) and self._returns_last(inner[-1], [])
        return type(statement) is cst.SimpleStatementLine and type(statement.body[-1]) is cst.Return and \
            statement.body[-1].value is not None  # type: ignore[attr-defined]

    def expects_error(self, node: cst.CSTNode) -> bool:
        """Inside `with pytest.raises(...)` / `with self.assertRaises(...)`: meant to fail."""
        return any(type(a) is cst.With and id(a) in self._raises_withs for a in self.tree.ancestors(node))

    def flops_counted(self, node: cst.CSTNode) -> bool:
        """Inside a context that counts the operations run in it (`with FlopCounterMode():`, also
        bound to a name first): code run to be counted."""
        return any(type(a) is cst.With and id(a) in self._flop_counting_withs for a in self.tree.ancestors(node))

    def _counts_flops(self, context: cst.BaseExpression, at: cst.With) -> bool:
        """`context` is a counting context's call, or a name every value in effect of which is one."""
        if type(context) is cst.Name:
            binds = self.scopes.in_effect(context.value, at)
            return bool(binds) and all(b.kind == "assign" and b.whole and type(b.value) is cst.Call and
                                       self.names.call_name(b.value) in _FLOP_COUNTERS for b in binds)  # type: ignore[arg-type]
        return type(context) is cst.Call and self.names.call_name(context) in _FLOP_COUNTERS  # type: ignore[arg-type]

    def in_accumulate(self, node: cst.CSTNode) -> bool:
        """Inside `with accelerator.accumulate(model):`."""
        return any(type(a) is cst.With and id(a) in self._accumulate_withs for a in self.tree.ancestors(node))

    @cached_property
    def _autocast_by_with(self) -> Dict[int, Autocast]:
        return {id(a.region.node): a for a in self.autocasts}

    @cached_property
    def _autocasts_by_order(self) -> Tuple[List[Autocast], List[int]]:
        ordered = sorted(self.autocasts, key=lambda a: self.tree.order(a.region.node))
        return ordered, [self.tree.order(a.region.node) for a in ordered]

    def autocasts_for(self, roots: Sequence[cst.CSTNode], node: cst.CSTNode) -> List[Autocast]:
        """The autocast regions under one of `roots` or around `node`, in the order of
        `autocasts`: found by the tree's order, not by testing every region of the module."""
        chosen: Dict[int, Autocast] = {}
        ordered, orders = self._autocasts_by_order
        for root in roots:
            for autocast in self.tree.in_subtree(root, ordered, orders):
                chosen[id(autocast)] = autocast
        for ancestor in (node, *self.tree.ancestors(node)):
            autocast = self._autocast_by_with.get(id(ancestor))
            if autocast is not None:
                chosen[id(autocast)] = autocast
        return [a for a in self.autocasts if id(a) in chosen] if len(chosen) > 1 else list(chosen.values())

    def autocast_at(self, node: cst.CSTNode) -> Optional[Autocast]:
        """The innermost autocast region whose body holds `node` (same function)."""
        by_with = self._autocast_by_with
        child = node
        for ancestor in self.tree.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.Lambda):
                return None
            if type(ancestor) is cst.With and child is ancestor.body and id(ancestor) in by_with:
                return by_with[id(ancestor)]
            child = ancestor
        return None

    def device_types(self, expr: cst.BaseExpression, depth: int = 0) -> Optional[FrozenSet[str]]:
        """The device types (`"cuda"`, `"cpu"`) an expression can name, or None when unknown:
        `"cuda:0"`, `str(device)`, `device.type`, `torch.device(...)`, `"cuda" if ... else "cpu"`,
        and a plain name bound once (in its function or the module) to one of these."""
        if depth > 8:
            return None
        if type(expr) is cst.SimpleString:
            value = expr.evaluated_value
            return frozenset({value.split(":")[0]}) if isinstance(value, str) else None
        if type(expr) is cst.FormattedString and expr.parts and type(expr.parts[0]) is cst.FormattedStringText:
            head = expr.parts[0].value  # f"cuda:{rank}"
            return frozenset({head.split(":")[0]}) if ":" in head else None
        if type(expr) is cst.IfExp:
            body, orelse = self.device_types(expr.body, depth + 1), self.device_types(expr.orelse, depth + 1)
            return None if body is None or orelse is None else body | orelse
        if type(expr) is cst.Attribute and expr.attr.value == "type":
            return self.device_types(expr.value, depth + 1)
        if type(expr) is cst.Call and expr.args and not expr.args[0].keyword and not expr.args[0].star:
            is_str = type(expr.func) is cst.Name and expr.func.value == "str"
            if is_str or self.names.call_name(expr) == "torch.device":
                return self.device_types(expr.args[0].value, depth + 1)
            return None
        if type(expr) is cst.Name:
            binds = self.scopes.bindings_seen(expr.value, expr)
            if len(binds) == 1 and binds[0].kind == "assign" and binds[0].whole and binds[0].value is not None:
                return self.device_types(binds[0].value, depth + 1)
            if len(binds) == 1 and binds[0].kind == "param" and type(binds[0].node) is cst.Param:
                return self._parameter_devices(binds[0].node, depth)
        return None

    def _parameter_devices(self, param: cst.Param, depth: int) -> Optional[FrozenSet[str]]:
        """A parameter with a default (`device="cuda"`): the default's device types and those of
        every argument the module's calls pass for it; None when one is unknown."""
        passed = self.scopes.arguments_for(param)
        if param.default is None or passed is None:
            return None
        found = self.device_types(param.default, depth + 1)
        for _, value in passed:
            if found is None:
                return None
            if value is not None:
                devices = self.device_types(value, depth + 1)
                found = None if devices is None else found | devices
        return found

    def _dtype_values(self, expr: cst.BaseExpression, depth: int = 0) -> Optional[FrozenSet[str]]:
        qualified = self.names.qualified_name(expr)
        if qualified is not None:
            return frozenset({_DTYPE_ALIASES.get(qualified, qualified)})
        if type(expr) is cst.IfExp and depth < 8:
            on_cuda = _holds_on_cuda(expr.test)
            if on_cuda is not None:  # `torch.bfloat16 if device.type == "cuda" else torch.float16`
                return self._dtype_values(expr.body if on_cuda else expr.orelse, depth + 1)
            body, orelse = self._dtype_values(expr.body, depth + 1), self._dtype_values(expr.orelse, depth + 1)
            return None if body is None or orelse is None else body | orelse
        if type(expr) is cst.Name and depth < 8:
            binds = self.scopes.bindings_seen(expr.value, expr)
            if len(binds) == 1 and binds[0].kind == "assign" and binds[0].whole and binds[0].value is not None:
                return self._dtype_values(binds[0].value, depth + 1)
        if type(expr) is cst.SimpleString:  # `"float16"`, as `getattr(torch, ...)` or a table key takes it
            name = expr.value.strip("'\"")
            return frozenset({_DTYPE_ALIASES.get(f"torch.{name}", f"torch.{name}")}) if name in _DTYPE_WORDS else None
        if type(expr) is cst.Subscript and depth < 8:  # `{"float16": torch.float16, ...}[dtype]`: any value
            table = expr.value
            if type(table) is cst.Name:
                binds = self.scopes.bindings_seen(table.value, table)
                table = binds[0].value if len(binds) == 1 and binds[0].kind == "assign" else None  # type: ignore[assignment]
            if type(table) is cst.Dict and table.elements:
                found: FrozenSet[str] = frozenset()
                for element in table.elements:
                    values = self._dtype_values(element.value, depth + 1) if type(element) is cst.DictElement else None
                    if values is None:
                        return None
                    found |= values
                return found
        if type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "getattr" and \
                len(expr.args) == 2 and self.names.qualified_name(expr.args[0].value) == "torch" and depth < 8:
            return self._dtype_values(expr.args[1].value, depth + 1)  # `getattr(torch, dtype)`
        return None

    def autocast_devices(self, autocast: Autocast) -> Optional[FrozenSet[str]]:
        """The device types an autocast region may run on; None when unknown."""
        if autocast.deprecated:
            return frozenset({autocast.device_type or "cuda"})
        device_arg = argument(autocast.call, "device_type", 0)
        return self.device_types(device_arg.value) if device_arg is not None else None

    def autocast_dtypes(self, autocast: Autocast) -> Optional[FrozenSet[str]]:
        """The dtypes an autocast region can compute in (`torch.float16`, `torch.bfloat16`) on the
        GPU when it may run there (`"cuda" if available else "cpu"` counts as CUDA), with the
        device's default when no dtype is given (float16 on CUDA, bfloat16 on the CPU); None when
        unknown. A dtype held in a variable assigned once (`amp_dtype = torch.bfloat16`) is followed."""
        dtype_arg = argument(autocast.call, "dtype", 1)
        if dtype_arg is not None:
            return self._dtype_values(dtype_arg.value)
        devices = self.autocast_devices(autocast)
        if devices is None:
            return None
        if "cuda" in devices:
            devices = frozenset({"cuda"})
        defaults = {"cuda": "torch.float16", "cpu": "torch.bfloat16", "xpu": "torch.bfloat16",
                    "mps": "torch.float16", "hpu": "torch.bfloat16"}
        if any(device not in defaults for device in devices):
            return None
        return frozenset(defaults[device] for device in devices)


def _holds_on_cuda(test: cst.BaseExpression) -> Optional[bool]:
    """Whether a test of a device's type holds where it is CUDA: True for `device.type ==
    "cuda"` or `device_type in ["cuda", "cpu"]`, False for `!=` and `not in`; None for any
    other test. Only the branch it picks on CUDA decides the dtypes on the GPU."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return None
    left, comparison = test.left, test.comparisons[0]
    subject = last_part(dotted_name(left) or "")
    if subject not in ("type", "device_type"):
        return None
    operator, against = type(comparison.operator), comparison.comparator
    names = [against] if type(against) is cst.SimpleString else \
        [e.value for e in against.elements] if type(against) in (cst.List, cst.Tuple, cst.Set) else []  # type: ignore[attr-defined]
    if not names or not all(type(n) is cst.SimpleString for n in names):
        return None
    cuda = any(n.value.strip("'\"") == "cuda" for n in names)  # type: ignore[attr-defined]
    if operator in (cst.Equal, cst.In):
        return cuda
    if operator in (cst.NotEqual, cst.NotIn):
        return not cuda
    return None


def _modes_named(test: cst.BaseExpression, params: Set[str]) -> List[Tuple[str, str]]:
    """(`mode`, `"inference"`) of `mode == "inference"` or `"inference" == mode`, one pair a
    value of `mode in ("test", "inference")`, where `mode` is one of `params`."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:  # type: ignore[attr-defined]
        return []
    comparison = test.comparisons[0]  # type: ignore[attr-defined]
    left, right = test.left, comparison.comparator  # type: ignore[attr-defined]
    if type(comparison.operator) is cst.Equal:
        if type(right) is cst.Name and type(left) is cst.SimpleString:
            left, right = right, left
        values = [right]
    elif type(comparison.operator) is cst.In and type(right) in (cst.Tuple, cst.List, cst.Set):
        values = [element.value for element in right.elements]  # type: ignore[attr-defined]
    else:
        return []
    if type(left) is not cst.Name or left.value not in params or not values:  # type: ignore[attr-defined]
        return []
    named = [v.evaluated_value for v in values if type(v) is cst.SimpleString]  # type: ignore[attr-defined]
    if len(named) != len(values) or not all(isinstance(v, str) for v in named):
        return []
    return [(left.value, value) for value in named]  # type: ignore[attr-defined]


def _dtype_arguments(call: cst.Call, code: Callable[[cst.CSTNode], str]) -> Tuple[str, ...]:
    """An autocast call's arguments but the device (the same autocast, spelled for another torch)."""
    return tuple(sorted(f"{arg.star}{arg.keyword.value if arg.keyword else ''}={code(arg.value)}" for arg in call.args
                        if not (arg.keyword is not None and arg.keyword.value == "device_type")))


def _autocast_call(context: Sequence[str], call: cst.Call) -> Optional[cst.Call]:
    """The autocast call a wrapper (`Regions.context_of`) makes when it is called as `call`:
    its parameters bound to `call`'s arguments (or their defaults), `**kwargs` to the keywords
    that name no parameter. None when `call` hands on `*args` or `**kwargs` of its own."""
    if any(arg.star for arg in call.args):
        return None
    args, params = json.loads(context[2]), json.loads(context[3])
    named = [name for name, star, _ in params if not star]
    given: Dict[str, cst.BaseExpression] = {}
    extra: List[cst.Arg] = []
    for position, arg in enumerate(a for a in call.args if a.keyword is None and not a.star):
        if position < len(named):
            given[named[position]] = arg.value
    for arg in call.args:
        if arg.keyword is not None:
            if arg.keyword.value in named:
                given[arg.keyword.value] = arg.value
            else:
                extra.append(arg)
    defaults = {name: default for name, star, default in params if default}
    splat = {name for name, star, _ in params if star == "**"}
    made: List[cst.Arg] = []
    for star, keyword, code in args:
        if star == "**" and code in splat:
            made.extend(extra)
            continue
        if star:
            continue  # `*args` handed on: not known here
        if code in given:
            value = given[code]
        elif code in named:
            if code not in defaults:
                continue
            value = cst.parse_expression(defaults[code])
        else:
            value = cst.parse_expression(code)
        made.append(cst.Arg(value, keyword=cst.Name(keyword) if keyword else None))
    return cst.Call(cst.Name("autocast"), made)
