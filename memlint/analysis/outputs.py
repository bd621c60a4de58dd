"""Outputs: how large a model's output is likely to be, and what code takes from it.

A language model's logits hold a score for every vocabulary entry at every position: GPT-2 at
12 x 1024 tokens has 50,304 scores a token, 1.2 GiB in bf16, often the largest tensor of a
training step; a classifier's scores (a few per example) are tiny. Whether keeping an output
alive longer costs memory depends on that size, and on whether backward keeps the output
anyway: a cross-entropy, a softmax or a log-softmax saves its own result for backward, not its
input, so scores consumed only by them are not needed once the loss is computed.

Asked as `facts.outputs`:

- `language_model_module`: the module names a language model or a vocabulary: a transformers
  class with a language-modelling head (`AutoModelForCausalLM`, `GPT2LMHeadModel`,
  `T5ForConditionalGeneration`, `BertForMaskedLM`), a class named for a language model's
  family (`Llama`, `GPT`, `TransformerLM`) where nothing names a number of classes, or a
  vocabulary (`vocab_size`, `ntokens`,
  `tgt_vocab`), and no transformers class with a classification head
  (`...ForSequenceClassification`, `...ForQuestionAnswering`); `names_vocabulary`: the
  vocabulary alone; `classifier_module`: it names a number of classes or labels
  (`num_classes`, `num_labels`) or a transformers classifier;
- `compiled`: the module compiles a model (`torch.compile`, `model.compile()`), whose backward
  keeps the logits anyway;
- `engine_runs_step`: the module is written for accelerate's Megatron-LM engine, whose
  `model(**batch)` runs forward, backward and the optimizer step and returns the loss alone;
- `names_logits(name)`: a name that says it holds logits (`logits`, `lm_logits`);
  `names_token_ids(name)`: one that says it holds token ids (`sampled_tokens`, `input_ids`);
- `read_of(name)`: what a read of a name holding an output takes from it (`OutputRead`):
  "loss" (the loss field of a model's result: `out.loss`, `out["loss"]`), "scores" (the input
  of a cross-entropy, softmax or log-softmax, through views, casts and slices), "value" (a
  plain value, or a new tensor without the output's storage: `.shape`, `.item()`,
  `.argmax(-1)`, a comparison); None for any other read (it may alias the output, or backward
  may need it). A "scores" read says whether the scores are flattened to one row per
  position (`out.view(-1, out.size(-1))`, `out.flatten(0, 1)`, `out.transpose(1, 2)`) and
  whether the class dimension is named like a vocabulary (`out.view(-1, vocab_size)`);
- `rebound_view(name)`: the read is a view bound to the same name again (`out = out.view(B * T,
  -1)`): the new binding holds the output's storage; `view_of_itself(target)`: such a binding.

Asked by: MEM207; MEM202 and MEM104 (`names_token_ids`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import FrozenSet, Optional, Tuple

import libcst as cst

from memlint.analysis.dataflow import SCALAR_ATTRIBUTES, SCALAR_FUNCTIONS, SCALAR_METHODS
from memlint.analysis.guards import Guards
from memlint.analysis.receivers import Receivers
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import TreeIndex, dotted_name, last_part

# transformers classes whose head scores the vocabulary at every position
_LANGUAGE_MODEL_CLASS = re.compile(r"(ForCausalLM|LMHeadModel|ForConditionalGeneration|ForMaskedLM|Seq2SeqLM|"
                                   r"ForPreTraining|WithLMHead|ForMaskedImageModeling)$")
# a language model's own class, by its family's name (picotron's `Llama`, a `TransformerLM`)
_LANGUAGE_MODEL_NAME = re.compile(r"^(Llama\d*|LLaMA|Mistral|Mixtral|Qwen\d*|Gemma\d*|GPT\d*|GPTNeoX|Falcon|Olmo\d*|"
                                  r"\w*LanguageModel|(Transformer|RNN|LSTM|GRU|Causal|Char|Word|Masked)LM)$")
# transformers classes whose head scores a few labels per example (or per token)
_CLASSIFIER_CLASS = re.compile(r"For\w*Classification$|ForQuestionAnswering$|ForMultipleChoice$|"
                               r"ForNextSentencePrediction$|ForObjectDetection$|ForSemanticSegmentation$")
# The same patterns over a module's names joined a name a line (`Outputs.builds_language_model`).
_NAMED_LANGUAGE_MODEL = re.compile(f"{_LANGUAGE_MODEL_CLASS.pattern}|{_LANGUAGE_MODEL_NAME.pattern}", re.MULTILINE)
_NAMED_CLASSIFIER = re.compile(_CLASSIFIER_CLASS.pattern, re.MULTILINE)
_VOCABULARY = re.compile(r"^(\w+_)?(n_?)?vocab(_size|ulary|ulary_size)?$|^n_?tokens?$|^num_tokens$", re.IGNORECASE)
_CLASSES = re.compile(r"^(num|n)_?(classes|labels|class)$", re.IGNORECASE)
_NAMED_CLASSES = re.compile(_CLASSES.pattern, re.IGNORECASE | re.MULTILINE)
_MEGATRON_ENGINE = frozenset({"MEGATRON_LM", "MegatronLMDummyScheduler", "MegatronLMPlugin"})
_LOGITS = re.compile(r"^(\w+_)?logits$")
# Token ids a decoder picks or returns (`sampled_tokens`, `input_ids`, `hyps`): a few integers a step.
_TOKEN_IDS = re.compile(r"(^|_)(ids|hyps?|hypothes[ie]s)$|^(predicted|generated|decoded|sampled|output)_tokens?$")
# Methods that give a view or a cast of a tensor: the result is the same scores.
_VIEWS = frozenset({"view", "reshape", "flatten", "contiguous", "float", "double", "half", "bfloat16", "to",
                    "transpose", "permute", "squeeze", "unsqueeze", "view_as", "reshape_as", "type_as", "narrow"})
# Consumers that keep their result for backward, not their input.
_SCORE_METHODS = frozenset({"softmax", "log_softmax"})
_SCORE_FUNCTIONS = frozenset({"torch.nn.functional.cross_entropy", "torch.nn.functional.softmax",
                              "torch.nn.functional.log_softmax", "torch.softmax", "torch.log_softmax",
                              "torch.special.softmax", "torch.special.log_softmax"})
_SCORE_LOSSES = frozenset({"torch.nn.CrossEntropyLoss", "torch.nn.modules.loss.CrossEntropyLoss"})
# Methods whose result is a plain value or a new tensor that holds neither the output's storage
# nor its graph.
_VALUE_METHODS = SCALAR_METHODS | frozenset({
    "argmax", "argmin", "argsort", "eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf", "isfinite",
    "any", "all", "count_nonzero"})
_VALUE_FUNCTIONS = frozenset({"torch.argmax", "torch.argmin", "torch.isnan", "torch.isinf", "torch.isfinite"})


@dataclass(frozen=True)
class OutputRead:
    """What one read of a name holding a model's output takes from it."""

    kind: str  # "loss", "scores", "value", "view" (bound to the same name again: `out = out.view(B * T, -1)`)
    node: cst.CSTNode  # the expression that consumes it (the cross-entropy call, `out.loss`, ...)
    per_token: bool = False  # scores flattened to one row per position
    vocabulary: bool = False  # their class dimension is named like a vocabulary


