"""`per_node`: a fact's answer is computed once per node, and never handed to another node."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.memo import per_node


class _Counting:
    def __init__(self) -> None:
        self.asked = 0

    @per_node
    def named_model(self, node: cst.CSTNode) -> bool:
        self.asked += 1
        return type(node) is cst.Name and node.value == "model"


def test_each_node_is_answered_once_and_each_fact_object_keeps_its_own_answers():
    model, other = cst.Name("model"), cst.Name("model")
    fact = _Counting()
    assert fact.named_model(model) and fact.named_model(model) and fact.asked == 1
    assert fact.named_model(other) and fact.asked == 2  # an equal node is another node
    second = _Counting()
    assert second.named_model(model) and second.asked == 1


def test_an_answer_kept_under_a_reused_id_is_not_handed_to_the_new_node():
    fact = _Counting()
    gone = cst.Name("model")
    assert fact.named_model(gone)
    newcomer = cst.Name("optimizer")
    # what a freed node's id reused by a new one looks like from inside
    fact.__dict__["_answers_named_model"][id(newcomer)] = (gone, True)
    assert fact.named_model(newcomer) is False and fact.asked == 2
