"""MEM207 output-alive-into-next-step."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import List, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.dataflow import sources_of
from memlint.analysis.figures import over_dataset
from memlint.analysis.outputs import OutputRead
from memlint.analysis.roles import Backward
from memlint.analysis.testcode import in_test_code
from memlint.analysis.tree import dotted_name, last_part
from memlint.findings import Fix, InsertAfter, Replace, Safety
from memlint.rule import Claim, Invalid, Rule

_LOSS = re.compile(r"^loss$|^loss_|_loss$")


def _loss_target(expr: cst.BaseExpression) -> bool:
    dotted = dotted_name(expr)
    return dotted is not None and bool(_LOSS.search(last_part(dotted)))


def _held(target: cst.BaseAssignTargetExpression) -> Optional[Tuple[cst.Name, Optional[cst.BaseExpression], int]]:
    """The name that holds the output, the loss bound beside it (`logits, loss = model(x, y)`)
    and that loss's position; None for other targets."""
    if type(target) is cst.Name:
        return target, None, -1
    if not type(target) in (cst.Tuple, cst.List) or len(target.elements) != 2 or \
            any(type(e) is cst.StarredElement for e in target.elements):
        return None
    first, second = (e.value for e in target.elements)
    for position, (kept, loss) in enumerate(((second, first), (first, second))):
        if type(kept) is cst.Name and not _loss_target(kept) and _loss_target(loss):
            return kept, loss, position
    return None


def _also_asked_for(forward: cst.Call) -> str:
    """What else the forward was asked to return, per layer (`output_attentions=True`): the kept
    result holds it too."""
    asked = [what for keyword, what in (("output_hidden_states", "hidden states"), ("output_attentions", "attention maps"))
             if any(arg.keyword is not None and arg.keyword.value == keyword and type(arg.value) is cst.Name
                    and arg.value.value == "True" for arg in forward.args)]
    return f", and every layer's {' and '.join(asked)} it was asked for" if asked else ""


# build-nanogpt's step, for the examples: each step evaluates (logits bound again, then read)
# before it trains; COMPILE is its compile switch.
_EVAL_THEN_TRAIN = (
    "import torch\nuse_compile = COMPILE\nif use_compile:\n    model = torch.compile(model)\n"
    "for step in range(max_steps):\n    if step % 250 == 0:\n        with torch.no_grad():\n"
    "            logits, loss = model(xgen)\n            probs = torch.softmax(logits[:, -1, :], dim=-1)\n"
    "    for micro_step in range(grad_accum_steps):\n        x, y = train_loader.next_batch()\n"
    "        logits, loss = model(x, y)\nDEL        loss = loss / grad_accum_steps\n        loss.backward()\n"
    "    optimizer.step()\n    optimizer.zero_grad()\n"
)

