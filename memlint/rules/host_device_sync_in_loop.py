"""MEM105 host-device-sync-in-loop."""

from __future__ import annotations

from typing import Optional, Set

import libcst as cst

from memlint.analysis.dataflow import conjuncts
from memlint.analysis.guards import selects_a_mode, speaks_of_logging
from memlint.analysis.often import INNER, STEP
from memlint.analysis.steps import skips_one_in_n
from memlint.analysis.syncs import may_sync
from memlint.analysis.tree import TreeIndex, dotted_name, walk
from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import show

_IMPLICIT = frozenset({"slice", "mask", "condition", "iterate", "size"})  # syncs memlint.analysis.syncs.implicit finds
_READS_A_VALUE = frozenset({"item", "tolist", "cpu", "int", "float", "bool"})  # sync calls that read their receiver or argument
# Statements under which a print is meant: a flag, a periodic test, a handler
_CONDITIONAL = (cst.If, cst.IfExp, cst.Try, cst.ExceptHandler, cst.BooleanOperation)
_SCOPE_ENDS = (cst.FunctionDef, cst.For, cst.While)  # where the search for a condition around a log stops
_EXITS = (cst.Continue, cst.Break, cst.Return, cst.Raise)  # statements past which a loop's body may not run
_WHAT = {
    "item": "copies one number to the host",
    "tolist": "copies the tensor to the host",
    "cpu": "copies the tensor to the host",
    "int": "copies one number to the host",
    "float": "copies one number to the host",
    "bool": "copies one value to the host",
    "synchronize": "waits for every kernel queued so far",
    "slice": "uses a GPU value as a slice bound, which copies it to the host,",
    "mask": "indexes with a boolean mask of GPU values, whose result's size is read on the host,",
    "condition": "tests a GPU value on the host",
    "iterate": "reads a GPU tensor on the host element by element",
    "size": "uses a GPU value as a size or a count, which copies it to the host,",
}


# flair's strided sentences, for the examples: MOVED is what the first call passes as the mapping
_FLAIR = (
    "import torch\nfrom typing import Optional\n\n\n"
    "def combine_strided(hidden: torch.Tensor, mapping: torch.Tensor, n: int) -> torch.Tensor:\n"
    "    out = torch.zeros(n, hidden.shape[-1], device=hidden.device)\n"
    "    for sentence_id in torch.arange(0, n):\n        out[sentence_id] = hidden[mapping == sentence_id].mean(0)\n"
    "    return out\n\n\nclass TransformerEmbeddings(torch.nn.Module):\n"
    "    def prepare(self, ids, cpu_mapping, device):\n        kwargs = {\"ids\": ids.to(device)}\n"
    "        kwargs[\"mapping\"] = MOVED\n"
    "        unpacked = combine_strided(kwargs[\"ids\"], kwargs[\"mapping\"], len(cpu_mapping))\n"
    "        return kwargs, unpacked\n\n"
    "    def forward(self, ids: torch.Tensor, mapping: Optional[torch.Tensor] = None):\n"
    "        return combine_strided(self.model(ids), mapping, 8)\n"
)


# NeRF's render step, for the examples: HEAD sets the switch, TEST is the NaN check
_NERF = (
    "import torch\nHEAD\ndevice = torch.device(\"cuda\")\n\n\n"
    "def render_rays(model, rays):\n    raw = model(rays)\n    ret = {\"rgb\": raw[..., :3], \"disp\": raw[..., 3]}\n"
    "    for k in ret:\n        if TEST:\n            print(k, \"contains nan or inf\")\n    return ret\n\n\n"
    "def train(model, optimizer, loader, args):\n    print(vars(args))\n    for rays, target in loader:\n"
    "        ret = render_rays(model, rays.to(device))\n        loss = ((ret[\"rgb\"] - target) ** 2).mean()\n"
    "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"
)
_NAN_CHECK = "(torch.isnan(ret[k]).any() or torch.isinf(ret[k]).any())"


# a Tacotron's decoder loop, for the examples: R is what the loop reads, CHANGE what the decoder does to `r`
_TACOTRON = (
    "import torch\nfrom torch import nn\n\n\nclass Decoder(nn.Module):\n    def __init__(self, n_mels):\n"
    "        super().__init__()\n        self.register_buffer(\"r\", torch.tensor(1, dtype=torch.int))\n"
    "        self.cell = nn.LSTMCell(n_mels, 256)\n        self.proj = nn.Linear(256, n_mels)\n\n"
    "    def forward(self, frame, state):\n        h, c = self.cell(frame, state)\nCHANGE"
    "        return self.proj(h), (h, c)\n\n\nclass Tacotron(nn.Module):\n    def __init__(self, n_mels):\n"
    "        super().__init__()\n        self.decoder = Decoder(n_mels)\n\n    @property\n    def r(self):\n"
    "        return self.decoder.r.item()\n\n    @r.setter\n    def r(self, value):\n"
    "        self.decoder.r = self.decoder.r.new_tensor(value)\n\n    def forward(self, mels, state):\n"
    "        frames, stops = [], []\n        for t in RANGE:\n"
    "            frame, state = self.decoder(mels[:, t], state)\n            frames.append(frame)\n"
    "            stops.extend([frame] * R)\n        return torch.stack(frames, 1)\n\n\nmodel = Tacotron(80).cuda()\n"
)


