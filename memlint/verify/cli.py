"""`memlint verify`: argument parsing and exit codes (0 nothing refuted, 1 a fix refuted or
nothing could be measured, 2 error)."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from memlint.interrupts import Interrupted, stopping_on_signals
from memlint.output import OutputFailed

EXIT_OK, EXIT_REFUTED, EXIT_ERROR = 0, 1, 2
NEEDS_TORCH = "memlint verify needs torch: pip install 'memlint[verify]'"
MAX_JOBS = 8  # default runs at once on a GPU
BUDGET_SHARE = 0.9  # of the device's free memory (or the host's available memory) runs at once may hold


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors: one line, exit 2, no traceback
        raise _Usage(message)


class _Usage(Exception):
    pass


def _codes(value: str) -> List[str]:
    return [part.strip().upper() for part in value.split(",") if part.strip()]


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="memlint verify",
        description="Run a script before and after each memlint fix and check what the rule claims "
                    "(peak memory, time, output, gradients). A folder of fixtures "
                    "(<CODE>-<name>/before.py, after.py) runs every before.py against its after.py.",
        epilog="Exit codes: 0 nothing refuted, 1 a fix refuted or nothing could be measured, "
               "2 usage error or torch missing. Script arguments go after `--`.",
    )
    parser.add_argument("target", help="a script, or a folder of fixtures")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="where to measure (default: cuda if available, else cpu with host memory)")
    parser.add_argument("--select", type=_codes, action="extend", default=None, metavar="CODES",
                        help="rule codes or prefixes whose fixes to verify, or ALL (default: every rule, "
                             "opt-in ones too, unless the configuration selects)")
    parser.add_argument("--unsafe-fixes", action="store_true", default=None, help="verify unsafe fixes too")
    parser.add_argument("--timeout", type=float, default=300.0, metavar="S",
                        help="seconds per run before it is killed (300)")
    parser.add_argument("--repeat", type=int, default=3, metavar="N",
                        help="runs of each program; medians are compared (3)")
    parser.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                        help="runs at once when memory allows; timed runs go alone "
                             f"(default: up to {MAX_JOBS} on a GPU, 1 on the CPU)")
    parser.add_argument("--no-fork-server", action="store_true",
                        help="start every GPU run as a new Python process instead of forking it from one that "
                             "imported torch once (slower; for scripts that cannot run forked)")
    parser.add_argument("--launcher", choices=("python", "torchrun"), default="python",
                        help="how to start the script: python (default), or torchrun: one process per GPU "
                             "(`python -m torch.distributed.run --standalone`); a fixture's verify.toml "
                             "sets it per script")
    parser.add_argument("--nproc-per-node", type=int, default=None, metavar="N",
                        help="processes torchrun starts (default: the number of GPUs torch sees, 1 on the CPU)")
    parser.add_argument("--output-format", choices=("text", "json"), default="text")
    parser.add_argument("--plot", metavar="FILE.png", help="write memory over time, before vs after")
    parser.add_argument("--scale", type=int, metavar="N",
                        help="set MEMLINT_SCALE for the scripts (fixtures grow with it)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed for random, numpy and torch (0)")
    parser.add_argument("--python", default=sys.executable, metavar="EXE", help="interpreter to run the scripts with")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return parser


def _split(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    argv = list(argv)
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return argv, []


def _error(message: str) -> int:
    print(f"memlint verify: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def _device(args: argparse.Namespace, found: dict) -> dict:
    if args.device == "cpu":
        note = "--device cpu" + (f" (a CUDA device, {found.get('device_name')}, was not used)"
                                 if found.get("cuda") else "")
        return {"kind": "cpu", "memory": "host", "torch": found["torch"], "note": note}
    if found.get("cuda"):
        return {"kind": "cuda", "memory": "device", "torch": found["torch"], "name": found.get("device_name", ""),
                "count": found.get("device_count", 1)}
    return {"kind": "cpu", "memory": "host", "torch": found["torch"],
            "note": "no GPU present: torch sees no CUDA device"}


def _plan(args: argparse.Namespace, target: Path, launcher):
    from memlint import config as config_module
    from memlint.rules import registry
    from memlint.verify import variants

    rules = registry()
    if target.is_dir():
        try:
            plan = variants.fixture_plan(target, rules, launcher)
        except variants.LaunchError as error:
            raise _Usage(str(error)) from None
        if not plan.comparisons:
            raise _Usage(f"{target}: no fixtures in it (folders <CODE>-<name>/ with before.py and after.py)")
        if args.select is not None:  # prefixes or ALL, as for rules
            plan.comparisons = [c for c in plan.comparisons
                                if any(s == "ALL" or c.code.startswith(s) for s in args.select)]
            if not plan.comparisons:
                raise _Usage(f"{target}: no fixture matches --select {','.join(args.select)}")
        return plan
    config = config_module.load(target.parent, rules)
    selection = config.selection
    if args.select is not None:
        selection.select = args.select
    elif selection.select is None:
        selection.select = ["ALL"]  # the opt-in rules are those whose claim a run decides
    chosen = selection.rules(rules, config.ignored_codes(target))
    unsafe = config.unsafe_fixes if args.unsafe_fixes is None else args.unsafe_fixes
    return variants.script_plan(target, chosen, unsafe, launcher)


def _run(argv: Sequence[str]) -> int:
    from memlint.config import ConfigError
    from memlint.engine import SourceError
    from memlint.verify import plot, report, session
    from memlint.verify.judge import REFUTED
    from memlint.verify.measure import Launcher, adopt_orphans, probe

    ours, script_args = _split(argv)
    args = _parser().parse_args(ours)
    if args.repeat < 1 or not 0 < args.timeout < math.inf or (args.jobs is not None and args.jobs < 1):
        raise _Usage("--repeat and --jobs must be at least 1 and --timeout a positive number of seconds")
    target = Path(args.target)
    if not target.exists():
        raise _Usage(f"{target}: no such file or folder")
    if args.plot and not plot.available():
        return _error(plot.MISSING)
    if args.nproc_per_node is not None and (args.launcher != "torchrun" or args.nproc_per_node < 1):
        raise _Usage("--nproc-per-node needs --launcher torchrun and a count of at least 1")
    # without --nproc-per-node, one process per GPU: known once torch is probed
    launcher = Launcher("torchrun", args.nproc_per_node) if args.launcher == "torchrun" else None
    try:
        plan = _plan(args, target, launcher)
    except (ConfigError, SourceError) as error:
        return _error(f"{target}: {error}" if isinstance(error, SourceError) else str(error))
    except (OSError, UnicodeDecodeError) as error:
        return _error(f"{target}: cannot read: {error}")
    if not plan.comparisons:
        why = "no findings" if not plan.findings else "no finding has a fix to verify"
        if args.output_format == "json":
            print(report.as_json([], plan.skipped, str(target), None, args.repeat, f"nothing to verify ({why})"))
            return EXIT_OK
        print(f"memlint verify {target}: nothing to verify ({why})")
        for code, line, reason in plan.skipped:
            print(f"  {code} line {line}: {reason}")
        return EXIT_OK

    found = probe(args.python)
    if found.get("unusable"):
        return _error(found["unusable"])
    if not found.get("torch"):
        return _error(NEEDS_TORCH + (f" ({found['error']})" if found.get("error") else ""))
    if args.device == "cuda" and not found.get("cuda"):
        return _error("--device cuda: torch sees no CUDA device here (use --device cpu to measure host memory)")
    device = _device(args, found)
    if any(p.launcher is not None for c in plan.comparisons for p in (c.before, c.after)):
        if not found.get("torchrun"):
            return _error("torchrun is not available to this Python (torch.distributed.run cannot be imported)")
        _fit_launchers(plan, found.get("device_count", 1) if device["kind"] == "cuda" else 1, device["kind"] == "cuda")
    env = {"MEMLINT_SCALE": str(args.scale)} if args.scale is not None else {}
    jobs, budget = _parallel(args, device, found)
    options = session.Options(device["kind"], args.repeat, args.timeout, script_args, env, args.seed, args.python,
                              jobs, budget, fork=not args.no_fork_server)
    stream = None if args.quiet else sys.stderr
    adopt_orphans()  # what a run leaves behind comes back here to be killed
    started: List[str] = []
    rows = session.measure_plan(plan, options, stream, host_timeline=bool(args.plot), notes=started)
    if started:
        device["runs"] = started[0]
    if args.output_format == "json":
        print(report.as_json(rows, plan.skipped, str(target), device, args.repeat))
    else:
        print(report.text(rows, plan.skipped, report.environment_line(str(target), device, args.repeat, jobs)),
              end="")
    if args.plot:
        try:
            plot.plot(session.timelines(rows, options, stream), device["memory"], args.plot)
        except plot.PlotError as error:
            return _error(str(error))
        if stream is not None:
            print(f"memlint verify: wrote {args.plot}", file=stream)
    unmeasured = _nothing_measured(rows)
    if unmeasured:
        print(f"memlint verify: nothing could be measured: {unmeasured}", file=sys.stderr)
        return EXIT_REFUTED
    return EXIT_REFUTED if any(row.verdict == REFUTED for row in rows) else EXIT_OK


def _fit_launchers(plan, gpus: int, cuda: bool) -> None:
    """A launcher given no process count starts one per GPU. On a GPU, a comparison whose
    launcher asks for more processes than there are GPUs is not run: its ranks would fail on a
    device that does not exist, and the crash would read as the fix's fault."""
    import dataclasses

    kept = []
    for comparison in plan.comparisons:
        for side in ("before", "after"):
            program = getattr(comparison, side)
            if program.launcher is not None and program.launcher.nproc_per_node is None:
                launcher = dataclasses.replace(program.launcher, nproc_per_node=gpus)
                setattr(comparison, side, dataclasses.replace(program, launcher=launcher))
        wanted = max((p.launcher.nproc_per_node for p in (comparison.before, comparison.after)
                      if p.launcher is not None), default=1)
        if cuda and wanted > gpus:
            where = f"{comparison.fixture}: " if comparison.fixture else ""
            plan.skipped.append((comparison.code, 0, f"{where}needs {wanted} GPUs (torchrun --nproc-per-node "
                                                     f"{wanted}); torch sees {gpus} here"))
        else:
            kept.append(comparison)
    plan.comparisons[:] = kept


