"""The project: what the other modules of the files being linted say about one module's code.

A training step is rarely written in one file. The loop that runs it is in a trainer module
(`for batch in loader: self.task.train_step(...)`), the step in a task or criterion module, the
metric that keeps every prediction in a third (`acc.update(pred, y)`). memlint lints one file
at a time, so each module is first summarised on its own (memlint.analysis.summary: its imports,
classes and their bases, functions, and the calls between them with how often each call runs
in its function), and the project answers, from all the summaries, what one module cannot see:

- `external_often(function)`: how often a function runs per step because of callers in other
  modules (a hook that a trainer class in another file calls from its loop; an override of a
  method that a base class in another file calls on `self` every step);
- `lineage(class)`: every ancestor of a class, through the project's modules, down to the
  classes they import (`torch.nn.modules.loss._Loss`, `lightning.LightningModule`), so a
  criterion deriving from the project's own `BaseCriterion` is known to be a module;
- `function(name)`: what a function of another module does with its arguments (memlint.analysis.summary);
- `saved(files)`: how the modules save files of these names (from the CPU or not, with what
  objects), for a `torch.load` of such a file (memlint.analysis.checkpoints);
- `learns(class)`: whether a method of a class (or of a project class it derives from)
  backwards, steps or asks for gradients;
- `external_grad_off(function)`: whether other modules call a function with grad off or on
  (bark's `api.py` calling `generation.codec_decode` with grad on).

Module names come from the files' places: a folder with an `__init__.py` is a package, and the
first folder up without one is the root the module is imported from (`src/pkg/mod.py` is
`pkg.mod`; a script next to `utils.py` imports it as `utils`). An import resolves to a module of
the same root first, else to the one module of that name under any root. A module in folders
without an `__init__.py` (a namespace package) answers also to the longer name the project's
imports give it (`ldm/modules/util.py`, `util` to its neighbours, is `ldm.modules.util` to a
module that imports it from the folder above `ldm/`).

Every question a file's analysis asks is recorded with its answer (`ProjectView.asked`). Linted
with no project (one file alone, or before the summaries are known), every answer is the one a
module alone would give, and the analyses lean on such answers towards not reporting: a file
linted alone never reports more than it does in its project. A result found with some answers
stays true while the same questions get the same answers: that is how the run decides which
files to lint again once every summary is known, and how the cache keeps a result.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from memlint.analysis.frameworks import (HF_TRAINER_BASES, LIGHTNING_BASES, is_module_base_name,
                                         is_torch_library)
from memlint.analysis.summary import ClassSummary, FunctionSummary, ModuleSummary
from memlint.analysis.often import INNER, STEP, at_site, combine, intrinsic_often

# Bases that add no method that trains: torch's modules, typing's and abc's helpers
_INERT_BASE = re.compile(r"^(object|torch\.nn\.(modules\.module\.)?Module|nn\.Module|typing\.\w+|abc\.ABC|"
                         r"(typing\.)?(Generic|Protocol)(\[.*\])?)$")
Answer = object  # JSON-able: None, a string, a list of strings, a list of [key, value]
Ref = Tuple[str, str, str]  # (root, module, `f` or `Class` or `Class.method`)
# A call of a project function: the function calling, the call's place in it (memlint.analysis.often),
# and for a call on `self`, the caller's class (what `self` is at least)
Incoming = Tuple[Ref, str, Optional[Ref]]
# What a project class's name suggests it is, before (or without) its lineage: the first
# phase's guess, and the answer for a class the project cannot trace (a base of a module
# outside the files linted)
_MODULE_NAME = re.compile(r"((?<!Data)Module|Model|Encoder|Decoder|Layer|Net|Network|Block|Cell|Criterion|"
                          r"Backbone|Heads?|Norm|Norm[123]d|Attention|Generator|Transformer)$")
_LIGHTNING_PACKAGES = ("lightning.", "pytorch_lightning.")
_MAX_REEXPORTS = 8  # `from .x import f` followed through at most this many modules


@lru_cache(maxsize=4096)
def module_name(path: str) -> Tuple[str, str]:
    """(root folder, dotted module name) of a Python file: folders with an `__init__.py` are
    packages; the first folder up without one is the root."""
    folder, stem = os.path.split(os.path.abspath(path))
    stem = os.path.splitext(stem)[0]
    parts = [] if stem == "__init__" else [stem]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        folder, package = os.path.split(folder)
        parts.insert(0, package)
        if not package:
            break
    return folder, ".".join(parts)


class Project:
    """The summaries of every module being linted, and the answers drawn from them."""

    def __init__(self, modules: Dict[str, Tuple[str, str]], summaries: Dict[str, ModuleSummary],
                 imported: FrozenSet[str] = frozenset(), aliases: Optional[Dict[str, Tuple[str, str]]] = None) -> None:
        """`modules`: (root, name) of every Python file of the project, by path
        (`project_files`); `summaries`: those that could be summarised, by path; `imported`: the
        modules that another module imports (`imported_modules`); `aliases`: the other names of
        modules in namespace packages (`namespace_names`)."""
        self.aliases = aliases or {}
        self.names = frozenset(name for _, name in modules.values()) | frozenset(self.aliases)
        self.imported = imported
        self._modules: Dict[Tuple[str, str], ModuleSummary] = {}
        self._roots_of: Dict[str, List[str]] = {}
        for path in sorted(summaries):
            key = modules[path]
            if key not in self._modules:
                self._modules[key] = summaries[path]
                self._roots_of.setdefault(key[1], []).append(key[0])
        self._often: Dict[Tuple[Ref, Optional[Ref]], Optional[str]] = {}
        self._star_names: Dict[Tuple[str, str], Optional[Ref]] = {}  # (root, dotted) -> through star imports
        self._incoming: Optional[Dict[Ref, List[Incoming]]] = None
        self._grad_off_calls: Dict[Ref, List[Tuple[Ref, bool]]] = {}  # with `_incoming`: callers, made with grad off
        self._quiet: Dict[Ref, bool] = {}
        self._subclasses: Optional[Dict[Tuple[str, str, str], List[Tuple[str, str, str]]]] = None
        self._device_called: Optional[Set[Tuple[str, str]]] = None
        self._grad_off_methods: Optional[FrozenSet[str]] = None
        self._set: Optional[Dict[str, Set[str]]] = None

    def set_elsewhere(self, name: str, module: str) -> bool:
        """Whether a module of the project other than `module` assigns `name` (`nerf.DEBUG =
        args.debug` for `nerf`'s `DEBUG`)."""
        if self._set is None:  # (a module of a namespace package by its own name: `models.nerf` is `nerf`)
            self._set = {}
            for (_, setter), summary in self._modules.items():
                for assigned in summary.sets:
                    owner, _, attr = assigned.rpartition(".")
                    owner = self.aliases[owner][1] if owner in self.aliases else owner
                    self._set.setdefault(f"{owner}.{attr}", set()).add(setter)
        setters = self._set.get(name, set()) | self._set.get(f"{module}.*", set())
        return bool(setters - {module})

    # -- finding things --------------------------------------------------------------------
    def _module(self, root: str, name: str) -> Optional[Tuple[str, str]]:
        roots = self._roots_of.get(name)
        if not roots:
            known = self.aliases.get(name)  # a namespace package's module, by the name imports give it
            return known if known in self._modules else None
        if root in roots:
            return (root, name)
        return (roots[0], name) if len(roots) == 1 else None

    def resolve(self, root: str, dotted: str, depth: int = 0) -> Optional[Tuple[str, str, str]]:
        """The project's definition that `dotted` (an absolute name as a module in `root` imports
        it) names: (root, module, qualified name in it: `f`, `Class`, `Class.method`), or None."""
        parts = dotted.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            key = self._module(root, ".".join(parts[:cut]))
            if key is None:
                continue
            rest = parts[cut:]
            summary = self._modules[key]
            head = rest[0]
            if head in summary.functions and len(rest) == 1:
                return (*key, head)
            if head in summary.classes:
                if len(rest) == 1:
                    return (*key, head)
                if len(rest) == 2:
                    return self._method(key, head, rest[1])
                return None
            imported = summary.imports.get(head) or summary.aliases.get(head)
            if imported is not None and depth < _MAX_REEXPORTS:  # re-exported: `from .x import f`
                return self.resolve(key[0], ".".join([imported, *rest[1:]]), depth + 1)
            if imported is None and depth < _MAX_REEXPORTS:  # `from .models import *`: the last that has it
                for star in reversed(summary.stars):
                    if self._module(key[0], star) is None:  # a module the run lacks tells nothing (followed,
                        continue  # its name was looked for in the package again, through every star import)
                    found = self._resolved(key[0], ".".join([star, *rest]), depth + 1)
                    if found is not None:
                        return found
            return None
        return None

    def _resolved(self, root: str, dotted: str, depth: int) -> Optional[Tuple[str, str, str]]:
        """`resolve`, each name once: modules that import everything of each other would
        otherwise be walked along every path between them."""
        key = (root, dotted)
        if key not in self._star_names:
            self._star_names[key] = None  # (a cycle of star imports resolves nothing more)
            self._star_names[key] = self.resolve(root, dotted, depth)
        return self._star_names[key]

    def _method(self, key: Tuple[str, str], klass: str, method: str) -> Optional[Tuple[str, str, str]]:
        """`klass.method` as the class's instances find it: its own, or the first base's that has it."""
        for owner in self._mro((*key, klass)):
            summary = self._modules[owner[:2]]
            if method in summary.classes[owner[2]].methods:
                return (*owner[:2], f"{owner[2]}.{method}")
        return None

    def _class(self, ref: Tuple[str, str, str]) -> ClassSummary:
        return self._modules[ref[:2]].classes[ref[2]]

    def _base_refs(self, ref: Tuple[str, str, str]) -> Iterable[Tuple[Optional[Tuple[str, str, str]], str]]:
        """Each base of a project class: (its definition in the project or None, its name)."""
        summary = self._modules[ref[:2]]
        for base in self._class(ref).bases:
            if base in summary.classes:
                yield (*ref[:2], base), f"{summary.name}.{base}"
                continue
            found = self.resolve(ref[0], base)
            yield (found if found is not None and "." not in found[2] and found[2] in
                   self._modules[found[:2]].classes else None), base

    def _mro(self, ref: Tuple[str, str, str]) -> List[Tuple[str, str, str]]:
        """The project classes `ref` derives from, itself first, depth first, each once."""
        found: List[Tuple[str, str, str]] = []
        pending = [ref]
        while pending:
            current = pending.pop(0)
            if current in found:
                continue
            found.append(current)
            pending.extend(base for base, _ in self._base_refs(current) if base is not None)
        return found

    # -- the answers -----------------------------------------------------------------------
    def lineage(self, root: str, dotted: str) -> Tuple[str, ...]:
        """Every ancestor of the class `dotted` names, the class itself first: project classes
        as `module.Class`, imported ones by their imported name. Empty when not the project's."""
        ref = self.resolve(root, dotted)
        if ref is None or "." in ref[2] or ref[2] not in self._modules[ref[:2]].classes:
            return ()
        names: List[str] = []
        for current in self._mro(ref):
            names.append(f"{current[1]}.{current[2]}")
            names.extend(name for base, name in self._base_refs(current) if base is None and name not in names)
        return tuple(names)

    def learns(self, root: str, dotted: str) -> bool:
        """Whether the project class `dotted` names, or a project class it derives from, has a
        method that backwards, steps or asks for gradients; True where the class is not the
        project's (nothing is known of it)."""
        ref = self.resolve(root, dotted)
        if ref is None or "." in ref[2] or ref[2] not in self._modules[ref[:2]].classes:
            return True
        return any(self._class(current).learns or any(  # (a base of a library's may learn: not known)
            base is None and not _INERT_BASE.match(name) for base, name in self._base_refs(current))
            for current in self._mro(ref))

    def uses_torch(self, root: str, dotted: str) -> bool:
        """Whether the project module that `dotted` (a module, or a name in one) comes from
        imports torch or a library built on it."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            key = self._module(root, ".".join(parts[:cut]))
            if key is not None:
                return any(is_torch_library(full) for full in self._modules[key].imports.values())
        return False

    def language_model(self, root: str, dotted: str) -> bool:
        """Whether the project's definition `dotted` is in a module whose builds are language
        models (memlint.analysis.outputs.Outputs.builds_language_model)."""
        ref = self.resolve(root, dotted)
        return ref is not None and self._modules[ref[:2]].language_model

    def function(self, root: str, dotted: str) -> Optional[FunctionSummary]:
        """What the function or method `dotted` names does, when it is the project's."""
        ref = self.resolve(root, dotted)
        if ref is None:
            return None
        summary = self._modules[ref[:2]]
        klass, _, method = ref[2].partition(".")
        if not method:
            return summary.functions.get(klass)
        return summary.classes[klass].methods.get(method)

    def grad_off_method(self, name: str) -> bool:
        """Whether every class of the project's importable modules that defines a method `name`
        decorates it to run without grad (PyG's `@torch.no_grad() def inference`): called on a
        model whose class the caller cannot tell, it is one of those (a script's own model
        class, which no other module imports, cannot be)."""
        if self._grad_off_methods is None:
            flags: Dict[str, Set[bool]] = {}
            for key in sorted(self._modules):
                if key[1] not in self.imported:
                    continue
                for klass in self._modules[key].classes.values():
                    for method, summary in klass.methods.items():
                        flags.setdefault(method, set()).add(summary.grad_off)
            self._grad_off_methods = frozenset(method for method, seen in flags.items() if seen == {True})
        return name in self._grad_off_methods

    def external_often(self, root: str, module: str, qualified: str) -> Optional[str]:
        """How often the function `qualified` of `module` runs per step because code in other
        modules calls it (directly, or on `self` where it overrides what a base calls)."""
        target = (root, module, qualified)
        return combine({at_site(kind, self._often_of(caller, self._instance_of(target, through)))
                        for caller, kind, through in self._incoming_edges().get(target, ()) if caller[:2] != target[:2]})

    def external_grad_off(self, root: str, module: str, qualified: str) -> FrozenSet[bool]:
        """For the calls other modules make of the function `qualified` of `module`, whether
        each runs with grad off (made so, or in a function every call of which runs so, through
        the project): {False} where every one records a graph, {} where none is."""
        self._incoming_edges()
        return frozenset(off or self._always_quiet(caller)
                         for caller, off in self._grad_off_calls.get((root, module, qualified), ())
                         if caller[:2] != (root, module))

    def evaluation_call_modes(self, root: str, module: str, name: str) -> FrozenSet[bool]:
        """For the calls the other modules make of a method named `name` on an object (not
        `self`; memlint.analysis.summary: `evaluation_calls`), whether each runs with grad off."""
        return frozenset(quiet for key in sorted(self._modules) if key != (root, module)
                         for called, quiet in self._modules[key].evaluation_calls if called == name)

    def _always_quiet(self, function: Ref) -> bool:
        """Every call of `function` in the project runs with grad off (and there is one)."""
        if function in self._quiet:
            return self._quiet[function]
        self._quiet[function] = False  # a recursive call does not decide
        callers = self._grad_off_calls.get(function, []) if function[2] else []
        result = bool(callers) and all(off or self._always_quiet(caller) for caller, off in callers)
        self._quiet[function] = result
        return result

    def forward_asks_for_grad(self) -> bool:
        """A model class of the project asks for gradients in its `forward`."""
        return any(summary.forward_asks_for_grad for summary in self._modules.values())

    def called_from_device_code(self, root: str, module: str) -> bool:
        """Whether a module of the project whose code names a device calls a function of
        `module` (guided-diffusion's `train_util` moving batches to `dist_util.dev()` and calling
        `fp16_util`'s trainer, whose own code names no device)."""
        if self._device_called is None:
            self._device_called = {target[:2] for target, callers in self._incoming_edges().items()
                                   if any(caller[:2] != target[:2] and self._modules[caller[:2]].device
                                          for caller, _, _ in callers)}
        return (root, module) in self._device_called

    def saved(self, files: FrozenSet[str]) -> List[List[str]]:
        """How the project's modules save files of these names: [where from ("cpu", "gpu"),
        the objects other than tensors written with them] (memlint.analysis.checkpoints)."""
        kinds: Set[str] = set()
        objects: Set[str] = set()
        for key in sorted(self._modules):
            for save in self._modules[key].saves:
                if files.intersection(save.files):
                    kinds.add("cpu" if save.cpu else "gpu")
                    objects.update(save.objects)
        return [sorted(kinds), sorted(objects)]

    def _often_of(self, function: Ref, instance: Optional[Ref] = None) -> Optional[str]:
        """How often a function runs per step, from everything the project knows (its name
        and class, every call of it), the same reading as memlint.analysis.steps makes. With
        `instance`, only as a method of that class's instances: a base's method that calls
        `self.hook()` reaches a subclass's override of `hook` only through the calls of it
        made on that subclass, not those a sibling makes on itself (`KandinskyPipeline.__call__`
        calling `self.free_hooks()` every step says nothing of another pipeline's hooks)."""
        memo = (function, instance)
        if memo in self._often:
            return self._often[memo]
        self._often[memo] = None  # a recursive call does not decide
        if not function[2]:
            return None  # module level: runs once
        klass, _, name = function[2].rpartition(".")
        if instance is not None and instance != (*function[:2], klass) and \
                self._method(instance[:2], instance[2], name) != function:
            instance = None  # the class overrides it (its `super().m()` calls are not edges): not narrowed
        result = intrinsic_often(name, klass != "" and self._is_module(function[:2], klass))
        if result is None:
            result = combine({at_site(kind, self._often_of(caller, self._instance_of(function, through, instance)))
                              for caller, kind, through in self._incoming_edges().get(function, ())
                              if instance is None or through is None or self._related(through, instance)})
        self._often[memo] = result
        return result

    def _instance_of(self, function: Ref, through: Optional[Ref], instance: Optional[Ref] = None) -> Optional[Ref]:
        """What `self` is known to be in the caller of `function` by a call on `self` (`through`,
        the caller's class): the class that defines `function` where the call reached an
        override in a subclass of the caller's class, else what it was known to be already."""
        if through is None:
            return None
        owner = (*function[:2], function[2].rpartition(".")[0])
        return owner if owner != through and through in self._mro(owner) else instance

    def _related(self, one: Ref, other: Ref) -> bool:
        """An instance may be of both classes: one derives from the other, or a project class
        derives from both (a class mixing in two siblings)."""
        return one in self._mro(other) or other in self._mro(one) or \
            bool(set(self._subclasses_of(one)) & set(self._subclasses_of(other)))

    def _is_module(self, key: Tuple[str, str], klass: str) -> bool:
        """Whether the class `klass` of the module `key` is an nn.Module. A class its summary does
        not hold (defined under a module-level `if` or `try`, as mmcv defines its fp16 hooks once
        per torch version) is not known to be one."""
        summary = self._modules[key]
        if klass not in summary.classes:
            return False
        if summary.classes[klass].module:
            return True
        return any(self._modules[ref[:2]].classes[ref[2]].module or any(
            base is None and is_module_base_name(name) for base, name in self._base_refs(ref))
            for ref in self._mro((*key, klass)))

    def _incoming_edges(self) -> Dict[Ref, List[Incoming]]:
        """Every call of a project function, by the function called (`Incoming`). A call on
        `self` also reaches every override of that method in the classes deriving from the
        caller's class."""
        if self._incoming is not None:
            return self._incoming
        incoming: Dict[Ref, List[Incoming]] = {}
        for key in sorted(self._modules):
            summary = self._modules[key]
            for edge in summary.calls:
                caller = (*key, edge.caller)
                targets: Set[Tuple[str, str, str]] = set()
                through: Optional[Ref] = None
                if edge.on_self:
                    klass, method = edge.callee.rsplit(".", 1)
                    through = (*key, klass)
                    found = self._method(key, klass, method) if klass in summary.classes else None
                    if found is not None:
                        targets.add(found)
                    for sub in self._subclasses_of((*key, klass)):
                        if method in self._class(sub).methods:
                            targets.add((*sub[:2], f"{sub[2]}.{method}"))
                elif edge.local:
                    targets.add((*key, edge.callee))
                else:
                    found = self.resolve(key[0], edge.callee)
                    if found is not None and (found[2] in self._modules[found[:2]].functions or "." in found[2]):
                        targets.add(found)
                for target in sorted(targets):
                    incoming.setdefault(target, []).append((caller, edge.kind, through))
                    self._grad_off_calls.setdefault(target, []).append((caller, edge.grad_off))
        self._incoming = incoming
        return incoming

    def _subclasses_of(self, ref: Tuple[str, str, str]) -> List[Tuple[str, str, str]]:
        """The project classes deriving from `ref`, at any depth."""
        if self._subclasses is None:
            direct: Dict[Tuple[str, str, str], List[Tuple[str, str, str]]] = {}
            for key in sorted(self._modules):
                for klass in sorted(self._modules[key].classes):
                    for base, _ in self._base_refs((*key, klass)):
                        if base is not None:
                            direct.setdefault(base, []).append((*key, klass))
            self._subclasses = direct
        found: List[Tuple[str, str, str]] = []
        pending = list(self._subclasses.get(ref, ()))
        while pending:
            current = pending.pop(0)
            if current not in found and current != ref:
                found.append(current)
                pending.extend(self._subclasses.get(current, ()))
        return found


class ProjectView:
    """The project as one module's analysis sees it: questions about names as this module
    spells them (absolute, after its imports), each recorded with its answer."""

    def __init__(self, project: Optional[Project] = None, names: FrozenSet[str] = frozenset(),
                 path: Optional[str] = None, imported: FrozenSet[str] = frozenset(),
                 device_imported: FrozenSet[str] = frozenset()) -> None:
        """`names`: the project's module names (known from the paths before any summary is);
        `path`: this module's file (None: a source linted on its own, no module of a project);
        `imported`, `device_imported`: the modules other files import, and those that files
        which may name a device import (the guess of `called_from_device_code` before the
        project is known)."""
        self.project = project
        self.names = names
        # where the module is imported from, and its dotted name
        self.root, self.name = module_name(path) if path is not None and names else ("", "")
        self.is_package = path is not None and os.path.basename(path) == "__init__.py"
        self.imported = not names or self.name in imported  # another module may import it
        self.device_imported = bool(names) and self.name in device_imported
        self.asked: Dict[str, Answer] = {}

    def fresh(self) -> "ProjectView":
        """The same view with nothing asked yet."""
        view = ProjectView.__new__(ProjectView)
        view.__dict__.update(self.__dict__, asked={})
        return view

    @property
    def package(self) -> Optional[str]:
        """The package this module's relative imports start from (None: not known)."""
        if not self.name:
            return None
        return self.name if self.is_package else self.name.rpartition(".")[0]

    def knows(self, dotted: Optional[str]) -> bool:
        """Whether `dotted` may name something of another module of the project (no question asked)."""
        if dotted is None:
            return False
        names = self.names
        parts = dotted.split(".")
        return any(".".join(parts[:cut]) in names for cut in range(1, len(parts)))

    def _ask(self, question: str, answer: Callable[[Project], Answer], guess: Answer, alone: Answer) -> Answer:
        """The answer to `question`, recorded: from the project; before it is known, `guess`
        (what the names alone suggest: the run checks it once the project is known); for a
        module linted on its own, `alone`, the answer that leans towards not reporting."""
        if question not in self.asked:
            if self.project is not None:
                self.asked[question] = answer(self.project)
            else:
                self.asked[question] = guess if self.names else alone
        return self.asked[question]

    def external_often(self, qualified: str) -> Optional[str]:
        """How often callers in other modules run this module's function `qualified`
        (memlint.analysis.project.Project.external_often), when it is every step or more:
        between steps (BOUNDARY) reads as None, which every fact treats alike, so that a
        function called per epoch elsewhere does not get its module linted twice."""
        def answer(project: Project) -> Optional[str]:
            often = project.external_often(self.root, self.name, qualified)
            return often if often in (STEP, INNER) else None
        return self._ask(f"often {qualified}", answer, None, None)  # type: ignore[return-value]

    def called_elsewhere(self, qualified: str, grad_off: bool) -> bool:
        """Whether another module of the project calls this module's function `qualified` with
        grad off (`grad_off`), or with grad on (memlint.analysis.project.Project.external_grad_off).
        Linted on its own, a module may be called with grad off, and is not known to be with it on."""
        return self._ask(f"called-{'quiet' if grad_off else 'recording'} {qualified}",
                         lambda p: grad_off in p.external_grad_off(self.root, self.name, qualified),
                         grad_off, grad_off)  # type: ignore[return-value]

    def method_called_quietly(self, name: str) -> bool:
        """Whether other modules of the project call a method named `name` on an object, and
        every such call runs with grad off (memlint.analysis.project.Project.evaluation_call_modes).
        Linted on its own, a module's methods may be called so."""
        return self._ask(f"method-quiet {name}",
                         lambda p: p.evaluation_call_modes(self.root, self.name, name) == {True},
                         False, True)  # type: ignore[return-value]

    def forward_asks_for_grad(self) -> bool:
        """Whether a model class of the project asks for gradients in its `forward`; linted on
        its own, one may."""
        return self._ask("forward-asks-for-grad", lambda p: p.forward_asks_for_grad(), True, True)  # type: ignore[return-value]

    def called_from_device_code(self) -> bool:
        """Whether another module of the project that names a device calls into this one
        (memlint.analysis.project.Project.called_from_device_code)."""
        return self._ask("device callers", lambda p: p.called_from_device_code(self.root, self.name),
                         self.device_imported, False)  # type: ignore[return-value]

    def is_module(self, dotted: str, likely: bool = False) -> bool:
        """Whether the project's class `dotted` (as this module imports it) is an nn.Module:
        from its lineage, or, where the project cannot trace it, from its name. `likely`: the
        asker's own sign that it is one (a class here derives from it and defines `forward`),
        for the guess before the project is known only: the project's answer depends on the
        question alone, so that every module asking it hears the same."""
        named = bool(_MODULE_NAME.search(dotted))
        return self._ask(f"module {dotted}", lambda p: self._by_lineage(p, dotted, is_module_base_name, named),
                         likely or named, False)  # type: ignore[return-value]

    def is_lightning_module(self, dotted: str) -> bool:
        """Whether the project's class `dotted` derives from Lightning's module (a model class
        of Lightning's own packages, `lightning.pytorch.demos.BoringModel`, is guessed one)."""
        guess = dotted.startswith(_LIGHTNING_PACKAGES) and bool(_MODULE_NAME.search(dotted))
        return self._ask(f"lightning {dotted}",
                         lambda p: self._by_lineage(p, dotted, lambda a: bool(LIGHTNING_BASES.search(a)), guess),
                         guess, False)  # type: ignore[return-value]

    def _by_lineage(self, project: Project, dotted: str, test: Callable[[str], bool], untraced: bool) -> bool:
        lineage = project.lineage(self.root, dotted)
        return any(test(ancestor) for ancestor in lineage) if lineage else untraced

    def uses_torch(self, dotted: str) -> bool:
        """Whether the project module `dotted` comes from imports torch (or a library on it)."""
        return self._ask(f"torch {dotted}", lambda p: p.uses_torch(self.root, dotted), False, False)  # type: ignore[return-value]

    def set_elsewhere(self, name: str) -> bool:
        """Whether another module of the project assigns this module's module-level `name`
        (`nerf.DEBUG = args.debug`): what its own assignments say of it does not hold. Before
        the others are known, and linted on its own, one may."""
        return self._ask(f"set {name}", lambda p: p.set_elsewhere(f"{self.name}.{name}", self.name),
                         True, True)  # type: ignore[return-value]

    def imported_elsewhere(self) -> bool:
        """Whether another module of the project imports this one (a module linted on its own
        may be imported by anything)."""
        return self._ask("imported", lambda p: self.name in p.imported, self.imported, True)  # type: ignore[return-value]

    def is_hf_trainer(self, dotted: str) -> bool:
        """Whether the project's class `dotted` derives from HF's `Trainer`."""
        return self._ask(f"hf-trainer {dotted}",
                         lambda p: any(HF_TRAINER_BASES.match(a) for a in p.lineage(self.root, dotted)),
                         False, False)  # type: ignore[return-value]

    def returns(self, dotted: str, graph: bool) -> bool:
        """Whether the project's function `dotted` returns a value with an autograd graph
        (`graph`), or a model's output on its device."""
        def answer(project: Project) -> bool:
            found = project.function(self.root, dotted)
            return found is not None and (found.returns_graph if graph else found.returns_output)
        return self._ask(f"returns-{'graph' if graph else 'output'} {dotted}", answer, False, False)  # type: ignore[return-value]

    def learns(self, dotted: str) -> bool:
        """Whether the project's class `dotted` (as this module imports it) may train on what its
        instances are handed (memlint.analysis.project.Project.learns); alone, it may."""
        return self._ask(f"learns {dotted}", lambda p: p.learns(self.root, dotted), True, True)  # type: ignore[return-value]

    def defines(self, dotted: str) -> bool:
        """Whether `dotted` names a function or class the project defines (a name a star import
        may bring: each module imported so is asked in turn)."""
        return self._ask(f"defines {dotted}", lambda project: project.resolve(self.root, dotted) is not None,
                         False, False)  # type: ignore[return-value]

    def returns_device(self, dotted: str) -> bool:
        """Whether the project's function `dotted` returns a tensor on the device."""
        def answer(project: Project) -> bool:
            found = project.function(self.root, dotted)
            return found is not None and found.returns_device
        return self._ask(f"returns-device {dotted}", answer, False, False)  # type: ignore[return-value]

    def language_model(self, dotted: str) -> bool:
        """Whether the project's function `dotted` is defined in a language model's module."""
        return self._ask(f"language-model {dotted}", lambda p: p.language_model(self.root, dotted),  # type: ignore[return-value]
                         False, False)

    def context(self, dotted: str) -> Optional[List[str]]:
        """What the project's `@contextmanager` function `dotted` enters around its `yield`
        (memlint.analysis.regions.Regions.context_of); None when nothing known."""
        def answer(project: Project) -> Optional[List[str]]:
            found = project.function(self.root, dotted)
            return list(found.context) if found is not None and found.context else None
        return self._ask(f"context {dotted}", answer, None, None)  # type: ignore[return-value]

    def grad_off(self, dotted: str) -> bool:
        """Whether the project's function or method `dotted` is decorated to run without grad."""
        def answer(project: Project) -> bool:
            found = project.function(self.root, dotted)
            return found is not None and found.grad_off
        return self._ask(f"grad-off {dotted}", answer, False, False)  # type: ignore[return-value]

    def grad_off_method(self, name: str) -> bool:
        """Whether every class of the project that defines a method `name` runs it without grad
        (memlint.analysis.project.Project.grad_off_method)."""
        return self._ask(f"grad-off-method {name}", lambda p: p.grad_off_method(name), False, False)  # type: ignore[return-value]

    def empties_cache(self, dotted: str) -> bool:
        """Whether the project's function `dotted` does nothing but empty the allocator's cache
        (memlint.analysis.cache)."""
        def answer(project: Project) -> bool:
            found = project.function(self.root, dotted)
            return found is not None and found.empties_cache
        return self._ask(f"empties-cache {dotted}", answer, False, False)  # type: ignore[return-value]

    def quiet_modes(self, klass: str) -> Optional[List[str]]:
        """The modes the `forward` of the project's class `klass` runs without grad
        (`mode=inference`, summary.FunctionSummary.quiet_modes); None when the project does not
        define it, or is not known (a module alone cannot tell)."""
        def answer(project: Project) -> Optional[List[str]]:
            found = project.function(self.root, f"{klass}.forward")
            return list(found.quiet_modes) if found is not None else None
        return self._ask(f"quiet-modes {klass}", answer, None, None)  # type: ignore[return-value]

    def keeps(self, dotted: str, graph: bool) -> Dict[str, int]:
        """The parameters that the project's method `dotted` appends to its instance, with their
        graph (`graph`) or as device tensors: each name with its position among the arguments a
        call passes (after `self`)."""
        def answer(project: Project) -> List[List[object]]:
            found = project.function(self.root, dotted)
            if found is None or found.params[:1] != ("self",):
                return []
            kept = found.keeps_graph if graph else found.keeps_output
            return [[name, position] for position, name in enumerate(found.params[1:]) if name in kept]
        found = self._ask(f"keeps-{'graph' if graph else 'output'} {dotted}", answer, [], [])
        return {name: position for name, position in found}  # type: ignore[union-attr, misc]

    def accumulates(self, dotted: str) -> Dict[str, int]:
        """The parameters that the project's method `dotted` adds, with their graph, into a
        running sum its instance keeps (`self.sum += val * n`): each name with its position
        among the arguments a call passes (after `self`)."""
        def answer(project: Project) -> List[List[object]]:
            found = project.function(self.root, dotted)
            if found is None or found.params[:1] != ("self",):
                return []
            return [[name, position] for position, name in enumerate(found.params[1:])
                    if name in found.accumulates_graph]
        found = self._ask(f"accumulates {dotted}", answer, [], [])
        return {name: position for name, position in found}  # type: ignore[union-attr, misc]


    def saved(self, files: Iterable[str]) -> Tuple[List[str], List[str]]:
        """Where the project saves files of these names from, and what objects it writes into
        them (Project.saved). Alone, a module cannot know that no other one saves the file
        from the CPU: it answers that one does, which keeps MEM502 from reporting."""
        names = sorted(set(files))
        found = self._ask(f"saved {json.dumps(names, separators=(',', ':'))}",
                          lambda p: p.saved(frozenset(names)), [[], []], [["cpu"], []])
        return found[0], found[1]  # type: ignore[index]


_QUESTIONS: Dict[str, Callable[[ProjectView, str], object]] = {
    "often": ProjectView.external_often,
    "module": ProjectView.is_module,
    "lightning": ProjectView.is_lightning_module,
    "hf-trainer": ProjectView.is_hf_trainer,
    "torch": ProjectView.uses_torch,
    "imported": lambda view, _: view.imported_elsewhere(),
    "returns-graph": lambda view, dotted: view.returns(dotted, True),
    "returns-output": lambda view, dotted: view.returns(dotted, False),
    "returns-device": ProjectView.returns_device,
    "defines": ProjectView.defines,
    "keeps-graph": lambda view, dotted: view.keeps(dotted, True),
    "keeps-output": lambda view, dotted: view.keeps(dotted, False),
    "accumulates": ProjectView.accumulates,
    "saved": lambda view, files: view.saved(json.loads(files)),
    "device": lambda view, _: view.called_from_device_code(),
    "empties-cache": ProjectView.empties_cache,
    "quiet-modes": ProjectView.quiet_modes,
    "context": ProjectView.context,
    "grad-off": ProjectView.grad_off,
    "grad-off-method": ProjectView.grad_off_method,
    "learns": ProjectView.learns,
    "language-model": ProjectView.language_model,
    "set": ProjectView.set_elsewhere,
    "called-quiet": lambda view, dotted: view.called_elsewhere(dotted, True),
    "called-recording": lambda view, dotted: view.called_elsewhere(dotted, False),
    "method-quiet": ProjectView.method_called_quietly,
    "forward-asks-for-grad": lambda view, _: view.forward_asks_for_grad(),
}


def answers(project: Optional[Project], path: str, asked: Dict[str, Answer]) -> Dict[str, Answer]:
    """What `asked` (questions a file's analysis asked) gets from `project` now."""
    view = ProjectView(project, project.names if project is not None else frozenset(), path)
    for question in asked:
        kind, _, subject = question.partition(" ")
        ask = _QUESTIONS.get(kind)
        if ask is not None:
            ask(view, subject)
        else:
            view.asked[question] = "?"  # a question this memlint does not ask: never the same
    return view.asked


def same_answers(project: Optional[Project], path: str, asked: Dict[str, Answer]) -> bool:
    """Whether every question in `asked` still gets the answer recorded there."""
    return answers(project, path, asked) == asked


_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]+)|import[ \t]+([^\n#;]+))",
                     re.MULTILINE)


def _import_statements(text: str) -> Iterator["re.Match[str]"]:
    """`_IMPORT.finditer(text)`, faster: a pattern that starts at the start of a line is tried
    at every position of the text, where the word `import` is looked for at C speed, and the
    pattern tried only at the start of each line that holds it (a match holds the word on its
    first line; matches do not overlap, as `finditer`'s)."""
    find, rfind, match_at = text.find, text.rfind, _IMPORT.match
    done = 0  # where the last match ended: no match starts before it
    at = find("import")
    while at >= 0:
        start = rfind("\n", 0, at) + 1
        match = match_at(text, start) if start >= done else None
        if match is not None:
            yield match
            done = match.end()
            at = find("import", done)
        else:  # none starts at this line's start: on to the next line that holds the word
            end = find("\n", at)
            at = find("import", end + 1) if end >= 0 else -1


def imported_modules(sources: Dict[str, str],
                     modules: Dict[str, Tuple[str, str]]) -> Tuple[FrozenSet[str], FrozenSet[str]]:
    """The names of the modules that the project's files import, read from the import lines of
    their texts (before any is parsed), relative imports resolved: a module no other file
    imports needs no summary of its functions and classes. Second, those of them that a file
    whose text may name a device imports for its functions (`_imports_of`): the first phase's
    guess of whether device code calls into a module (ProjectView.called_from_device_code),
    which the project then checks. Guessed no, a module called from another file's training
    loop was linted a second time. Each file's import lines are read once, for both."""
    imported: Set[str] = set()
    by_device_code: Set[str] = set()
    for path, text in sources.items():
        every, called = _imports_of(path, text, modules)
        imported |= every
        if any(word in text for word in _DEVICE_WORDS):
            by_device_code |= called
    return frozenset(imported), frozenset(by_device_code)


# The words of a text whose module may name a device (`Facts.names_device` reads its names;
# this reads the text, before it is parsed, and may say yes where that says no). Looked for as
# plain substrings, each spelling: a regular expression ignoring case took 0.28 s on fairseq's
# 1,020 files, these 0.04 s.
_DEVICE_WORDS = ("device", "cuda", "gpu", "Device", "CUDA", "GPU", "Cuda", "Gpu", "accelerator", "Accelerator",
                 "fabric", "Fabric", "FairseqTask", "LightningModule", "mps", "xpu", "MPS", "XPU")


def _imports_of(path: str, text: str, modules: Dict[str, Tuple[str, str]]) -> Tuple[Set[str], Set[str]]:
    """The names of the modules one file's import lines name (`imported_modules`), and those
    of them whose functions it may call: a module imported whole or one it imports a function
    of (a lower-case name, or everything), not one it takes only classes from."""
    every: Set[str] = set()
    called: Set[str] = set()
    if "import" not in text:
        return every, called
    name = modules.get(path, ("", ""))[1]
    package = name if os.path.basename(path) == "__init__.py" else name.rpartition(".")[0]
    for match in _import_statements(text):
        dots, base, names, plain = match.groups()
        if plain is not None:
            whole = {part.split()[0] for part in plain.split(",") if part.strip()}
            every |= whole
            called |= whole
            continue
        if dots:
            parts = package.split(".") if package else []
            base = ".".join([*parts[:len(parts) - (len(dots) - 1)], *([base] if base else [])])
        imports = [part.split()[0] for part in names.strip("()").replace("\n", " ").split(",") if part.strip()]
        inside = {f"{base}.{item}" for item in imports}
        every.add(base)
        every |= inside
        if any(item[:1].islower() or item == "*" for item in imports):
            called.add(base)
        called |= inside
    return every, called


def namespace_names(modules: Dict[str, Tuple[str, str]], imported: FrozenSet[str]) -> Dict[str, Tuple[str, str]]:
    """The other names the project's own imports (`imported`: `imported_modules`) give its
    modules through folders without an `__init__.py` (namespace packages), each with the
    (root, name) of the module it names: `from ldm.modules.diffusionmodules.util import f`,
    run from the folder above `ldm/`, names the module `diffusionmodules.util` rooted at
    `.../ldm/modules`. Every module of that root is then also `ldm.modules.<its name>`, and
    keeps its own name, which its relative imports and its neighbours' imports use; a root
    the imports reach through several folders (`ldm.modules`, `stable.ldm.modules`) answers
    to each."""
    by_name: Dict[str, List[str]] = {}
    for root, name in modules.values():
        by_name.setdefault(name, []).append(root)
    prefixes: Dict[str, Set[str]] = {}  # root -> the dotted folders that lead to it
    for dotted in imported:
        parts = dotted.split(".")
        for cut in range(1, len(parts)):
            for root in by_name.get(".".join(parts[cut:]), ()):
                if root.endswith(os.sep + os.path.join(*parts[:cut])):
                    prefixes.setdefault(root, set()).add(".".join(parts[:cut]))
    return {f"{prefix}.{name}": (root, name) for root, name in sorted(set(modules.values())) if root in prefixes
            for prefix in sorted(prefixes[root])}


def project_files(paths: Sequence[Path]) -> Dict[str, Tuple[str, str]]:
    """(root, module name) of each Python file among `paths` (notebooks are nobody's module)."""
    return {str(p): module_name(str(p)) for p in paths if p.suffix == ".py"}
