"""Static facts about one module, computed once and shared by every rule.

Rules ask `self.facts`; nothing here is computed until a rule asks for it, and nothing twice.
Each attribute is one fact object, built from the file's single tree index and the fact
objects it names as its dependencies:

    facts.names      torchnames.py  which torch API a name or call means, from the imports
    facts.tree       tree.py        every node in source order; where a node is (parent, scope,
                                    function, class, loops and statement around it)
    facts.scopes     scopes.py      names bound in each scope, what a call calls, the module's
                                    functions, classes, calls, assignments, with statements
    facts.regions    regions.py     no_grad / autocast / accumulate regions; grad mode at a node
    facts.calls      calls.py       the calls under a node, into the module's helpers too
    facts.receivers  receivers.py   which names are optimizers, models, losses
    facts.roles      roles.py       backward, optimizer step, zero_grad, forward, loss, eval()
    facts.values     values.py      which values carry an autograd graph, and where they go
    facts.phase      phase.py       whether a loop trains or evaluates
    facts.loop(...)  loops.py       names bound per iteration, invariance, escape (dataflow.py)
    facts.apicalls   apicalls.py    the calls that run an API (aliases, partials, wrappers too),
                                    and whether each passes a given argument
    facts.oom        oom.py         `except` handlers that catch out-of-memory, and what they re-run
    facts.outputs    outputs.py     how large a model's output is likely to be (a language model's
                                    logits), and what code takes from it
    facts.liveness   liveness.py    which reads can see the value one assignment binds
    facts.purity     purity.py      which torch expressions are pure, random, exact, placed on a device
    facts.distributions distributions.py  torch.distributions objects built from host parameters, and their draws
    facts.hoisting   hoisting.py    GPU work that computes the same value every iteration or call
    facts.steps      steps.py       how often code runs per training step (step, inner, boundary)
    facts.syncs      syncs.py       host-device syncs, which values are tensors, what loops repeat over
    facts.settled    settled.py     what a loop reads the same on every iteration
    facts.project    project.py     what the other modules of the project say about this one's
                                    functions and classes, and the names it imports from them
    facts.guards     guards.py      the conditions code runs under: the hardware's, or the user's choice
    facts.checkpoints checkpoints.py what each torch.save writes (from the CPU or not), what a torch.load reads
    facts.requirement requirement.py the oldest torch the module's own code needs (the newest API it uses)

`Facts` itself also answers what joins several of them (`per_step`, `uses_torch`, ...) and
what no one of them owns: `identifiers` (every name the module spells), `device_code` (whether
it puts tensors on an accelerator), `runs_on_the_cpu(forwards)`, `in_test(node)`.

Not per module: torchapi.py holds the public torch API as data shipped with memlint (which
names torch's modules have), and whether code checks for an API before using it; memo.py keeps
a fact's answer for each node it is asked of (`@per_node`).

Every question answers conservatively: when unsure (whether grad is enabled, whether a name is
a model), the answer is the one that makes rules not report.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cached_property
from typing import Dict, FrozenSet, List, Optional

import libcst as cst

from memlint.analysis.apicalls import ApiCalls
from memlint.analysis.calls import CallGraph
from memlint.analysis.checkpoints import Checkpoints
from memlint.analysis.dataflow import block_flow
from memlint.analysis.distributions import Distributions
from memlint.analysis.frameworks import is_torch_library
from memlint.analysis.guards import Guards
from memlint.analysis.hoisting import Hoisting
from memlint.analysis.liveness import Liveness
from memlint.analysis.loops import Loop, LoopFacts, ScopeUses
from memlint.analysis.often import INNER, STEP
from memlint.analysis.oom import OutOfMemory
from memlint.analysis.outputs import Outputs
from memlint.analysis.phase import Phase
from memlint.analysis.project import ProjectView
from memlint.analysis.purity import Purity
from memlint.analysis.receivers import Receivers
from memlint.analysis.regions import Regions
from memlint.analysis.requirement import Requirement
from memlint.analysis.roles import Roles
from memlint.analysis.scopes import Scopes
from memlint.analysis.settled import Settled
from memlint.analysis.steps import Steps
from memlint.analysis.syncs import Syncs
from memlint.analysis.testcode import in_test_code, is_benchmark_file, is_test_file
from memlint.analysis.torchnames import Reference, TorchNames, references
from memlint.analysis.tree import TreeIndex, dotted_name, index
from memlint.analysis.values import Values

# What a name shows of a module that runs on an accelerator (`Facts.device_code`): a word of it
# (`target_device`, `args.gpu`, `self._device`, `num_gpus`), or the whole of it (a framework's
# object that places tensors, a base class whose steps get the batch moved to the device)
_DEVICE_NAME_WORD = re.compile(r"(?:^|_)(?:cuda|devices?|accelerator|gpus?)(?:_|$)", re.IGNORECASE | re.MULTILINE)
_DEVICE_NAMES = frozenset({"fabric", "FairseqTask", "LegacyFairseqTask", "LightningModule"})
_DEVICE_STRING = re.compile(r"^[rRbBuU]*(['\"])(cuda|mps|xpu)(:\d+)?\1$")  # a device written as a string literal


class Facts:
    def __init__(self, module: cst.Module, tree: Optional[TreeIndex] = None,
                 project: Optional[ProjectView] = None, path: str = "") -> None:
        self.module = module
        self.project = project if project is not None else ProjectView()
        self.test_file = is_test_file(path)  # a test module: per-step costs there are not worth a change
        self.benchmark_file = is_benchmark_file(path)  # it trains to time steps, and keeps no weights
        if tree is not None:
            self.tree = tree  # the engine's index: `tree` below then never runs
        self._loops: Dict[int, LoopFacts] = {}
        self._scope_uses: Dict[int, ScopeUses] = {}
        self._references: Optional[Dict[str, List[Reference]]] = None

    @cached_property
    def tree(self) -> TreeIndex:
        """Every node in source order, with parents and subtrees' ends (one walk, shared); where a node is."""
        return index(self.module)

    @cached_property
    def names(self) -> TorchNames:
        """Import-aware names: `facts.names.call_name(call) == "torch.randn"`."""
        return TorchNames(self.module, self.tree, self.project.package)

    @cached_property
    def scopes(self) -> Scopes:
        """Names bound in each scope, what a call calls, the module's functions, classes and calls."""
        return Scopes(self.tree)

    @cached_property
    def regions(self) -> Regions:
        """Grad-mode, autocast and accumulate regions; grad mode at a node."""
        return Regions(self.names, self.tree, self.scopes, self.project)

    @cached_property
    def calls(self) -> CallGraph:
        """The calls under a node, into the module's helpers too."""
        return CallGraph(self.tree, self.scopes, self.regions)

    @cached_property
    def receivers(self) -> Receivers:
        """Which names are optimizers, models and losses."""
        return Receivers(self.names, self.tree, self.scopes, self.project, self.guards)

    @cached_property
    def roles(self) -> Roles:
        """Calls by role: backward, optimizer step, zero_grad, forward, loss, eval()/train()."""
        return Roles(self.names, self.tree, self.scopes, self.calls, self.receivers)

    @cached_property
    def values(self) -> Values:
        """Which values carry an autograd graph, and where they go."""
        return Values(self.names, self.tree, self.scopes, self.regions, self.calls, self.roles, self.project)

    @cached_property
    def phase(self) -> Phase:
        """Whether a loop trains or evaluates."""
        return Phase(self.names, self.tree, self.scopes, self.regions, self.receivers, self.roles, self.values,
                     self.project)

    @cached_property
    def apicalls(self) -> ApiCalls:
        """The calls that run an API, through aliases and wrappers, and whether they pass an argument."""
        return ApiCalls(self.names, self.tree, self.scopes)

    @cached_property
    def oom(self) -> OutOfMemory:
        """`except` handlers that catch out-of-memory errors, and the calls in them that re-run the work."""
        return OutOfMemory(self.names, self.tree, self.scopes, self.calls, self.roles)

    @cached_property
    def outputs(self) -> Outputs:
        """How large a model's output is likely to be, and what the code takes from it."""
        return Outputs(self.names, self.tree, self.receivers, self.guards, self.identifiers)

    @cached_property
    def liveness(self) -> Liveness:
        """Which reads can see the value one assignment binds."""
        return Liveness(self.tree, self.scopes)

    @cached_property
    def purity(self) -> Purity:
        """Which torch expressions are pure, random, exact, placed on a device; their inputs."""
        return Purity(self.names)

    @cached_property
    def distributions(self) -> Distributions:
        """`torch.distributions` objects built from host parameters, and the draws from them."""
        return Distributions(self.names, self.tree, self.scopes, self.purity)

    @cached_property
    def hoisting(self) -> Hoisting:
        """GPU work that computes the same value every iteration (or every call of `forward`)."""
        return Hoisting(self.names, self.tree, self.scopes, self.calls, self.receivers, self.purity,
                        lambda loop: self.loop(loop, self.tree.scope_of(loop)))

    @cached_property
    def steps(self) -> Steps:
        """How often code runs per training step: once, more than once, between steps."""
        return Steps(self.names, self.tree, self.scopes, self.calls, self.receivers, self.roles, self.project)

    @cached_property
    def syncs(self) -> Syncs:
        """Host-device syncs, tensor values, and what a loop repeats over."""
        return Syncs(self.names, self.tree, self.scopes, self.regions, self.roles, self.purity,
                     self.values.returned_on_device)

    @cached_property
    def settled(self) -> Settled:
        """What a loop reads the same on every iteration."""
        return Settled(self.names, self.tree, self.scopes)

    @cached_property
    def guards(self) -> Guards:
        """The conditions code runs under, and whether they are the user's choice."""
        return Guards(self.names, self.tree, self.scopes, self.project)

    @cached_property
    def checkpoints(self) -> Checkpoints:
        """What each `torch.save` writes (from the CPU or not), what each `torch.load` reads."""
        return Checkpoints(self.names, self.tree, self.scopes, self.receivers, self.apicalls)

    def loop(self, loop: Loop, scope: cst.CSTNode) -> LoopFacts:
        """Facts of `loop`, which runs in `scope` (its function, or the module)."""
        facts = self._loops.get(id(loop))
        if facts is None:
            facts = LoopFacts(loop, self.scope_uses(scope), self.names, self._resolve)
            self._loops[id(loop)] = facts
        return facts

    def _resolve(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        return self.scopes.resolve(call)

    def scope_uses(self, scope: cst.CSTNode) -> ScopeUses:
        """How the names of a function (or the module) are read, closures included."""
        uses = self._scope_uses.get(id(scope))
        if uses is None:
            body = scope.body if type(scope) in (cst.FunctionDef, cst.Module) else scope
            flow = block_flow(body)
            loads = [u for u in flow.uses if not u.store]
            uses = ScopeUses(
                loads=Counter(u.name for u in loads),
                alias_loads=Counter(u.name for u in loads if not u.scalar),
                declared_global=frozenset(
                    name for sink in flow.sinks if sink.kind == "global" for name in sink.sources
                ),
            )
            self._scope_uses[id(scope)] = uses
        return uses

    def references(self, qualified: str) -> List[Reference]:
        """Every place the module names the imported API `qualified` (e.g. `torch.cuda.amp.autocast`)."""
        return self._all_references().get(qualified, [])

    def _all_references(self) -> Dict[str, List[Reference]]:
        if self._references is None:
            self._references = references(self.tree, self.names)
        return self._references

    @cached_property
    def requirement(self) -> Requirement:
        """The oldest torch the module's own code needs, from the newest API it uses."""
        return Requirement(self.tree, self._all_references, lambda: self.identifiers)

    def references_through(self, local: str) -> List[Reference]:
        """Every use of the imported name `local` (`amp` in `amp.autocast()`), whatever it resolves to."""
        if self._references is None:
            self._references = references(self.tree, self.names)
        return [ref for refs in self._references.values() for ref in refs
                if (dotted_name(ref.node) or "").split(".")[0] == local]

    def release(self) -> None:
        """Forget every fact. They refer to each other (`hoisting` asks `loop`, a loop's facts
        resolve calls through `scopes`), so they form reference cycles holding the tree; the
        engine releases them when a file is done, and the tree goes with its last reference."""
        self.__dict__.clear()

    @cached_property
    def uses_torch(self) -> bool:
        """The module is PyTorch code: it imports torch or a library built on it, itself or
        through a module of the project that does (memlint.analysis.project). Nothing is
        reported elsewhere: a `model` or an `.append` in plain Python, TensorFlow or JAX code
        is none of memlint's business."""
        imported = self.names.absolute_imports().values()
        if any(is_torch_library(full) for full in imported):
            return True
        project = self.project
        return any(project.uses_torch(full) for full in imported if project.knows(full))

    def per_step(self, node: cst.CSTNode, inner: bool = False) -> Optional[str]:
        """How often `node` runs when it is every step (STEP) or more (INNER; with `inner`, only
        that), in code worth changing for a per-step cost: None in tests (test functions and
        classes), in setup and demos, between steps (memlint.analysis.steps), and in code that
        never runs as written (memlint.analysis.guards: `dead`)."""
        often = self.steps.how_often(node)
        if often != INNER and (inner or often != STEP):
            return None
        if in_test_code(self.tree, node):
            return None  # (test modules are left alone by the engine: memlint.rule.Rule.IN_TESTS)
        if self.guards.dead(node):
            return None  # `if debug and ...:` after `debug = False`: it never runs
        return often

    def read_only_periodically(self, assign: cst.Assign) -> Optional[cst.CSTNode]:
        """The condition on a step counter, or the test of an empty cache (memlint.analysis.steps:
        `periodic_guard`), under which every read of the names `assign` binds runs (`loss, acc =
        evaluate(...)` read only in `if epoch % 10 == 0:`), one and the same for every read, a
        condition that `assign` itself does not run under; None when a read may run on every step
        (or after the step, or never: an unread value is another matter)."""
        targets: List[cst.Name] = []
        for target in (t.target for t in assign.targets):
            elements = [e.value for e in target.elements] if type(target) in (cst.Tuple, cst.List) else [target]
            if not all(type(e) is cst.Name for e in elements):
                return None
            targets.extend(elements)  # type: ignore[arg-type]
        tree = self.tree
        loops = tree.loops_around(assign)
        step = loops[0].body if loops else tree.scope_of(assign)  # type: ignore[attr-defined]
        guard = None
        for target in targets:
            reads = self.liveness.reads_of(target, step, tree.span(step)[1])
            if reads is None:
                return None
            for read in reads:
                found = self.steps.periodic_guard(read)
                if found is None or tree.contains(found, assign) or guard is not None and found is not guard:
                    return None  # (read under another condition too: no one place to move the call to)
                guard = found
        return guard

    def in_test(self, node: cst.CSTNode) -> bool:
        """Whether `node` runs in a test: a function named `test...` or a method of a class
        named `Test...` (pytest's and unittest's conventions)."""
        tree = self.tree
        func = tree.function_of(node)
        while func is not None:
            klass = tree.class_of(func)
            if func.name.value.startswith("test") or (klass is not None and klass.name.value.startswith("Test")):
                return True
            func = tree.function_of(func)
        return False

    def in_model_code(self, node: cst.CSTNode) -> bool:
        """Whether `node` runs in a method of a model class (or a function nested in one): its
        caller decides the grad mode, and a loop there is part of the model's computation (over
        its layers), not a step of its own."""
        tree = self.tree
        func = tree.function_of(node)
        while func is not None:
            klass = tree.class_of(func)
            if klass is not None and self.receivers.is_model_class(klass):
                return True
            func = tree.function_of(func)
        return False

    @cached_property
    def identifiers(self) -> FrozenSet[str]:
        """Every name spelled anywhere in the module (attribute names too): a new name must avoid them."""
        return frozenset(n.value for n in self.tree.nodes if type(n) is cst.Name)

    @cached_property
    def device_code(self) -> bool:
        """The module puts tensors on an accelerator (a `.item()` on the CPU waits for nothing, a
        list of CPU tensors costs no GPU memory): its own code names one (`names_device`), or a
        module of the project that does calls into it (a trainer's helpers in another file).
        The project is asked last: most modules that need the answer name a device themselves."""
        return self.names_device or self.project.called_from_device_code()

    def runs_on_the_cpu(self, forwards: List[cst.Call]) -> bool:
        """Every model these forwards run was quantized dynamically (its layers run on the CPU
        only), or loaded on the CPU and stayed there (`receivers.loaded_on_the_cpu`) in a module
        that is no device code: what they keep is host memory."""
        receivers = self.receivers
        if forwards and all(receivers.quantized_dynamically(call.func) for call in forwards):
            return True
        return not self.device_code and all(receivers.loaded_on_the_cpu(call.func) for call in forwards)

    @cached_property
    def names_device(self) -> bool:
        """The module's own code names a device: a name of its code speaks of a device (`device`,
        `cuda`, `args.gpu`, `target_device`, `to_device`), is a framework's object that places
        tensors (`fabric`) or the base of a framework's class whose steps run with the batch moved
        to the device (fairseq's tasks, Lightning's modules); or it writes a device as a string
        (`tokens.to("cuda")`). A word in a docstring or a message is not one."""
        names = self.identifiers  # read as one text, a name a line: one scan, not one per name
        return bool(_DEVICE_NAMES & names) or bool(_DEVICE_NAME_WORD.search("\n".join(names))) or any(
            _DEVICE_STRING.match(node.value)  # type: ignore[attr-defined]
            for node in [n for n in self.tree.nodes if type(n) is cst.SimpleString])