class OutputAliveIntoNextStep(Rule):
    """
    ## What it does
    Finds a language model's output kept bound in a training step after the loss is computed
    from it: `logits, loss = model(x, y)` (also `_, loss = ...`: `_` is a name like any other),
    `outputs = model(**batch); loss = outputs.loss`, or `logits = model(x)` followed by a
    per-token cross-entropy (also through a view bound to the same name, `outputs =
    outputs.view(B * T, -1)`, which holds the same storage). The name holds the output while backward runs and, in a loop,
    until the next iteration's forward has returned and the name is bound again.

    ## Why is this bad?
    A language model's logits (batch x sequence x vocabulary) are usually the largest tensor of
    its training step, and backward does not need them: cross-entropy keeps its own softmax,
    not its input. Kept bound, they add one more copy of themselves to the step's peak. On an
    H200, nanoGPT's GPT-2 124M (batch 12 x 1024 tokens, vocabulary 50,304, fused AdamW) peaked
    at 12,758 MiB with `logits, loss = model(X, Y)` and at 11,578 MiB with
    `loss = model(X, Y)[1]`: 1,180 MiB (10%) in bf16, 2,358 MiB (15%) in float32, exactly one
    logits tensor. The copy that counts is the current step's, alive through its backward:
    a `del` at the end of the loop body comes too late (the allocator's records on a CPU, a
    small GPT with 16 MiB of logits: 75.6 MiB at the peak with `del` after the optimizer step,
    as without it, 59.6 MiB with `del` before the backward), which is why an earlier `del out`
    at the end of a training loop changed nothing (882 MB before and after). Nothing changes
    either where backward keeps the output anyway (log-probabilities read by `nll_loss`: 59.6
    MiB with and without `del`) or where it is small. So the rule reports only outputs with the
    signs of a vocabulary.

    ## Why it is opt-in
    The saving is one logits tensor, and whether that is worth a change depends on sizes the
    code does not spell: read on real code (docs/real-code.md), 2 of 14 findings were worth
    it (an 8B model at 8,192 tokens, a GPT pretraining script at 8 x 1,024 tokens); 8 held
    logits of 8 to 250 MB beside multi-GB models, or a character vocabulary of 65 entries.
    Select it (`--extend-select MEM207`) where the logits are large (a vocabulary of tens of
    thousands, long sequences), and let `memlint verify` measure the step.

    ## Example
    ```python
    for X, Y in batches:
        logits, loss = model(X, Y)  # a GPT returning its logits beside the loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    ```

    Use instead:
    ```python
    for X, Y in batches:
        logits, loss = model(X, Y)
        del logits
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    ```

    ## When it is not reported
    Outputs without the signs of a vocabulary. `logits` or `_` beside a loss the model
    computed are reported unless the module names a number of classes (`num_classes`,
    `num_labels`) and no vocabulary. Everything else needs a language model's module, one
    that names a language model or a vocabulary (`AutoModelForCausalLM`, `vocab_size`,
    `ntokens`, or a class of a language model's family, `Llama`, `GPT`, `TransformerLM`,
    where it names no number of classes) and no transformers classifier, or whose model is what
    a function of another module of the project returns, one that names a language model's class
    and neither a classifier nor a number of classes (CodeT5's `config, model, tokenizer =
    build_or_load_gen_model(args)`, also wrapped in DataParallel; a vocabulary alone there may
    size a text classifier's embedding): another name beside the loss, a model's
    result whose `.loss` is taken, or an output scored by a cross-entropy flattened per
    token (`logits.view(-1, logits.size(-1))`; with a vocabulary-sized class dimension,
    `view(-1, vocab_size)`, the module need not say more). A classifier's scores are tiny.

    Outputs that backward keeps anyway: log-probabilities read by `nll_loss`, an output
    backwarded itself, or read by anything but a cross-entropy, a softmax, a log-softmax,
    its loss field or a plain value (`.shape`, `.argmax(-1)`): a fused cross-entropy of
    another library (lit_gpt's, flash-attn's) saves the logits for backward and writes their
    gradient into them, so deleting the name frees nothing (`bench/fused_loss_logits.py` on
    an H200, 1,000 MiB of logits: 8,160.6 MiB at the peak bound, deleted after the loss or
    at the end of the step, where torch's cross-entropy gives 10,160.5 and 9,160.5 MiB). Outputs read after the
    backward (accuracy from the logits), after the loop, in the next iteration, or by a
    nested function. A module that compiles a model (`torch.compile`, `model.compile()`):
    the compiled backward keeps the logits itself (nanoGPT's GPT-2 124M, compiled, on an H200:
    9,773 MiB with them bound, 9,697 without). A module written for accelerate's Megatron-LM
    engine (it names `DistributedType.MEGATRON_LM`): its `model(**batch)` runs forward,
    backward and the step, and returns the loss without logits. Loops without a backward (MEM204's, opt-in). A Lightning
    `training_step` that returns the loss for Lightning to backward: its locals are gone by
    then (with `manual_backward` inside, it is reported).

    ## Fix
    `del name` right after the last statement that reads it before the backward (once the
    loss is computed); for `_, loss = model(x, y)`, bind only the loss:
    `loss = model(x, y)[1]`.

    ## Fix safety
    Safe: nothing else in the function (or module) reads the name before binding it again,
    not after the backward, not after the loop, not in the next iteration, not a nested
    function, `exec` or `locals()`; and the `del` goes where the name is surely bound. No fix
    when the last read and the backward share a compound statement other than a `with`.
    """

    CODE = "MEM207"
    DEFAULT_ON = False
    NAME = "output-alive-into-next-step"
    MESSAGE = "a language model's logits stay bound through backward and into the next step's forward"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.PEAK_LOWER

    VALID = (
        # a compiled model's backward keeps the logits itself (a switch set off, then maybe on from the command line)
        _EVAL_THEN_TRAIN.replace("COMPILE", "True").replace("DEL", ""),
        _EVAL_THEN_TRAIN.replace("COMPILE", "False\nexec(open('configurator.py').read())").replace("DEL", ""),
        # the view bound to the same name is read after the backward: the storage is needed there
        "import torch\nimport torch.nn.functional as F\nfrom picotron.model import Llama\n\n\n"
        "def train(model, loader, optimizer):\n    for input_ids, target_ids in loader:\n"
        "        outputs = model(input_ids=input_ids)\n        outputs = outputs.view(input_ids.numel(), -1)\n"
        "        loss = F.cross_entropy(outputs, target_ids.reshape(-1))\n        loss.backward()\n"
        "        optimizer.step()\n        print((outputs.argmax(-1) == target_ids.reshape(-1)).float().mean())\n",
        # ... or bound to a new tensor, no view of it (masked scores)
        "import torch\nimport torch.nn.functional as F\nfrom picotron.model import Llama\n\n\n"
        "def train(model, loader, optimizer):\n    for input_ids, target_ids, mask in loader:\n"
        "        outputs = model(input_ids=input_ids)\n        outputs = outputs * mask\n"
        "        loss = F.cross_entropy(outputs.view(-1, outputs.size(-1)), target_ids.reshape(-1))\n"
        "        loss.backward()\n        optimizer.step()\n",
        # a tagger on a language model's backbone: the module names its few labels
        "import torch\nimport torch.nn.functional as F\nfrom backbone import TransformerLM\nNUM_LABELS = 9\n\n\n"
        "def train(model, loader, optimizer):\n    for tokens, tags in loader:\n        B, T = tokens.shape\n"
        "        logits = model(tokens)\n        logits = logits.view(B * T, -1)\n"
        "        loss = F.cross_entropy(logits, tags.view(-1))\n        loss.backward()\n        optimizer.step()\n",
        # ... in a classifier's code, its scores flattened per channel
        "import torch\nimport torch.nn.functional as F\nnum_classes = 10\n\n\n"
        "def train(model, loader, optimizer):\n    for x, y in loader:\n        b, c = x.shape[:2]\n"
        "        out = model(x)\n        out = out.view(b * c, -1)\n        loss = F.cross_entropy(out, y.reshape(-1))\n"
        "        loss.backward()\n        optimizer.step()\n",
        # a model's own `backward` method, not a DeepSpeed engine's: nothing says it trains
        "import torch\nfrom transformers import AutoModelForCausalLM\n\n\ndef main(args, loader):\n"
        "    model = AutoModelForCausalLM.from_pretrained(args.model)\n"
        "    for batch in loader:\n        outputs = model(**batch)\n"
        "        loss = outputs.loss\n        model.backward(loss)\n",
        # bound again after the backward, but under a manager that may swallow the error first:
        # the read after it may see the step's output
        "import contextlib\nimport torch\nfrom transformers import GPT2LMHeadModel\n\n\n"
        "def train(model, loader, optimizer, eval_batch):\n    for batch in loader:\n        outputs = model(**batch)\n"
        "        loss = outputs.loss\n        loss.backward()\n        optimizer.step()\n"
        "        with contextlib.suppress(RuntimeError):\n            outputs = model(**eval_batch)\n"
        "        print(outputs.loss)\n",
        # only the loss is bound
        "import torch\nfor X, Y in batches:\n    loss = model(X, Y)[1]\n    loss.backward()\n    optimizer.step()\n",
        "import torch\nfor X, Y in batches:\n    logits, loss = model(X, Y)\n    del logits\n    loss.backward()\n"
        "    optimizer.step()\n",
        # read after the backward: it must stay alive (moving the accuracy up is the user's call)
        "import torch\nfor X, Y in batches:\n    logits, loss = model(X, Y)\n    loss.backward()\n    optimizer.step()\n"
        "    correct = (logits.argmax(-1) == Y).sum().item()\n",
        # a classifier's scores: a few per example
        "import torch\nimport torch.nn.functional as F\nfor x, y in loader:\n    out = model(x)\n"
        "    loss = F.cross_entropy(out, y)\n    loss.backward()\n    optimizer.step()\n",
        "import torch\nfrom transformers import AutoModelForSequenceClassification\n"
        "model = AutoModelForSequenceClassification.from_pretrained('bert-base-cased')\nfor batch in loader:\n"
        "    outputs = model(**batch)\n    loss = outputs.loss\n    accelerator.backward(loss)\n    optimizer.step()\n",
        # a classifier computing its own loss: ten scores an image
        "import torch\nnum_classes = 10\nfor images, labels in loader:\n    logits, loss = model(images, labels)\n"
        "    loss.backward()\n    optimizer.step()\n",
        # a compiled model: its backward keeps the logits anyway
        "import torch\nmodel = torch.compile(model)\nfor X, Y in batches:\n    logits, loss = model(X, Y)\n"
        "    loss.backward()\n    optimizer.step()\n",
        # accelerate's Megatron-LM engine: `model(**batch)` runs the whole step, returns no logits
        "import torch\nfrom accelerate import Accelerator, DistributedType\nfrom transformers import AutoModelForCausalLM\n"
        "model = AutoModelForCausalLM.from_pretrained(name)\nif accelerator.distributed_type == DistributedType.MEGATRON_LM:\n"
        "    print('megatron')\nfor batch in loader:\n    outputs = model(**batch)\n    loss = outputs.loss\n"
        "    accelerator.backward(loss)\n    optimizer.step()\n",
        # evaluation, no backward (MEM204's)
        "import torch\nwith torch.no_grad():\n    for X, Y in batches:\n        logits, loss = model(X, Y)\n"
        "        total += loss.item()\n",
        # log-probabilities: nll_loss keeps them for backward anyway
        "import torch\nimport torch.nn.functional as F\nvocab_size = 33278\nfor x, y in loader:\n    output = model(x, y)\n"
        "    loss = F.nll_loss(output, y.view(-1))\n    loss.backward()\n    optimizer.step()\n",
        # the output backwarded itself
        "import torch\nvocab_size = 50304\nfor x in loader:\n    out = model(x)\n    out.sum().backward()\n"
        "    optimizer.step()\n",
        # Lightning backwards the returned loss after the hook returned: `logits` is gone by then
        "import torch\nimport torch.nn.functional as F\nimport lightning as L\nclass LM(L.LightningModule):\n"
        "    def training_step(self, batch, batch_idx):\n        x, y = batch\n        logits = self.model(x)\n"
        "        return F.cross_entropy(logits.view(-1, self.vocab_size), y.view(-1))\n",
        # kept for the next iteration, or read after the loop
        "import torch\nprev = None\nfor X, Y in batches:\n    if prev is not None:\n        print(logits.shape)\n"
        "    logits, loss = model(X, Y)\n    loss.backward()\n    optimizer.step()\n    prev = 1\n",
        "import torch\nfor X, Y in batches:\n    logits, loss = model(X, Y)\n    loss.backward()\n    optimizer.step()\n"
        "print(logits.shape)\n",
    )
    INVALID = (
        # read in the next step only after evaluation binds the name again; the compile is switched off
        Invalid(_EVAL_THEN_TRAIN.replace("COMPILE", "False").replace("DEL", ""),
                _EVAL_THEN_TRAIN.replace("COMPILE", "False").replace("DEL", "        del logits\n")),
        # a DeepSpeed engine backwards and steps itself (`model.backward(loss)`, `model.step()`)
        Invalid(
            "import deepspeed\nimport torch\nfrom transformers import AutoModelForCausalLM\n\n\ndef main(args, loader):\n"
            "    model = AutoModelForCausalLM.from_pretrained(args.model)\n"
            "    model, optimizer, _, _ = deepspeed.initialize(model=model, args=args)\n"
            "    for batch in loader:\n        outputs = model(**batch, output_attentions=True)\n"
            "        loss = outputs.loss\n        model.backward(loss)\n        model.step()\n",
            "import deepspeed\nimport torch\nfrom transformers import AutoModelForCausalLM\n\n\ndef main(args, loader):\n"
            "    model = AutoModelForCausalLM.from_pretrained(args.model)\n"
            "    model, optimizer, _, _ = deepspeed.initialize(model=model, args=args)\n"
            "    for batch in loader:\n        outputs = model(**batch, output_attentions=True)\n"
            "        loss = outputs.loss\n        del outputs\n        model.backward(loss)\n        model.step()\n",
        ),
        Invalid(
            "import torch\nfor it in range(max_iters):\n    for micro_step in range(accumulation_steps):\n"
            "        with ctx:\n            logits, loss = model(X, Y)\n            loss = loss / accumulation_steps\n"
            "        X, Y = get_batch('train')\n        scaler.scale(loss).backward()\n    scaler.step(optimizer)\n"
            "    scaler.update()\n    optimizer.zero_grad(set_to_none=True)\n",
            "import torch\nfor it in range(max_iters):\n    for micro_step in range(accumulation_steps):\n"
            "        with ctx:\n            logits, loss = model(X, Y)\n            del logits\n"
            "            loss = loss / accumulation_steps\n"
            "        X, Y = get_batch('train')\n        scaler.scale(loss).backward()\n    scaler.step(optimizer)\n"
            "    scaler.update()\n    optimizer.zero_grad(set_to_none=True)\n",
        ),
        Invalid(
            "import torch\ndef run_batch(self, source, targets):\n    _, loss = self.model(source, targets)\n"
            "    self.optimizer.zero_grad(set_to_none=True)\n    loss.backward()\n    self.optimizer.step()\n"
            "    return loss.item()\n",
            "import torch\ndef run_batch(self, source, targets):\n    loss = self.model(source, targets)[1]\n"
            "    self.optimizer.zero_grad(set_to_none=True)\n    loss.backward()\n    self.optimizer.step()\n"
            "    return loss.item()\n",
        ),
        Invalid(
            "import torch\ntgt_vocab_size = len(tgt_vocab)\nloss_fn = torch.nn.CrossEntropyLoss()\nfor src, tgt in loader:\n"
            "    logits = model(src, tgt[:-1])\n    optimizer.zero_grad()\n"
            "    loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt[1:].reshape(-1))\n"
            "    correct = (logits.argmax(-1) == tgt[1:]).sum().item()\n    loss.backward()\n    optimizer.step()\n",
            "import torch\ntgt_vocab_size = len(tgt_vocab)\nloss_fn = torch.nn.CrossEntropyLoss()\nfor src, tgt in loader:\n"
            "    logits = model(src, tgt[:-1])\n    optimizer.zero_grad()\n"
            "    loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt[1:].reshape(-1))\n"
            "    correct = (logits.argmax(-1) == tgt[1:]).sum().item()\n    del logits\n    loss.backward()\n"
            "    optimizer.step()\n",
        ),
        Invalid(
            "import torch\nfrom transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2')\nfor batch in loader:\n"
            "    with accelerator.accumulate(model):\n        outputs = model(**batch)\n        loss = outputs.loss\n"
            "        accelerator.backward(loss)\n        optimizer.step()\n        optimizer.zero_grad()\n",
            "import torch\nfrom transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2')\nfor batch in loader:\n"
            "    with accelerator.accumulate(model):\n        outputs = model(**batch)\n        loss = outputs.loss\n"
            "        del outputs\n        accelerator.backward(loss)\n        optimizer.step()\n"
            "        optimizer.zero_grad()\n",
        ),
        Invalid(  # a view bound to the same name holds the logits' storage (picotron's micro-batch loop)
            "import torch\nimport torch.nn.functional as F\nfrom picotron.model import Llama\n\n\n"
            "def train_step(model, data_loader, device):\n    for i in range(data_loader.grad_acc_steps):\n"
            "        batch = next(data_loader)\n        input_ids = batch[\"input_ids\"].to(device)\n"
            "        outputs = model(input_ids=input_ids)\n        batch_size, seq_len = input_ids.shape\n"
            "        outputs = outputs.view(seq_len * batch_size, -1)\n"
            "        loss = F.cross_entropy(outputs, batch[\"target_ids\"].to(device).reshape(-1))\n"
            "        loss.backward()\n\n\ndef train(model, data_loader, optimizer, device):\n"
            "    train_step(model, data_loader, device)\n    optimizer.step()\n",
            "import torch\nimport torch.nn.functional as F\nfrom picotron.model import Llama\n\n\n"
            "def train_step(model, data_loader, device):\n    for i in range(data_loader.grad_acc_steps):\n"
            "        batch = next(data_loader)\n        input_ids = batch[\"input_ids\"].to(device)\n"
            "        outputs = model(input_ids=input_ids)\n        batch_size, seq_len = input_ids.shape\n"
            "        outputs = outputs.view(seq_len * batch_size, -1)\n"
            "        loss = F.cross_entropy(outputs, batch[\"target_ids\"].to(device).reshape(-1))\n"
            "        del outputs\n        loss.backward()\n\n\ndef train(model, data_loader, optimizer, device):\n"
            "    train_step(model, data_loader, device)\n    optimizer.step()\n",
        ),
        Invalid(  # Lightning, optimizing by hand: the logits are kept through its backward
            "import torch\nimport torch.nn.functional as F\nimport lightning as L\nclass LM(L.LightningModule):\n"
            "    def training_step(self, batch, batch_idx):\n        opt = self.optimizers()\n        x, y = batch\n"
            "        logits = self.model(x)\n        loss = F.cross_entropy(logits.view(-1, self.vocab_size), y.view(-1))\n"
            "        self.manual_backward(loss)\n        opt.step()\n        opt.zero_grad()\n",
            "import torch\nimport torch.nn.functional as F\nimport lightning as L\nclass LM(L.LightningModule):\n"
            "    def training_step(self, batch, batch_idx):\n        opt = self.optimizers()\n        x, y = batch\n"
            "        logits = self.model(x)\n        loss = F.cross_entropy(logits.view(-1, self.vocab_size), y.view(-1))\n"
            "        del logits\n        self.manual_backward(loss)\n        opt.step()\n        opt.zero_grad()\n",
        ),
    )

    def visit_Assign(self, node: cst.Assign) -> None:
        facts = self.facts
        tree = facts.tree
        if len(node.targets) != 1 or not type(node.value) is cst.Call or not facts.roles.backwards:
            return
        line = tree.parent(node)
        if not type(line) is cst.SimpleStatementLine or not facts.roles.is_forward(node.value):
            return
        held = _held(node.targets[0].target)
        if held is None:
            return
        kept, loss, loss_position = held
        outputs = facts.outputs
        if outputs.compiled or outputs.engine_runs_step:
            return  # a compiled backward keeps the logits anyway; an engine's step returns none
        language_model = outputs.language_model_module
        if not (loss is not None and (kept.value == "_" or outputs.names_logits(kept.value))) and \
                not language_model and not outputs.names_vocabulary:
            language_model = not outputs.classifier_module and facts.values.built_in_language_model_module(node.value)
            if not language_model:
                return  # no sign of a vocabulary-sized output can turn up
        scope = tree.scope_of(node)
        loops = tree.loops_around(node)
        if not loops and not type(scope) is cst.FunctionDef:
            return  # one forward and backward at module level: not a step that repeats
        region = loops[0].body if loops else scope  # type: ignore[attr-defined]
        after = self._next_backward(node, loops[0] if loops else scope)
        if after is None or facts.test_file or in_test_code(tree, node):
            return
        backward, site = after
        if not facts.phase.backward_trains(backward.call):
            return
        reads = self._reads(kept, region, tree.order(site))
        if reads is None:
            return  # read after the backward, after the loop, in the next iteration, in a way that
            # may keep the output or that backward may need, ...
        loss_names = {dotted_name(loss) or ""} if loss is not None else {kept.value}
        if not _reaches(backward, site, facts.values.derived_names(scope, loss_names) | loss_names):
            return
        what = self._what(kept.value, loss is not None, reads, language_model)
        if what is None:
            return
        fix = None
        if kept.value == "_" and loss is not None and not reads:
            bound = node.targets[0].with_changes(target=loss)
            taken = cst.Subscript(node.value, [cst.SubscriptElement(cst.Index(cst.Integer(str(loss_position))))])
            fix = Fix((Replace(node, node.with_changes(targets=[bound], value=taken)),), Safety.SAFE,
                      f"bind only the loss: `... = {cst.Module([]).code_for_node(taken)}`")
        else:
            anchor = self._anchor(line, reads, site)
            if anchor is not None:
                fix = Fix((InsertAfter(anchor, (cst.parse_statement(f"del {kept.value}"),)),), Safety.SAFE,
                          f"`del {kept.value}` once the loss is computed")
        what += _also_asked_for(node.value)
        until = "into the next step's forward" if loops else "until the step returns"
        measured = "; GPT-2 124M at 12x1024 tokens: +1.2 GiB, 10%, on an H200" if over_dataset(facts, node) else ""
        self.report(node, (
            f"`{kept.value}` ({what}) stays bound through backward and {until}, so the step's peak holds one "
            f"more copy of it, which backward does not need (cross-entropy keeps its own softmax{measured}): "
            + (f"bind only the loss (`[{loss_position}]`)" if kept.value == "_" and not reads
               else f"`del {kept.value}` once the loss is computed")), fix)

    def _reads(self, kept: cst.Name, region: cst.CSTNode, until: int) -> Optional[List[OutputRead]]:
        """What each read of the output `kept` binds takes from it before `until`, followed
        through a view bound to the same name (picotron's `outputs = outputs.view(B * T, -1)`,
        whose storage is the output's); None where a read may keep it or comes later."""
        outputs = self.facts.outputs
        seen = self.facts.liveness.reads_of(kept, region, until, holds_it=outputs.view_of_itself)
        if seen is None:
            return None
        reads: List[OutputRead] = []
        per_token = False  # (the reads come in the order they run)
        for name in seen:
            rebound = outputs.rebound_view(name)
            if rebound is not None:  # (a read too: a `del` must come after it)
                per_token = per_token or rebound[1]
                reads.append(OutputRead("view", name))
                continue
            read = outputs.read_of(name)
            if read is None:
                return None
            reads.append(replace(read, per_token=True) if per_token and read.kind == "scores" else read)
        return reads

    def _next_backward(self, node: cst.Assign, region: cst.CSTNode) -> Optional[Tuple[Backward, cst.Call]]:
        """The first backward after `node` in the body of `region` (its innermost loop, or its
        function), with the call there that runs it (itself, or a helper's call)."""
        tree = self.facts.tree
        scope, start = tree.scope_of(node), tree.span(node)[1]
        body = region.body if type(region) in (cst.For, cst.While) else region  # type: ignore[attr-defined]
        later = [(b, site) for b, site in self.facts.roles.backwards_in(region)
                 if tree.order(site) >= start and tree.contains(body, site) and tree.scope_of(site) is scope]
        return min(later, key=lambda found: tree.order(found[1])) if later else None

    def _what(self, name: str, beside_loss: bool, reads: List[OutputRead], language_model: bool) -> Optional[str]:
        """What the output is, by its signs of a vocabulary; None without them (`language_model`:
        the model is a language model's, by its module or by the module that builds it)."""
        outputs = self.facts.outputs
        kinds = {read.kind for read in reads}
        if beside_loss:
            if "loss" in kinds or (outputs.classifier_module and not language_model):
                return None
            if outputs.names_logits(name):
                return "the logits the model returns beside its loss"
            if name == "_":
                return "the output the model returns beside its loss"
            return "the model's output beside its loss, in a language model's code" \
                if language_model else None
        if "loss" in kinds:
            return "the model's result, holding its vocabulary-sized logits" if language_model else None
        scores = [read for read in reads if read.kind == "scores"]
        if any(read.per_token for read in scores) and (
                any(read.vocabulary for read in scores) or language_model):
            return "vocabulary-sized logits, scored per token"
        return None

    def _anchor(self, line: cst.SimpleStatementLine, reads: List[OutputRead],
                site: cst.Call) -> Optional[cst.BaseStatement]:
        """The statement after which the name is surely bound and no longer read: the one holding
        the last read, in the binding's block or a block around it that a `with` runs whole, or
        inside a `with` that holds the backward too; None when no statement holds the one and
        not the other."""
        tree = self.facts.tree
        last = max((read.node for read in reads), key=tree.order, default=None)
        statement: cst.CSTNode = line
        while True:
            body, position = tree.siblings(statement)
            if position < 0:
                return None
            anchor = next((s for s in body[position:] if last is None or tree.contains(s, last)), None)
            if anchor is not None:
                break
            block = tree.parent(statement)
            owner = tree.parent(block) if block is not None else None
            if not type(owner) is cst.With or owner.body is not block:
                return None
            statement = owner
        while tree.contains(anchor, site):  # `with loss_parallel(): loss = ...; backward(loss)`
            if not type(anchor) is cst.With or not type(anchor.body) is cst.IndentedBlock:
                return None
            anchor = next((s for s in anchor.body.body if tree.contains(s, last)), None)  # type: ignore[arg-type]
            if anchor is None:
                return None
        return anchor  # type: ignore[return-value]


def _reaches(backward: Backward, site: cst.Call, names: Set[str]) -> bool:
    """Whether the backward at `site` (its call, or a helper's call handed the loss) backwards
    something computed from `names`."""
    if site is backward.call:
        sources = set(backward.names) | ({dotted_name(backward.loss) or ""} if backward.loss is not None else set())
    else:
        sources = {name for arg in site.args for name in (*sources_of(arg.value), dotted_name(arg.value) or "")}
    return bool(sources & names)
