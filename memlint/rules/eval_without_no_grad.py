"""MEM203 eval-without-no-grad."""

from __future__ import annotations

import re
from functools import cached_property
from typing import Dict, FrozenSet, List, Optional, Set, Tuple, Union

import libcst as cst

from memlint.analysis.dataflow import leaf_targets, target_names
from memlint.analysis.figures import over_dataset
from memlint.analysis.loops import few_literal
from memlint.analysis.frameworks import HF_EVAL_HOOKS
from memlint.analysis.steps import LOADER_NAME
from memlint.analysis.often import EVAL_FUNCTION, TRAINING_METHOD
from memlint.analysis.scopes import Binding
from memlint.analysis.tree import dotted_name, expression_nodes, last_part, literal_bool, own_method, root_name, walk_scope
from memlint.findings import Fix, Replace, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import show

Loop = Union[cst.For, cst.While]
# Factories of a made-up input: a forward of one that drops its result warms a model up.
_MADE_UP_INPUTS = frozenset({"torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.rand", "torch.randn",
                             "torch.randint"})
# DomainBed's ERM++ step, for the examples: PASS is the averaged model's pass, HOOK what comes
# before the class.
_ERM = (
    "import torch\nimport torch.nn.functional as F\nHOOK\n\nclass ERMPlusPlus(torch.nn.Module):\n"
    "    def update(self, minibatches):\n        x = torch.cat([x for x, y in minibatches])\n"
    "        y = torch.cat([y for x, y in minibatches])\n"
    "        loss = F.cross_entropy(self.network(x), y)\n        self.optimizer.zero_grad()\n"
    "        loss.backward()\n        self.optimizer.step()\n        self.network_sma.train()\n"
    "        PASS\n        return {\"loss\": loss.item()}\n"
)
# LLaMA's generator, for the examples: DECORATOR is what its model's forward is decorated with.
_LLAMA = (
    "import torch\nfrom torch import nn\n\n\nclass Transformer(nn.Module):\n    DECORATOR\n"
    "    def forward(self, tokens, start_pos):\n        return self.output(self.layers(tokens, start_pos))\n\n\n"
    "class LLaMA:\n    def __init__(self, model: Transformer):\n        self.model = model\n\n"
    "    def generate(self, tokens, total_len):\n        prev_pos = 0\n"
    "        for cur_pos in range(1, total_len):\n"
    "            logits = self.model.forward(tokens[:, prev_pos:cur_pos], prev_pos)\n"
    "            tokens[:, cur_pos] = torch.argmax(logits, dim=-1)\n            prev_pos = cur_pos\n"
    "        return tokens\n\n\ndef main(model, tokens):\n    return LLaMA(model).generate(tokens, 64)\n"
)
# A training loop that samples every 100 steps; DROP is what it does with the sample after printing it.
_PERIODIC_SAMPLE = (
    "import torch\n\ndef train(model, loader, opt):\n    for step, (x, y) in enumerate(loader):\n"
    "        loss = criterion(model(x), y)\n        loss.backward()\n        opt.step()\n"
    "        if step % 100 == 0:\n            sample = model.inference(x)\n"
    "            print(sample.norm().item())\nDROP"
)
# An averaged copy of a model (stochastic weight averaging, an EMA, DomainBed's SMA).
_AVERAGED_MODEL = re.compile(r"(^|_)(sma|ema|swa|avg|averaged?)(_|$)", re.IGNORECASE)
# What a forward's output is bound from: the call, an attribute or item of it, a comprehension of them.
_MADE_BY_A_CALL = (cst.Call, cst.Attribute, cst.Subscript, cst.ListComp)
_KEEPS_VALUE = frozenset({"to", "cuda", "half", "float", "type", "type_as"})
_LITERALS = (cst.Integer, cst.Float, cst.SimpleString)
_CONSUMING_BUILTINS = frozenset({"list", "tuple", "set", "dict", "sum", "min", "max", "sorted", "any", "all"})
_WHY = {
    "eval-mode": "after `.eval()`",
    "named": "in an evaluation function",
    "script": "in an inference script that never calls backward",
}
# RWKV's demo model: `forward` hands each call to a method that runs without grad
_RWKV = (
    "import torch\n\n\nclass RWKV(torch.nn.Module):\n    def forward(self, idx, state):\n"
    "        if state is None:\n            state = [torch.zeros(768, device=\"cuda\") for _ in range(24)]\n"
    "        if len(idx) > 1:\n            return self.forward_seq(idx, state)\n"
    "        return self.forward_one(idx, state)\n\n    def forward_one(self, idx, state):\n"
    "        with torch.no_grad():\n            return self.emb(idx[-1:]), state\n\n"
    "    def forward_seq(self, idx, state):\n        with torch.no_grad():\n            return self.emb(idx), state\n\n\n"
    "model = RWKV().cuda()\nmodel.eval()\nfor doc in docs:\n    out, _ = model.forward(doc, None)\n"
    "    print(out.argmax(-1).tolist())\n"
)
# a module-level switch between the `rwkv` package's model and a transformers one (SWITCH: True or False)
_HF_MODE = (
    "import torch\n\nHF_MODE = SWITCH\nif not HF_MODE:\n    from rwkv.model import RWKV\n"
    "    model = RWKV(model=\"rwkv-7-world\", strategy=\"cuda fp16\")\nelse:\n"
    "    from transformers import AutoModelForCausalLM\n"
    "    model = AutoModelForCausalLM.from_pretrained(\"fla-hub/rwkv7-world\").cuda().eval()\n"
    "for ids in questions:\n    if HF_MODE:\n        logits = model.forward(torch.tensor([ids]).cuda())[0][0][-1]\n"
    "    else:\n        logits, _ = model.forward(ids, None)\n    print(logits.argmax().item())\n"
)


def _on_self(target: cst.BaseExpression) -> bool:
    """`self.x`, `self.x[k]`, `self.a.b`: rooted at the instance, below it."""
    return type(target) in (cst.Attribute, cst.Subscript) and root_name(target) == "self"


def _named(loop: Loop) -> str:
    """How a message names a loop: `for x in xs`, `while ...`."""
    if type(loop) is cst.For:
        return f"`for {show(loop.target)} in {show(loop.iter)}`"
    return f"`while {show(loop.test)}`"


def _forward_of(value: cst.BaseExpression) -> Optional[cst.Call]:
    """The call an assigned value takes whole or a field of: `model(x)`, `model(x).logits`, `model(x)[0]`."""
    while type(value) is cst.Attribute or type(value) is cst.Subscript:
        value = value.value  # type: ignore[attr-defined]
    return value if type(value) is cst.Call else None


def _suspends(loop: Loop) -> bool:
    """A `yield` or `await` in the loop: a `with` around it would leak no-grad mode to the caller."""
    if type(loop) is cst.For and loop.asynchronous is not None:
        return True
    return any(type(n) in (cst.Yield, cst.Await) for n in walk_scope(loop))


