"""MEM202 retained-outputs."""

from __future__ import annotations

from typing import List, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.dataflow import target_names
from memlint.analysis.frameworks import is_torch_library
from memlint.analysis.loops import few_literal, over_model_parts
from memlint.analysis.often import BOUNDARY, INNER, STEP, intrinsic_often
from memlint.analysis.tree import argument, dotted_name, last_part, root_name, walk_scope
from memlint.findings import Fix, Replace, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import detach_before_move, detached, show

_STORING = frozenset({"append", "extend", "insert", "appendleft"})
# Methods that return a view of a tensor: no new memory
_VIEWS = frozenset({"chunk", "split", "unbind", "view", "squeeze", "unsqueeze", "permute", "transpose", "t",
                    "expand", "narrow"})


def _position(loop: cst.CSTNode) -> Optional[str]:
    """The name a loop binds to its integer position: `for i in range(n)` (also through
    `tqdm(...)`), `for i, x in enumerate(xs)`; None for any other loop (a loader's items may be
    tensors, and indexing with a tensor copies)."""
    if type(loop) is not cst.For:
        return None
    iterable, target = loop.iter, loop.target  # type: ignore[attr-defined]
    while type(iterable) is cst.Call and last_part(dotted_name(iterable.func)) in ("tqdm", "track"):  # type: ignore[attr-defined]
        if not iterable.args:  # type: ignore[attr-defined]
            return None
        iterable = iterable.args[0].value  # type: ignore[attr-defined]
    called = last_part(dotted_name(iterable.func)) if type(iterable) is cst.Call else None  # type: ignore[attr-defined]
    if called in ("range", "trange") and type(target) is cst.Name:
        return target.value  # type: ignore[attr-defined]
    if called == "enumerate" and type(target) in (cst.Tuple, cst.List) and target.elements and \
            type(target.elements[0].value) is cst.Name:  # type: ignore[attr-defined]
        return target.elements[0].value.value  # type: ignore[attr-defined]
    return None


def _basic_index(index: cst.BaseSlice) -> bool:
    """A slice or a literal integer: indexing that returns a view (a tensor or a list as the
    index copies)."""
    if type(index) is cst.Slice:
        return True
    value = index.value  # type: ignore[attr-defined]
    if type(value) is cst.UnaryOperation:
        value = value.expression  # type: ignore[attr-defined]
    return type(value) is cst.Integer


def _spans(index: cst.BaseSlice) -> bool:
    """A slice or `...`: an index that keeps a whole dimension (or several) of the tensor."""
    return type(index) is cst.Slice or type(index.value) is cst.Ellipsis  # type: ignore[attr-defined]


