"""Command line: argument parsing and exit codes only (0 clean, 1 findings, 2 errors)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from memlint import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
COMMANDS = ("check", "rules", "explain", "verify")


def _codes(value: str) -> List[str]:
    return [part.strip().upper() for part in value.split(",") if part.strip()]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memlint",
        description="Find GPU-memory anti-patterns in PyTorch code, and fix them.",
        epilog="Commands: check (default), rules, explain CODE, verify SCRIPT. "
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
    return parser


def _error(message: str) -> int:
    print(f"memlint: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def _check(argv: Sequence[str]) -> int:
    from memlint import config as config_module
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
    options = Options(fix=args.fix and not args.diff, diff=args.diff, unsafe_fixes=unsafe,
                      fix_diffs=args.output_format in ("json", "sarif"), force_exclude=args.force_exclude)
    for warning in config.warnings:
        print(f"memlint: warning: {warning}", file=sys.stderr)
    outcomes = run(args.paths, config, rules, options)

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


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in COMMANDS else "check"
    rest = argv[1:] if argv and argv[0] in COMMANDS else argv
    handler = {"check": _check, "rules": _rules_command, "explain": _explain_command,
               "verify": _verify_command}[command]
    for stream in (sys.stdout, sys.stderr):  # a file name in no encoding is printed as its bytes
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    try:
        return handler(rest)
    except KeyboardInterrupt:
        return _error("interrupted")
    except BrokenPipeError:
        return EXIT_CLEAN
