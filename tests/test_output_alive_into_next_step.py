"""MEM207 beyond its examples: where the step's backward is, what reads the name elsewhere, where
the `del` goes, and when no fix is offered."""

from __future__ import annotations

import textwrap

from memlint.engine import check, fix
from memlint.rules import registry

RULE = registry()["MEM207"]


def findings(source: str):
    return [f for f in check(textwrap.dedent(source), "t.py", [RULE]).findings if f.code == "MEM207"]


def fixed(source: str) -> str:
    return fix(textwrap.dedent(source), "t.py", [RULE]).source


def test_points_at_the_binding_and_says_how_long_it_lives():
    (in_loop,) = findings("""
        import torch
        for X, Y in batches:
            logits, loss = model(X, Y)
            loss.backward()
            optimizer.step()
    """)
    assert in_loop.line == 4 and "into the next step's forward" in in_loop.message
    (in_step,) = findings("""
        import torch
        def train_step(model, optimizer, X, Y):
            logits, loss = model(X, Y)
            loss.backward()
            optimizer.step()
            return loss.item()
    """)
    assert in_step.line == 4 and "until the step returns" in in_step.message
    # the H200 figure is quoted for a loop over a dataset only, like the fixture it was measured on
    assert "H200" in in_loop.message and "H200" not in in_step.message


def test_the_backward_may_be_in_a_helper_the_step_calls():
    source = """
        import torch
        def update(loss):
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        for X, Y in batches:
            logits, loss = model(X, Y)
            update(loss)
    """
    assert len(findings(source)) == 1
    assert "    logits, loss = model(X, Y)\n    del logits\n    update(loss)\n" in fixed(source)


def test_not_in_a_test_nor_without_an_optimizer_step():
    assert not findings("""
        import torch
        def test_gradients_flow():
            for X, Y in batches:
                logits, loss = model(X, Y)
                loss.backward()
                optimizer.step()
    """)
    assert not findings("""
        import torch
        for X, Y in batches:
            logits, loss = model(X, Y)
            loss.backward()
            print(model.head.weight.grad.norm())
    """)


def test_not_at_module_level_without_a_loop():
    assert not findings("""
        import torch
        logits, loss = model(X, Y)
        loss.backward()
        optimizer.step()
    """)


def test_a_later_loop_that_binds_the_name_again_does_not_read_it():
    source = """
        import torch
        from transformers import AutoModelForCausalLM
        def main(model, train, valid):
            for epoch in range(3):
                for batch in train:
                    outputs = model(**batch)
                    loss = outputs.loss
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
                model.eval()
                for batch in valid:
                    with torch.no_grad():
                        outputs = model(**batch)
                    losses.append(outputs.loss.item())
    """
    assert len(findings(source)) == 1
    assert "loss = outputs.loss\n            del outputs\n" in fixed(source)


def test_silent_when_the_name_may_still_be_read():
    # the step hands its logits back: analysis.liveness tells every other read that sees them
    assert not findings("""
        import torch
        def train_step(model, X, Y):
            logits, loss = model(X, Y)
            loss.backward()
            optimizer.step()
            return logits
    """)


def test_the_del_goes_into_the_with_that_also_holds_the_backward():
    source = """
        import torch
        import torch.nn.functional as F
        vocab_size = 32000
        for inputs, labels in loader:
            output = model(inputs)
            with loss_parallel():
                loss = F.cross_entropy(output.reshape(-1, output.size(-1)), labels.reshape(-1))
                fabric.backward(loss)
            optimizer.step()
    """
    assert "labels.reshape(-1))\n        del output\n        fabric.backward(loss)\n" in fixed(source)


def test_no_fix_when_the_last_read_and_the_backward_share_a_branch():
    source = """
        import torch
        import torch.nn.functional as F
        vocab_size = 32000
        for inputs, labels in loader:
            output = model(inputs)
            if labels is not None:
                loss = F.cross_entropy(output.view(-1, vocab_size), labels.view(-1))
                loss.backward()
            optimizer.step()
    """
    (finding,) = findings(source)
    assert finding.fix is None
    assert fixed(source) == textwrap.dedent(source)


def test_underscore_read_later_is_deleted_rather_than_dropped():
    source = """
        import torch
        for X, Y in batches:
            _, loss = model(X, Y)
            print(_.shape)
            loss.backward()
            optimizer.step()
    """
    assert "    print(_.shape)\n    del _\n    loss.backward()\n" in fixed(source)


def test_loss_first_in_the_tuple():
    source = """
        import torch
        for X, Y in batches:
            loss, _ = model(X, Y)
            loss.backward()
            optimizer.step()
    """
    assert "    loss = model(X, Y)[0]\n" in fixed(source)


def test_not_in_a_test_module_nor_a_test_class():
    source = textwrap.dedent("""
        import torch
        for X, Y in batches:
            logits, loss = model(X, Y)
            loss.backward()
            optimizer.step()
    """)
    assert check(source, "train.py", [RULE]).findings
    assert not check(source, "tests/test_train.py", [RULE]).findings
    assert not findings("""
        import torch
        class TrainingTest(unittest.TestCase):
            def check_step(self):
                for X, Y in batches:
                    logits, loss = model(X, Y)
                    loss.backward()
                    optimizer.step()
    """)
