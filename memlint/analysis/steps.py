"""Steps: how often a piece of code runs, measured in training or inference steps.

A *step loop* is a loop that does a step's work itself, once per iteration: it runs a forward,
computes a loss, backwards or steps an optimizer (directly, or in a helper of this module that
has no loop of its own, one decorated to run without grad included: a sampler's
`@torch.no_grad()` step runs the model), or it iterates over a data loader. Relative to step loops, a node runs

- `STEP`: once per step: in the body of a step loop; in a function that runs per step (a
  module's `forward`, Lightning's `training_step` and the other step hooks, a process function
  handed to Ignite's `Engine`, a SimulEval agent's `policy` and other per-action hooks, a
  function called from a step, in this module or, through the
  project, in another: memlint.analysis.project; Lightning's batch hooks: `on_train_batch_end`
  ...); in the loop of a generator that a step loop iterates (it runs in step with it); in
  the body of a tiled or multi-view sampler's loop over its schedule (`for t in timesteps:`
  around a loop over views that runs the UNet), one denoising step an iteration;
- `INNER`: more than once per step: in a loop (or comprehension) that does no step work of its
  own inside a step, or inside a function that runs per step; in a loop inside a sampler's
  denoising step (a view's forward, the step's work split); in the loop of micro-batches of
  gradient accumulation (it backwards; the loop around it steps the optimizer, or, in a
  function that runs once per step, its caller does); in a loop that computes a loss but runs
  no model, neither backwards nor steps, in a function that is a step by its name (a
  `forward` scoring each codebook);
- `BOUNDARY`: between steps: in a loop whose body holds a step loop (an epoch loop, a loop over
  runs or evaluation phases), also through the helpers it calls, whatever else it runs (not a
  helper that clears the gradients and then backwards micro-batch after micro-batch without
  stepping: a call of it is one step, so the loop calling it is a step loop); under
  a condition on an iteration counter (`if step % 100 == 0:`, `if i == 0:`), or past a test
  that leaves the function or the iteration unless one holds (`if step % every != 0: return`), in the body
  of a test that fills an empty cache (`if self.mask is None: self.mask = ...`), or under a
  count its body raises towards a bound (`if shown < 3: shown += 1`: a few times in all); outside the
  loops of a function that holds a step loop of its own (a beam search's setup before its
  decoding loop, a `train_epoch`'s before its batches); in Lightning's
  epoch, fit and phase hooks (`on_train_epoch_end`, `on_validation_start`);

and `how_often` answers None when none of this can be told (code outside any loop that is not
called from one). `site(node)` is how often a node runs within a call of its function, the
part of the answer a module's summary carries (memlint.analysis.summary), read the same way
across modules (memlint.analysis.often). Asked as `facts.steps`, and through `Facts.per_step`
by the per-step rules (MEM102, MEM103, MEM105, MEM501).
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Callable, Dict, FrozenSet, List, Optional, Set, Tuple, Union

import libcst as cst

from memlint.analysis.calls import CallGraph
from memlint.analysis.dataflow import conjuncts, target_names
from memlint.analysis.frameworks import SIMULEVAL_ACTION_HOOKS, is_simuleval_agent
from memlint.analysis.often import (BOUNDARY, CALLER, INNER, REPEATED, STEP, at_site, carried_between_tokens, combine,
                                   intrinsic_often)
from memlint.analysis.layers import Layers
from memlint.analysis.project import ProjectView
from memlint.analysis.receivers import Receivers
from memlint.analysis.roles import Roles
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import NEW_SCOPES, TreeIndex, dotted_name, last_part, walk

# What a data loader is named like: a loop over one runs a step per batch
LOADER_NAME = re.compile(r"(loader|dataloader|batches|data_iter|batch_iter)$", re.IGNORECASE)
_COMPREHENSIONS = frozenset({cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp})
_ENGINE = re.compile(r"^ignite\.engine(\.engine)?\.(Deterministic)?Engine$")
_BOUNDS = frozenset({cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.ClassDef})
# Names of iteration counters (`i`, `step`, `global_step`, `batch_idx`, `ni`, `epoch`).
_COUNTER = re.compile(r"^(i|j|k|n|ni|it|idx|iters?|iteration|steps?|epochs?|batch_?i(dx)?|\w*_(step|steps|iter|"
                      r"iters|iteration|idx|epoch|count|counter))$|^(step|iter|iteration|epoch)_?\w*$", re.IGNORECASE)
_FEW_STEPS = 10  # a remainder test on fewer steps than this is a choice (`step % 2`), not a slip
# What a diffusion sampler's schedule is named: a loop over it runs one denoising step an iteration.
_SCHEDULE = re.compile(r"^(timesteps|sigmas)$")
# A method's name that speaks of one update of a learner (DomainBed's `update`, BasicSR's
# `optimize_parameters`, an agent's `learn`): one that backwards and steps once per call is a step.
_STEP_METHOD = re.compile(r"((^|_)(update|learn|optimi[sz]e|step|observe|iteration|forward_backward)|"
                          r"(?<=[a-z])(Update|Learn|Optimi[sz]e|Step|Observe|Iteration))(_|s?$|(?=[A-Z]))|"
                          r"(train|fit|process)_(one_|on_)?batch|(train|fit|process)(One|On)?Batch")
# A flag that the step ran out of memory, or a count of the allocator thrashing (`found_cuda_oom`,
# `num_consecutive_thrashes >= 2`): what runs under it recovers from a failure, not on every step.
_OOM_FLAG = re.compile(r"(^|_)oom(_|$)|out_of_memory|thrash", re.IGNORECASE)
# Calls a loop's iterable is wrapped in that leave its items (`enumerate(tqdm(loader))`).
_WRAPPERS = frozenset({"enumerate", "tqdm", "iter", "zip", "reversed", "progress_bar"})


class Steps:
    """How often the code of one module runs per step (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes, calls: CallGraph, receivers: Receivers,
                 roles: Roles, project: ProjectView) -> None:
        self.names = names
        self.tree = tree
        self.project = project
        self.scopes = scopes
        self.calls = calls
        self.receivers = receivers
        self.roles = roles
        self._work: Dict[int, bool] = {}
        self._holds: Dict[int, bool] = {}
        self._function_holds: Dict[int, bool] = {}
        self._one_step: Dict[int, bool] = {}  # id(function) -> a call of it is one step of micro-batches
        self._own_steps: Dict[int, bool] = {}  # id(function) -> it runs steps of its own (`_runs_its_own_steps`)
        self._globals: Dict[int, FrozenSet[str]] = {}  # id(function) -> `_module_names`
        self._yields: Dict[int, bool] = {}
        self._samplers: Dict[int, bool] = {}  # id(loop) -> a sampler's loop over its schedule (`_denoises`)
        self._functions: Dict[int, Optional[str]] = {}
        self._flags: Dict[int, bool] = {}  # id(Name tested) -> `_counting_flag`
        # id(block) -> (block, its statements' positions, those passed rarely) (`_rare_statements`)
        self._rare: Dict[int, Tuple[cst.CSTNode, Dict[int, int], List[Tuple[int, cst.CSTNode]]]] = {}
        self.layers = Layers(tree, scopes, receivers)

    # -- loops -------------------------------------------------------------------------------
    def does_step_work(self, loop: cst.CSTNode) -> bool:
        """The loop runs a forward, a loss, a backward or an optimizer step once per iteration,
        itself or in a helper without a loop of its own, or iterates over a data loader."""
        found = self._work.get(id(loop))
        if found is None:
            # a sampler's steps run the model in `@torch.no_grad()` helpers; an epoch loop that
            # also samples once after its own step loop stays an epoch loop
            self._work[id(loop)] = False  # (a loop reached again through the helpers it calls decides nothing)
            found = self.iterates_loader(loop) or self._runs_step_call(loop, through_no_grad=False) or (
                not self._step_loop_under(loop.body, loop)  # type: ignore[attr-defined]
                and self._runs_step_call(loop, through_no_grad=True)) or self._calls_one_step(loop)
            self._work[id(loop)] = found
        return found

    def _runs_step_call(self, loop: cst.CSTNode, through_no_grad: bool) -> bool:
        """`loop` makes a step call once per iteration, itself or in a helper without a loop."""
        return any(self._is_step_call(call) and self._owned(loop, call, site)
                   for call, site in self.calls.calls_in(loop, through_no_grad=through_no_grad))

    def _is_step_call(self, call: cst.Call) -> bool:
        roles = self.roles
        return roles.is_forward(call) or roles.is_loss(call) or roles.backward_of(call) is not None \
            or roles.step_of(call) is not None or roles.is_generate(call)

    def _owned(self, loop: cst.CSTNode, call: cst.Call, site: cst.Call) -> bool:
        if call is site:
            return self.tree.loops_around(call)[:1] == [loop]
        return not self.tree.loops_around(call) and self.tree.loops_around(site)[:1] == [loop]

    def _calls_one_step(self, loop: cst.CSTNode) -> bool:
        """`loop` calls, once per iteration, a function that runs one step of micro-batches
        (`_one_step_per_call`), itself or through a helper without a loop of its own."""
        return any(self._owned(loop, call, site) and self._one_step_per_call(self.scopes.resolve(call))
                   for call, site in self.calls.calls_in(loop))

    def _one_step_per_call(self, func: Optional[cst.FunctionDef]) -> bool:
        """`func` clears the gradients, then backwards micro-batch after micro-batch and steps no
        optimizer (guided-diffusion's `forward_backward`: `zero_grad()`, then a backward per
        slice of the batch): its loops accumulate one step's gradient, so a call of it is one
        step, and the loop that calls it is a step loop, not an epoch loop."""
        if func is None:
            return False
        found = self._one_step.get(id(func))
        if found is None:
            self._one_step[id(func)] = False  # a recursive call decides nothing
            roles = self.roles
            loops = [node for node in self.tree.scope_nodes(func.body, cst.For, cst.While) if self.does_step_work(node)]
            found = bool(loops) and all(
                roles.backwards_in(loop) and not roles.steps_in(loop) and not self._resets_in(loop) for loop in loops) \
                and any(roles.resets_grads(call) and not any(self.tree.contains(loop, call) for loop in loops)
                        for call, _ in self.calls.calls_in(func.body, follow=False))
            self._one_step[id(func)] = found
        return found

    def _resets_in(self, node: cst.CSTNode) -> bool:
        return any(self.roles.resets_grads(call) for call, _ in self.calls.calls_in(node))

    @staticmethod
    def iterates_loader(loop: cst.CSTNode) -> bool:
        """`for batch in loader`, `enumerate(tqdm(train_loader))`, `self.train_dataloader()`."""
        if not type(loop) is cst.For:
            return False
        iterable = _unwrapped(loop.iter)
        if type(iterable) is cst.Call and type(iterable.func) is cst.Attribute and \
                iterable.func.attr.value.endswith("dataloader"):
            return True  # self.train_dataloader()
        return bool(LOADER_NAME.search(last_part(dotted_name(iterable))))

    def holds_step_loop(self, loop: cst.CSTNode) -> bool:
        """A loop nested in `loop`, or in a function of this module it calls, is a step loop."""
        found = self._holds.get(id(loop))
        if found is None:
            self._holds[id(loop)] = False  # a loop inside itself decides nothing
            found = self._step_loop_under(loop.body, loop) or self.calls_step_loop(loop)  # type: ignore[attr-defined]
            self._holds[id(loop)] = found
        return found

    def calls_step_loop(self, loop: cst.CSTNode) -> bool:
        """A function of this module that `loop` calls holds a step loop (`for epoch in ...:
        train(epoch)`): whatever else its body does, `loop` runs between steps."""
        return any(self._function_holds_step_loop(func) for func in self.calls.functions_reached(loop))

    def _trains_itself(self, loop: cst.CSTNode) -> bool:
        """`loop` backwards or steps an optimizer in its own body: whatever loops the helpers it
        calls run (MAML's adaptation steps), its iterations are steps, not epochs."""
        return bool(self.roles.backwards_in(loop, follow=False) or self.roles.steps_in(loop, follow=False))

    def _function_holds_step_loop(self, func: cst.FunctionDef) -> bool:
        found = self._function_holds.get(id(func))
        if found is None:
            self._function_holds[id(func)] = False
            found = self._step_loop_under(func.body, None) and not self._one_step_per_call(func)
            self._function_holds[id(func)] = found
        return found

    def _step_loop_under(self, root: cst.CSTNode, besides: Optional[cst.CSTNode]) -> bool:
        return any(node is not besides and self.does_step_work(node) for node in self.tree.scope_nodes(root, cst.For, cst.While))

    # -- any node ----------------------------------------------------------------------------
    def how_often(self, node: cst.CSTNode) -> Optional[str]:
        """STEP, INNER, BOUNDARY or None (see the module docstring)."""
        site = self.site(node)
        if site in (CALLER, REPEATED):
            return at_site(site, self.function_how_often(self.tree.function_of(node)))
        return site

    def site(self, node: cst.CSTNode) -> str:
        """How often `node` runs within a call of its function (memlint.analysis.often): STEP,
        INNER or BOUNDARY when the loops around it tell, else CALLER or REPEATED."""
        loops = self.tree.loops_around(node)
        if self.periodic(node):
            return BOUNDARY
        repeated = self._in_comprehension(node, loops[0] if loops else None)
        if loops:
            innermost = loops[0]
            sampler = next((loop for loop in loops if self._denoises(loop)), None)
            if sampler is not None:  # a tiled or multi-view sampler: each view's forward is a piece of one step
                return STEP if sampler is innermost and not repeated else INNER
            if self.does_step_work(innermost):
                if self.calls_step_loop(innermost) and not self._trains_itself(innermost):
                    return BOUNDARY
                return INNER if repeated or self._micro_step(innermost, loops[1:]) or \
                    self._part_of_a_step(innermost, loops[1:]) else STEP
            if self.holds_step_loop(innermost):
                return BOUNDARY
            for outer in loops[1:]:
                if self.does_step_work(outer):
                    return INNER
                if self.holds_step_loop(outer):
                    return BOUNDARY
            repeated = repeated or not all(self._yields_in(loop) for loop in loops)
        elif not repeated and self._runs_its_own_steps(node):
            return BOUNDARY
        return REPEATED if repeated else CALLER

    def _denoises(self, loop: cst.CSTNode) -> bool:
        """`for i, t in enumerate(self.scheduler.timesteps):` around a loop over tiles or views
        that runs the model (diffusers' tiled and panorama samplers): each iteration is one
        denoising step, and the loop inside it runs the pieces of that step, though it does the
        step's work. Not a loop that trains (a backward under it), nor one that runs the model
        itself (a step loop already, whatever it nests), nor one around a loop over a data
        loader (an evaluation at each noise level: a pass over the data per level)."""
        found = self._samplers.get(id(loop))
        if found is None:
            found = type(loop) is cst.For and bool(_SCHEDULE.match(last_part(dotted_name(_unwrapped(loop.iter))))) \
                and not self.does_step_work(loop) and not self.roles.backwards_in(loop) and any(
                    type(inner) is cst.For and self.does_step_work(inner) and not self.iterates_loader(inner)
                    for inner in self.tree.walk_scope(loop.body))  # type: ignore[attr-defined]
            self._samplers[id(loop)] = found
        return found

    def _runs_its_own_steps(self, node: cst.CSTNode) -> bool:
        """`node` is outside any loop of a function that runs steps of its own and is not a step
        by its name (a beam search's `generate` before its decoding loop, a `train_epoch` before
        its batches): it runs once per run of those steps, not per step."""
        func = self.tree.function_of(node)
        if func is None:
            return False
        found = self._own_steps.get(id(func))
        if found is None:
            found = intrinsic_often(func.name.value, True) is None and any(
                self._own_step_loop(loop) for loop in self.tree.scope_nodes(func.body, cst.For, cst.While))
            self._own_steps[id(func)] = found
        return found

    def _own_step_loop(self, loop: cst.CSTNode) -> bool:
        """A loop whose iterations are whole steps: over a data loader, training itself (backward
        and optimizer step in its body), or decoding (a `range` or `while` loop that runs the
        model and backwards nothing). Not a loop over a batch's parts (`batch.chunk(4)`, `zip(outs,
        targets)`, a module list): those are pieces of one step, micro-batches included."""
        if self.iterates_loader(loop):
            return True
        roles = self.roles
        if roles.backwards_in(loop, follow=False):
            return bool(roles.steps_in(loop, follow=False))
        counted = type(loop) is cst.While or type(loop.iter) is cst.Call and \
            type(loop.iter.func) is cst.Name and loop.iter.func.value == "range"  # type: ignore[attr-defined]
        return counted and self.does_step_work(loop)

    def accumulates(self, node: cst.CSTNode) -> bool:
        """`node` runs once per micro-batch of gradient accumulation (see `_micro_step`)."""
        loops = self.tree.loops_around(node)
        return bool(loops) and self.does_step_work(loops[0]) and self._micro_step(loops[0], loops[1:])

    def _part_of_a_step(self, loop: cst.CSTNode, outer: List[cst.CSTNode]) -> bool:
        """`loop` computes a loss once per iteration, but runs no model, neither backwards nor
        steps, in a function that is one step by its very name (a module's `forward` scoring
        each codebook, a `compute_loss` over its heads): each iteration is a piece of the step.
        (A loop that runs the model, a refinement loop in a `forward`, stays a loop of steps:
        one wait per forward costs little beside it.)"""
        roles = self.roles
        if outer or roles.backwards_in(loop) or roles.steps_in(loop) or roles.forwards_in(loop):
            return False
        func = self.tree.function_of(loop)
        klass = self.tree.class_of(func) if func is not None else None
        return func is not None and intrinsic_often(
            func.name.value, klass is not None and klass.name.value in self.receivers.module_classes) == STEP

    def _micro_step(self, loop: cst.CSTNode, outer: List[cst.CSTNode]) -> bool:
        """`loop` runs forwards and backwards but steps no optimizer, and the loop around it
        does, or its function runs once per step (a fairseq task's `train_step` over language
        pairs: the trainer steps): gradient accumulation, several micro-batches per step."""
        roles = self.roles
        if roles.steps_in(loop) or not roles.backwards_in(loop):
            return False
        if not outer:  # the function runs once per step, and its caller steps the optimizer
            return self.function_how_often(self.tree.function_of(loop)) == STEP
        return any(not self.tree.contains(loop, site) for _, site in roles.steps_in(outer[0]))

    def _yields_in(self, loop: cst.CSTNode) -> bool:
        """A loop of a generator that yields once per iteration runs in step with the loop that
        consumes it: its body runs once per item the caller takes."""
        found = self._yields.get(id(loop))
        if found is None:
            found = bool(self.tree.scope_nodes(loop.body, cst.Yield))  # type: ignore[attr-defined]
            self._yields[id(loop)] = found
        return found

    def periodic(self, node: cst.CSTNode) -> bool:
        """`node` runs only on some iterations of its loop (or calls of its function): under a
        condition on a counter (`if step % 100 == 0:`, `if i == 0:`, `if batch_idx < 3:`) or in
        the fill of an empty cache (`if self.mask is None: self.mask = ...`), under a count the
        body raises towards a bound (`if shown < 3: shown += 1`), or after the step ran out of
        memory (`if found_cuda_oom == 1:`), not under a flag that holds on every step (`if
        args.log:`)."""
        return self.periodic_guard(node) is not None or self.past_rare_exit(node)

    def past_rare_exit(self, node: cst.CSTNode) -> bool:
        """`node` comes after a statement of its function or loop body that every other way
        leaves (a `return`, `continue`, `break` or `raise`) unless a counter's remainder is zero:
        `if step % args.sample_every != 0: return` at the top of a sampling helper. In a loop,
        only a test after the step's own work (a forward, a backward, an optimizer step) counts:
        `if i % world_size != rank: continue` before it shards the steps, a step limit
        (`if step >= max_steps: break`) holds on all steps but the last, and past a guard of
        gradient accumulation comes the optimizer step."""
        guards: List[cst.CSTNode] = []
        child = node
        for ancestor in self.tree.ancestors(node):
            kind = type(ancestor)
            if kind in _BOUNDS:
                if kind is cst.For or kind is cst.While:
                    return any(self._after_step_work(ancestor, guard) for guard in guards)
                return bool(guards)
            if kind is cst.IndentedBlock:
                positions, rare = self._rare_statements(ancestor)
                position = positions.get(id(child))
                if position is None:
                    position = next(i for i, statement in enumerate(ancestor.body) if statement is child)  # type: ignore[attr-defined]
                guards.extend(statement for at, statement in rare if at < position)
            child = ancestor
        return False

    def _rare_statements(self, block: cst.CSTNode) -> Tuple[Dict[int, int], List[Tuple[int, cst.CSTNode]]]:
        """A block's statements by position, and those passed rarely (`_passed_rarely`) with
        theirs: read once per block, where each node under it asked again of all the statements
        before it (every call of a long function body, for the summary's edges)."""
        found = self._rare.get(id(block))
        if found is None or found[0] is not block:
            statements = block.body  # type: ignore[attr-defined]
            found = (block, {id(statement): at for at, statement in enumerate(statements)},
                     [(at, statement) for at, statement in enumerate(statements) if _passed_rarely(statement)])
            self._rare[id(block)] = found
        return found[1], found[2]

    def _after_step_work(self, loop: cst.CSTNode, guard: cst.CSTNode) -> bool:
        """The loop runs a forward, a backward or an optimizer step before `guard`, and neither
        a backward nor an optimizer step after it: past `if (step + 1) % accum != 0: continue`
        comes the optimizer step, the step itself, not something done between steps."""
        roles, tree = self.roles, self.tree
        at = tree.order(guard)
        updates = [site for _, site in [*roles.backwards_in(loop), *roles.steps_in(loop)]]
        return not any(tree.order(site) > at for site in updates) and \
            any(tree.order(site) < at for site in [*updates, *(site for _, site in roles.forwards_in(loop))])

    def periodic_guard(self, node: cst.CSTNode) -> Optional[Union[cst.If, cst.IfExp]]:
        """The condition on a counter, or the cache test, that `node` runs under (`periodic`), or None."""
        child = node
        for ancestor in self.tree.ancestors(node):
            kind = type(ancestor)
            if kind in _BOUNDS:
                return None
            if (kind is cst.If or kind is cst.IfExp) and child is not ancestor.test and \
                    child is ancestor.body and (_counts(ancestor.test) or _fills_cache(ancestor, self.tree, self._module_names)
                                                or _bounded(ancestor) or _after_oom(ancestor.test)  # type: ignore[attr-defined]
                                                or self._counting_flag(ancestor.test)):  # type: ignore[attr-defined]
                return ancestor  # type: ignore[return-value]
            child = ancestor
        return None

    def _counting_flag(self, test: cst.BaseExpression) -> bool:
        """`if should_run_validation:`, a name every binding of which in effect there is a
        condition on a counter (`should_run_validation = args.do_validation and step %
        args.validation_steps == 0`, diffusers' training scripts)."""
        if type(test) is not cst.Name:
            return False
        found = self._flags.get(id(test))
        if found is None:
            binds = self.scopes.in_effect(test.value, test)  # type: ignore[attr-defined]
            found = self._flags[id(test)] = bool(binds) and all(
                bind.kind == "assign" and bind.whole and bind.value is not None and _counts(bind.value)
                for bind in binds)
        return found

    def _module_names(self, scope: cst.CSTNode) -> FrozenSet[str]:
        """The names a function declares `global`, which no function of the module empties again
        (`_PIPE = None` in a `free_pipe()`, or in a `finally:`; not one that ends the run, a
        `shutdown()`): what it binds outlives its call, filled once. (A `nonlocal` lives only as
        long as the call that made it.)"""
        if type(scope) is not cst.FunctionDef:
            return frozenset()
        found = self._globals.get(id(scope))
        if found is None:
            tree = self.tree
            declared = {name.name.value for node in tree.walk_scope(scope) if type(node) is cst.Global
                        for name in node.names}  # type: ignore[attr-defined]
            found = frozenset(declared - self._emptied_globals) if declared else frozenset()
            self._globals[id(scope)] = found
        return found

    @cached_property
    def _emptied_globals(self) -> FrozenSet[str]:
        """What a function of the module sets to None, other than one that ends the run."""
        tree = self.tree
        emptied: Set[str] = set()
        for assign in self.scopes.assigns:
            if type(assign.value) is cst.Name and assign.value.value == "None":  # type: ignore[attr-defined]
                function = tree.scope_of(assign)
                if type(function) is cst.FunctionDef and not _END_OF_RUN.search(function.name.value):
                    emptied.update(dotted_name(target.target) or "" for target in assign.targets)
        return frozenset(emptied)

    def _in_comprehension(self, node: cst.CSTNode, stop: Optional[cst.CSTNode]) -> bool:
        """`node` is evaluated per element of a comprehension (not in its first iterable)."""
        child = node
        for ancestor in self.tree.ancestors(node):
            kind = type(ancestor)
            if ancestor is stop or kind in NEW_SCOPES:
                return False
            if kind in _COMPREHENSIONS:
                first = ancestor.for_in
                if child is not first or not _in_first_iterable(first, node, self.tree):
                    return True
            child = ancestor
        return False

    def function_how_often(self, func: Optional[cst.FunctionDef]) -> Optional[str]:
        """How often a function's body runs: what its name says (memlint.analysis.often), else
        its call sites in this module and, through the project, in others."""
        if func is None:
            return None
        key = id(func)
        if key in self._functions:
            return self._functions[key]
        self._functions[key] = None  # a recursive call does not decide
        klass = self.tree.class_of(func)
        result = intrinsic_often(func.name.value, klass is not None and klass.name.value in self.receivers.module_classes)
        if result == STEP and func.name.value == "forward" and self.layers.is_layer(klass):  # type: ignore[arg-type]
            result = INNER  # a layer's forward: once per layer, on every step
        if result is None and func.name.value in self._engine_steps:
            result = STEP  # Ignite's Engine calls its process function once per batch
        if result is None and klass is not None and func.name.value in SIMULEVAL_ACTION_HOOKS and \
                is_simuleval_agent(klass, self.names.qualified_name):
            result = STEP  # SimulEval calls its agents' hooks on every read or write
        if result is None:
            result = combine([*(self._call_often(site) for site in self.scopes.call_sites(func)),
                              self._external(func, klass)])
        if result is None and klass is not None and self._steps_once(func):
            result = STEP
        self._functions[key] = result
        return result

    def _steps_once(self, func: cst.FunctionDef) -> bool:
        """The method `func` backwards and steps an optimizer once per call, in no loop of its
        own (DomainBed's `Algorithm.update(minibatches)`): it is one training step, whatever calls
        it, where its name says so (`_STEP_METHOD`) and no call of it in its module says how often
        it runs. (A module-level function that does so once is as often a demo run once, and a
        method called once from `main`, a probe of the batch size.)"""
        if not _STEP_METHOD.search(func.name.value) or self.scopes.call_sites(func):
            return False
        roles, tree = self.roles, self.tree
        steps = roles.steps_in(func, follow=False)
        backwards = roles.backwards_in(func, follow=False)
        return bool(steps) and bool(backwards) and not any(
            tree.loops_around(site) and tree.function_of(tree.loops_around(site)[-1]) is func
            for _, site in [*steps, *backwards])

    def layer_forward(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """The `forward` `node` runs in, outside any loop of it, when its class is a layer
        (memlint.analysis.layers): it runs once per layer on every step."""
        func = self.tree.function_of(node)
        if func is None or func.name.value != "forward" or self.tree.loops_around(node):
            return None
        klass = self.tree.class_of(func)
        return func if klass is not None and klass.name.value in self.receivers.module_classes and \
            self.layers.is_layer(klass) else None

    @cached_property
    def _engine_steps(self) -> FrozenSet[str]:
        """The functions this module hands to Ignite's `Engine` as its process function."""
        return frozenset(call.args[0].value.value for call in self.scopes.calls  # type: ignore[attr-defined]
                         if call.args and type(call.args[0].value) is cst.Name and call.args[0].keyword is None
                         and _ENGINE.match(self.names.call_name(call) or ""))

    def _call_often(self, call: cst.Call) -> Optional[str]:
        """How often a call runs its function's body; a generator iterated by a loop
        (`for x, y in self.batches():`) runs its body as often as that loop's body runs."""
        loop = self.tree.parent(call)
        if type(loop) is cst.For and loop.iter is call:  # type: ignore[attr-defined]
            return self.how_often(loop.body)  # type: ignore[attr-defined]
        return self.how_often(call)

    def _external(self, func: cst.FunctionDef, klass: Optional[cst.ClassDef]) -> Optional[str]:
        """How often callers in other modules of the project run `func` (a module-level
        function, or a method of a module-level class)."""
        if klass is not None:
            if self.tree.scope_of(klass) is not self.tree.module:
                return None
            return self.project.external_often(f"{klass.name.value}.{func.name.value}")
        if self.tree.scope_of(func) is not self.tree.module:
            return None
        return self.project.external_often(func.name.value)


def _unwrapped(iterable: cst.BaseExpression) -> cst.BaseExpression:
    """What a loop iterates inside the calls that wrap it (`_WRAPPERS`): `loader` for
    `enumerate(tqdm(loader))`, `timesteps` for `self.progress_bar(timesteps)`."""
    while type(iterable) is cst.Call and iterable.args and last_part(dotted_name(iterable.func)) in _WRAPPERS:  # type: ignore[attr-defined]
        iterable = iterable.args[0].value  # type: ignore[attr-defined]
    return iterable


def _counts(test: cst.BaseExpression, negated: bool = False) -> bool:
    """A condition on an iteration counter that holds on few iterations: a `%` tested for zero
    (`if step % 10 == 0:`, `if not step % 10:`), or a counter compared with a number so that
    it holds below or at it (`if i == 0:`, `if batch_idx < 3:`), or found equal to another
    counter (`if step == start_step:`: it takes that value once; not `if y[i] == target_idx:`),
    a counter offset by a number included (`(step + 1) == 1`). Not one that holds on most
    iterations: `if step % 50:` and `if step % 50 != 0:` skip one step in fifty, `if i > 0:`
    and `if i != 0:` skip the first. `negated`: under a `not`."""
    kind = type(test)
    if kind is cst.BooleanOperation:
        conjunction = (type(test.operator) is cst.And) != negated  # `not (a or b)` is `not a and not b`
        left, right = _counts(test.left, negated), _counts(test.right, negated)
        return left or right if conjunction else left and right
    if kind is cst.UnaryOperation and type(test.operator) is cst.Not:
        return _counts(test.expression, not negated)
    if kind is cst.BinaryOperation and type(test.operator) is cst.Modulo:
        return negated  # `if step % 10:` holds on nine steps of ten, `if not step % 10:` on one
    if kind is not cst.Comparison:
        return False
    parts = [test.left, *(c.comparator for c in test.comparisons)]
    few = _holds_on_few(test) != negated
    if any(type(p) is cst.BinaryOperation and type(p.operator) is cst.Modulo for p in parts):
        return few
    numbers = [p for p in parts if type(p) is cst.Integer]
    counters = [p for p in parts if _COUNTER.search(last_part(dotted_name(_offset_removed(p))))]
    if len(counters) == len(parts) == 2 and type(test.comparisons[0].operator) is cst.Equal:
        return not negated  # `if self.iteration_step == self.initial_iter_step:`: one value, one iteration
    return bool(numbers and counters) and few


def _offset_removed(expr: cst.BaseExpression) -> cst.BaseExpression:
    """The counter of a counter offset by a number: `step` of `(step + 1)`, `i - 1`."""
    if type(expr) is cst.BinaryOperation and type(expr.operator) in (cst.Add, cst.Subtract) and \
            type(expr.right) is cst.Integer:  # type: ignore[attr-defined]
        return expr.left  # type: ignore[attr-defined]
    return expr


_EXITS = (cst.Return, cst.Continue, cst.Break, cst.Raise)


def _passed_rarely(statement: cst.CSTNode) -> bool:
    """Every way past an `if` statement that does not leave is rare: through a branch whose
    test holds on few iterations (`_counts`: `if steps == 0:`), past a branch that leaves
    unless a counter's remainder is zero (`if steps % every != 0: return`, `_zero_remainder`),
    through an `elif` chain, or through an inner `if` of a branch that is passed rarely."""
    if type(statement) is not cst.If:
        return False
    test = statement.test  # type: ignore[attr-defined]
    if not (_leaves(statement.body) or _counts(test) or _block_passed_rarely(statement.body)):  # type: ignore[attr-defined]
        return False
    orelse = statement.orelse  # type: ignore[attr-defined]
    if orelse is None:
        return _zero_remainder(test, negated=True)
    if type(orelse) is cst.If:
        return _zero_remainder(test, negated=True) or _passed_rarely(orelse)
    return _leaves(orelse.body) or _zero_remainder(test, negated=True) or _block_passed_rarely(orelse.body)


def _zero_remainder(test: cst.BaseExpression, negated: bool = False) -> bool:
    """A test that holds only where a remainder is zero: `step % every == 0`, `not step % 10`,
    or, `negated`, the way past `step % every != 0` or `step % 10`. Not a remainder compared
    with anything else (`i % world_size != rank` shards the steps, each rank runs its share)."""
    kind = type(test)
    if kind is cst.BooleanOperation:
        conjunction = (type(test.operator) is cst.And) != negated  # type: ignore[attr-defined]
        left = _zero_remainder(test.left, negated)  # type: ignore[attr-defined]
        right = _zero_remainder(test.right, negated)  # type: ignore[attr-defined]
        return left or right if conjunction else left and right
    if kind is cst.UnaryOperation and type(test.operator) is cst.Not:  # type: ignore[attr-defined]
        return _zero_remainder(test.expression, not negated)  # type: ignore[attr-defined]
    if kind is cst.BinaryOperation and type(test.operator) is cst.Modulo:  # type: ignore[attr-defined]
        return negated  # `step % 10` holds where the remainder is not zero
    if kind is not cst.Comparison or len(test.comparisons) != 1:  # type: ignore[attr-defined]
        return False
    comparison = test.comparisons[0]  # type: ignore[attr-defined]
    sides = (test.left, comparison.comparator)  # type: ignore[attr-defined]
    if not any(type(side) is cst.BinaryOperation and type(side.operator) is cst.Modulo for side in sides) or \
            not any(type(side) is cst.Integer and int(side.value, 0) == 0 for side in sides):  # type: ignore[attr-defined]
        return False
    operator = type(comparison.operator)
    return operator is cst.Equal and not negated or operator is cst.NotEqual and negated


def _block_passed_rarely(block: cst.BaseSuite) -> bool:
    return type(block) is cst.IndentedBlock and any(_passed_rarely(statement) for statement in block.body)


def _leaves(block: cst.BaseSuite) -> bool:
    """A branch whose last statement returns, continues, breaks or raises."""
    if type(block) is cst.SimpleStatementSuite:
        return type(block.body[-1]) in _EXITS  # type: ignore[attr-defined]
    last = block.body[-1] if block.body else None  # type: ignore[attr-defined]
    return type(last) is cst.SimpleStatementLine and type(last.body[-1]) in _EXITS  # type: ignore[union-attr]


def skips_one_in_n(test: cst.BaseExpression) -> bool:
    """`if step % 50:` or `if (step + 1) % 50 != 0:`: a test on a counter's remainder that
    holds on every step but one in N, the periodic `== 0` turned over (a slip where it guards a
    log). N is a name (`args.log_every`) or at least 10: `step % 2` holds on every other step."""
    if type(test) is cst.Comparison:
        if len(test.comparisons) != 1 or type(test.comparisons[0].operator) is not cst.NotEqual or \
                type(test.comparisons[0].comparator) is not cst.Integer or test.comparisons[0].comparator.value != "0":
            return False
        test = test.left
    if type(test) is not cst.BinaryOperation or type(test.operator) is not cst.Modulo:
        return False
    counter, every = test.left, test.right  # type: ignore[attr-defined]
    if type(counter) is cst.BinaryOperation and type(counter.operator) in (cst.Add, cst.Subtract):
        if type(counter.right) is cst.Integer:  # `(step + 1) % 50`
            counter = counter.left  # type: ignore[attr-defined]
        elif type(counter.left) is cst.Integer:  # `(1 + step) % 50`
            counter = counter.right  # type: ignore[attr-defined]
    if type(every) is cst.Integer and int(every.value, 0) < _FEW_STEPS:  # type: ignore[attr-defined]
        return False
    return bool(_COUNTER.search(last_part(dotted_name(counter))))


def _holds_on_few(test: cst.Comparison) -> bool:
    """Whether a comparison of a counter (or a counter's `%`) with a number holds on few of its
    values: `==`, `<`, `<=` with the counter on the left (mirrored on the right), against `!=`,
    `>` and `>=`, which hold on all but a few. A chain (`0 < i < 3`) is taken as few."""
    if len(test.comparisons) != 1:
        return True
    operator = type(test.comparisons[0].operator)
    if operator is cst.NotEqual or operator is cst.IsNot:
        return False
    if operator in (cst.GreaterThan, cst.GreaterThanEqual):
        return type(test.left) is cst.Integer  # `3 > i` is `i < 3`
    if operator in (cst.LessThan, cst.LessThanEqual):
        return type(test.left) is not cst.Integer
    return True


def _after_oom(test: cst.BaseExpression) -> bool:
    """`if found_cuda_oom == 1:`, `if oom:`: a test that holds when the step ran out of memory
    (composer's automatic micro-batching shrinks the batch and empties the cache under it). Not
    `if not oom:`, the step's own path."""
    kind = type(test)
    if kind is cst.BooleanOperation:
        left, right = _after_oom(test.left), _after_oom(test.right)  # type: ignore[attr-defined]
        return left or right if type(test.operator) is cst.And else left and right  # type: ignore[attr-defined]
    if kind is cst.Comparison and len(test.comparisons) == 1:  # type: ignore[attr-defined]
        operator, bound = test.comparisons[0].operator, test.comparisons[0].comparator  # type: ignore[attr-defined]
        holds = type(operator) in (cst.GreaterThan, cst.GreaterThanEqual) or type(operator) in (cst.Equal, cst.Is) and (
            type(bound) is cst.Integer and bound.value != "0" or type(bound) is cst.Name and bound.value == "True")  # type: ignore[attr-defined]
        return holds and _after_oom(test.left)  # type: ignore[attr-defined]
    return kind in (cst.Name, cst.Attribute) and bool(_OOM_FLAG.search(last_part(dotted_name(test) or "")))


def _bounded(branch: cst.CSTNode) -> bool:
    """`if shown < 3: shown += 1; print(...)`: the test holds a name under a number, and the body
    counts it up, so the body runs that many times in all, however often the test is met."""
    if type(branch) is not cst.If:
        return False
    limited = set()
    for part in conjuncts(branch.test):  # type: ignore[attr-defined]
        if type(part) is cst.Comparison and len(part.comparisons) == 1 and type(part.left) is cst.Name and \
                type(part.comparisons[0].operator) in (cst.LessThan, cst.LessThanEqual) and \
                type(part.comparisons[0].comparator) is cst.Integer:
            limited.add(part.left.value)
    body = branch.body.body if type(branch.body) is cst.IndentedBlock else ()  # type: ignore[attr-defined]
    return any(type(small) is cst.AugAssign and type(small.operator) is cst.AddAssign and
               type(small.target) is cst.Name and small.target.value in limited  # type: ignore[attr-defined]
               for line in body if type(line) is cst.SimpleStatementLine for small in line.body)  # type: ignore[attr-defined]


def _fills_cache(branch: cst.CSTNode, tree: TreeIndex, module_names: Callable[[cst.CSTNode], FrozenSet[str]]) -> bool:
    """`if self.mask is None or self.mask.size(0) != t: self.mask = make(t)`: the body fills an
    attribute the test finds empty or stale, a cache, so it runs when the cache is empty or
    stale, not on every call. Every part of the test is about the cache (`or self.training`
    would hold on every training step), and the function does not empty it again on the path
    of the fill (`self.mask = None` after its use: then the fill runs on every call)."""
    if type(branch) is not cst.If:
        return False
    alternatives = _alternatives(branch.test)  # type: ignore[attr-defined]
    shared = module_names(tree.scope_of(branch)) | carried_between_tokens(tree.scope_of(branch)) if any(
        type(part) is cst.Comparison and type(part.left) is cst.Name for part in alternatives) else frozenset()  # type: ignore[attr-defined]
    parts = [(part, _tested_for_none(part, shared)) for part in alternatives]
    tested = {name for _, name in parts if name is not None}
    if not tested or not all(name is not None or _reads(part, tested) for part, name in parts):
        return False
    filled = {name for node in tree.scope_nodes(branch.body, cst.Assign)
              for target in node.targets for name in (dotted_name(target.target), *target_names(target.target))} & tested  # type: ignore[attr-defined]
    return bool(filled) and not any(
        type(node) is cst.Assign and type(node.value) is cst.Name and node.value.value == "None"  # type: ignore[attr-defined]
        and any(dotted_name(target.target) in filled for target in node.targets)  # type: ignore[attr-defined]
        and tree.contains(tree.parent(tree.parent(node)), branch)  # on every path the fill is on
        for node in tree.walk_scope(tree.scope_of(branch)))


def _alternatives(test: cst.BaseExpression) -> List[cst.BaseExpression]:
    """The parts of `a or b or c`."""
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.Or:
        return _alternatives(test.left) + _alternatives(test.right)
    return [test]


def _tested_for_none(test: cst.BaseExpression, shared: FrozenSet[str]) -> Optional[str]:
    """The attribute, or the name of the module (`shared`), that `test` finds empty:
    `self.mask is None` -> "self.mask"; `_ENGINE is None` under `global _ENGINE`, a singleton
    made on first use; a generation hook's argument that generation hands back on the next
    token (`carried_between_tokens`). A local name tested so is an argument's default, filled
    on every call."""
    if type(test) is cst.Comparison and len(test.comparisons) == 1 and \
            type(test.comparisons[0].operator) is cst.Is and \
            type(test.comparisons[0].comparator) is cst.Name and test.comparisons[0].comparator.value == "None":
        name = dotted_name(test.left)
        if name is not None and ("." in name or name in shared):
            return name
    return None


# functions that run as a run ends: emptying a singleton there does not make it again
_END_OF_RUN = re.compile(r"shutdown|teardown|close|cleanup|clean_up|destroy|finali[sz]e|__del__|__exit__")


def _reads(test: cst.BaseExpression, attributes: Set[str]) -> bool:
    """`test` reads one of `attributes` (`self.mask.size(0) != t`: whether the cache is stale)."""
    return any(type(node) is cst.Attribute and dotted_name(node) in attributes for node in walk(test))


def _in_first_iterable(first: cst.CompFor, node: cst.CSTNode, tree: TreeIndex) -> bool:
    return tree.contains(first.iter, node)
