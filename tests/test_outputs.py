"""memlint.analysis.outputs: the signs of a vocabulary-sized output, and what each read of an
output takes from it."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from memlint.analysis import Facts


def _facts(source: str) -> Facts:
    return Facts(cst.parse_module(textwrap.dedent(source)))


def _read(source: str, name: str, occurrence: int = 0):
    """What the `occurrence`-th read of `name` takes (the first by default)."""
    facts = _facts(source)
    loads = [use.node for use in facts.liveness.name_uses(facts.module).uses if use.name == name and not use.store]
    return facts.outputs.read_of(loads[occurrence])


@pytest.mark.parametrize("source,expected", [
    ("from transformers import AutoModelForCausalLM\n", True),
    ("from transformers import T5ForConditionalGeneration\n", True),
    ("model = GPT2LMHeadModel(config)\n", True),
    ("vocab_size = 50304\n", True),
    ("ntokens = len(corpus.dictionary)\n", True),
    ("model = Translator(tgt_vocab_size=len(tgt_vocab))\n", True),
    ("model = resnet18(num_classes=10)\n", False),
    ("from transformers import AutoTokenizer, AutoModelForSequenceClassification\n", False),
    # a classifier of transformers beside a vocabulary: its logits are the classifier's
    ("from transformers import BertForSequenceClassification\nvocab_size = 30522\n", False),
])
def test_language_model_module(source, expected):
    assert _facts(source).outputs.language_model_module is expected


@pytest.mark.parametrize("name,expected", [
    ("logits", True), ("lm_logits", True), ("token_logits", True), ("logit", False), ("out", False),
    ("logits_mask", False),
])
def test_names_logits(name, expected):
    assert _facts("").outputs.names_logits(name) is expected


@pytest.mark.parametrize("expression,kind,per_token,vocabulary", [
    ("F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))", "scores", True, False),
    ("loss_fn(logits.reshape(-1, vocab_size), y.reshape(-1))", "scores", True, True),
    ("loss_fn(logits[:, :-1].contiguous().view(-1, len(vocab)), y.view(-1))", "scores", True, True),
    ("F.cross_entropy(logits.float().transpose(1, 2), y)", "scores", True, False),
    ("F.cross_entropy(logits.flatten(0, 1), y.flatten())", "scores", True, False),
    ("F.cross_entropy(input=logits, target=y)", "scores", False, False),
    ("F.cross_entropy(logits, y)", "scores", False, False),
    ("nn.CrossEntropyLoss()(logits, y)", "scores", False, False),
    ("F.log_softmax(logits, dim=-1)", "scores", False, False),
    ("logits.softmax(-1)", "scores", False, False),
    ("logits.loss", "loss", False, False),
    ("logits['loss']", "loss", False, False),
    ("logits.logits.argmax(-1)", "value", False, False),
    ("(logits.argmax(-1) == y).sum().item()", "value", False, False),
    ("logits.shape[0]", "value", False, False),
    ("len(logits)", "value", False, False),
    ("torch.argmax(logits, dim=-1)", "value", False, False),
])
def test_reads_that_do_not_keep_the_output(expression, kind, per_token, vocabulary):
    source = f"""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        loss_fn = nn.CrossEntropyLoss()
        logits = model(x)
        result = {expression}
    """
    read = _read(source, "logits")
    assert read is not None and (read.kind, read.per_token, read.vocabulary) == (kind, per_token, vocabulary)


@pytest.mark.parametrize("expression", [
    "F.nll_loss(logits, y)",  # log-probabilities: nll_loss keeps its input for backward
    "F.mse_loss(logits, y)",
    "criterion(logits.view(-1, vocab_size), y)",  # a loss of unknown kind
    "logits.sum()",
    "logits.detach()",  # shares the storage
    "logits",  # an alias
    "[logits]",
    "F.cross_entropy(y, logits)",  # the target, not the scores
    "keep(logits.view(-1, vocab_size))",
    "logits.hidden_states",
    "logits[mask]",  # advanced indexing copies, but what it feeds is unknown
])
def test_reads_that_may_keep_or_need_the_output(expression):
    source = f"""
        import torch
        import torch.nn.functional as F
        logits = model(x)
        result = {expression}
    """
    assert _read(source, "logits") is None


def test_a_loss_bound_to_a_cross_entropy_object_elsewhere_counts():
    source = """
        import torch
        class Trainer:
            def __init__(self):
                self.criterion = torch.nn.CrossEntropyLoss(ignore_index=0)
            def step(self, x, y):
                logits = self.model(x)
                return self.criterion(logits.view(-1, logits.size(-1)), y.view(-1))
    """
    facts = _facts(source)
    step = facts.module.body[1].body.body[1]
    loads = [u.node for u in facts.liveness.name_uses(step).uses if u.name == "logits" and not u.store]
    read = facts.outputs.read_of(loads[0])
    assert read is not None and read.kind == "scores" and read.per_token


def test_names_vocabulary_alone_ignores_a_classifier_beside_it():
    outputs = _facts("from transformers import BertForSequenceClassification\nvocab_size = 30522\n").outputs
    assert outputs.names_vocabulary and not outputs.language_model_module
    assert not _facts("from transformers import AutoModelForCausalLM\n").outputs.names_vocabulary


@pytest.mark.parametrize("source,expected", [
    ("model = resnet18(num_classes=10)\n", True),
    ("n_classes = len(dataset.classes)\n", True),
    ("config = AutoConfig.from_pretrained(name, num_labels=2)\n", True),
    ("from transformers import AutoModelForTokenClassification\n", True),
    ("vocab_size = 50304\n", False),
    ("model = GPT(config)\n", False),
])
def test_classifier_module(source, expected):
    assert _facts(source).outputs.classifier_module is expected