def _is_minus_one(expr: cst.BaseExpression) -> bool:
    return type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Minus and \
        type(expr.expression) is cst.Integer and expr.expression.value == "1"


def _basic_index(expr: cst.BaseExpression) -> bool:
    """An index that takes a view: an integer, `...`, `None`."""
    return type(expr) in (cst.Integer, cst.Ellipsis) or _is_minus_one(expr) or (
        type(expr) is cst.UnaryOperation and type(expr.expression) is cst.Integer) or (
        type(expr) is cst.Name and expr.value == "None")


def _integers(call: cst.Call) -> Optional[tuple]:
    """The call's positional arguments as integers (`-1` included); None if one is not."""
    found = []
    for arg in call.args:
        if arg.keyword is not None or arg.star:
            return None
        if type(arg.value) is cst.Integer:
            found.append(int(arg.value.value))
        elif _is_minus_one(arg.value):
            found.append(-1)
        else:
            return None
    return tuple(found)


def _per_token(call: cst.Call, method: str) -> bool:
    """A view that lays a (batch, position, class) tensor out as one row per position, or puts
    the classes second as cross-entropy wants them for sequences."""
    if method in ("view", "reshape"):  # `view(-1, V)`, or `view(B * T, -1)`: one row per position
        return len(call.args) == 2 and (_is_minus_one(call.args[0].value) or _is_minus_one(call.args[1].value) and
                                        type(call.args[0].value) is cst.BinaryOperation and
                                        type(call.args[0].value.operator) is cst.Multiply)  # type: ignore[attr-defined]
    if method == "flatten":
        return _integers(call) in ((0, 1), (0, -2))
    if method == "transpose":
        return _integers(call) in ((1, 2), (2, 1), (-1, -2), (-2, -1), (1, -1), (-1, 1))
    if method == "permute":
        return _integers(call) == (0, 2, 1)
    return False