class HostDeviceSyncInLoop(Rule):
    """
    ## What it does
    Finds a host-device synchronisation (`t.item()`, `t.tolist()`, `t.cpu()`, `int(t)`,
    `float(t)`, `torch.cuda.synchronize()`, a GPU value given as a size or a count:
    `torch.randn((n,))`, `x.topk(k)`) that runs many times per training or inference
    step: in a loop (or comprehension) over a tensor's elements, a model's parameters or a
    non-trivial `range`, inside the step loop or inside a helper the step calls (`forward`,
    Lightning's `training_step`, Transformers' `prepare_inputs_for_generation`, which
    `generate` calls once per token, except what it computes only while an argument is empty,
    handed back on the next tokens, a function of the same file called from the loop). A value is
    on the device where it is moved or made there, computed from such values (the elements of
    `torch.sort(x)`, `x.topk(k)` are where `x` is), or returned by a helper of another module of
    the project that hands back a tensor on the device (StyleTTS2's `maximum_path`, imported
    with `from utils import *`). Also a test on every step whose answer a switch that is off
    throws away after reading a tensor: `if torch.isnan(x).any() and DEBUG:` after `DEBUG =
    False` (NeRF's render step), whatever the loop around it; not where another module may
    set the switch (`nerf.DEBUG = args.debug`), which a file linted alone cannot rule out.

    ## Why is this bad?
    The GPU runs kernels asynchronously; each of these calls makes the host wait until
    everything queued so far has finished, then copies the value over. Once per step that is
    the price of logging. Once per element or per parameter, the host and the device take
    turns: the device idles while the host launches the next kernel, and every step pays
    one round trip per element.

    ## Why it is opt-in
    Read finding by finding on real code (docs/real-code.md), 9 of its 17 findings were worth a
    change to the reviewers (leftover prints, a beam search's per-hypothesis reads). Most of the
    others are post-processing and metric loops that wait for the device in the same iteration
    anyway (a greedy loop over masks, values the host needs for its own work), where one wait
    fewer changes little. In a
    loop that does nothing else, the wait is the whole cost (the fixture runs 250x faster): select
    it (`--select MEM105`) and let `memlint verify` time the loop.

    ## Example
    ```python
    for x, y in loader:
        preds = model(x).argmax(1)
        for i in range(len(y)):
            correct += int(preds[i].item() == y[i].item())
    ```

    Use instead:
    ```python
    for x, y in loader:
        preds = model(x).argmax(1)
        correct += (preds == y).sum().item()
    ```

    Also the syncs no call asks for: a GPU value as a slice bound (`out[i, :n]`), a boolean mask
    of GPU values as an index (the result's size is read on the host), a GPU value as an `if`
    condition or under a `not`, Python's `any`/`all` over a comprehension of GPU tests
    (`any(torch.isnan(p.grad).any() for p in model.parameters())`: one wait per parameter),
    Python's `max`/`min` over a GPU tensor (a loop of its own, one wait per element:
    reported wherever it runs every step, `min(starts)` for `starts.min()`). And once per micro-batch of gradient
    accumulation (`total += loss.item()` in the inner loop of micro-batches, whose outer loop
    steps the optimizer; or a loop that backwards in a function run once per step, whose caller
    steps: a fairseq task's `train_step` over its language pairs), however few the micro-batches.

    And a `print` of a GPU tensor on every step, under no condition (a leftover of debugging:
    `print(predictions)` in an evaluation loop, `print(self.index)` in a `forward`, or a value
    computed in the print in a helper a sampler's `@torch.no_grad()` step calls every timestep:
    `print("gradient:", (variance * gradient.float()).mean())`): formatting the tensor copies it
    to the host. Also a dict the step fills with GPU tensors and prints whole (`metrics["kl"] =
    (logp - ref).mean()`, then `print(metrics)`: one wait per value), and a print in one mode of
    the step (`elif args.train_impl == "kto":` around the model's work picks the algorithm, not
    whether to log). Not a printed loss (the price of logging, like its
    `.item()`), a dict of losses, a shape, or a print under a condition (a flag, every N steps, a
    debugging mode: `if args.mode == "debug":`).

    And a wait in the `forward` of a class the model builds once per layer (`nn.ModuleList(Block()
    for _ in range(n))`, a KV cache each block builds or is given): `input_pos.max().item()` in a
    KV cache's forward waits once per layer on every generated token, where the position it
    needs is a Python number the caller already has. Reported once per forward, and not under a
    test that picks a dtype (`if x.dtype == torch.float16 and torch.isinf(x).any():` runs in half
    precision only, the caller's choice) or of a debugging setting (`if self.debug:`). Only the
    forward's own body: not a helper it calls, a forward a layer inherits, or a layer built by a
    factory function; and not alternatives of which one runs per step (a head per class, a
    metric per split: memlint.analysis.layers says which classes are layers). A tensor
    parameter of a module's method is taken for the device's (`input_pos: Tensor`), unless a
    part of its name says it holds lengths or sizes (`lengths`, `seq_lens`, `ilens`, which
    `pack_padded_sequence` takes on the host; not flash-attention's `cu_seqlens`).

    And a loop of time steps inside a step (a Tacotron's `forward` runs its decoder once per
    output frame): a wait there on a value every iteration reads the same (a 0-d buffer
    `self.decoder.r.item()`, directly or through a property of the class, `self.r`, that
    returns it) can be made once before the loop for the same number; and a wait in the
    `forward` of a module that such a loop calls (`self.decoder = Decoder(...)`, then
    `self.decoder(...)` in `for t in range(0, steps, self.r):`), once per time step, like a
    layer's. Only a value no code of the module stores or changes in place outside `__init__`
    and a property's setter (`self.step += 1` in a `forward` changes it), in a loop over a count
    not spelled as a number, or a `while` loop, in a function that runs on every step.

    And a log meant for one step in N under a test that holds on all the others: `if step %
    50:` (or `% 50 != 0`) where `if step % 50 == 0:` was meant, over a print of the loss (a
    GPU tensor formatted, or its `.item()`), reads the GPU back on 49 steps of 50. Only where N
    is a name or 10 or more (`step % 2` is every other step), the `if` has no `else`, and its
    branch steers nothing (no `continue`, no backward or optimizer step: `if step % accum != 0:`
    is gradient accumulation). No fix: which steps to log is the author's to say.

    And an evaluation that runs every step only for a periodic log: a helper that runs the
    model and returns values read back to the host (`return loss.item(), acc.item()`), called on
    every step, whose results are read only under a condition on the step counter (`if epoch %
    print_every == 0:`). Every step pays its forward and its waits; all but one in N are thrown
    away. The fix is to make the call under that condition.

    A loop reports once, at its first such wait: one read of its tensors before the loop
    removes them all (a beam search's per-hypothesis loop, `if done[j]:` then `lprobs[j, :prev]`
    with `prev = tokens[j, step]`). A decoding loop's tokens are a tensor however they were made:
    the model is called with a slice of them (`model.forward_decoder(tokens[:, :step + 1])`), so
    `tokens[i].tolist()` per hypothesis, to block repeated n-grams, waits once per hypothesis.

    ## When it is not reported
    A loop whose iterations wait for the device anyway (a boolean mask, a GPU value tested in an
    `if`, a copy of the batch to the device): one more wait there changes little. (Masks do not
    excuse each other: a loss per codebook that selects its valid positions twice with one mask
    waits twice, and a loss that ignores those positions waits for none; nor do the waits of a
    loop over a model's parameters: a clipping helper's `.item()` and its `if clip_coef < 1:`
    both go with one foreach kernel.) Waits that
    each read one element by the loop's own variable do not count: reading the tensor once
    before the loop removes them with the one reported. One sync per step (`loss.item()` for
    logging), a sync in a loop over a dict's `.items()`, a literal tuple or a short literal range
    (a few losses), in a `while` loop, in a loop that is itself the step (autoregressive decoding
    reads one token per step), between steps (epoch loops), in a branch switched off in the code
    (`debug = False`, then `if debug and ...:`), on values not known to be tensors (a helper's
    parameter is one where it is declared a tensor, `ids: Tensor`, or `Optional[Tensor]` in a
    module's method, and on the host where every call of the helper in the module passes a host
    copy; on the device where every call passes a tensor there, a module's method its own, or a
    dict's item last stored moved there), and in files
    whose code names no device (`device`, `cuda`, `args.gpu`, a device string, a framework that
    runs on one; a docstring's words do not count).

    ## Fix
    None automatic: compute on the device (`(preds == y).sum()`, `torch.stack(norms)`) and
    read the result once (`.item()`, `.tolist()`), or every N steps.

    ## Fix safety
    No fix is offered.
    """

    CODE = "MEM105"
    DEFAULT_ON = False
    NAME = "host-device-sync-in-loop"
    MESSAGE = "a host-device sync runs many times per step"
    FIX_SAFETY = None
    CLAIM = Claim.TIME_LOWER

    VALID = (
        # a decoder loop's value changed by the decoder each time step, or a loop over a few passes
        _TACOTRON.replace("CHANGE", "        self.r.add_(1)\n").replace("RANGE", "range(0, mels.size(1), self.r)")
        .replace("R)", "self.r)"),
        _TACOTRON.replace("CHANGE", "").replace("RANGE", "range(3)").replace("R)", "self.r)"),
        # ... a value the loop itself rebinds
        _TACOTRON.replace("CHANGE", "").replace("RANGE", "range(mels.size(1))")
        .replace("            stops.extend([frame] * R)\n", "            n = frame.sum()\n            stops.append(n.item())\n"),
        # the switch tested first; a batch tested on the host, before it is moved
        _NERF.replace("HEAD", "from helpers import *").replace("    raw = model(rays)", "    debug = False\n    raw = model(rays)")
        .replace("TEST", "debug and " + _NAN_CHECK),
        "import torch\ndevice = torch.device(\"cuda\")\n\n\ndef train(model, opt, loader):\n    debug = False\n"
        "    for step, (x, y) in enumerate(loader):\n        if torch.isnan(x).any() and debug:\n"
        "            print(\"bad input at\", step)\n        x, y = x.to(device), y.to(device)\n"
        "        loss = ((model(x) - y) ** 2).mean()\n        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
        "import torch\ndevice = torch.device(\"cuda\")\n\n\ndef train(model, opt, loader):\n    debug = False\n"
        "    for batch in loader:\n        inputs, target = batch[\"x\"], batch[\"y\"]\n"
        "        if torch.isnan(inputs).any() and debug:\n            print(\"bad batch\")\n"
        "        loss = ((model(inputs.to(device)) - target.to(device)) ** 2).mean()\n"
        "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
        # the lengths kept as Python numbers: sizes read on the host already
        "import torch\nimport torch.nn as nn\n\n\nclass NaViT(nn.Module):\n"
        "    def forward(self, images):\n        device = images[0].device\n"
        "        tokens = [self.to_patches(image) for image in images]\n"
        "        seq_lens = [t.shape[0] for t in tokens]\n"
        "        keep_lens = [max(1, int(0.9 * n)) for n in seq_lens]\n        kept = []\n"
        "        for one_tokens, seq_len, num_keep in zip(tokens, seq_lens, keep_lens):\n"
        "            keep = torch.randn((seq_len,), device=device).topk(num_keep, dim=-1).indices\n"
        "            kept.append(one_tokens[keep])\n"
        "        return self.transformer(torch.cat(kept))\n",
        # ... filled on the first token only: generation hands the argument back on the next ones
        "import torch\nimport torch.nn as nn\n\n\nclass Decoder(nn.Module):\n"
        "    def prepare_inputs_for_generation(self, input_ids: torch.LongTensor, first=None, **kwargs):\n"
        "        if first is None:\n            starts = (input_ids == -1).nonzero()[:, 1]\n"
        "            first = min(starts) if len(starts) > 0 else input_ids.shape[1]\n"
        "        return {\"input_ids\": input_ids[:, :first].to(self.device), \"first\": first}\n",
        # ... one call passes the mapping on the host: where the mask lives is not known
        _FLAIR.replace("MOVED", "cpu_mapping"),
        # a helper's optional argument, declared `Optional[torch.Tensor]`: often never passed (fairseq's
        # `compute_mask_indices(..., indices=None)`, read per sample only under `indices is not None`)
        "import torch\nfrom typing import Optional\n\n\ndef compute_mask(shape, device, seed=None, "
        "indices: Optional[torch.Tensor] = None):\n    masks = []\n    for i in range(shape[0]):\n"
        "        seed_i = hash((seed, indices[i].item())) if indices is not None else None\n"
        "        masks.append(torch.rand(shape[1], device=device) < 0.5)\n    return torch.stack(masks)\n\n\n"
        "class Wav2Vec(torch.nn.Module):\n    def forward(self, x):\n        mask = compute_mask(x.shape, x.device)\n"
        "        return self.encoder(x * mask)\n",
        # ... or an item stored moved, then stored again on the host in a branch
        _FLAIR.replace("MOVED", "cpu_mapping.to(device)\n        if len(ids) < 8:\n"
                                "            kwargs[\"mapping\"] = cpu_mapping"),
        # what `torch.sort` returns tested per sample, sorted on the host: no wait
            "import torch\nimport torch.nn.functional as F\n\n\ndef train(model, loader, optimizer):\n"
            "    for x, y in loader:\n        x, y = x.cpu(), y.cpu()\n        sorted_y, order = torch.sort(y)\n"
            "        intervals, ex = [], 0\n        for idx, val in enumerate(sorted_y):\n"
            "            if ex == val:\n                continue\n            intervals.append(idx)\n            ex = val\n"
            "        loss = F.cross_entropy(model(x[order].cuda()), sorted_y.cuda())\n"
            "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
        # a field of a Lightning batch that is a list of captions, printed: no tensor
        "import torch\nfrom lightning.pytorch import LightningModule\n\nclass Captioner(LightningModule):\n"
        "    def training_step(self, batch, batch_idx):\n        images, captions = batch\n        print(captions)\n"
        "        return self.model(images).sum()\n",
        # the first three mistakes printed: the count bounds the reads, whatever the batch size
        "import torch\n\n@torch.no_grad()\ndef evaluate(model, loader, device):\n    shown = 0\n"
        "    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n"
        "        pred = model(x).argmax(-1)\n        wrong = (pred != y).cpu()\n"
        "        for i in range(x.size(0)):\n            if wrong[i] and shown < 3:\n                shown += 1\n"
        "                print(x[i].tolist(), pred[i].tolist(), y[i].tolist())\n",
        # gradient norms per parameter, read every 100 steps
        "import torch\n\ndef train(model, loader, optimizer, device):\n"
        "    for step, (x, y) in enumerate(loader):\n"
        "        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))\n"
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"
        "        if step % 100 == 0:\n"
        "            print({name: p.grad.norm().item() for name, p in model.named_parameters()})\n",
        # the same per-token scoring in a script that never names a device (its docstring's words are
        # not one): reads on the CPU wait for nothing
        "\"\"\"Score sentences with a small LM on the CPU (no GPU needed).\"\"\"\n"
        "import torch\n\ndef score(model, tokenizer, sentences):\n    for text in sentences:\n"
        "        tokens = tokenizer(text, return_tensors=\"pt\").input_ids\n"
        "        with torch.no_grad():\n            logits = model(tokens).logits\n        total = 0.0\n"
        "        for i in range(tokens.shape[-1] - 1):\n"
        "            total += torch.log_softmax(logits[0, i], dim=-1)[tokens[0, i + 1]].item()\n"
        "        print(total)\n",
        # a decoding loop's n-gram blocking on a host copy made once per step
        "import torch\n\nclass Generator:\n    def generate(self, model, sample, beam, max_len):\n"
        "        src = sample['net_input']['src_tokens']\n        tokens = src.new(src.size(0) * beam, max_len).fill_(1)\n"
        "        order = torch.arange(beam).to(src.device)\n"
        "        for step in range(max_len - 1):\n            lprobs = model.forward_decoder(tokens[:, :step + 1])\n"
        "            host = tokens.cpu()\n            seen = []\n            for i in range(host.size(0)):\n"
        "                seen.append(set(host[i].tolist()))\n            tokens[:, step + 1] = lprobs.argmax(-1)\n",
        # a batch sliced into something that is not a model: nothing says `tokens` is a tensor
        "import torch\n\nclass Generator:\n    def generate(self, render, sample, beam, max_len):\n"
        "        tokens = sample['tokens']\n        order = torch.arange(beam).to(tokens.device)\n"
        "        for step in range(max_len - 1):\n            render(tokens[:, :step + 1])\n            seen = []\n            for i in range(len(tokens)):\n"
        "                seen.append(set(tokens[i].tolist()))\n",
        # a list of sentences sliced into a model: a list takes a slice too, so nothing says it is a tensor
        "import torch\nmodel = model.to(device)\n\ndef tag(model, sents, bs):\n    lengths = [len(s) for s in sents]\n"
        "    for i in range(0, len(sents), bs):\n        scores = model(sents[i:i + bs], lengths[i:i + bs])\n"
        "        for j in range(i, min(i + bs, len(sents))):\n            n = int(lengths[j])\n\n"
        "for batch in loader:\n    tag(model, batch, 8)\n",
        # an epoch loop that samples once after its step loop, in a helper that runs without grad
        "import torch\n\n@torch.no_grad()\ndef sample_images(model, z):\n    return model(z)\n\n"
        "model = model.to(device)\nfor epoch in range(epochs):\n    for x, y in loader:\n"
        "        loss = criterion(model(x.to(device)), y.to(device))\n        loss.backward()\n        opt.step()\n"
        "        opt.zero_grad()\n    imgs = sample_images(model, fixed_z)\n    print(imgs)\n",
        # a task's step that steps the optimizer per language pair: each pair is a step, one
        # `.item()` its logging
        "import torch\nfrom fairseq.tasks import LegacyFairseqTask\n\nclass MultiTask(LegacyFairseqTask):\n"
        "    def train_step(self, sample, model, criterion, optimizer, update_num):\n        agg_loss = 0.0\n"
        "        for pair in self.pairs:\n            loss, size, log = criterion(model.models[pair], sample[pair])\n"
        "            optimizer.backward(loss)\n            optimizer.step()\n            agg_loss += loss.detach().item()\n"
        "        return agg_loss\n",
        # a step over language pairs in code that names no device nor a framework that runs on one
        "import torch\n\ndef train_step(sample, model, criterion, optimizer):\n    agg_loss = 0.0\n"
        "    for pair in pairs:\n        loss = criterion(model(sample[pair]))\n"
        "        loss.backward()\n        agg_loss += loss.detach().item()\n    return agg_loss\n",
        # ... whose docstring speaks of a GPU: a word in a docstring is no device in the code
        "\"\"\"One update over every language pair (on a GPU when the model is on one).\"\"\"\nimport torch\n\n"
        "def train_step(sample, model, criterion, optimizer):\n    agg_loss = 0.0\n"
        "    for pair in pairs:\n        loss = criterion(model(sample[pair]))\n"
        "        loss.backward()\n        agg_loss += loss.detach().item()\n    return agg_loss\n",
        # the iteration waits for the device anyway: a boolean mask's size is read on the host
        "import torch\nmodel = model.to(device)\nfor x in loader:\n    out = model(x.to(device))\n"
        "    for row in out:\n        kept = row[row > 0]\n        total += kept.sum().item()\n",
        # ... a mask built from comparisons and bound to a name; a result sized by the data
        "import torch\nmodel = model.to(device)\nfor x in loader:\n    out = model(x.to(device))\n"
        "    for row in out:\n        keep = (row > 0) & (row < 9)\n        total += row[keep].sum().item()\n",
        "import torch\nmodel = model.to(device)\nfor x in loader:\n    out = model(x.to(device))\n"
        "    for row in out:\n        hits = torch.nonzero(row > 0)\n        total += row.sum().item()\n",
        # host values as slice bounds and conditions; a condition on a shape
        "import torch\nmodel = model.to(device)\nfor x, lengths in loader:\n    out = model(x.to(device))\n"
        "    for i, n in enumerate(lengths.tolist()):\n        kept.append(out[i, :n])\n",
        "import torch\nmodel = model.to(device)\nfor x in loader:\n    scores = model(x.to(device))\n"
        "    for row in scores:\n        if row.shape[0] > 2:\n            hits += 1\n",
        # the accumulated value read once per optimizer step
        "import torch\nmodel = model.to(device)\nfor step in range(steps):\n    total = 0.0\n"
        "    for _ in range(accumulate):\n        loss = model(next(data)).mean() / accumulate\n"
        "        total += loss.detach()\n        loss.backward()\n    optimizer.step()\n    print(total.item())\n",
        # one .item() per step for logging
        "import torch\nmodel = model.to(device)\nfor x, y in loader:\n    loss = criterion(model(x), y)\n"
        "    loss.backward()\n    opt.step()\n    print(loss.item())\n",
        # a few losses in a dict
        "import torch\nmodel = model.to(device)\nfor x, y in loader:\n    losses = model(x, y)\n"
        "    logs = {k: v.item() for k, v in losses.items()}\n",
        # decoding: each step reads one token
        "import torch\nmodel = model.to(device)\nfor i in range(max_len):\n    out = model(ids)\n"
        "    tok = out[-1].argmax().item()\n",
        # an epoch loop, not a step
        "import torch\nmodel = model.to(device)\nfor epoch in range(10):\n    for x, y in loader:\n"
        "        model(x).sum().backward()\n    for p in model.parameters():\n        print(p.norm().item())\n",
        # an evaluation whose results every step reads (early stopping), or one under a flag
        "import torch\n\ndef evaluate(model, x, y):\n    with torch.no_grad():\n        out = model(x)\n"
        "    return criterion(out, y).item()\n\nmodel = model.to(device)\nfor epoch in range(epochs):\n"
        "    train(model)\n    val = evaluate(model, x, y)\n    if epoch % 10 == 0:\n        print(val)\n"
        "    if val < best:\n        best = val\n",
        "import torch\n\ndef evaluate(model, x, y):\n    with torch.no_grad():\n        out = model(x)\n"
        "    return criterion(out, y).item()\n\nmodel = model.to(device)\nfor epoch in range(epochs):\n"
        "    train(model)\n    val = evaluate(model, x, y)\n    if args.verbose:\n        print(val)\n",
        # ... read under two different conditions: no one place to move the call to
        "import torch\n\ndef evaluate(model, x, y):\n    with torch.no_grad():\n        loss = criterion(model(x), y)\n"
        "    return loss.item()\n\nmodel = model.to(device)\nfor epoch in range(epochs):\n    train(model)\n"
        "    val = evaluate(model, x, y)\n    if epoch % 10 == 0:\n        print(val)\n    if epoch % 10 == 5:\n"
        "        save(val)\n",
        # ... one that also keeps something every step (a count, a history, a log writer)
        "import torch\n\nclass Trainer:\n    def evaluate(self, x, y):\n        with torch.no_grad():\n"
        "            loss = criterion(self.model(x), y)\n        self.history.append(loss.item())\n"
        "        return loss.item()\n\n    def fit(self, x, y):\n        self.model = self.model.to(device)\n"
        "        for epoch in range(epochs):\n            criterion(self.model(x), y).backward()\n"
        "            optimizer.step()\n            val = self.evaluate(x, y)\n            if epoch % 10 == 0:\n"
        "                print(val)\n",
        # ... read under a condition that holds on most steps: `% N` not tested for zero, `!= 0`
        "import torch\n\ndef evaluate(model, x, y):\n    model.eval()\n    with torch.no_grad():\n"
        "        loss = criterion(model(x), y)\n    return loss.item()\n\n"
        "def train_step(epoch, model, x, y, print_every=10):\n    model.train()\n    optimizer.zero_grad()\n"
        "    criterion(model(x), y).backward()\n    optimizer.step()\n    val_loss = evaluate(model, x, y)\n"
        "    if epoch % print_every:\n        print(epoch, val_loss)\n\n"
        "model = model.to(device)\nfor epoch in range(epochs):\n    train_step(epoch, model, x, y)\n",
        "import torch\n\ndef evaluate(model, x, y):\n    model.eval()\n    with torch.no_grad():\n"
        "        loss = criterion(model(x), y)\n    return loss.item()\n\n"
        "def train_step(epoch, model, x, y, print_every=10):\n    model.train()\n    optimizer.zero_grad()\n"
        "    criterion(model(x), y).backward()\n    optimizer.step()\n    val_loss = evaluate(model, x, y)\n"
        "    if epoch % print_every != 0 or epoch > 0:\n        print(epoch, val_loss)\n\n"
        "model = model.to(device)\nfor epoch in range(epochs):\n    train_step(epoch, model, x, y)\n",
        # a log every N steps, or one under a remainder that is no counter's, or one of no GPU value
        "import torch\nmodel = model.to(device)\nfor step, batch in enumerate(loader):\n    outputs = model(**batch)\n"
        "    loss = outputs.loss\n    accelerator.backward(loss)\n    if not step % 50:\n        accelerator.print(f\"loss {loss}\")\n"
        "    if dim % 2:\n        print(loss)\n    if step % 50:\n        print(f\"step {step}\")\n    optimizer.step()\n",
        # an HF pipeline's output (lists of dicts of strings), through an attribute of an instance
        "import torch\nfrom transformers import pipeline\n\nclass Chatbot:\n    def __init__(self, path):\n"
        "        self.generator = pipeline(\"text-generation\", model=path, device=\"cuda:0\")\n\n"
        "def main():\n    bot = Chatbot(\"gpt2\")\n    while True:\n        prompt = input(\"> \")\n"
        "        answer = bot.generator(prompt, max_new_tokens=64)\n        print(answer[0][\"generated_text\"])\n",
        # ... one that trains: the step itself, whose loss is logged every 100 steps
        "import torch\n\ndef run_batch(model, x, y):\n    loss = criterion(model(x), y)\n    loss.backward()\n"
        "    optimizer.step()\n    return loss.item()\n\nmodel = model.to(device)\nfor i, (x, y) in enumerate(loader):\n"
        "    loss = run_batch(model, x, y)\n    if i % 100 == 0:\n        print(loss)\n",
        # ... one that returns tensors, read later on the device (no wait here)
        "import torch\n\ndef evaluate(model, x, y):\n    with torch.no_grad():\n        out = model(x)\n"
        "    return criterion(out, y)\n\nmodel = model.to(device)\nfor epoch in range(epochs):\n"
        "    train(model)\n    val = evaluate(model, x, y)\n    if epoch % 10 == 0:\n        print(val)\n",
        # a loss computed in the print is the price of logging, as its `.item()` is
        "import torch\nmodel = model.to(device)\nfor x, y in loader:\n    losses = criterion(model(x), y)\n"
        "    losses.mean().backward()\n    opt.step()\n    print(\"loss\", losses.mean())\n",
        # an integer cast says nothing of where its value lives: a mask of a data helper
        "import torch\n\ndef mask_lengths(padding_mask, bsz):\n    sizes = []\n    for i in range(bsz):\n"
        "        sizes.append(padding_mask[i].long().sum().item())\n    return sizes\n\n"
        "model = model.to(device)\nfor x, mask in loader:\n    out = model(x.to(device))\n"
        "    sizes = mask_lengths(mask, len(x))\n",
        # a print under a condition (a periodic log, a flag), of a loss, of a shape
        "import torch\nmodel = model.to(device)\nfor i, (x, y) in enumerate(loader):\n    out = model(x)\n"
        "    if i % 100 == 0:\n        print(out)\n",
        "import torch\nmodel = model.to(device)\nfor x, y in loader:\n    loss = criterion(model(x), y)\n"
        "    loss.backward()\n    opt.step()\n    print(f\"loss {loss}\")\n",
        "import torch\nclass Bias(torch.nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
        "        self.table = torch.nn.Parameter(torch.zeros(n, 8))\n    def forward(self):\n"
        "        print(self.table.shape)\n        return self.table.cuda()\n",
        # ... the same loop over values read to the host once
        "import math\nimport torch\n\nclass Generator(torch.nn.Module):\n    def search(self, src, n, max_len):\n"
        "        tokens = torch.zeros(n, max_len + 1).to(src).long()\n        count = torch.ones(n, device=src.device)\n"
        "        for step in range(max_len):\n            lprobs = self.model(tokens[:, :step + 1])\n"
        "            copy = (count != 1).tolist()\n            prevs = tokens[:, step].tolist()\n"
        "            for j in range(len(copy)):\n                if copy[j]:\n"
        "                    lprobs[j, :prevs[j]] = -math.inf\n",
        # a tensor a module makes on the host (no device given): its values are read without a wait
        "import torch\n\nclass Pad(torch.nn.Module):\n    def forward(self, x, lens):\n"
        "        x = x.to(self.weight.device)\n        lengths = torch.zeros(len(lens), dtype=torch.long)\n"
        "        for i, n in enumerate(lengths):\n            x[i, :n] = 0\n        return x\n",
        # values copied to the host once, then read one by one
        "import torch\nmodel = model.to(device)\nfor x in loader:\n    scores = model(x).cpu()\n"
        "    for rank in scores.argsort(-1, descending=True):\n        for m in rank:\n"
        "            picks.append(segments[m.item()])\n",
        # NumPy values: no device involved
        "import numpy as np, torch\nmodel = model.to(device)\nfor x, y in loader:\n    out = model(x)\n"
        "    arr = out.detach().cpu().numpy()\n    for i in range(len(arr)):\n        print(arr[i].item())\n",
        # ... where the helper clears the gradients in its loop, each iteration is a step of its
        # own: the loop calling it runs between steps, and reads the norms once per epoch
        "import torch\n\nclass TrainLoop:\n    def run(self):\n        for epoch in range(self.epochs):\n"
        "            self.train_epoch()\n            print(self.grad_norm())\n\n    def train_epoch(self):\n"
        "        for i in range(0, len(self.data), self.batch):\n            self.opt.zero_grad()\n"
        "            self.model(self.data[i:i + self.batch].to(self.device)).mean().backward()\n"
        "            self.mixed.optimize(self.opt)\n\n    def grad_norm(self):\n        total = 0.0\n"
        "        for p in self.model.parameters():\n            total += p.grad.norm().item() ** 2\n"
        "        return total ** 0.5\n",
        # the same loss per codebook, its masked positions ignored by the loss: no mask, no wait
        "import torch\nfrom torch.nn import CrossEntropyLoss\n\nclass Decoder(torch.nn.Module):\n"
        "    def forward(self, input_ids, labels):\n        logits = self.heads(self.body(input_ids))\n"
        "        loss = torch.zeros([], device=self.device)\n"
        "        labels = labels.masked_fill(input_ids == self.eos_token_id, -100)\n"
        "        for k in range(self.num_codebooks):\n"
        "            logits_k = logits[:, k].contiguous().view(-1, logits.shape[-1])\n"
        "            loss += CrossEntropyLoss(ignore_index=-100)(logits_k, labels[..., k].contiguous().view(-1))\n"
        "        return loss\n",
        # a refinement loop in a forward that runs the decoder at every pass: one wait per forward
        "import torch\n\nclass Refiner(torch.nn.Module):\n    def forward(self, tokens, target):\n"
        "        outs = []\n        for t in range(self.passes):\n"
        "            out = self.decoder(tokens.to(self.device))\n            outs.append(out)\n"
        "            noisy = torch.rand(tokens.size(0), device=tokens.device) < self.ratio\n"
        "            tokens[noisy] = target[noisy]\n        return outs\n",
        # the same helper passed a host copy of the history: its reads wait for nothing
        "import torch\nfrom torch import Tensor\n\n\ndef banned_ngrams(prev_input_ids: Tensor, num_hypos: int):\n"
        "    banned = []\n    for idx in range(num_hypos):\n"
        "        banned.append(set(prev_input_ids[idx].tolist()))\n    return banned\n\n\n"
        "def beam(model, query, steps, device):\n    history = query.to(device)\n    for i in range(steps):\n"
        "        logits = model(history)\n        banned = banned_ngrams(history.cpu(), history.size(0))\n"
        "        history = torch.cat((history, logits.argmax(-1, keepdim=True)), dim=1)\n",
        # the lengths `pack_padded_sequence` takes on the CPU, declared a tensor in a module's forward
        "import torch\nfrom torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence\n\n"
        "class Encoder(torch.nn.Module):\n    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor):\n"
        "        emb = self.embed(tokens.to(self.device))\n"
        "        packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)\n"
        "        out, _ = self.rnn(packed)\n"
        "        out, _ = pad_packed_sequence(out, batch_first=True, total_length=max(lengths))\n        return out\n",
        # a branch switched off in the code (`distributed_loss = False`): it never runs
        "import torch\n\nclass SimCLR(torch.nn.Module):\n    def forward(self, x):\n"
        "        q = self.backbone(x.to(self.device))\n        distributed_loss = False\n"
        "        if distributed_loss and self.world_size > 1:\n            loss = 0.0\n"
        "            for k in range(q.size(0)):\n                loss += q[k].sum().item()\n"
        "            return loss\n        return q.sum()\n",
        # builtin reductions of a list of lengths and of a list of losses: no tensor is iterated
        "import torch\n\nclass Heads(torch.nn.Module):\n    def forward(self, ids, lengths):\n"
        "        ids = ids.to(self.device)\n        losses = [self.head(ids[:, k]).mean() for k in range(4)]\n"
        "        return sum(losses) / min(lengths)\n",
        # the same grad-norm helper, called once after training
        "import torch\n\ndef get_grad_norm(parameters, norm_type=2):\n    total = 0\n"
        "    for p in parameters:\n        total += p.grad.norm(norm_type).item() ** norm_type\n"
        "    return total ** (1.0 / norm_type)\n\n"
        "model = model.cuda()\nfor x, y in loader:\n    criterion(model(x), y).backward()\n    opt.step()\n"
        "    opt.zero_grad()\nprint(get_grad_norm(model.parameters()))\n",
        # gradients tested once per step, stacked on the device; `requires_grad` and `is None` are no tensors
        "import torch\nmodel = model.cuda()\nfor x, y in loader:\n    criterion(model(x), y).backward()\n"
        "    if all(p.grad is not None for p in model.parameters()) and any(p.requires_grad for p in model.parameters()):\n"
        "        finite = torch.stack([torch.isfinite(p.grad).all() for p in model.parameters()]).all()\n"
        "        if not finite:\n            continue\n    opt.step()\n",
        # a gradient of a tensor kept on the host; torch's predicates, a Python bool each; a
        # function of the module's own named `all`
        "import torch\ndevice = torch.device(\"cuda\")\nmodel = Net().to(device)\n"
        "temperature = torch.ones(num_classes, requires_grad=True)\nfor x, y in loader:\n"
        "    criterion(model(x.to(device)).cpu() / temperature, y).backward()\n"
        "    for c in range(num_classes):\n        if temperature.grad[c] == 0:\n"
        "            temperature.grad[c] = 1e-3\n"
        "    for i in range(self.num_layers):\n        x = layers[i](x, upcast=not torch.is_autocast_enabled())\n"
        "    if any(p.grad.is_complex() for p in model.parameters()):\n        raise TypeError\n",
        "import torch\n\ndef all(tensors):\n    return torch.stack([torch.isfinite(t).all() for t in tensors]).all()\n\n"
        "model = model.cuda()\nfor x, y in loader:\n    criterion(model(x.cuda()), y.cuda()).backward()\n"
        "    finite = all(p.grad for p in model.parameters())\n    opt.step()\n",
        # a starred unpacking: `weight` is the helper's last value (a number), not its third
        "import torch\nimport torch.nn.functional as F\n\nclass Net(torch.nn.Module):\n"
        "    def _view(self, x, y, i):\n        logits = self.heads[i](x)\n        loss = F.cross_entropy(logits, y)\n"
        "        return loss, logits, torch.softmax(logits, -1), self.weights[i]\n\n"
        "    def forward(self, x, y):\n        total = 0\n        for i in range(self.n_views):\n"
        "            loss, *_, weight = self._view(x, y, i)\n            if weight > 0:\n"
        "                total = total + weight * loss\n        return total\n",
        # a Lightning step unpacking its batch twice over (`pair = imgs, labels = batch`)
        "import torch\nimport pytorch_lightning as pl\n\nclass Classifier(pl.LightningModule):\n"
        "    def training_step(self, batch, batch_idx):\n        pair = imgs, labels = batch\n        loss = 0\n"
        "        for head in range(self.num_heads):\n            if labels[:, head].sum() > 0:\n"
        "                loss = loss + self.loss(self.model(imgs)[head], labels[:, head])\n        return loss\n",
        # `not` of host values, one per element
        "import torch\nmodel = model.cuda()\nfor x in loader:\n    out = model(x.cuda())\n"
        "    flags = [not bad for bad in torch.isnan(out.cpu())]\n",
        # a KV cache the model builds once, not once per layer: one wait per step
        "import torch\nfrom torch import nn\n\nclass KVCache(nn.Module):\n    def __init__(self, device=None):\n"
        "        super().__init__()\n        self.register_buffer(\"k\", torch.zeros(1, 8, 64, 8, device=device))\n\n"
        "    def forward(self, input_pos: torch.Tensor, k: torch.Tensor):\n        self.k.index_copy_(2, input_pos, k)\n"
        "        return self.k[:, :, :input_pos.max().item() + 1]\n\nclass GPT(nn.Module):\n"
        "    def __init__(self, n_layer):\n        super().__init__()\n        self.cache = KVCache()\n"
        "        self.h = nn.ModuleList(nn.Linear(8, 8) for _ in range(n_layer))\n",
        # ... a model a script builds in a loop (a sweep over sizes): no layer of another model
        "import torch\nfrom torch import nn\n\nclass GPT(nn.Module):\n"
        "    def forward(self, input_pos: torch.Tensor, x: torch.Tensor):\n"
        "        return self.body(x)[:, :input_pos.max().item() + 1]\n\n"
        "for n_layer in (2, 4, 8):\n    model = GPT(n_layer).cuda()\n",
        # ... a metric per split of the data (one runs per step), and a cache a model's own method
        # builds, whose name a loop over callbacks happens to call
        "import torch\nfrom torch import nn\n\nclass Accuracy(nn.Module):\n"
        "    def forward(self, preds: torch.Tensor, y: torch.Tensor):\n        return (preds == y).sum().item()\n\n"
        "class KVCache(nn.Module):\n    def forward(self, input_pos: torch.Tensor, k: torch.Tensor):\n"
        "        return k[:, :, :input_pos.max().item() + 1]\n\nclass Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.metrics = nn.ModuleDict({split: Accuracy() for split in (\"train\", \"val\")})\n\n"
        "    def setup(self):\n        self.cache = KVCache()\n\n    def forward(self, x):\n"
        "        for callback in self.callbacks:\n            callback.setup()\n        return self.body(x)\n\n"
        "model = Model().cuda()\n",
        # ... a layer whose lengths are read: `lengths` is the host's, as pack_padded_sequence wants it
        "import torch\nfrom torch import nn\n\nclass Encoder(nn.Module):\n"
        "    def forward(self, x: torch.Tensor, lengths: torch.Tensor):\n"
        "        return self.rnn(x[:, :lengths.max().item()])\n\nclass Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.layers = nn.ModuleList([Encoder() for _ in range(4)])\n\n"
        "model = Model().cuda()\n",
        # ... a layer's check that runs in half precision only (T5's clamp): the precision is the caller's choice
        "import torch\nfrom torch import nn\n\nclass Block(nn.Module):\n    def forward(self, x: torch.Tensor):\n"
        "        x = self.ff(x)\n        if x.dtype == torch.float16 and torch.isinf(x).any():\n"
        "            x = x.clamp(-6e4, 6e4)\n        return x\n\nclass Stack(nn.Module):\n"
        "    def __init__(self, n):\n        super().__init__()\n        self.blocks = nn.ModuleList(Block() for _ in range(n))\n\n"
        "model = Stack(12).cuda()\n",
        # a dict of losses printed, or a dict printed in a debugging mode or under a flag
        "import torch\nmodel = model.to(device)\nfor x, y in loader:\n    logs = {}\n    out = model(x)\n"
        "    logs[\"loss\"] = criterion(out, y)\n    print(logs)\n    logs[\"loss\"].backward()\n",
        "import torch\n\ndef forward_step(batch, model, args):\n    metrics = {}\n    if args.mode == \"debug\":\n"
        "        out = model(batch.to(args.device))\n        metrics[\"kl\"] = out.mean()\n        print(metrics)\n"
        "    else:\n        out = model(batch.to(args.device))\n    if args.verbose:\n        print(metrics)\n"
        "    return out.sum()\n\n"
        "for step in range(steps):\n    forward_step(next(data), model, args).backward()\n",
    )
    INVALID = (
        # a Tacotron's reduction factor read per decoder step, through a property and as the item itself
        Invalid(_TACOTRON.replace("CHANGE", "").replace("RANGE", "range(0, mels.size(1), self.r)").replace("R)", "self.r)")),
        Invalid(_TACOTRON.replace("CHANGE", "").replace("RANGE", "range(mels.size(1))")
                .replace("R)", "self.decoder.r.item())")),
        # ... and a 0-d buffer as a slice bound in the decoder, which runs once per time step
        Invalid(_TACOTRON.replace("CHANGE", "        h = h[:, :256 // self.r]\n").replace("RANGE", "range(mels.size(1))")
                .replace("R)", "2)")),
        # NeRF's render step: a NaN check whose answer `and debug` throws away, read back on every step
        # (a module's own switch counts only where the project shows no other module setting it)
        Invalid(_NERF.replace("HEAD", "from helpers import *").replace("    raw = model(rays)", "    debug = False\n    raw = model(rays)")
                .replace("TEST", _NAN_CHECK + " and debug")),
        # elements of a GPU tensor as a size and a count (NaViT's token dropout): two waits per image
        Invalid(
            "import torch\nimport torch.nn as nn\n\n\nclass NaViT(nn.Module):\n"
            "    def forward(self, images):\n        device = images[0].device\n"
            "        tokens = [self.to_patches(image) for image in images]\n"
            "        seq_lens = torch.tensor([t.shape[0] for t in tokens], device=device)\n"
            "        keep_lens = (0.9 * seq_lens).int().clamp(min=1)\n        kept = []\n"
            "        for one_tokens, seq_len, num_keep in zip(tokens, seq_lens, keep_lens):\n"
            "            keep = torch.randn((seq_len,), device=device).topk(num_keep, dim=-1).indices\n"
            "            kept.append(one_tokens[keep])\n"
            "        return self.transformer(torch.cat(kept))\n"
        ),
        # Transformers' `generate` calls `prepare_inputs_for_generation` once per generated token
        Invalid(
            "import torch\nimport torch.nn as nn\n\n\nclass Decoder(nn.Module):\n"
            "    def prepare_inputs_for_generation(self, input_ids: torch.LongTensor, **kwargs):\n"
            "        starts = (input_ids == -1).nonzero()[:, 1]\n"
            "        first = min(starts) if len(starts) > 0 else input_ids.shape[1]\n"
            "        return {\"input_ids\": input_ids[:, :first].to(self.device)}\n"
        ),
        # a helper's parameters declared tensors, passed on the device by every call (a module's
        # method: its inputs, declared `Optional[torch.Tensor]`, and a dict's item stored moved there)
        Invalid(_FLAIR.replace("MOVED", "cpu_mapping.to(device, non_blocking=True)")),
        # an element of what `torch.sort` returns, tested per sample (DomainBed's SelfReg groups)
        Invalid(
            "import torch\nimport torch.nn.functional as F\n\n\ndef train(model, loader, optimizer):\n"
            "    for x, y in loader:\n        x, y = x.cuda(), y.cuda()\n        sorted_y, order = torch.sort(y)\n"
            "        intervals, ex = [], 0\n        for idx, val in enumerate(sorted_y):\n"
            "            if ex == val:\n                continue\n            intervals.append(idx)\n            ex = val\n"
            "        loss = F.cross_entropy(model(x[order]), sorted_y)\n"
            "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"
        ),
        # a gradient norm read per parameter on every step (`named_parameters()` yields tensors)
        Invalid(
            "import torch\n\ndef train(model, loader, optimizer, device):\n    for x, y in loader:\n"
            "        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))\n"
            "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"
            "        norms = {name: p.grad.norm().item() for name, p in model.named_parameters()}\n"
            "        print(norms)\n"
        ),
        # a boolean mask per class: a data loader's batch, unpacked, holds tensors
        Invalid(
            "import torch\n\ndef train(model, loader, optimizer, device, num_classes):\n    for x, y in loader:\n"
            "        x, y = x.to(device), y.to(device)\n        out = model(x)\n        loss = 0\n"
            "        for c in range(num_classes):\n            sel = out[y == c]\n"
            "            loss = loss + sel.logsumexp(-1).sum()\n        optimizer.zero_grad()\n"
            "        loss.backward()\n        optimizer.step()\n"
        ),
        # a greedy selection reading each pick (`.values` of a reduction is a tensor)
        Invalid(
            "import torch\n\ndef hard_negatives(model, loader, device, k):\n    model.eval()\n    picked = []\n"
            "    with torch.no_grad():\n        for x, y in loader:\n"
            "            scores = model(x.to(device)).max(-1).values\n            for _ in range(k):\n"
            "                idx = scores.argmax().item()\n                picked.append(idx)\n"
            "                scores[idx] = -1e9\n    return picked\n"
        ),
        # syncs no call asks for: a GPU value as a slice bound, as an `if` condition
        Invalid(
            "import torch\nmodel = model.to(device)\nfor x in loader:\n    out = model(x.to(device))\n"
            "    lengths = out.argmax(-1).sum(1)\n    for i, n in enumerate(lengths):\n"
            "        kept.append(out[i, :n])\n"
        ),
        Invalid(
            "import torch\nmodel = model.to(device)\nfor x in loader:\n    scores = model(x.to(device))\n"
            "    for row in scores:\n        if row.max() > 0.5:\n            hits += 1\n"
        ),
        # ... the same step in code whose names speak of a device (`args.gpu`)
        Invalid(
            "import torch\n\ndef train_step(sample, model, criterion, optimizer, args):\n    agg_loss = 0.0\n"
            "    for pair in pairs:\n        loss = criterion(model(sample[pair].to(args.gpu)))\n"
            "        loss.backward()\n        agg_loss += loss.detach().item()\n    return agg_loss\n"
        ),
        # ... a task's step that backwards once per language pair, its trainer stepping after it
        Invalid(
            "import torch\nfrom fairseq.tasks import LegacyFairseqTask\n\nclass MultiTask(LegacyFairseqTask):\n"
            "    def train_step(self, sample, model, criterion, optimizer, update_num):\n        agg_loss = 0.0\n"
            "        for pair in self.pairs:\n            loss, size, log = criterion(model.models[pair], sample[pair])\n"
            "            optimizer.backward(loss)\n            agg_loss += loss.detach().item()\n"
            "        return agg_loss\n"
        ),
        # one read per token of each sentence scored, in a script whose device is a string
        Invalid(
            "import torch\n\ndef score(model, tokenizer, sentences):\n    for text in sentences:\n"
            "        tokens = tokenizer(text, return_tensors=\"pt\").input_ids.to(\"cuda\")\n"
            "        with torch.no_grad():\n            logits = model(tokens).logits\n        total = 0.0\n"
            "        for i in range(tokens.shape[-1] - 1):\n"
            "            total += torch.log_softmax(logits[0, i], dim=-1)[tokens[0, i + 1]].item()\n"
            "        print(total)\n"
        ),
        # once per micro-batch of gradient accumulation
        Invalid(
            "import torch\nmodel = model.to(device)\nfor step in range(steps):\n    total = 0.0\n"
            "    for _ in range(accumulate):\n        loss = model(next(data)).mean() / accumulate\n"
            "        total += loss.item()\n        loss.backward()\n    optimizer.step()\n"
            "    optimizer.zero_grad()\n"
        ),
        Invalid(
            "import torch\nmodel = model.to(device)\ncorrect = 0\nfor x, y in loader:\n    preds = model(x).argmax(1)\n"
            "    for i in range(len(y)):\n        correct += int(preds[i].item() == y[i])\n"
        ),
        # an evaluation run every step, its results read only for a periodic log
        Invalid(
            "import torch\n\ndef evaluate(model, x, y, mask):\n    model.eval()\n    with torch.no_grad():\n"
            "        out = model(x)[mask]\n        loss = criterion(out, y[mask])\n"
            "        acc = (out.argmax(1) == y[mask]).float().mean()\n    return loss.item(), acc.item()\n\n"
            "def train_step(epoch, model, x, y, train_mask, val_mask, print_every=10):\n    model.train()\n"
            "    optimizer.zero_grad()\n    loss = criterion(model(x)[train_mask], y[train_mask])\n    loss.backward()\n"
            "    optimizer.step()\n    train_loss, train_acc = evaluate(model, x, y, train_mask)\n"
            "    val_loss, val_acc = evaluate(model, x, y, val_mask)\n"
            "    if epoch % print_every == 0:\n        print(epoch, train_loss, train_acc, val_loss, val_acc)\n\n"
            "model = model.to(device)\nfor epoch in range(epochs):\n    train_step(epoch, model, x, y, train_mask, val_mask)\n"
        ),
        # a comprehension's name is its own, whatever the loop around it binds to the same name
        Invalid(
            "import torch\nmodel = model.cuda()\nfor x, y in loader:\n    out = model(x.cuda())\n"
            "    for i in range(4):\n        words = [int(i) for i in out.argmax(-1)]\n"
        ),
        # a log meant for one step in N, under a test that holds on the others
        Invalid(
            "import torch\nmodel = model.to(device)\nfor step, batch in enumerate(loader):\n    outputs = model(**batch)\n"
            "    loss = outputs.loss\n    accelerator.backward(loss)\n    if step % 50:\n        accelerator.print(f\"step {step} loss {loss}\")\n"
            "    optimizer.step()\n    optimizer.zero_grad()\n"
        ),
        # a per-parameter helper called every step
        Invalid(
            "import torch\n\ndef grad_norm(model):\n    total = 0.0\n    for p in model.parameters():\n"
            "        total += p.grad.norm().item() ** 2\n    return total ** 0.5\n\n"
            "model = model.cuda()\nfor x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n"
            "    print(grad_norm(model))\n    opt.step()\n"
        ),
        # a grad-norm helper handed the parameters (known by the gradient it reads of each), every step
        Invalid(
            "import torch\n\ndef get_grad_norm(parameters, norm_type=2):\n"
            "    parameters = [p for p in parameters if p.grad is not None]\n    total = 0\n"
            "    for p in parameters:\n        total += p.grad.norm(norm_type).item() ** norm_type\n"
            "    return total ** (1.0 / norm_type)\n\n"
            "model = model.cuda()\nfor x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n"
            "    norm = get_grad_norm(model.parameters())\n    opt.step()\n"
        ),
        # a leftover print of a GPU tensor, on every forward or every batch
        Invalid(
            "import torch\nclass Bias(torch.nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
            "        self.table = torch.nn.Parameter(torch.zeros(n, 8))\n"
            "        self.register_buffer(\"index\", torch.arange(n))\n    def forward(self):\n"
            "        bias = self.table[self.index]\n        print(\"index\", self.index)\n        return bias.cuda()\n"
        ),
        Invalid(
            "import torch\nfrom accelerate import Accelerator\naccelerator = Accelerator()\n"
            "for batch in eval_loader:\n    with torch.no_grad():\n        outputs = model(**batch)\n"
            "    preds = outputs.logits.argmax(dim=-1)\n"
            "    preds, refs = accelerator.gather_for_metrics((preds, batch[\"labels\"]))\n"
            "    print(f\"=== {preds}\")\n    metric.add_batch(predictions=preds, references=refs)\n"
        ),
        # ... a value computed in the print, in a helper of a sampler's step that runs without grad
        Invalid(
            "import torch\n\nclass Diffusion(torch.nn.Module):\n    def guide(self, cond_fn, mean, variance, t):\n"
            "        gradient = cond_fn(mean, t)\n        print(\"gradient:\", (variance * gradient.float()).mean())\n"
            "        return mean + variance * gradient.float()\n\n    @torch.no_grad()\n"
            "    def p_sample(self, x, t, cond_fn):\n        mean, variance = self.model(x, t).chunk(2, dim=1)\n"
            "        return self.guide(cond_fn, mean, variance, t)\n\n    @torch.no_grad()\n"
            "    def sample(self, shape, cond_fn):\n        img = torch.randn(shape, device=self.device)\n"
            "        for t in reversed(range(self.num_timesteps)):\n            img = self.p_sample(img, t, cond_fn)\n"
            "        return img\n"
        ),
        # a beam search's per-hypothesis loop: every wait reads one element (one `.tolist()` reads them all)
        Invalid(
            "import math\nimport torch\n\nclass Generator(torch.nn.Module):\n    def search(self, src, n, max_len):\n"
            "        tokens = torch.zeros(n, max_len + 1).to(src).long()\n        count = torch.ones(n, device=src.device)\n"
            "        for step in range(max_len):\n            lprobs = self.model(tokens[:, :step + 1])\n"
            "            copy = count != 1\n            for j in range(copy.size(0)):\n                if copy[j]:\n"
            "                    prev = tokens[j, step]\n                    lprobs[j, :prev] = -math.inf\n"
            "                    lprobs[j, prev + 1:] = -math.inf\n            keep = lprobs.max(-1).values > 0\n"
            "            tokens = tokens[keep]\n            count = count[keep] - 1\n"
        ),
        # a decoding loop's tokens, known a tensor by the slice the model is called with, read
        # per hypothesis to block repeated n-grams (however `tokens` was made: here from the batch)
        Invalid(
            "import torch\n\nclass Generator:\n    def generate(self, model, sample, beam, max_len):\n"
            "        src = sample['net_input']['src_tokens']\n        tokens = src.new(src.size(0) * beam, max_len).fill_(1)\n"
            "        order = torch.arange(beam).to(src.device)\n"
            "        for step in range(max_len - 1):\n            lprobs = model.forward_decoder(tokens[:, :step + 1])\n"
            "            seen = []\n            for i in range(tokens.size(0)):\n"
            "                seen.append(set(tokens[i].tolist()))\n            tokens[:, step + 1] = lprobs.argmax(-1)\n"
        ),
        # a trainer whose step clears the gradients, backwards micro-batch after micro-batch in a
        # helper and then reads every parameter's norm: the `while` loop is the step loop, though
        # the optimizer steps out of sight (in a mixed-precision helper of another module)
        Invalid(
            "import torch\n\nclass TrainLoop:\n    def run_loop(self):\n        while True:\n"
            "            self.run_step(next(self.data))\n\n    def run_step(self, batch):\n"
            "        self.forward_backward(batch)\n        print(self.grad_norm())\n        self.mixed.optimize(self.opt)\n\n"
            "    def forward_backward(self, batch):\n        self.opt.zero_grad()\n"
            "        for i in range(0, len(batch), self.microbatch):\n"
            "            loss = self.model(batch[i:i + self.microbatch].to(self.device)).mean()\n"
            "            loss.backward()\n\n    def grad_norm(self):\n        total = 0.0\n"
            "        for p in self.model.parameters():\n            total += p.grad.norm().item() ** 2\n"
            "        return total ** 0.5\n"
        ),
        # a loss per codebook in a module's forward, each selecting its valid positions with a
        # boolean mask (a view of one built from comparisons): a wait per codebook, per mask
        Invalid(
            "import torch\nfrom torch.nn import CrossEntropyLoss\n\nclass Decoder(torch.nn.Module):\n"
            "    def forward(self, input_ids, labels):\n        logits = self.heads(self.body(input_ids))\n"
            "        loss = torch.zeros([], device=self.device)\n"
            "        labels = labels.masked_fill(labels == self.bos_token_id, -100)\n"
            "        mask = (input_ids != self.eos_token_id) & (labels != -100)\n"
            "        for k in range(self.num_codebooks):\n"
            "            logits_k = logits[:, k].contiguous().view(-1, logits.shape[-1])\n"
            "            mask_k = mask[..., k].contiguous().view(-1)\n"
            "            labels_k = labels[..., k].contiguous().view(-1)\n"
            "            loss += CrossEntropyLoss()(logits_k[mask_k], labels_k[mask_k])\n        return loss\n"
        ),
        # a negative drawn for each example of the batch in a module's forward, read one by one
        # (a draw is made where its weights live: on the device)
        Invalid(
            "import torch\nimport torch.nn.functional as F\n\nclass Contrastive(torch.nn.Module):\n"
            "    def forward(self, image, text):\n        emb = self.encoder(image.to(self.device))\n"
            "        with torch.no_grad():\n            weights = F.softmax(emb @ text.T, dim=1)\n        negatives = []\n"
            "        for b in range(image.size(0)):\n            idx = torch.multinomial(weights[b], 1).item()\n"
            "            negatives.append(emb[idx])\n        return torch.stack(negatives)\n"
        ),
        # a helper's parameter declared a tensor, passed the decoding loop's GPU history: read
        # per hypothesis on every decoding step
        Invalid(
            "import torch\nfrom torch import Tensor\n\n\ndef banned_ngrams(prev_input_ids: Tensor, num_hypos: int):\n"
            "    banned = []\n    for idx in range(num_hypos):\n"
            "        banned.append(set(prev_input_ids[idx].tolist()))\n    return banned\n\n\n"
            "def beam(model, query, steps, device):\n    history = query.to(device)\n    for i in range(steps):\n"
            "        logits = model(history)\n        banned = banned_ngrams(history, history.size(0))\n"
            "        history = torch.cat((history, logits.argmax(-1, keepdim=True)), dim=1)\n"
        ),
        # a test of an element against a counter-named value holds on many elements, not once
        Invalid(
            "import torch\n\ndef train(model, loader, opt, device, target_idx):\n    for x, y in loader:\n"
            "        out = model(x.to(device))\n        out.sum().backward()\n        opt.step()\n"
            "        opt.zero_grad()\n        hits = 0\n        for i in range(out.size(0)):\n"
            "            if y[i] == target_idx:\n                hits += out[i].argmax().item()\n"
        ),
        # a module-level switch some function turns on through `global`: not off
        Invalid(
            "import torch\n\nVERBOSE = False\n\ndef configure(args):\n    global VERBOSE\n"
            "    VERBOSE = args.verbose\n\ndef train(model, loader, opt, device):\n    for x in loader:\n"
            "        out = model(x.to(device))\n        if VERBOSE:\n            for k in range(out.size(0)):\n"
            "                print(out[k].sum().item())\n        out.sum().backward()\n        opt.step()\n"
            "        opt.zero_grad()\n"
        ),
        # a builtin reduction of a GPU tensor, in every forward: the builtin is the loop
        Invalid(
            "import torch\n\nclass Delay(torch.nn.Module):\n    def forward(self, ids):\n"
            "        ids = ids.to(self.device)\n        starts = (ids[:, 0] == -1).nonzero()[:, 1]\n"
            "        first = min(starts)\n        return self.decoder(ids[:, :first])\n"
        ),
        # element by element where one .tolist() would do
        Invalid(
            "import torch\nmodel.to(device)\nfor batch in loader:\n    ids = model(batch).argmax(-1)\n"
            "    words = [vocab[int(t)] for t in ids]\n"
        ),
        # a gradient is where backward ran: `not` of one, tested per parameter on every step
        Invalid(
            "import torch\nmodel = model.cuda()\nfor x, y in loader:\n    criterion(model(x), y).backward()\n"
            "    for p in model.parameters():\n        if not torch.isfinite(p.grad).all():\n"
            "            p.grad.zero_()\n    opt.step()\n"
        ),
        # ... Python's `any` over a comprehension of GPU tests, in a trainer's fp16 step, its list
        # of parameters known by the gradients the comprehension reads
        Invalid(
            "import torch\n\nclass Trainer:\n    def run(self):\n        for batch in self.loader:\n"
            "            self.model(batch.to(self.device)).mean().backward()\n            self.optimize()\n\n"
            "    def optimize(self):\n        if any(not torch.isfinite(p.grad).all() for p in self.params):\n"
            "            self.scale /= 2\n            return\n        self.opt.step()\n"
        ),
        Invalid(
            "import torch\nmodel = model.cuda()\nfor x, y in loader:\n    criterion(model(x), y).backward()\n"
            "    if any(torch.isnan(p.grad).any() for p in model.parameters()):\n        continue\n    opt.step()\n"
        ),
        # a clipping helper's two waits per parameter (its `if` tests a gradient's value, on the
        # device): the waits of a loop over parameters do not excuse each other
        Invalid(
            "import torch\n\ndef clip_gradients(model, clip):\n    norms = []\n"
            "    for name, p in model.named_parameters():\n        if p.grad is not None:\n"
            "            param_norm = p.grad.data.norm(2)\n            norms.append(param_norm.item())\n"
            "            clip_coef = clip / (param_norm + 1e-6)\n            if clip_coef < 1:\n"
            "                p.grad.data.mul_(clip_coef)\n    return norms\n\n"
            "model = model.cuda()\nfor x in loader:\n    model(x).mean().backward()\n    clip_gradients(model, 3.0)\n"
            "    opt.step()\n"
        ),
        # a leftover print of a dict of GPU metrics, in one mode of a trainer's step (`elif
        # args.train_impl == "kto":` picks the algorithm, not whether to log)
        Invalid(
            "import torch\n\ndef forward_step(batch, model, args):\n    metrics = {}\n"
            "    if args.train_impl == \"normal\":\n        loss = model(batch.to(args.device)).mean()\n"
            "    elif args.train_impl == \"kto\":\n        out = model(batch.to(args.device))\n"
            "        with torch.no_grad():\n            metrics[\"policy_logp\"] = out.sum(-1).mean()\n"
            "            metrics[\"kl\"] = out.mean()\n            print(metrics)\n        loss = out.mean()\n"
            "    return loss, metrics\n\nfor step in range(steps):\n"
            "    loss, metrics = forward_step(next(data), model, args)\n    loss.backward()\n"
        ),
        # a wait in the forward of a KV cache that each layer of the model holds: once per layer
        # per generated token
        Invalid(
            "import torch\nfrom torch import nn\n\nclass KVCache(nn.Module):\n    def __init__(self, device=None):\n"
            "        super().__init__()\n        self.register_buffer(\"k\", torch.zeros(1, 8, 64, 8, device=device))\n\n"
            "    def forward(self, input_pos: torch.Tensor, k: torch.Tensor):\n        self.k.index_copy_(2, input_pos, k)\n"
            "        return self.k[:, :, :input_pos.max().item() + 1]\n\nclass Attention(nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n        self.kv_cache = KVCache()\n\n"
            "class GPT(nn.Module):\n    def __init__(self, n_layer):\n        super().__init__()\n"
            "        self.h = nn.ModuleList(Attention() for _ in range(n_layer))\n"
        ),
        # ... one each layer builds when the model asks it to, layer by layer
        Invalid(
            "import torch\nfrom torch import nn\n\nclass KVCache(nn.Module):\n    def __init__(self, device=None):\n"
            "        super().__init__()\n        self.register_buffer(\"k\", torch.zeros(1, 8, 64, 8, device=device))\n\n"
            "    def forward(self, input_pos: torch.Tensor, k: torch.Tensor):\n        self.k.index_copy_(2, input_pos, k)\n"
            "        return self.k[:, :, :input_pos.max().item() + 1]\n\nclass Attention(nn.Module):\n"
            "    def build_kv_cache(self):\n        return KVCache()\n\n"
            "class GPT(nn.Module):\n    def __init__(self, n_layer):\n        super().__init__()\n"
            "        self.h = nn.ModuleList([Attention() for _ in range(n_layer)])\n\n"
            "    def set_kv_cache(self):\n        for block in self.h:\n"
            "            block.kv_cache = block.build_kv_cache()\n"
        ),
    )

    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        super().__init__(context)
        self._logged: Set[int] = set()  # the periodic conditions already reported
        self._repeated: Set[int] = set()  # the loops already reported (by their iterable): one fix reads all

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if type(func) is cst.Name and func.value == "print":  # type: ignore[attr-defined]
            self._printed(node)
            self._logged_on_most_steps(node)
        elif type(func) is cst.Attribute and func.attr.value == "print":  # type: ignore[attr-defined]
            self._logged_on_most_steps(node)  # `accelerator.print(...)`
        elif may_sync(node):
            self._check(node, self.facts.syncs.sync(node) or self.facts.syncs.implicit(node))
        else:
            tested = self.facts.syncs.truth_tested(node)
            if tested is not None:
                self._check(tested, "condition")
            self._read_back_for_a_log(node)

    def _read_back_for_a_log(self, node: cst.Call) -> None:
        """`loss, acc = evaluate(model, ...)` on every step, read only in `if epoch % 10 == 0:`."""
        facts = self.facts
        assign = facts.tree.parent(node)
        if type(assign) is not cst.Assign or assign.value is not node:  # type: ignore[union-attr]
            return  # (identity, not ABC isinstance: every call of the module passes here)
        func = facts.scopes.resolve(node)
        if func is None or not facts.syncs.reads_back(func):
            return
        guard = facts.read_only_periodically(assign)
        if guard is None or not facts.device_code or id(guard) in self._logged or \
                facts.per_step(node) is None:  # (asked last: the answer may come from the project)
            return
        self._logged.add(id(guard))  # one finding per log: the calls it alone reads move together
        self.report(node, (
            f"`{show(node.func)}(...)` runs the model and makes the host wait to read its results on every step, "
            f"yet they are read only under `{show(guard.test)}`: make the call there, and the other steps skip "  # type: ignore[attr-defined]
            f"its forward and its waits"))

    def _printed(self, node: cst.Call) -> None:
        """`print(predictions)` of a GPU tensor on every step, under no condition: a leftover
        of debugging, which copies the tensor to the host and waits for the GPU each time."""
        facts = self.facts
        child: cst.CSTNode = node
        for ancestor in facts.tree.ancestors(node):
            kind = type(ancestor)
            if kind is cst.If and child is not ancestor.test and selects_a_mode(ancestor.test) and \
                    self._runs_a_model(child):  # type: ignore[attr-defined]
                child = ancestor
                continue  # `elif args.train_impl == "kto":` around the model's work: a mode, not a log
            if kind in _CONDITIONAL:
                return  # a verbosity flag, a periodic log, a handler: printed on purpose
            if kind is cst.FunctionDef or kind is cst.For or kind is cst.While:
                break
            child = ancestor
        printed = facts.syncs.printed(node)
        if printed is None or not facts.device_code or facts.per_step(node) is None:  # (asked last: the project)
            return
        value, what = printed
        copied = "the tensor" if what == "a GPU tensor" else "each tensor"
        self.report(node, (
            f"`print(...)` formats `{show(value)}`, {what}, on every step: it copies {copied} to the host "
            f"and makes the host wait for the GPU each time; remove it, or print under a condition every N steps"))

    def _runs_a_model(self, branch: cst.CSTNode) -> bool:
        is_forward = self.facts.roles.is_forward
        return any(type(call) is cst.Call and is_forward(call) for call in walk(branch))  # type: ignore[arg-type]

    def _logged_on_most_steps(self, node: cst.Call) -> None:
        """`if step % 50: print(f"loss {loss}")`: a log meant for one step in N, under a test
        that holds on all the others, reads the GPU back on almost every step."""
        facts = self.facts
        guard = next((a for a in facts.tree.ancestors(node) if type(a) in _CONDITIONAL or type(a) in _SCOPE_ENDS), None)
        if type(guard) is not cst.If or id(guard) in self._logged or guard.orelse is not None or \
                not skips_one_in_n(guard.test) or not facts.tree.contains(guard.body, node) or \
                not _only_logs(guard):  # type: ignore[union-attr]
            return  # (an `else` too, or a body that steers the step: a choice, not a slip)
        value = facts.syncs.logged(node) or next(  # a value the branch reads back for the log (`avg = loss.item()`)
            (call for call in walk(guard.body) if type(call) is cst.Call and may_sync(call)  # type: ignore[union-attr]
             and facts.syncs.sync(call) is not None), None)
        if value is None or not facts.device_code or facts.per_step(node) != STEP:  # (asked last: the project)
            return  # (per item of a loop in the step: its own finding)
        self._logged.add(id(guard))
        test = guard.test  # type: ignore[union-attr]
        remainder = test.left if type(test) is cst.Comparison else test
        self.report(test, (
            f"`if {show(test)}:` holds on every step but one in N, so the log under it reads `{show(value)}` back "
            f"from the GPU, and makes the host wait, on almost every step; a log every N steps is "
            f"`if {show(remainder)} == 0:`"))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self._check(node, self.facts.syncs.implicit(node))

    def visit_If(self, node: cst.If) -> None:
        if not self._answer_thrown_away(node):
            self._check(node, self.facts.syncs.implicit(node), node.test)

    def _answer_thrown_away(self, node: cst.If) -> bool:
        """`if (torch.isnan(x).any() or ...) and DEBUG:` after `DEBUG = False` (NeRF's render
        step): the test can never hold, yet its tensor part is read on the host first, on every
        step; testing the switch first skips the wait. Reported whatever the loop around it, and
        wherever memlint cannot tell the tensor's device, in code that puts tensors on one: the
        switch first is never worse."""
        facts = self.facts
        parts = conjuncts(node.test)
        if len(parts) < 2:
            return False
        switch = next((at for at, part in enumerate(parts) if type(part) is cst.Name and  # (a named switch, not `and False`)
                       part.value not in ("False", "None") and facts.guards.surely_false(part, node)), 0)
        waits = next((part for part in parts[:switch] if facts.syncs.condition_reads_tensor(part, node)), None)
        if waits is None or not facts.device_code or self._moved_after(waits, node) or self._in_a_handler(node) or \
                facts.per_step(node) is None:
            return False
        switch_shown = show(parts[switch])
        self.report(node.test, (
            f"this test needs `{switch_shown}`, which is false here, yet `{show(waits)}` is read back from the GPU "
            f"before it, and the host waits for that on every step for an answer nothing uses; test `{switch_shown}` "
            f"first (`if {switch_shown} and ...:`)"))
        return True

    def visit_UnaryOperation(self, node: cst.UnaryOperation) -> None:
        if type(node.operator) is cst.Not:
            self._check(node, self.facts.syncs.implicit(node))

    def _moved_after(self, test: cst.BaseExpression, node: cst.CSTNode) -> bool:
        """A name `test` reads is moved to the device after it, in the same function (a batch
        checked before `x = batch.to(device)` or `model(inputs.to(device))`): on the host where
        it is tested."""
        facts = self.facts
        names = {n.value for n in walk(test) if type(n) is cst.Name}
        after = facts.tree.order(node)
        return any(facts.tree.order(call) > after and type(call.func) is cst.Attribute and  # type: ignore[attr-defined]
                   dotted_name(call.func.value) in names and facts.purity.mover(call) is not None  # type: ignore[attr-defined]
                   for call in facts.scopes.calls_of(facts.tree.scope_of(node)))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        """`self.r` in a method, where the class's property `r` returns a sync."""
        facts = self.facts
        if not any(type(s) is cst.FunctionDef and s.decorators for s in node.body.body):
            return  # (the cheap test first: no decorated method, no property)
        properties = facts.syncs.syncing_properties(node)
        if not properties:
            return
        for attribute in walk(node.body):
            if type(attribute) is cst.Attribute and attribute.attr.value in properties and \
                    type(attribute.value) is cst.Name and attribute.value.value == "self":  # type: ignore[attr-defined]
                call = properties[attribute.attr.value]  # type: ignore[attr-defined]
                self._read_each_iteration(attribute, facts.syncs.sync(call), call)  # type: ignore[arg-type]

    def _check(self, node: cst.CSTNode, kind: Optional[str], shown: Optional[cst.CSTNode] = None) -> None:
        facts = self.facts
        if kind is None:
            return
        if kind in _READS_A_VALUE and self._read_each_iteration(node, kind, node):  # type: ignore[arg-type]
            return
        if kind == "iterate":  # `min(t)`: the builtin is the loop, once per element wherever it runs
            if node.func.value == "sum":  # type: ignore[attr-defined]
                return  # (adds 0-dim tensors on the device: launches, no wait)
            iterable = node.args[0].value  # type: ignore[attr-defined]
        else:
            iterable = facts.syncs.repeats_over(node)
            if iterable is None:
                self._in_a_layer(node, kind, shown)
                return
            if not (facts.syncs.many(iterable, node) or facts.steps.accumulates(node)):
                return
            loop = facts.tree.loops_around(node)
            # the iteration waits for the device anyway (a sync call counts beside a sync no call asks
            # for; beside a sync call, only those and copies in, which reading values once cannot remove)
            if loop and not facts.syncs.over_parameters(iterable) and \
                    facts.syncs.loop_syncs(loop[0], shown or node, calls=kind in _IMPLICIT,  # (`if`: its test)
                                           masks=kind != "mask"):
                return
        if self._in_a_handler(node):
            return
        if not facts.device_code or id(iterable) in self._repeated or \
                facts.per_step(node, inner=kind != "iterate") is None:
            return  # (how often is asked last: the answer may come from the project)
        self._repeated.add(id(iterable))
        if kind == "iterate":
            self.report(node, (
                f"`{show(node)}` reads `{show(iterable)}`, a GPU tensor, on the host element by element: one wait "
                f"for the GPU per element, on every step; `{show(iterable)}.{show(node.func)}()` reduces it on the "  # type: ignore[attr-defined]
                f"device in one kernel"))
            return
        if facts.steps.accumulates(node):
            self.report(node, (
                f"`{show(shown or node)}` {_WHAT[kind]} and makes the host wait for the GPU once per micro-batch of "
                f"gradient accumulation (`{show(iterable)}`), before the next backward can be queued; add up "
                f"`.detach()`ed values on the device and read the sum once per optimizer step"))
            return
        self.report(node, (
            f"`{show(shown or node)}` {_WHAT[kind]} and makes the host wait for the GPU once per item of "
            f"`{show(iterable)}`, many times per step; compute on the device and read the result once "
            f"(e.g. `(a == b).sum().item()`, `torch.stack(values).tolist()`), or every N steps"))


    def _read_each_iteration(self, node: cst.CSTNode, kind: str, call: cst.Call) -> bool:
        """A wait, in a loop of time steps inside a function that runs on every step (a Tacotron
        decoder's frames in its `forward`), on a value every iteration reads the same
        (memlint.analysis.settled): made once before the loop, it gives the same number. `call`
        is the sync (`node` itself, or what the property `node` reads returns)."""
        facts = self.facts
        loops = facts.tree.loops_around(node)
        if not loops or id(loops[0]) in self._repeated:
            return False
        loop = loops[0]
        if type(loop) is cst.For and not facts.syncs.many(loop.iter, node):  # type: ignore[attr-defined]
            return False
        value = call.func.value if type(call.func) is cst.Attribute else call.args[0].value  # type: ignore[attr-defined]
        function = facts.tree.function_of(loop)
        if not facts.settled.in_loop(value, loop) or _conditional_in(node, loop, facts.tree) or \
                not facts.steps.does_step_work(loop) or self._in_a_handler(node) or \
                facts.steps.function_how_often(function) not in (STEP, INNER) or not facts.device_code or \
                facts.per_step(node) is None:  # (the project's questions last)
            return False  # (under an `if` in the loop it may run once, `if t == 0:`, or by a switch)
        self._repeated.add(id(loop))
        klass = facts.tree.class_of(function)  # type: ignore[arg-type]
        runs = f"{klass.name.value}.{function.name.value}" if klass is not None else function.name.value  # type: ignore[union-attr]
        through = f" (a property that returns `{show(call)}`)" if call is not node else ""
        self.report(node, (
            f"`{show(node)}`{through} {_WHAT[kind]} and makes the host wait for the GPU on every iteration of this "
            f"loop, which `{runs}` runs on every step, though `{show(value)}` is the same on each; read it once "
            f"before the loop and use the number"))
        return True

    def _in_a_layer(self, node: cst.CSTNode, kind: str, shown: Optional[cst.CSTNode]) -> None:
        """A wait in the `forward` of a class the model builds once per layer (a KV cache's
        `input_pos.max().item()`): paid once per layer, on every step or generated token."""
        facts = self.facts
        layer = facts.steps.layer_forward(node)
        if layer is None or not facts.device_code or id(layer) in self._repeated or \
                self._in_a_handler(node) or \
                self._under_a_choice(node) or facts.per_step(node, inner=True) is None:
            return
        self._repeated.add(id(layer))  # one finding per forward: one value kept on the host removes them all
        klass = facts.tree.class_of(layer)
        name = klass.name.value  # type: ignore[union-attr]
        loop = facts.steps.layers.time_step_loop(klass)  # type: ignore[arg-type]
        if loop is None:
            runs, outside = f"once per layer (this module builds one `{name}` per layer)", "the layers"
        else:
            caller = facts.tree.class_of(facts.tree.function_of(loop)).name.value  # type: ignore[union-attr, arg-type]
            which = f"the loop over `{show(loop.iter)}`" if type(loop) is cst.For else "the `while` loop"  # type: ignore[attr-defined]
            runs, outside = f"once per iteration of {which} in `{caller}.forward`", "that loop"
        self.report(node, (
            f"`{show(shown or node)}` {_WHAT[kind]} and makes the host wait for the GPU in `{name}.forward`, "
            f"which runs {runs}, on every step; read the value once per step outside {outside} and pass it "
            f"down, or keep the work on the device"))


    def _in_a_handler(self, node: cst.CSTNode) -> bool:
        """`node` runs while an exception is handled: not on the step's normal path."""
        return any(type(a) is cst.ExceptHandler for a in self.facts.tree.ancestors(node))

    def _under_a_choice(self, node: cst.CSTNode) -> bool:
        """A wait a layer makes only where its caller chose so: under a test of a dtype (`if
        x.dtype == torch.float16 and torch.isinf(x).any():`, T5's clamp in half precision) or of
        a debugging setting (`if self.debug:`)."""
        tests = [part for part, _ in self.facts.guards.holding(node)]
        if type(node) is cst.If:
            tests += conjuncts(node.test)  # type: ignore[attr-defined]
        return any(type(test) is cst.Comparison and len(test.comparisons) == 1 and  # type: ignore[attr-defined]
                   type(test.comparisons[0].operator) in (cst.Equal, cst.Is, cst.In) and any(  # type: ignore[attr-defined]
            type(side) is cst.Attribute and side.attr.value == "dtype"  # type: ignore[attr-defined]
            for side in (test.left, test.comparisons[0].comparator))  # type: ignore[attr-defined]
            or speaks_of_logging(dotted_name(test) or "") for test in tests)


