"""Positions found a statement at a time are the positions LibCST gives for the whole module."""

from __future__ import annotations

import sys
import textwrap

import pytest

from memlint.analysis.tree import index
from memlint.engine import check, parse
from memlint.positions import Positions, whole_module
from memlint.rules import registry

SHAPES = [
    """\
    import torch; import os
    @torch.no_grad()
    @staticmethod
    async def f(a, b=(1,
                      2)):
        '''doc
    string'''
        async with a as b, c:
            pass
        async for x in y:
            z = x; w = z
        else:
            pass
        return [
            i for i in range(3)
        ]
    """,
    """\
    class Model(nn.Module):
        # a comment above
        def forward(self, x):
            if x is None: return 1
            elif x == 1:
                y = 2
            elif x == 2: y = 3
            else:
                y = 4
            while y:
                y -= 1
            else:
                del y
            try:
                pass
            except (ValueError, KeyError) as error:
                raise
            except Exception:
                pass
            else:
                x = 1
            finally:
                x = 2
            with open(x) as f, \\
                    open(y) as g:
                pass
            return x
    """,
    "if a:\n\tif b:\n\t\tx = torch.zeros(1)\n\telse:\n\t\tpass\n",
    "x = 1\n\n\nif __name__ == '__main__':\n    main()",  # the last line has no line end
    "x = 1\r\nfor i in range(3):\r\n    y = i\r\n",
    "x = 1\nif y:  # a form feed\x0c in a comment\n    z = '\x0c'\n",
]
if sys.version_info >= (3, 10):
    SHAPES.append("match command:\n    case [x, y]:\n        go(x)\n    case _:\n        pass\n")
if sys.version_info >= (3, 11):
    SHAPES.append("try:\n    pass\nexcept* ValueError:\n    x = 1\n")


@pytest.mark.parametrize("source", [textwrap.dedent(s) for s in SHAPES])
def test_every_node_is_where_the_whole_module_puts_it(source):
    module = parse(source)
    tree = index(module)
    whole = whole_module(module)
    positions = Positions(module, source, tree.parents)
    for node in tree.nodes[1:]:
        assert positions[node] == whole[node], type(node).__name__
    assert positions._whole is None  # every node was placed by its statement


def test_findings_cost_their_statements_not_the_file():
    def findings_and_printed(count):
        source = "import torch\n" + "".join(
            f"\ndef evaluate_{i}(model, loader):\n    for x in loader:\n        print(model(x).sum())\n"
            for i in range(count))
        checked = check(source, "t.py", list(registry().values()))
        return len(checked.findings), checked.positions.statements_printed

    small, big = findings_and_printed(10), findings_and_printed(40)
    assert big[0] == 4 * small[0] > 0
    assert big[1] == 4 * small[1]  # statements printed: in proportion to the findings, not more


def _placed(source):
    """The module, its positions found a statement at a time, and LibCST's for the whole module."""
    module = parse(source)
    return module, Positions(module, source, index(module).parents), whole_module(module)


def test_a_statement_whose_text_is_the_files_alone_needs_no_parser():
    source = "import torch\n\n# evaluation\nfor x in loader:\n    out = model(x)\n    total = out.sum()\n"
    module, positions, whole = _placed(source)
    for node in index(module).nodes[1:]:
        assert positions[node] == whole[node], type(node).__name__
    assert not positions.parsed


def test_a_statement_whose_text_repeats_is_placed_by_the_parser():
    # `y = model(x)` stands twice, at the same indentation: the text alone cannot tell which
    source = "for x in a:\n    y = model(x)\nfor x in b:\n    y = model(x)\n"
    module, positions, _ = _placed(source)
    statement = module.body[1].body.body[0]
    assert positions[statement].start.line == 4
    assert positions.parsed
    assert positions[module.body[0].body.body[0]].start.line == 2


def test_the_last_statement_without_its_line_end_is_not_taken_for_its_copy_above():
    # the last line lacks its line end: the statement's text with one stands only above it
    source = "print(torch.cuda.memory_cache())\nx = 1\nprint(torch.cuda.memory_cache())"
    module, positions, whole = _placed(source)
    last = module.body[-1]
    assert positions[last] == whole[last]
    assert positions[last].start.line == 3