def _parallel(args: argparse.Namespace, device: dict, found: dict) -> Tuple[int, Optional[int]]:
    """(runs at once, bytes they may hold together)."""
    if device["kind"] == "cuda":
        jobs = args.jobs or max(1, min(MAX_JOBS, (os.cpu_count() or 2) // 2))
        free = found.get("memory_free")
        return jobs, int(free * BUDGET_SHARE) if free else None
    from memlint.verify.measure import host_available

    available = host_available()
    return args.jobs or 1, int(available * BUDGET_SHARE) if available else None


def _nothing_measured(rows) -> str:
    """Why no comparison could be measured, or "" when one was."""
    from memlint.verify.judge import CONFIRMED, REFUTED

    def finished(runs) -> bool:
        return any(m.status == "ok" for m in runs)

    if not rows or any(row.verdict in (CONFIRMED, REFUTED) or (finished(row.before) and finished(row.after))
                       for row in rows):
        return ""
    for row in rows:
        for side, runs in (("the original", row.before), ("the fixed version", row.after)):
            failed = next((m for m in runs if m.status != "ok"), None)
            if failed is not None:
                who = f"{row.comparison.fixture}/{'before' if side == 'the original' else 'after'}.py" \
                    if row.comparison.fixture else side
                return f"{who} {failed.summary()}"
    return "no run finished"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`memlint verify ...` (argv without the word `verify`). Never raises; returns the exit code."""
    try:
        with stopping_on_signals():  # SIGTERM and SIGHUP too: the runs it started are killed on the way out
            return _run(sys.argv[1:] if argv is None else argv)
    except _Usage as usage:
        return _error(str(usage))
    except SystemExit as done:  # --help, --version
        return done.code if isinstance(done.code, int) else EXIT_ERROR
    except KeyboardInterrupt as stop:  # 128 + the signal, as a shell reports it
        stopped = stop if isinstance(stop, Interrupted) else Interrupted()
        _error(stopped.message())
        return stopped.exit_code
    except OutputFailed:  # stdout is gone: the caller says so
        raise
    except Exception as error:  # an internal error: one line, not a traceback
        return _error(f"internal error: {type(error).__name__}: {error}")