def _conditional_in(node: cst.CSTNode, loop: cst.CSTNode, tree: TreeIndex) -> bool:
    """`node` may be skipped on some iterations of `loop`: it runs under a condition inside it
    (an `if`, a `match`, a conditional expression, `and`/`or`, a `try`), or after a `continue`,
    `break`, `return` or `raise` of the loop's body (`if t > 0: continue`)."""
    for ancestor in tree.ancestors(node):
        if ancestor is loop:
            break
        if type(ancestor) in _CONDITIONAL or type(ancestor) is cst.Match:
            return True
    at = tree.order(node)
    return any(type(exit) in _EXITS and tree.order(exit) < at for exit in walk(loop.body))  # type: ignore[attr-defined]


def _only_logs(branch: cst.If) -> bool:
    """The branch logs and does nothing that steers the step: no `continue`, `break`, `return`
    or `raise` (`if step % accum != 0: ...; continue` is gradient accumulation), and no
    backward, optimizer step or gradient reset."""
    for node in walk(branch.body):
        kind = type(node)
        if kind in (cst.Continue, cst.Break, cst.Return, cst.Raise):
            return False
        if kind is cst.Call and type(node.func) is cst.Attribute and \
                node.func.attr.value in ("backward", "step", "zero_grad"):  # type: ignore[attr-defined]
            return False
    return True
