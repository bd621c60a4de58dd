"""Code as rules show it in their messages and write it in their fixes.

Not a rule (the registry skips modules whose name starts with `_`): what several rules share
to render a finding lives here, so that no rule imports from another. Facts about the linted
code belong in memlint.analysis instead.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst


class _OneLine(cst.CSTTransformer):
    """Code laid out on one line: brackets broken over lines and backslash continuations
    become one space, and comments go (a `# noqa` quoted in a message would read as one)."""

    def leave_ParenthesizedWhitespace(self, original: cst.ParenthesizedWhitespace,
                                      updated: cst.ParenthesizedWhitespace) -> cst.SimpleWhitespace:
        return cst.SimpleWhitespace(" ")

    def leave_SimpleWhitespace(self, original: cst.SimpleWhitespace,
                               updated: cst.SimpleWhitespace) -> cst.SimpleWhitespace:
        return cst.SimpleWhitespace(" ") if "\\" in updated.value else updated

    def leave_TrailingWhitespace(self, original: cst.TrailingWhitespace,
                                 updated: cst.TrailingWhitespace) -> cst.TrailingWhitespace:
        return updated.with_changes(whitespace=cst.SimpleWhitespace(""), comment=None)

    def leave_EmptyLine(self, original: cst.EmptyLine, updated: cst.EmptyLine) -> cst.RemovalSentinel:
        return cst.RemovalSentinel.REMOVE


def show(node: cst.CSTNode) -> str:
    """The node's code for a message: on one line, without comments, cut to 40 characters."""
    code = cst.Module([]).code_for_node(node.visit(_OneLine()))
    text = " ".join(line.strip() for line in code.splitlines() if line.strip())  # a block's lines, a long string's
    return text if len(text) <= 40 else text[:37] + "..."


def detached(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`expr.detach()`, parenthesizing `expr` when it needs it."""
    if not type(expr) in (cst.Name, cst.Attribute, cst.Call, cst.Subscript) and not expr.lpar:
        expr = expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(cst.Attribute(expr, cst.Name("detach")))


def with_keyword(call: cst.Call, keyword: str, value: cst.BaseExpression) -> cst.Call:
    """`call` with `keyword=value` added as its last argument, laid out like the arguments before it
    (a call written one argument per line gets the new one on a line of its own)."""
    new = cst.Arg(value, keyword=cst.Name(keyword), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
    if not call.args:
        return call.with_changes(args=[new])
    *rest, last = call.args
    if type(last.comma) is cst.Comma:  # a trailing comma: the new argument goes after it, keeping it
        separator = last.comma.with_changes(whitespace_after=call.whitespace_before_args) \
            if type(last.comma.whitespace_after) is cst.ParenthesizedWhitespace else last.comma
        return call.with_changes(args=[*rest, last.with_changes(comma=separator), new.with_changes(comma=last.comma)])
    moved = new.with_changes(whitespace_after_arg=last.whitespace_after_arg)
    last = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
                             whitespace_after_arg=cst.SimpleWhitespace(""))
    return call.with_changes(args=[*rest, last, moved])


def detach_before_move(value: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """`out.detach()`; `out.detach().cpu()` for `out.cpu()` (and `.to(...)` alike); None for a
    tuple, list or dict (each element would need it)."""
    if type(value) in (cst.Tuple, cst.List, cst.Dict, cst.Set, cst.StarredElement):
        return None
    if type(value) is cst.Call and type(value.func) is cst.Attribute and \
            value.func.attr.value in ("cpu", "to"):
        return value.with_changes(func=value.func.with_changes(value=detached(value.func.value)))
    return detached(value)
