"""Every rule's VALID and INVALID examples, run as tests (they are also its documentation)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlint.engine import check, fix
from memlint.findings import Safety
from memlint.rules import registry

RULES = registry()
VALID = [(code, i, src) for code, rule in RULES.items() for i, src in enumerate(rule.VALID)]
INVALID = [(code, i, ex) for code, rule in RULES.items() for i, ex in enumerate(rule.INVALID)]


def _codes(source: str):
    return [f.code for f in check(source, "example.py", list(RULES.values())).findings]


@pytest.mark.parametrize("code,index,source", VALID, ids=[f"{c}-valid-{i}" for c, i, _ in VALID])
def test_valid_example_is_not_reported(code, index, source):
    assert code not in _codes(source)


@pytest.mark.parametrize("code,index,example", INVALID, ids=[f"{c}-invalid-{i}" for c, i, _ in INVALID])
def test_invalid_example_is_reported_and_fixed(code, index, example):
    rule = RULES[code]
    assert code in _codes(example.code)
    if example.fixed is None:
        return
    fixed = fix(example.code, "example.py", [rule], unsafe=True).source
    assert fixed == example.fixed
    assert code not in _codes(fixed)
    assert fix(fixed, "example.py", [rule], unsafe=True).source == fixed  # idempotent


@pytest.mark.parametrize("code", sorted(RULES))
def test_rule_is_documented(code):
    rule = RULES[code]
    doc = rule.__doc__ or ""
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Fix safety"):
        assert heading in doc, f"{code} docstring lacks {heading!r}"
    assert rule.VALID and rule.INVALID, f"{code} needs VALID and INVALID examples"
    assert rule.FIX_SAFETY in (None, Safety.SAFE, Safety.UNSAFE)


FIXTURES = sorted((Path(__file__).resolve().parent.parent / "fixtures").rglob("*.py"))
SOURCES = [src for _, _, src in VALID] + [ex.code for _, _, ex in INVALID] + [p.read_text() for p in FIXTURES]


def _found(source: str, rules) -> list:
    return sorted((f.code, f.line, f.column, f.message) for f in check(source, "example.py", rules).findings)


def test_a_rule_finds_the_same_whichever_rules_run_beside_it_and_in_whatever_order():
    """The rules share one module's facts (memlint.analysis), each worked out when a rule first
    asks for it. A fact worked out differently depending on what was asked before it (a cycle
    of calls settled by answering for whichever function is asked first) would make a rule's
    findings depend on the other rules a run selects, and on their order. Every example and
    fixture gives the same findings with the rules in their order, in the reverse order, and
    each rule run alone."""
    rules = list(RULES.values())
    for source in SOURCES:
        together = _found(source, rules)
        assert _found(source, rules[::-1]) == together, source
        alone = sorted(f for rule in rules for f in _found(source, [rule]))
        assert alone == together, source
