"""Runs a plan: every distinct program `repeat` times, interleaved, several at once where their
claims allow (memlint.verify.schedule), then judges each comparison."""

from __future__ import annotations

import functools
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, TextIO

from memlint.verify import attribution, schedule
from memlint.verify import judge as judging
from memlint.verify.forkserver import ForkServer
from memlint.verify.loops import Loop, as_spec
from memlint.verify.measure import Measurement, RunSpec, child_env, kill_running, run
from memlint.verify.variants import Comparison, Plan, Program

CUDA_CONTEXT_BYTES = 2**30  # device memory a child holds beyond its allocator's reservations


@dataclass
class Options:
    device: str = "cpu"
    repeat: int = 3
    timeout: float = 300.0
    argv: Sequence[str] = ()
    env: Dict[str, str] = field(default_factory=dict)
    seed: int = 0
    python: str = sys.executable
    jobs: int = 1  # runs at once (time claims always run alone)
    budget: Optional[int] = None  # bytes the runs at once may hold together (None: no limit)
    fork: bool = True  # GPU runs forked from a server that imported torch once


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
    """One line per run on stderr: `memlint verify: [3/12] MEM101 line 16 (run 1/3): 2.10 s`."""

    def __init__(self, total: int, stream: Optional[TextIO]) -> None:
        self.total, self.done, self.stream = total, 0, stream
        self.lock = threading.Lock()

    def waiting(self, label: str) -> Optional[Callable[[float], None]]:
        """A heartbeat for a long run: `... still running after 60 s`."""
        if self.stream is None:
            return None
        stream = self.stream
        return lambda seconds: print(f"memlint verify: {label}: still running after {seconds:.0f} s",
                                     file=stream, flush=True)

    def __call__(self, label: str, measurement: Measurement) -> None:
        with self.lock:
            self.done += 1
            if self.stream is None:
                return
            took = f"{measurement.seconds:.2f} s" if measurement.seconds is not None else "-"
            state = "" if measurement.status == "ok" else f" {measurement.status}"
            print(f"memlint verify: [{self.done}/{self.total}] {label}: {took}{state}", file=self.stream, flush=True)


def _spec(program: Program, options: Options, grads: bool, timeline: bool = False, loops=()) -> RunSpec:
    needs_torch = "torch" in program.source or options.device == "cuda"
    return RunSpec(program.source, program.path, options.argv, options.device, options.seed,
                   options.timeout, torch=needs_torch, grads=grads, timeline=timeline, env=options.env,
                   launcher=program.launcher, loops=as_spec(loops))


@dataclass(eq=False)
class _Run(schedule.Task):
    spec: RunSpec
    what: str


def _used(device: bool) -> Callable[[Measurement], Optional[int]]:
    if device:
        return lambda m: m.reserved_bytes if m.reserved_bytes is not None else m.peak_bytes
    return lambda m: m.rss_peak_bytes


