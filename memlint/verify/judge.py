"""Verdicts: does what was measured after a fix support the rule's claim?

Pure functions over Measurements (memlint.verify.measure); no process is started here.
A difference counts only beyond the noise: the larger of the run-to-run spread (max - min of
either side's repeats) and a small relative threshold (with an absolute floor). Medians are
compared. A fix that crashes, times out or runs out of memory where the original did not is
refuted whatever it claims; a fix that avoids the original's out-of-memory confirms a memory
claim.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

from memlint.verify.loops import TimedLoop
from memlint.verify.measure import Measurement

CONFIRMED, REFUTED, INCONCLUSIVE, NO_CLAIM = "confirmed", "refuted", "inconclusive", "no claim"

# Thresholds a difference must exceed even when the runs agree (or there is one run per side).
PEAK_REL, TIME_REL, GRAD_FLOOR = 0.01, 0.05, 0.005  # device memory is exact: 1% is plenty
IMBALANCE_FLOOR = 0.02  # two percentage points of (largest - smallest) / largest GPU peak
HOST_REL, HOST_FLOOR = 0.05, 4 * 2**20  # RSS moves with allocator arenas and thread pools
TIME_FLOOR = 0.005  # of a whole run's time
ITERATION_FLOOR = 1e-6  # of a time per iteration: the clock's resolution, about


@dataclass
class Judgement:
    claim: str
    metric: str  # peak | host peak | time | stdout | bad grads | grad error
    unit: str  # bytes | seconds | sha256 | fraction
    before: Optional[float]  # median (for stdout: None)
    after: Optional[float]
    ratio: Optional[float]  # after / before
    verdict: str
    reason: str  # one line: why (always set unless confirmed plainly)
    noise: Optional[float] = None  # the threshold a difference had to exceed
    loop: Optional[dict] = None  # time per iteration: the loop's line before and after, iterations a run


def median(values: Sequence[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _spread(values: Sequence[Optional[float]]) -> float:
    present = [v for v in values if v is not None]
    return max(present) - min(present) if len(present) > 1 else 0.0


def _ratio(before: Optional[float], after: Optional[float]) -> Optional[float]:
    if before is None or after is None or before == 0:
        return None
    return after / before


def _bad_fraction(m: Measurement) -> Optional[float]:
    grads = m.grads or {}
    if not grads.get("elements"):
        return None
    return (grads.get("zero", 0) + grads.get("nonfinite", 0)) / grads["elements"]


def _grad_error(m: Measurement) -> Optional[float]:
    """Mean over the steps checked of how far a step's gradient is from its own (child._Grads)."""
    grads = m.grads or {}
    return grads.get("error") if grads.get("checked_steps") else None


def _metric(claim: str, memory: str) -> Tuple[str, str, Callable[[Measurement], Optional[float]], float, float]:
    """(metric, unit, value of a run, relative threshold, absolute floor)."""
    if claim == "time-lower":
        return "time", "seconds", lambda m: m.seconds, TIME_REL, TIME_FLOOR
    if claim == "gradients-fixed":
        return "bad grads", "fraction", _bad_fraction, 0.0, GRAD_FLOOR
    if claim == "grad-error":  # the second measure of gradients-fixed
        return "grad error", "fraction", _grad_error, 0.0, GRAD_FLOOR
    if claim == "imbalance-lower":
        return "imbalance", "fraction", lambda m: m.imbalance(), 0.0, IMBALANCE_FLOOR
    if memory == "host":
        return "host peak", "bytes", lambda m: m.peak_bytes, HOST_REL, HOST_FLOOR
    return "peak", "bytes", lambda m: m.peak_bytes, PEAK_REL, 0.0  # peak-lower, and "none" for show


def _failed(runs: Sequence[Measurement]) -> List[Measurement]:
    return [m for m in runs if m.status != "ok"]


