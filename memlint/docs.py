"""The rule catalogue as users read it: `memlint rules` (a Markdown table, also in the README)
and `memlint explain CODE` (the rule's docstring and its examples)."""

from __future__ import annotations

import inspect
from typing import List, Mapping, Type

from memlint.rule import Rule


def rules_table(registry: Mapping[str, Type[Rule]]) -> str:
    lines = [
        "| Code | Name | Default | Fix | Verifier claim |",
        "| --- | --- | --- | --- | --- |",
    ]
    for code, rule in registry.items():
        fix = rule.FIX_SAFETY.value if rule.FIX_SAFETY is not None else "none"
        default = "on" if rule.DEFAULT_ON else "opt-in"
        lines.append(f"| {code} | {rule.NAME} | {default} | {fix} | {rule.CLAIM.value} |")
    return "\n".join(lines)


def _indent(code: str) -> str:
    return "\n".join("    " + line if line else "" for line in code.rstrip("\n").split("\n"))


def explain(rule: Type[Rule]) -> str:
    parts: List[str] = [f"# {rule.CODE} {rule.NAME}", ""]
    parts.append(inspect.cleandoc(rule.__doc__ or "").strip())
    fix = rule.FIX_SAFETY.value if rule.FIX_SAFETY is not None else "none"
    parts += ["", f"Default: {'on' if rule.DEFAULT_ON else 'opt-in (select it)'}. "
                  f"Fix: {fix}. Verifier claim: {rule.CLAIM.value}."]
    if rule.VALID:
        parts += ["", "## Not reported (look-alikes)"]
        for example in rule.VALID:
            parts += ["", _indent(example)]
    if rule.INVALID:
        parts += ["", "## Reported"]
        for example in rule.INVALID:
            parts += ["", _indent(example.code)]
            if example.fixed is not None:
                parts += ["", "  fixed:", "", _indent(example.fixed)]
    return "\n".join(parts) + "\n"
