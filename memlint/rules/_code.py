"""Code as rules show it in their messages and write it in their fixes.

Not a rule (the registry skips modules whose name starts with `_`): what several rules share
to render a finding lives here, so that no rule imports from another. Facts about the linted
code belong in memlint.analysis instead.
"""

from __future__ import annotations

import libcst as cst


def show(node: cst.CSTNode) -> str:
    """The node's code for a message, cut to 40 characters."""
    text = cst.Module([]).code_for_node(node).strip()
    return text if len(text) <= 40 else text[:37] + "..."


def detached(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`expr.detach()`, parenthesizing `expr` when it needs it."""
    if not isinstance(expr, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not expr.lpar:
        expr = expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(cst.Attribute(expr, cst.Name("detach")))
