"""memlint.analysis.liveness: which reads can see the value one assignment binds."""

from __future__ import annotations

import textwrap
from typing import List, Optional

import libcst as cst

from memlint.analysis import Facts


def _reads(source: str, name: str = "logits") -> Optional[List[int]]:
    """The lines of the reads that see the value the first `name = model(...)` binds, up to the
    first `backward()` after it, inside the loop around it (else its function); None when some
    read elsewhere may see it."""
    module = cst.parse_module(textwrap.dedent(source))
    wrapper = cst.metadata.MetadataWrapper(module, unsafe_skip_copy=True)
    lines = wrapper.resolve(cst.metadata.PositionProvider)
    facts = Facts(module)
    tree = facts.tree
    assign = next(n for n in tree.nodes if isinstance(n, cst.Assign) and isinstance(n.value, cst.Call)
                  and name in {e.value.value for e in getattr(n.targets[0].target, "elements", ())
                               if isinstance(e.value, cst.Name)} | {getattr(n.targets[0].target, "value", "")})
    target = next(t for t in tree.nodes if isinstance(t, cst.Name) and t.value == name
                  and tree.contains(assign.targets[0], t))
    backward = next(n for n in tree.nodes if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
                    and n.func.attr.value == "backward" and tree.order(n) > tree.order(assign))
    loops = tree.loops_around(assign)
    step = loops[0].body if loops else tree.scope_of(assign)
    reads = facts.liveness.reads_of(target, step, tree.order(backward))
    return None if reads is None else [lines[r].start.line for r in reads]


def test_reads_before_the_backward_are_listed():
    assert _reads("""
        for X, Y in batches:
            logits, loss = model(X, Y)
            print(logits.shape)
            loss.backward()
    """) == [4]


def test_a_read_after_the_backward_after_the_loop_or_in_the_next_iteration_sees_it():
    for source in ("""
        for X, Y in batches:
            logits, loss = model(X, Y)
            loss.backward()
            print(logits.shape)
    """, """
        for X, Y in batches:
            logits, loss = model(X, Y)
            loss.backward()
        print(logits.shape)
    """, """
        for epoch in range(3):
            if epoch:
                print(logits.shape)
            for X, Y in batches:
                logits, loss = model(X, Y)
                loss.backward()
    """, """
        for X, Y in batches:
            logits, loss = model(X, Y)
            loss.backward()
            logits = logits.float()
    """):
        assert _reads(source) is None, source


def test_bound_again_in_the_step_nested_or_global_reads_are_unknown():
    for source in ("""
        for x, y in loader:
            logits = model(x)
            logits = logits.float()
            loss.backward()
    """, """
        for x, y in loader:
            logits = model(x)
            hooks.append(lambda: logits.shape)
            loss.backward()
    """, """
        def train():
            global logits
            for x, y in loader:
                logits = model(x)
                loss.backward()
    """):
        assert _reads(source) is None, source


def test_exec_before_the_loop_cannot_read_it_exec_in_the_loop_can():
    assert _reads("""
        exec(open('configurator.py').read())
        for X, Y in batches:
            logits, loss = model(X, Y)
            loss.backward()
    """) == []
    assert _reads("""
        for X, Y in batches:
            exec(hook)
            logits, loss = model(X, Y)
            loss.backward()
    """) is None


def test_a_read_after_a_later_binding_that_surely_ran_does_not_see_it():
    assert _reads("""
        def main():
            for epoch in range(3):
                for batch in train:
                    outputs = model(**batch)
                    loss = outputs.loss
                    loss.backward()
                for batch in valid:
                    with torch.no_grad():
                        outputs = model(**batch)
                    print(outputs.loss)
    """, "outputs") == [6]
    # after a loop that may not run, the read may still see the training step's value
    assert _reads("""
        def main():
            for batch in train:
                outputs = model(**batch)
                loss = outputs.loss
                loss.backward()
            for outputs in valid:
                pass
            print(outputs)
    """, "outputs") is None
    # the read is the value of the rebinding: it reads the training step's value
    assert _reads("""
        def main():
            for batch in train:
                outputs = model(**batch)
                loss = outputs.loss
                loss.backward()
            outputs = outputs.logits
    """, "outputs") is None


def test_name_uses_are_found_once_a_scope_in_evaluation_order():
    source = """
        def step():
            out = model(x)
            loss = f(out)
            def later():
                return out
    """
    facts = Facts(cst.parse_module(textwrap.dedent(source)))
    step = facts.module.body[0]
    uses = facts.liveness.name_uses(step)
    assert uses is facts.liveness.name_uses(step)
    assert [(u.store, u.nested) for u in uses.uses if u.name == "out"] == [(True, False), (False, False), (False, True)]
