"""Fuzzing the engine and the fixer with mutated training scripts.

Each example is one of the project's own fixtures or rule examples, mutated line by line
(lines dropped, repeated, swapped, re-indented, or statements that matter to the rules put in).
Whatever comes out, linting with every rule either reports findings or says in one line that
the code does not parse (SourceError); fixing never raises anything else, never writes code that
does not compile, and a second fix of the result changes nothing more than a first one would.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlint.engine import SourceError, check, fix
from memlint.rules import registry
from memlint.torch_target import TorchVersion

RULES = list(registry().values())
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SEEDS = sorted({p.read_text(encoding="utf-8") for p in FIXTURES.glob("*/*.py")}
               | {example for rule in RULES for example in rule.VALID}
               | {example.code for rule in RULES for example in rule.INVALID})
# Statements the rules look at, to put where they were not.
STATEMENTS = [
    "with torch.no_grad():", "with torch.autocast(\"cuda\"):", "for x in loader:", "while True:",
    "loss.backward()", "loss.backward(retain_graph=True)", "optimizer.step()", "optimizer.zero_grad()",
    "optimizer.zero_grad(set_to_none=False)", "model.eval()", "out = model(x)", "total += loss",
    "preds.append(model(x))", "self.outs.append(out)", "del out", "x = torch.randn(n, n)",
    "acc = torch.cat((acc, out.cpu()))", "scaler = torch.cuda.amp.GradScaler()", "return out",
    "yield out", "break", "pass", "out, h = rnn(x, h)", "@torch.no_grad()", "def helper(self, x):",
    "class Net(torch.nn.Module):",
]


def _mutate(source: str, edits) -> str:
    lines = source.splitlines()
    for kind, a, b, text in edits:
        if not lines:
            break
        i, j = a % len(lines), b % len(lines)
        if kind == "drop":
            del lines[i]
        elif kind == "repeat":
            lines.insert(i, lines[i])
        elif kind == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "indent":
            lines[i] = "    " + lines[i]
        elif kind == "dedent":
            lines[i] = lines[i][4:] if lines[i].startswith("    ") else lines[i]
        else:  # put a statement in, at the indentation of the line it goes before
            indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
            lines.insert(i, indent + text)
    return "\n".join(lines) + "\n"


EDITS = st.lists(st.tuples(st.sampled_from(["drop", "repeat", "swap", "indent", "dedent", "insert", "insert"]),
                           st.integers(0, 200), st.integers(0, 200), st.sampled_from(STATEMENTS)),
                 min_size=1, max_size=4)
TARGETS = st.sampled_from([None, TorchVersion(1, 8), TorchVersion(2, 3)])


def _compiles(source: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "fuzz.py", "exec", dont_inherit=True)
        return True
    except (SyntaxError, ValueError):
        return False


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(SEEDS), edits=EDITS, target=TARGETS)
def test_mutated_scripts_lint_and_fix_without_escaping_errors(seed, edits, target):
    source = _mutate(seed, edits)
    try:
        findings = check(source, "fuzz.py", RULES, target).findings
    except SourceError:
        assert not _compiles(source)  # only code Python rejects is refused
        return
    assert all(f.line >= 1 and f.column >= 1 for f in findings)
    result = fix(source, "fuzz.py", RULES, unsafe=True, target_torch=target)  # SourceError here: a broken fix
    assert _compiles(result.source)
    again = fix(result.source, "fuzz.py", RULES, unsafe=True, target_torch=target)
    assert again.source == fix(again.source, "fuzz.py", RULES, unsafe=True, target_torch=target).source
