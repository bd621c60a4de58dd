"""Code as rules show it in their messages and write it in their fixes.

Not a rule (the registry skips modules whose name starts with `_`): what several rules share
to render a finding lives here, so that no rule imports from another. Facts about the linted
code belong in memlint.analysis instead.
"""

from __future__ import annotations

from typing import Optional

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


def detach_before_move(value: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """`out.detach()`; `out.detach().cpu()` for `out.cpu()` (and `.to(...)` alike); None for a
    tuple, list or dict (each element would need it)."""
    if isinstance(value, (cst.Tuple, cst.List, cst.Dict, cst.Set, cst.StarredElement)):
        return None
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and \
            value.func.attr.value in ("cpu", "to"):
        return value.with_changes(func=value.func.with_changes(value=detached(value.func.value)))
    return detached(value)