class EvalWithoutNoGrad(Rule):
    """
    ## What it does
    Finds a model called (`model(x)`, `model.encode(x)`) in a loop that never calls `backward()`
    (validation, evaluation, inference) outside `torch.no_grad()` / `torch.inference_mode()`,
    also when the model is called by a helper the loop calls. It looks only at loops that are
    clearly evaluation: after `model.eval()`, in a function named like
    `evaluate`/`validate`/`predict`/`infer`/`generate`, or in a script that never trains (at its
    top level, in its `main()`, or in any function of a file run as `__main__` that hands back
    nothing with a graph, a generator yielding plain values included).
    Backwards count by scope: a `train()` that backwards its own `loss` says nothing about the
    `loss` of `validate()`.

    Also an evaluation hook that a framework calls on every batch without turning grad off
    itself: an HF `Trainer` subclass's `prediction_step` (HF's own enters `torch.no_grad()`
    inside, so an override that runs the model must too), and a SimulEval agent's `policy`,
    `update_states_read` and other per-action hooks (SimulEval calls them with grad on: an agent
    encoding each read and decoding each write keeps a graph in its states). Lightning's
    `validation_step`, `test_step` and `predict_step` run under no_grad already.

    Also, in a training loop, a forward whose output never reaches the backward: a second pass run
    only for a metric (`yhat_raw = model.inference(x)`, then `l1 += F.l1_loss(yhat_raw, y).item()`),
    its output and everything made from it read and dropped, never backwarded, returned, stored or
    handed to a call that might backward it; also one run every few steps (`if step %
    args.sample_every == 0:`) whose output stays bound until the block runs again (SiT's `samples =
    vae.decode(...).sample`: bound nowhere else in the loop, not deleted or detached there): its
    graph is alive through every training step in between. And a forward whose result is dropped
    after a training step's last backward (`self.network_sma(x)`, run to refresh an averaged model's
    batch-norm statistics), in a function run once per step: no backward of the step can read its
    graph. Not one before the backward (the modules may compute the loss by the side), nor in a
    module that registers forward hooks or reads the model's attributes after the pass. A method
    that backwards and steps an optimizer once per call, outside any loop of its own, is one
    training step, whatever calls it (DomainBed's `update`, called on an algorithm made by name).

    ## Why is this bad?
    With grad enabled, every forward records a graph and saves the activations a backward would
    need. Nothing backwards, so they stay alive as long as any output does: an eval loop over a
    dataset keeping its outputs peaked at 1792 MB on an H200, against 537 MB under
    `torch.no_grad()`. The message quotes that figure only for loops over a data loader
    (memlint.analysis.figures); elsewhere (a short test, a decoding loop) it says why without one.
    In a training loop, a metric pass's graph is alive while the step's own backward runs: the
    step's peak holds a second forward's activations (a pitch predictor's step on an H200,
    `bench/metric_forward.py`: 2,096 MiB, against 927 MiB with the pass under no_grad).

    ## Example
    ```python
    model.eval()
    for x, y in val_loader:
        preds.append(model(x))
    ```

    Use instead:
    ```python
    model.eval()
    with torch.no_grad():
        for x, y in val_loader:
            preds.append(model(x))
    ```

    And an evaluation written as a list comprehension over a data loader (`preds =
    [model(x).argmax(1) for x, _ in loader]` after `.eval()`), or a generator expression
    consumed in the same call (`torch.cat(model(x) for x in loader)`).

    And a predictor: a class that is no model, whose `__init__` puts its model in eval mode
    (`self.model.eval()`), and whose method (`__call__`, `predict`) runs it with grad on and
    hands back or on only what carries no graph (`preds.detach()`), nothing in the class
    backwarding or asking for gradients: each call's peak holds a whole forward's activations
    for nothing. Not one its callers in this module run under no_grad, nor one only other
    modules call.

    And a function of a module that never trains, whose other functions run their models with
    grad off (`with _inference_mode():` in bark's `generate_fine`), that runs a model once with
    grad on, binds what it computes to plain names and hands back only what carries no graph
    (bark's `codec_decode`: `out.detach().cpu().numpy()`), where every call of it in the
    project records a graph (made with grad on, in a function that some call makes with grad
    on; not from a module that turns grad off at its top): the module's own way says
    inference, and no caller can backward what a call records. Not where a model class of the
    project asks for gradients in its `forward` (under no_grad it would fail), nor for a
    module linted alone, whose callers are not known.

    And a model's own method (not `forward`) that runs it in a loop with autograd recording and
    returns only values that carry no graph (`preds.argmax(1)`, a `torch.cat` of those): model
    code runs in the grad mode its caller chose, but no caller can backward through what this
    one records (on an H200, a forward-forward network's `predict` over 50,000 images peaked at
    4,667 MiB as written and 583 MiB decorated with `@torch.no_grad()`, the same predictions). Not a method that other model code calls, one that every call in this module
    makes under no_grad, or one that keeps or hands on what it computes.

    And a forward above a loop, with grad on, whose output the loop reads: above an evaluation or
    inference loop that runs a model (xtuner's chat: the image encoded once, `pixel_values` handed
    to every turn's `generate`), its saved activations live as long as the loop; above an
    optimisation loop that backwards with `retain_graph=True` (StyleGAN-XL's CLIP text targets,
    a style image's VGG features), every iteration's backward goes through that graph again, into
    a model no optimizer of the loop steps, and it is the only reason to retain the graph. Not
    where the loop's function backwards otherwise, nor where the stepped optimizer is built on that
    model's parameters (an anchor computed by the model the loop trains), or is not built in sight.

    ## When it is not reported
    A method named for evaluation (`eval_step`, `generate`) that its module never calls, where
    every call other modules of the project make of a method of that name runs without grad (PET's
    task helpers, whose `eval_step` the wrapper calls, through a registry of helpers, inside `with
    torch.no_grad():`); linted alone, such a method's callers are unknown, and it is not reported.
    A model of another framework by its name's prefix (`tf_model(x, training=False)`, `onnx_model`)
    or its Transformers class (`FlaxWhisperForConditionalGeneration`, `TFBertModel`), a model
    quantized dynamically (`torch.quantization.quantize_dynamic`: it runs on the CPU only). Under a
    context manager of the module or of the project that turns grad off around its `yield` (`with
    _inference_mode():`), or MONAI's `eval_mode`. A warm-up: a forward of made-up inputs whose
    result is dropped, outside any loop of its function (`model(torch.zeros(1, 3, size,
    size).to(device))` before the batches), one dummy input per call. An inference script whose
    models are loaded by `from_pretrained(...)` with nothing that places them (no `device_map`, no
    quantized load) and handed to no call but one that writes them out (`export_onnx(model, path)`)
    or to a function of the module that hands them on to none (a helper's parameter is what every
    call passes it), in a module that moves nothing (`.to`, `.cuda`), names no device and that no
    device code of the project calls: the models run on the CPU, where what the graph keeps is host
    memory, a one-off script's at that. A model from a helper, or from `torch.load` (it comes back
    where it was saved), may be on the GPU. A call of a mode the model's `forward` computes under
    no_grad itself (`model(data, mode="inference")` where `forward` has `elif mode == "inference":
    with torch.no_grad(): ...`), read in the model's class here or in another module of the project;
    a class defined in neither, nor by a library built on torch, may do the same, and its call of a
    mode for inference (`mode="inference"`, `phase="test"`) is left alone. The branch must end in a
    return of what its no-grad blocks compute. A torch module without parameters
    (`nn.CosineSimilarity`, `nn.Softmax`, `nn.Dropout`): it records only what its inputs carry.
    Pipelines that record no graph (an HF `pipeline(...)`, spaCy's `spacy.load(...)`, a
    sentence-transformers model's `encode`, a model compiled for Neuron, OpenVINO or IPEX and loaded
    through optimum, or by another runtime: OpenVINO's `compile_model`, ONNX Runtime, TensorRT), an
    object that prepares inputs whatever its name (`encoder = RobometerEncoderProcessorStep(...)`,
    or a parameter annotated with an imported processor, tokenizer or collator class; one of this
    module is judged by its code), and a model's computing methods other than `forward` in a module
    that loads code from the hub (`trust_remote_code=True`: an embedder's `encode` there is often
    decorated `@torch.no_grad()`, out of sight). Loops with a backward or an optimizer step
    (training, gradient accumulation), loops inside `training_step`, `compute_loss`, `forward` or
    `accelerator.accumulate`, Lightning's `validation_step` (Lightning disables grad), functions
    decorated `@torch.no_grad()` or called only under no_grad, HF `generate()` (already no-grad),
    loops whose outputs are backwarded after the loop (not a training loop that binds the same names
    itself before reading them, on the next epoch), loops that ask for gradients
    (`torch.autograd.grad`, `requires_grad_()`, `enable_grad()`), and loops in methods of a model
    class (an `nn.Module`, a class defining `forward`, a subclass of an `...Encoder`/`...Model`-like
    base): model code runs in the grad mode its caller chose. A script's function that returns or
    yields a graph-carrying value (its caller may train on it), or a script that backwards or steps
    anywhere, or that another module of the project imports (it may train on what the function
    returns or keeps). A SimulEval agent that backwards or asks for gradients in any method, turns
    grad off itself (`torch.set_grad_enabled(False)`, in a method or at the top of its module), or
    whose hook hands the model's output to another object it holds, which may backward it
    (`self.trainer.update(logits)`). A model reached only through a call made under no_grad. A
    forward run to count its operations (under `FlopCounterMode()`, as a profiling script does once
    per model). A model reached through a helper whose own evaluation loop runs it is reported
    there, once. A forward of a method this module decorates to run without grad (`@torch.no_grad()
    def inference`). In a training loop, a forward whose output (or anything made from it) is
    backwarded, returned, stored in an attribute or item, or passed to anything but torch, a reading
    builtin, a logging method or a list of its own (a helper may backward or keep it:
    `learner.update(out)`); the loop's only forward; any where the loss may take from the model
    besides what it returns (the module registers forward hooks, the loop reads `model.aux_loss`);
    one under a periodic guard (`if step % 100 == 0:`) whose output is deleted, detached in place or
    bound again in the loop before the block runs again, or under a guard that holds once (`if step
    == 0:`); and any, where the module freezes parameters (a frozen EMA copy records no graph), or a
    helper of the module freezes the model it runs (DiT's `requires_grad(vae, False)`).

    ## Fix
    Wrap the whole loop statement in `with torch.no_grad():`; when it `yield`s, in a script that
    never backwards and that no module imports, the outermost loop inside it that does not and
    that runs every recording model call (elsewhere a caller may backward what it yields). A framework hook is
    decorated with `@torch.no_grad()`. A training loop's metric forward: its statement is wrapped.

    ## Fix safety
    Safe: the loop computes the same values; its outputs just carry no graph. No fix is offered
    when the loop `yield`s or `await`s (the no-grad mode would leak into the caller while it is
    suspended) and no inner loop that does not runs every model call: decorate the function with
    `@torch.no_grad()` instead (torch turns grad off only while a decorated generator runs); nor
    when a model class of this module asks for gradients in its own code (under no_grad that
    forward would fail). Nor for a forward above a loop: its statement may bind names the code
    after the loop trains on, and with retain_graph the backward's other uses are not in sight.
    """

    CODE = "MEM203"
    NAME = "eval-without-no-grad"
    MESSAGE = "a model runs in an evaluation loop with autograd recording"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.PEAK_LOWER
    # the evidence of evaluation it needs: `.eval()`, a function name, loading trained weights;
    # or a backward, before a forward whose result is dropped
    REQUIRES = ("eval", "val", "test", "predict", "infer", "generat", "sampl", "load", "backward")

    VALID = (
        # a model handed in annotated with a class whose forward runs under inference mode
        _LLAMA.replace("DECORATOR", "@torch.inference_mode()"),
        # a Flax model of Transformers (`Flax...`, `TF...` classes): no torch graph
        "import torch\nfrom transformers import FlaxWhisperForConditionalGeneration\n\n\n"
        "def main(path, loader):\n"
        "    model, params = FlaxWhisperForConditionalGeneration.from_pretrained(path, _do_init=False)\n"
        "\n    def eval_step(batch):\n"
        "        return model(**batch, params=params, train=False)[0]\n\n"
        "    device = torch.device(\"cuda\")\n    for batch in loader:\n"
        "        logits = eval_step(batch)\n        print(logits.shape, device)\n",
        # dynamically quantized models run on the CPU only: what they keep is host memory
        "import torch\n\nquantized_model = torch.quantization.quantize_dynamic(model, None, dtype=torch.qint8)\n"
        "rebuilt_model = torch.quantization.quantize_dynamic(dummy_model, None, dtype=torch.qint8)\n"
        "rebuilt_model.load_state_dict(rebuilt_state)\nfor _ in range(25):\n"
        "    inputs = torch.randint(low=0, high=30000, size=(32, 128))\n"
        "    y_rebuilt = rebuilt_model(input_ids=inputs)[0]\n    y = quantized_model(input_ids=inputs)[0]\n"
        "    assert torch.all(torch.eq(y, y_rebuilt))\n",
        # tokenizers handed to a helper (`encode`): loaded on the CPU, in a module that moves nothing
        "import transformers\n\n\ndef check(slow, fast, text):\n    slow_ids = slow.encode(text)\n"
        "    fast_ids = fast.encode(text)\n    if slow_ids != fast_ids:\n        print(text, slow_ids, fast_ids)\n\n\n"
        "if __name__ == \"__main__\":\n    for name in names:\n"
        "        slow = getattr(transformers, name).from_pretrained(name)\n"
        "        fast = getattr(transformers, name + \"Fast\").from_pretrained(name)\n"
        "        for i in range(len(dataset)):\n            for text in dataset[i][\"premise\"].values():\n"
        "                check(slow, fast, text)\n",
        # ... to a helper that calls itself, passing them on
        "import transformers\n\n\ndef check(slow, fast, text, depth=0):\n"
        "    if slow.encode(text) != fast.encode(text) and depth < 2:\n        check(slow, fast, text[1:], depth + 1)\n\n\n"
        "if __name__ == \"__main__\":\n    for name in names:\n"
        "        slow = getattr(transformers, name).from_pretrained(name)\n"
        "        fast = getattr(transformers, name + \"Fast\").from_pretrained(name)\n"
        "        for i in range(len(dataset)):\n            for text in dataset[i][\"premise\"].values():\n"
        "                check(slow, fast, text)\n",
        # a method of the agent's base class named like a network, after the step: no pass over the batch
        "import torch\nimport torch.nn.functional as F\nfrom agents.base import BaseAgent\n\n\n"
        "class DQNAgent(BaseAgent):\n    def learn(self, obs, act, rew, next_obs, done):\n"
        "        q = self.q_net(obs).gather(1, act).squeeze(1)\n        with torch.no_grad():\n"
        "            target = rew + self.gamma * (1 - done) * self.target_net(next_obs).max(1).values\n"
        "        loss = F.smooth_l1_loss(q, target)\n        self.optimizer.zero_grad()\n"
        "        loss.backward()\n        self.optimizer.step()\n"
        "        self.soft_update_target_network(self.tau)\n        return loss.item()\n",
        # ... nor a method named like an averaged model, given the decay
        "import torch\nimport torch.nn.functional as F\n\n\nclass SRModel(BaseModel):\n"
        "    def optimize_parameters(self, step):\n        self.optimizer_g.zero_grad()\n"
        "        self.output = self.net_g(self.lq)\n        l_total = F.l1_loss(self.output, self.gt)\n"
        "        l_total.backward()\n        self.optimizer_g.step()\n"
        "        self.model_ema(self.ema_decay)\n",
        # a loss handed by position to another library's `add_batch`, which may backward it
        "import torch\nfrom mylib import LargeBatchTrainer\n\n\ndef finetune_frozen_bn(model, loader, optimizer):\n"
        "    model.eval()\n    acc = LargeBatchTrainer(optimizer)\n    for batch in loader:\n"
        "        outputs = model(**batch)\n        acc.add_batch(outputs.loss)\n    acc.step()\n",
        # a model frozen where it is loaded records no graph
        "import torch\n\n"
        "encoder = torch.hub.load(\"facebookresearch/dinov2\", \"dinov2_vits14\").requires_grad_(False)\n\n\n"
        "def extract_features(loader):\n    encoder.eval()\n    feats = []\n    for x in loader:\n"
        "        feats.append(encoder(x.cuda()))\n    return torch.cat(feats)\n",
        # an encoder of symbols into ids, not a model (SpeechBrain's `input_encoder`)
        "import torch\n\n\nclass TTSBrain:\n    def run_inference(self, phoneme_labels):\n        self.modules.eval()\n"
        "        for labels in phoneme_labels:\n            tokens = self.input_encoder.encode_sequence_torch(labels)\n"
        "            self.tokens.append(tokens.int().to(self.device))\n",
        # a grad mode entered by hand, in force for the rest of the script (asteroid's eval scripts)
        "import torch\n\nmodel = torch.load('model.pt').cuda()\nmodel.eval()\ntorch.no_grad().__enter__()\n"
        "for mix in test_set:\n    est = model(mix.cuda())\n    save(est.cpu().numpy())\n",
        # a dropped forward before the backward: its modules may compute the loss by the side
        # (a style-transfer model's loss layers)
        "import torch\n\n\ndef step(model, image, optimizer, style_losses):\n    optimizer.zero_grad()\n"
        "    model(image)\n    loss = sum(sl.loss for sl in style_losses)\n    loss.backward()\n    optimizer.step()\n",
        # ... and after it, in a module whose forward hooks keep what the pass computes
        _ERM.replace("PASS", "self.network_sma(x)").replace(
            "HOOK", "feats = []\nmodel.register_forward_hook(lambda m, i, o: feats.append(o))\n"),
        # ... or a method named like a model, given no input (BasicSR's weight averaging)
        "import torch\n\n\nclass SRModel(BaseModel):\n    def optimize_parameters(self, step):\n"
        "        self.optimizer_g.zero_grad()\n        self.output = self.net_g(self.lq)\n"
        "        l_total = self.cri_pix(self.output, self.gt)\n        l_total.backward()\n"
        "        self.optimizer_g.step()\n        self.model_ema(decay=self.ema_decay)\n",
        # ... or that reads what the model keeps after the pass
        _ERM.replace("PASS", "self.network_sma(x)\n        self.aux = self.network_sma.aux_loss").replace("HOOK", ""),
        # a context manager of the module that turns grad off around its yield (bark's `_inference_mode`)
        "import contextlib\nimport torch\n\n\n@contextlib.contextmanager\ndef _inference_mode():\n"
        "    with torch.inference_mode(), torch.no_grad():\n        yield\n\n\ndef generate(model, x, n):\n"
        "    model.eval()\n    with _inference_mode():\n        for _ in range(n):\n            x = model(x.cuda())\n"
        "    return x\n",
        # MONAI's `eval_mode` puts the net in eval mode and turns grad off
        "import torch\nfrom monai.networks.utils import eval_mode\n\n\ndef validate(model, loader):\n"
        "    scores = []\n    with eval_mode(model):\n        for x in loader:\n"
        "            scores.append(model(x.cuda()).detach().cpu())\n    return scores\n",
        # the outputs go to a model's method that trains (test-time adaptation): no evaluation
        "import torch\n\n\ndef evaluate(model, loader, device):\n    model.eval()\n"
        "    for x, y in loader:\n        out = model(x.to(device))\n"
        "        model.adapt(out)  # entropy minimisation: backward + optimizer step inside\n",
        # a forward of made-up inputs whose result is dropped warms the model up, once per call of `test`
        "import torch\n\n\ndef test(weights, loader, device):\n"
        "    model = torch.load(weights, map_location=device)\n    model.eval()\n"
        "    model(torch.zeros(1, 3, 640, 640).to(device))  # run once\n    with torch.no_grad():\n"
        "        for img in loader:\n            preds = model(img.to(device))\n    return preds\n"
        "\n\nfor w in weights:\n    test(w, loader, \"cuda\")\n",
        # a preprocessing step named `encoder`: it tokenizes on the CPU, the model runs under no_grad
        "import torch\nfrom .processor import RewardEncoderProcessorStep\n\ndef main(model, dataset):\n"
        "    model.eval()\n    encoder = RewardEncoderProcessorStep(base_model_id='Qwen/Qwen3-VL-4B-Instruct')\n"
        "    for frames in dataset:\n        encoded = encoder({'frames': frames})\n        with torch.no_grad():\n"
        "            rewards = model.compute_reward(encoded)\n        print(rewards.cpu())\n",
        "import torch\nfrom .processor import RewardEncoderProcessorStep\n\n"
        "def progress(model, dataset, encoder: RewardEncoderProcessorStep):\n    model.eval()\n    for frames in dataset:\n"
        "        encoded = encoder({'frames': frames})\n        with torch.no_grad():\n"
        "            rewards = model.compute_reward(encoded)\n        print(rewards.cpu())\n",
        # a method of an OpenMMLab model (mmseg's segmentors are nn.Modules): its caller owns grad mode
        "import torch\nfrom mmseg.models.segmentors.base import BaseSegmentor\n\nclass Segmentor(BaseSegmentor):\n"
        "    def encode_decode(self, img):\n        return self.decode_head(self.backbone(img))\n\n"
        "    def aug_test(self, imgs):\n        logit = self.encode_decode(imgs[0])\n"
        "        for i in range(1, len(imgs)):\n            logit += self.encode_decode(imgs[i])\n"
        "        return logit.argmax(dim=1)\n",
        # a generator passed on lazily (`enumerate`), run where it is consumed, under no_grad
        "import torch\nmodel.eval()\nbatches = enumerate(model(x) for x in test_loader)\nwith torch.no_grad():\n"
        "    for i, out in batches:\n        print(i, out.argmax(1))\n",
        # a demo's ten examples, one by one, after training
        "import torch\nmodel.eval()\nimages, labels = next(iter(val_loader))\nfor i in range(0, 10):\n"
        "    ps = torch.exp(model(images[i].unsqueeze(0)))\n    print(ps.argmax().item(), labels[i].item())\n",
        # ... ten clips of a video, the range named first (pytorchvideo's detection tutorial)
        "import torch\nvideo_model.eval()\ntime_stamp_range = range(90, 100)\nfor t in time_stamp_range:\n"
        "    preds = video_model(clip(t).to(device)).to('cpu')\n    print(t, preds.argmax(-1))\n",
        # a demo's loop over three settings, each built, trained once and run once more
        "import torch\nif __name__ == \"__main__\":\n    for bins in (0, 2, 10):\n        net = Net(bins)\n"
        "        loss = net(images, actions=actions)\n        loss.backward()\n        pred = net(images)\n"
        "        assert pred.shape == (2, 7)\n",
        # a generator over the loader kept for later: it runs where it is consumed, not here
        "import torch\nmodel.eval()\nbatches = (model(x.cuda()) for x in test_loader)\n"
        "with torch.no_grad():\n    probs = torch.cat(list(batches))\n",
        # ... the sum of the losses over a calibration loader, backwarded after it
        "import torch\nmodel.eval()\nloss = sum(criterion(model(x), y) for x, y in calib_loader)\nloss.backward()\n",
        # a model's method that returns what carries a graph (scores a caller may train on), one that
        # model code calls (its caller chose), one every call makes under no_grad, one that keeps outputs
        "import torch\nclass Classifier(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(784, 10)\n\n    def forward(self, x):\n        return self.fc(x)\n\n"
        "    def predict_scores(self, loader):\n        outs = []\n        for x in loader:\n"
        "            outs.append(self(x.cuda()))\n        return torch.cat(outs)\n",
        "import torch\nclass Classifier(torch.nn.Module):\n    def forward(self, x):\n        if not self.training:\n"
        "            return self.vote(x)\n        return self.fc(x)\n\n    def vote(self, x):\n        preds = []\n"
        "        for head in self.heads:\n            preds.append(head(x).argmax(1))\n"
        "        return torch.stack(preds).mode(0).values\n",
        "import torch\nclass Classifier(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(784, 10)\n\n    def forward(self, x):\n        return self.fc(x)\n\n"
        "    def predict(self, loader):\n        preds = []\n        for x in loader:\n"
        "            preds.append(self(x.cuda()).argmax(1))\n        return torch.cat(preds)\n\n"
        "model = Classifier()\nwith torch.no_grad():\n    p = model.predict(test_loader)\n",
        "import torch\nclass Classifier(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(784, 10)\n\n    def forward(self, x):\n        return self.fc(x)\n\n"
        "    def predict(self, loader):\n        preds = []\n        for x in loader:\n            out = self(x.cuda())\n"
        "            self.last_logits = out\n            preds.append(out.argmax(1))\n        return torch.cat(preds)\n",
        # outputs of an eval-mode loop that a backward after it reads
        "import torch\nteacher.eval()\nfor x in calib_loader:\n    targets = teacher(x.cuda())\n"
        "loss = torch.nn.functional.mse_loss(student(x.cuda()), targets)\nloss.backward()\n",
        # HF's prediction_step under no_grad; Lightning runs validation_step without grad itself
        "import torch\nfrom transformers import Trainer\n\nclass MyTrainer(Trainer):\n"
        "    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):\n"
        "        with torch.no_grad():\n            outputs = model(**inputs)\n"
        "        return outputs.loss, outputs.logits, inputs[\"labels\"]\n",
        # an HF pipeline (it runs its model under no_grad), handed through helpers
        "from transformers import AutoModelForCausalLM, pipeline\n\ndef get_generator(path):\n"
        "    model = AutoModelForCausalLM.from_pretrained(path).half()\n"
        "    generator = pipeline(\"text-generation\", model=model, device=\"cuda:0\")\n    return generator\n\n"
        "def respond(generator, prompt):\n    return generator(prompt, max_new_tokens=64)\n\n"
        "def main():\n    generator = get_generator(\"gpt2\")\n    while True:\n        prompt = input(\"> \")\n"
        "        print(respond(generator, prompt))\n",
        # ... or one that calls, under no_grad, the helper its training calls with grad (TRL's trainers)
        "import torch\nfrom transformers import Trainer\n\nclass MyTrainer(Trainer):\n"
        "    def batch_loss(self, model, batch):\n        return model(batch[\"input_ids\"]).logits.logsumexp(-1).mean()\n\n"
        "    def compute_loss(self, model, inputs, return_outputs=False):\n        return self.batch_loss(model, inputs)\n\n"
        "    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):\n"
        "        with torch.no_grad():\n            loss = self.batch_loss(model, inputs)\n"
        "        return loss.detach(), None, None\n",
        "import torch\nimport lightning as L\n\nclass Lit(L.LightningModule):\n    def validation_step(self, batch, i):\n"
        "        self.log(\"val\", self.model(batch).mean())\n",
        "import torch\nmodel.eval()\nwith torch.no_grad():\n    for x in loader:\n        preds.append(model(x))\n",
        "import torch\nmodel.eval()\nfor x in loader:\n    with torch.inference_mode():\n        out = model(x)\n",
        "import torch\n@torch.no_grad()\ndef evaluate(model, loader):\n    for x in loader:\n        print(model(x).sum())\n",
        # a loop with a backward is training
        "import torch\nmodel.eval()\nfor x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n"
        "    optimizer.step()\n",
        # gradient accumulation through a helper
        "import torch\ndef step(x, y):\n    criterion(model(x), y).backward()\n"
        "def validate_and_train(loader):\n    for x, y in loader:\n        step(x, y)\n",
        "import torch\ndef evaluate(loader):\n    with accelerator.accumulate(model):\n"
        "        for x in loader:\n            out = model(x)\n",
        # the model's forward computes this mode under no_grad itself
        "import torch\n\n\nclass Pix2Pix(torch.nn.Module):\n    def forward(self, data, mode):\n"
        "        semantics = self.preprocess(data)\n        if mode == \"generator\":\n"
        "            return self.generator_loss(semantics)\n        elif mode == \"inference\":\n"
        "            with torch.no_grad():\n                fake, _ = self.generate(semantics)\n"
        "            return fake\n        raise ValueError(mode)\n\n\nmodel = Pix2Pix()\nmodel.eval()\n"
        "for data in loader:\n    preds.append(model(data, mode=\"inference\"))\n",
        # a module without parameters records only what its inputs carry
        "import torch\nfrom torch import nn\n\ncos = nn.CosineSimilarity(dim=1, eps=1e-6)\n\n\n"
        "def report_similarity(model, loader):\n    model.eval()\n    sims = []\n"
        "    for image_embed, text_embed in loader:\n"
        "        sims.append(cos(image_embed.cuda(), text_embed.cuda()).mean().item())\n    return sims\n",
        # HF generate() is already no-grad
        "import torch\nmodel.eval()\nfor batch in loader:\n    ids = model.generate(**batch)\n",
        # Lightning runs validation_step without grad
        "import torch\nimport lightning as L\nclass Lit(L.LightningModule):\n"
        "    def validation_step(self, batch, i):\n        for x in batch:\n            self.model(x)\n",
        # outputs backwarded after the loop (chunked forward)
        "import torch\ndef evaluate(model, chunks):\n    outs = []\n    for c in chunks:\n        outs.append(model(c))\n"
        "    torch.cat(outs).sum().backward()\n",
        # a helper called only under no_grad
        "import torch\ndef predict(x):\n    return model(x)\ndef run(loader):\n    for x in loader:\n"
        "        with torch.no_grad():\n            predict(x)\n",
        # saliency / adversarial examples want input gradients
        "import torch\nmodel.eval()\nfor x, y in loader:\n    x.requires_grad_()\n    out = model(x)\n"
        "    g, = torch.autograd.grad(out.sum(), x)\n",
        # no sign of evaluation: a loss function looping over micro-batches
        "import torch\ndef micro_losses(model, parts):\n    total = 0\n    for p in parts:\n"
        "        total = total + model(p).sum()\n    return total\n",
        # the loss goes to code that may backward it
        "import torch\nmodel.eval()  # frozen batch norm\nfor x, y in loader:\n    loss = criterion(model(x), y)\n"
        "    trainer.apply(loss)\n",
        # a file that never trains, but nothing says it evaluates a trained model (a stress test)
        "import torch\nmem = Elementwise()\nfor _ in range(50):\n    x = torch.randn(4)\n"
        "    torch.testing.assert_close(lowered(x), mem(x))\n",
        # a frozen model records no graph
        "import torch\nmodel.requires_grad_(False)\nmodel.eval()\nfor x in loader:\n    out = model(x)\n",
        # a bare set_grad_enabled(False) switched grad off for the file's top level
        "import torch\ntorch.set_grad_enabled(False)\nfor x in loader:\n    out = model(x)\n",
        # a wrapper class of this module runs its model under no_grad
        "import torch\nclass Embedder:\n    def __init__(self, path):\n        self.net = torch.jit.load(path).cuda()\n"
        "    def __call__(self, x):\n        with torch.no_grad():\n            return self.net(x).cpu()\n"
        "class Job:\n    def __init__(self, path):\n        self.model = Embedder(path)\n"
        "    def predict_all(self, batches):\n        for x in batches:\n            print(self.model(x))\n",
        # model code: a method of a module class runs in whatever grad mode its caller chose
        "import torch\nimport torch.nn as nn\nclass Streamer(nn.Module):\n    def forward(self, x):\n"
        "        return self.proj(x)\n    def forward_chunks_test(self, chunks):\n        outs = []\n"
        "        for c in chunks:\n            outs.append(self.forward(c))\n        return torch.cat(outs)\n",
        "import torch\nclass SpeechEncoder(BaseEncoder):\n    def evaluate_segments(self, segments):\n"
        "        self.eval()\n        return [self.encoder(s) for s in segments if self.encoder(s) is not None]\n"
        "    def infer(self, frames):\n        self.eval()\n        for f in frames:\n            self.cache(self.encoder(f))\n",
        # a generator whose model runs under no_grad
        "import torch\n\n\nclass Codes:\n    def __init__(self, path):\n"
        "        self.model = torch.load(path).eval()\n\n    def batches(self, clips):\n"
        "        for clip in clips:\n            with torch.no_grad():\n"
        "                codes = self.model.feature_extractor(clip).argmax(-1)\n"
        "            yield codes.tolist()\n\n\nif __name__ == \"__main__\":\n"
        "    for codes in Codes(\"m.pt\").batches(clips):\n        print(codes)\n",
        # a generator of a script handing its outputs back with their graph: the caller may train on them
        "import torch\n\n\nclass Codes:\n    def __init__(self, path):\n"
        "        self.model = torch.load(path).eval()\n\n    def batches(self, clips):\n"
        "        for clip in clips:\n            yield self.model.feature_extractor(clip)\n\n\n"
        "if __name__ == \"__main__\":\n    for feats in Codes(\"m.pt\").batches(clips):\n"
        "        print(feats.shape)\n",
        # a training generator: it backwards
        "import torch\n\n\ndef steps(model, loader, opt):\n    for x, y in loader:\n"
        "        loss = (model.feature_extractor(x) - y).pow(2).mean()\n        loss.backward()\n"
        "        opt.step()\n        opt.zero_grad()\n        yield loss.item()\n\n\n"
        "if __name__ == \"__main__\":\n    model = torch.load(\"m.pt\")\n"
        "    for loss in steps(model, loader, torch.optim.SGD(model.parameters(), lr=0.1)):\n"
        "        print(loss)\n",
        # a forward run to count its operations, once per model of a profiling script
        "import sys\nimport torch\nfrom torch.utils.flop_counter import FlopCounterMode\n\n\ndef flops(model, size):\n"
        "    counter = FlopCounterMode()\n    with counter:\n        model(torch.ones(size, device=\"cuda\"))\n"
        "    return counter.get_total_flops()\n\n\ndef main(names):\n    for name in names:\n"
        "        model = create_model(name).cuda()\n        model.eval()\n"
        "        print(name, flops(model, (1, 3, 224, 224)))\n\n\n"
        "if __name__ == \"__main__\":\n    main(sys.argv[1:])\n",
        # a script that trains through an object that backwards and steps for it (timm's
        # `NativeScaler`): clearing the optimizer's gradients says it trains
        "import torch\n\n\ndef train_one_epoch(model, loader, optimizer, loss_scaler):\n    model.train()\n"
        "    for x, y in loader:\n        loss_scaler(criterion(model(x), y), optimizer)\n"
        "        optimizer.zero_grad()\n\n\ndef main(model, loader, optimizer, loss_scaler, epochs):\n"
        "    model.load_state_dict(torch.load(\"m.pt\", map_location=\"cpu\"))\n    for epoch in range(epochs):\n"
        "        train_one_epoch(model, loader, optimizer, loss_scaler)\n\n\n"
        "if __name__ == \"__main__\":\n    main(*setup())\n",
        # a script that trains somewhere: nothing says its other methods only evaluate
        "import torch\n\n\nclass Runner:\n    def __init__(self, path):\n"
        "        self.model = torch.load(path)\n\n    def fit(self, loader):\n        for x, y in loader:\n"
        "            self.criterion(self.model(x), y).backward()\n            self.optimizer.step()\n\n"
        "    def features(self, clips):\n        for clip in clips:\n"
        "            print(self.model.feature_extractor(clip).norm().item())\n\n\n"
        "if __name__ == \"__main__\":\n    Runner(\"m.pt\").features(clips)\n",
        # an inference script whose code names no device: its model runs on the CPU
        "import torch\nimport torch.nn.functional as F\nimport transformers\n"
        "model = transformers.GPT2LMHeadModel.from_pretrained('gpt2')\n"
        "tok = transformers.GPT2Tokenizer.from_pretrained('gpt2')\nfor text in test_texts:\n"
        "    toks = tok.encode(text, return_tensors='pt')\n    logits = F.log_softmax(model(toks)[0], dim=-1)\n"
        "    print(float(logits.sum()))\n",
        # a notebook timing a model exported to OpenVINO: writing the model out places nothing, and
        # what OpenVINO compiles records no torch graph
        "from setfit import SetFitModel\nNUM_ITERS = 100\nmodel_id = 'm'\nmodel = SetFitModel.from_pretrained('m')\n"
        "# Run inference\nfor i in range(NUM_ITERS):\n    preds = model(texts)\n"
        "from setfit.exporters.openvino import export_to_openvino\noutput_path = 'model.xml'\n"
        "export_to_openvino(model, output_path)\nfrom transformers import AutoTokenizer\nimport openvino.runtime as ov\n"
        "tokenizer = AutoTokenizer.from_pretrained(model_id)\ninputs = tokenizer(texts, return_tensors='np')\n"
        "inputs_dict = dict(inputs)\ncore = ov.Core()\nov_model = core.read_model(output_path)\n"
        "compiled_model = core.compile_model(ov_model, 'CPU')\n# Run inference\nfor i in range(NUM_ITERS):\n"
        "    ov_preds = compiled_model(inputs_dict)[0]\n",
        # a function of a module that is no script (others may call it to train)
        "import torch\n\nmodel = torch.load(\"m.pt\")\n\n\ndef summarize(model, clips):\n"
        "    for clip in clips:\n        print(model.feature_extractor(clip).norm().item())\n",
        # a method of this module named like a model is a helper, not a model
        "import torch\n\n\nclass Loader:\n    def tune_model(self, model):\n        model.half()\n\n"
        "    def load_all(self, paths):\n        for path in paths:\n"
        "            self.tune_model(torch.load(path))\n\n\nif __name__ == \"__main__\":\n"
        "    Loader().load_all(paths)\n",
        # the helper that runs the model is called under no_grad (its other caller trains)
        "import torch\n\n\ndef score(model, x):\n    return model(x)\n\n\ndef step(model, x, opt):\n"
        "    score(model, x).sum().backward()\n    opt.step()\n\n\ndef predict_one(model, x):\n"
        "    with torch.no_grad():\n        return score(model, x)\n\n\ndef evaluate(model, loader):\n"
        "    model.eval()\n    for x in loader:\n        print(predict_one(model, x).argmax())\n",
        # a SimulEval agent that backwards (it learns online)
        "import torch\nfrom simuleval.agents import TextAgent\n\n\nclass Agent(TextAgent):\n"
        "    def policy(self, states):\n        states.hidden = self.model.decoder(states.tokens)\n"
        "        return True\n\n    def update_states_write(self, states):\n"
        "        self.criterion(states.hidden, states.target).backward()\n",
        # a SimulEval agent whose model runs under no_grad
        "import torch\nfrom simuleval.agents import TextAgent\n\n\nclass Agent(TextAgent):\n"
        "    def policy(self, states):\n        with torch.no_grad():\n"
        "            states.hidden = self.model.decoder(states.tokens)\n        return True\n",
        # a SimulEval agent turning grad off for the process
        "import torch\nfrom simuleval.agents import TextAgent\n\n\nclass Agent(TextAgent):\n"
        "    def __init__(self, args):\n        self.model = torch.load(args.path)\n"
        "        torch.set_grad_enabled(False)\n\n    def policy(self, states):\n"
        "        states.hidden = self.model.decoder(states.tokens)\n        return True\n",
        # a SimulEval agent handing its outputs to an object that may train on them
        "import torch\nfrom simuleval.agents import TextAgent\n\n\nclass Agent(TextAgent):\n"
        "    def policy(self, states):\n        logits = self.model.decoder(states.tokens)\n"
        "        self.learner.update(logits, states.target)\n        return logits[-1].argmax().item() == 0\n",
        # a model's own method (`reset_rnn`) is no model part: the forward runs under no_grad
        "import torch\nmodel.eval()\nfor x in loader:\n    model.reset_rnn()\n    with torch.no_grad():\n"
        "        print(model(x).argmax())\n",
        # a SimulEval agent whose module turns grad off for the process
        "import torch\nfrom simuleval.agents import TextAgent\n\ntorch.set_grad_enabled(False)\n\n\n"
        "class Agent(TextAgent):\n    def policy(self, states):\n"
        "        states.hidden = self.model.decoder(states.tokens)\n        return True\n",
        # a training loop's forward whose output reaches the backward (the metric reads the same output)
        "import torch\n\ndef train(model, loader, opt):\n    for x, y in loader:\n        out = model(x)\n"
        "        loss = criterion(out, y)\n        loss.backward()\n        opt.step()\n        opt.zero_grad()\n"
        "        print((out.argmax(-1) == y).float().mean().item())\n",
        # a GAN: the generator's output reaches both backwards
        "import torch\n\ndef train(G, D, loader, opt_g, opt_d):\n    for real in loader:\n        fake = G(noise())\n"
        "        d_out = D(fake.detach())\n        d_loss = bce(d_out, zeros) + bce(D(real), ones)\n"
        "        d_loss.backward()\n        opt_d.step()\n        g_loss = bce(D(fake), ones)\n"
        "        g_loss.backward()\n        opt_g.step()\n",
        # the metric pass runs under no_grad already
        "import torch\n\ndef train(model, loader, opt):\n    for x, y in loader:\n"
        "        loss = criterion(model(x), y)\n        loss.backward()\n        opt.step()\n"
        "        with torch.no_grad():\n            preds = model.inference(x)\n        print(preds.mean().item())\n",
        # the output goes to a call that may backward it
        "import torch\n\ndef train(model, loader, opt):\n    for x, y in loader:\n"
        "        loss = criterion(model(x), y)\n        loss.backward()\n        opt.step()\n"
        "        aux = model.inference(x)\n        learner.observe(aux, y)\n",
        # ... or is kept on the instance
        "import torch\n\ndef train(self, loader):\n    for x, y in loader:\n"
        "        loss = criterion(self.model(x), y)\n        loss.backward()\n        self.opt.step()\n"
        "        preds = self.model(x)\n        self.last = preds\n",
        # a periodic sample dropped before the next step, detached, or taken once
        _PERIODIC_SAMPLE.replace("DROP", "            del sample\n"),
        _PERIODIC_SAMPLE.replace("DROP", "            sample = sample.detach().cpu()\n"),
        _PERIODIC_SAMPLE.replace("DROP", "").replace("step % 100 == 0", "step == 0"),
        _PERIODIC_SAMPLE.replace("DROP", "").replace("step % 100 == 0", "(step + 1) % len(loader) == 0"),
        # ... or made by a model a helper of the module freezes (DiT's `requires_grad(vae, False)`)
        "import torch\n\n\ndef requires_grad(model, flag=True):\n    for p in model.parameters():\n"
        "        p.requires_grad = flag\n\n\n"
        + _PERIODIC_SAMPLE.replace("DROP", "").replace("    for step,", "    requires_grad(vae, False)\n    for step,")
        .replace("model.inference(x)", "vae.decode(x)").replace("import torch\n\n", "").replace("(model,", "(model, vae,"),
        # ... or by CycleGAN's `set_requires_grad(nets, requires_grad=False)`, by its default
        "import torch\n\n\ndef set_requires_grad(nets, requires_grad=False):\n"
        "    if not isinstance(nets, list):\n        nets = [nets]\n    for net in nets:\n"
        "        for param in net.parameters():\n"
        "            param.requires_grad = requires_grad\n\n\n"
        "def train(model, vae, loader, opt, z_fixed):\n    set_requires_grad(vae)\n"
        "    for step, (x, y) in enumerate(loader):\n        loss = model(x, y).mean()\n"
        "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n"
        "        if step % 1000 == 0:\n            samples = vae.decode(z_fixed)\n"
        "            print(step, samples.mean().item())\n",
        # a model's inherited method that runs without grad, the class named by the parameter's annotation
        "import torch\nfrom torch import nn\n\n\nclass Segmenter(nn.Module):\n    @torch.no_grad()\n"
        "    def inference(self, images):\n        return self(images).softmax(1)\n\n\nclass UNet(Segmenter):\n"
        "    def forward(self, images):\n        return self.net(images)\n\n\nclass Evaluator:\n"
        "    def __init__(self, model: UNet, loader):\n        self.model = model\n        self.loader = loader\n\n"
        "    def evaluate(self):\n        masks = []\n        for images, _ in self.loader:\n"
        "            masks.append(self.model.inference(images.cuda()))\n        return torch.cat(masks)\n",
        "import torch\n\ndef train(model, loader, opt):\n    for step, (x, y) in enumerate(loader):\n"
        "        sample = None\n        loss = criterion(model(x), y)\n        loss.backward()\n        opt.step()\n"
        "        if step % 100 == 0:\n            sample = model.inference(x)\n"
        "            print(sample.norm().item())\n",
        # a frozen EMA copy records no graph
        "import torch\n\ndef train(model, ema_model, loader, opt):\n    ema_model.requires_grad_(False)\n"
        "    for x, y in loader:\n        loss = criterion(model(x), y)\n        loss.backward()\n        opt.step()\n"
        "        ema_out = ema_model(x)\n        print((ema_out.argmax(-1) == y).float().mean().item())\n",
        # the loop's one forward feeds the loss through a hook or an attribute memlint cannot follow
        "import torch\n\ndef train(model, loader, optimizer):\n    for x, y in loader:\n        logits = model(x)\n"
        "        loss = model.aux_loss\n        loss.backward()\n        optimizer.step()\n",
        # beside the trained forward, the second feeds the loss by what the model keeps, or by a hook
        "import torch\nimport torch.nn.functional as F\n\ndef train(model, loader, optimizer):\n"
        "    for x, y, xu in loader:\n        loss = F.cross_entropy(model(x), y)\n        logits_u = model(xu)\n"
        "        print(logits_u.argmax(-1).float().mean().item())\n        loss = loss + model.aux_loss\n"
        "        loss.backward()\n        optimizer.step()\n",
        "import torch\nimport torch.nn.functional as F\n\nfeats = {}\n\ndef keep(module, inp, out):\n"
        "    feats[\"emb\"] = out\n\ndef train(model, loader, optimizer):\n"
        "    model.encoder.register_forward_hook(keep)\n    for x, y, xu in loader:\n"
        "        loss = F.cross_entropy(model(x), y)\n        logits_u = model(xu)\n"
        "        print(logits_u.max(-1).values.mean().item())\n        loss = loss + feats[\"emb\"].pow(2).mean()\n"
        "        loss.backward()\n        optimizer.step()\n",
        # the output goes to a helper of another module, or to an object's `update`, which may backward it
        "import torch\nfrom mylib.train_utils import backward_and_step\n\n"
        "def train(model, aux, loader, optimizer):\n    for x, y in loader:\n        out = model(x)\n"
        "        backward_and_step(out, y, optimizer)\n        aux(x).sum().backward()\n",
        "import torch\n\ndef train(model, aux, loader, learner):\n    for x, y in loader:\n        out = model(x)\n"
        "        learner.update(out, y)\n        aux(x).sum().backward()\n",
        # the metric pass is a method of this module's model that runs without grad itself
        "import torch\nimport torch.nn as nn\n\nclass Net(nn.Module):\n    def forward(self, x):\n"
        "        return self.fc(x)\n\n    @torch.no_grad()\n    def inference(self, x):\n"
        "        return self.fc(x).argmax(-1)\n\ndef train(model, loader, optimizer):\n    for x, y in loader:\n"
        "        torch.nn.functional.cross_entropy(model(x), y).backward()\n        optimizer.step()\n"
        "        pred = model.inference(x)\n        print((pred == y).float().mean().item())\n",
        # a `policy` method of a class that is no SimulEval agent
        "import torch\n\n\nclass Agent:\n    def policy(self, obs):\n"
        "        return self.net(obs).softmax(-1)\n",
        # an embedder from the hub: its `encode` is remote code, its grad mode unknown here
        "import torch\nfrom transformers import AutoModel\n\n\ndef index(name, batches):\n"
        "    model = AutoModel.from_pretrained(name, trust_remote_code=True)\n    model.eval()\n"
        "    model.cuda()\n    out = []\n    for batch in batches:\n"
        "        out.append(model.encode(batch, instruction=\"query: \").cpu())\n    return out\n",
        # a predictor that hands its predictions back with their graph: a caller may train on them
        "import torch\n\n\nclass Predictor:\n    def __init__(self, model):\n        self.model = model\n"
        "        self.model.eval()\n\n    def __call__(self, frames):\n        return self.model(frames.cuda())\n\n\n"
        "class Demo:\n    def __init__(self, model):\n        self.predictor = Predictor(model)\n\n"
        "    def put(self, task):\n        task.preds = self.predictor(task.frames).cpu()\n",
        # ... one whose class backwards (a saliency map, from the gradient of the score)
        "import torch\n\n\nclass Saliency:\n    def __init__(self, model):\n        self.model = model\n"
        "        self.model.eval()\n\n    def score(self, frames):\n        return self.model(frames.cuda()).max()\n\n"
        "    def __call__(self, frames):\n        frames.requires_grad_(True)\n        self.score(frames).backward()\n"
        "        return frames.grad.abs().detach()\n\n\nclass Demo:\n    def __init__(self, model):\n"
        "        self.saliency = Saliency(model)\n\n    def put(self, task):\n"
        "        task.map = self.saliency(task.frames)\n",
        # ... one that detaches its predictions on one branch only: the other hands the graph on
        "import torch\n\n\nclass Predictor:\n    def __init__(self, model):\n        self.model = model\n"
        "        self.model.eval()\n\n    def __call__(self, task):\n        preds = self.model(task.frames.cuda())\n"
        "        if task.offline:\n            preds = preds.detach()\n        task.add_action_preds(preds)\n"
        "        return task\n\n\nclass Demo:\n    def __init__(self, model):\n        self.predictor = Predictor(model)\n\n"
        "    def put(self, task):\n        return self.predictor(task)\n",
        # ... one its only caller runs under no_grad
        "import torch\n\n\nclass Predictor:\n    def __init__(self, model):\n        self.model = model\n"
        "        self.model.eval()\n\n    def __call__(self, task):\n        task.preds = self.model(task.frames.cuda()).detach()\n"
        "        return task\n\n\nclass Demo:\n    def __init__(self, model):\n        self.predictor = Predictor(model)\n\n"
        "    def put(self, task):\n        with torch.no_grad():\n            return self.predictor(task)\n",
        # a model whose forward runs its whole body without grad, or hands every call to methods that do (RWKV's demos)
        "import torch\n\n\nclass RNN(torch.jit.ScriptModule):\n    def __init__(self, path):\n"
        "        super().__init__()\n        self.w = torch.load(path, map_location=\"cuda\")\n\n"
        "    def forward(self, token, state):\n        \"\"\"One token.\"\"\"\n        with torch.no_grad():\n"
        "            return self.w[\"emb\"][token] @ self.w[\"head\"], state\n\n\n"
        "model = RNN(\"rwkv.pth\")\nstate = None\nfor token in tokens:\n"
        "    out, state = model.forward(token, state)\n    print(out.argmax().item())\n",
        _RWKV,
        # the `rwkv` package's model (its forward runs under no_grad); the other branch never runs as written
        _HF_MODE.replace("HF_MODE = SWITCH", "HF_MODE = False"),
        # an instance of a class whose forward runs without grad, called (RWKV's demos, a frozen teacher)
        "import torch\n\n\nclass Teacher(torch.nn.Module):\n    def forward(self, x):\n"
        "        with torch.no_grad():\n            return self.net(x).softmax(-1)\n\n\n"
        "teacher = Teacher().cuda()\nteacher.eval()\npseudo = []\n"
        "for images, _ in unlabeled_loader:\n    pseudo.append(teacher(images.cuda()))\n",
        # an anchor computed by the model the loop trains: the gradient through it may be meant
        "import torch\n\n\ndef finetune(model, x0, loader):\n    anchor = model(x0.cuda())\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    for x in loader:\n"
        "        loss = (model(x.cuda()) - anchor).pow(2).mean()\n"
        "        loss.backward(retain_graph=True)\n        opt.step()\n        opt.zero_grad()\n",
        # the image encoded under no_grad before the chat loop
        "import torch\nfrom transformers import AutoModelForCausalLM, CLIPVisionModel\n\n\n"
        "def main(args):\n    llm = AutoModelForCausalLM.from_pretrained(args.llm).cuda()\n"
        "    visual_encoder = CLIPVisionModel.from_pretrained(args.clip).cuda()\n    llm.eval()\n"
        "    visual_encoder.eval()\n    with torch.no_grad():\n"
        "        image_embeds = visual_encoder(load_image(args.image).cuda()).last_hidden_state\n"
        "    while True:\n        text = input(\">>> \")\n"
        "        inputs = build_inputs(tokenizer(text, return_tensors=\"pt\").input_ids.cuda(), image_embeds)\n"
        "        print(tokenizer.decode(llm.generate(**inputs, max_new_tokens=256)[0]))\n\n\n"
        "if __name__ == \"__main__\":\n    main(parse_args())\n",
        # above the loop, a helper that runs its forward under no_grad unless asked to train
        "import torch\n\n\nclass ZeroShot:\n    def text_features(self, texts, train=False):\n"
        "        tokens = clip.tokenize(texts).cuda()\n        if train:\n"
        "            return self.model.encode_text(tokens)\n        with torch.no_grad():\n"
        "            return self.model.encode_text(tokens)\n\n"
        "    def evaluate(self, loader, texts):\n        self.model.eval()\n"
        "        feats = self.text_features(texts)\n        hits = 0\n"
        "        for images, labels in loader:\n            with torch.no_grad():\n"
        "                logits = self.model.encode_image(images.cuda()) @ feats.T\n"
        "            hits += (logits.argmax(-1) == labels.cuda()).sum().item()\n"
        "        return hits\n",
        # an encoder whose optimizer steps after the heads' loop: retain_graph carries its gradients
        "import torch\nimport torch.nn.functional as F\n\n\n"
        "def update(encoder, heads, x, targets, enc_opt, head_opt):\n    z = encoder(x)\n"
        "    for name, head in heads.items():\n"
        "        loss = F.cross_entropy(head(z), targets[name].cuda())\n"
        "        loss.backward(retain_graph=True)\n        head_opt.step()\n"
        "        head_opt.zero_grad()\n    enc_opt.step()\n    enc_opt.zero_grad()\n\n\n"
        "def main(encoder, heads, loader):\n"
        "    enc_opt = torch.optim.Adam(encoder.parameters(), lr=1e-4)\n"
        "    head_opt = torch.optim.Adam(heads.parameters(), lr=1e-3)\n"
        "    for x, targets in loader:\n"
        "        update(encoder, heads, x.cuda(), targets, enc_opt, head_opt)\n",
        # an anchor from the model trained by an optimizer of parameter groups
        "import torch\nimport torch.nn.functional as F\n\n\ndef finetune(model, x0, loader):\n"
        "    anchor = model(x0.cuda())\n"
        "    opt = torch.optim.SGD([{\"params\": model.backbone.parameters()}, {\"params\": model.head.parameters(), \"lr\": 1e-2}], lr=1e-3)\n"
        "    for x in loader:\n        loss = (model(x.cuda()) - anchor).pow(2).mean()\n"
        "        loss.backward(retain_graph=True)\n        opt.step()\n        opt.zero_grad()\n",
    )
    INVALID = (
        # a chain above the loop: reported at its first forward, with every name that keeps it
        Invalid(
            "import torch\nfrom transformers import AutoModel, AutoModelForCausalLM, CLIPVisionModel\n\n"
            "\ndef main(args, tokenizer, build_inputs, load_image):\n"
            "    llm = AutoModelForCausalLM.from_pretrained(args.llm).cuda()\n"
            "    visual_encoder = CLIPVisionModel.from_pretrained(args.clip).cuda()\n"
            "    projector = AutoModel.from_pretrained(args.projector, trust_remote_code=True).cuda()\n"
            "    projector.eval()\n    llm.eval()\n    visual_encoder.eval()\n"
            "    visual_outputs = visual_encoder(load_image(args.image).cuda(), output_hidden_states=True)\n"
            "    pixel_values = projector(visual_outputs.hidden_states[-2][:, 1:])\n    while True:\n"
            "        text = input(\">>> \")\n"
            "        inputs = build_inputs(tokenizer(text, return_tensors=\"pt\").input_ids.cuda(), pixel_values)\n"
            "        print(tokenizer.decode(llm.generate(**inputs, max_new_tokens=256)[0]))\n\n\n"
            "if __name__ == \"__main__\":\n    main(parse_args(), *setup())\n"
        ),
        # text targets computed with grad above a search loop that backwards through them with retain_graph
        Invalid(
            "import torch\n\n\ndef embed_text(model, prompt, device=\"cuda\"):\n"
            "    return model.encode_text(clip.tokenize(prompt).to(device)).float()\n\n\n"
            "def search(G, clip_model, texts, seeds, device=\"cuda\"):\n"
            "    targets = [embed_text(clip_model.model, text, device=device) for text in texts]\n"
            "    direction = torch.zeros(1, 16, 512, device=device, requires_grad=True)\n"
            "    opt = torch.optim.AdamW([direction], lr=0.05)\n    for seed in seeds:\n"
            "        embeds = clip_model(G(styles(seed) + direction))\n"
            "        loss = sum(spherical_dist_loss(embeds, t) for t in targets)\n"
            "        loss.backward(retain_graph=True)\n        opt.step()\n        opt.zero_grad()\n"
        ),
        # a style image's features computed with grad, backwarded again on every step of the optimisation
        Invalid(
            "import torch\n\n\ndef style_transfer(vgg, content, style, steps):\n"
            "    style_feats = vgg(style)\n    image = content.clone().requires_grad_()\n"
            "    opt = torch.optim.Adam([image], lr=0.01)\n    for _ in range(steps):\n"
            "        loss = gram_loss(vgg(image), style_feats)\n"
            "        loss.backward(retain_graph=True)\n        opt.step()\n        opt.zero_grad()\n"
        ),
        # an image encoded once with grad before a chat loop: its activations live through every turn
        Invalid(
            "import torch\nfrom transformers import AutoModelForCausalLM, CLIPVisionModel\n\n\n"
            "def main(args):\n    llm = AutoModelForCausalLM.from_pretrained(args.llm).cuda()\n"
            "    visual_encoder = CLIPVisionModel.from_pretrained(args.clip).cuda()\n    llm.eval()\n"
            "    visual_encoder.eval()\n"
            "    image_embeds = visual_encoder(load_image(args.image).cuda()).last_hidden_state\n"
            "    while True:\n        text = input(\">>> \")\n"
            "        inputs = build_inputs(tokenizer(text, return_tensors=\"pt\").input_ids.cuda(), image_embeds)\n"
            "        print(tokenizer.decode(llm.generate(**inputs, max_new_tokens=256)[0]))\n\n\n"
            "if __name__ == \"__main__\":\n    main(parse_args())\n"
        ),
        # a factory's model: a helper class whose forward runs without grad says nothing of it
        Invalid(
            "import timm\nimport torch\n\n\nclass ClassPrior(torch.nn.Module):\n"
            "    def forward(self, logits):\n        with torch.no_grad():\n"
            "            self.counts += torch.bincount(logits.argmax(-1), minlength=1000)\n"
            "            return self.counts / self.counts.sum()\n\n\n"
            "model = timm.create_model(\"vit_base_patch16_224\", pretrained=True).cuda()\nmodel.eval()\n"
            "for images, _ in val_loader:\n    logits = model.forward(images.cuda())\n"
            "    print(logits.argmax(-1).tolist())\n"
        ),
        # a forward that runs the backbone with grad on before it hands its logits to a no-grad method
        Invalid(
            "import torch\n\n\nclass Detector(torch.nn.Module):\n    def forward(self, images):\n"
            "        logits = self.head(self.backbone(images))\n"
            "        return self.postprocess(logits)\n\n    def postprocess(self, logits):\n"
            "        with torch.no_grad():\n            return logits.softmax(-1).max(-1)\n\n\n"
            "model = Detector().cuda()\nmodel.eval()\nfor images, _ in val_loader:\n"
            "    scores, labels = model.forward(images.cuda())\n    print(labels.tolist())\n"
        ),
        # the annotation names a base class; a subclass runs a method the forward hands its call to with grad on
        Invalid(
            "import torch\n\n\nclass RWKV(torch.nn.Module):\n    def forward(self, idx, state):\n"
            "        return self.forward_seq(idx, state)\n\n    def forward_seq(self, idx, state):\n"
            "        with torch.no_grad():\n            return self.emb(idx), state\n\n\n"
            "class TunedRWKV(RWKV):\n    def forward_seq(self, idx, state):\n"
            "        return self.lora(self.emb(idx)), state\n\n\nclass Evaluator:\n"
            "    def __init__(self, model: RWKV):\n        self.model = model\n\n"
            "    def run(self, docs):\n        self.model.eval()\n        for doc in docs:\n"
            "            out, _ = self.model.forward(doc, None)\n"
            "            print(out[-1].argmax().item())\n"
        ),
        # a switch a closure turns on (`nonlocal`): the branch under it runs
        Invalid(
            "import torch\n\n\ndef evaluate(model, loader):\n    model.eval()\n    fallback = False\n\n"
            "    def on_oom():\n        nonlocal fallback\n        fallback = True\n\n"
            "    for x, _ in loader:\n        if fallback:\n"
            "            print(model(x).argmax(-1).tolist())\n        else:\n            try:\n"
            "                with torch.no_grad():\n"
            "                    print(model(x.cuda()).argmax(-1).tolist())\n"
            "            except torch.cuda.OutOfMemoryError:\n                on_oom()\n"
        ),
        # ... or through blocks the instance holds, before its no-grad method
        Invalid(
            "import torch\n\n\nclass Tagger(torch.nn.Module):\n    def forward(self, x):\n"
            "        for block in self.blocks:\n            x = block(x)\n"
            "        return self.postprocess(x)\n\n    def postprocess(self, logits):\n"
            "        with torch.no_grad():\n            return logits.argmax(-1)\n\n\n"
            "model = Tagger().cuda()\nmodel.eval()\nfor x, _ in val_loader:\n"
            "    print(model.forward(x.cuda()).tolist())\n"
        ),
        # a parameter that also holds the student: the teacher's class does not say what the loop runs
        Invalid(
            "import torch\n\n\nclass EMATeacher(torch.nn.Module):\n    def forward(self, x):\n"
            "        with torch.no_grad():\n            return self.net(x).softmax(-1)\n\n\n"
            "def evaluate(teacher, loader):\n    teacher.eval()\n    preds = []\n"
            "    for images, _ in loader:\n        preds.append(teacher(images.cuda()))\n"
            "    return torch.cat(preds)\n\n\nteacher = EMATeacher().cuda()\n"
            "print(evaluate(student, val_loader).shape, evaluate(teacher, val_loader).shape)\n"
        ),
        # `self.model` of another class than the one that makes it a no-grad encoder
        Invalid(
            "import torch\n\n\nclass FrozenEncoder(torch.nn.Module):\n    def forward(self, x):\n"
            "        with torch.no_grad():\n            return self.net(x)\n\n\nclass Predictor:\n"
            "    def __init__(self):\n        self.model = FrozenEncoder().cuda()\n\n\nclass Evaluator:\n"
            "    def run(self, loader):\n        self.model.eval()\n        preds = []\n"
            "        for images, _ in loader:\n            preds.append(self.model(images.cuda()))\n"
            "        return torch.cat(preds)\n"
        ),
        # a class defined twice under a switch: which one runs is not told
        Invalid(
            "import torch\n\nif get_args().frozen:\n    class Encoder(torch.nn.Module):\n"
            "        def forward(self, x):\n            with torch.no_grad():\n"
            "                return self.backbone(x)\nelse:\n    class Encoder(torch.nn.Module):\n"
            "        def forward(self, x):\n            return self.backbone(x)\n\n\n"
            "encoder = Encoder().cuda()\nencoder.eval()\nfeats = []\nfor images, _ in loader:\n"
            "    feats.append(encoder(images.cuda()))\n"
        ),
        # a factory's model: a helper class's no-grad `forward_features` says nothing of it
        Invalid(
            "import timm\nimport torch\n\n\nclass FrozenBackbone(torch.nn.Module):\n"
            "    def forward_features(self, x):\n        with torch.no_grad():\n"
            "            return self.net(x)\n\n\n"
            "model = timm.create_model(\"vit_base_patch16_224\", pretrained=True).cuda()\nmodel.eval()\n"
            "feats = []\nfor images, _ in val_loader:\n"
            "    feats.append(model.forward_features(images.cuda()))\n"
        ),
        # a switch off as written: the other branch still binds a model
        Invalid(
            "import torch\nimport torchvision\n\nPRETRAINED = False\nif PRETRAINED:\n"
            "    extractor = torchvision.models.resnet50(weights=\"DEFAULT\")\nelse:\n"
            "    extractor = torch.hub.load(\"facebookresearch/dino:main\", \"dino_vits16\")\n"
            "extractor = extractor.cuda()\nfeats = []\nfor images, _ in loader:\n"
            "    feats.append(extractor(images.cuda()))\ntorch.save(torch.cat(feats), \"feats.pt\")\n"
        ),
        # a forward whose no-grad block turns grad on again inside (no fix: the inner block would still record)
        Invalid(
            "import torch\n\n\nclass Probe(torch.nn.Module):\n    def forward(self, x):\n"
            "        with torch.no_grad():\n            feats = self.backbone(x)\n"
            "            with torch.enable_grad():\n                return self.head(feats)\n\n\n"
            "model = Probe().cuda()\nmodel.eval()\nfor x, _ in val_loader:\n"
            "    out = model.forward(x.cuda())\n    print(out.argmax(-1).tolist())\n"
        ),
        # ... but one of the methods the forward hands a call to records a graph
        Invalid(_RWKV.replace("        with torch.no_grad():\n            return self.emb(idx), state\n\n\nmodel",
                              "        return self.emb(idx), state\n\n\nmodel"),
                _RWKV.replace("        with torch.no_grad():\n            return self.emb(idx), state\n\n\nmodel",
                              "        return self.emb(idx), state\n\n\nmodel").replace(
                    "for doc in docs:\n    out, _ = model.forward(doc, None)\n    print(out.argmax(-1).tolist())\n",
                    "with torch.no_grad():\n    for doc in docs:\n        out, _ = model.forward(doc, None)\n"
                    "        print(out.argmax(-1).tolist())\n")),
        # ... and with the switch on, the transformers model runs
        Invalid(_HF_MODE.replace("HF_MODE = SWITCH", "HF_MODE = True"),
                _HF_MODE.replace("HF_MODE = SWITCH", "HF_MODE = True").replace(
                    "for ids in questions:\n    if HF_MODE:\n        logits = model.forward(torch.tensor([ids]).cuda())[0][0][-1]\n"
                    "    else:\n        logits, _ = model.forward(ids, None)\n    print(logits.argmax().item())\n",
                    "with torch.no_grad():\n    for ids in questions:\n        if HF_MODE:\n"
                    "            logits = model.forward(torch.tensor([ids]).cuda())[0][0][-1]\n"
                    "        else:\n            logits, _ = model.forward(ids, None)\n        print(logits.argmax().item())\n")),
        # a helper freezes only a part of the model the loop trains
        Invalid(
            "import torch.nn.functional as F\n\n\ndef set_backbone_trainable(model, trainable):\n"
            "    for p in model.backbone.parameters():\n        p.requires_grad = trainable\n\n\n"
            "def finetune(model, loader, opt):\n    set_backbone_trainable(model, False)\n"
            "    for x, y in loader:\n        loss = F.mse_loss(model(x), y)\n"
            "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n"
            "        yhat_raw = model.inference(x)\n        print(F.l1_loss(yhat_raw, y).item())\n"
        ),
        # the annotation names a base class; the model handed in overrides its no-grad method
        Invalid(
            "import torch\nfrom torch import nn\n\n\nclass Segmenter(nn.Module):\n    @torch.no_grad()\n"
            "    def inference(self, images):\n        return self(images).softmax(1)\n\n\n"
            "class UNet(Segmenter):\n    def forward(self, images):\n"
            "        return self.net(images)\n\n\nclass CalibratedUNet(UNet):\n"
            "    def inference(self, images):\n"
            "        return (self(images) / self.temperature).softmax(1)\n\n\nclass Evaluator:\n"
            "    def __init__(self, model: UNet, loader):\n        self.model = model\n"
            "        self.loader = loader\n\n    def evaluate(self):\n        masks = []\n"
            "        for images, _ in self.loader:\n"
            "            masks.append(self.model.inference(images.cuda()))\n"
            "        return torch.cat(masks)\n\n\ndef main(loader):\n"
            "    model = CalibratedUNet().cuda()\n    return Evaluator(model, loader).evaluate()\n"
        ),
        # a periodic sample kept bound through the steps until the next one
        Invalid(_PERIODIC_SAMPLE.replace("DROP", ""), _PERIODIC_SAMPLE.replace("DROP", "").replace(
            "            sample = model.inference(x)\n",
            "            with torch.no_grad():\n                sample = model.inference(x)\n")),
        # another class's model, bound by a base class elsewhere, whatever the generator's annotation says
        Invalid((_LLAMA.replace("DECORATOR", "@torch.inference_mode()") + (
            "\n\nclass Classifier(nn.Module):\n    def forward(self, x):\n        return self.fc(x)\n"
            "\n\nclass Evaluator(BaseRunner):\n    def evaluate(self):\n"
            "        kept = []\n        for x, _ in self.loader:\n            logits = self.model.forward(x.cuda())\n"
            "            kept.append(logits)\n        return torch.cat(kept)\n\n\ndef main():\n"
            "    return Evaluator().evaluate()\n"))
            .replace("import torch\n", "import torch\nfrom runners import BaseRunner\n", 1)),
        # a periodic sample that a binding before the loop does not free between runs
        Invalid(_PERIODIC_SAMPLE.replace("DROP", "").replace("    for step,", "    sample = None\n    for step,"),
                _PERIODIC_SAMPLE.replace("DROP", "").replace("    for step,", "    sample = None\n    for step,").replace(
                    "            sample = model.inference(x)\n",
                    "            with torch.no_grad():\n                sample = model.inference(x)\n")),
        # ... and with one whose forward records a graph
        Invalid(_LLAMA.replace("    DECORATOR\n", ""), _LLAMA.replace("    DECORATOR\n", "").replace(
            "        for cur_pos in range(1, total_len):\n",
            "        with torch.no_grad():\n            for cur_pos in range(1, total_len):\n").replace(
            "\n            logits", "\n                logits").replace(
            "\n            tokens[:", "\n                tokens[:").replace(
            "            prev_pos = cur_pos\n", "                prev_pos = cur_pos\n")),
        # a torch module named `tf_...` (a transformer): the prefix of another framework's models gives way to what the code builds
        Invalid(
            "import torch\nimport torch.nn as nn\n\n\nclass TransformerLM(nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n"
            "        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(512, 8), 6)\n\n"
            "    def forward(self, x):\n        return self.enc(x)\n\n\n"
            "tf_model = TransformerLM().cuda()\ntf_model.eval()\npreds = []\nfor x in val_loader:\n"
            "    out = tf_model(x.cuda())\n    preds.append(out)\nprint(torch.cat(preds).shape)\n"
        ),
        # a module's list that another function fills: not a few values the code spells
        Invalid(
            "import torch\n\nVAL_BATCHES = []\n\n\ndef prepare(loader):\n    for x, _ in loader:\n"
            "        VAL_BATCHES.append(x.cuda())\n\n\ndef embed(model):\n    model.eval()\n"
            "    embs = []\n    for x in VAL_BATCHES:\n        embs.append(model(x))\n"
            "    return torch.cat(embs)\n"
        ),
        # a list of the whole loader
        Invalid(
            "import torch\n\n\ndef embed(model, val_loader):\n    model.eval()\n    embs = []\n"
            "    for x, _ in [*val_loader]:\n        embs.append(model(x.cuda()))\n"
            "    return torch.cat(embs)\n"
        ),
        # a model wrapped, moved and put in eval mode in one statement (pytorch_GAN_zoo's features)
        Invalid(
            "import torch\nimport torch.nn as nn\n\n\ndef save_features(model, loader, device):\n"
            "    net = nn.DataParallel(model).to(device).eval()\n    feats = []\n    for x, _ in loader:\n"
            "        feats.append(net(x).detach().cpu())\n    return torch.cat(feats).numpy()\n",
            "import torch\nimport torch.nn as nn\n\n\ndef save_features(model, loader, device):\n"
            "    net = nn.DataParallel(model).to(device).eval()\n    feats = []\n    with torch.no_grad():\n"
            "        for x, _ in loader:\n            feats.append(net(x).detach().cpu())\n    return torch.cat(feats).numpy()\n",
        ),
        # a pass after the step's backward, for its batch-norm statistics only (DomainBed's ERM++):
        # one training step per call, whatever calls it
        Invalid(_ERM.replace("PASS", "self.network_sma(x)").replace("HOOK", ""),
                _ERM.replace("PASS", "with torch.no_grad():\n            self.network_sma(x)").replace("HOOK", "")),
        # a metric of the `evaluate`/`datasets` libraries reads what `add_batch` is given (a
        # regression's squeezed logits carry their graph, and no backward takes them)
        Invalid(
            "import torch\n\n\ndef do_eval(model, loader, metric, is_regression=False):\n    model.eval()\n"
            "    for batch in loader:\n        outputs = model(**batch)\n"
            "        predictions = outputs.logits.argmax(dim=-1) if not is_regression else outputs.logits.squeeze()\n"
            "        metric.add_batch(predictions=predictions, references=batch[\"labels\"])\n"
            "    return metric.compute()\n",
            "import torch\n\n\ndef do_eval(model, loader, metric, is_regression=False):\n    model.eval()\n"
            "    with torch.no_grad():\n        for batch in loader:\n            outputs = model(**batch)\n"
            "            predictions = outputs.logits.argmax(dim=-1) if not is_regression else outputs.logits.squeeze()\n"
            "            metric.add_batch(predictions=predictions, references=batch[\"labels\"])\n"
            "    return metric.compute()\n",
        ),
        # ... in a loop over batches, made-up inputs are no warm-up: a calibration pass runs on every batch
        Invalid(
            "import torch\n\n\ndef calibrate(model, loader, device):\n    model.eval()\n"
            "    for images, _ in loader:\n"
            "        model(torch.randn(images.shape[0], 3, 224, 224).to(device))\n",
            "import torch\n\n\ndef calibrate(model, loader, device):\n    model.eval()\n"
            "    with torch.no_grad():\n        for images, _ in loader:\n"
            "            model(torch.randn(images.shape[0], 3, 224, 224).to(device))\n",
        ),
        # ... nor a mode whose no-grad block falls through to code that records
        Invalid(
            "import torch\n\n\nclass Student(torch.nn.Module):\n    def forward(self, x, mode=\"train\"):\n"
            "        if mode == \"distill\":\n            with torch.no_grad():\n"
            "                target = self.teacher(x)\n        return self.student(x)\n\n\n"
            "model = Student().cuda()\nmodel.eval()\npreds = []\nfor x in loader:\n"
            "    preds.append(model(x.cuda(), mode=\"distill\"))\n",
        ),
        # a module without parameters over a model's outputs: the model records
        Invalid(
            "import torch\nfrom torch import nn\n\ncos = nn.CosineSimilarity(dim=1)\n\n\n"
            "def similarity(model, loader):\n    model.eval()\n    sims = []\n    for a, b in loader:\n"
            "        sims.append(cos(model(a.cuda()), model(b.cuda())).mean().item())\n    return sims\n",
            "import torch\nfrom torch import nn\n\ncos = nn.CosineSimilarity(dim=1)\n\n\n"
            "def similarity(model, loader):\n    model.eval()\n    sims = []\n    with torch.no_grad():\n"
            "        for a, b in loader:\n"
            "            sims.append(cos(model(a.cuda()), model(b.cuda())).mean().item())\n    return sims\n",
        ),
        # ... but not a mode it computes with grad on
        Invalid(
            "import torch\n\n\nclass Pix2Pix(torch.nn.Module):\n    def forward(self, data, mode):\n"
            "        semantics = self.preprocess(data)\n        if mode == \"encode\":\n"
            "            return self.encode(semantics)\n        elif mode == \"inference\":\n"
            "            with torch.no_grad():\n                fake, _ = self.generate(semantics)\n"
            "            return fake\n        raise ValueError(mode)\n\n\nmodel = Pix2Pix()\nmodel.eval()\n"
            "for data in loader:\n    preds.append(model(data, mode=\"encode\"))\n",
            "import torch\n\n\nclass Pix2Pix(torch.nn.Module):\n    def forward(self, data, mode):\n"
            "        semantics = self.preprocess(data)\n        if mode == \"encode\":\n"
            "            return self.encode(semantics)\n        elif mode == \"inference\":\n"
            "            with torch.no_grad():\n                fake, _ = self.generate(semantics)\n"
            "            return fake\n        raise ValueError(mode)\n\n\nmodel = Pix2Pix()\nmodel.eval()\n"
            "with torch.no_grad():\n    for data in loader:\n        preds.append(model(data, mode=\"encode\"))\n",
        ),
        # a model held by a name like `model_to_eval` is a model (not a call that moves one)
        Invalid(
            "import torch\n\n\ndef evaluate(model_to_eval, loader, device):\n    model_to_eval.eval()\n"
            "    preds = []\n    for x in loader:\n        preds.append(model_to_eval(x.to(device)))\n"
            "    return torch.cat(preds)\n",
            "import torch\n\n\ndef evaluate(model_to_eval, loader, device):\n    model_to_eval.eval()\n"
            "    preds = []\n    with torch.no_grad():\n        for x in loader:\n"
            "            preds.append(model_to_eval(x.to(device)))\n    return torch.cat(preds)\n",
        ),
        # a captioner's decoder parts and its initial state: a model's methods compute, they backward nothing
        Invalid(
            "import torch\n\n\ndef evaluate(encoder, decoder, loader, device):\n    encoder.eval()\n"
            "    decoder.eval()\n    captions = []\n    for image, _ in loader:\n"
            "        encoder_out = encoder(image.to(device))\n"
            "        h, c = decoder.init_hidden_state(encoder_out)\n        words = []\n"
            "        for step in range(50):\n            awe = decoder.attention(encoder_out, h)\n"
            "            h, c = decoder.decode_step(awe, (h, c))\n"
            "            words.append(decoder.fc(h).argmax(-1).item())\n"
            "        captions.append(words)\n    return captions\n",
            "import torch\n\n\ndef evaluate(encoder, decoder, loader, device):\n    encoder.eval()\n"
            "    decoder.eval()\n    captions = []\n    with torch.no_grad():\n"
            "        for image, _ in loader:\n            encoder_out = encoder(image.to(device))\n"
            "            h, c = decoder.init_hidden_state(encoder_out)\n            words = []\n"
            "            for step in range(50):\n"
            "                awe = decoder.attention(encoder_out, h)\n"
            "                h, c = decoder.decode_step(awe, (h, c))\n"
            "                words.append(decoder.fc(h).argmax(-1).item())\n"
            "            captions.append(words)\n    return captions\n",
        ),
        # ... the same helper with its batches outside no_grad: reported in its own loop, once
        Invalid(
            "import torch\n\n\ndef test(weights, loader, device):\n"
            "    model = torch.load(weights, map_location=device)\n    model.eval()\n"
            "    model(torch.zeros(1, 3, 640, 640).to(device))  # run once\n    for img in loader:\n"
            "        preds = model(img.to(device))\n    return preds\n\n\nfor w in weights:\n"
            "    test(w, loader, \"cuda\")\n",
            "import torch\n\n\ndef test(weights, loader, device):\n"
            "    model = torch.load(weights, map_location=device)\n    model.eval()\n"
            "    model(torch.zeros(1, 3, 640, 640).to(device))  # run once\n    with torch.no_grad():\n"
            "        for img in loader:\n            preds = model(img.to(device))\n    return preds\n"
            "\n\nfor w in weights:\n    test(w, loader, \"cuda\")\n",
        ),
        # ... but a processor class of this module runs what its code runs: here a network
        Invalid(
            "import torch\n\nclass EmbeddingProcessor:\n    def __init__(self, model):\n        self.model = model\n\n"
            "    def __call__(self, x):\n        return self.model(x)\n\ndef embed(backbone, loader):\n"
            "    backbone.eval()\n    encoder = EmbeddingProcessor(backbone)\n    for x in loader:\n"
            "        print(encoder(x).mean())\n"
        ),
        Invalid(
            "import torch\nimport torch.nn as nn\n\nclass FrameEncoderProcessor(nn.Module):\n"
            "    def forward(self, frames):\n        return self.net(frames)\n\ndef main(model, dataset):\n"
            "    model.eval()\n    encoder = FrameEncoderProcessor()\n    for frames in dataset:\n"
            "        encoded = encoder(frames)\n        print(encoded.mean())\n"
        ),
        # a predictor: its model put in eval mode by `__init__`, run per call with grad on, its
        # predictions handed on detached (the name rebound before they leave)
        Invalid(
            "import torch\n\n\nclass Predictor:\n    def __init__(self, cfg):\n        self.model = build_model(cfg)\n"
            "        self.model.eval()\n\n    def __call__(self, task):\n        preds = self.model(task.frames.cuda())\n"
            "        preds = preds.cpu()\n        preds = preds.detach()\n        task.add_action_preds(preds)\n"
            "        return task\n\n\nclass ActionPredictor:\n    def __init__(self, cfg):\n"
            "        self.predictor = Predictor(cfg)\n\n    def put(self, task):\n"
            "        self.queue.append(self.predictor(task))\n",
            "import torch\n\n\nclass Predictor:\n    def __init__(self, cfg):\n        self.model = build_model(cfg)\n"
            "        self.model.eval()\n\n    @torch.no_grad()\n    def __call__(self, task):\n"
            "        preds = self.model(task.frames.cuda())\n"
            "        preds = preds.cpu()\n        preds = preds.detach()\n        task.add_action_preds(preds)\n"
            "        return task\n\n\nclass ActionPredictor:\n    def __init__(self, cfg):\n"
            "        self.predictor = Predictor(cfg)\n\n    def put(self, task):\n"
            "        self.queue.append(self.predictor(task))\n",
        ),
        # an evaluation over two loaders named in a tuple: the loop over the loader is reported
        Invalid(
            "import torch\n\ndef evaluate(model, val_loader, test_loader):\n    model.eval()\n"
            "    for split, loader in ((\"val\", val_loader), (\"test\", test_loader)):\n        outs = []\n"
            "        for x, y in loader:\n            outs.append(model(x.cuda()))\n"
            "        print(split, torch.cat(outs).argmax(1).eq(y).float().mean())\n"
        ),
        # a metric pass in a loop over a data set of any name
        Invalid(
            "import torch\n\ndef run_epoch(model, train_data, opt, criterion):\n    for x, y in train_data:\n"
            "        yhat = model(x)\n        yhat_raw = model.inference(x)\n        loss = criterion(yhat, y)\n"
            "        l1 = torch.nn.functional.l1_loss(yhat_raw, y).item()\n        loss.backward()\n"
            "        opt.step()\n        opt.zero_grad()\n"
        ),
        # an evaluation loop written as a comprehension over the loader
        Invalid(
            "import torch\n\ndef predict(model, loader):\n    model.eval()\n"
            "    preds = [model(x.cuda()).argmax(1) for x, _ in loader]\n    return torch.cat(preds)\n",
            "import torch\n\ndef predict(model, loader):\n    model.eval()\n    with torch.no_grad():\n"
            "        preds = [model(x.cuda()).argmax(1) for x, _ in loader]\n    return torch.cat(preds)\n",
        ),
        # a model's own predict method: it returns class indices, so no caller can backward through it
        Invalid(
            "import torch\nclass Classifier(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.fc = torch.nn.Linear(784, 10)\n\n    def forward(self, x):\n        return self.fc(x)\n\n"
            "    def predict(self, loader):\n        self.eval()\n        preds = []\n        for x in loader:\n"
            "            preds.append(self(x.cuda()).argmax(1))\n        return torch.cat(preds)\n\n"
            "model = Classifier()\nprint(model.predict(test_loader))\n",
            "import torch\nclass Classifier(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.fc = torch.nn.Linear(784, 10)\n\n    def forward(self, x):\n        return self.fc(x)\n\n"
            "    @torch.no_grad()\n    def predict(self, loader):\n        self.eval()\n        preds = []\n"
            "        for x in loader:\n            preds.append(self(x.cuda()).argmax(1))\n        return torch.cat(preds)\n\n"
            "model = Classifier()\nprint(model.predict(test_loader))\n",
        ),
        # ... through the layers it keeps in a list, one pass per label
        Invalid(
            "import torch\nclass Layer(torch.nn.Linear):\n    pass\n\nclass Net(torch.nn.Module):\n"
            "    def __init__(self, dims):\n        super().__init__()\n        self.layers = []\n"
            "        for d in range(len(dims) - 1):\n            self.layers = self.layers + [Layer(dims[d], dims[d + 1])]\n\n"
            "    def predict(self, x):\n        goodness_per_label = []\n        for label in range(10):\n"
            "            h = overlay(x, label)\n            goodness = []\n            for layer in self.layers:\n"
            "                h = layer(h)\n                goodness = goodness + [h.pow(2).mean(1)]\n"
            "            goodness_per_label += [sum(goodness).unsqueeze(1)]\n"
            "        return torch.cat(goodness_per_label, 1).argmax(1)\n\n"
            "net = Net([784, 500, 500])\nprint(net.predict(x).eq(y).float().mean().item())\n"
        ),
        # a script's test loop after its training loop, the two binding the same names (`outputs`):
        # the training loop binds its own before reading them; the model known by its optimizer
        Invalid(
            "import torch\noptimizer = torch.optim.Adam(cnn.parameters())\nfor epoch in range(10):\n"
            "    for images, labels in train_loader:\n        images = images.cuda()\n        outputs = cnn(images)\n"
            "        loss = criterion(outputs, labels.cuda())\n        optimizer.zero_grad()\n        loss.backward()\n"
            "        optimizer.step()\n    cnn.eval()\n    correct = 0\n    for images, labels in test_loader:\n"
            "        images = images.cuda()\n        outputs = cnn(images)\n"
            "        correct += (outputs.argmax(1).cpu() == labels).sum().item()\n    cnn.train()\n",
            "import torch\noptimizer = torch.optim.Adam(cnn.parameters())\nfor epoch in range(10):\n"
            "    for images, labels in train_loader:\n        images = images.cuda()\n        outputs = cnn(images)\n"
            "        loss = criterion(outputs, labels.cuda())\n        optimizer.zero_grad()\n        loss.backward()\n"
            "        optimizer.step()\n    cnn.eval()\n    correct = 0\n    with torch.no_grad():\n"
            "        for images, labels in test_loader:\n            images = images.cuda()\n            outputs = cnn(images)\n"
            "            correct += (outputs.argmax(1).cpu() == labels).sum().item()\n    cnn.train()\n",
        ),
        Invalid(
            "import torch\n\ndef evaluate(model, loader):\n    model.eval()\n    preds = []\n"
            "    for x, _ in loader:\n        # one batch\n        preds.append(model(x).argmax(-1))\n"
            "    return torch.cat(preds)\n",
            "import torch\n\ndef evaluate(model, loader):\n    model.eval()\n    preds = []\n"
            "    with torch.no_grad():\n        for x, _ in loader:\n            # one batch\n"
            "            preds.append(model(x).argmax(-1))\n    return torch.cat(preds)\n",
        ),
        # a validation loop after the training loop, per epoch, through a helper
        Invalid(
            "import torch\n\ndef val_batch(x, y):\n    return criterion(model(x), y).item()\n\n"
            "for epoch in range(3):\n    model.train()\n    for x, y in train_loader:\n"
            "        criterion(model(x), y).backward()\n        optimizer.step()\n        optimizer.zero_grad()\n"
            "    model.eval()\n    for x, y in val_loader:\n        print(val_batch(x, y))\n",
            "import torch\n\ndef val_batch(x, y):\n    return criterion(model(x), y).item()\n\n"
            "for epoch in range(3):\n    model.train()\n    for x, y in train_loader:\n"
            "        criterion(model(x), y).backward()\n        optimizer.step()\n        optimizer.zero_grad()\n"
            "    model.eval()\n    with torch.no_grad():\n        for x, y in val_loader:\n"
            "            print(val_batch(x, y))\n",
        ),
        # an HF Trainer's evaluation hook, overridden without no_grad
        Invalid(
            "import torch\nfrom transformers import Trainer\n\nclass MyTrainer(Trainer):\n"
            "    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):\n"
            "        outputs = model(**inputs)\n        return outputs.loss, outputs.logits, inputs[\"labels\"]\n",
            "import torch\nfrom transformers import Trainer\n\nclass MyTrainer(Trainer):\n"
            "    @torch.no_grad()\n"
            "    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):\n"
            "        outputs = model(**inputs)\n        return outputs.loss, outputs.logits, inputs[\"labels\"]\n",
        ),
        # an inference script
        Invalid(
            "import torch\nfrom torch import no_grad\nnet = torch.nn.Linear(4, 2)\nnet.load_state_dict(torch.load(path))\n"
            "for x in batches:\n    print(net(x).softmax(-1))\n",
            "import torch\nfrom torch import no_grad\nnet = torch.nn.Linear(4, 2)\nnet.load_state_dict(torch.load(path))\n"
            "with no_grad():\n    for x in batches:\n        print(net(x).softmax(-1))\n",
        ),
        # a script that names no device, whose model a quantized load puts on the GPU
        Invalid(
            "import torch\nfrom transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained(name, load_in_8bit=True)\nfor ids in test_batches:\n"
            "    logits = model(ids).logits\n    print(float(logits[0, -1].max()))\n",
            "import torch\nfrom transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained(name, load_in_8bit=True)\nwith torch.no_grad():\n"
            "    for ids in test_batches:\n        logits = model(ids).logits\n        print(float(logits[0, -1].max()))\n",
        ),
        # ... or by a quantized base model an adapter wraps, or by settings passed as `**kwargs`
        Invalid(
            "import torch\nfrom peft import PeftModel\nfrom transformers import AutoModelForCausalLM\n"
            "base = AutoModelForCausalLM.from_pretrained(name, quantization_config=bnb)\n"
            "model = PeftModel.from_pretrained(base, 'adapter')\nfor ids in test_batches:\n"
            "    print(float(model(ids).logits[0, -1].max()))\n",
            "import torch\nfrom peft import PeftModel\nfrom transformers import AutoModelForCausalLM\n"
            "base = AutoModelForCausalLM.from_pretrained(name, quantization_config=bnb)\n"
            "model = PeftModel.from_pretrained(base, 'adapter')\nwith torch.no_grad():\n    for ids in test_batches:\n"
            "        print(float(model(ids).logits[0, -1].max()))\n",
        ),
        Invalid(
            "import torch\nfrom transformers import AutoModelForCausalLM\nkwargs = {'device_map': 'auto'}\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2', **kwargs)\nfor ids in test_batches:\n"
            "    print(float(model(ids).logits[0, -1].max()))\n",
            "import torch\nfrom transformers import AutoModelForCausalLM\nkwargs = {'device_map': 'auto'}\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2', **kwargs)\nwith torch.no_grad():\n"
            "    for ids in test_batches:\n        print(float(model(ids).logits[0, -1].max()))\n",
        ),
        # ONNX Runtime's `ORTModule` is a torch module (it trains): not another runtime's model
        Invalid(
            "import torch\nfrom onnxruntime.training.ortmodule import ORTModule\nfrom mynets import ResNet\n\n"
            "net = ResNet()\nnet.load_state_dict(torch.load(\"resnet.pt\", map_location=\"cuda\"))\n"
            "model = ORTModule(net.cuda())\nfor images, labels in test_loader:\n    logits = model(images.cuda())\n"
            "    print((logits.argmax(1) == labels.cuda()).float().mean().item())\n"
        ),
        # ... or by a call it is handed to, which may place it
        Invalid(
            "import torch\nfrom transformers import AutoModel\nfrom helpers import place\n"
            "model = AutoModel.from_pretrained('m')\nplace(model)\nfor ids in test_batches:\n"
            "    print(float(model(ids).last_hidden_state.mean()))\n",
            "import torch\nfrom transformers import AutoModel\nfrom helpers import place\n"
            "model = AutoModel.from_pretrained('m')\nplace(model)\nwith torch.no_grad():\n"
            "    for ids in test_batches:\n        print(float(model(ids).last_hidden_state.mean()))\n",
        ),
        # a generator: reported, no fix (a `with` around a yield leaks no-grad mode)
        Invalid("import torch\ndef predict(model, loader):\n    model.eval()\n    for x in loader:\n"
                "        yield model(x)\n"),
        # backwards are matched by scope: train() backwarding its own `loss` does not make
        # validate()'s `loss` a training loss
        Invalid(
            "import torch\n\ndef fit(model, loader, opt):\n    for x, y in loader:\n        loss = criterion(model(x), y)\n"
            "        loss.backward()\n        opt.step()\n        opt.zero_grad()\n\n"
            "def validate(model, loader):\n    model.eval()\n    total = 0.0\n    for x, y in loader:\n"
            "        loss = criterion(model(x), y)\n        total += loss.item()\n    return total\n",
            "import torch\n\ndef fit(model, loader, opt):\n    for x, y in loader:\n        loss = criterion(model(x), y)\n"
            "        loss.backward()\n        opt.step()\n        opt.zero_grad()\n\n"
            "def validate(model, loader):\n    model.eval()\n    total = 0.0\n    with torch.no_grad():\n"
            "        for x, y in loader:\n            loss = criterion(model(x), y)\n            total += loss.item()\n"
            "    return total\n",
        ),
        # a model's computing methods are forwards too
        Invalid(
            "import torch\n\ndef rank(model, queries):\n    model.eval()\n    for q in queries:\n"
            "        print(model.encode(q).norm(dim=-1))\n",
            "import torch\n\ndef rank(model, queries):\n    model.eval()\n    with torch.no_grad():\n"
            "        for q in queries:\n            print(model.encode(q).norm(dim=-1))\n",
        ),
        # this module's model computes gradients in its forward: under no_grad it would fail, no fix
        Invalid(
            "import torch\nimport torch.nn as nn\n\nclass Field(nn.Module):\n    def forward(self, x):\n"
            "        x = x.requires_grad_(True)\n        energy = self.net(x).sum()\n"
            "        return torch.autograd.grad(energy, x)[0]\n\nnet = Field()\n"
            "net.load_state_dict(torch.load('field.pt'))\nnet.eval()\nfor x in points:\n    print(net(x).norm())\n"
        ),
        # a SimulEval agent's per-action hook: SimulEval leaves grad on
        Invalid(
            "import torch\nfrom simuleval.agents import TextAgent\n\n\nclass Agent(TextAgent):\n"
            "    def __init__(self, args):\n        self.model = torch.load(args.path).eval()\n\n"
            "    def policy(self, states):\n"
            "        states.hidden = self.model.decoder(states.tokens, states.memory)\n"
            "        return states.hidden[-1].argmax().item() == 0\n",
            "import torch\nfrom simuleval.agents import TextAgent\n\n\nclass Agent(TextAgent):\n"
            "    def __init__(self, args):\n        self.model = torch.load(args.path).eval()\n\n"
            "    @torch.no_grad()\n    def policy(self, states):\n"
            "        states.hidden = self.model.decoder(states.tokens, states.memory)\n"
            "        return states.hidden[-1].argmax().item() == 0\n",
        ),
        # ... also when the hook runs the model through a helper
        Invalid(
            "import torch\nfrom simuleval.agents import SpeechAgent\n\n\nclass Agent(SpeechAgent):\n"
            "    def encode_source(self, states):\n        states.memory = self.model.encoder(states.source)\n\n"
            "    def update_states_read(self, states):\n        self.encode_source(states)\n",
            "import torch\nfrom simuleval.agents import SpeechAgent\n\n\nclass Agent(SpeechAgent):\n"
            "    def encode_source(self, states):\n        states.memory = self.model.encoder(states.source)\n\n"
            "    @torch.no_grad()\n    def update_states_read(self, states):\n"
            "        self.encode_source(states)\n",
        ),
        # a training loop's second forward, read only for a metric
        Invalid(
            "import torch\n\ndef run_epoch(model, loader, opt):\n    for x, y in loader:\n        yhat = model(x)\n"
            "        yhat_raw = model.inference(x)\n        loss = criterion(yhat, y)\n"
            "        l1 = torch.nn.functional.l1_loss(yhat_raw, y).item()\n        loss.backward()\n"
            "        opt.step()\n        opt.zero_grad()\n",
            "import torch\n\ndef run_epoch(model, loader, opt):\n    for x, y in loader:\n        yhat = model(x)\n"
            "        with torch.no_grad():\n            yhat_raw = model.inference(x)\n        loss = criterion(yhat, y)\n"
            "        l1 = torch.nn.functional.l1_loss(yhat_raw, y).item()\n        loss.backward()\n"
            "        opt.step()\n        opt.zero_grad()\n",
        ),
        # a field of the output, under a condition that holds every step
        Invalid(
            "import torch\n\ndef train(model, loader, opt, log_acc):\n    for x, y in loader:\n"
            "        criterion(model(x), y).backward()\n        opt.step()\n        if log_acc:\n"
            "            logits = model(x).logits\n            print((logits.argmax(-1) == y).sum().item())\n",
            "import torch\n\ndef train(model, loader, opt, log_acc):\n    for x, y in loader:\n"
            "        criterion(model(x), y).backward()\n        opt.step()\n        if log_acc:\n"
            "            with torch.no_grad():\n                logits = model(x).logits\n"
            "            print((logits.argmax(-1) == y).sum().item())\n",
        ),
    )

    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        super().__init__(context)
        self._findings: Dict[int, Optional[Tuple[List[Tuple[cst.Call, cst.Call]], str]]] = {}
        self._hooks_reported: Set[int] = set()  # forwards a framework hook was reported for
        self._above_reported: Set[int] = set()  # assignments above a loop reported (`_report_above`)
        self._scope_forwards: Dict[int, List[cst.Assign]] = {}  # id(scope) -> `_forward_assigns`
        self._named_training: Dict[int, bool] = {}  # id(scope) -> `_trains_named_tensors`

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        """An evaluation hook a framework calls per batch without turning grad off itself (an HF
        `Trainer` subclass's `prediction_step`: HF's own enters `torch.no_grad()` inside it; a
        SimulEval agent's `policy` and other per-action hooks)."""
        facts = self.facts
        if facts.regions.grad_enabled_by_decorator(node) is not None or facts.values.requires_grad_off:
            return
        if node.name.value in HF_EVAL_HOOKS and facts.regions.in_hf_trainer(node):
            self._check_hf_hook(node)
        elif facts.regions.simuleval_action_hook(node):
            self._check_simuleval_hook(node)
        else:
            self._check_inference_method(node)
            self._check_predictor(node)
            self._check_unlike_its_module(node)

    def _check_inference_method(self, node: cst.FunctionDef) -> None:
        """A model's method that runs it in a loop with autograd recording and returns only what
        carries no graph (`goodness.argmax(1)`, a list of `.item()`s): no caller can backward
        through what it records, so its grad mode is not the caller's to choose. Not `forward`,
        nor a method model code calls, nor one a call of this module makes under no_grad or that
        only other modules call (they may run it under no_grad)."""
        facts = self.facts
        klass = facts.tree.class_of(node)
        if klass is None or node.decorators or node.name.value in ("forward", "__call__") or \
                node.name.value.startswith("__"):
            return  # (a decorated method: `@staticmethod`, `@torch.jit.export`... would not take one more above)
        returned = facts.scopes.returned(node)
        if not returned or any(not facts.values.graphless(value, value) for value in returned) or \
                not facts.receivers.is_model_class(klass):  # (asked last: it may be a question to the project)
            return
        sites = facts.scopes.call_sites(node)
        if not sites or any(facts.regions.grad_enabled(site) is False or facts.in_model_code(site) for site in sites):
            return  # called elsewhere, run without grad, or by model code whose caller chose
        recorded = [call for call in facts.scopes.calls_of(node)
                    if facts.tree.loops_around(call) and facts.values.carries_grad(call, call)]
        if not recorded:
            return
        if self._keeps_on_instance(node):
            return  # `self.saved_log_probs.append(m.log_prob(a))`: the graph leaves through the instance
        if facts.roles.backwards_in(node.body) or facts.roles.steps_in(node.body) or facts.roles.asks_for_grad(node):
            return
        if not self._graph_stays_in(node):
            return
        self.report(recorded[0], (
            f"`{node.name.value}` runs the model in a loop with autograd recording, yet returns only values without a "
            f"graph: no caller can backward through what it records, and every iteration's activations stay alive "
            f"as long as what is computed from them; decorate it with `@torch.no_grad()`"), self._decorate(node))

    def _check_predictor(self, node: cst.FunctionDef) -> None:
        """A predictor: a class that is no model, whose `__init__` puts its model in eval mode
        (`self.model.eval()`), and whose method runs it with autograd recording, returning and
        keeping only what carries no graph (SlowFast's demo `Predictor.__call__`, which hands
        on `preds.detach()`). Nothing in the class backwards or asks for gradients, so no caller
        can backward through what a call records: each call's peak holds the activations of a
        whole forward for nothing. Not a method no call of this module makes with grad on. (A
        caller in another module that turns grad off around this module's caller is not seen:
        the decorator is then redundant, not harmful.)"""
        facts = self.facts
        klass = facts.tree.class_of(node)
        if klass is None or node.decorators or node.name.value == "__init__":
            return
        evaluated = self._evaluated_in_init(klass)
        if not evaluated:
            return
        runs = [call for call in facts.scopes.calls_of(node)
                if dotted_name(call.func) in evaluated and facts.regions.grad_enabled(call) is not False]
        if not runs or facts.receivers.is_model_class(klass):
            return
        params = {p.name.value for p in node.params.params}
        if any(not facts.values.graphless(value, value) and not (  # the caller's own object, handed back
                type(value) is cst.Name and value.value in params and not facts.values.carries_grad(value, value))
               for value in facts.scopes.returned(node)):
            return  # a caller may train on what it returns
        sites = facts.scopes.call_sites(node)
        if not sites or any(facts.regions.grad_enabled(site) is False for site in sites):
            return
        if self._learns(klass) or not self._graph_stays_in(node):
            return
        self.report(runs[0], (
            f"`{show(runs[0].func)}` runs in `{node.name.value}` with autograd recording, though `__init__` put it in "
            f"eval mode and nothing in `{klass.name.value}` backwards or hands a graph on: every call saves the "
            f"activations of a whole forward for a backward that never comes; decorate `{node.name.value}` with "
            f"`@torch.no_grad()`"), self._decorate(node))

    def _check_unlike_its_module(self, node: cst.FunctionDef) -> None:
        """A module-level function that runs a model once with autograd recording and hands back
        only what carries no graph, in a module that never trains and whose other functions run
        their models with grad off (bark's `codec_decode`, decoding each generated clip with
        grad on beside `generate_fine`'s `with _inference_mode():`): the module's own way says
        inference, and no caller can backward what a call records. Not one a call of the
        project makes with grad off, nor one no call is seen of (linted alone, its callers in
        other modules are unknown)."""
        facts = self.facts
        if node.decorators or facts.tree.scope_of(node) is not facts.tree.module or facts.phase.trains or \
                not facts.phase.infers_without_grad_beside(node):
            return
        runs = [call for call, _ in facts.roles.forwards_in(node.body, follow=False)
                if not facts.tree.loops_around(call) and facts.regions.grad_enabled(call) is not False
                and not self._runs_without_grad_elsewhere(call)]
        if not runs:
            return
        if any(not facts.values.graphless(value, value) or type(facts.tree.parent(value)) is not cst.Return
               for value in facts.scopes.returned(node)):
            return  # a caller may train on what it returns, or it yields
        if any(not self._bound_to_names(call) for call in runs):
            return  # `batch["logits"] = model(x)`: what it computes may leave through its arguments
        sites = facts.scopes.call_sites(node)
        if any(facts.regions.grad_enabled(site) is False for site in sites) or \
                facts.project.called_elsewhere(node.name.value, grad_off=True) or \
                not sites and not facts.project.called_elsewhere(node.name.value, grad_off=False):
            return
        if facts.roles.asks_for_grad(node) or not self._graph_stays_in(node) or facts.project.forward_asks_for_grad():
            return  # (asked last: a question to the project; a model whose forward needs grad fails without it)
        self.report(runs[0], (
            f"`{show(runs[0].func)}` runs in `{node.name.value}` with autograd recording, though the module never "
            f"trains and its other functions run their models with grad off: each call saves the activations of a "
            f"whole forward for a backward that never comes; decorate `{node.name.value}` with `@torch.no_grad()`"),
            self._decorate(node))

    def _runs_without_grad_elsewhere(self, forward: cst.Call) -> bool:
        """The forward calls a model of a project class whose method it runs is decorated to run
        without grad (coqui's `CustomHubert.forward`, `@torch.no_grad()` in its own module)."""
        facts = self.facts
        func = forward.func
        receiver, method = (func.value, func.attr.value) if type(func) is cst.Attribute else (func, "forward")  # type: ignore[attr-defined]
        klass = facts.scopes.imported_class_of(receiver, facts.names.absolute_name)
        return klass is not None and facts.project.knows(klass) and facts.project.grad_off(f"{klass}.{method}")

    def _bound_to_names(self, forward: cst.Call) -> bool:
        """The forward's result goes to plain names (`out = model(x)`, `a, b = model(x)`), or is
        read where it is made (`model(x).argmax(-1)` in an assignment to a name), or returned."""
        tree = self.facts.tree
        statement = next((a for a in tree.ancestors(forward) if isinstance(a, cst.BaseSmallStatement)), None)
        if type(statement) is cst.Return:
            return True
        return type(statement) is cst.Assign and all(
            type(leaf) is cst.Name for target in statement.targets for leaf in leaf_targets(target.target))

    def _learns(self, klass: cst.ClassDef) -> bool:
        """A method of the class backwards, steps an optimizer or asks for gradients, or the
        module asks for them: what its model records may be wanted."""
        roles = self.facts.roles
        return any(roles.backwards_in(m.body) or roles.steps_in(m.body) or roles.asks_for_grad(m)
                   for m in klass.body.body if type(m) is cst.FunctionDef) or roles.asks_for_grad(self.facts.tree.module)

    def _graph_stays_in(self, method: cst.FunctionDef) -> bool:
        """Nothing the method computes with a graph leaves it for what might backward it (a
        store, a collaborator's call; what it returns was checked by the caller)."""
        facts = self.facts
        produced = {name for assign in facts.scopes.assigns_of(method) if facts.values.carries_grad(assign.value, assign)
                    for target in assign.targets for name in target_names(target.target)}
        return facts.values.kept_from_backward(method, produced, returns=True)

    @staticmethod
    def _evaluated_in_init(klass: cst.ClassDef) -> FrozenSet[str]:
        """The attributes `__init__` puts in eval mode: `self.model.eval()`, `self.model =
        build(cfg).eval()`."""
        init = own_method(klass, "__init__")
        found: Set[str] = set()
        for statement in init.body.body if init is not None and type(init.body) is cst.IndentedBlock else ():
            if type(statement) is not cst.SimpleStatementLine:
                continue
            for small in statement.body:  # type: ignore[attr-defined]
                value = small.value if type(small) in (cst.Expr, cst.Assign) else None
                if type(value) is not cst.Call or type(value.func) is not cst.Attribute or \
                        value.func.attr.value != "eval" or value.args:  # type: ignore[attr-defined]
                    continue
                if type(small) is cst.Expr:
                    found.add(dotted_name(value.func.value) or "")  # type: ignore[attr-defined]
                else:
                    found.update(dotted_name(t.target) or "" for t in small.targets)  # type: ignore[attr-defined]
        return frozenset(name for name in found if name.startswith("self."))

    def _consumed_here(self, generator: cst.GeneratorExp) -> bool:
        """The generator is the argument of a call that runs it through at once: `torch.cat`,
        `list`, `sum`, `max`... (not `map`, `enumerate`, `zip`, `islice`, which pass it on lazily)."""
        arg = self.facts.tree.parent(generator)
        call = self.facts.tree.parent(arg) if type(arg) is cst.Arg else None
        if type(call) is not cst.Call:
            return False
        func = call.func  # type: ignore[attr-defined]
        if type(func) is cst.Name and self.facts.names.qualified_name(func) is None:
            return func.value in _CONSUMING_BUILTINS  # type: ignore[attr-defined]
        return (self.facts.names.call_name(call) or "").startswith("torch.")  # type: ignore[arg-type]

    @staticmethod
    def _keeps_on_instance(method: cst.FunctionDef) -> bool:
        """The method stores or appends something on its instance (`self.x = ...`,
        `self.items.append(...)`, `self.cache[k] = ...`)."""
        for node in walk_scope(method.body):
            if type(node) is cst.Assign and any(_on_self(t.target) for t in node.targets):  # type: ignore[attr-defined]
                return True
            if type(node) in (cst.AugAssign, cst.AnnAssign) and _on_self(node.target):  # type: ignore[attr-defined]
                return True
            if type(node) is cst.Call and type(node.func) is cst.Attribute and _on_self(node.func.value):  # type: ignore[attr-defined]
                if node.func.attr.value in ("append", "extend", "insert", "add", "appendleft", "update", "put",  # type: ignore[attr-defined]
                                            "setdefault", "__setitem__"):
                    return True
        return False

    def _check_hf_hook(self, node: cst.FunctionDef) -> None:
        facts = self.facts
        runs = [call for call, _ in facts.calls.calls_in(node.body, recording=True)  # (not through a no_grad call)
                if (facts.roles.is_forward(call) or dotted_name(call.func) == "self.compute_loss")
                and facts.regions.grad_enabled(call) is not False]
        if not runs or facts.roles.backwards_in(node.body) or facts.roles.asks_for_grad(node):
            return
        self.report(runs[0], (
            f"`{show(runs[0].func)}` runs in `{node.name.value}`, which the HF Trainer calls on every evaluation "
            f"batch without turning autograd off (its own `{node.name.value}` does so inside): every forward saves "
            f"activations for a backward that never comes, and the outputs it returns keep them; decorate it with "
            f"`@torch.no_grad()`"), self._decorate(node))

    def _check_simuleval_hook(self, node: cst.FunctionDef) -> None:
        """A SimulEval agent's hook that runs the model with grad on. Not when the agent backwards
        or asks for gradients anywhere (it may learn online), nor when it is model code itself."""
        facts = self.facts
        klass = facts.tree.class_of(node)
        if klass is None or facts.receivers.is_model_class(klass):
            return
        if self._learns(klass) or self._hands_to_collaborator(node):
            return  # it learns, or hands its outputs to what may (`self.trainer.update(logits)`)
        runs = [(call, site) for call, site in facts.roles.forwards_in(node.body, recording=True)
                if facts.regions.grad_enabled(call) is not False and id(call) not in self._hooks_reported]
        if not runs:
            return
        call, site = runs[0]
        self._hooks_reported.add(id(call))
        where = "" if call is site else f" (through `{show(site.func)}`)"
        self.report(call, (
            f"`{show(call.func)}` runs{where} in `{node.name.value}`, which SimulEval calls on every read or write "
            f"action without turning autograd off: every forward saves activations for a backward that never "
            f"comes, and whatever the agent keeps of its outputs (in its states) keeps them; decorate "
            f"`{node.name.value}` with `@torch.no_grad()`"), self._decorate(node))

    def _hands_to_collaborator(self, hook: cst.FunctionDef) -> bool:
        """The hook passes a value with a graph to a method of another object the agent holds
        (`self.trainer.update(logits, target)`), not its model: that object may backward it."""
        facts = self.facts
        for call, _ in facts.calls.calls_in(hook.body, follow=False):
            func = call.func
            if not type(func) is cst.Attribute or facts.regions.grad_enabled(call) is False:
                continue
            receiver = dotted_name(func.value) or ""
            if receiver.startswith("self.") and not facts.receivers.is_model(func.value) and \
                    not facts.roles.is_forward(call) and any(facts.values.carries_grad(a.value, call) for a in call.args):
                return True
        return False

    def _decorate(self, node: cst.FunctionDef) -> Optional[Fix]:
        no_grad = self.facts.names.local_name_for("torch.no_grad")
        if no_grad is None:
            return None
        decorator = cst.Decorator(cst.Call(cst.parse_expression(no_grad)))
        return Fix((Replace(node, node.with_changes(decorators=[decorator, *node.decorators])),), Safety.SAFE,
                   f"decorate `{node.name.value}` with `@{no_grad}()`")

    def visit_For(self, node: cst.For) -> None:
        self._check(node)
        self._check_graph_reused(node)
        self._check_graph_kept(node)

    def visit_ListComp(self, node: cst.ListComp) -> None:
        self._check_comprehension(node)

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self._check_comprehension(node)

    def _check_comprehension(self, node: Union[cst.ListComp, cst.GeneratorExp]) -> None:
        """`preds = [model(x).argmax(1) for x, _ in loader]` after `.eval()`: an evaluation loop
        written as a comprehension over a data loader; the fix wraps its statement."""
        facts = self.facts
        if type(node.for_in.iter) not in (cst.Name, cst.Attribute) or \
                not LOADER_NAME.search(last_part(dotted_name(node.for_in.iter) or "")):
            return  # (over a data set: many batches, each keeping its graph)
        if type(node) is cst.GeneratorExp and not self._consumed_here(node):
            return  # a generator kept for later (or wrapped lazily: `map`, `enumerate`) runs where it is consumed
        forwards = [call for call in expression_nodes(node.elt) if type(call) is cst.Call and
                    facts.roles.is_forward(call) and not self.facts.values.runs_without_grad(call)]  # type: ignore[arg-type]
        if not forwards or facts.regions.grad_enabled(node) is not True or facts.values.requires_grad_off:
            return
        line = facts.tree.statement_around(node)
        why = facts.phase.eval_evidence(node)
        if type(line) is not cst.SimpleStatementLine or len(line.body) != 1 or why is None or \
                why == "script" and self.facts.runs_on_the_cpu(forwards) or \
                any(facts.phase.is_training(loop) for loop in facts.tree.loops_around(node)):  # type: ignore[attr-defined]
            return
        scope = facts.tree.scope_of(line)
        bound = {name for target in getattr(line.body[0], "targets", ())  # type: ignore[attr-defined]
                 for name in target_names(target.target)}
        if facts.roles.asks_for_grad(line) or facts.in_model_code(node) or \
                bound and facts.values.reaches_backward(scope, bound) or \
                bound and facts.values.handed_to_backward(scope, bound):
            return
        self.report(forwards[0], (
            f"`{show(forwards[0].func)}` runs over `{show(node.for_in.iter)}` in this comprehension ({_WHY[why]}) "
            f"with autograd recording, so every batch's forward saves activations for a backward that never comes, "
            f"and they stay alive as long as what the comprehension keeps of each: wrap the statement in "
            f"`with torch.no_grad():`"), self._fix(line, "wrap the statement in `with torch.no_grad():`"))  # type: ignore[arg-type]

    def visit_While(self, node: cst.While) -> None:
        self._check(node)
        self._check_graph_reused(node)
        self._check_graph_kept(node)

    def _recording_above(self, bind: Binding) -> List[cst.Call]:
        """The call sites of the forwards the statement of `bind` runs, above a loop, where
        every one records: a helper that runs one under no_grad on some path sees to grad mode
        itself (`get_text_features_list(texts)`, recording only when asked to train)."""
        facts = self.facts
        pairs = facts.roles.forwards_in(bind.node)
        if any(facts.regions.grad_enabled(call) is not True or facts.regions.grad_enabled(site) is not True or
               facts.values.runs_without_grad(call) or facts.values.in_a_quiet_mode(call) for call, site in pairs):
            return []
        return [site for _, site in pairs]

    def _check_graph_kept(self, loop: Loop) -> None:
        """A forward above an evaluation or inference loop, with grad on, whose output the loop
        reads (xtuner's chat: the image encoded once, then `pixel_values` handed to every
        turn's `generate`): its saved activations stay alive while the whole loop runs, beside
        the loop's own forwards, for a backward that never comes. Only where the loop runs a
        model (a forward or a generation), in a module that never trains and loads weights or puts
        a model in eval mode, whose function hands back nothing with a graph (a caller may backward through it); asked of the outermost loop
        of its function."""
        facts = self.facts
        if facts.roles.backwards or facts.roles.optimizer_steps or not facts.phase.inference_signs or \
                facts.phase.trains or not self._forward_assigns(facts.tree.scope_of(loop)) or facts.tree.loops_around(loop):
            return  # (a module that trains may backward what is kept: asked only of inference code)
        above = self._forwards_above(loop)
        if not above:
            return
        why = facts.phase.eval_evidence(loop)
        scope = facts.tree.scope_of(loop)
        if why is None or facts.values.requires_grad_off or facts.phase.is_training(loop) or \
                facts.roles.backwards_in(scope) or facts.in_model_code(loop) or \
                any(facts.values.carries_grad(value, value) for value in facts.scopes.returned(scope)):
            return  # (a model's method runs in the grad mode its caller chose)
        if not facts.roles.forwards_in(loop) and not any(
                facts.roles.is_generate(call) for call, _ in facts.calls.calls_in(loop)):
            return
        for bind, forwards in above:
            if not facts.values.reaches_backward(scope, {bind.name}):
                self._report_above(bind, forwards, (
                    f"runs before this loop ({_WHY[why]}) with autograd recording, and `{bind.name}`, read in the "
                    f"loop, keeps its saved activations alive while the whole loop runs, for a backward that never "
                    f"comes: compute NAMES under `torch.no_grad()`"))

    def _forwards_above(self, loop: Loop) -> List[Tuple[Binding, List[cst.Call]]]:
        """The assignments above `loop`, outside any loop, of names it reads that carry a graph,
        that run a forward themselves, each with the forwards it runs, all recording
        (`_recording_above`). Asked first of the function's assignments that run a forward
        (most functions have none above their loops), then of the names the loop reads."""
        facts = self.facts
        start = facts.tree.order(loop)
        targets = {target.target.value for assign in self._forward_assigns(facts.tree.scope_of(loop))  # type: ignore[attr-defined]
                   if facts.tree.order(assign) < start for target in assign.targets if type(target.target) is cst.Name}
        found: List[Tuple[Binding, List[cst.Call]]] = []
        if not targets:
            return found
        asked: Set[str] = set()
        for node in walk_scope(loop.body):  # type: ignore[attr-defined]
            if type(node) is not cst.Name or node.value not in targets or node.value in asked:  # type: ignore[attr-defined]
                continue
            asked.add(node.value)  # type: ignore[attr-defined]
            above = self._forward_bound_above(node)
            if above is not None and facts.values.carries_grad(node, node):
                found.append(above)
        return found

    def _forward_assigns(self, scope: cst.CSTNode) -> List[cst.Assign]:
        """The assignments of `scope`, outside any loop, that run a forward themselves."""
        found = self._scope_forwards.get(id(scope))
        if found is None:
            facts = self.facts
            found = self._scope_forwards[id(scope)] = [
                assign for assign in facts.scopes.assigns_of(scope)
                if type(assign.value) in _MADE_BY_A_CALL and facts.roles.forwards_in(assign, follow=False)
                and not facts.tree.loops_around(assign)]
        return found

    def _forward_bound_above(self, name: cst.Name) -> Optional[Tuple[Binding, List[cst.Call]]]:
        """The one assignment of `name` seen where it is read, outside any loop, that runs a
        forward itself, every forward it reaches recording (`image_embeds = encoder(image)`,
        not `model = build(cfg)`), with those forwards' call sites."""
        facts = self.facts
        binds = facts.scopes.bindings_seen(name.value, name)
        if len(binds) != 1 or binds[0].kind != "assign" or type(binds[0].value) not in _MADE_BY_A_CALL or \
                not facts.roles.forwards_in(binds[0].node, follow=False) or facts.tree.loops_around(binds[0].node):
            return None
        forwards = self._recording_above(binds[0])
        return (binds[0], forwards) if forwards else None

    def _report_above(self, bind: Binding, forwards: List[cst.Call], claim: str) -> None:
        """Report the forward above a loop that `bind` makes (at `forwards`), at the first forward
        of its chain: the assignments above it, of the names its value reads, that run a forward themselves
        (`visual_outputs = visual_encoder(image)`, then `pixel_values = projector(visual_outputs
        ...)`), each kept alive by the names bound to it. Once per assignment."""
        chain = [(bind, forwards)]
        for earlier, _ in chain:
            for node in expression_nodes(earlier.value):  # type: ignore[arg-type]
                if type(node) is cst.Name:
                    upstream = self._forward_bound_above(node)
                    if upstream is not None and all(upstream[0].node is not b.node for b, _ in chain):
                        chain.append(upstream)
        if any(id(b.node) in self._above_reported for b, _ in chain):
            return
        self._above_reported.update(id(b.node) for b, _ in chain)
        chain.sort(key=lambda pair: self.facts.tree.order(pair[0].node))
        site = chain[0][1][0]
        names = " and ".join(f"`{b.name}`" for b, _ in chain)
        self.report(site, f"`{show(site.func)}` " + claim.replace("NAMES", names))

    def _check_graph_reused(self, loop: Loop) -> None:
        """A forward above an optimisation loop, with grad on, whose output every iteration's
        loss reads and backwards with `retain_graph=True` (StyleGAN-XL's CLIP text targets, a
        style image's VGG features): the backward goes through that forward's graph again on
        every iteration (which is why it asks to retain it), into a model no optimizer trains.
        Only where every optimizer its function steps is built on a list of tensors the code
        names (`AdamW([direction])`, `LBFGS([image])`): an optimizer of a model's parameters
        may train the one that made the graph."""
        facts = self.facts
        if not self._retains or \
                not any(literal_bool(backward.retain_graph) is True for backward, _ in facts.roles.backwards_in(loop)):
            return
        if not self._trains_named_tensors(facts.tree.scope_of(loop)):
            return
        for bind in facts.values.graphs_from_before(loop):
            forwards = self._recording_above(bind) if bind.kind == "assign" and not facts.tree.loops_around(bind.node) else []
            if not forwards:
                continue
            self._report_above(bind, forwards, (
                f"runs before this loop with autograd recording, and every iteration's "
                f"`backward(retain_graph=True)` goes back through it by `{bind.name}` (the graph retain_graph "
                f"keeps), into a model no optimizer trains here: compute NAMES under `torch.no_grad()` (or "
                f"detach them), then drop retain_graph"))
            return

    @cached_property
    def _retains(self) -> bool:
        """The module backwards somewhere with `retain_graph=True`."""
        return any(literal_bool(backward.retain_graph) is True for backward in self.facts.roles.backwards)

    def _trains_named_tensors(self, scope: cst.CSTNode) -> bool:
        """`scope` steps optimizers, and each is bound once, in the module, by a call whose
        first argument is a list of plain names (`torch.optim.AdamW([direction], lr=0.05)`): it
        trains those tensors, no model. Found once a scope."""
        found = self._named_training.get(id(scope))
        if found is None:
            steps = self.facts.roles.steps_in(scope)
            found = self._named_training[id(scope)] = bool(steps) and all(
                self._named_tensors(step.optimizer) for step, _ in steps)
        return found

    def _named_tensors(self, optimizer: Optional[str]) -> bool:
        bound = [assign.value for assign in self.facts.roles.receivers.assignments_to(optimizer or "")
                 if type(assign.value) is cst.Call]
        if len(bound) != 1 or not bound[0].args:  # type: ignore[attr-defined]
            return False
        first = bound[0].args[0].value  # type: ignore[attr-defined]
        return type(first) in (cst.List, cst.Tuple) and bool(first.elements) and \
            all(type(element.value) is cst.Name for element in first.elements)  # type: ignore[attr-defined]

    def _check(self, loop: Loop) -> None:
        found = self._finding(loop)
        if found is None:
            return
        forwards, why = found
        facts = self.facts
        forward, site = forwards[0]
        where = "" if forward is site else f" (through `{show(site.func)}`)"
        target = self._wrapped(loop, [s for _, s in forwards], why)
        fix = None if self._models_ask_for_grad() or target is None else \
            self._fix(target, "wrap the loop in `with torch.no_grad():`")
        if target is None:
            advice = "decorate the function with `@torch.no_grad()`"
        elif target is loop:
            advice = "wrap the loop in `with torch.no_grad():`"
        else:  # the loop yields: wrap the inner loop that runs the model, not the yield
            advice = (f"wrap the inner loop {_named(target)} in `with torch.no_grad():` (not the loop around "
                      f"the `yield`: no-grad mode would leak into the caller while the generator is suspended)")
        measured = (" (an eval loop over a dataset keeping its outputs peaked at 1792 MB on an H200, 537 MB "
                    "under no_grad)" if over_dataset(facts, loop) else
                    ", and they stay alive as long as any output computed from them does")
        message = (f"`{show(forward.func)}` runs{where} in this evaluation loop ({_WHY[why]}) with autograd "
                   f"recording, so every forward saves activations for a backward that never comes"
                   f"{measured}: {advice}")
        self.report(site, message, fix)

    def visit_Assign(self, node: cst.Assign) -> None:
        """A forward in a training loop whose output never reaches the backward (it is read for
        a metric and dropped): `with torch.no_grad():` around that one statement."""
        facts = self.facts
        forward = _forward_of(node.value)
        if forward is None or not facts.roles.is_forward(forward) or facts.regions.grad_enabled(forward) is not True:
            return
        loops = facts.tree.loops_around(node)
        if not loops or facts.values.requires_grad_off:
            return
        loop = loops[0]
        if not facts.roles.backwards_in(loop) or facts.roles.asks_for_grad(loop):
            return
        guard = facts.steps.periodic_guard(node)
        if guard is None and facts.steps.past_rare_exit(node):
            return  # (periodic, under no guard of its own)
        leaves = [leaf for target in node.targets for leaf in leaf_targets(target.target)]
        names = {leaf.value for leaf in leaves if type(leaf) is cst.Name}  # type: ignore[attr-defined]
        scope = facts.tree.scope_of(loop)
        if not names or any(type(leaf) is not cst.Name for leaf in leaves) or \
                guard is not None and not self._kept_between_runs(guard, node, names, loop) or \
                self.facts.values.runs_without_grad(forward) or \
                not facts.values.kept_from_backward(scope, names) or not self._trained_forward(loop, forward) or \
                self._leaves_by_the_side(loop, forward) or few_literal(loop, facts.scopes) or \
                facts.values.frozen_by_a_helper(self._model_run(forward)) or facts.per_step(guard or node) is None:
            return  # (how often, asked last: it may go to the project)
        held = ("nothing it returns reaches the backward, and it stays bound until this block runs again: "
                "its graph keeps this pass's activations alive through every training step in between"
                if guard is not None else
                "nothing it returns reaches the backward (it is read and dropped): beside the forward that is "
                "trained, its graph keeps this pass's activations alive as long as its output is bound")
        self.report(forward, (
            f"`{show(forward.func)}` runs in this training loop with autograd recording, but {held}; wrap the "
            f"statement in `with torch.no_grad():`"),
            self._statement_fix(node))

    def _kept_between_runs(self, guard: cst.CSTNode, node: cst.Assign, names: Set[str], loop: Loop) -> bool:
        """The periodic block `guard` repeats (its test takes a remainder: `if step % every ==
        0:`), and a name `node` binds keeps what it bound until the block runs again (SiT's
        `samples = vae.decode(...).sample` every 10,000 steps): bound nowhere else in the loop
        nor after `node` in the block, and neither deleted nor detached in place in the loop
        (a binding before the loop frees nothing between runs). A block that runs once in the
        loop (`if step == 0:`, or on its last step: `if (i + 1) % len(loader) == 0:`) is left alone."""
        if not any(type(part) is cst.BinaryOperation and type(part.operator) is cst.Modulo and not (  # type: ignore[attr-defined]
                type(part.right) is cst.Call and dotted_name(part.right.func) == "len")  # type: ignore[attr-defined]
                   for part in expression_nodes(guard.test)):  # type: ignore[attr-defined]
            return False
        tree, scopes = self.facts.tree, self.facts.scopes
        body, end, start = guard.body, tree.span(node)[1], tree.order(loop)  # type: ignore[attr-defined]
        return any(all(tree.contains(body, bind.node) and tree.order(bind.node) < end or tree.order(bind.node) < start
                       for bind in scopes.bindings(tree.scope_of(loop), name)) and not self._released_in(loop, name)
                   for name in names)

    @staticmethod
    def _released_in(loop: Loop, name: str) -> bool:
        """`del name` (among others), `name.detach_()` or `name.requires_grad_(False)` in the loop."""
        for part in walk_scope(loop):
            if type(part) is cst.Del and name in {leaf.value for leaf in leaf_targets(part.target)  # type: ignore[attr-defined]
                                                  if type(leaf) is cst.Name}:  # type: ignore[attr-defined]
                return True
            if type(part) is cst.Call and type(part.func) is cst.Attribute and \
                    part.func.attr.value in ("detach_", "requires_grad_") and dotted_name(part.func.value) == name:  # type: ignore[attr-defined]
                return True
        return False

    def _statement_fix(self, node: cst.CSTNode) -> Optional[Fix]:
        """`with torch.no_grad():` around the statement that holds `node`, where it is one
        statement alone on its line and no model of the module needs autograd in its forward."""
        statement = self.facts.tree.statement_around(node)
        if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1 or self._models_ask_for_grad():
            return None
        return self._fix(statement, "wrap the statement in `with torch.no_grad():`")

    def visit_Expr(self, node: cst.Expr) -> None:
        """A forward whose result is dropped, after the step's last backward (a pass run for its
        side effects: DomainBed's ERM++ refreshes an averaged model's batch-norm statistics with
        `self.network_sma(all_x)`): its graph is recorded for nothing. Before a backward, or in
        a module that registers forward hooks, the pass may feed the loss by the side."""
        facts = self.facts
        forward = node.value
        if type(forward) is not cst.Call or not facts.roles.is_forward(forward) or \
                facts.regions.grad_enabled(forward) is not True or facts.values.requires_grad_off:
            return
        scope = facts.tree.function_of(node)
        if scope is None or "register_forward_hook" in facts.identifiers or \
                "register_forward_pre_hook" in facts.identifiers or not self._refreshes_statistics(forward, scope):
            return
        at = facts.tree.order(node)
        backwards = [site for _, site in facts.roles.backwards_in(scope)]
        if not backwards or any(facts.tree.order(site) >= at for site in backwards) or \
                facts.tree.loops_around(node) or facts.roles.asks_for_grad(scope) or \
                self._warms_up(forward) or facts.values.runs_without_grad(forward) or \
                self._reads_model_attribute(scope.body, forward, at):
            return
        if facts.per_step(node) is None:
            return  # (how often, asked last: it may go to the project)
        self.report(forward, (
            f"`{show(forward.func)}` runs after this step's backward with autograd recording, and its result is "
            f"dropped: it records a graph of its activations that no backward reads (a pass for its side "
            f"effects, such as batch-norm statistics, needs none); wrap the statement in `with torch.no_grad():`"),
            self._statement_fix(node))

    def _refreshes_statistics(self, forward: cst.Call, scope: cst.FunctionDef) -> bool:
        """The dropped call runs a model over the step's batch for its batch-norm statistics: the
        model is an averaged copy by its name (`network_sma`, `ema_model`) or was put in training
        mode before in this function, and it is given an input the step's trained forward was
        given (`self.network(all_x)`, then `self.network_sma(all_x)`). Not a method named like a
        model (`self.model_ema(self.model)`, `self.soft_update_target_network(tau)`), nor one whose
        name speaks of training (`self.network_adapt(x)` may backward itself)."""
        facts = self.facts
        receiver = dotted_name(forward.func)
        if receiver is None or TRAINING_METHOD.search(last_part(receiver)):
            return False
        mode = facts.roles.latest_modes(scope, facts.tree.order(forward)).get(receiver)
        if not _AVERAGED_MODEL.search(last_part(receiver)) and (mode is None or mode.mode != "train"):
            return False
        given = {dotted_name(arg.value) for arg in forward.args if arg.keyword is None and not arg.star} - {None}
        return any(call is not forward and facts.roles.is_forward(call) and facts.values.feeds_backward(call) and
                   bool(given & {dotted_name(arg.value) for arg in call.args})
                   for call in facts.scopes.calls_of(scope))

    def _trained_forward(self, loop: Loop, metric: cst.Call) -> bool:
        """Another forward of the loop whose output reaches its backward: the step trains through it,
        so the metric pass is a second one (a lone forward may feed the loss by a hook or an
        attribute, `model.aux_loss`, that memlint cannot follow)."""
        facts = self.facts
        return any(call is not metric and facts.roles.is_forward(call) and facts.values.feeds_backward(call)
                   for call, _ in facts.calls.calls_in(loop, follow=False))

    def _leaves_by_the_side(self, loop: Loop, forward: cst.Call) -> bool:
        """The forward may hand something to the loss besides what it returns: the module
        registers forward hooks (`feats["emb"] = out`), or the loop reads a value the model keeps
        (`loss + model.aux_loss`)."""
        facts = self.facts
        if "register_forward_hook" in facts.identifiers or "register_forward_pre_hook" in facts.identifiers:
            return True
        return self._reads_model_attribute(loop.body, forward, -1)

    def _model_run(self, forward: cst.Call) -> Optional[str]:
        """The model a forward runs: `model` for `model(x)` and `model.encode(x)`, `model.net` for `model.net(x)`."""
        func = forward.func
        return dotted_name(func.value if type(func) is cst.Attribute and not self.facts.receivers.is_model(func) else func)  # type: ignore[attr-defined]

    def _reads_model_attribute(self, body: cst.CSTNode, forward: cst.Call, after: int) -> bool:
        """`body` reads, past the position `after`, something the model `forward` runs keeps
        (`model.aux_loss`, not a method call): the pass may hand it on."""
        facts = self.facts
        model = self._model_run(forward)
        for node in walk_scope(body):
            if type(node) is cst.Attribute and dotted_name(node.value) == model and \
                    facts.tree.order(node) > after:  # type: ignore[attr-defined]
                parent = facts.tree.parent(node)
                if not (type(parent) is cst.Call and parent.func is node):  # type: ignore[attr-defined]
                    return True
        return False

    def _finding(self, loop: Loop) -> Optional[Tuple[List[Tuple[cst.Call, cst.Call]], str]]:
        """The grad-recording forwards this evaluation loop runs (helpers followed), with the
        evidence it evaluates; None when it is not one to report."""
        key = id(loop)
        if key in self._findings:
            return self._findings[key]
        self._findings[key] = None  # (a helper's loop asking back about this one does not decide)
        found = self._find(loop)
        self._findings[key] = found
        return found

    def _find(self, loop: Loop) -> Optional[Tuple[List[Tuple[cst.Call, cst.Call]], str]]:
        facts = self.facts
        if facts.values.requires_grad_off or facts.phase.is_training(loop) or few_literal(loop, facts.scopes):
            return None
        if any(not facts.phase.is_training(outer) and not few_literal(outer, facts.scopes) and
               facts.phase.eval_evidence(outer) is not None for outer in facts.tree.loops_around(loop)):
            return None  # the outermost evaluation loop is the one to wrap (not a few settings around it)
        forwards = [pair for pair in self._forwards(loop) if not self._reported_in_helper(pair)]
        if not forwards:
            return None
        why = facts.phase.eval_evidence(loop)
        if why is None or facts.roles.asks_for_grad(loop) or facts.values.hands_graph_away(loop) or \
                why == "script" and self.facts.runs_on_the_cpu([call for call, _ in forwards]):
            return None
        if facts.in_model_code(loop):  # (asked late: what a class is may be a question to the project)
            return None
        scope = facts.tree.scope_of(loop)
        bound = {name for name in self._outputs_bound(loop, {id(site) for _, site in forwards})
                 if self._seen_after(loop, scope, name)}
        if bound and facts.values.reaches_backward(scope, bound):
            return None
        live = [pair for pair in forwards if not facts.guards.dead(pair[1])]  # (not `if HF_MODE:` after `HF_MODE = False`)
        if not live or self._called_only_quietly(loop):  # (asked last: a question to the project)
            return None
        return live, why

    def _called_only_quietly(self, loop: Loop) -> bool:
        """The loop's method is named for evaluation and called nowhere in its module, and every
        call other modules make of a method of that name runs with grad off (PET's task
        helpers' `eval_step`, each called through a registry of helpers inside `with
        torch.no_grad():`)."""
        facts = self.facts
        func = facts.tree.function_of(loop)
        if func is None or facts.tree.class_of(func) is None or not EVAL_FUNCTION.search(func.name.value):
            return False
        name = func.name.value
        if facts.scopes.call_sites(func) or any(
                type(call.func) is cst.Attribute and call.func.attr.value == name  # type: ignore[attr-defined]
                for call in facts.scopes.calls):
            return False
        return facts.project.method_called_quietly(name)

    def _reported_in_helper(self, pair: Tuple[cst.Call, cst.Call]) -> bool:
        """A forward reached through a helper whose own evaluation loop runs it: reported there,
        where wrapping that loop is the smaller change."""
        call, site = pair
        return call is not site and any(self._finding(outer) is not None
                                        for outer in reversed(self.facts.tree.loops_around(call)))

    def _wrapped(self, loop: Loop, sites: List[cst.Call], why: str) -> Optional[Loop]:
        """The loop to wrap in no_grad: `loop` itself, or when it yields (a `with` around a
        `yield` leaks no-grad mode to the caller) the outermost loop inside it that does not
        and runs every one of `sites`; None when there is none. An inner loop only in a script
        that never backwards and that no module imports: elsewhere the caller may backward
        through what the generator yields."""
        if not _suspends(loop):
            return loop
        if why != "script":
            return None
        tree = self.facts.tree
        for node in walk_scope(loop):
            if node is not loop and type(node) in (cst.For, cst.While) and not _suspends(node) and \
                    all(tree.contains(node.body, site) for site in sites):
                return node
        return None

    def _forwards(self, loop: Loop) -> List[Tuple[cst.Call, cst.Call]]:
        facts = self.facts
        found = [(call, site) for call, site in facts.roles.forwards_in(loop, recording=True)
                 if facts.regions.grad_enabled(call) is True and facts.regions.grad_enabled(site) is True
                 and not facts.values.runs_without_grad(call) and not facts.values.in_a_quiet_mode(call)
                 and not facts.regions.flops_counted(call)
                 and not self._warms_up(call)]
        return sorted(found, key=lambda pair: facts.tree.order(pair[1]))

    def _warms_up(self, forward: cst.Call) -> bool:
        """`model(torch.zeros(1, 3, size, size).to(device))  # run once`: a forward whose result
        is dropped, outside any loop of its function, of made-up inputs only (a literal beside
        them: `augment=False`), warms the model up before the batches (lazy initialisation,
        cuDNN's choice of kernels). It runs once per call of its function, on one dummy input,
        not on every batch; a loop over such calls (a benchmark, a calibration) is no warm-up."""
        tree = self.facts.tree
        if type(tree.parent(forward)) is not cst.Expr or not forward.args or any(
                tree.function_of(loop) is tree.function_of(forward) for loop in tree.loops_around(forward)):
            return False
        return all(self._made_up(arg.value) or type(arg.value) in _LITERALS or
                   type(arg.value) is cst.Name and arg.value.value in ("True", "False", "None")  # type: ignore[attr-defined]
                   for arg in forward.args if not arg.star) and \
            any(self._made_up(arg.value) for arg in forward.args if arg.keyword is None and not arg.star)

    def _made_up(self, value: cst.BaseExpression) -> bool:
        while type(value) is cst.Call and type(value.func) is cst.Attribute and \
                value.func.attr.value in _KEEPS_VALUE:  # type: ignore[attr-defined]
            value = value.func.value  # type: ignore[attr-defined]
        return type(value) is cst.Call and self.facts.names.call_name(value) in _MADE_UP_INPUTS

    def _models_ask_for_grad(self) -> bool:
        """A model class of this module needs autograd in its own code (`torch.autograd.grad`
        in a forward): under no_grad it would fail, so `no_grad` is no fix."""
        facts = self.facts
        return any(facts.roles.asks_for_grad(method) for klass in facts.scopes.classes.values()
                   if facts.receivers.is_model_class(klass)
                   for method in klass.body.body if type(method) is cst.FunctionDef)

    @staticmethod
    def _outputs_bound(loop: Loop, sites: Set[int]) -> Set[str]:
        """The names the loop binds to what its forwards (`sites`, by id) compute, or to values
        made from those, and the lists it appends them to: what would carry their graphs on.
        Not the loop's inputs (`images = images.cuda()`), which a training loop of the same
        scope may use under the same name."""
        produced: Set[str] = set()

        def from_outputs(expr: cst.CSTNode) -> bool:
            return any(id(n) in sites or type(n) is cst.Name and n.value in produced  # type: ignore[attr-defined]
                       for n in expression_nodes(expr))

        def roots(target: cst.CSTNode) -> Set[str]:  # `logits[i]`, `out.x`: the name holding it
            return {name for leaf in leaf_targets(target) for name in (root_name(leaf),) if name}  # type: ignore[arg-type]

        for node in walk_scope(loop):
            if type(node) is cst.Assign and from_outputs(node.value):
                produced.update(name for target in node.targets for name in roots(target.target))
            elif type(node) is cst.AugAssign and from_outputs(node.value):
                produced.update(roots(node.target))  # `loss += criterion(model(x), y)`
            elif type(node) is cst.Call and type(node.func) is cst.Attribute and \
                    node.func.attr.value in ("append", "extend", "insert") and type(node.func.value) is cst.Name \
                    and any(from_outputs(arg.value) for arg in node.args):
                produced.add(node.func.value.value)
        return produced

    def _seen_after(self, loop: Loop, scope: cst.CSTNode, name: str) -> bool:
        """A read of `name` outside `loop` may see what the loop binds it to: not one that a
        binding surely precedes (a training loop of the same epoch that binds `outputs` itself
        before reading it, on the next iteration of the loop around both)."""
        facts = self.facts
        tree, liveness = facts.tree, facts.liveness
        end = tree.span(loop)[1]
        for use in liveness.name_uses(scope).uses:  # type: ignore[arg-type]
            if use.name != name or use.store or tree.contains(loop, use.node):
                continue
            if use.nested or not liveness.surely_rebound(scope, name, end if tree.order(use.node) >= end else 0,
                                                         use.node):
                return True
        return False

    def _fix(self, statement: Union[Loop, cst.SimpleStatementLine], title: str) -> Optional[Fix]:
        no_grad = self.facts.names.local_name_for("torch.no_grad")
        if no_grad is None:
            return None
        wrapped = cst.With(
            items=[cst.WithItem(cst.Call(cst.parse_expression(no_grad)))],
            body=cst.IndentedBlock([statement.with_changes(leading_lines=())]),
            leading_lines=statement.leading_lines,
        )
        return Fix((Replace(statement, wrapped),), Safety.SAFE, title)
