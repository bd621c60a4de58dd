"""Messages quote a figure measured on a fixture only where the code has that fixture's shape
(a loop over a dataset, memlint.analysis.figures); elsewhere they explain the mechanism."""

from __future__ import annotations

import re
import textwrap

import pytest

from memlint.engine import check
from memlint.rules import registry

RULES = registry()


def _message(source: str, code: str) -> str:
    [finding] = check(textwrap.dedent(source), "t.py", [RULES[code]]).findings
    return finding.message


def test_mem203_quotes_its_figure_for_a_loop_over_a_dataset_only():
    over_loader = _message("""\
        import torch
        model.eval()
        for x, y in val_loader:
            preds.append(model(x))
        """, "MEM203")
    assert "1792 MB" in over_loader
    two_iterations = _message("""\
        import torch

        def check_shapes(model, examples):
            model.eval()
            for x in examples:
                assert model(x).shape == (2, 3)
        """, "MEM203")
    interactive = _message("""\
        import torch

        def translate(model):
            model.eval()
            while True:
                sentence = input("> ")
                print(model.decode(encode(sentence)))
        """, "MEM203")
    for message in (two_iterations, interactive):
        assert "MB" not in message and "H200" not in message
        assert "saves activations for a backward that never comes" in message


def test_mem201_quotes_its_figure_for_a_loop_over_a_dataset_only():
    source = """\
        import torch

        def validate(model, batches):
            model.eval()
            total = 0.0
            for x, y in batches:
                total += criterion(model(x), y)
            return total
        """
    assert "1 GB" in _message(source.replace("batches", "val_loader"), "MEM201")
    message = _message(source.replace("for x, y in batches", "for x, y in [(a, b), (c, d)]"), "MEM201")
    assert "1 GB" not in message and "keeping every iteration's saved activations alive" in message


_FIGURE = re.compile(r"\d+(\.\d+)? ?(MB|MiB|GB|ms)\b|H200|measured|O\(n")
_OVER_DATASET = re.compile(r"for .+ in .*(loader|batches)")


@pytest.mark.parametrize("code,index", [(code, i) for code, rule in RULES.items() for i in range(len(rule.INVALID))])
def test_no_example_gets_a_figure_its_code_does_not_have_the_shape_for(code, index):
    example = RULES[code].INVALID[index]
    for finding in check(example.code, "t.py", [RULES[code]]).findings:
        if _FIGURE.search(finding.message):
            assert _OVER_DATASET.search(example.code), finding.message