def measure_plan(plan: Plan, options: Options, stream: Optional[TextIO] = sys.stderr,
                 runner: Callable[..., Measurement] = run, host_timeline: bool = False,
                 notes: Optional[List[str]] = None) -> List[Row]:
    """Run every program `repeat` times, interleaved, and judge each comparison.

    A program runs with the gradient hooks only when a comparison it is in claims
    `gradients-fixed`, and alone when one claims `time-lower`, timing per iteration the loop
    that claim is judged by; the runs that go alone come after the others (still interleaved
    among themselves), so that the others can share the device. On a GPU, its first run records
    the allocator's history (memory over time, where the peak is) unless it is timed, and the
    runs are forked from a server that imported torch once (memlint.verify.forkserver).
    `host_timeline`: on the CPU, sample host RSS during the first runs (the parent samples
    /proc, so the child is not slowed). `notes` gets how the GPU runs were started.
    """
    programs: Dict[Program, str] = {}
    claims: Dict[Program, Set[str]] = {}
    loops: Dict[Program, Set[Loop]] = {}  # timed per iteration (memlint.verify.loops)
    for comparison in plan.comparisons:
        for program in (comparison.before, comparison.after):
            programs.setdefault(program, _label(comparison, program))
            claims.setdefault(program, set()).update(comparison.claims)
        if comparison.loop is not None:
            loops.setdefault(comparison.before, set()).add(comparison.loop.before)
            loops.setdefault(comparison.after, set()).add(comparison.loop.after)
    device = options.device == "cuda"
    tasks: List[_Run] = []
    for attempt in range(options.repeat):
        for program, label in programs.items():
            solo = "time-lower" in claims[program] or program.launcher is not None  # several GPUs: alone
            timeline = attempt == 0 and ((device and not solo) or (host_timeline and not device))
            spec = _spec(program, options, "gradients-fixed" in claims[program], timeline, loops.get(program, ()))
            tasks.append(_Run(program, solo, spec, f"{label} (run {attempt + 1}/{options.repeat})"))
    tasks.sort(key=lambda task: task.solo)  # runs that go alone last: each would otherwise empty the device
    progress = Progress(len(tasks), stream)
    server = None
    if options.fork and device and runner is run and tasks:
        server, why = ForkServer.start(options.python, child_env(tasks[0].spec), options.device)
        if notes is not None:
            also = "".join(f" and {name}" for name in server.preloaded) if server is not None else ""
            notes.append(f"runs forked from one process that imported torch{also} once" if server is not None
                         else f"each run a new process: the fork server cannot serve ({why})")
    if server is not None:
        runner = functools.partial(run, server=server)

    timed_out: Set[Program] = set()  # a program that hangs once hangs again: its other runs are not started

    def work(task: schedule.Task) -> Measurement:
        assert isinstance(task, _Run)
        if task.program in timed_out:
            measurement = Measurement("timeout", None, "device" if device else "host", None,
                                      error="not run: an earlier run of the same program timed out")
        else:
            measurement = runner(task.spec, options.python, progress.waiting(task.what))
            if measurement.status == "timeout":
                timed_out.add(task.program)  # type: ignore[arg-type]
        progress(task.what, measurement)
        return measurement

    try:
        measured = schedule.run_all(tasks, work, options.jobs, options.budget, _used(device),
                                    schedule.footprints(CUDA_CONTEXT_BYTES if device else 0), kill_running)
    finally:
        if server is not None:
            server.close()
    runs: Dict[Program, List[Measurement]] = {program: [] for program in programs}
    for task, measurement in zip(tasks, measured):
        runs[task.program].append(measurement)  # type: ignore[index]
    rows = []
    for comparison in plan.comparisons:
        before, after = runs[comparison.before], runs[comparison.after]
        judgements = [judging.judge(claim, before, after, comparison.loop) for claim in comparison.claims]
        verdict = judging.overall([j.verdict for j in judgements])
        rows.append(Row(comparison, judgements, verdict, before, after))
    return rows


def peak_of(runs: Sequence[Measurement]) -> Optional[dict]:
    """Where the peak is, from the run that recorded the allocator's history."""
    return next((m.peak_at for m in runs if m.peak_at), None)


def attributed(row: Row) -> Optional[dict]:
    """The row's peak attribution, before and after (memlint.verify.attribution)."""
    c = row.comparison
    return attribution.attribute(peak_of(row.before), peak_of(row.after), c.findings, c.before.source,
                                 c.after.source, c.after.path)


def _codes_at(comparison: Comparison, program: Program, peak: Optional[dict]) -> str:
    """`, where MEM204 points` when the original's largest line at its peak is a finding's."""
    if program is not comparison.before or not peak or not peak.get("lines"):
        return ""
    top = peak["lines"][0]
    codes = comparison.findings.get(top["line"]) if attribution.in_script(top) else None
    return f", where {' and '.join(codes)} points" if codes else ""


def timelines(rows: Sequence[Row], options: Options, stream: Optional[TextIO] = sys.stderr,
              runner: Callable[..., Measurement] = run) -> List[tuple]:
    """Memory over time of each plotted pair: [(title, [(label, timeline or None), ...])].

    A script: the original against all fixes; fixtures: each before.py against its after.py.
    The timelines come from the first measured runs; a timed program on a GPU did not record
    the allocator's history (it slows the run), so it runs once more, kept out of the timings.
    """
    pairs = [row for row in rows if row.comparison.fixture or row.comparison.code == "all"]
    device = options.device == "cuda"
    again = [runs for row in pairs for runs in (row.before, row.after)
             if device and not any(m.timeline for m in runs)]
    progress = Progress(len(again), stream)
    panels = []
    for row in pairs:
        comparison, series = row.comparison, []
        for program, runs in ((comparison.before, row.before), (comparison.after, row.after)):
            label = _label(comparison, program)
            measurement = next((m for m in runs if m.timeline), runs[0] if runs else None)
            if device and (measurement is None or not measurement.timeline):
                what = f"{label} (recording memory for the plot)"
                measurement = runner(_spec(program, options, grads=False, timeline=True), options.python,
                                     progress.waiting(what))
                progress(what, measurement)
            where = attribution.largest(measurement.peak_at if measurement else None, 1)
            codes = _codes_at(comparison, program, measurement.peak_at if measurement else None)
            series.append((f"{label}: most at the peak from {where}{codes}" if where else label,
                           measurement.timeline if measurement else None))
        panels.append((comparison.fixture or comparison.before.path, series))
    return panels
