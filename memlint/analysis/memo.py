"""`per_node`: a fact's answer kept for each node it is asked of.

Some questions are asked of the same node by many askers (is this call a model's forward? the
steps, the summary, the values and several rules ask it of every call they meet), and their
answer depends only on the node and the module. A method decorated `@per_node` answers each node
once per fact object. The node is kept beside its answer: a node's `id` is then never reused for
another one while the answer lives (nodes a fix makes come and go).
"""

from __future__ import annotations

import functools
from typing import Callable, Dict, Tuple, TypeVar

import libcst as cst

Fact = TypeVar("Fact")
Answer = TypeVar("Answer")


def per_node(method: Callable[[Fact, cst.CSTNode], Answer]) -> Callable[[Fact, cst.CSTNode], Answer]:
    """Keep `method`'s answer for each node, in the fact object's own dictionary."""
    slot = f"_answers_{method.__name__}"

    @functools.wraps(method)
    def answer(self: Fact, node: cst.CSTNode) -> Answer:
        answers: Dict[int, Tuple[cst.CSTNode, Answer]] = self.__dict__.get(slot)  # type: ignore[attr-defined]
        if answers is None:
            answers = self.__dict__[slot] = {}  # type: ignore[attr-defined]
        known = answers.get(id(node))
        if known is not None and known[0] is node:
            return known[1]
        found = method(self, node)
        answers[id(node)] = (node, found)
        return found

    return answer
