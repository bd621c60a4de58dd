"""Checkpoints: what each `torch.save` of a module writes, and what each `torch.load` reads.

Whether loading a checkpoint without `map_location` puts anything on a GPU depends on where
its tensors were when it was saved, and whether `weights_only=True` can load it depends on
what was saved with them. Both are often written in the same project: a training script that
saves `{"net": net.state_dict(), "epoch": epoch}` from the GPU and resumes from it; a style
transfer script that moves its model to the CPU before saving it; an FSDP handler that
gathers a full state dict with `offload_to_cpu=True`. Asked as `facts.checkpoints`:

- `saves`: every `torch.save(obj, f)` (`Save`): whether `obj` is on the CPU (`x.cpu()`,
  `x.to("cpu")`, a `move_to_cpu(...)`/`to_cpu(...)` helper, a dict or comprehension of such,
  the `state_dict()` of a model moved to the CPU before, any `state_dict()` of a module that
  configures FSDP with `offload_to_cpu=True`); the file names its path spells (`ckpt.pth` of
  `"./checkpoint/ckpt.pth"`, `os.path.join(d, "best.pt")`, `f"{d}/best.pt"`); the keys of the
  dict it writes; whose state it writes (the model's name here, and its class); and the objects
  other than tensors it writes with them (`args`, `cfg`, a whole model), which
  `weights_only=True` refuses. A save in a function whose object or file is a parameter is
  read through the function's calls in the module.
- `load(call)`: what a `torch.load` reads (`Load`): the file names its path spells, the keys
  its result is read at (`ckpt["net"]`, `ckpt.get("epoch")`, `"model" in ckpt`), the models
  it is loaded into (`net.load_state_dict(ckpt["net"])`), whether those are on the CPU at that
  point (built there, or moved with `.cpu()`, and not moved since), and the objects its keys
  name (`ckpt["args"]`, `state["cfg"]`), the whole model it is (`model = torch.load(f)`, a
  model under a key put in eval mode: `torch.load(f)["model"].eval()`), numpy arrays (it or an
  item of it handed to `torch.from_numpy`);
  `under_safe_globals(call)`: the load runs where the program chose what `weights_only` may
  load (`torch.serialization.safe_globals`, `add_safe_globals`); `read_for_progress(call)`:
  all it takes out is how far training got (`ckpt["epoch"]`).
- `matching(load)`: the saves of this module that write what the load reads: the same file
  name, the keys it reads among the keys written, or the state of the same model (by name or
  class). Across modules only the file name is compared (memlint.analysis.project asks
  `ProjectView.saved`): names like `model` or `state_dict` mean nothing outside their module.

Asked by MEM502 and MEM505.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.apicalls import ApiCalls
from memlint.analysis.receivers import Receivers
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import TreeIndex, argument, dotted_name, last_part, string_key, walk

SAVE = "torch.save"
_SAFE_GLOBALS = "torch.serialization.safe_globals"
_ADD_SAFE_GLOBALS = "torch.serialization.add_safe_globals"
_TO_CPU = re.compile(r"(^|_)to_cpu$")  # fairseq's `utils.move_to_cpu`, `to_cpu`
_MOVERS = frozenset({"to", "cuda", "cpu", "eval", "train", "half", "float", "double", "bfloat16", "requires_grad_"})
# names that hold a device (`device`, `args.gpu`, `local_rank`), for `_names_a_device`
_DEVICE_NAME = re.compile(r"(^|_)(device|dev|gpu|gpus|cuda|rank)$", re.IGNORECASE)
_BUILDERS = frozenset({"instantiate"})  # hydra.utils.instantiate(cfg): a fresh module, on the CPU
# names of what a checkpoint holds that is not a tensor: parsed arguments, configurations
_CONFIG = re.compile(r"^(args|opts?|options|cfg|config|conf|hparams|hps|hyperparams|flags|namespace)$"
                     r"|_(args|opts|cfg|config|conf|hparams)$", re.IGNORECASE)
# keys a loaded checkpoint is read at that name such objects (`ckpt["args"]`: fairseq's Namespace);
# not `config` or `model_args`, as often plain dicts
_CONFIG_KEY = re.compile(r"^(args|opts?|cfg|hparams|hps|namespace)$")
# Keys of a training checkpoint that count its progress or record its best score: numbers
_PROGRESS_KEY = re.compile(
    r"^(epoch|(global_)?step|iter|iteration|num_updates|"
    r"best_(acc|accuracy|top1|prec1|prec5|loss|score|metric|epoch|step|val_loss|val_acc|val_score))$")
_PLAIN = frozenset({"dict", "vars", "list", "tuple", "OrderedDict"})  # containers weights_only loads
_FILE = re.compile(r"^[^.].*\.(pt|pth|ckpt|bin|tar|pkl|model|chkpt|th)$", re.IGNORECASE)  # `best.pt`, not `.pt`
_FOLLOW = 2  # names and call sites followed this far


@dataclass(frozen=True)
class Save:
    """One `torch.save(obj, f)` of the module."""

    call: cst.Call
    cpu: bool  # everything it writes is on the CPU
    files: FrozenSet[str]  # the file names its path spells
    keys: FrozenSet[str]  # the keys of the dict it writes
    models: FrozenSet[str]  # whose state it writes: `name:<dotted>` here, `class:<Class>`
    objects: Tuple[str, ...]  # what it writes that is not a tensor, a container or a number


@dataclass(frozen=True)
class Load:
    """What one `torch.load` reads."""

    call: cst.Call
    files: FrozenSet[str]
    keys: FrozenSet[str]
    models: FrozenSet[str]
    objects: Tuple[str, ...]  # keys of its result that name objects (`ckpt["args"]`)
    into_cpu: Optional[bool]  # every model it is loaded into is on the CPU then (None: not known)
    placed: Tuple[str, ...] = ()  # whole models it holds that the program moves to a device itself


class Checkpoints:
    """The saves and loads of one module (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes, receivers: Receivers,
                 apicalls: ApiCalls) -> None:
        self.names = names
        self.tree = tree
        self.scopes = scopes
        self.receivers = receivers
        self.apicalls = apicalls
        self._loads: Dict[int, Load] = {}

    # -- saves -------------------------------------------------------------------------------
    @cached_property
    def saves(self) -> List[Save]:
        found = []
        for call in self.scopes.calls:
            func = call.func  # spelled `save` where it is called (no dotted name built for every call)
            spelled = func.attr if type(func) is cst.Attribute else func  # type: ignore[attr-defined]
            if type(spelled) is not cst.Name or spelled.value != "save" or self.names.call_name(call) != SAVE:
                continue
            obj, path = argument(call, "obj", 0), argument(call, "f", 1)
            values = self._values(obj.value, call) if obj is not None else []
            files = self._files(path.value, call) if path is not None else frozenset()
            keys: Set[str] = set()
            models: Set[str] = set()
            objects: List[str] = []
            for value, at in values:
                keys |= self._dict_keys(value, at)
                models |= self._states(value, at)
                objects += self._objects(value, at)
            cpu = bool(values) and all(self._on_cpu(value, at, 0) for value, at in values)
            found.append(Save(call, cpu, files, frozenset(keys), frozenset(models), tuple(dict.fromkeys(objects))))
        return found

    def _values(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> List[Tuple[cst.BaseExpression, cst.CSTNode]]:
        """What `expr` may be: itself, or for a parameter of the function it is in, the
        arguments the function's calls in the module pass (with where each is)."""
        if type(expr) is cst.Name and depth < _FOLLOW:
            binds = self.scopes.in_effect(expr.value, at)
            if binds and all(b.kind == "param" for b in binds):
                func = self.tree.function_of(at)
                sites = self.scopes.call_sites(func) if func is not None else []
                position = self._position(func, expr.value) if func is not None else None
                found = []
                for site in sites:
                    arg = argument(site, expr.value, position)
                    if arg is None:
                        return [(expr, at)]
                    found += self._values(arg.value, site, depth + 1)
                return found or [(expr, at)]
        return [(expr, at)]

    @staticmethod
    def _position(func: cst.FunctionDef, name: str) -> Optional[int]:
        params = [*func.params.posonly_params, *func.params.params]
        names = [p.name.value for p in params]
        if name not in names:
            return None
        index = names.index(name)
        return index - 1 if names and names[0] in ("self", "cls") else index

    def _bound(self, expr: cst.BaseExpression, at: cst.CSTNode) -> List[Tuple[cst.BaseExpression, cst.CSTNode]]:
        """The values a plain name may hold at `at` (assignments only), else nothing."""
        if not type(expr) is cst.Name:
            return []
        binds = self.scopes.in_effect(expr.value, at)
        if not binds or any(b.kind != "assign" or not b.whole or b.value is None for b in binds):
            return []
        return [(b.value, b.node) for b in binds]  # type: ignore[misc]

    def _on_cpu(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """Whether every tensor `expr` holds is on the CPU."""
        if type(expr) is cst.Call:
            func = expr.func
            method = func.attr.value if type(func) is cst.Attribute else None
            if method == "cpu" or method == "to" and _names_cpu(expr):
                return True
            if _TO_CPU.search(last_part(dotted_name(func))):
                return True
            if method == "state_dict":
                owner = func.value  # type: ignore[union-attr]
                if type(owner) is cst.Call and _move(owner) is not None:
                    return bool(_move(owner))  # `model.cpu().state_dict()`
                return self._offloads or self.on_cpu(owner, at) is True
            return False
        if type(expr) is cst.Dict:
            values = [e.value for e in expr.elements if type(e) is cst.DictElement]
            held = [v for v in values if self._holds_state(v, at)]
            return bool(held) and all(self._on_cpu(v, at, depth) for v in held)
        if type(expr) is cst.DictComp:
            return self._on_cpu(expr.value, at, depth)
        if depth < _FOLLOW:
            bound = self._bound(expr, at)
            return bool(bound) and all(self._on_cpu(v, node, depth + 1) for v, node in bound)
        return False

    def _holds_state(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """`expr` holds tensors of a model: a `state_dict()`, a CPU copy of one, a model."""
        if any(type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value == "state_dict"
               for n in walk(expr)):
            return True
        if self.receivers.is_model(expr):
            return True
        return any(self._holds_state(v, node) for v, node in self._bound(expr, at))

    @cached_property
    def _offloads(self) -> bool:
        """The module gathers full state dicts onto the CPU (FSDP's `offload_to_cpu=True`)."""
        return any(arg.keyword is not None and arg.keyword.value == "offload_to_cpu" and
                   type(arg.value) is cst.Name and arg.value.value == "True"
                   for call in self.scopes.calls for arg in call.args)

    def _dict_keys(self, expr: cst.BaseExpression, at: cst.CSTNode) -> Set[str]:
        if type(expr) is cst.Call and _TO_CPU.search(last_part(dotted_name(expr.func))) and expr.args:
            expr = expr.args[0].value  # `move_to_cpu({...})` writes the same keys
        if type(expr) is cst.Dict:
            return {key for e in expr.elements if type(e) is cst.DictElement
                    for key in [_string(e.key)] if key is not None}
        keys: Set[str] = set()
        for value, node in self._bound(expr, at):
            keys |= self._dict_keys(value, node)
        if keys and type(expr) is cst.Name:  # `state["epoch"] = epoch` after the dict is made
            keys |= self._keys_set(expr.value, at)
        return keys

    def _keys_set(self, name: str, at: cst.CSTNode) -> Set[str]:
        scope = self.tree.scope_of(at)
        found = set()
        for assign in self.scopes.assigns_of(scope):
            for target in assign.targets:
                node = target.target
                if type(node) is cst.Subscript and type(node.value) is cst.Name and node.value.value == name:
                    key = string_key(node)
                    if key is not None:
                        found.add(key)
        return found

    def _states(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> Set[str]:
        """Whose state `expr` writes: `name:<model>` and `class:<Class>` for each model whose
        `state_dict()` (or which itself) it holds."""
        found: Set[str] = set()
        owners = [n.func.value for n in walk(expr) if type(n) is cst.Call and type(n.func) is cst.Attribute
                  and n.func.attr.value == "state_dict"]
        if not owners and self.receivers.is_model(expr):
            owners = [expr]
        for owner in owners:
            found |= self._model_tokens(owner)
        if depth < _FOLLOW:
            for value, node in self._bound(expr, at):
                found |= self._states(value, node, depth + 1)
        return found

    def _model_tokens(self, owner: cst.BaseExpression) -> Set[str]:
        while type(owner) is cst.Attribute and owner.attr.value == "module":
            owner = owner.value  # `model.module.state_dict()`: the wrapped model
        dotted = dotted_name(owner)
        if dotted is None:
            return set()
        klass = self._class_of(dotted)
        return {f"name:{dotted}", *([f"class:{klass}"] if klass else [])}

    def _class_of(self, dotted: str) -> Optional[str]:
        """The class every assignment of `dotted` in the module builds it from (wrappers of
        itself, `net = DataParallel(net)`, and moves, `net = net.to(device)`, aside)."""
        found: Set[str] = set()
        for assign in self.scopes.assigns:
            if not any(dotted_name(t.target) == dotted for t in assign.targets):
                continue
            base = _chain_base(assign.value)
            if type(base) is cst.Call:
                first = base.args[0].value if base.args else None
                if first is not None and dotted_name(_chain_base(first)) == dotted:
                    continue  # a wrapper of itself
                name = last_part(dotted_name(base.func))
                if name[:1].isupper():
                    found.add(name)
                    continue
            if dotted_name(base) == dotted:
                continue  # moved: `net = net.to(device)`
            return None
        return found.pop() if len(found) == 1 else None

    def _objects(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> List[str]:
        """What `expr` writes that `weights_only=True` refuses: a configuration or parsed
        arguments (by name), a whole model."""
        if type(expr) is cst.Dict:
            found: List[str] = []
            for element in expr.elements:
                if type(element) is cst.DictElement:
                    found += self._objects(element.value, at, depth)
            return found
        if _plain(expr) or type(expr) is cst.Name and self._bound(expr, at) and all(
                _plain(value) for value, _ in self._bound(expr, at)):
            return []  # `model_args = dict(n_layer=12)`: plain, whatever its name
        if self.receivers.is_model(expr) and not type(expr) is cst.Call:
            return [f"the model `{dotted_name(expr)}`"]
        dotted = dotted_name(_subscripted(expr))
        if dotted is not None and _CONFIG.search(last_part(dotted)):
            return [f"`{dotted}`"]
        if depth < _FOLLOW:
            found = []
            for value, node in [*self._bound(expr, at), *[v for v in self._values(expr, at) if v[0] is not expr]]:
                found += self._objects(value, node, depth + 1)
            return found
        return []

    def _files(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> FrozenSet[str]:
        """The file names the literal parts of a path spell."""
        found: Set[str] = set()
        for node in walk(expr):
            text = None
            if type(node) is cst.SimpleString:
                text = _string(node)
            elif type(node) is cst.FormattedStringText:
                text = node.value
            if text:
                name = os.path.basename(text.replace("\\", "/"))
                if _FILE.search(name):
                    found.add(name)
        if not found and depth < _FOLLOW:
            for value, node in [*self._bound(expr, at), *[v for v in self._values(expr, at) if v[0] is not expr]]:
                found |= self._files(value, node, depth + 1)
        return frozenset(found)

    # -- loads -------------------------------------------------------------------------------
    def load(self, call: cst.Call) -> Load:
        found = self._loads.get(id(call))
        if found is None:
            path = argument(call, "f", 0)
            files = self._files(path.value, call) if path is not None else frozenset()
            keys = self._keys_read(call)
            loaders = self.apicalls.state_loads(call)
            models: Set[str] = set()
            placements = []
            for loader in loaders:
                receiver = loader.func.value  # type: ignore[attr-defined]
                models |= self._model_tokens(receiver)
                placements.append(self.on_cpu(receiver, loader))
            into_cpu = True if placements and all(p is True for p in placements) else \
                False if any(p is False for p in placements) else None
            objects = tuple(f"`{key}`" for key in sorted(keys) if _CONFIG_KEY.match(key))
            scope = self.tree.scope_of(call)
            whole = [] if loaders else sorted(
                name for name in self.apicalls.bound_from(call)
                if self.receivers.is_model(cst.Name(name)) and any(
                    b.value is not None and (_chain_base(b.value) is call or  # `model = torch.load(f)`
                                             # `encoder = checkpoint["encoder"].to(device)`: a state dict has no moves
                                             _chain_base(b.value) is not b.value and self._loaded_by(b.value, call, name))
                    for b in self.scopes.bindings(scope, name))
                or self._put_in_eval_mode(name, call))
            objects += tuple(f"the model `{name}`" for name in whole)
            if self._read_as_numpy(call):
                objects += ("numpy arrays",)
            placed = tuple(name for name in whole if self._moved_to_a_device(name, scope))
            if not keys or not keys <= self._keys_of(placed, scope) or not self._read_by_key_only(call, scope):
                placed = ()  # it holds other things the program takes out (an optimizer, a step): all are used
            found = Load(call, files, frozenset(keys), frozenset(models), objects, into_cpu, placed)
            self._loads[id(call)] = found
        return found

    def _put_in_eval_mode(self, name: str, call: cst.Call) -> bool:
        """`name.eval()` or `name.cuda().eval()` where `name` holds what `call` loaded, itself or
        an item of it (`net = torch.load(f)["model"]`): only a module has modes."""
        for node in self.tree.walk_scope(self.tree.scope_of(call)):
            if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "eval":  # type: ignore[attr-defined]
                base = _chain_base(node.func.value)  # type: ignore[attr-defined]
                if type(base) is cst.Name and base.value == name:  # type: ignore[attr-defined]
                    binds = self.scopes.in_effect(name, node)
                    return bool(binds) and all(self._loaded_by(b.value, call, name) for b in binds)
        return False

    def _keys_of(self, names: Tuple[str, ...], scope: cst.CSTNode) -> Set[str]:
        """The keys the bindings of `names` in `scope` take their values from (`"decoder"` of
        `decoder = checkpoint["decoder"]`)."""
        found: Set[str] = set()
        for name in names:
            for bind in self.scopes.bindings(scope, name):
                item = _chain_base(bind.value) if bind.value is not None else None
                key = string_key(item) if type(item) is cst.Subscript else None
                if key is not None:
                    found.add(key)
        return found

    def _moved_to_a_device(self, name: str, scope: cst.CSTNode) -> bool:
        """`name.to(device)` or `name.cuda()` in `scope`, at the start of a chain of moves, or a
        binding of `name` to such a chain (`encoder = checkpoint["encoder"].to(device).eval()`)."""
        for bind in self.scopes.bindings(scope, name):
            value = bind.value
            while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in _MOVERS:  # type: ignore[attr-defined]
                if _names_a_device(value):
                    return True
                value = value.func.value  # type: ignore[attr-defined]
        for node in self.tree.walk_scope(scope):
            if type(node) is cst.Call and _names_a_device(node):
                base = _chain_base(node)
                if type(base) is cst.Name and base.value == name:  # type: ignore[attr-defined]
                    return True
        return False

    def read_for_progress(self, call: cst.Call) -> Optional[str]:
        """The key, when everything taken out of what `call` loaded is how far a training run
        got (`ckpt["epoch"]`, `"epoch" in ckpt`, `best_acc`): a checkpoint loaded whole, every
        tensor it holds included, to read a number."""
        keys = self.load(call).keys
        scope = self.tree.scope_of(call)
        if not keys or not all(_PROGRESS_KEY.match(key) for key in keys) or \
                not self._read_by_key_only(call, scope) or not self._read_by_literal_key(call, scope):
            return None
        return min(keys)

    def _read_by_literal_key(self, call: cst.Call, scope: cst.CSTNode) -> bool:
        """Every item taken of what `call` loaded is named by a string (`ckpt["epoch"]`,
        `ckpt.get("step")`, not `ckpt[key]` nor `ckpt.get(name)`): the keys read are all there is."""
        holders = self.apicalls.bound_from(call, follow=False)
        for node in self.tree.walk_scope(scope):
            if type(node) is cst.Subscript and type(node.value) is cst.Name and node.value.value in holders:  # type: ignore[attr-defined]
                if string_key(node) is None:
                    return False
            elif type(node) is cst.Call and type(node.func) is cst.Attribute and \
                    type(node.func.value) is cst.Name and node.func.value.value in holders and \
                    node.func.attr.value in ("get", "pop") and (  # type: ignore[attr-defined]
                        not node.args or _string(node.args[0].value) is None):  # type: ignore[attr-defined]
                return False
        return True

    @staticmethod
    def saves_progress_only(save: Save) -> bool:
        """`save` writes a dict of progress counters alone (`{"epoch": epoch, "step": step}`)."""
        return bool(save.keys) and all(_PROGRESS_KEY.match(key) for key in save.keys)

    def _read_by_key_only(self, call: cst.Call, scope: cst.CSTNode) -> bool:
        """Every read of the names holding what `call` loaded takes an item by key
        (`checkpoint["decoder"]`, `.get("epoch")`, `"ema" in checkpoint`): none hands the
        whole on (`restore_ema(model, checkpoint)`) or walks it (`checkpoint.items()`)."""
        holders = self.apicalls.bound_from(call, follow=False)
        for node in self.tree.walk_scope(scope):
            if type(node) is not cst.Name or node.value not in holders or self.tree.contains(call, node):
                continue
            parent = self.tree.parent(node)
            kind = type(parent)
            if kind is cst.AssignTarget or kind is cst.Subscript and parent.value is node or \
                    kind is cst.Attribute and parent.attr.value in ("get", "keys") or \
                    kind is cst.ComparisonTarget and type(parent.operator) in (cst.In, cst.NotIn):  # type: ignore[attr-defined]
                continue
            return False
        return True

    def _loaded_by(self, value: Optional[cst.BaseExpression], call: cst.Call, name: str, depth: int = 0) -> bool:
        """`value` is what `call` loaded (or an item of it), moved or put in a mode, also through
        an earlier binding of `name` (`net = net.cuda()` after `net = torch.load(f)["m"]`), or an
        item of a name that holds the load (`decoder = checkpoint["decoder"]` after `checkpoint =
        torch.load(f)`)."""
        if value is None or depth > _FOLLOW:
            return False
        chained = _chain_base(value)
        base = _subscripted(chained)
        if base is call:
            return True
        if type(base) is not cst.Name:
            return False
        if base.value == name:  # type: ignore[attr-defined]
            earlier = [b for b in self.scopes.in_effect(name, value) if b.value is not value]
            return bool(earlier) and all(self._loaded_by(b.value, call, name, depth + 1) for b in earlier)
        if chained is base:
            return False  # the name itself, not an item of it
        holders = self.scopes.in_effect(base.value, value)  # type: ignore[attr-defined]
        return bool(holders) and all(b.value is call for b in holders)

    def _read_as_numpy(self, call: cst.Call) -> bool:
        """The load's result, or an item of it, is handed to `torch.from_numpy` in its scope
        (`torch.from_numpy(bounds[n])`): the file holds numpy arrays."""
        names = self.apicalls.bound_from(call, follow=False)
        for node in self.tree.walk_scope(self.tree.scope_of(call)):
            if type(node) is cst.Call and node.args and self.names.call_name(node) == "torch.from_numpy":  # type: ignore[attr-defined]
                read = _subscripted(node.args[0].value)  # type: ignore[attr-defined]
                if read is call or type(read) is cst.Name and read.value in names:  # type: ignore[attr-defined]
                    return True
        return False

    def _keys_read(self, call: cst.Call) -> Set[str]:
        """The string keys the load's result is read at in its scope."""
        names = self.apicalls.bound_from(call)
        if not names:
            return set()
        found: Set[str] = set()
        scope = self.tree.scope_of(call)
        for node in self.tree.walk_scope(scope):
            if type(node) is cst.Subscript and type(node.value) is cst.Name and node.value.value in names:
                key = string_key(node)
            elif type(node) is cst.Call and type(node.func) is cst.Attribute and \
                    type(node.func.value) is cst.Name and node.func.value.value in names and \
                    node.func.attr.value in ("get", "pop") and node.args:
                key = _string(node.args[0].value)
            elif type(node) is cst.Comparison and len(node.comparisons) == 1 and \
                    type(node.comparisons[0].operator) is cst.In and \
                    type(node.comparisons[0].comparator) is cst.Name and \
                    node.comparisons[0].comparator.value in names:
                key = _string(node.left)
            else:
                continue
            if key is not None:
                found.add(key)
        return found

    def matching(self, load: Load) -> List[Save]:
        """The saves of this module that write what `load` reads (see the module docstring)."""
        return [save for save in self.saves
                if load.files & save.files or load.keys and load.keys <= save.keys or load.models & save.models]

    def under_safe_globals(self, call: cst.Call) -> bool:
        """The load runs where the program chose the classes `weights_only` may load: inside
        `with torch.serialization.safe_globals([...]):`, or in a module that registers them
        with `torch.serialization.add_safe_globals(...)`: code written for `weights_only`."""
        if self._registers_safe_globals:
            return True
        for ancestor in self.tree.ancestors(call):
            if type(ancestor) is cst.With and any(
                    type(item.item) is cst.Call and self.names.call_name(item.item) == _SAFE_GLOBALS
                    for item in ancestor.items):
                return True
        return False

    @cached_property
    def _registers_safe_globals(self) -> bool:
        return any(last_part(dotted_name(call.func)) == "add_safe_globals" and
                   self.names.call_name(call) == _ADD_SAFE_GLOBALS for call in self.scopes.calls)

    # -- where a model is --------------------------------------------------------------------
    def on_cpu(self, receiver: cst.BaseExpression, at: cst.CSTNode) -> Optional[bool]:
        """Whether the model `receiver` names is on the CPU at `at`, from what its function did
        to it before: built (`Net()`), moved (`.cpu()`, `.to("cpu")` / `.cuda()`, `.to(device)`);
        None when its function does not say."""
        while type(receiver) is cst.Attribute and receiver.attr.value == "module":
            receiver = receiver.value
        dotted = dotted_name(receiver)
        if dotted is None:
            return None
        scope = self.tree.scope_of(at)
        position = self.tree.order(at)
        events: List[Tuple[int, Optional[bool]]] = []
        for assign in self.scopes.assigns_of(scope):
            if self.tree.order(assign) < position and any(dotted_name(t.target) == dotted for t in assign.targets):
                placed = self._placed(assign.value, dotted)
                if placed != "same":
                    events.append((self.tree.order(assign), placed))  # type: ignore[arg-type]
        for call in self.scopes.calls_of(scope):
            if self.tree.order(call) < position and type(call.func) is cst.Attribute and \
                    call.func.attr.value in ("cpu", "cuda", "to") and \
                    dotted_name(_chain_base(call)) == dotted and not self._assigned(call, dotted):
                events.append((self.tree.order(call), _move(call)))
        if not events:
            return None
        return max(events, key=lambda event: event[0])[1]

    def _assigned(self, call: cst.Call, dotted: str) -> bool:
        """The call's value is assigned to the model's own name (the assignment is the event)."""
        parent = self.tree.parent(call)
        return type(parent) is cst.Assign and any(dotted_name(t.target) == dotted for t in parent.targets)

    def _placed(self, value: cst.BaseExpression, dotted: str) -> "Optional[bool] | str":
        """Where an assignment puts the model: True (CPU), False (a GPU), None (not known),
        "same" (a move-free wrapper of itself: `net = DataParallel(net)`)."""
        if type(value) is cst.Call and type(value.func) is cst.Attribute and \
                value.func.attr.value in ("cpu", "cuda", "to"):
            return _move(value)
        base = _chain_base(value)
        if type(base) is cst.Call:
            first = base.args[0].value if base.args else None
            if first is not None and dotted_name(_chain_base(first)) == dotted:
                return "same"
            name = last_part(dotted_name(base.func))
            if name[:1].isupper() or name in _BUILDERS or self._builds_own_class(base):
                return True  # a module is built on the CPU
        return None

    def _builds_own_class(self, call: cst.Call) -> bool:
        """`klass(**config)` in a class method of a model class, whose first parameter is its class."""
        func = self.tree.function_of(call)
        klass = self.tree.class_of(func) if func is not None else None
        if func is None or klass is None or type(call.func) is not cst.Name or \
                klass.name.value not in self.receivers.module_classes or \
                not any(dotted_name(d.decorator) == "classmethod" for d in func.decorators):
            return False
        params = func.params.posonly_params or func.params.params
        return bool(params) and params[0].name.value == call.func.value  # type: ignore[attr-defined]


def _plain(expr: cst.BaseExpression) -> bool:
    """A literal, or a container `weights_only=True` loads (`dict(...)`, `vars(args)`)."""
    if type(expr) in (cst.List, cst.Tuple, cst.ListComp, cst.DictComp, cst.SimpleString, cst.Integer, cst.Float):
        return True
    return type(expr) is cst.Call and last_part(dotted_name(expr.func)) in _PLAIN


def _chain_base(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`Net()` of `Net().to(device).eval()`, `net` of `net.eval().cpu()`: what a chain of
    moves starts from."""
    while type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in _MOVERS:
        expr = expr.func.value
    return expr


def _names_a_device(call: cst.Call) -> bool:
    """`x.cuda()`, or `x.to(...)` given a device (`device`, `args.gpu`, `"cuda:0"`, `0`,
    `torch.device(...)`, `device=...`), not only a dtype (`x.to(torch.float16)`)."""
    func = call.func
    if type(func) is not cst.Attribute or func.attr.value not in ("to", "cuda"):  # type: ignore[attr-defined]
        return False
    if func.attr.value == "cuda":  # type: ignore[attr-defined]
        return True
    place = argument(call, "device", 0)
    if place is None:
        return False
    value = place.value
    if type(value) is cst.SimpleString:
        return str(value.evaluated_value).startswith(("cuda", "xpu", "mps"))  # type: ignore[attr-defined]
    if type(value) is cst.Integer:
        return True
    if type(value) is cst.Call:
        return last_part(dotted_name(value.func)) == "device"  # type: ignore[attr-defined]
    return bool(_DEVICE_NAME.search(last_part(dotted_name(value))))


def _move(call: cst.Call) -> Optional[bool]:
    """The outermost move of a chain: True (to the CPU), False (to a GPU), None (not a move)."""
    func = call.func
    if not type(func) is cst.Attribute:
        return None
    if func.attr.value == "cpu":
        return True
    if func.attr.value == "cuda":
        return False
    if func.attr.value == "to":
        return True if _names_cpu(call) else False if call.args else None
    return None


def _names_cpu(call: cst.Call) -> bool:
    """`.to("cpu")`, `.to(torch.device("cpu"))`, `.to(device="cpu")`."""
    arg = argument(call, "device", 0)
    if arg is None:
        return False
    value = arg.value
    if type(value) is cst.Call and value.args:
        value = value.args[0].value
    return _string(value) == "cpu"


def _string(expr: Optional[cst.BaseExpression]) -> Optional[str]:
    if type(expr) is cst.SimpleString:
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _subscripted(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`cfg` of `cfg[cfg.model]`, `cfg.model.encoder` stays itself."""
    while type(expr) is cst.Subscript:
        expr = expr.value
    return expr
