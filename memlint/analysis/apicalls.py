"""Calls of one torch API, and whether each passes one of its arguments, through every way a
module reaches the API: import names, aliases, `functools.partial`, and wrapper functions.

Asked as `facts.apicalls.sites(api, keyword, position)`, e.g.
`sites("torch.load", "map_location", 1)`. Each `ApiSite` is a call that runs the API, with
whether the argument is given there:

- a call of the API itself, under any import spelling (`torch.load(f)`, `from torch import load`);
- a call of a module-level alias (`ckpt_load = torch.load`, `load = t.load if fast else pickle.load`
  is not one) or of a `functools.partial` of the API (`load = partial(torch.load, map_location=dev)`);
- a call of a wrapper: a function or method of this module whose own call of the API takes the
  argument from the wrapper's parameter (`def load(path, map_location=None): return
  torch.load(path, map_location=map_location)`) or from its `**kwargs`. The API call inside
  passes the argument on, so it is not a site; each call of the wrapper is, and the argument is
  absent there when the wrapper's parameter is left to a default of None (or `**kwargs` does
  not carry it). Wrappers of wrappers count too.

`loaded_into(call)`: whether what a call returns reaches an argument of a `.load_state_dict(...)`
call of a model or an optimizer (not of a learning-rate scheduler or a GradScaler, whose state
holds no tensors), directly or through the names bound from it in the same scope
(`ckpt = torch.load(p); model.load_state_dict(ckpt["model"])`), or at a call of the function
that returns it, or in a function of this module they are passed to (`Unet.from_config(config,
state_dict)`, a class method that builds the model and loads it).

`reads_buffer(call)`: the call's first argument is an in-memory buffer (`io.BytesIO(...)`, or a
name bound only to one): objects the program itself serialized, e.g. to send between processes.

`given` is "given" (in any form: keyword, position, or a non-None default of the wrapper's
parameter), "absent", or "unknown" (`*args` / `**kwargs` at the call may carry it). Rules
report "absent" sites only. Asked by MEM502 / MEM505 (`torch.load`), MEM602 (checkpoint).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.dataflow import derived, sources_of
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import TreeIndex, argument, dotted_name, last_part

GIVEN, ABSENT, UNKNOWN = "given", "absent", "unknown"
_PARTIAL = frozenset({"functools.partial"})
_STATELESS_OWNER = re.compile(r"sched|scaler", re.IGNORECASE)  # their state dicts hold numbers, not tensors
_WRAPPER_DEPTH = 3  # wrappers of wrappers followed this far


@dataclass(frozen=True)
class ApiSite:
    """A call that runs the API: `call` is where a finding about the argument points."""

    call: cst.Call
    given: str  # GIVEN, ABSENT or UNKNOWN
    via: str  # "" for the API itself, else the alias or wrapper called (`ckpt_load`, `self.load`)
    keyword: str  # the name the argument has at this call (a wrapper may name its parameter otherwise)


@dataclass(frozen=True)
class _Callable:
    """Something calls of which run the API: how the argument is given at one of its calls."""

    keyword: str  # the argument's name at this callable's calls
    position: Optional[int]  # its position there (None: keyword only)
    preset: str  # GIVEN when the callable already fixes it (a partial with it, a wrapper's non-None default)
    absent_default: bool = True  # left out at a call, the argument is absent (else given by a default)


def _given_at(call: cst.Call, callee: _Callable) -> str:
    """Whether `call` gives the argument to `callee`."""
    if callee.preset == GIVEN:
        return GIVEN
    if argument(call, callee.keyword, callee.position) is not None:
        return GIVEN
    if any(arg.star for arg in call.args):
        return UNKNOWN
    return ABSENT if callee.absent_default else GIVEN


class ApiCalls:
    """The sites of APIs in one module (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes) -> None:
        self.names = names
        self.tree = tree
        self.scopes = scopes
        self._sites: Dict[Tuple[str, str, Optional[int]], List[ApiSite]] = {}

    def sites(self, api: str, keyword: str, position: Optional[int] = None) -> List[ApiSite]:
        """Every call that runs `api` (see the module docstring), in source order."""
        key = (api, keyword, position)
        found = self._sites.get(key)
        if found is None:
            found = self._find(api, _Callable(keyword, position, ""))
            self._sites[key] = found
        return found

    def loaded_into(self, call: cst.Call) -> bool:
        """Whether what `call` returns is loaded into a model or an optimizer (see the module
        docstring); when its function returns it, at a call of that function."""
        return bool(self.state_loads(call))

    def state_loads(self, call: cst.Call, depth: int = 0) -> List[cst.Call]:
        """The `.load_state_dict(...)` calls (of a model or an optimizer) that what `call`
        returns reaches, as `loaded_into` follows it."""
        tree, scopes = self.tree, self.scopes
        for ancestor in tree.ancestors(call):
            if type(ancestor) is cst.Arg:
                owner = tree.parent(ancestor)
                if type(owner) is cst.Call and _loads_state(owner):
                    return [owner]
                target = scopes.resolve(owner) if type(owner) is cst.Call and depth < _WRAPPER_DEPTH else None
                passed = {name for arg, name in scopes.parameters_given(owner, target)  # type: ignore[arg-type]
                          if arg is ancestor} if target is not None else set()
                inside = self._loads_of(target, derived(scopes.flows(target), passed), depth + 1) if passed else []  # type: ignore[arg-type]
                if inside:  # `Unet.from_parts(config, torch.load(path))`
                    return inside
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                break
        scope = tree.scope_of(call)
        names = self.bound_from(call)
        found = self._loads_of(scope, names, depth)
        if found:
            return found
        if type(scope) is cst.FunctionDef and depth < _WRAPPER_DEPTH and any(
                tree.contains(value, call) or sources_of(value) & names for value in scopes.returned(scope)):
            return [loader for site in scopes.call_sites(scope) for loader in self.state_loads(site, depth + 1)]
        return []

    def _loads_of(self, scope: cst.CSTNode, names: Set[str], depth: int) -> List[cst.Call]:
        """The `.load_state_dict(...)` calls that `names` of `scope` reach: an argument of one in
        `scope`, or of a function of this module they are passed to (`Unet.from_config_and_state_dict(config,
        state_dict)`, which builds the model and loads it), wrappers of wrappers followed."""
        tree, scopes = self.tree, self.scopes
        found: List[cst.Call] = []
        for other in scopes.calls_of(scope):
            if _loads_state(other):
                if any(sources_of(arg.value) & names for arg in other.args):
                    found.append(other)
                continue
            if depth >= _WRAPPER_DEPTH or not any(sources_of(arg.value) & names for arg in other.args):
                continue
            target = scopes.resolve(other)
            if target is None or tree.contains(target, other):
                continue
            passed = {parameter for arg, parameter in scopes.parameters_given(other, target)
                      if sources_of(arg.value) & names}
            if passed:
                found.extend(self._loads_of(target, derived(scopes.flows(target), passed), depth + 1))
        return found

    def bound_from(self, call: cst.Call, follow: bool = True) -> Set[str]:
        """The names of the call's scope bound from what it returns, and (`follow`) from those in turn."""
        tree, scopes = self.tree, self.scopes
        scope = tree.scope_of(call)
        bound = {b.name for b in scopes.every_binding() if b.value is not None and b.kind == "assign"
                 and tree.contains(b.value, call) and tree.scope_of(b.node) is scope}
        return derived(scopes.flows(scope), bound) if bound and follow else bound

    def reads_buffer(self, call: cst.Call) -> bool:
        """Whether the call's first argument is an in-memory buffer (see the module docstring)."""
        first = argument(call, "f", 0)
        if first is None:
            return False
        values = [first.value]
        if type(first.value) is cst.Name:
            values = [b.value for b in self.scopes.in_effect(first.value.value, call)]
        return bool(values) and all(type(v) is cst.Call and last_part(dotted_name(v.func)) == "BytesIO"
                                    for v in values)

    def _find(self, api: str, direct: _Callable) -> List[ApiSite]:
        names, scopes = self.names, self.scopes
        aliases = self._aliases(api, direct)
        sites: List[ApiSite] = []
        by_call: Dict[int, ApiSite] = {}
        for call in scopes.calls if aliases else self._calls_by_name.get(api, ()):
            callee: Optional[_Callable] = None
            via = ""
            if names.call_name(call) == api:
                callee = direct
            elif type(call.func) is cst.Name and call.func.value in aliases:
                binding = scopes.bindings_seen(call.func.value, call)
                if len(binding) == 1 and binding[0].node is aliases[call.func.value][1]:
                    callee, via = aliases[call.func.value][0], call.func.value
            if callee is not None:
                site = ApiSite(call, _given_at(call, callee), via, callee.keyword)
                sites.append(site)
                by_call[id(call)] = site
        wrappers: Dict[int, _Callable] = {}
        frontier = list(sites)
        for _ in range(_WRAPPER_DEPTH):
            found = self._wrappers(frontier, wrappers)
            if not found:
                break
            frontier = []
            for func, callee in found:
                for call in scopes.call_sites(func):
                    if id(call) in by_call:
                        continue
                    site = ApiSite(call, _given_at(call, callee), _spelled(call.func), callee.keyword)
                    by_call[id(call)] = site
                    sites.append(site)
                    frontier.append(site)
        forwarded = {id(site.call) for site in sites if self._forwarding(site) is not None}
        kept = [site for site in sites if id(site.call) not in forwarded]
        kept.sort(key=lambda site: self.tree.order(site.call))
        return kept

    @cached_property
    def _calls_by_name(self) -> Dict[str, List[cst.Call]]:
        """The module's calls by the import-aware name of what they call, in source order."""
        found: Dict[str, List[cst.Call]] = {}
        call_name = self.names.call_name
        for call in self.scopes.calls:
            name = call_name(call)
            if name is not None:
                found.setdefault(name, []).append(call)
        return found

    @cached_property
    def _single_module_bindings(self) -> List[Tuple[cst.Name, cst.Assign]]:
        """`name = value` at module level, where nothing else binds the name."""
        found = []
        module = self.tree.module
        for assign in self.scopes.assigns:
            if self.tree.scope_of(assign) is not module or len(assign.targets) != 1:
                continue
            target = assign.targets[0].target
            if type(target) is cst.Name and len(self.scopes.bindings(module, target.value)) == 1:
                found.append((target, assign))
        return found

    def _aliases(self, api: str, direct: _Callable) -> Dict[str, Tuple[_Callable, cst.CSTNode]]:
        """Module-level names bound once to the API or to a partial of it: name -> (callable, binding node)."""
        found: Dict[str, Tuple[_Callable, cst.CSTNode]] = {}
        for target, assign in self._single_module_bindings:
            value = assign.value
            if self.names.qualified_name(value) == api:
                found[target.value] = (direct, assign)
            elif type(value) is cst.Call and self.names.call_name(value) in _PARTIAL and value.args \
                    and value.args[0].keyword is None and not value.args[0].star \
                    and self.names.qualified_name(value.args[0].value) == api:
                partial = cst.Call(value.args[0].value, value.args[1:])
                given = _given_at(partial, direct)
                if given != UNKNOWN:
                    bound = len([a for a in value.args[1:] if a.keyword is None and not a.star])
                    position = None if direct.position is None else direct.position - bound
                    found[target.value] = (_Callable(direct.keyword, position if position is None or position >= 0
                                                     else None, given if given == GIVEN else ""), assign)
        return found

    def _forwarding(self, site: ApiSite) -> Optional[Tuple[cst.FunctionDef, _Callable]]:
        """(wrapper, how its calls give the argument) when `site` takes it from the parameters of
        the function it is in; None otherwise."""
        func = self.tree.function_of(site.call)
        if func is None or site.given == GIVEN and argument(site.call, site.keyword) is None:
            return None
        params = func.params
        star_kwargs = params.star_kwarg.name.value if type(params.star_kwarg) is cst.Param else None
        if site.given == UNKNOWN:
            if star_kwargs is None or not any(arg.star == "**" and type(arg.value) is cst.Name
                                              and arg.value.value == star_kwargs for arg in site.call.args):
                return None
            return func, _Callable(site.keyword, None, "")
        arg = argument(site.call, site.keyword)
        if site.given != GIVEN or arg is None or not type(arg.value) is cst.Name:
            return None
        named = arg.value.value
        positional = [*params.posonly_params, *params.params]
        for index, param in enumerate([*positional, *params.kwonly_params]):
            if param.name.value != named:
                continue
            if any(b.kind != "param" for b in self.scopes.bindings(func, named)):
                return None  # rebound inside the wrapper: not simply passed on
            default = param.default
            if default is not None and not (type(default) is cst.Name and default.value == "None"):
                return func, _Callable(named, None, GIVEN)
            method = self.tree.class_of(func) is not None and positional and positional[0] is not param \
                and positional[0].name.value in ("self", "cls")
            position = index - (1 if method else 0) if index < len(positional) else None
            return func, _Callable(named, position, "", absent_default=default is not None)
        return None

    def _wrappers(self, sites: List[ApiSite], known: Dict[int, _Callable]) -> List[Tuple[cst.FunctionDef, _Callable]]:
        found = []
        for site in sites:
            forwarding = self._forwarding(site)
            if forwarding is not None and id(forwarding[0]) not in known:
                known[id(forwarding[0])] = forwarding[1]
                found.append(forwarding)
        return found


def _loads_state(call: cst.Call) -> bool:
    """`x.load_state_dict(...)` where x is not a scheduler or a scaler."""
    func = call.func
    if not type(func) is cst.Attribute or func.attr.value != "load_state_dict":
        return False
    return not _STATELESS_OWNER.search(last_part(dotted_name(func.value)) or "")


def _spelled(func: cst.BaseExpression) -> str:
    return cst.Module([]).code_for_node(func)
