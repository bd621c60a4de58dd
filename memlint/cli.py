"""Command line: argument parsing and exit codes only (0 clean, 1 findings, 2 errors)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

from memlint import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
COMMANDS = ("check", "rules", "explain", "verify", "snapshot")


def _codes(value: str) -> List[str]:
    return [part.strip().upper() for part in value.split(",") if part.strip()]


def _jobs(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of processes (1 or more)")
    return jobs


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < 1e9:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds (0: no limit)")
    return seconds


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memlint",
        description="Find GPU-memory anti-patterns in PyTorch code, and fix them.",
        epilog="Commands: check (default), rules, explain CODE, verify SCRIPT, snapshot SNAPSHOT.pickle. "
               "Exit codes: 0 nothing found, 1 findings remain, 2 usage or input error.",
    )
    parser.add_argument("--version", action="version", version=f"memlint {__version__}")
    parser.add_argument("paths", nargs="*", default=["."], help="files or folders (default: .)")
    parser.add_argument("--fix", action="store_true", help="apply safe fixes and write them")
    parser.add_argument("--unsafe-fixes", action="store_true", default=None,
                        help="also apply (or offer) fixes that may change behaviour")
    parser.add_argument("--no-unsafe-fixes", dest="unsafe_fixes", action="store_false")
    parser.add_argument("--diff", action="store_true", help="print what --fix would change; write nothing")
    parser.add_argument("--select", type=_codes, action="extend", default=None,
                        help="rule codes or prefixes to run, or ALL (replaces the default set)")
    parser.add_argument("--extend-select", type=_codes, action="extend", default=[],
                        help="rule codes or prefixes to add to the selection")
    parser.add_argument("--ignore", type=_codes, action="extend", default=[],
                        help="rule codes or prefixes to skip")
    parser.add_argument("--output-format", choices=("text", "json", "sarif", "github"), default="text",
                        help="text (default), json, sarif (SARIF 2.1.0) or github (Actions annotations)")
    parser.add_argument("--statistics", action="store_true", help="count findings per rule")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    parser.add_argument("--config", type=Path, help="read [tool.memlint] from this pyproject.toml")
    parser.add_argument("--force-exclude", action="store_true",
                        help="apply `exclude` to files named on the command line too (for pre-commit)")
    parser.add_argument("--target-torch", metavar="VERSION",
                        help="the oldest torch the code must run on (e.g. 2.1): fixes that need a newer "
                             "one are not offered (default: the project's declared torch requirement)")
    parser.add_argument("-j", "--jobs", type=_jobs, help="processes to lint in (default: the CPU count)")
    parser.add_argument("--no-cache", action="store_true",
                        help="lint every file afresh; neither read nor write the result cache")
    parser.add_argument("--cache-dir", type=Path,
                        help="the result cache's folder (default: .memlint_cache next to the configuration)")
    parser.add_argument("--file-timeout", type=_seconds, metavar="SECONDS",
                        help="CPU time one file may take before it is skipped with a warning "
                             "(default: 5; 0: no limit)")
    parser.add_argument("--profile", action="store_true",
                        help="print the time per file, phase, rule and fact (to stderr)")
    return parser


def _error(message: str) -> int:
    print(f"memlint: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def _check(argv: Sequence[str]) -> int:
    from memlint import config as config_module
    from memlint.cache import open_cache
    from memlint.jobs import cpu_count
    from memlint.profile import report as profile_report
    from memlint.report import json as json_report
    from memlint.report import text
    from memlint.report import github, sarif
    from memlint.rules import registry
    from memlint.run import Options, run

    args = _parser().parse_args(argv)
    rules = registry()
    try:
        config = config_module.load(Path.cwd(), rules, args.config)
        selection = config.selection
        if args.select is not None:
            selection.select = args.select
        selection.extend_select += args.extend_select
        selection.ignore += args.ignore
        selection.rules(rules)  # report a bad selector before any work
        if args.target_torch is not None:
            config.target_torch = config_module.target_torch(args.target_torch, "--target-torch")
    except config_module.ConfigError as error:
        return _error(str(error))
    unsafe = config.unsafe_fixes if args.unsafe_fixes is None else args.unsafe_fixes
    jobs = args.jobs or cpu_count()
    options = Options(fix=args.fix and not args.diff, diff=args.diff, unsafe_fixes=unsafe,
                      fix_diffs=args.output_format in ("json", "sarif"), force_exclude=args.force_exclude,
                      jobs=jobs, cache=None if args.no_cache else open_cache(config, args.cache_dir),
                      profile=args.profile,
                      file_timeout=config.file_timeout if args.file_timeout is None else args.file_timeout)
    for warning in config.warnings:
        print(f"memlint: warning: {warning}", file=sys.stderr)
    notices: List[str] = []
    started = time.perf_counter()
    outcomes = run(args.paths, config, rules, options, notices)
    wall = time.perf_counter() - started
    if args.jobs is not None:  # asked for: say why it could not be had
        for notice in notices:
            print(f"memlint: warning: {notice}", file=sys.stderr)

    for outcome in outcomes:
        if outcome.error is not None:
            print(f"{outcome.display}: error: {outcome.error}", file=sys.stderr)
        if outcome.warning is not None:
            print(f"{outcome.display}: warning: {outcome.warning}, skipped", file=sys.stderr)
    if args.output_format == "json":
        print(json_report.render(outcomes))
    elif args.output_format == "sarif":
        print(sarif.render(outcomes, rules))
    elif args.output_format == "github":
        for line in github.render(outcomes):
            print(line)
    elif args.diff:
        for outcome in outcomes:
            if outcome.diff:
                sys.stdout.write(outcome.diff)
        fixable = sum(len(o.fixed) for o in outcomes)
        remaining = sum(len(o.findings) for o in outcomes)
        print(f"Would fix {fixable} error{'' if fixable == 1 else 's'} "
              f"({remaining} remaining).", file=sys.stderr)
    else:
        lines = (text.statistics(outcomes, rules, unsafe) if args.statistics
                 else text.findings(outcomes, unsafe))
        lines += text.summary(outcomes, unsafe, fixing=options.fix)
        print("\n".join(lines))

    if args.profile:
        lines = profile_report([(o.display, o.seconds) for o in outcomes], wall, jobs)
        print("\n".join(lines), file=sys.stderr)

    if any(o.error is not None for o in outcomes):
        return EXIT_ERROR
    findings = sum(len(o.findings) for o in outcomes)
    if args.diff:
        findings += sum(len(o.fixed) for o in outcomes)
    return EXIT_FINDINGS if findings and not args.exit_zero else EXIT_CLEAN


def _rules_command(argv: Sequence[str]) -> int:
    from memlint.docs import rules_table
    from memlint.rules import registry

    argparse.ArgumentParser(prog="memlint rules", description="List every rule.").parse_args(argv)
    print(rules_table(registry()))
    return EXIT_CLEAN


def _explain_command(argv: Sequence[str]) -> int:
    from memlint.docs import explain
    from memlint.rules import registry

    parser = argparse.ArgumentParser(prog="memlint explain", description="Show a rule's documentation.")
    parser.add_argument("code")
    args = parser.parse_args(argv)
    rule = registry().get(args.code.upper())
    if rule is None:
        return _error(f"unknown rule code {args.code!r} (see `memlint rules`)")
    sys.stdout.write(explain(rule))
    return EXIT_CLEAN


def _verify_command(argv: Sequence[str]) -> int:
    from memlint.verify.cli import main as verify_main

    return verify_main(list(argv))


def _snapshot_command(argv: Sequence[str]) -> int:
    from memlint.snapshot.cli import main as snapshot_main

    return snapshot_main(list(argv))


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in COMMANDS else "check"
    rest = argv[1:] if argv and argv[0] in COMMANDS else argv
    handler = {"check": _check, "rules": _rules_command, "explain": _explain_command,
               "verify": _verify_command, "snapshot": _snapshot_command}[command]
    for stream in (sys.stdout, sys.stderr):  # a file name in no encoding is printed as its bytes
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    from memlint.interrupts import Interrupted, stopping_on_signals
    from memlint.output import OutputFailed, guarded_stdout

    try:
        with guarded_stdout(), stopping_on_signals():
            return handler(rest)
    except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM, SIGHUP: 128 + the signal, as a shell has it
        stopped = stop if isinstance(stop, Interrupted) else Interrupted()
        _error(stopped.message())
        return stopped.exit_code
    except OutputFailed as failure:
        return _error(f"cannot write the output: {failure}")