def _failures(claim: str, before: Sequence[Measurement], after: Sequence[Measurement]
              ) -> Optional[Tuple[str, str]]:
    """(verdict, reason) when a run failed; None when every run finished."""
    harness = [m for m in (*before, *after) if m.status == "error"]
    if harness:
        return INCONCLUSIVE, f"the verifier could not run the script: {harness[0].error}"
    failed_before, failed_after = _failed(before), _failed(after)
    if not failed_before and not failed_after:
        return None
    if failed_after and not failed_before:
        failed = failed_after[0]
        detail = f": {failed.detail()}" if failed.detail() else ""
        return REFUTED, f"the fix {failed.what()} where the original did not{detail}"
    if failed_before and not failed_after:
        if all(m.status == "oom" for m in failed_before):
            if claim in ("peak-lower", "imbalance-lower", "none"):
                return (NO_CLAIM if claim == "none" else CONFIRMED), \
                    "out-of-memory avoided: the original ran out of memory, the fix did not"
            return INCONCLUSIVE, "the original ran out of memory and the fix did not; nothing else to compare"
        return INCONCLUSIVE, f"the original {failed_before[0].summary()}; the fix did not"
    if all(m.status == "oom" for m in (*failed_before, *failed_after)):
        return INCONCLUSIVE, "both run out of memory"
    if failed_after:
        return INCONCLUSIVE, f"both fail: the original {failed_before[0].summary()}"
    return INCONCLUSIVE, f"the original {failed_before[0].summary()}"


def _output(before: Sequence[Measurement], after: Sequence[Measurement]) -> Judgement:
    ours = {m.stdout_sha256 for m in before}
    theirs = {m.stdout_sha256 for m in after}
    if len(ours) > 1:
        verdict, reason = INCONCLUSIVE, "the original's output differs between its own runs"
    elif theirs == ours:
        verdict, reason = CONFIRMED, "stdout identical in every run"
    else:
        verdict, reason = REFUTED, _first_difference(before[0].stdout_tail,
                                                     next(m for m in after if m.stdout_sha256 not in ours).stdout_tail)
    return Judgement("output-identical", "stdout", "sha256", None, None, None, verdict, reason)


def _first_difference(a: str, b: str) -> str:
    for left, right in zip(a.splitlines(), b.splitlines()):
        if left != right:
            return f"stdout differs: {left[:60]!r} -> {right[:60]!r}"
    return "stdout differs (in length, or before its last lines)"


def judge(claim: str, before: Sequence[Measurement], after: Sequence[Measurement],
          loop: Optional[TimedLoop] = None) -> Judgement:
    """The verdict on `claim` from repeated runs of the original (`before`) and the fix (`after`).

    `gradients-fixed` has two measures: the share of zero or non-finite gradient elements
    (underflow, overflow) and the gradient error (stale or lost gradients: see child._Grads).
    Either going up beyond the noise refutes; otherwise either going down confirms.
    `time-lower` with a `loop` is judged by the steady-state time per iteration of that loop
    (memlint.verify.loops), and by the whole run's time where a run has none.
    """
    if claim == "time-lower" and loop is not None:
        return _per_iteration(before, after, loop)
    if claim == "gradients-fixed":
        measures = [_judge(claim, before, after), _judge("grad-error", before, after)]
        measures[1].claim = claim
        for verdict in (REFUTED, CONFIRMED):
            chosen = next((j for j in measures if j.verdict == verdict), None)
            if chosen is not None:
                return chosen
        error = measures[1]
        return error if error.before is not None and error.after is not None else measures[0]
    return _judge(claim, before, after)


