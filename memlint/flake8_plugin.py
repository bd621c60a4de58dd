"""flake8 plugin (entry point `MEM`): memlint's findings as flake8 errors, fixes left to the CLI.

flake8 gives the file's lines and an `ast` tree. LibCST cannot use an `ast` tree, so the plugin
joins the lines flake8 already read and parses them once with LibCST, as `memlint` does. flake8
has already checked that the file is valid Python (its E999 says otherwise, and it then runs no
tree plugin), so the plugin skips memlint's own syntax gate (a `compile()` of the file), and a
file without a word any rule needs is not looked at again. A file LibCST cannot parse yields nothing rather than stopping
flake8.

Columns: flake8 adds one to the 0-based column a plugin gives, so the plugin gives memlint's
1-based column minus one, and both tools print the same `path:line:col`.

Selection: flake8's `--select`, `--ignore`, `--extend-ignore`, `--per-file-ignores` and
`# noqa` filter what the plugin reports; the plugin also honours memlint's own forms (`# noqa`
on a statement's first line, `# memlint: noqa`), except under flake8's `--disable-noqa`. Opt-in rules run only when flake8's `select` or
`extend-select` names their full code (`--extend-select MEM101`), as in memlint: a prefix such
as `MEM` or `MEM1` picks the default rules. flake8's own `extend_default_ignore` cannot express
this (an explicit `--select MEM` overrides it, and so does any `ignore =` in a config file).
`[tool.memlint]` is not read: under flake8, flake8's configuration decides.
"""

from __future__ import annotations

import argparse
import ast
import sys
from typing import ClassVar, Iterator, List, Sequence, Tuple, Type

from memlint import __version__
from memlint.engine import SourceError, check, wanted_rules
from memlint.rule import Rule
from memlint.rules import registry

Error = Tuple[int, int, str, type]


def _rules(chosen: Sequence[str]) -> List[Type[Rule]]:
    """The default rules, and the opt-in ones whose full code is among `chosen`."""
    return [rule for code, rule in registry().items() if rule.DEFAULT_ON or code in chosen]


class MemlintChecker:
    name = "memlint"
    version = __version__
    rules: ClassVar[List[Type[Rule]]] = _rules(())
    noqa: ClassVar[bool] = True  # flake8's --disable-noqa: report what `# noqa` hides

    def __init__(self, tree: ast.AST, lines: Sequence[str], filename: str) -> None:
        self.lines = lines
        self.filename = filename

    @classmethod
    def parse_options(cls, options: argparse.Namespace) -> None:
        chosen = [*(options.select or ()), *(options.extend_select or ())]
        cls.rules = _rules(chosen)
        cls.noqa = not getattr(options, "disable_noqa", False)

    def run(self) -> Iterator[Error]:
        source = "".join(self.lines)
        rules = wanted_rules(source, self.rules, self.filename)
        if not rules:  # flake8 has checked the syntax already: nothing more to do here
            return
        try:
            findings = check(source, self.filename, rules, compiled=True,  # flake8 parsed it
                             noqa=self.noqa).findings
        except SourceError:
            return  # flake8 parsed it, LibCST did not: no memlint findings, flake8 goes on
        except Exception as error:  # a bug of memlint's must not stop flake8's other checks
            print(f"{self.filename}: memlint: internal error ({type(error).__name__}: {error}); "
                  f"please report it", file=sys.stderr)
            return
        for finding in findings:
            yield finding.line, finding.column - 1, f"{finding.code} {finding.message}", type(self)