class Outputs:
    """Size signs and reads of model outputs in one module (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, receivers: Receivers, guards: Guards,
                 identifiers: FrozenSet[str]) -> None:
        self.names = names
        self.tree = tree
        self.receivers = receivers
        self.guards = guards
        self.identifiers = identifiers

    @cached_property
    def language_model_module(self) -> bool:
        """The module names a language model or a vocabulary, and no classifier of transformers."""
        if any(_CLASSIFIER_CLASS.search(name) for name in self.identifiers):
            return False
        return self.names_vocabulary or any(_LANGUAGE_MODEL_CLASS.search(name) for name in self.identifiers) or \
            not self.classifier_module and any(_LANGUAGE_MODEL_NAME.match(name) for name in self.identifiers)

    @cached_property
    def builds_language_model(self) -> bool:
        """The module names a language model's class (`T5ForConditionalGeneration`, `GPT`) and
        neither a classifier nor a number of classes or labels: what its functions build for
        other modules is a language model. A vocabulary alone does not say so: it sizes a text
        classifier's embedding as well. Asked of every module a summary is made of, so read
        off the module's names as one text, a name a line (one scan a pattern, not one a name)."""
        names = "\n".join(self.identifiers)
        return bool(_NAMED_LANGUAGE_MODEL.search(names)) and not _NAMED_CLASSIFIER.search(names) and \
            not _NAMED_CLASSES.search(names)

    @cached_property
    def names_vocabulary(self) -> bool:
        """Some name of the module is a vocabulary or its size (`vocab_size`, `tgt_vocab`, `ntokens`)."""
        return any(_VOCABULARY.match(name) for name in self.identifiers)

    @cached_property
    def classifier_module(self) -> bool:
        """The module names a number of classes or labels (`num_classes`, `num_labels`) or a
        transformers classifier: its scores are likely a few per example."""
        return any(_CLASSES.match(name) or _CLASSIFIER_CLASS.search(name) for name in self.identifiers)

    @cached_property
    def compiled(self) -> bool:
        """The module compiles something (`torch.compile(model)`, `model.compile()`): a compiled
        model's backward keeps the logits itself, so binding them costs nothing more (nanoGPT's
        GPT-2 124M on an H200: 9,773 MiB with the logits bound, 9,697 MiB without). A compile
        the code switches off as written is none (build-nanogpt's `use_compile = False`, then
        `if use_compile: model = torch.compile(model)`)."""
        if "compile" not in self.identifiers:
            return False
        return any(type(node) is cst.Call and (self.names.call_name(node) == "torch.compile" or
                                               type(node.func) is cst.Attribute and  # type: ignore[attr-defined]
                                               node.func.attr.value == "compile")  # type: ignore[attr-defined]
                   and not self.guards.dead(node) for node in self.tree.nodes)

    @cached_property
    def engine_runs_step(self) -> bool:
        """The module is written for accelerate's Megatron-LM engine (it names
        `DistributedType.MEGATRON_LM` or the engine's stand-ins, `MegatronLMDummyScheduler`,
        `MegatronLMPlugin`): there `model(**batch)` runs forward, backward and the step inside
        and returns the reduced loss without logits, so a bound output holds nothing large."""
        return bool(_MEGATRON_ENGINE & self.identifiers) and self.names.imports("accelerate")

    @staticmethod
    def names_logits(name: str) -> bool:
        return bool(_LOGITS.match(name))

    @staticmethod
    def names_token_ids(name: str) -> bool:
        return bool(_TOKEN_IDS.search(name))

    def vocabulary_sized(self, expr: cst.BaseExpression) -> bool:
        """`vocab_size`, `config.vocab_size`, `ntokens`, `len(vocab)`."""
        if type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "len" and \
                len(expr.args) == 1:
            expr = expr.args[0].value
        dotted = dotted_name(expr)
        return dotted is not None and bool(_VOCABULARY.match(last_part(dotted)))

    def read_of(self, name: cst.Name) -> Optional[OutputRead]:
        """What the read `name` takes from the output it holds (see the module docstring)."""
        tree = self.tree
        node: cst.CSTNode = name
        per_token = vocabulary = False
        while True:
            parent = tree.parent(node)
            if type(parent) is cst.Attribute and parent.value is node:
                attr = parent.attr.value
                call = tree.parent(parent)
                if type(call) is cst.Call and call.func is parent:
                    if attr in _VIEWS:
                        if _per_token(call, attr):
                            per_token = True
                            vocabulary = vocabulary or (attr in ("view", "reshape") and
                                                        self.vocabulary_sized(call.args[1].value))
                        node = call
                        continue
                    if attr in _SCORE_METHODS:
                        return OutputRead("scores", call, per_token, vocabulary)
                    return OutputRead("value", call) if attr in _VALUE_METHODS else None
                if attr in SCALAR_ATTRIBUTES:
                    return OutputRead("value", parent)
                if attr == "loss" and node is name:
                    return OutputRead("loss", parent)
                if attr == "logits" and node is name:  # the scores of a model's result
                    node = parent
                    continue
                return None
            if type(parent) is cst.Subscript and parent.value is node:
                index = parent.slice[0].slice if len(parent.slice) == 1 else None
                if node is name and type(index) is cst.Index and type(index.value) is cst.SimpleString and \
                        index.value.evaluated_value in ("loss", "logits"):
                    if index.value.evaluated_value == "loss":
                        return OutputRead("loss", parent)
                    node = parent
                    continue
                if all(type(e.slice) is cst.Slice or (type(e.slice) is cst.Index and _basic_index(e.slice.value))
                       for e in parent.slice):
                    node = parent  # `logits[:, :-1]`, `logits[..., -1, :]`: a view
                    continue
                return None
            if type(parent) is cst.Arg and parent.value is node and parent.star == "":
                call = tree.parent(parent)
                if not type(call) is cst.Call or call.func is node:
                    return None
                first = call.args[0] is parent and parent.keyword is None or \
                    (parent.keyword is not None and parent.keyword.value == "input")
                if first and self._consumes_scores(call):
                    return OutputRead("scores", call, per_token, vocabulary)
                qualified = self.names.call_name(call)
                if qualified in _VALUE_FUNCTIONS or (type(call.func) is cst.Name and
                                                     call.func.value in SCALAR_FUNCTIONS and qualified is None):
                    return OutputRead("value", call)
                return None
            if type(parent) in (cst.Comparison, cst.ComparisonTarget):
                return OutputRead("value", parent)
            return None

    def rebound_view(self, name: cst.Name) -> Optional[Tuple[cst.Name, bool]]:
        """Where the read `name` is the whole value, through views, of an assignment to the same
        name (`outputs = outputs.view(B * T, -1)`): the name it binds again, holding the same
        storage, and whether the view lays the scores out one row per position."""
        node: cst.CSTNode = name
        per_token = False
        while True:
            parent = self.tree.parent(node)
            call = self.tree.parent(parent) if type(parent) is cst.Attribute and parent.value is node else None
            if not type(call) is cst.Call or call.func is not parent or parent.attr.value not in _VIEWS:  # type: ignore[union-attr]
                break
            per_token = per_token or _per_token(call, parent.attr.value)  # type: ignore[union-attr]
            node = call
        assign = self.tree.parent(node)
        if node is name or not type(assign) is cst.Assign or assign.value is not node or len(assign.targets) != 1:
            return None
        target = assign.targets[0].target
        return (target, per_token) if type(target) is cst.Name and target.value == name.value else None

    def view_of_itself(self, target: cst.Name) -> bool:
        """`target` is bound to a view of what the same name held (`outputs = outputs.view(B *
        T, -1)`)."""
        assign = self.tree.parent(self.tree.parent(target))
        if not type(assign) is cst.Assign or len(assign.targets) != 1 or assign.targets[0].target is not target:
            return False
        value = assign.value
        while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in _VIEWS:
            value = value.func.value
        return value is not assign.value and type(value) is cst.Name and value.value == target.value

    def _consumes_scores(self, call: cst.Call) -> bool:
        """A cross-entropy, softmax or log-softmax call: each keeps its own result for backward."""
        if self.names.call_name(call) in _SCORE_FUNCTIONS:
            return True
        func = call.func
        if type(func) is cst.Call:  # nn.CrossEntropyLoss()(logits, y)
            return self.names.call_name(func) in _SCORE_LOSSES
        return self.receivers.constructor_of(func) in _SCORE_LOSSES