def _per_iteration(before: Sequence[Measurement], after: Sequence[Measurement], loop: TimedLoop) -> Judgement:
    finished = [(m, loop.before.line) for m in before if m.status == "ok"] + \
        [(m, loop.after.line) for m in after if m.status == "ok"]
    short = next(((m, line) for m, line in finished if m.per_iteration(line) is None), None)
    if short is not None or not finished:
        judgement = _judge("time-lower", before, after)
        if short is not None:
            m, line = short
            ran = next((x["iterations"] for x in m.loops or () if x["line"] == line), 0)
            judgement.reason = "; ".join(filter(None, (
                judgement.reason, f"timed over the whole run: the loop at line {line} ran {ran} iterations, "
                                  "too few to leave out its warm-up")))
        return judgement

    def iterations(runs: Sequence[Measurement], line: int) -> Optional[float]:
        return median([x["iterations"] for m in runs if m.status == "ok" for x in m.loops or () if x["line"] == line])

    judgement = _judge("time-lower", before, after,
                       (lambda m: m.per_iteration(loop.before.line), lambda m: m.per_iteration(loop.after.line)),
                       ITERATION_FLOOR)
    judgement.metric = "time/iter"
    judgement.loop = {"before": loop.before.line, "after": loop.after.line,
                      "iterations": [iterations(before, loop.before.line), iterations(after, loop.after.line)]}
    return judgement


def _judge(claim: str, before: Sequence[Measurement], after: Sequence[Measurement],
           values: Optional[Tuple[Callable[[Measurement], Optional[float]], ...]] = None,
           least: Optional[float] = None) -> Judgement:
    """`values`: what to compare of a run before and after, instead of the claim's metric, and
    `least` the absolute floor of the noise for them."""
    memory = (before or after)[0].memory if (before or after) else "device"
    metric, unit, value, rel, floor = _metric(claim, memory)
    floor = floor if least is None else least
    value_before, value_after = values or (value, value)
    b = median([value_before(m) for m in before if m.status == "ok"])
    a = median([value_after(m) for m in after if m.status == "ok"])
    failure = _failures(claim, before, after)
    if failure is not None:
        return Judgement(claim, metric, unit, b, a, _ratio(b, a), failure[0], failure[1])
    if claim == "output-identical":
        return _output(before, after)
    if claim not in ("peak-lower", "time-lower", "gradients-fixed", "grad-error", "imbalance-lower"):
        return Judgement(claim, metric, unit, b, a, _ratio(b, a), NO_CLAIM, "the rule makes no claim to check")
    if b is None or a is None:
        what = {"gradients-fixed": "gradients (no optimizer step and no .grad at exit)",
                "grad-error": "gradient error (it needs two optimizer steps with a backward between)",
                "imbalance-lower": "imbalance (it needs runs that use two or more GPUs)",
                }.get(claim, metric)
        return Judgement(claim, metric, unit, b, a, None, INCONCLUSIVE, f"no {what} measured")
    noise = max(_spread([value_before(m) for m in before]), _spread([value_after(m) for m in after]), rel * abs(b), floor)
    if a < b - noise:
        verdict, reason = CONFIRMED, ""
    elif a > b + noise:
        verdict, reason = REFUTED, f"{metric} went up beyond the noise"
    else:
        verdict, reason = INCONCLUSIVE, f"the difference is within the noise (±{_show(noise, unit)})"
    return Judgement(claim, metric, unit, b, a, _ratio(b, a), verdict, reason, noise)


def _show(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / 2**20:.1f} MiB"
    if unit == "seconds":  # a run's time in s, an iteration's in ms or µs
        if abs(value) >= 0.1 or value == 0:
            return f"{value:.3f} s"
        return f"{value * 1e3:.3g} ms" if abs(value) >= 1e-3 else f"{value * 1e6:.3g} µs"
    if unit == "fraction":
        return f"{value * 100:.1f}%"
    return f"{value:g}"


def show(value: Optional[float], unit: str) -> str:
    """A value as the text report prints it."""
    return "-" if value is None else _show(value, unit)


def overall(verdicts: Sequence[str]) -> str:
    """One verdict for several claims (the all-fixes variant): any refuted wins, then inconclusive."""
    if REFUTED in verdicts:
        return REFUTED
    real = [v for v in verdicts if v != NO_CLAIM]
    if not real:
        return NO_CLAIM
    return CONFIRMED if all(v == CONFIRMED for v in real) else INCONCLUSIVE
