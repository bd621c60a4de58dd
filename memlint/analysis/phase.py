"""Phase: whether code trains or evaluates.

Asked as `facts.phase`:

- `is_training(node)`: a loop (usually) that backwards, steps an optimizer or clears its
  gradients, itself or through a helper (memlint.analysis.roles), or runs in a training
  function (`in_training_function`):
  inside `accelerator.accumulate`, Lightning's `training_step`, the `forward` of a module class,
  or a function whose result its caller backwards by convention (`TRAINING_FUNCTIONS`:
  `compute_loss`, `train_step`, ...);
- `backward_trains(call)`: an optimizer step can follow the backward (not a unit test looking
  at gradients, not a backward expected to fail in `pytest.raises`);
- `eval_evidence(loop)`: why a loop looks like evaluation or inference: "eval-mode" (after
  `model.eval()` in its function), "named" (in a function named like evaluate/validate/predict/
  infer/generate/sample, unless it hands samples back with their graph), "script" (a file with no
  backward and no step that loads weights or calls `.eval()`, the loop at module level, in a
  `main()` returning nothing, or, in a file run as `__main__` that no other module of the project
  imports, in any function that returns or yields nothing carrying a graph); else None;
- `trains`: the module backwards, steps or clears an optimizer, or fits a framework's trainer;
  `inference_signs`: it loads trained weights or puts a model in eval mode somewhere;
  `infers_without_grad_beside(func)`: another of its functions runs a model with grad off.

Asked by: MEM201 and MEM202 (`in_training_function`, `eval_evidence`), MEM203 (`is_training`,
`eval_evidence`, `trains`, `inference_signs`, `infers_without_grad_beside`), MEM401 and MEM404 (`backward_trains`).
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import List, Optional, Set

import libcst as cst

from memlint.analysis.often import EVAL_FUNCTION, STEP_FUNCTIONS
from memlint.analysis.receivers import Receivers
from memlint.analysis.project import ProjectView
from memlint.analysis.regions import Regions
from memlint.analysis.roles import Roles
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import TreeIndex, compares_name_to_main, dotted_name
from memlint.analysis.values import Values

# A framework's trainer, which backwards for the script that fits it
_FRAMEWORK_TRAINER = re.compile(r"^(pytorch_lightning|lightning|transformers|trl)(\.\w+)*\.\w*Trainer$")
_SAMPLING_FUNCTION = re.compile(r"(^|_)(generate|generation|sample|sampling)(_|$)", re.IGNORECASE)
# Functions whose result is, by convention, backwarded by their caller.
TRAINING_FUNCTIONS = STEP_FUNCTIONS | {"forward", "__call__"}


class Phase:
    """Training or evaluation, for the loops and functions of one module (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes, regions: Regions,
                 receivers: Receivers, roles: Roles, values: Values, project: ProjectView) -> None:
        self.names = names
        self.project = project
        self.tree = tree
        self.module = tree.module
        self.scopes = scopes
        self.regions = regions
        self.receivers = receivers
        self.roles = roles
        self.values = values

    def is_training(self, node: cst.CSTNode) -> bool:
        """Whether `node` (a loop, usually) trains: it backwards, steps an optimizer or clears its
        gradients, itself or through a helper, or runs inside Lightning's `training_step`,
        `accelerator.accumulate`, or a function whose result callers backward by convention
        (`compute_loss`, `forward`)."""
        if self.roles.backwards_in(node) or self.roles.steps_in(node) or self.roles.optimizer_resets_in(node):
            return True
        return self.in_training_function(node)

    def backward_trains(self, call: cst.Call) -> bool:
        """Whether the backward `call` is part of training: an optimizer step can follow it (in
        its function, helpers followed, or in a function calling it, up to 3 levels), and it is
        not expected to fail (`pytest.raises`). A unit test that backwards to look at gradients,
        or documents autocast's behaviour, does not train. A DeepSpeed engine's backward trains
        (the engine's own `step()` follows it)."""
        if self.regions.expects_error(call):
            return False
        if type(call.func) is cst.Attribute and self.roles.receivers.is_engine(call.func.value, call):
            return True
        pending = [(self.tree.scope_of(call), 0)]
        seen = set()
        while pending:
            scope, depth = pending.pop()
            if id(scope) in seen:
                continue
            seen.add(id(scope))
            if self.roles.steps_in(scope):
                return True
            if type(scope) is cst.FunctionDef and depth < 3:
                pending.extend((self.tree.scope_of(site), depth + 1) for site in self.scopes.call_sites(scope))
        return False

    def in_training_function(self, node: cst.CSTNode) -> bool:
        if self.regions.in_accumulate(node):
            return True
        func = self.tree.function_of(node)
        while func is not None:
            if func.name.value in TRAINING_FUNCTIONS or self.regions.is_lightning_training_step(func):
                return True
            klass = self.tree.class_of(func)
            if klass is not None and func.name.value == "forward" and klass.name.value in self.receivers.module_classes:
                return True
            func = self.tree.function_of(func)
        return False

    def _runs_with_grad(self, loop: cst.CSTNode, model: str) -> bool:
        """`loop` runs the model `model` names with grad on: a model made in place and put in its
        mode (`net = nn.DataParallel(model).to(device).eval()`) is evidence for the loop that runs
        it, and a teacher made so says nothing of the student's loop."""
        return any(dotted_name(call.func) == model and self.regions.grad_enabled(site) is not False
                   for call, site in self.roles.forwards_in(loop))

    def eval_evidence(self, loop: cst.CSTNode) -> Optional[str]:
        """Why `loop` looks like evaluation or inference rather than part of a training step:
        "eval-mode" (after `model.eval()` in the same function), "named" (in a function named
        like evaluate/validate/predict/infer/generate/sample), "script" (a file with no backward
        and no optimizer step, at module level, in a `main()` returning nothing, or in a file run
        as `__main__` that no other module imports, in a function handing back nothing with a
        graph: whatever it keeps, nothing can backward it); else None."""
        scope = self.tree.scope_of(loop)
        latest = self.roles.latest_modes(scope, self.tree.order(loop))
        modes = {m.mode for m in latest.values() if self.receivers.is_model(m.call.func.value)  # type: ignore[attr-defined]
                 or type(m.call.func.value) is cst.Call and self._runs_with_grad(loop, m.target)}  # type: ignore[attr-defined]
        if "train" in modes:
            return None  # the model was put in training mode for this loop
        if "eval" in modes:
            return "eval-mode"
        func = self.tree.function_of(loop)
        while func is not None:
            name = func.name.value
            if EVAL_FUNCTION.search(name) and not name.startswith("test_"):
                if _SAMPLING_FUNCTION.search(name) and any(
                        self.values.carries_grad(value, value) for value in self.scopes.returned(func)):
                    return None  # samples handed back with their graph: the caller may train on them
                return "named"
            func = self.tree.function_of(func)
        if not self.trains and self.inference_signs and (
                scope is self.module or (type(scope) is cst.FunctionDef and scope.name.value == "main"
                                         and not self.scopes.returned(scope))
                or (type(scope) is cst.FunctionDef and self._runs_as_script and
                    not any(self.values.carries_grad(value, value) for value in self.scopes.returned(scope))
                    and not self.project.imported_elsewhere())):
            return "script"
        return None

    @cached_property
    def trains(self) -> bool:
        """The module trains somewhere: it backwards, steps or clears an optimizer, or fits a
        framework's trainer."""
        return bool(self.roles.backwards or self.roles.optimizer_steps) or self._resets_optimizer or \
            self._framework_trains

    def infers_without_grad_beside(self, func: cst.FunctionDef) -> bool:
        """Another function of the module runs a model with grad off (`with _inference_mode():`
        in bark's `generate_fine`, a `@torch.no_grad()` method): how the module means its
        inference to run."""
        return any(not self.tree.contains(func, call) for call in self._forwards_without_grad)

    @cached_property
    def _forwards_without_grad(self) -> List[cst.Call]:
        regions, roles = self.regions, self.roles
        if not regions.turns_grad_off:
            return []
        return [call for call in self.scopes.calls if roles.is_forward(call) and regions.grad_enabled(call) is False]

    @cached_property
    def _runs_as_script(self) -> bool:
        """The module is a script: it has an `if __name__ == "__main__":` block."""
        for statement in self.module.body:
            if type(statement) is cst.If and compares_name_to_main(statement.test):
                return True
        return False

    @cached_property
    def _resets_optimizer(self) -> bool:
        """The module clears an optimizer's gradients somewhere: it trains, even where a helper
        object backwards and steps for it (`loss_scaler(loss, optimizer)`)."""
        return any(z.is_optimizer for z in self.roles.zero_grads)

    @cached_property
    def _framework_trains(self) -> bool:
        """The module trains through a framework that backwards for it: Ignite's
        `create_supervised_trainer`, or a Lightning or HF `Trainer` it fits or trains
        (`trainer.fit(...)`, `Trainer(...).train()`; not one built only to evaluate)."""
        trainers: Set[str] = set()
        for assign in self.scopes.assigns:
            if type(assign.value) is cst.Call and _FRAMEWORK_TRAINER.match(self.names.call_name(assign.value) or ""):
                trainers.update(dotted_name(t.target) or "" for t in assign.targets)
        for call in self.scopes.calls:
            qualified = self.names.call_name(call) or ""
            if qualified.startswith("ignite.") and qualified.endswith("create_supervised_trainer"):
                return True
            func = call.func
            if type(func) is cst.Attribute and func.attr.value in ("fit", "train") and (  # type: ignore[attr-defined]
                    dotted_name(func.value) in trainers or  # type: ignore[attr-defined]
                    _FRAMEWORK_TRAINER.match(self.names.call_name(func.value) or "")):  # type: ignore[attr-defined, arg-type]
                return True
        return False

    @cached_property
    def inference_signs(self) -> bool:
        """The file loads trained weights or puts a model in eval mode somewhere."""
        if any(m.mode == "eval" for m in self.roles.mode_calls):
            return True
        for call in self.scopes.calls:
            func = call.func
            if type(func) is cst.Attribute and func.attr.value in ("load_state_dict", "from_pretrained"):
                return True
            if self.names.call_name(call) in ("torch.load", "torch.hub.load", "torch.jit.load"):
                return True
        return False
