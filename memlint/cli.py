"""Command line: argument parsing and exit codes only (0 clean, 1 findings, 2 errors)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence, TextIO, Tuple

from memlint import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _codes(value: str) -> List[str]:
    codes = [part.strip().upper() for part in value.split(",") if part.strip()]
    if not codes:  # `--select ,` would otherwise run no rule and pass
        raise argparse.ArgumentTypeError("no rule code given")
    return codes


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
        epilog="Commands: check (default), rules, explain CODE|NAME, verify SCRIPT, snapshot SNAPSHOT.pickle, "
               "server. Exit codes: 0 nothing found, 1 findings remain, 2 usage or input error.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"memlint {__version__}")
    parser.add_argument("paths", nargs="*", help="files or folders (default: .); `-` reads standard input")
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
    parser.add_argument("--statistics", action="store_true", help="count findings per rule (text or json)")
    parser.add_argument("-o", "--output-file", type=Path, metavar="FILE",
                        help="write the report to FILE instead of standard output")
    parser.add_argument("-q", "--quiet", action="store_true", help="print the findings and nothing else")
    parser.add_argument("--show-fixes", action="store_true",
                        help="with --fix (or --diff): list what was fixed (or would be), per file and rule")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour text output: auto (on a terminal, unless NO_COLOR is set), always, never")
    parser.add_argument("--stdin-filename", metavar="PATH",
                        help="lint standard input as the file PATH (its configuration, ignores and kind); "
                             "with --fix, the fixed source goes to standard output")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="the configuration for every file: a memlint.toml (keys at the top level) or a "
                             "pyproject.toml's [tool.memlint] (default: the closest one above each file)")
    parser.add_argument("--show-settings", type=Path, metavar="FILE",
                        help="print the settings that apply to FILE and where they come from, and exit")
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


def _color(choice: str, stream: TextIO) -> bool:
    """--color auto: on a terminal, unless NO_COLOR is set (no-color.org)."""
    if choice == "auto":
        return stream.isatty() and not os.environ.get("NO_COLOR")
    return choice == "always"


def _open_output(path: Optional[Path]) -> TextIO:
    if path is None:
        return sys.stdout
    if path.parent != Path():
        path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "w", encoding="utf-8", errors="surrogateescape")


def _stdin_mode(args: argparse.Namespace) -> bool:
    return args.paths == ["-"] or (args.stdin_filename is not None and not args.paths)


def _check(argv: Sequence[str]) -> int:
    from memlint import config as config_module
    from memlint.cache import open_cache
    from memlint.jobs import cpu_count
    from memlint.profile import report as profile_report
    from memlint.report import output
    from memlint.report import settings as settings_report
    from memlint.rules import registry
    from memlint.run import Options, run

    parser = _parser()
    args = parser.parse_intermixed_args(argv)  # paths and options in any order
    if args.statistics and args.output_format in ("sarif", "github"):
        parser.error(f"--statistics gives text or json, not {args.output_format}")
    if "-" in args.paths and args.paths != ["-"]:
        parser.error("`-` (standard input) cannot be mixed with other paths")
    rules = registry()
    try:
        overrides = config_module.Overrides(
            select=args.select, extend_select=args.extend_select, ignore=args.ignore,
            unsafe_fixes=args.unsafe_fixes, file_timeout=args.file_timeout,
            target_torch=None if args.target_torch is None
            else config_module.target_torch(args.target_torch, "--target-torch"))
        configs = config_module.Configurations(Path.cwd(), rules, args.config, overrides)
        config = configs.root
        config.selection.rules(rules)  # report a bad selector before any work
        if args.show_settings is not None:
            print("\n".join(settings_report.describe(args.show_settings, configs, rules)))
            return EXIT_CLEAN
    except config_module.ConfigError as error:
        return _error(str(error))
    stdin = _stdin_mode(args)
    jobs = args.jobs or cpu_count()
    options = Options(fix=args.fix and not args.diff, diff=args.diff, unsafe_fixes=config.unsafe_fixes,
                      fix_diffs=args.output_format in ("json", "sarif"), force_exclude=args.force_exclude,
                      jobs=jobs, cache=None if args.no_cache or stdin else open_cache(config, args.cache_dir),
                      profile=args.profile, file_timeout=config.file_timeout, require_files=bool(args.paths))
    notices: List[str] = []
    started = time.perf_counter()
    fixed: Optional[bytes] = None
    try:
        if stdin:
            from memlint.stdin import lint_stdin

            outcomes, fixed = lint_stdin(args.stdin_filename, configs, rules, options)
        else:
            outcomes = run(args.paths or ["."], configs, rules, options, notices)
    except config_module.ConfigError as error:  # a configuration met on the way
        return _error(str(error))
    wall = time.perf_counter() - started
    for warning in configs.warnings:
        print(f"memlint: warning: {warning}", file=sys.stderr)
    if args.jobs is not None:  # asked for: say why it could not be had
        for notice in notices:
            print(f"memlint: warning: {notice}", file=sys.stderr)
    if not outcomes and not args.paths and not stdin:  # none named, and none found under the working folder
        print("memlint: warning: no Python file found under .", file=sys.stderr)

    output.problems(outcomes, sys.stderr)
    out = _open_output(args.output_file)
    try:
        if fixed is not None:  # --fix on standard input: the fixed source is the output
            sys.stdout.flush()
            sys.stdout.buffer.write(fixed)
            sys.stdout.buffer.flush()
            out = sys.stderr if args.output_file is None else out
        style = output.Style(format=args.output_format, statistics=args.statistics, quiet=args.quiet,
                             show_fixes=args.show_fixes, color=_color(args.color, out), fixing=options.fix,
                             diff=args.diff, unsafe=config.unsafe_fixes,
                             summary=bool(outcomes or args.paths or stdin))
        output.report(outcomes, rules, style, out, sys.stderr)
    finally:
        if out is not sys.stdout and out is not sys.stderr:
            out.close()

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
    parser.add_argument("rule", help="its code (MEM203) or name (eval-without-no-grad)")
    args = parser.parse_args(argv)
    rules = registry()
    by_name = {rule.NAME: rule for rule in rules.values()}
    rule = rules.get(args.rule.upper()) or by_name.get(args.rule.lower())
    if rule is None:
        return _error(f"unknown rule code or name {args.rule!r} (see `memlint rules`)")
    sys.stdout.write(explain(rule))
    return EXIT_CLEAN


def _verify_command(argv: Sequence[str]) -> int:
    from memlint.verify.cli import main as verify_main

    return verify_main(list(argv))


def _snapshot_command(argv: Sequence[str]) -> int:
    from memlint.snapshot.cli import main as snapshot_main

    return snapshot_main(list(argv))


def _server_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="memlint server",
                                     description="Run the Language Server on standard input and output.")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="the configuration for every file (default: the closest one above each file)")
    parser.add_argument("--unsafe-fixes", action="store_true", default=None,
                        help="also offer fixes that may change behaviour (default: as configured)")
    args = parser.parse_args(argv)
    try:
        from memlint.server.protocol import serve
    except ImportError as error:
        return _error(f"the language server needs pygls ({error}): pip install 'memlint[server]'")
    from memlint.server.documents import Settings

    serve(Settings(args.config, args.unsafe_fixes))
    return EXIT_CLEAN


COMMANDS = {"check": _check, "rules": _rules_command, "explain": _explain_command, "verify": _verify_command,
            "snapshot": _snapshot_command, "server": _server_command}


def _command(argv: List[str]) -> Tuple[Callable[[Sequence[str]], int], List[str]]:
    """The command the arguments ask for, and its own arguments. A first argument that names
    an existing file or folder is a path to check, even when a command has its name."""
    if argv and argv[0] in COMMANDS and not os.path.lexists(argv[0]):
        return COMMANDS[argv[0]], argv[1:]
    return _check, argv


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    handler, rest = _command(argv)
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
