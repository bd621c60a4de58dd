"""Runs a plan: every distinct program `repeat` times, interleaved, then judges each comparison."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, TextIO

from memlint.verify import judge as judging
from memlint.verify.measure import Measurement, RunSpec, run
from memlint.verify.variants import Comparison, Plan, Program


@dataclass
class Options:
    device: str = "cpu"
    repeat: int = 3
    timeout: float = 300.0
    argv: Sequence[str] = ()
    env: Dict[str, str] = field(default_factory=dict)
    seed: int = 0
    python: str = sys.executable


@dataclass
class Row:
    comparison: Comparison
    judgements: List[judging.Judgement]
    verdict: str
    before: List[Measurement]
    after: List[Measurement]


def _label(comparison: Comparison, program: Program) -> str:
    if comparison.fixture:
        return f"{comparison.fixture}/{'before' if program is comparison.before else 'after'}.py"
    if program is comparison.before:
        return "original"
    return "all fixes" if comparison.code == "all" else f"{comparison.code} line {comparison.line}"


class Progress:
    """One line per run on stderr: `memlint verify: [3/12] MEM101 line 16 (run 1/3) 2.1 s`."""

    def __init__(self, total: int, stream: Optional[TextIO]) -> None:
        self.total, self.done, self.stream = total, 0, stream

    def __call__(self, label: str, measurement: Measurement) -> None:
        self.done += 1
        if self.stream is None:
            return
        took = f"{measurement.seconds:.2f} s" if measurement.seconds is not None else "-"
        state = "" if measurement.status == "ok" else f" {measurement.status}"
        print(f"memlint verify: [{self.done}/{self.total}] {label}: {took}{state}", file=self.stream, flush=True)


def _spec(program: Program, options: Options, grads: bool, timeline: bool = False) -> RunSpec:
    return RunSpec(program.source, program.path, options.argv, options.device, options.seed,
                   options.timeout, torch="torch" in program.source, grads=grads, timeline=timeline,
                   env=options.env)


def measure_plan(plan: Plan, options: Options, stream: Optional[TextIO] = sys.stderr,
                 runner: Callable[[RunSpec], Measurement] = run) -> List[Row]:
    programs: Dict[Program, str] = {}
    for comparison in plan.comparisons:
        for program in (comparison.before, comparison.after):
            programs.setdefault(program, _label(comparison, program))
    grads = any("gradients-fixed" in c.claims for c in plan.comparisons)
    progress = Progress(len(programs) * options.repeat, stream)
    runs: Dict[Program, List[Measurement]] = {program: [] for program in programs}
    for attempt in range(options.repeat):
        for program, label in programs.items():
            measurement = runner(_spec(program, options, grads))
            runs[program].append(measurement)
            progress(f"{label} (run {attempt + 1}/{options.repeat})", measurement)
    rows = []
    for comparison in plan.comparisons:
        before, after = runs[comparison.before], runs[comparison.after]
        judgements = [judging.judge(claim, before, after) for claim in comparison.claims]
        verdict = judging.overall([j.verdict for j in judgements])
        rows.append(Row(comparison, judgements, verdict, before, after))
    return rows


def timelines(plan: Plan, options: Options, stream: Optional[TextIO] = sys.stderr,
              runner: Callable[[RunSpec], Measurement] = run) -> List[tuple]:
    """One extra run of each plotted pair with memory recording on (kept out of the timings).

    A script: the original against all fixes; fixtures: each before.py against its after.py.
    Returns [(title, [(label, timeline or None), ...])].
    """
    pairs = [c for c in plan.comparisons if c.fixture or c.code == "all"]
    progress = Progress(2 * len(pairs), stream)
    panels = []
    for comparison in pairs:
        series = []
        for program in (comparison.before, comparison.after):
            label = _label(comparison, program)
            measurement = runner(_spec(program, options, grads=False, timeline=True))
            progress(f"{label} (recording memory for the plot)", measurement)
            series.append((label, measurement.timeline))
        panels.append((comparison.fixture or comparison.before.path, series))
    return panels
