"""How often code runs per step: the words, and the three rules that combine them.

The one reading of "how often" that memlint.analysis.steps makes inside a module and
memlint.analysis.project makes across modules, so that the two cannot disagree:

- `STEP`: once per step; `INNER`: more than once per step; `BOUNDARY`: between steps; None:
  cannot be told (one-off code);
- a call's place in its function (`site`): inside a loop that decides it (STEP, INNER,
  BOUNDARY), or `CALLER` (as often as its function), or `REPEATED` (more than once per call of
  its function: in a loop or comprehension that does no step work of its own);
- `intrinsic_often(name, in_module_class)`: what a function's name says on its own (the
  `forward` of a module, Lightning's step and epoch hooks, the step functions trainers call,
  Transformers' per-token `prepare_inputs_for_generation`);
- `carried_between_tokens(function)`: the arguments such a per-token hook gets back on the
  next token, so that what fills one when it is empty runs on the first token only;
- `at_site(site, caller)`: how often a call runs, from its place and its function's frequency;
- `combine(frequencies)`: a function called from several places runs as often as its most
  frequent caller (INNER over STEP over BOUNDARY).
"""

from __future__ import annotations

import re
from typing import FrozenSet, Iterable, Optional

import libcst as cst

STEP, INNER, BOUNDARY = "step", "inner", "boundary"
CALLER, REPEATED = "caller", "repeated"

LIGHTNING_STEP_HOOKS = frozenset({"training_step", "validation_step", "test_step", "predict_step"})
_STEP_HOOK = re.compile(r"^on_\w*batch_(start|end)$|^on_(before|after)_(backward|optimizer_step|zero_grad)$")
_EPOCH_HOOK = re.compile(r"^on_\w*(epoch|fit|train|validation|test|predict)_(start|end)$")
# Functions a trainer calls once per step by convention (their caller backwards the result).
STEP_FUNCTIONS = frozenset({"training_step", "train_step", "compute_loss", "loss", "get_loss", "compute_losses"})
# A function named for evaluation or inference (`evaluate`, `eval_step`, `predict_batch`, `generate`)
EVAL_FUNCTION = re.compile(
    r"(^|_)(eval|evaluate|evaluation|valid|validate|validation|val|test|predict|prediction|infer|"
    r"inference|generate|generation|sample|sampling)(_|$)", re.IGNORECASE)
# Hooks a generation loop calls once per generated token (Transformers' `generate`).
_TOKEN_HOOKS = frozenset({"prepare_inputs_for_generation"})


def intrinsic_often(name: str, in_module_class: bool) -> Optional[str]:
    """STEP for the `forward` of a module class, Lightning's step and batch hooks, the
    conventional step functions and Transformers' per-token `prepare_inputs_for_generation`;
    BOUNDARY for epoch, fit and phase hooks; else None."""
    if _EPOCH_HOOK.match(name):
        return BOUNDARY
    if name in LIGHTNING_STEP_HOOKS or _STEP_HOOK.match(name) or name in STEP_FUNCTIONS or name in _TOKEN_HOOKS:
        return STEP
    if name == "forward" and in_module_class:
        return STEP
    return None


def carried_between_tokens(function: object) -> FrozenSet[str]:
    """The parameters of a per-token generation hook (`prepare_inputs_for_generation`), which
    `generate` hands back on the next token with what the hook returned: one the hook fills when
    it finds it empty (`if delay_pattern_mask is None:`) is filled on the first token only."""
    if type(function) is not cst.FunctionDef or function.name.value not in _TOKEN_HOOKS:
        return frozenset()
    params = function.params
    return frozenset(p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params))


def at_site(site: str, caller: Optional[str]) -> Optional[str]:
    """How often a call runs, given its place in its function and how often that function runs."""
    if site == CALLER:
        return caller
    if site == REPEATED:
        return INNER if caller in (STEP, INNER) else caller
    return site


def combine(frequencies: Iterable[Optional[str]]) -> Optional[str]:
    """How often code runs that runs at each of these frequencies: its most frequent one."""
    found = set(frequencies)
    for often in (INNER, STEP, BOUNDARY):
        if often in found:
            return often
    return None


# A method or function whose name speaks of training (DeepSpeed's `engine.backward(loss)`,
# `model.training_step(b)`, `model.compute_gradients(loss)`, test-time adaptation's
# `model.adapt(out)`, `critic.minimize(loss)`, `policy.reinforce(logp)`, a `backward_step(loss)`)
TRAINING_METHOD = re.compile(r"back|step|update|train|fit|optimi|learn|accumul|adapt|grad|minimi|maximi|"
                             r"reinforce|observe|tune|apply|improve", re.IGNORECASE)
