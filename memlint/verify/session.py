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

    def waiting(self, label: str) -> Optional[Callable[[float], None]]:
        """A heartbeat for a long run: `... still running after 60 s`."""
        if self.stream is None:
            return None
        stream = self.stream
        return lambda seconds: print(f"memlint verify: [{self.done + 1}/{self.total}] {label}: still running "
                                     f"after {seconds:.0f} s", file=stream, flush=True)

    def __call__(self, label: str, measurement: Measurement) -> None:
        self.done += 1
        if self.stream is None:
            return
        took = f"{measurement.seconds:.2f} s" if measurement.seconds is not None else "-"
        state = "" if measurement.status == "ok" else f" {measurement.status}"
        print(f"memlint verify: [{self.done}/{self.total}] {label}: {took}{state}", file=self.stream, flush=True)


def _spec(program: Program, options: Options, grads: bool, timeline: bool = False) -> RunSpec:
    needs_torch = "torch" in program.source or options.device == "cuda"
    return RunSpec(program.source, program.path, options.argv, options.device, options.seed,
                   options.timeout, torch=needs_torch, grads=grads, timeline=timeline, env=options.env)


def measure_plan(plan: Plan, options: Options, stream: Optional[TextIO] = sys.stderr,
                 runner: Callable[..., Measurement] = run, host_timeline: bool = False) -> List[Row]:
    """Run every program `repeat` times, interleaved, and judge each comparison.

    `host_timeline`: sample host RSS during the first runs (the parent samples /proc, so the
    child is not slowed; device memory history, which does slow it, needs `timelines`).
    """
    programs: Dict[Program, str] = {}
    for comparison in plan.comparisons:
        for program in (comparison.before, comparison.after):
            programs.setdefault(program, _label(comparison, program))
    grads = any("gradients-fixed" in c.claims for c in plan.comparisons)
    progress = Progress(len(programs) * options.repeat, stream)
    runs: Dict[Program, List[Measurement]] = {program: [] for program in programs}
    for attempt in range(options.repeat):
        for program, label in programs.items():
            timeline = host_timeline and attempt == 0 and options.device != "cuda"
            what = f"{label} (run {attempt + 1}/{options.repeat})"
            measurement = runner(_spec(program, options, grads, timeline), options.python, progress.waiting(what))
            runs[program].append(measurement)
            progress(what, measurement)
    rows = []
    for comparison in plan.comparisons:
        before, after = runs[comparison.before], runs[comparison.after]
        judgements = [judging.judge(claim, before, after) for claim in comparison.claims]
        verdict = judging.overall([j.verdict for j in judgements])
        rows.append(Row(comparison, judgements, verdict, before, after))
    return rows


def timelines(rows: Sequence[Row], options: Options, stream: Optional[TextIO] = sys.stderr,
              runner: Callable[..., Measurement] = run) -> List[tuple]:
    """Memory over time of each plotted pair: [(title, [(label, timeline or None), ...])].

    A script: the original against all fixes; fixtures: each before.py against its after.py.
    Host timelines come from the measured runs; on a GPU each program runs once more with the
    allocator's history recorded, which slows it, so those runs are kept out of the timings.
    """
    pairs = [row for row in rows if row.comparison.fixture or row.comparison.code == "all"]
    device = options.device == "cuda"
    progress = Progress(2 * len(pairs) if device else 0, stream)
    panels = []
    for row in pairs:
        comparison, series = row.comparison, []
        for program, runs in ((comparison.before, row.before), (comparison.after, row.after)):
            label = _label(comparison, program)
            if device:
                what = f"{label} (recording memory for the plot)"
                measurement = runner(_spec(program, options, grads=False, timeline=True), options.python,
                                     progress.waiting(what))
                progress(what, measurement)
            else:
                measurement = runs[0]
            series.append((label, measurement.timeline))
        panels.append((comparison.fixture or comparison.before.path, series))
    return panels