def _root(expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    while type(expr) is cst.Subscript:
        expr = expr.value
    return expr if dotted_name(expr) is not None else None


def _moved_to_cpu(value: cst.BaseExpression) -> bool:
    if not type(value) is cst.Call or not type(value.func) is cst.Attribute:
        return False
    if value.func.attr.value == "cpu":
        return True
    return value.func.attr.value == "to" and any(
        type(a.value) is cst.SimpleString and "cpu" in a.value.value for a in value.args)


def _bounded(value: cst.BaseExpression) -> bool:
    """`deque(maxlen=50)`: a container that drops its oldest items."""
    if type(value) is not cst.Call or last_part(dotted_name(value.func)) != "deque":
        return False
    maxlen = argument(value, "maxlen", 1)
    return maxlen is not None and not (type(maxlen.value) is cst.Name and maxlen.value.value == "None")


# a loss module keeping a memory bank of its inputs (DeepCluster-v2's), beside the indices
_CLUSTER_LOSS = (
    "import torch\nfrom torch import nn\n\n\nclass ClusterLoss(nn.Module):\n    def __init__(self, size, dim):\n"
    "        super().__init__()\n        self.register_buffer(\"bank\", torch.zeros(size, dim))\n"
    "        self.register_buffer(\"bank_index\", torch.zeros(size).long())\n"
    "        self.register_buffer(\"labels\", torch.zeros(size).long())\n        self.start = 0\n\n"
    "    def forward(self, output, idx):\n        output = nn.functional.normalize(output, dim=1)\n"
    "        loss = nn.functional.cross_entropy(output @ self.centroids.t(), self.labels[idx])\n"
    "        self.remember(output, idx)\n        return loss\n\n    def remember(self, emb, idx):\n"
    "        n = len(idx)\n        self.bank_index[self.start:self.start + n] = idx\n"
    "        self.bank[self.start:self.start + n] = emb\n        self.start += n\n"
)


def _deleted(target: cst.BaseExpression) -> List[cst.BaseExpression]:
    """What a `del` statement deletes: `del a[0], b` deletes `a[0]` and `b`."""
    if type(target) in (cst.Tuple, cst.List):
        return [e.value for e in target.elements]  # type: ignore[attr-defined]
    return [target]


# A table QA pipeline's sequential inference: one list filled only under a flag, read after the
# loop under a conditional expression on that flag (`RETURNED`).
_TABLE_QA = (
    "import torch\n\n\nclass TableQA:\n    def sequential_inference(self, input_ids):\n"
    "        with torch.no_grad():\n            all_logits = []\n"
    "            all_aggregations = []\n            for index in range(input_ids.shape[0]):\n"
    "                outputs = self.model(input_ids=input_ids[index].unsqueeze(0).to(self.device))\n"
    "                if self.aggregate:\n"
    "                    all_aggregations.append(outputs.logits_aggregation)\n"
    "                all_logits.append(outputs.logits)\n"
    "            logits = torch.cat(all_logits, 0)\n"
    "            return RETURNED\n"
)


def _flag(test: cst.BaseExpression) -> Tuple[str, bool]:
    """A test's flag and whether the test holds when the flag does: `not self.aggregate` is
    (`self.aggregate`, False)."""
    holds = True
    while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:  # type: ignore[attr-defined]
        test, holds = test.expression, not holds  # type: ignore[attr-defined]
    return show(test), holds


class RetainedOutputs(Rule):
    """
    ## What it does
    Finds model outputs or losses that carry an autograd graph stored into a container that
    outlives the loop: `outputs.append(model(x))`, `self.preds.append(logits)`, also CPU copies
    `preds.append(out.cpu())` (`.cpu()` and `.to()` do not detach), and through a method of
    this module that appends its argument to its instance (`metric.update(pred)`). Also:
    - `self.<list>` appended to by a hook a framework calls on every batch (Lightning's
      `training_step`, `validation_step`, ...; an HF Trainer subclass's `compute_loss`,
      `training_step`, `prediction_step`) or a list of the class body, that nothing in the
      module ever empties: it grows for the whole run, graph or not;
    - a graph kept on the instance or in a list of the module by a function that runs on every
      step without a loop of its own: a trainer's step method called from the loop of another
      method, Ignite's process function (`self.history.append(loss)`);
    - a tensor with its graph written into part of a buffer that outlives the step (a memory
      bank, `bank[idx] = feats`) on every step, or by a loss module (a class named `...Loss`)
      from the outputs it scores: the buffer joins the graph, and each write links the history
      of the one before;
    - a model's output kept on the device on every iteration of a grad-free loop (predictions
      collected on the GPU, every sampling step kept), in a module that uses a device, when after
      the loop it is not used there: moved to the host (`torch.cat(preds).cpu()`), used only on
      some paths (`torch.stack(frames) if keep_all else x`), or never read;
    - the slice at a loop's own index of an output each iteration makes with grad off
      (`all_token_probs.append(token_probs[:, 0, i])`, ESM's masked marginals; also `[..., i]`,
      and the slice's `.detach()`, which shares its storage): a view, which keeps all of its
      output on the device, to use one position of it, whatever is done with the slices after
      the loop.

    ## Why is this bad?
    Each stored tensor keeps its graph, and the graph keeps the activations it saved for a
    backward, on the GPU, until the container is dropped. Where nothing backwards (evaluation),
    memory grows with every batch; on an H200 `.cpu()` copies of graph-attached outputs kept
    233 MB on the GPU that `.detach().cpu()` released. In a training loop `backward()` frees the
    saved tensors, so there the cost is the linked autograd history, not GPU memory.

    ## Example
    ```python
    preds = []
    for x in loader:
        preds.append(model(x).cpu())
    ```

    Use instead:
    ```python
    preds = []
    for x in loader:
        preds.append(model(x).detach().cpu())
    ```

    ## When it is not reported
    Outputs collected to be backwarded later (`losses.append(l)` then `sum(losses).backward()`,
    or handed to the model's own `backward(input, output, grad)`: pipeline parallelism's
    warm-up),
    the `append` of an object of another library's class (MONAI's `CumulativeAverage` keeps a
    running sum),
    collected inside a forward or loss function that returns them, already detached ones,
    `generate()` results, outputs of a model compiled for a runtime off the CUDA GPU (optimum's
    Neuron, OpenVINO or IPEX inference models record no graph), values moved to the CPU in a grad-free loop, lists emptied at epoch end,
    grad-free loops over a model's parts (`for layer in self.layers`, a handful of iterations),
    grad-free loops over a few values the code spells (`for can in [1, 2, 3]`: a search over
    settings keeps a few graphs, not one per batch),
    token ids a decoder returns, kept by a grad-free loop (`all_tokens.extend(predicted_tokens[0])`:
    a few integers an iteration, if on the device at all),
    grad-free loops in a module whose names speak of no device (`device`, `cuda`, `args.gpu`: the
    tensors are on the CPU; a docstring that speaks of a GPU is not code), and
    grad-free loops whose collected tensors are used on the device afterwards (chunks of one
    input concatenated and returned: the result needs them there; appended only under the
    flag under which they are used, `if self.aggregate:`), and loops over a
    collection of tensors made before every loop around them that keep its items or views of
    them (`neg, pos = embeds.chunk(2)`, `item[0]`; a forward's outputs flattened into a list),
    with or without a graph: those were all alive before the loop; nor a window the loop also
    drops items from (`del model_prev_list[0]`, `.pop(0)`: a multistep solver's last few
    outputs). Not
    an item the loop rebinds (`x = model(x)`), nor a batch's output walked row by row inside
    the batch loop. A buffer written under `no_grad` (MoCo's queue), with detached values or
    through `.data`, a model's own cache written in its `forward`, a step's own buffer made on
    every call, a loss module's buffer it cuts from the graph on every step (`self.memory =
    self.memory.detach()`), and one the code backwards through (per-part outputs written into
    one tensor, then a loss of it) are not reported; a loss module's output is the first
    argument of its `forward` (the labels, indices or keys after it carry no graph). A bank
    made before the loop that the loop's own loss reads is reported: the next backward reaches
    into the graph the last one freed.

    ## Fix
    `.detach()` on the stored value, before `.cpu()` / `.to()` when it is moved; `.cpu()` for a
    device tensor kept by a grad-free loop. A list that is never emptied is only reported: empty
    it once it is used (Lightning's `on_validation_epoch_end`). `.detach()` on the value written
    into a buffer. `.clone()` on a slice kept of each iteration's output.

    ## Fix safety
    `.detach()` is safe: the stored values are the same numbers; only their graph is dropped
    (not offered when the method that stores them also backwards). `.cpu()` is unsafe: the kept
    results move to the CPU, where later code may not expect them; it is offered only when the
    list starts empty, this is its only append, and after the loop it is only moved to the host
    (or never read). Tuples and dicts of outputs are reported without a fix. `.detach()` on a
    value written into a buffer is unsafe: code that reads the buffer in the same step gets no
    gradient through it. `.clone()` of a slice is unsafe: what the iteration later writes into
    its output in place no longer shows in the slice kept.
    """

    CODE = "MEM202"
    NAME = "retained-outputs"
    MESSAGE = "an output with its autograd graph is stored in a container that outlives the loop"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.PEAK_LOWER
    # appends, the calls that reach another module's method that appends (`acc.update(pred)`,
    # `container.add(logits)`: memlint.analysis.project), and writes into part of a buffer
    REQUIRES = ("append", "extend", "insert", ".update(", ".add(", "] = ")

    VALID = (
        # the slice copied; the slices of one output made before the loop
        "import torch\nmodel = load().cuda()\nmodel.eval()\nall_token_probs = []\n"
        "for i in range(batch_tokens.size(2)):\n    masked = batch_tokens.clone()\n    masked[0, 0, i] = mask_idx\n"
        "    with torch.no_grad():\n        token_probs = torch.log_softmax(model(masked.cuda())[\"logits\"], dim=-1)\n"
        "    all_token_probs.append(token_probs[:, 0, i].clone())\n"
        "token_probs = torch.cat(all_token_probs, dim=0).unsqueeze(0)\n",
        "import torch\nmodel = load().cuda()\nwith torch.no_grad():\n    probs = model(tokens.cuda())\nrows = []\n"
        "for i in range(tokens.size(1)):\n    rows.append(probs[:, i])\nprint(torch.stack(rows).sum())\n",
        # indexed by a loader's tensor (a copy), a tuple's item (a whole tensor), a few per batch, a window
        "import torch\nmodel = load().cuda()\nmodel.eval()\npicked = []\nfor tokens, pos in loader:\n"
        "    with torch.no_grad():\n        logits = model(tokens.cuda())\n    picked.append(logits[:, pos])\n"
        "result = torch.cat(picked)\n",
        "import torch\nmodel = load().cuda()\nfeats = []\nfor i in range(n_layers):\n    with torch.no_grad():\n"
        "        hidden_states = model(x.cuda(), output_hidden_states=True).hidden_states\n"
        "    feats.append(hidden_states[i])\nprint(torch.stack(feats).mean())\n",
        "import torch\nmodel = load().cuda()\nfor batch in loader:\n    cols = []\n    for i in range(3):\n"
        "        with torch.no_grad():\n            logits = model(batch[i].cuda())\n        cols.append(logits[:, i])\n"
        "    print(torch.stack(cols).sum().item())\n",
        "import torch\nmodel = load().cuda()\nwindow = []\nfor i in range(steps):\n    with torch.no_grad():\n"
        "        logits = model(x.cuda())\n    window.append(logits[:, i])\n    if len(window) > 4:\n        window.pop(0)\n"
        "print(torch.stack(window).sum())\n",
        "import collections\nimport torch\nmodel = load().cuda()\nwindow = collections.deque(maxlen=4)\nfor i in range(steps):\n"
        "    with torch.no_grad():\n        logits = model(x.cuda())\n    window.append(logits[:, i])\n"
        "print(torch.stack(list(window)).sum())\n",
        "import torch\nmodel = load().cuda()\nwindow = []\nfor i in range(steps):\n    with torch.no_grad():\n"
        "        logits = model(x.cuda())\n    window.append(logits[:, i])\n    window = window[-4:]\n"
        "print(torch.stack(window).sum())\n",
        # appended only under the flag under which it is used after the loop
        _TABLE_QA.replace("RETURNED", "(logits,) if not self.aggregate else (logits, torch.cat(all_aggregations, 0))"),
        # a forward's outputs flattened into a list: every item was alive before the loop
        "import torch\n\n\ndef infer_shapes(model, tokens):\n    outputs = model(**tokens)\n    outputs_flat = []\n"
        "    for output in outputs:\n        if isinstance(output, (tuple, list)):\n            outputs_flat.extend(output)\n"
        "        else:\n            outputs_flat.append(output)\n    return [o.shape for o in outputs_flat]\n",
        # a search over a few candidates the code spells: a few graphs kept, not one per batch
        "import torch\ndisc = torch.nn.Linear(8, 1).cuda()\nfeat = torch.randn(40, 8).cuda()\nselected = [0]\n"
        "while len(selected) < 3:\n    distance_list = []\n    for can in (1, 2, 3, 4, 5):\n"
        "        distance_list.append(disc(feat[can:can + 2]).mean())\n"
        "    selected.append(distance_list.index(max(distance_list)))\n",
        # pipeline parallelism's warm-up: each micro-batch's output is kept for the stage's own
        # `backward(input, output, grad)`, which a later loop runs on it
        "import torch\n\n\ndef train_step(model, loader, warmup, device):\n    inputs, outputs = [], []\n"
        "    for _ in range(warmup):\n        x = next(loader).to(device)\n        outputs.append(model(x))\n"
        "        inputs.append(x)\n    for _ in range(warmup):\n        x, out = inputs.pop(0), outputs.pop(0)\n"
        "        model.backward(x, out, None)\n",
        # a multistep solver's window of its last outputs: each step drops the oldest
        "import torch\n\n\n@torch.no_grad()\ndef sample(model, x, timesteps, device, order=3):\n    model_prev_list = []\n"
        "    for t in timesteps:\n        model_x = model(x.to(device), t)\n        model_prev_list.append(model_x)\n"
        "        x = update(x, model_prev_list)\n        if len(model_prev_list) > order:\n"
        "            del model_prev_list[0]\n    return x\n",
        # an accumulator whose class backwards what it keeps (once per micro-batches)
        "import torch\n\n\nclass GradAccumulator:\n"
        "    \"\"\"Collects the losses of several micro-batches and backwards their mean once.\"\"\"\n\n"
        "    def __init__(self):\n        self.losses = []\n\n    def add_batch(self, loss):\n"
        "        self.losses.append(loss)\n\n    def step(self, optimizer):\n"
        "        torch.stack(self.losses).mean().backward()\n        optimizer.step()\n"
        "        optimizer.zero_grad()\n        self.losses = []\n\n\n"
        "def finetune_frozen_bn(model, loader, optimizer):\n"
        "    model.eval()  # keep batch-norm statistics frozen while fine-tuning\n"
        "    acc = GradAccumulator()\n    for x, y in loader:\n        out = model(x)\n"
        "        acc.add_batch(torch.nn.functional.mse_loss(out, y))\n    acc.step(optimizer)\n\n",
        # token ids a decoder returns, kept across a long recording's segments
        "import torch\n\n\nclass Transcriber:\n    @torch.no_grad()\n    def transcribe(self, segments, device):\n"
        "        all_tokens = []\n        for segment in segments:\n"
        "            predicted_tokens, _, scores, _ = self.decoder(segment.to(device))\n"
        "            yield predicted_tokens[0], scores.sum().item()\n"
        "            all_tokens.extend(predicted_tokens[0])\n            reset = len(all_tokens)\n",
        # a bank cut from the last step's graph in place on every step
        "import torch\nimport torch.nn.functional as F\n\n"
        "memory = F.normalize(torch.randn(50000, 128, device=\"cuda\"), dim=1)\n"
        "for idx, x, y in loader:\n    memory.detach_()\n"
        "    feats = F.normalize(model(x.cuda()), dim=1)\n    loss = nce(feats, memory, idx)\n"
        "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
        "    memory[idx] = F.normalize(memory[idx] * 0.5 + feats * 0.5, dim=1)\n",
        # a queue of keys written under no_grad (MoCo's enqueue)
        "import torch\nfrom torch import nn\n\n\nclass QueueLoss(nn.Module):\n    def __init__(self, size, dim):\n"
        "        super().__init__()\n        self.register_buffer(\"queue\", torch.randn(size, dim))\n        self.ptr = 0\n\n"
        "    def forward(self, q, k):\n        logits = torch.cat([(q * k).sum(1, keepdim=True), q @ self.queue.t()], 1)\n"
        "        loss = nn.functional.cross_entropy(logits / 0.07, torch.zeros(len(q), dtype=torch.long))\n"
        "        self.enqueue(k)\n        return loss\n\n    @torch.no_grad()\n    def enqueue(self, keys):\n"
        "        n = keys.shape[0]\n        self.queue[self.ptr:self.ptr + n] = keys\n"
        "        self.ptr = (self.ptr + n) % self.queue.shape[0]\n",
        # a model's cache of keys, written by its forward: the caller chose the grad mode
        "import torch\n\n\nclass Attention(torch.nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n"
        "        self.wk = torch.nn.Linear(dim, dim)\n        self.register_buffer(\"cache_k\", torch.zeros(1, 512, dim))\n\n"
        "    def forward(self, x, start):\n        for _ in range(1):\n"
        "            self.cache_k[:, start:start + x.shape[1]] = self.wk(x)\n"
        "        return self.cache_k[:, :start + x.shape[1]]\n",
        # outputs written into one tensor, then backwarded through it
        "import torch\n\nfor x, y in loader:\n    x, y = x.cuda(), y.cuda()\n"
        "    outs = torch.zeros(4, len(x), 10, device=\"cuda\")\n    for k in range(4):\n        outs[k] = model(x)\n"
        "    loss = criterion(outs.mean(0), y)\n    loss.backward()\n",
        # a loss that detaches what it scores before it keeps it, beside the labels it is handed
        "import torch\nfrom torch import nn\n\n\nclass CrossBatchLoss(nn.Module):\n    def __init__(self, size, dim):\n"
        "        super().__init__()\n        self.register_buffer(\"feats\", torch.zeros(size, dim))\n"
        "        self.register_buffer(\"targets\", torch.zeros(size))\n        self.ptr = 0\n\n"
        "    def forward(self, embeddings, labels):\n        n = embeddings.shape[0]\n"
        "        pos = labels.unsqueeze(1) == self.targets.unsqueeze(0)\n"
        "        loss = -((embeddings @ self.feats.t()) * pos).sum() / n\n        embeddings = embeddings.detach()\n"
        "        self.feats[self.ptr:self.ptr + n] = embeddings\n        self.targets[self.ptr:self.ptr + n] = labels\n"
        "        return loss\n",
        # a bank cut from its graph on every step, through which this step's loss is backwarded
        "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\nclass BankLoss(nn.Module):\n"
        "    def __init__(self, size, dim):\n        super().__init__()\n        self.register_buffer(\"memory\", torch.zeros(size, dim))\n\n"
        "    def forward(self, feats, index):\n        self.memory = self.memory.detach()\n"
        "        self.memory[index] = F.normalize(feats, dim=1)\n        return F.cross_entropy(feats @ self.memory.t(), index)\n",
        # written through `.data`, and the indices of the top scores: neither links a graph
        "import torch\n\nbank = torch.zeros(50000, 128, device=\"cuda\")\ntop = torch.zeros(50000, 5, device=\"cuda\")\n"
        "for idx, x, y in loader:\n    feats = model(x.cuda())\n    loss = criterion(feats, y.cuda())\n    optimizer.zero_grad()\n"
        "    loss.backward()\n    optimizer.step()\n    bank.data[idx] = feats\n    top[idx] = feats.topk(5, dim=1)[1]\n",
        # a step's own buffer, made on every call of the step function
        "import torch\nimport torch.nn.functional as F\n\n\ndef train_step(model, optimizer, x, y):\n"
        "    logits = torch.zeros(x.shape[0], 10, device=\"cuda\")\n    optimizer.zero_grad()\n"
        "    for xs, ys, rows in zip(x.chunk(4), y.chunk(4), torch.arange(x.shape[0]).chunk(4)):\n"
        "        out = model(xs)\n        (F.cross_entropy(out, ys) / 4).backward()\n        logits[rows] = out\n"
        "    optimizer.step()\n    return (logits.argmax(1) == y).float().mean().item()\n\n\n"
        "def fit(model, optimizer, loader):\n    for x, y in loader:\n        train_step(model, optimizer, x.cuda(), y.cuda())\n",
        # MONAI's CumulativeAverage keeps a running sum of what it is given, not a list
        "import torch\nfrom monai.metrics import CumulativeAverage\n\n\n@torch.no_grad()\ndef validate(model, loader):\n"
        "    run_loss = CumulativeAverage()\n    for x, y in loader:\n        loss = criterion(model(x.cuda()), y.cuda())\n"
        "        run_loss.append(loss)\n    return run_loss.aggregate().cpu()\n",
        # the bank keeps detached embeddings
        "import torch\n\nbank = torch.zeros(50000, 128, device=\"cuda\")\nfor idx, x, y in loader:\n"
        "    feats = model(x.cuda())\n    loss = criterion(feats, y.cuda())\n    optimizer.zero_grad()\n"
        "    loss.backward()\n    optimizer.step()\n    bank[idx] = feats.detach()\n",
        # the halves of embeddings computed before a grad-free loop (views of tensors already alive)
        "import torch\n\n\nclass Pipeline:\n    def encode_image(self, image):\n"
        "        image = self.feature_extractor(image, return_tensors=\"pt\").pixel_values\n"
        "        image_embeds = self.image_encoder(image).image_embeds\n"
        "        return image_embeds, torch.zeros_like(image_embeds)\n\n"
        "    def prepare_ip_adapter_image_embeds(self, images):\n        image_embeds = []\n"
        "        for image in images:\n"
        "            single_image_embeds, single_negative_image_embeds = self.encode_image(image)\n"
        "            image_embeds.append(torch.cat([single_negative_image_embeds, single_image_embeds]))\n"
        "        return image_embeds\n\n    @torch.no_grad()\n"
        "    def __call__(self, images, latents, device):\n"
        "        ip_adapter_image_embeds = self.prepare_ip_adapter_image_embeds(images)\n"
        "        negative_image_embeds = []\n        for tmp_image_embeds in ip_adapter_image_embeds:\n"
        "            single_negative_image_embeds, single_image_embeds = tmp_image_embeds.chunk(2)\n"
        "            negative_image_embeds.append(single_negative_image_embeds)\n"
        "        added = {\"image_embeds\": negative_image_embeds} if images is not None else None\n"
        "        return self.unet(latents.to(device), added)\n",
        # a model compiled for AWS Neuron (optimum): its runs record no graph, and return host tensors
        "import torch\ntry:\n    from optimum.neuron import NeuronModelForCausalLM\nexcept ImportError:\n"
        "    NeuronModelForCausalLM = object\n\nclass CustomNeuronModel(NeuronModelForCausalLM):\n    pass\n\n"
        "class NeuronLM:\n    def __init__(self, path):\n        self.model = CustomNeuronModel.from_pretrained(path)\n\n"
        "    def loglikelihood(self, batches):\n        res = []\n        for ids in batches:\n"
        "            outputs = [self.model.forward(input_ids=ids[:, :1]).logits]\n"
        "            for i in range(1, ids.size(1)):\n"
        "                outputs.append(self.model.forward(input_ids=ids[:, : i + 1]).logits)\n"
        "            res.append(float(torch.concat(outputs, dim=1).log_softmax(-1).sum()))\n        return res\n",
        # a model's loop over its own layers: the caller chose the grad mode, and trains through it
        "import torch\nclass Decoder(torch.nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
        "        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(n)])\n\n"
        "    def extract_features(self, x):\n        inner_states = [x]\n        for layer in self.layers:\n"
        "            x = layer(x)\n            inner_states.append(x)\n        return x\n",
        # collected and returned to a caller of this module that backwards it
        "import torch\n\ndef forward_test(model, segments):\n    outs = []\n    for s in segments:\n"
        "        outs.append(model(s))\n    return torch.cat(outs)\n\n"
        "forward_test(model, segments).sum().backward()\n",
        # grad-free, and nothing in the file puts tensors on a device
        "import torch\npreds = []\nwith torch.no_grad():\n    for x in loader:\n        preds.append(model(x))\n",
        # grad-free, and the file speaks of a GPU only in its docstring: nothing is put on one
        "\"\"\"Scores every batch (on a GPU when the model is on one).\"\"\"\nimport torch\n\n@torch.no_grad()\n"
        "def predict(model, loader):\n    scores = []\n    for x in loader:\n        scores.append(model(x).softmax(-1))\n"
        "    return torch.cat(scores).cpu().numpy()\n",
        # grad-free on the GPU, kept on the CPU
        "import torch\nmodel.cuda()\npreds = []\nwith torch.no_grad():\n    for x in loader:\n"
        "        preds.append(model(x.cuda()).cpu())\n",
        # chunks of one input on the GPU, concatenated and used there
        "import torch\n@torch.no_grad()\ndef features(model, wav, chunk):\n    wav = wav.cuda()\n    parts = []\n"
        "    for start in range(0, wav.size(1), chunk):\n        parts.append(model.extract_features(wav[:, start:start + chunk]))\n"
        "    return torch.cat(parts, 1)\n",
        "import torch\npreds = []\nfor x in loader:\n    preds.append(model(x).detach().cpu())\n",
        "import torch\nlosses = []\nfor x, y in loader:\n    loss = criterion(model(x), y)\n"
        "    loss.backward()\n    losses.append(loss.item())\n",
        # collected, then backwarded
        "import torch\nlosses = []\nfor chunk in chunks:\n    losses.append(criterion(model(chunk.x), chunk.y))\n"
        "torch.stack(losses).mean().backward()\n",
        "import torch\nfor batch in loader:\n    outs = []\n    for chunk in batch.split(4):\n"
        "        outs.append(model(chunk))\n    loss = criterion(torch.cat(outs), batch.y)\n    loss.backward()\n",
        # inside a forward: the caller backwards the result
        "import torch\nimport torch.nn as nn\nclass Net(nn.Module):\n    def forward(self, x):\n"
        "        hidden = []\n        for layer in self.layers:\n            x = self.net(x)\n"
        "            hidden.append(x)\n        return torch.stack(hidden)\n",
        # a helper decorated @torch.no_grad()
        "import torch\n@torch.no_grad()\ndef predict(model, loader):\n    out = []\n    for x in loader:\n"
        "        out.append(model(x))\n    return out\n",
        # HF generate() runs without grad
        "import torch\ntexts = []\nfor batch in loader:\n    texts.append(model.generate(**batch))\n",
        # a random tensor appended to a list (it must stay fresh)
        "import torch\nnoises = []\nfor _ in range(10):\n    noises.append(torch.randn(4, 4))\n",
        # labels and predictions without a graph
        "import torch\npreds = []\nfor x in loader:\n    preds.append(model(x).argmax(-1))\n",
        # a training hook keeping detached values, emptied every epoch
        "import torch\nimport lightning as L\nclass Lit(L.LightningModule):\n    def __init__(self):\n"
        "        super().__init__()\n        self.outs = []\n\n    def training_step(self, batch, i):\n"
        "        logits, aux = self.model(batch)\n        loss = logits.mean() + aux.mean()\n"
        "        self.outs.append({\"loss\": loss.detach(), \"aux\": aux.detach()})\n        return loss\n\n"
        "    def on_train_epoch_end(self):\n        self.outs.clear()\n",
        # an HF Trainer keeping detached losses, emptied where they are logged
        "import torch\nfrom transformers import Trainer\n\nclass LossTrackingTrainer(Trainer):\n"
        "    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n        self.losses = []\n\n"
        "    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):\n"
        "        outputs = model(**inputs)\n        self.losses.append(outputs.loss.detach())\n"
        "        return (outputs.loss, outputs) if return_outputs else outputs.loss\n\n"
        "    def log(self, logs, *args, **kwargs):\n        if self.losses:\n"
        "            logs[\"loss_mean\"] = torch.stack(self.losses).mean().item()\n            self.losses.clear()\n"
        "        super().log(logs, *args, **kwargs)\n",
        # the backwarded loss detached before it is kept
        "import torch\nfrom mylib.losses import compute_loss\n\nhistory = []\nfor batch in loader:\n"
        "    loss = compute_loss(model, batch)\n    loss.backward()\n    optimizer.step()\n"
        "    optimizer.zero_grad()\n    loss = loss.detach()\n    history.append(loss)\n",
        # a step method keeping losses that another method backwards (accumulated by hand)
        "import torch\n\nclass Runner:\n    def __init__(self):\n        self.pending = []\n\n"
        "    def _micro(self, x, y):\n        self.pending.append(criterion(self.model(x), y))\n\n"
        "    def _apply(self):\n        torch.stack(self.pending).mean().backward()\n        self.opt.step()\n"
        "        self.pending = []\n\n    def fit(self, loader):\n        for i, (x, y) in enumerate(loader):\n"
        "            self._micro(x, y)\n            if i % 4 == 3:\n                self._apply()\n",
        # a step function collecting into a list of its own, which it hands back
        "import torch\nfrom ignite.engine import Engine\n\n\ndef update(engine, batch):\n    parts = []\n"
        "    for x in batch:\n        parts.append(model(x.cuda()))\n    loss = torch.stack(parts).mean()\n"
        "    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n    return loss.item()\n\n\n"
        "trainer = Engine(update)\n",
        # a method that runs once, not per step
        "import torch\n\nclass Runner:\n    def __init__(self):\n        self.history = []\n\n"
        "    def warmup(self, x, y):\n        loss = criterion(self.model(x), y)\n        loss.backward()\n"
        "        self.history.append(loss)\n\n    def fit(self, loader, x0, y0):\n        self.warmup(x0, y0)\n"
        "        for x, y in loader:\n            criterion(self.model(x), y).backward()\n            self.opt.step()\n"
        "            self.opt.zero_grad()\n",
        # a step method that starts its list afresh on every call
        "import torch\n\nclass Runner:\n    def _step(self, x, y):\n        self.parts = []\n"
        "        out = self.model(x)\n        self.parts.append(out)\n        loss = criterion(out, y)\n"
        "        loss.backward()\n        self.opt.step()\n        self.opt.zero_grad()\n\n"
        "    def fit(self, loader):\n        for x, y in loader:\n            self._step(x, y)\n",
        # a bounded window of recent losses
        "import torch\nfrom collections import deque\n\nclass Runner:\n    def __init__(self):\n"
        "        self.recent = deque(maxlen=50)\n\n    def _step(self, x, y):\n"
        "        loss = criterion(self.model(x), y)\n        loss.backward()\n        self.opt.step()\n"
        "        self.opt.zero_grad()\n        self.recent.append(loss)\n\n    def fit(self, loader):\n"
        "        for x, y in loader:\n            self._step(x, y)\n",
        # an HF Trainer's list that a callback of the module empties at every log (the backward
        # of each step has freed what the kept graphs saved)
        "import torch\nfrom transformers import Trainer, TrainerCallback\n\nclass LossTrackingTrainer(Trainer):\n"
        "    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):\n"
        "        outputs = model(**inputs)\n        self.step_losses.append(outputs.loss)\n"
        "        return (outputs.loss, outputs) if return_outputs else outputs.loss\n\n"
        "class Flush(TrainerCallback):\n    def on_log(self, args, state, control, logs=None, **kwargs):\n"
        "        self.trainer.step_losses.clear()\n",
        # a compute_loss of a class that is no HF Trainer: its caller's loop is not known
        "import torch\n\nclass Scorer:\n    def __init__(self):\n        self.losses = []\n\n"
        "    def compute_loss(self, model, inputs):\n        loss = model(**inputs).loss\n"
        "        self.losses.append(loss.detach())\n        return loss\n",
        # Lightning runs validation_step without grad, and the list is emptied every epoch
        "import torch\nimport lightning as L\nclass Lit(L.LightningModule):\n    def validation_step(self, batch, i):\n"
        "        for x in batch:\n            self.val_outputs.append(self.model(x))\n"
        "    def on_validation_epoch_end(self):\n        self.log('v', torch.cat(self.val_outputs).mean())\n"
        "        self.val_outputs.clear()\n",
        # a metric helper that detaches what it keeps
        "import torch\nclass Meter:\n    def __init__(self):\n        self.values = []\n    def add(self, v):\n"
        "        self.values.append(v.detach())\nmeter = Meter()\nfor x in loader:\n    meter.add(model(x))\n",
        # a class-body list that the instance hides with its own
        "import torch\nimport torch.nn as nn\nclass Tap(nn.Module):\n    taps = []\n    def __init__(self):\n"
        "        super().__init__()\n        self.taps = []\n        self.encoder = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n        h = self.encoder(x)\n        self.taps.append(h)\n        return h\n"
        "    def reset(self):\n        self.taps = []\n",
        # stored where other code may backward it
        "import torch\ndef embeds(pipe, prompts, inputs):\n    out = []\n    for p in prompts:\n"
        "        out.append(text_encoder(p)[0])\n    inputs['pos'], inputs['neg'] = out\n",
        # the previous iteration's value is moved to the host before it is appended
        "import torch\ndevice = 'cuda'\n\n@torch.no_grad()\ndef sample(model, x, steps, keep_all=False):\n"
        "    frames = [x.cpu()]\n    for t in range(steps):\n        x = model(x, t)\n        frames.append(x.cpu())\n"
        "        x = x.clamp(-1, 1)\n    return torch.stack(frames) if keep_all else x\n",
        # ... and one bound in the loop's `else:`, which runs once after the loop, is not carried
        "import torch\ndevice = 'cuda'\n\n@torch.no_grad()\ndef sample(model, x, steps, keep_all=False):\n"
        "    frames = [x]\n    for t in range(steps):\n        frames.append(x)\n    else:\n        x = model(x, t)\n"
        "    return torch.stack(frames) if keep_all else x\n",
        # the list is made anew every iteration
        "import torch\nfor x in loader:\n    parts = []\n    parts.append(model(x))\n    print(len(parts))\n",
        # a grad-free loop over a model's parts (one per IP adapter): a handful of tensors, not a growth
        "import torch\ndevice = \"cuda\"\n\n@torch.no_grad()\ndef embed(self, images):\n    embeds = []\n"
        "    for image, layer in zip(images, self.image_projection_layers):\n"
        "        embeds.append(self.encoder(image.to(device)))\n    return None\n",
        # ... and one per text encoder (SDXL's two), kept whether or not it is read after
        "import torch\n\n@torch.no_grad()\ndef encode(self, prompt, negative):\n    embs, negs = [], []\n"
        "    for tokenizer, text_encoder in zip(self.tokenizers, self.text_encoders):\n"
        "        embs.append(text_encoder(tokenizer(prompt).cuda())[0])\n"
        "        negs.append(text_encoder(tokenizer(negative).cuda())[0])\n    return torch.cat(embs, -1)\n",
        # a grad-free loop over a few channels the code spells: three tensors, no growth
        "import torch\n\n\ndef prepare_for_ssim_rgb(img, k):\n    with torch.no_grad():\n"
        "        img = torch.from_numpy(img).float().cuda()\n"
        "        conv = torch.nn.Conv2d(1, 1, k, padding=k // 2).cuda()\n        channels = []\n"
        "        for i in range(3):\n"
        "            channels.append(conv(img[:, :, i][None, None])[0, 0, ::k, ::k])\n"
        "    return torch.stack(channels, dim=2).cpu().numpy()\n",
    )
    INVALID = (
        # the same loop in a function that runs without grad, its slices stacked on the device
        Invalid("import torch\n\n\n@torch.no_grad()\ndef marginals(model, tokens):\n    rows = []\n"
                "    for i in range(tokens.size(1)):\n        probs = model(tokens.cuda()).log_softmax(-1)\n"
                "        rows.append(probs[:, i])\n    return torch.stack(rows, 1)\n"),
        # ... the position taken after `...`, or the slice detached: still a view of the whole output
        Invalid("import torch\n\n\n@torch.no_grad()\ndef marginals(model, tokens):\n    rows = []\n"
                "    for i in range(tokens.size(1)):\n        probs = model(tokens.cuda()).log_softmax(-1)\n"
                "        rows.append(probs[..., i, :])\n    return torch.stack(rows, 1)\n"),
        Invalid("import torch\n\n\n@torch.no_grad()\ndef marginals(model, tokens):\n    rows = []\n"
                "    for i in range(tokens.size(1)):\n        probs = model(tokens.cuda()).log_softmax(-1)\n"
                "        rows.append(probs[:, i].detach())\n    return torch.stack(rows, 1)\n"),
        # ESM's masked marginals: one position kept of each iteration's output, as a view that keeps all of it
        Invalid("import torch\nmodel = load().cuda()\nmodel.eval()\nall_token_probs = []\n"
                "for i in range(batch_tokens.size(2)):\n    masked = batch_tokens.clone()\n    masked[0, 0, i] = mask_idx\n"
                "    with torch.no_grad():\n        token_probs = torch.log_softmax(model(masked.cuda())[\"logits\"], dim=-1)\n"
                "    all_token_probs.append(token_probs[:, 0, i])\n"
                "token_probs = torch.cat(all_token_probs, dim=0).unsqueeze(0)\n",
                "import torch\nmodel = load().cuda()\nmodel.eval()\nall_token_probs = []\n"
                "for i in range(batch_tokens.size(2)):\n    masked = batch_tokens.clone()\n    masked[0, 0, i] = mask_idx\n"
                "    with torch.no_grad():\n        token_probs = torch.log_softmax(model(masked.cuda())[\"logits\"], dim=-1)\n"
                "    all_token_probs.append(token_probs[:, 0, i].clone())\n"
                "token_probs = torch.cat(all_token_probs, dim=0).unsqueeze(0)\n"),
        # a few crops per batch, over every batch of the loader: the list grows with the outer loop
        Invalid(
            "import torch\n\n\n@torch.no_grad()\ndef extract_features(model, loader):\n    model.eval()\n"
            "    feats = []\n    for images, _ in loader:\n        images = images.cuda()\n"
            "        for crop in range(3):\n            feats.append(model(images[:, crop]))\n"
            "    return torch.cat(feats).cpu()\n"
        ),
        # appended where the flag holds, read only where it does not: it grows and is never used
        Invalid(_TABLE_QA.replace("RETURNED", "(logits, torch.cat(all_aggregations, 0)) if not self.aggregate else (logits,)")),
        # a step function keeps the items of its forward's outputs in a module's list: it outlives the call
        Invalid(
            "import torch\n\nmodel = torch.nn.LSTM(8, 8).cuda()\nkept = []\n\n\ndef step(x):\n"
            "    outputs = model(x.cuda())\n    for o in outputs:\n        kept.append(o)\n"
            "    return outputs[0].sum()\n\n\nfor x in loader:\n    loss = step(x)\n"
            "    loss.backward()\nprint(len(kept))\n"
        ),
        # a few values spelled, in a helper run once per batch, kept in a list the caller hands in
        Invalid(
            "import torch\n\n\ndef tta_predict(model, x, preds):\n    for flip in (False, True):\n"
            "        preds.append(model(torch.flip(x, [3]) if flip else x))\n\n\n"
            "def evaluate(model, loader):\n    model.eval()\n    preds = []\n"
            "    for x, _ in loader:\n        tta_predict(model, x.cuda(), preds)\n"
            "    return torch.cat(preds)\n"
        ),
        # ... or in a module's list
        Invalid(
            "import torch\n\nhistory = []\n\n\ndef predict(model, x):\n"
            "    for scale in [0.5, 1.0, 2.0]:\n"
            "        history.append(model(torch.nn.functional.interpolate(x, scale_factor=scale)))\n"
            "\n\ndef main(model, loader):\n    for x, _ in loader:\n"
            "        predict(model, x.cuda())\n"
        ),
        # one class of the module decorates `encode` to run without grad, the model's class may be the other
        Invalid(
            "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"
            "class Teacher(nn.Module):\n    def __init__(self, backbone):\n        super().__init__()\n"
            "        self.backbone = backbone.eval()\n\n    @torch.no_grad()\n    def encode(self, x):\n"
            "        return F.normalize(self.backbone(x), dim=-1)\n\n\nclass Student(nn.Module):\n"
            "    def __init__(self, backbone, dim):\n        super().__init__()\n"
            "        self.backbone = backbone\n        self.proj = nn.Linear(dim, dim)\n\n"
            "    def encode(self, x):\n        return F.normalize(self.proj(self.backbone(x)), dim=-1)\n\n\n"
            "def embed_dataset(model, loader):\n    model.eval()\n    embs = []\n    for x in loader:\n"
            "        embs.append(model.encode(x.cuda()))\n    return torch.cat(embs)\n"
        ),
        # an object of a class of the project, seen or not, may keep what it is given as a list does
        Invalid(
            "import torch\nfrom collections import deque\nfrom utils.meters import RingBuffer\n\n\n"
            "def train(model, loader, optimizer, criterion):\n    recent = RingBuffer(100)\n"
            "    for x, y in loader:\n        loss = criterion(model(x.cuda()), y.cuda())\n"
            "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"
            "        recent.append(loss)\n    return recent\n"
        ),
        # a loss module's memory bank (DeepCluster-v2): its input written undetached, every step;
        # the indices it stores beside them carry no graph
        Invalid(_CLUSTER_LOSS, _CLUSTER_LOSS.replace("= emb\n", "= emb.detach()\n")),
        # a memory bank the loss reads, written undetached on every step (NPID): the next backward
        # reaches into the last step's freed graph
        Invalid(
            "import torch\nimport torch.nn.functional as F\n\nmemory = F.normalize(torch.randn(50000, 128, device=\"cuda\"), dim=1)\n"
            "for idx, x, y in loader:\n    feats = F.normalize(model(x.cuda()), dim=1)\n    loss = nce(feats, memory, idx)\n"
            "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
            "    memory[idx] = F.normalize(memory[idx] * 0.5 + feats * 0.5, dim=1)\n"
        ),
        # a training loop's memory bank, written with the batch's features
        Invalid(
            "import torch\n\nbank = torch.zeros(50000, 128, device=\"cuda\")\nfor idx, x, y in loader:\n"
            "    feats = model(x.cuda())\n    loss = criterion(feats, y.cuda())\n    optimizer.zero_grad()\n"
            "    loss.backward()\n    optimizer.step()\n    bank[idx] = feats\n",
            "import torch\n\nbank = torch.zeros(50000, 128, device=\"cuda\")\nfor idx, x, y in loader:\n"
            "    feats = model(x.cuda())\n    loss = criterion(feats, y.cuda())\n    optimizer.zero_grad()\n"
            "    loss.backward()\n    optimizer.step()\n    bank[idx] = feats.detach()\n",
        ),
        # the item rebound to a model's output: a new tensor each iteration
        Invalid(
            "import torch\n\n\n@torch.no_grad()\ndef denoise(model, frames):\n    cleaned = []\n"
            "    for frame in frames:\n        frame = model(frame.cuda())\n        cleaned.append(frame)\n"
            "    return torch.stack(cleaned).cpu()\n"
        ),
        # views of a batch's output, walked in a loop inside the batch loop: one output kept per batch
        Invalid(
            "import torch\n\n\n@torch.no_grad()\ndef run(model, loader):\n    keep = []\n    for x in loader:\n"
            "        hidden = model(x.cuda())\n        halves = hidden.chunk(2)\n        for h in halves:\n"
            "            keep.append(h)\n    return torch.stack(keep).cpu()\n"
        ),
        # ... each run through the image encoder in the loop: new outputs, kept on the device
        Invalid(
            "import torch\n\n\nclass Pipeline:\n    def encode_image(self, image):\n"
            "        image = self.feature_extractor(image, return_tensors=\"pt\").pixel_values\n"
            "        image_embeds = self.image_encoder(image).image_embeds\n"
            "        return image_embeds, torch.zeros_like(image_embeds)\n\n"
            "    def prepare_ip_adapter_image_embeds(self, images):\n        image_embeds = []\n"
            "        for image in images:\n"
            "            single_image_embeds, single_negative_image_embeds = self.encode_image(image)\n"
            "            image_embeds.append(torch.cat([single_negative_image_embeds, single_image_embeds]))\n"
            "        return image_embeds\n\n    @torch.no_grad()\n"
            "    def __call__(self, images, latents, device):\n"
            "        ip_adapter_image_embeds = self.prepare_ip_adapter_image_embeds(images)\n"
            "        negative_image_embeds = []\n        for tmp_image_embeds in ip_adapter_image_embeds:\n"
            "            single_negative_image_embeds, single_image_embeds = self.image_encoder(tmp_image_embeds).image_embeds.chunk(2)\n"
            "            negative_image_embeds.append(single_negative_image_embeds)\n"
            "        added = {\"image_embeds\": negative_image_embeds} if images is not None else None\n"
            "        return self.unet(latents.to(device), added)\n"
        ),
        # a module without parameters passes its input's graph on
        Invalid(
            "import torch\nfrom torch import nn\n\nact = nn.Softmax(dim=1)\n\n\ndef predict(model, loader):\n"
            "    model.eval()\n    outs = []\n    for x in loader:\n        outs.append(act(model(x.cuda())))\n"
            "    return outs\n",
        ),
        # Neuron's training models are PyTorch modules, with a graph
        Invalid(
            "import torch\nfrom optimum.neuron.models.training import NeuronModelForCausalLM\n"
            "model = NeuronModelForCausalLM.from_pretrained('llama').to('cuda')\n\ndef evaluate(loader):\n"
            "    model.eval()\n    losses = []\n    for batch in loader:\n        losses.append(model(**batch).loss)\n"
            "    return torch.stack(losses).mean().item()\n",
        ),
        # ... a class over a torch model and a Neuron class is a torch model
        Invalid(
            "import torch\nfrom optimum.neuron import NeuronModelForCausalLM\nfrom transformers import LlamaPreTrainedModel\n"
            "class Llama(LlamaPreTrainedModel, NeuronModelForCausalLM):\n    pass\n"
            "model = Llama.from_pretrained('llama').to('cuda')\n\ndef evaluate(loader):\n"
            "    model.eval()\n    losses = []\n    for batch in loader:\n        losses.append(model(**batch).loss)\n"
            "    return torch.stack(losses).mean().item()\n",
        ),
        # ... and an OpenVINO class name rebound to a torch model's class on the default path
        Invalid(
            "import os\nimport torch\nimport transformers\nfrom optimum.intel import OVModelForCausalLM as ModelClass\n"
            "if not os.environ.get('USE_OPENVINO'):\n    ModelClass = transformers.AutoModelForCausalLM\n"
            "model = ModelClass.from_pretrained('llama').to('cuda')\n\ndef evaluate(loader):\n"
            "    model.eval()\n    losses = []\n    for batch in loader:\n        losses.append(model(**batch).loss)\n"
            "    return torch.stack(losses).mean().item()\n",
        ),
        # collected and returned: a caller elsewhere may backward it, so the fix is unsafe
        Invalid(
            "import torch\n\ndef predict_segments(model, segments):\n    model.eval()\n    outs = []\n"
            "    for s in segments:\n        outs.append(model(s))\n    return torch.cat(outs)\n",
            "import torch\n\ndef predict_segments(model, segments):\n    model.eval()\n    outs = []\n"
            "    for s in segments:\n        outs.append(model(s).detach())\n    return torch.cat(outs)\n",
        ),
        # two stores into one list in the loop: one finding, at the first
        Invalid(
            "import torch\nmodel.cuda()\n\n@torch.no_grad()\ndef sample(model, steps, keep=False):\n"
            "    img = torch.randn(4, 3, device=\"cuda\")\n    imgs = [img]\n    for t in range(steps):\n"
            "        img = model(img)\n        if t % 2:\n            imgs.append(img)\n            continue\n"
            "        imgs.append(img)\n    return torch.stack(imgs) if keep else img\n"
        ),
        Invalid(
            "import torch\n\ndef evaluate(model, loader):\n    preds = []\n    for x, _ in loader:\n"
            "        preds.append(model(x).cpu())\n    return torch.cat(preds)\n",
            "import torch\n\ndef evaluate(model, loader):\n    preds = []\n    for x, _ in loader:\n"
            "        preds.append(model(x).detach().cpu())\n    return torch.cat(preds)\n",
        ),
        Invalid(
            "import torch\nlosses = []\nfor x, y in loader:\n    out = model(x)\n    loss = criterion(out, y)\n"
            "    loss.backward()\n    optimizer.step()\n    losses.append(loss)\n",
            "import torch\nlosses = []\nfor x, y in loader:\n    out = model(x)\n    loss = criterion(out, y)\n"
            "    loss.backward()\n    optimizer.step()\n    losses.append(loss.detach())\n",
        ),
        Invalid(
            "import torch\nclass Evaluator:\n    def run(self, loader):\n        for x in loader:\n"
            "            logits = self.model(x)\n            self.outputs.append(logits.to('cpu'))\n",
            "import torch\nclass Evaluator:\n    def run(self, loader):\n        for x in loader:\n"
            "            logits = self.model(x)\n            self.outputs.append(logits.detach().to('cpu'))\n",
        ),
        # a tuple: reported without a fix
        Invalid("import torch\nkeep = []\nfor x in loader:\n    out = model(x)\n    keep.append((out, x))\n"),
        # a metric helper of this module appends its argument to the instance
        Invalid(
            "import torch\n\nclass Agreement:\n    def __init__(self):\n        self.guesses, self.truths = [], []\n\n"
            "    def update(self, guess, truth):\n        self.guesses.append(guess)\n        self.truths.append(truth)\n\n"
            "def score(model, loader):\n    model.eval()\n    agreement = Agreement()\n    for x, y in loader:\n"
            "        agreement.update(torch.round(model(x)), y)\n    return agreement\n",
            "import torch\n\nclass Agreement:\n    def __init__(self):\n        self.guesses, self.truths = [], []\n\n"
            "    def update(self, guess, truth):\n        self.guesses.append(guess)\n        self.truths.append(truth)\n\n"
            "def score(model, loader):\n    model.eval()\n    agreement = Agreement()\n    for x, y in loader:\n"
            "        agreement.update(torch.round(model(x)).detach(), y)\n    return agreement\n",
        ),
        # a Lightning training hook keeps graphs in a list emptied only at epoch end: reported, no fix
        Invalid(
            "import torch\nimport lightning as L\nclass Lit(L.LightningModule):\n    def __init__(self):\n"
            "        super().__init__()\n        self.outs = []\n\n    def training_step(self, batch, i):\n"
            "        logits, aux = self.model(batch)\n        loss = logits.mean() + aux.mean()\n"
            "        self.outs.append({\"loss\": loss.detach(), \"aux\": aux})\n        return loss\n\n"
            "    def on_train_epoch_end(self):\n        self.outs.clear()\n"
        ),
        # a Lightning hook appends every step and nothing empties the list: reported, no fix
        Invalid(
            "import torch\nimport lightning as L\nclass Classifier(L.LightningModule):\n    def __init__(self):\n"
            "        super().__init__()\n        self.scores = []\n        self.net = torch.nn.Linear(8, 2)\n"
            "    def test_step(self, batch, i):\n        self.scores.append(self.net(batch))\n"
            "    def on_test_end(self):\n        print(torch.cat(self.scores).mean())\n"
        ),
        # a loss from a helper memlint cannot see into: it is backwarded, so it carries a graph
        Invalid(
            "import torch\nfrom mylib.losses import compute_loss\n\nhistory = []\nfor batch in loader:\n"
            "    loss = compute_loss(model, batch)\n    optimizer.zero_grad()\n    loss.backward()\n"
            "    optimizer.step()\n    history.append(loss)\n",
            "import torch\nfrom mylib.losses import compute_loss\n\nhistory = []\nfor batch in loader:\n"
            "    loss = compute_loss(model, batch)\n    optimizer.zero_grad()\n    loss.backward()\n"
            "    optimizer.step()\n    history.append(loss.detach())\n",
        ),
        # a trainer's step method, called from the loop of another method, keeps every loss
        Invalid(
            "import torch\n\nclass Runner:\n    def __init__(self, model, opt):\n        self.model = model.cuda()\n"
            "        self.opt = opt\n        self.history = []\n\n    def _step(self, x, y):\n"
            "        loss = torch.nn.functional.cross_entropy(self.model(x.cuda()), y.cuda())\n"
            "        self.opt.zero_grad()\n        loss.backward()\n        self.opt.step()\n"
            "        self.history.append(loss)\n\n    def fit(self, loader):\n        for x, y in loader:\n"
            "            self._step(x, y)\n",
            "import torch\n\nclass Runner:\n    def __init__(self, model, opt):\n        self.model = model.cuda()\n"
            "        self.opt = opt\n        self.history = []\n\n    def _step(self, x, y):\n"
            "        loss = torch.nn.functional.cross_entropy(self.model(x.cuda()), y.cuda())\n"
            "        self.opt.zero_grad()\n        loss.backward()\n        self.opt.step()\n"
            "        self.history.append(loss.detach())\n\n    def fit(self, loader):\n        for x, y in loader:\n"
            "            self._step(x, y)\n",
        ),
        # Ignite's Engine calls its process function on every batch; the list is the module's
        Invalid(
            "import torch\nfrom ignite.engine import Engine\n\nlosses = []\n\n\ndef update(engine, batch):\n"
            "    x, y = batch[0].cuda(), batch[1].cuda()\n    loss = criterion(model(x), y)\n    optimizer.zero_grad()\n"
            "    loss.backward()\n    optimizer.step()\n    losses.append(loss)\n    return loss.item()\n\n\n"
            "trainer = Engine(update)\n",
            "import torch\nfrom ignite.engine import Engine\n\nlosses = []\n\n\ndef update(engine, batch):\n"
            "    x, y = batch[0].cuda(), batch[1].cuda()\n    loss = criterion(model(x), y)\n    optimizer.zero_grad()\n"
            "    loss.backward()\n    optimizer.step()\n    losses.append(loss.detach())\n    return loss.item()\n\n\n"
            "trainer = Engine(update)\n",
        ),
        # an HF Trainer's compute_loss keeps every batch's loss, and nothing empties the list
        Invalid(
            "import torch\nfrom transformers import Trainer\n\nclass LossTrackingTrainer(Trainer):\n"
            "    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n        self.losses = []\n\n"
            "    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):\n"
            "        outputs = model(**inputs)\n        self.losses.append(outputs.loss)\n"
            "        return (outputs.loss, outputs) if return_outputs else outputs.loss\n"
        ),
        # a list of the class body, written by every forward: shared and never emptied
        Invalid(
            "import torch\nimport torch.nn as nn\nclass Tapped(nn.Module):\n    seen = []\n    def __init__(self):\n"
            "        super().__init__()\n        self.encoder = nn.Linear(16, 16)\n    def forward(self, x):\n"
            "        h = self.encoder(x)\n        Tapped.seen.append(h)\n        return h.relu()\n"
        ),
        # a grad-free loop keeping every sampling step on the device, used only on request: reported,
        # no fix (`.cpu()` would mix devices with the first frame in `torch.stack`)
        Invalid(
            "import torch\ndevice = 'cuda'\n\n@torch.inference_mode()\ndef sample(model, x, steps, keep_all=False):\n"
            "    frames = [x]\n    for t in range(steps):\n        x = model(x, t)\n        frames.append(x)\n"
            "    return torch.stack(frames) if keep_all else x\n"
        ),
        # the value appended is the one the previous iteration computed (a DDIM sampler's `img`)
        Invalid(
            "import torch\ndevice = 'cuda'\n\n@torch.no_grad()\ndef sample(model, x, steps, keep_all=False):\n"
            "    frames = [x]\n    for t in range(steps):\n        frames.append(x)\n        x = model(x, t)\n"
            "    return torch.stack(frames) if keep_all else x\n"
        ),
        # predictions collected on the device over a whole dataset, only to be moved to the host
        Invalid(
            "import torch\n\n@torch.no_grad()\ndef predict(model, loader):\n    scores = []\n    for x in loader:\n"
            "        scores.append(model(x.cuda()).softmax(-1))\n    return torch.cat(scores).cpu().numpy()\n",
            "import torch\n\n@torch.no_grad()\ndef predict(model, loader):\n    scores = []\n    for x in loader:\n"
            "        scores.append(model(x.cuda()).softmax(-1).cpu())\n    return torch.cat(scores).cpu().numpy()\n",
        ),
        # ... with a lambda in the loop, before a read of the list in the loop itself (not a use after it)
        Invalid(
            "import torch\n\n@torch.no_grad()\ndef predict(model, loader):\n    scores = []\n    for x in loader:\n"
            "        x = torch.stack(sorted(x, key=lambda row: row.sum()))\n"
            "        scores.append(model(x.cuda()).softmax(-1))\n        print(len(scores))\n"
            "    return torch.cat(scores).cpu().numpy()\n",
            "import torch\n\n@torch.no_grad()\ndef predict(model, loader):\n    scores = []\n    for x in loader:\n"
            "        x = torch.stack(sorted(x, key=lambda row: row.sum()))\n"
            "        scores.append(model(x.cuda()).softmax(-1).cpu())\n        print(len(scores))\n"
            "    return torch.cat(scores).cpu().numpy()\n",
        ),
        # ... on a device the code names as `args.gpu`
        Invalid(
            "import torch\n\n@torch.no_grad()\ndef predict(model, loader, args):\n    scores = []\n    for x in loader:\n"
            "        scores.append(model(x.to(args.gpu)).softmax(-1))\n    return torch.cat(scores).cpu().numpy()\n",
            "import torch\n\n@torch.no_grad()\ndef predict(model, loader, args):\n    scores = []\n    for x in loader:\n"
            "        scores.append(model(x.to(args.gpu)).softmax(-1).cpu())\n    return torch.cat(scores).cpu().numpy()\n",
        ),
    )

    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        super().__init__(context)
        self._reported: Set[Tuple[int, str]] = set()  # (loop, container) already reported

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not type(func) is cst.Attribute or not node.args:
            return
        facts = self.facts
        storing = func.attr.value in _STORING
        if not storing and not facts.values.may_keep_arguments(node):
            return  # (asked before the grad mode: most method calls keep nothing)
        grad = facts.regions.grad_enabled(node)
        if grad is None:
            return
        if storing:
            container, values = _root(func.value), [node.args[-1]]
        else:  # `acc.update(pred)`: a method of this module that appends its argument to `self`
            container, values = func.value, facts.values.kept_arguments(node, graph=grad)
        if container is None or not values or storing and type(container) is cst.Name and \
                self._library_object(container, node):
            return
        dotted = dotted_name(container) or ""
        if self._never_emptied(node, dotted):
            return
        loops = facts.tree.loops_around(node)
        region = loops[0] if loops else self._step_function(node, dotted)
        if region is None:
            return
        if grad:
            values = [a for a in values if facts.values.carries_grad(a.value, node) and
                      not (loops and self._local(container, node) and self._piece_of_an_item(a.value, loops[0]))]
            if values and not storing and self._instance_backwards(node, values):
                return  # a gradient accumulator: another method of its class backwards what it keeps
            if values:
                self._graph_kept(node, container, dotted, values, region)
            elif loops and type(container) is cst.Name:
                self._view_kept(node, container, dotted, loops)
        elif loops and facts.device_code and type(container) is cst.Name and not all(map(over_model_parts, loops)) \
                and not self._a_few_kept(node, loops, container.value):  # (`for c in range(3)`: a few tensors, no growth)
            loop = loops[0]
            values = [a for a in values if facts.values.holds_output(a.value, node) and
                      not self._piece_of_an_item(a.value, loop) and not facts.outputs.names_token_ids(root_name(a.value) or "")]
            use = facts.values.use_after_loop(loop, container.value)
            if use is None and self._view_kept(node, container, dotted, loops):
                return  # (used on the device after the loop: the slices are needed there, not their outputs)
            if use == "some-paths" and self._filled_on_those_paths(node, container.value, loop):
                use = None  # appended only where it is used: `if self.aggregate:` ... `if not self.aggregate else`
            if values and use is not None and self._outlives_loop(node, container, dotted):
                self._device_kept(node, container, values, use)

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and type(node.targets[0].target) is cst.Subscript:
            self._written_into_buffer(node, node.targets[0].target)  # type: ignore[arg-type]

    def _written_into_buffer(self, node: cst.Assign, target: cst.Subscript) -> None:
        """`self.bank[a:b] = emb`: a tensor with its autograd graph written into part of a tensor
        that outlives the step (a memory bank). The buffer joins the graph, and each write links
        the history of the write before it, so the chain grows for as long as the buffer lives.
        Written on every step of a loop or a step function, or by a loss module from the outputs
        it is handed to score."""
        facts = self.facts
        bank = _root(target)
        if bank is None or type(bank) is cst.Attribute and bank.attr.value == "data" or \
                facts.regions.grad_enabled(node) is False or not facts.syncs.is_tensor(bank, node):
            return  # (a write through `.data` links no graph)
        dotted = dotted_name(bank) or ""
        root = dotted.split(".")[0]
        value = node.value
        scope = facts.tree.scope_of(node)
        loops = facts.tree.loops_around(node)
        if root == "self" and facts.values.from_loss_inputs(value, node):
            klass = facts.tree.class_of(facts.tree.function_of(node))  # type: ignore[arg-type]
            if klass is not None and self._rebound_by_methods(klass, dotted):
                return  # (`self.memory = self.memory.detach()` each step: the chain is cut there)
            where = "the loss module writes what it scores (a model's outputs)"
        else:
            region = loops[0] if loops else self._step_function(node, dotted)
            if region is None or not facts.device_code or not facts.regions.grad_enabled(node) or facts.in_model_code(node) or \
                    not facts.values.carries_grad(value, node) or loops and not self._outlives_loop(node, bank, dotted):
                return
            if type(bank) is cst.Name and (facts.values.leaves_scope(scope, {root}, besides=node) or
                                           self._made_per_step(bank, node)):
                return  # handed on (a caller may backward through it), or made anew on every step
            where = "this loop writes a tensor with its autograd graph" if loops else \
                f"`{region.name.value}`, run on every step, writes a tensor with its autograd graph"  # type: ignore[attr-defined]
        if loops and self._cut_in_place(dotted, loops[-1]):
            return  # `bank.detach_()` on every step: the chain is cut there
        if (facts.values.reaches_backward(scope, {root, dotted}) or
                type(bank) is not cst.Name and facts.values.attribute_backwarded(dotted)) and \
                not self._backwarded_across_steps(bank, node, loops):
            return  # backwarded through the buffer on purpose
        fix = Fix((Replace(value, detached(value)),), Safety.UNSAFE,
                  f"store `{show(detached(value))}` (unsafe: no gradient reaches the stored values through `{dotted}`)")
        self.report(node, (
            f"{where} into `{dotted}`, which outlives the step: the buffer joins the graph, and each write links "
            f"the autograd history of the one before, so it grows for as long as `{dotted}` lives (a backward "
            f"through it later fails); store `{show(detached(value))}`"), fix)

    def _instance_backwards(self, call: cst.Call, values: List[cst.Arg]) -> bool:
        """The method `call` calls keeps the `values` it is given on its instance, and a method of
        the same class backwards them (`GradAccumulator.add_batch(loss)`, then its `step()`
        backwards the mean of what it kept)."""
        method = self.facts.scopes.resolve(call)
        if method is None:
            return False
        handed = {name for arg, name in self.facts.scopes.parameters_given(call, method) if arg in values}
        return self.facts.values.backwards_what_it_keeps(method, handed)

    def _library_object(self, container: cst.Name, at: cst.CSTNode) -> bool:
        """`container` is an object of a class a library built on torch defines (MONAI's
        `CumulativeAverage()`): what its `append` keeps is that class's business (a running
        sum, a detached copy), not a list's. (A class of the project, seen or not, may be a list.)"""
        binds = [b for b in self.facts.scopes.bindings_seen(container.value, at) if b.kind != "append"]
        names = self.facts.names
        return bool(binds) and all(
            b.kind == "assign" and type(b.value) is cst.Call and last_part(dotted_name(b.value.func))[:1].isupper()
            and is_torch_library(names.call_name(b.value) or "") and not (names.call_name(b.value) or "").startswith("torch.")
            for b in binds)

    def _cut_in_place(self, dotted: str, loop: cst.CSTNode) -> bool:
        """The loop calls `<buffer>.detach_()`: each step cuts the buffer from the last one's graph."""
        return any(type(call.func) is cst.Attribute and call.func.attr.value == "detach_"
                   and dotted_name(call.func.value) == dotted for call, _ in self.facts.calls.calls_in(loop, follow=False))

    def _rebound_by_methods(self, klass: cst.ClassDef, dotted: str) -> bool:
        """A method of `klass` other than `__init__` binds `self.<buffer>` anew (not an item)."""
        return any(type(target.target) is cst.Attribute and dotted_name(target.target) == dotted
                   for method in klass.body.body if type(method) is cst.FunctionDef and method.name.value != "__init__"
                   for assign in self.facts.scopes.assigns_of(method) for target in assign.targets)

    def _made_per_step(self, bank: cst.Name, at: cst.CSTNode) -> bool:
        """`bank` is bound in a function that runs on every step (a step's own buffer, made on
        every call), not before the loop that runs the steps."""
        facts = self.facts
        func = facts.tree.function_of(at)
        return func is not None and facts.steps.function_how_often(func) in (STEP, INNER) and any(
            b.kind == "assign" for b in facts.scopes.bindings(func, bank.value))

    def _backwarded_across_steps(self, bank: cst.BaseExpression, at: cst.CSTNode, loops: List[cst.CSTNode]) -> bool:
        """The buffer is read into a loss that the loop itself backwards, and was made before
        that loop (NPID's memory bank): a backward on the next step reaches back into the graph
        the last step's write freed, and fails; it is no gradient wanted through the buffer."""
        facts = self.facts
        if not loops or type(bank) is not cst.Name:
            return False
        outermost = loops[-1]
        return facts.roles.backwards_in(outermost) and not any(
            facts.tree.contains(outermost, b.node) for b in facts.scopes.bindings_seen(bank.value, at))

    def _local(self, container: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """`container` is a name its function binds itself (`outputs_flat = []`): it dies with the
        call, unlike a list handed in, a module's or an object's."""
        return type(container) is cst.Name and type(self.facts.tree.scope_of(at)) is cst.FunctionDef and \
            self._bound_where_filled(container.value, at)  # type: ignore[attr-defined]

    def _bound_where_filled(self, name: str, at: cst.CSTNode) -> bool:
        """The scope of `at` binds the list `name` by an assignment, and it is no parameter: not
        handed in, nor a module's list a function fills."""
        binds = self.facts.scopes.bindings(self.facts.tree.scope_of(at), name)
        return any(b.kind == "assign" for b in binds) and not any(b.kind == "param" for b in binds)

    def _piece_of_an_item(self, value: cst.BaseExpression, loop: cst.CSTNode, depth: int = 0) -> bool:
        """`value` is an item of the collection a loop walks, or a view of one
        (`neg, pos = embeds.chunk(2)` for `embeds in per_adapter`), where the collection was
        made before every loop around (not a batch's output walked row by row) and the loop
        binds the item to nothing else: those tensors were all alive before the loop, which
        keeps nothing new."""
        if type(loop) is not cst.For or type(loop.iter) is not cst.Name or not self._made_before(loop):
            return False  # (a call may make a new output per item: a stream, a generator)
        while type(value) is cst.Subscript and all(_basic_index(e.slice) for e in value.slice) or \
                type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in _VIEWS:  # type: ignore[attr-defined]
            value = value.value if type(value) is cst.Subscript else value.func.value  # type: ignore[attr-defined]
        if type(value) is not cst.Name:
            return False
        facts = self.facts
        binds = [b for b in facts.scopes.bindings_seen(value.value, value) if facts.tree.contains(loop, b.node)]
        if value.value in target_names(loop.target):  # type: ignore[attr-defined]
            return all(b.kind == "for" and b.node is loop for b in binds)  # (`x = model(x)` rebinds the item)
        return depth < 2 and bool(binds) and all(
            b.kind == "assign" and b.value is not None and self._piece_of_an_item(b.value, loop, depth + 1) for b in binds)

    def _made_before(self, loop: cst.For) -> bool:
        """The collection `loop` walks is bound nowhere in the outermost loop around it (nor
        appended to): made before them all, not afresh each iteration."""
        outermost = ([loop] + self.facts.tree.loops_around(loop))[-1]
        name = loop.iter.value  # type: ignore[attr-defined]
        return not any(self.facts.tree.contains(outermost, b.node)
                       for b in self.facts.scopes.bindings_seen(name, loop.iter))

    def _never_emptied(self, node: cst.Call, dotted: str) -> bool:
        """`self.<list>` that lives for the whole run: appended by a hook a framework calls on
        every batch (Lightning's, an HF Trainer's), or a list of the class body, and nothing
        empties it. Reported here; True when it was."""
        facts = self.facts
        parts = dotted.split(".")
        klass = facts.scopes.enclosing_class(node)
        if len(parts) != 2 or klass is None or parts[0] not in ("self", klass.name.value):
            return False
        attr = parts[1]
        lightning = facts.regions.lightning_step_hook(node)
        hook = lightning if lightning is not None else facts.regions.hf_step_hook(node)
        shared = facts.scopes.class_list(klass, attr) and not facts.scopes.assigned_on_instances(klass, attr)
        if hook is None and not shared:
            return False
        value = node.args[-1].value
        graph = facts.regions.grad_enabled(node) is True and facts.values.carries_grad(value, node)
        emptied = facts.scopes.emptied_by(klass, attr)
        if graph and lightning is not None and emptied and \
                not any(facts.steps.function_how_often(method) in (STEP, INNER) for method in emptied):
            self.report(node, (
                f"Lightning calls `{hook.name.value}` on every batch, and `{dotted}` is emptied only between "
                f"epochs: until then it keeps every step's value on the device with its autograd graph (the graph's "
                f"nodes, and the saved activations of any part of it no backward frees); keep `.detach()`ed values"))
            return True
        if emptied or self._emptied_elsewhere(klass, attr):
            return False
        if graph:
            kept = "a tensor with its autograd graph"
        elif facts.values.holds_output(value, node):
            kept = "a device tensor"
        else:
            return False
        if lightning is not None:
            phase = lightning.name.value.split("_")[0]
            where = f"Lightning calls `{lightning.name.value}` on every batch"
            advice = f"empty it once it is used (`self.{attr}.clear()` in `on_{phase}_epoch_end`)"
        elif hook is not None:
            where = f"the HF Trainer calls `{hook.name.value}` on every batch"
            advice = ("keep `.detach()`ed values, and " if graph else "") + \
                "empty it where it is read (an overridden `log()`, a callback)"
        else:
            where = f"`{attr}` is a list of the class body, shared by every instance"
            advice = f"keep it on the instance (`self.{attr} = []` in `__init__`) and empty it once used"
        self.report(node, f"{where} and nothing in this module empties `{dotted}`: it keeps {kept} from every "
                          f"call, for as long as the program runs; {advice}")
        return True

    def _emptied_elsewhere(self, klass: cst.ClassDef, attr: str) -> bool:
        """Code of this module outside `klass` empties `<obj>.<attr>` through another object, in
        a function that runs during the run, not at its end (a callback's `on_log` calling
        `self.trainer.step_losses.clear()`, not its `on_train_end`): the list does not live for
        the whole run."""
        tree = self.facts.tree
        for call in self.facts.scopes.calls:
            func = call.func
            if type(func) is not cst.Attribute or func.attr.value != "clear" or tree.contains(klass, call) or \
                    type(func.value) is not cst.Attribute or func.value.attr.value != attr or \
                    dotted_name(func.value.value) == "self":  # type: ignore[attr-defined]
                continue
            function = tree.function_of(call)
            if function is not None and intrinsic_often(function.name.value, False) != BOUNDARY:
                return True
        return False

    def _outlives_loop(self, node: cst.Call, container: cst.BaseExpression, dotted: str) -> bool:
        """What the loop stores into `container` outlives its iteration: the name is not bound
        again in the iteration, nor is it a window the loop also drops items from (`del
        model_prev_list[0]`, `.pop(0)`, `.popleft()`: a multistep solver's last few outputs)."""
        facts = self.facts
        loops = facts.tree.loops_around(node)
        root = dotted.split(".")[0]
        if type(container) is cst.Name and facts.values.reset_in_iteration(loops[0], root, node):
            return False
        return not self._drops_items(loops[0], dotted)

    def _a_few_kept(self, node: cst.Call, loops: List[cst.CSTNode], name: str) -> bool:
        """The list `name` is bound where it is filled (not handed in, nor a module's list a
        function fills), and every loop it outlives, from `node` out to the one that binds it
        anew each iteration, runs a few times the code spells (`for can in [1, 2, 3]`): it
        keeps a few graphs, however long the run."""
        facts = self.facts
        if not self._bound_where_filled(name, node):
            return False
        for loop in loops:
            if facts.values.reset_in_iteration(loop, name, node):
                return True
            if not few_literal(loop, facts.scopes):
                return False
        return bool(loops)

    def _drops_items(self, loop: cst.CSTNode, dotted: str) -> bool:
        """`loop` removes items from the container `dotted` in its own body."""
        for node in walk_scope(loop.body):  # type: ignore[attr-defined]
            if type(node) is cst.Del and any(type(t) is cst.Subscript and dotted_name(t.value) == dotted  # type: ignore[attr-defined]
                                             for t in _deleted(node.target)):  # type: ignore[attr-defined]
                return True
            if type(node) is cst.Call and type(node.func) is cst.Attribute and \
                    node.func.attr.value in ("pop", "popleft") and dotted_name(node.func.value) == dotted:  # type: ignore[attr-defined]
                return True
        return False

    def _step_function(self, node: cst.Call, dotted: str) -> Optional[cst.FunctionDef]:
        """The function `node` runs in, outside any loop of its own, when it runs on every step
        (a method a trainer's loop calls, Ignite's process function) and stores into a container
        that outlives the call and grows: an attribute of the instance, or a name of the module,
        that the function does not bind again (`self.parts = []` on every call) and that is no
        `deque(maxlen=...)`."""
        facts = self.facts
        func = facts.tree.function_of(node)
        if func is None or facts.steps.function_how_often(func) not in (STEP, INNER):
            return None
        parts = dotted.split(".")
        if parts[0] == "self" and len(parts) == 2:
            klass = facts.tree.class_of(func)
            values = facts.scopes.attribute_values(klass, parts[1]) if klass is not None else []
            rebound = any(dotted_name(target.target) == dotted and facts.tree.parent(
                facts.tree.parent(assign)) is func.body  # (on every call: not `if self.parts is None:`)
                for assign in facts.scopes.assigns_of(func) for target in assign.targets)
        elif len(parts) == 1 and dotted:
            rebound = any(b.kind != "append" for b in facts.scopes.bindings(func, dotted))
            values = [b.value for b in facts.scopes.bindings(facts.tree.module, dotted) if b.value is not None]
        else:
            return None
        return None if rebound or any(_bounded(value) for value in values) else func

    def _graph_kept(self, node: cst.Call, container: cst.BaseExpression, dotted: str, values: List[cst.Arg],
                    region: cst.CSTNode) -> None:
        facts = self.facts
        loops = facts.tree.loops_around(node)
        root = dotted.split(".")[0]
        value = values[-1].value
        if loops and not self._outlives_loop(node, container, dotted):
            return
        scope = facts.tree.scope_of(node)
        # (an attribute's owner, `self`, is no value of its own: what is derived from `self`, is
        # derived from every attribute)
        if facts.values.reaches_backward(scope, {dotted} if loops == [] and root == "self" else {root, dotted}):
            return
        if not type(container) is cst.Name and facts.values.attribute_backwarded(dotted):
            return  # `self.losses` backwarded by another method
        if facts.phase.in_training_function(node) and (
                not type(container) is cst.Name or facts.values.leaves_scope(scope, {root})):
            return  # a forward or loss function collecting what its caller backwards
        handed_on = type(container) is cst.Name and facts.values.leaves_scope(scope, {root})
        if handed_on and (facts.phase.eval_evidence(region) is None and not facts.values.backwarded_in(value, region)
                          or facts.values.callers_backward(facts.tree.function_of(node))):
            return  # handed to the caller (or stored), which may backward it
        if any(facts.roles.backwards_in(loop) for loop in (*loops, region)):
            context = "training"
        elif loops and facts.in_model_code(node):
            return  # a model's loop (over its layers) runs in the grad mode its caller chose
        elif facts.values.hands_graph_away(region):
            context = "unknown"  # the graph goes to code that may backward it
        elif type(container) is cst.Name and self._a_few_kept(node, loops, root):
            return  # a handful of values the code spells (a search over settings), not one per batch
        else:
            context = "no-backward"
        fixed = [(arg, detach_before_move(arg.value)) for arg in values]
        fix = None
        method = facts.scopes.resolve(node)
        if all(new is not None for _, new in fixed) and not (method is not None and facts.roles.backwards_in(method)):
            # what the function returns, a caller elsewhere may backward: then detaching breaks it;
            # so may a module that imports this one, what is kept on an object or a caller's list
            kept_for_importers = not handed_on and scope is not facts.tree.module and (
                not type(container) is cst.Name or not loops  # (a module's list, kept by a step function)
                or any(b.kind == "param" for b in facts.scopes.bindings(scope, root))
            ) and facts.project.imported_elsewhere()
            why = ("a caller may backward what is returned" if handed_on else
                   "a module that imports this one may backward what it keeps" if kept_for_importers else "")
            fix = Fix(tuple(Replace(arg.value, new) for arg, new in fixed),  # type: ignore[arg-type]
                      Safety.UNSAFE if why else Safety.SAFE,
                      f"store `{show(fixed[-1][1])}`" + (f" (unsafe: {why})" if why else ""))  # type: ignore[arg-type]
        through = None if node.func.attr.value in _STORING else show(node.func)  # type: ignore[attr-defined]
        step_function = None if loops else region.name.value  # type: ignore[attr-defined]
        if self._first_for(region, dotted):
            self.report(node, self._message(dotted, value, fixed[-1][1], context, through, step_function), fix)

    def _first_for(self, region: cst.CSTNode, dotted: str) -> bool:
        """One finding per container and loop (or step function): its first store there (the
        others share its fix)."""
        key = (id(region), dotted)
        if key in self._reported:
            return False
        self._reported.add(key)
        return True

    def _view_kept(self, node: cst.Call, container: cst.Name, dotted: str, loops: List[cst.CSTNode]) -> bool:
        """`all_token_probs.append(token_probs[:, 0, i])` (ESM's masked marginals): each
        iteration runs a forward with grad off, then keeps the slice of its output at the
        loop's own index. The slice is a view, so the whole output stays on the device with
        it: the loop keeps a full output per iteration to use one position of each. Asked
        where grad is on at the append (off at the forward), and in a grad-free loop whose list
        is used on the device after it, where `_device_kept` does not report; True when it
        reports."""
        facts = self.facts
        loop = loops[0]
        value = sliced = node.args[-1].value
        while type(sliced) is cst.Call and type(sliced.func) is cst.Attribute and \
                sliced.func.attr.value == "detach" and not sliced.args:  # type: ignore[attr-defined]
            sliced = sliced.func.value  # type: ignore[attr-defined]  # (`.detach()` shares the storage)
        if type(sliced) is not cst.Subscript or type(sliced.value) is not cst.Name:  # type: ignore[attr-defined]
            return False
        index = _position(loop)
        elements = sliced.slice  # type: ignore[attr-defined]
        if index is None or not any(_spans(e.slice) for e in elements) or \
                not all(_spans(e.slice) or _basic_index(e.slice) or  # type: ignore[attr-defined]
                        type(e.slice.value) is cst.Name and e.slice.value.value == index for e in elements) or \
                not any(type(e.slice) is cst.Index and type(e.slice.value) is cst.Name and  # type: ignore[attr-defined]
                        e.slice.value.value == index for e in elements):
            return False  # (a tensor's dimensions, one of them at the loop's own integer position, views only)
        if not facts.device_code or all(map(over_model_parts, loops)) or self._a_few_kept(node, loops, container.value) or \
                not self._outlives_loop(node, container, dotted) or self._bounded(container.value, node, loop):
            return False  # (a few slices, or a window the loop drops items from: no growth)
        base = sliced.value.value  # type: ignore[attr-defined]
        binds = [b for b in facts.scopes.bindings_seen(base, sliced) if facts.tree.contains(loop, b.node)]
        if not binds or not all(b.kind == "assign" and facts.regions.grad_enabled(b.node) is False for b in binds) or \
                not facts.values.holds_output(sliced.value, node) or not self._first_for(loop, container.value):  # type: ignore[attr-defined]
            return False  # (an output made afresh by each iteration, with grad off)
        fix = Fix((Replace(value, cst.Call(cst.Attribute(value, cst.Name("clone")))),), Safety.UNSAFE,
                  "keep a copy of the slice alone (`.clone()`)")
        self.report(node, (
            f"`{show(value)}` is a view of `{base}`, a new model output on every iteration, so `{container.value}` "
            f"keeps all of each iteration's `{base}` on the device to use one position of it, and device memory "
            f"grows by a whole output per iteration: keep a copy of the slice (`{show(value)}.clone()`, or "
            f"`.cpu()`)"), fix)
        return True

    def _bounded(self, name: str, node: cst.Call, loop: cst.CSTNode) -> bool:
        """The list keeps a few items however long the loop: the loop binds it again (`rows =
        rows[-4:]`), or it is a `deque` with a `maxlen`."""
        facts = self.facts
        return any(bind.kind == "assign" and facts.tree.contains(loop, bind.node) or
                   bind.value is not None and type(bind.value) is cst.Call and
                   last_part(dotted_name(bind.value.func)) == "deque" and  # type: ignore[attr-defined]
                   (argument(bind.value, "maxlen", 1) is not None)  # type: ignore[arg-type]
                   for bind in facts.scopes.bindings_seen(name, node))

    def _device_kept(self, node: cst.Call, container: cst.Name, values: List[cst.Arg], use: str) -> None:
        if not self._first_for(self.facts.tree.loops_around(node)[0], container.value):
            return
        fix = None
        if use != "some-paths" and self._only_append(node, container) and \
                not any(type(arg.value) in (cst.Tuple, cst.List, cst.Dict, cst.StarredElement) for arg in values):
            moved = [(arg, arg.value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                      if not type(arg.value) in (cst.Name, cst.Attribute, cst.Call, cst.Subscript) else arg.value)
                     for arg in values]
            fix = Fix(tuple(Replace(arg.value, cst.Call(cst.Attribute(value, cst.Name("cpu")))) for arg, value in moved),
                      Safety.UNSAFE, "store the tensors on the CPU (`.cpu()`)")
        after = {"unused": "it is never read", "host": "it is only moved to the host",
                 "some-paths": "it is used only on some paths"}[use]
        self.report(node, (
            f"`{container.value}` keeps a device tensor from every iteration of this grad-free loop, so device "
            f"memory grows with the number of iterations (when the model runs on the GPU), yet after the loop "
            f"{after}: keep what is needed on the CPU (`.cpu()`), or keep it only when it is used"), fix)

    def _filled_on_those_paths(self, node: cst.Call, name: str, loop: cst.CSTNode) -> bool:
        """The loop appends to `name` only where a flag holds (`if self.aggregate:`, or its `else`
        where it does not), and after the loop `name` is read only in the branch of a conditional
        expression taken when the flag holds the same way (`... if not self.aggregate else
        torch.cat(name)`): it keeps the tensors exactly where they are used."""
        tree = self.facts.tree
        guard = next((a for a in tree.ancestors(node) if type(a) is cst.If and tree.contains(loop, a)), None)
        if guard is None:
            return False
        flag, holds = _flag(guard.test)  # type: ignore[attr-defined]
        if not tree.contains(guard.body, node):  # type: ignore[attr-defined]
            holds = not holds  # (in its `else`)
        end = tree.span(loop)[1]
        reads = [n for n in tree.walk_scope(tree.scope_of(loop)) if type(n) is cst.Name and n.value == name  # type: ignore[attr-defined]
                 and tree.order(n) >= end]
        branches = []
        for read in reads:
            choice = next((a for a in tree.ancestors(read) if type(a) is cst.IfExp and not tree.contains(a.test, read)), None)  # type: ignore[attr-defined]
            if choice is None:
                return False
            read_flag, read_holds = _flag(choice.test)  # type: ignore[attr-defined]
            branches.append(read_flag == flag and read_holds == (holds if tree.contains(choice.body, read)  # type: ignore[attr-defined]
                                                                 else not holds))
        return bool(branches) and all(branches)

    def _only_append(self, node: cst.Call, container: cst.Name) -> bool:
        """`container` starts empty (`[]`) and this is the only place that fills it: moving what
        it appends moves all of it."""
        facts = self.facts
        binds = facts.scopes.bindings(facts.tree.scope_of(node), container.value)
        starts = [b for b in binds if b.kind != "append"]
        return [b.node for b in binds if b.kind == "append"] == [node] and len(starts) == 1 and \
            type(starts[0].value) is cst.List and not starts[0].value.elements

    @staticmethod
    def _message(container: str, value: cst.BaseExpression, fixed: Optional[cst.BaseExpression],
                 context: str, through: Optional[str], step_function: Optional[str]) -> str:
        """`step_function`: the function, run on every step, that stores (no loop of its own)."""
        moved = _moved_to_cpu(value)
        place = f"`{step_function}`, run on every step," if step_function else "this loop"
        advice = f"store `{show(fixed)}`" if fixed is not None else "store detached tensors"
        what = f"`{through}(...)` stores its argument in `{container}`, which" if through else f"`{container}`"
        if context == "training":
            return (f"{what} keeps a tensor with its autograd graph; in "
                    f"{place if step_function else 'this training loop'} "
                    f"backward() frees the graph's saved tensors, so the cost is the linked autograd "
                    f"history, not GPU memory: {advice}")
        if context == "unknown":
            return (f"{what} keeps a tensor with its autograd graph, and with it the graph's "
                    f"saved activations unless a backward frees them: {advice}")
        if moved:
            return (f"{what} keeps CPU copies that still hold the autograd graph (`.cpu()` / "
                    f"`.to()` do not detach), so in {place} without a backward each batch's saved "
                    f"activations stay on the GPU: {advice}")
        return (f"{what} keeps a tensor with its autograd graph, so in {place} without a backward every "
                f"batch's saved activations stay on the GPU until `{container}` is dropped: {advice}")
