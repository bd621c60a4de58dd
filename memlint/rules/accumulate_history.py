"""MEM201 accumulate-history."""

from __future__ import annotations

from typing import Optional, Set, Union

import libcst as cst

from memlint.analysis.figures import over_dataset
from memlint.analysis.frameworks import HF_SUMMED_STEP
from memlint.analysis.tree import dotted_name, expression_nodes, holder, root_name
from memlint.findings import Fix, Replace, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import detach_before_move, detached, show


def _same_entry(expr: cst.BaseExpression, target: cst.BaseExpression) -> bool:
    """`total` for `total`; `d[k]` or `d.get(k, 0)` for `d[k]`."""
    code = cst.Module([]).code_for_node
    if code(expr) == code(target):
        return True
    if type(target) is cst.Subscript and len(target.slice) == 1 and type(target.slice[0].slice) is cst.Index \
            and type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value == "get" \
            and expr.args and code(expr.func.value) == code(target.value):
        return code(expr.args[0].value) == code(target.slice[0].slice.value)
    return False


def _unscaled(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`ema` for `0.9 * ema`, `ema * decay` or `ema / 2`: a running average scales what it keeps."""
    if type(expr) is cst.BinaryOperation and type(expr.operator) in (cst.Multiply, cst.Divide):
        if type(expr.left) in (cst.Float, cst.Integer, cst.Name) and type(expr.operator) is cst.Multiply:
            return expr.right
        if type(expr.right) in (cst.Float, cst.Integer, cst.Name):
            return expr.left
    return expr


def _detached_items(display: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """`[out.detach()]` for `[out]` (`outs = outs + [out]` grows a list); None where an item is
    itself a display or starred."""
    items = []
    for element in display.elements:  # type: ignore[attr-defined]
        fixed = detach_before_move(element.value) if type(element) is cst.Element else None
        if fixed is None:
            return None
        items.append(element.with_changes(value=fixed))
    return display.with_changes(elements=items)


# What read of a value ends its graph (`self.avg.detach()`, `self.avg.data`).
_DETACHED_READS = frozenset({"detach", "data", "item", "tolist"})


class AccumulateHistory(Rule):
    """
    ## What it does
    Finds a value that carries an autograd graph (a loss or model output computed with grad
    enabled) added into an accumulator that outlives the loop iteration: `total += loss`,
    `self.running += loss`, `metrics[k] += loss`, `total = total + loss`, a running average
    (`ema[k] = 0.9 * ema[k] + 0.1 * loss`). Also a sum a framework keeps: an HF `Trainer`
    subclass's `training_step` that backwards its loss and returns it undetached, which the
    HF loop adds into its running loss every step. And a loss handed to a method that adds it
    into a running sum its instance keeps: `losses.update(loss, n)`, whose `update` does
    `self.sum += val * n` or keeps a moving average, `self.avg = m * self.avg + (1 - m) * val`
    (a meter of this module or of another module of the project linted with it, also one
    imported with `from utils import *`), outside no_grad.

    Also a running statistic a loss module keeps (`self.hist_ = torch.scatter_add(0.99 *
    self.hist_, 0, idx, 0.01 * alpha)`, `self.avg = 0.9 * self.avg + 0.1 * loss`), updated
    from what the module scores (the first argument of its `forward`, or of `compute_loss`
    where it inherits `forward`) with its graph.

    ## Why is this bad?
    The sum is itself part of the graph: it references every loss added so far, and through
    them their graphs. Where nothing calls `backward()` (validation, evaluation), every
    iteration's saved activations stay alive until the accumulator dies: on an H200 a
    validation loop doing `total += loss` peaked 1 GB higher than the same loop with
    `loss.item()`. In a training loop `backward()` frees each graph's saved tensors, so the cost
    there is not GPU memory (none was measurable) but an autograd history that links every
    step, and an accumulator that is not a plain number.

    ## Example
    ```python
    total = 0.0
    for x, y in val_loader:
        loss = criterion(model(x), y)
        total += loss
    ```

    Use instead:
    ```python
    total = 0.0
    for x, y in val_loader:
        loss = criterion(model(x), y)
        total += loss.detach()
    ```

    ## When it is not reported
    Summing sub-losses that are backwarded afterwards (`loss += aux; loss.backward()`),
    returning the sum from a loss function (`compute_loss`, `training_step`, `forward`), values
    already ended with `.item()`, `float()` or `.detach()`, a field of a model's output named
    as a metric that counts or compares (`out["accuracy"]`, `outputs.correct`: computed through
    an argmax or a comparison, it has no graph), an element of a model's output that its
    class's `forward` returns as a Python number (`out, ratio = model(x)`, with `ratio =
    out.size(0) / x.size(0)`) or that the code unpacks into a name that counts (`loss, n_tokens =
    model(batch)`: a count is an integer, and has no graph), an accumulator reset in every
    training step (in the loop that steps the optimizer, or at the start of a method that steps
    it once per call: summed over one step's parts, it links no step to the next), and anything
    under `torch.no_grad()` / `inference_mode()`, in a helper decorated with them, or in a function
    whose every call site in the module runs without grad (`self(...)` calls `__call__`). A
    method that backwards what it is given, or whose sum a backward reads (a helper that
    accumulates gradients on purpose), or one whose result the caller uses.

    ## Fix
    Add `.detach()` to the accumulated value (to the argument, for a method): no host-device
    sync, the same numbers.

    ## Fix safety
    Safe: `.detach()` keeps the values bit-identical (only the graph is dropped). `.item()` is
    not offered: `total = 0.0; total += loss` keeps a float32 tensor, `.item()` would sum in
    float64. Nothing is changed when the accumulated value is backwarded later.
    """

    CODE = "MEM201"
    NAME = "accumulate-history"
    MESSAGE = "a value with an autograd graph is accumulated into a value that outlives the iteration"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.PEAK_LOWER

    VALID = (
        # ... from detached values
        "import torch\n\n\nclass SoftMarginLoss(BaseMetricLossFunction):\n"
        "    def compute_loss(self, embeddings, labels):\n        mat = self.distance(embeddings, embeddings)\n"
        "        loss = self.margins(mat, labels)\n        self.update_histogram(loss.detach())\n"
        "        return {\"loss\": (torch.cumsum(self.hist_, 0)[loss.long()] * loss).mean()}\n\n"
        "    def margins(self, mat, labels):\n        return mat.diag() - mat.min(1).values\n\n"
        "    def update_histogram(self, data):\n        idx, alpha = torch.floor(data).long(), torch.frac(data)\n"
        "        self.hist_ = torch.scatter_add(0.99 * self.hist_, 0, idx, 0.01 * (1 - alpha))\n"
        "        self.hist_ /= self.hist_.sum()\n",
        # the element of the model's output it sums is a Python float (PyG's pooling ratio)
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        out = self.pool(self.conv(x))\n"
        "        ratio = out.size(0) / x.size(0)\n        return self.lin(out), ratio\n\n\nmodel = Net().cuda()\n\n\n"
        "def test(loader):\n    model.eval()\n    total = 0\n    for x in loader:\n        out, kept = model(x.cuda())\n"
        "        total += kept\n    return total / len(loader)\n",
        # ... and so it is for a model the class's own factory makes
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        out = self.pool(self.conv(x))\n"
        "        ratio = out.size(0) / x.size(0)\n        return self.lin(out), ratio\n\n\n"
        "model = Net.from_pretrained('net.pt').cuda()\n\n\n"
        "def test(loader):\n    model.eval()\n    total = 0\n    for x in loader:\n        out, kept = model(x.cuda())\n"
        "        total += kept\n    return total / len(loader)\n",
        # the sum goes to a model's method that backwards it after the loop
        "import torch\n\n\ndef run(model, loader, device):\n    total = 0\n"
        "    for x, y in loader:\n        total += model(x.to(device)).sum()\n"
        "    model.compute_gradients(total)\n",
        # a metric field of what the model returns: an accuracy has no graph (here a float already)
        "import torch\nfor epoch in range(5):\n    total_loss = 0\n    total_accuracy = 0\n    for batch in loader:\n"
        "        loss, output_dict = reward_model.forward(batch)\n        optimizer.zero_grad()\n        loss.backward()\n"
        "        optimizer.step()\n        total_loss += loss.item()\n        total_accuracy += output_dict[\"accuracy\"]\n",
        "import torch\ndef validate(model, loader):\n    model.eval()\n    hits = 0\n    for x, y in loader:\n"
        "        out = model(x, labels=y)\n        hits += out.correct\n    return hits\n",
        # HF's own shape: the backwarded loss returned detached
        "import torch\nfrom transformers import Trainer\n\nclass MyTrainer(Trainer):\n"
        "    def training_step(self, model, inputs, num_items_in_batch=None):\n"
        "        loss = model(**inputs).loss\n        self.accelerator.backward(loss)\n        return loss.detach()\n",
        # already a Python number / detached
        "import torch\ntotal = 0.0\nfor x, y in loader:\n    loss = criterion(model(x), y)\n"
        "    loss.backward()\n    total += loss.item()\n",
        "import torch\ntotal = 0.0\nfor x, y in loader:\n    loss = criterion(model(x), y)\n"
        "    total += loss.detach()\n",
        "import torch\ntotal = 0.0\nfor x, y in loader:\n    loss = criterion(model(x), y)\n"
        "    total += float(loss)\n",
        # summing sub-losses before the backward
        "import torch\nfor x, y in loader:\n    loss = 0\n    for head in heads:\n"
        "        loss += criterion(head(model(x)), y)\n    loss.backward()\n    optimizer.step()\n",
        "import torch\nfor x, y in loader:\n    out = model(x)\n    loss = criterion(out, y)\n"
        "    for aux in aux_outputs(out):\n        loss = loss + 0.1 * aux.mean()\n"
        "    scaler.scale(loss).backward()\n",
        # gradient accumulation: the accumulated loss is backwarded every k steps
        "import torch\nacc = 0\nfor i, (x, y) in enumerate(loader):\n    acc = acc + criterion(model(x), y) / k\n"
        "    if (i + 1) % k == 0:\n        acc.backward()\n        optimizer.step()\n"
        "        optimizer.zero_grad()\n        acc = 0\n",
        # a loss function: the caller backwards what it returns
        "import torch\ndef compute_loss(model, chunks):\n    total = 0\n    for c in chunks:\n"
        "        total += criterion(model(c.x), c.y)\n    return total\n",
        # under no_grad, also through a decorated helper
        "import torch\ntotal = 0.0\nwith torch.no_grad():\n    for x, y in loader:\n"
        "        total += criterion(model(x), y)\n",
        "import torch\n@torch.no_grad()\ndef evaluate(model, loader):\n    total = 0.0\n    for x, y in loader:\n"
        "        total += criterion(model(x), y)\n    return total\n",
        "import torch\n@torch.no_grad()\ndef score(x, y):\n    return criterion(model(x), y)\n"
        "total = 0.0\nfor x, y in loader:\n    total += score(x, y)\n",
        # values without a graph: labels, counts, detached predictions
        "import torch\ncorrect = 0\nfor x, y in loader:\n    out = model(x)\n"
        "    correct += (out.argmax(1) == y).sum()\n",
        "import torch\nseen = 0\nfor x, y in loader:\n    seen += x.shape[0]\n",
        # the accumulator is reset every iteration
        "import torch\nfor x, y in loader:\n    step_loss = 0\n    step_loss += criterion(model(x), y)\n"
        "    print(step_loss.item())\n",
        # ... reset every training step, summed over one step's parts (DAAN's per-class term): it lives one step
        "import torch\ndef train(model, loader, optimizer, heads):\n    for x, y in loader:\n"
        "        optimizer.zero_grad()\n        out = model(x)\n        loss = criterion(out, y)\n        spread = 0\n"
        "        for i in range(len(heads)):\n            spread += criterion(out[i], y)\n"
        "        print(spread.item())\n        loss.backward()\n        optimizer.step()\n",
        # ... a local of a method that steps the optimizer once per call (DomainBed's `update`, over environments)
        "import torch\nimport torch.nn.functional as F\nclass ANDMask:\n    def update(self, minibatches, opt):\n"
        "        total = 0\n        grads = []\n        for x, y in minibatches:\n"
        "            env_loss = F.cross_entropy(self.network(x), y)\n            total += env_loss\n"
        "            grads.append(torch.autograd.grad(env_loss, self.network.parameters(), retain_graph=True))\n"
        "        opt.zero_grad()\n        self.mask_grads(grads)\n        opt.step()\n"
        "        return {\"loss\": (total / len(minibatches)).item()}\n",
        # the element of the model's output it sums is named as a count: an integer has no graph (flair's
        # `forward_loss`)
        "import torch\ndef train(model, loader, optimizer):\n    seen = 0\n    for batch in loader:\n"
        "        loss, datapoint_count = model.forward_loss(batch)\n        optimizer.zero_grad()\n"
        "        loss.backward()\n        optimizer.step()\n        seen += datapoint_count\n    print(seen)\n",
        # HF generate() runs without grad
        "import torch\ntotal = 0\nfor batch in loader:\n    total += model.generate(**batch).shape[1]\n",
        # accelerate's gradient accumulation, logging a detached loss
        "import torch\ntotal_loss = 0\nfor batch in loader:\n    with accelerator.accumulate(model):\n"
        "        outputs = model(**batch)\n        loss = outputs.loss\n        total_loss += loss.detach().float()\n"
        "        accelerator.backward(loss)\n        optimizer.step()\n        optimizer.zero_grad()\n",
        # Lightning's training_step returns the summed loss to Lightning, which backwards it
        "import torch\nimport lightning as L\nclass Lit(L.LightningModule):\n    def training_step(self, batch, i):\n"
        "        loss = 0\n        for x, y in batch:\n            loss += self.criterion(self.model(x), y)\n        return loss\n",
        # HF Trainer runs the loop: a compute_loss override returns the sum
        "import torch\nfrom transformers import Trainer\nclass MyTrainer(Trainer):\n"
        "    def compute_loss(self, model, inputs, return_outputs=False):\n        loss = 0\n"
        "        for part in inputs['parts']:\n            loss = loss + model(**part).loss\n        return loss\n",
        # a forward summing features into a list it returns
        "import torch\nimport torch.nn as nn\nclass Multi(nn.Module):\n    def forward(self, xs):\n        acc = None\n"
        "        for x in xs:\n            feats = self.net(x)\n            if acc is None:\n                acc = feats\n"
        "            else:\n                for i in range(len(feats)):\n                    acc[i] += feats[i]\n"
        "        return acc\n",
        # not in a loop
        "import torch\ntotal = criterion(model(x), y)\ntotal += criterion(model(x2), y2)\n",
        # a method whose every call site in the module is under no_grad (`self(...)` calls `__call__`)
        "import torch\nclass Scorer:\n    def score_all(self, model, batches):\n        totals = {}\n"
        "        with torch.no_grad():\n            for b in batches:\n                self(b, model, totals)\n"
        "        return totals\n    def __call__(self, batch, model, totals):\n        out = model(batch)\n"
        "        for i in range(len(out)):\n            totals[i] = totals.get(i, 0) + out[i]\n",
        # a meter that turns what it is given into a number first
        "import torch\nclass Meter:\n    def update(self, val, n=1):\n        val = float(val)\n        self.sum += val * n\n\n"
        "def train(model, loader, optimizer, criterion):\n    losses = Meter()\n    for x, y in loader:\n"
        "        loss = criterion(model(x), y)\n        losses.update(loss, x.size(0))\n        optimizer.zero_grad()\n"
        "        loss.backward()\n        optimizer.step()\n",
        # a sum the caller backwards (`acc.total.backward()`): accumulating the graph is its purpose
        "import torch\nclass Acc:\n    def update(self, val, w=1.0):\n        self.total += val * w\n\n"
        "def train(model, loader, optimizer, criterion):\n    acc = Acc()\n    for x, y, z in loader:\n"
        "        out = model(x)\n        acc.update(criterion(out, y))\n        acc.update(criterion(out, z), 0.5)\n"
        "        optimizer.zero_grad()\n        acc.total.backward()\n        optimizer.step()\n        acc.reset()\n",
        # a keyword-only parameter takes nothing by position (the loss goes into `*vals`)
        "import torch\nclass Meter:\n    def update(self, *vals, weight=1.0):\n        self.sum += weight\n\n"
        "def train(model, loader, optimizer, criterion):\n    m = Meter()\n    for x, y in loader:\n"
        "        loss = criterion(model(x), y)\n        m.update(loss)\n        optimizer.zero_grad()\n"
        "        loss.backward()\n        optimizer.step()\n",
        # per-step terms handed to what may backward them
        "import torch\ndef train(model, loader, optimizer, balancer):\n    for batch in loader:\n"
        "        out = model(batch)\n        terms = {}\n        for k in out:\n"
        "            terms[k] = terms.get(k, 0) + out[k].mean()\n        balancer.backward(terms)\n"
        "        optimizer.step()\n",
        # a model's own loop over its layers, in a method its caller runs in the grad mode it chose
        "import torch\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(3)])\n\n"
        "    def goodness(self, h):\n        scores = []\n        for layer in self.layers:\n            h = layer(h)\n"
        "            scores = scores + [h.pow(2).mean(1)]\n        print(sum(scores))\n",
        # per-term sums a loss function returns: its caller backwards them
        "import torch\ndef compute_losses(model, batches):\n    terms = {}\n    for x, t in batches:\n        out = model(x)\n"
        "        for k in out:\n            terms[k] = terms.get(k, 0.0) + (out[k] - t).pow(2).mean()\n    return terms\n",
        # a method that adds its argument into a sum the instance backwards: gradient accumulation
        "import torch\nclass Accumulator:\n    def add(self, loss):\n        self.total += loss\n"
        "    def step(self, optimizer):\n        self.total.backward()\n        optimizer.step()\n        self.total = 0.0\n\n"
        "def train(model, loader, optimizer, criterion):\n    acc = Accumulator()\n    for x, y in loader:\n"
        "        acc.add(criterion(model(x), y))\n        acc.step(optimizer)\n",
        # ... one that backwards what it is given; a meter that adds the number only
        "import torch\nclass Closure:\n    def step(self, loss):\n        self.seen += loss\n        loss.backward()\n\n"
        "def train(model, loader, optimizer, criterion):\n    c = Closure()\n    for x, y in loader:\n"
        "        c.step(criterion(model(x), y))\n        optimizer.step()\n        optimizer.zero_grad()\n",
        # a moving average computed with grad off: it records no graph
        "import torch\nclass EMAMeter:\n    @torch.no_grad()\n    def update(self, val):\n"
        "        self.avg = self.momentum * self.avg + (1 - self.momentum) * val\n\n"
        "def train(model, loader, optimizer, criterion):\n    meter = EMAMeter()\n    for x, y in loader:\n"
        "        loss = criterion(model(x), y)\n        meter.update(loss)\n        optimizer.zero_grad()\n"
        "        loss.backward()\n        optimizer.step()\n",
        # a moving average of the number; a meter whose update keeps the latest value only, over
        # a loss of a tuple that a name other than the backwarded one holds
        "import torch\nclass MovingAverageMeter:\n    def update(self, val):\n"
        "        self.avg = self.momentum * self.avg + (1 - self.momentum) * val.item()\n\n"
        "class Finetuner:\n    def train(self, loader, ce):\n        meter = MovingAverageMeter()\n"
        "        for x, y in loader:\n            top1, ce_loss = self.compute_loss(x, y, ce)\n"
        "            meter.update(ce_loss)\n            loss = ce_loss\n            loss.backward()\n"
        "            self.optimizer.step()\n",
        "import torch\nclass MovingAverageMeter:\n    def update(self, val):\n"
        "        self.avg = self.momentum * self.avg + (1 - self.momentum) * val\n\n"
        "class Finetuner:\n    def train(self, loader, ce):\n        meter = MovingAverageMeter()\n"
        "        for x, y in loader:\n            top1, ce_loss = self.compute_loss(x, y, ce)\n"
        "            meter.update(top1)\n            loss = ce_loss\n            loss.backward()\n"
        "            self.optimizer.step()\n",
        "import torch\nclass Meter:\n    def update(self, val, n=1):\n        self.sum += val.item() * n\n"
        "        self.count += n\n\ndef train(model, loader, optimizer, criterion):\n    meter = Meter()\n"
        "    for x, y in loader:\n        loss = criterion(model(x), y)\n        meter.update(loss, x.size(0))\n"
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
        # concatenating detached outputs
        "import torch\nmodel.eval()\nseen = torch.empty(0)\nfor x in loader:\n"
        "    seen = torch.cat([seen, model(x).detach().cpu()])\n",
    )
    INVALID = (
        # a loss module's running histogram, updated from the distances it scores with their graph
        # (pytorch-metric-learning's DynamicSoftMarginLoss; the next backward fails)
        Invalid(
            "import torch\n\n\nclass SoftMarginLoss(BaseMetricLossFunction):\n"
            "    def compute_loss(self, embeddings, labels):\n        mat = self.distance(embeddings, embeddings)\n"
            "        loss = self.margins(mat, labels)\n        self.update_histogram(loss)\n"
            "        return {\"loss\": (torch.cumsum(self.hist_, 0)[loss.long()] * loss).mean()}\n\n"
            "    def margins(self, mat, labels):\n        return mat.diag() - mat.min(1).values\n\n"
            "    def update_histogram(self, data):\n        idx, alpha = torch.floor(data).long(), torch.frac(data)\n"
            "        self.hist_ = torch.scatter_add(0.99 * self.hist_, 0, idx, 0.01 * (1 - alpha))\n"
            "        self.hist_ /= self.hist_.sum()\n",
        ),
        # a context manager's no_grad, with `enable_grad()` inside it in the same `with`
        Invalid(
            "import contextlib\nimport torch\nimport torch.nn.functional as F\n\n\n"
            "@contextlib.contextmanager\ndef evaluating(model):\n    was = model.training\n    model.eval()\n"
            "    with torch.no_grad():\n        yield model\n    model.train(was)\n\n\n"
            "def adversarial_eval(model, loader, eps=0.03):\n    total = 0\n    adv_logits = []\n"
            "    with evaluating(model), torch.enable_grad():\n        for x, y in loader:\n"
            "            x, y = x.cuda().requires_grad_(True), y.cuda()\n"
            "            loss = F.cross_entropy(model(x), y)\n"
            "            grad, = torch.autograd.grad(loss, x)\n"
            "            x_adv = (x + eps * grad.sign()).detach()\n            out = model(x_adv)\n"
            "            adv_logits.append(out)\n            total += F.cross_entropy(out, y)\n"
            "    return total / len(loader), torch.cat(adv_logits)\n"
        ),
        # ... but the other element is a tensor with its graph
        Invalid(
            "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        out = self.pool(self.conv(x))\n"
            "        ratio = out.size(0) / x.size(0)\n        return self.lin(out), out.mean()\n\n\nmodel = Net().cuda()\n\n\n"
            "def test(loader):\n    model.eval()\n    total = 0\n    for x in loader:\n        out, kept = model(x.cuda())\n"
            "        total += kept\n    return total / len(loader)\n"
        ),
        # a metric's name read inside a loss is no metric: `acc` here is an acceleration
        Invalid(
            "import torch\nimport torch.nn.functional as F\ndef validate(model, loader):\n    model.eval()\n"
            "    total = 0.0\n    for batch in loader:\n        out = model(batch['pos'], batch['vel'])\n"
            "        loss = F.mse_loss(out['acc'], batch['target_acc'])\n        total += loss\n    return total\n",
            "import torch\nimport torch.nn.functional as F\ndef validate(model, loader):\n    model.eval()\n"
            "    total = 0.0\n    for batch in loader:\n        out = model(batch['pos'], batch['vel'])\n"
            "        loss = F.mse_loss(out['acc'], batch['target_acc'])\n        total += loss.detach()\n    return total\n",
        ),
        # an HF Trainer's training_step, overridden to return the backwarded loss undetached
        Invalid(
            "import torch\nfrom transformers import Trainer\n\nclass MyTrainer(Trainer):\n"
            "    def training_step(self, model, inputs, num_items_in_batch=None):\n"
            "        loss = self.compute_loss(model, inputs) + model(**inputs).aux_loss\n"
            "        self.accelerator.backward(loss)\n        return loss\n",
            "import torch\nfrom transformers import Trainer\n\nclass MyTrainer(Trainer):\n"
            "    def training_step(self, model, inputs, num_items_in_batch=None):\n"
            "        loss = self.compute_loss(model, inputs) + model(**inputs).aux_loss\n"
            "        self.accelerator.backward(loss)\n        return loss.detach()\n",
        ),
        # ... the loss from the Trainer's own compute_loss: what is backwarded carries a graph
        Invalid(
            "import torch\nfrom transformers import Trainer\n\nclass MyTrainer(Trainer):\n"
            "    def training_step(self, model, inputs, num_items_in_batch=None):\n"
            "        loss = self.compute_loss(model, inputs)\n"
            "        self.accelerator.backward(loss)\n        return loss\n",
            "import torch\nfrom transformers import Trainer\n\nclass MyTrainer(Trainer):\n"
            "    def training_step(self, model, inputs, num_items_in_batch=None):\n"
            "        loss = self.compute_loss(model, inputs)\n"
            "        self.accelerator.backward(loss)\n        return loss.detach()\n",
        ),
        # a running average keeps every value it has seen with their graphs
        Invalid(
            "import torch\nmodel.eval()\nema = {\"loss\": 0.0}\nfor x, y in val_loader:\n"
            "    loss = criterion(model(x), y)\n    ema[\"loss\"] = 0.9 * ema[\"loss\"] + 0.1 * loss\n",
            "import torch\nmodel.eval()\nema = {\"loss\": 0.0}\nfor x, y in val_loader:\n"
            "    loss = criterion(model(x), y)\n    ema[\"loss\"] = 0.9 * ema[\"loss\"] + (0.1 * loss).detach()\n",
        ),
        Invalid(
            "import torch\n\ndef validate(model, loader):\n    model.eval()\n    total = 0.0\n"
            "    for x, y in loader:\n        loss = criterion(model(x), y)\n        total += loss\n"
            "    return total / len(loader)\n",
            "import torch\n\ndef validate(model, loader):\n    model.eval()\n    total = 0.0\n"
            "    for x, y in loader:\n        loss = criterion(model(x), y)\n        total += loss.detach()\n"
            "    return total / len(loader)\n",
        ),
        # a sum reset every epoch only: it links every step of the epoch
        Invalid(
            "import torch\ndef train(model, loader, optimizer, heads, epochs):\n    for epoch in range(epochs):\n"
            "        spread = 0\n        for x, y in loader:\n            optimizer.zero_grad()\n"
            "            out = model(x)\n"
            "            for i in range(len(heads)):\n                spread += criterion(out[i], y)\n"
            "            criterion(out, y).backward()\n            optimizer.step()\n        print(spread.item())\n",
            "import torch\ndef train(model, loader, optimizer, heads, epochs):\n    for epoch in range(epochs):\n"
            "        spread = 0\n        for x, y in loader:\n            optimizer.zero_grad()\n"
            "            out = model(x)\n"
            "            for i in range(len(heads)):\n                spread += criterion(out[i], y).detach()\n"
            "            criterion(out, y).backward()\n            optimizer.step()\n        print(spread.item())\n",
        ),
        # a training loop: reported, but without a memory claim
        Invalid(
            "import torch\nrunning = 0\nfor x, y in loader:\n    optimizer.zero_grad()\n"
            "    loss = criterion(model(x), y)\n    loss.backward()\n    optimizer.step()\n"
            "    running = running + loss\n",
            "import torch\nrunning = 0\nfor x, y in loader:\n    optimizer.zero_grad()\n"
            "    loss = criterion(model(x), y)\n    loss.backward()\n    optimizer.step()\n"
            "    running = running + loss.detach()\n",
        ),
        Invalid(
            "import torch\nimport torch.nn.functional as F\nfor batch in loader:\n    out = model(batch.x)\n"
            "    stats['loss'] += F.mse_loss(out, batch.y) * batch.n\n",
            "import torch\nimport torch.nn.functional as F\nfor batch in loader:\n    out = model(batch.x)\n"
            "    stats['loss'] += (F.mse_loss(out, batch.y) * batch.n).detach()\n",
        ),
        Invalid(
            "import torch\nclass Runner:\n    def run(self, loader):\n        for x, y in loader:\n"
            "            self.total += self.criterion(self.model(x), y)\n",
            "import torch\nclass Runner:\n    def run(self, loader):\n        for x, y in loader:\n"
            "            self.total += self.criterion(self.model(x), y).detach()\n",
        ),
        # per-term totals, updated in a nested loop over a dict of losses
        Invalid(
            "import torch\n\ndef evaluate(model, loader):\n    model.eval()\n    totals = {}\n    for batch in loader:\n"
            "        terms = model(batch)\n        for name, term in terms.items():\n"
            "            totals[name] = totals.get(name, 0.0) + term\n        for name in terms:\n"
            "            totals[name] += terms[name]\n    return totals\n",
            "import torch\n\ndef evaluate(model, loader):\n    model.eval()\n    totals = {}\n    for batch in loader:\n"
            "        terms = model(batch)\n        for name, term in terms.items():\n"
            "            totals[name] = totals.get(name, 0.0) + term.detach()\n        for name in terms:\n"
            "            totals[name] += terms[name].detach()\n    return totals\n",
        ),
        # a stream read until it ends
        Invalid(
            "import torch\n\ndef evaluate(model, stream):\n    model.eval()\n    total = 0.0\n    while True:\n"
            "        batch = next(stream, None)\n        if batch is None:\n            break\n"
            "        total += criterion(model(batch.x), batch.y)\n    return total\n",
            "import torch\n\ndef evaluate(model, stream):\n    model.eval()\n    total = 0.0\n    while True:\n"
            "        batch = next(stream, None)\n        if batch is None:\n            break\n"
            "        total += criterion(model(batch.x), batch.y).detach()\n    return total\n",
        ),
        # a running average per loss term in a training loop (the dict stores into itself only)
        Invalid(
            "import torch\ndef train(model, loader, optimizer):\n    ema = {}\n    for batch in loader:\n"
            "        losses = model(batch)\n        optimizer.zero_grad()\n        sum(losses.values()).backward()\n"
            "        optimizer.step()\n        for k in losses:\n"
            "            ema[k] = 0.9 * ema.get(k, 0.0) + 0.1 * losses[k]\n",
            "import torch\ndef train(model, loader, optimizer):\n    ema = {}\n    for batch in loader:\n"
            "        losses = model(batch)\n        optimizer.zero_grad()\n        sum(losses.values()).backward()\n"
            "        optimizer.step()\n        for k in losses:\n"
            "            ema[k] = 0.9 * ema.get(k, 0.0) + (0.1 * losses[k]).detach()\n",
        ),
        # ... its first value the loss itself: reported, not fixed (`.detach()` on one side keeps the first graph)
        Invalid(
            "import torch\ndef train(model, loader, optimizer):\n    ema = {}\n    for batch in loader:\n"
            "        losses = model(batch)\n        optimizer.zero_grad()\n        sum(losses.values()).backward()\n"
            "        optimizer.step()\n        for k, v in losses.items():\n"
            "            ema[k] = 0.9 * ema.get(k, v) + 0.1 * v\n"
        ),
        # a loss handed to an average meter, whose update adds it into its running sum
        Invalid(
            "import torch\nclass AverageMeter:\n    def update(self, val, n=1):\n        self.sum += val * n\n"
            "        self.count += n\n\ndef train(model, loader, optimizer, criterion):\n    losses = AverageMeter()\n"
            "    for x, y in loader:\n        loss = criterion(model(x), y)\n        losses.update(loss, x.size(0))\n"
            "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
            "import torch\nclass AverageMeter:\n    def update(self, val, n=1):\n        self.sum += val * n\n"
            "        self.count += n\n\ndef train(model, loader, optimizer, criterion):\n    losses = AverageMeter()\n"
            "    for x, y in loader:\n        loss = criterion(model(x), y)\n        losses.update(loss.detach(), x.size(0))\n"
            "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
        ),
        # ... a moving average of it, the loss taken from a tuple its step returns and backwarded
        # under another name (ReMoS's `MovingAverageMeter`)
        Invalid(
            "import torch\nclass MovingAverageMeter:\n    def update(self, val):\n"
            "        self.avg = self.momentum * self.avg + (1 - self.momentum) * val\n\n"
            "class Finetuner:\n    def train(self, loader, ce):\n        meter = MovingAverageMeter()\n"
            "        for x, y in loader:\n            top1, ce_loss = self.compute_loss(x, y, ce)\n"
            "            meter.update(ce_loss)\n            loss = ce_loss\n            loss.backward()\n"
            "            self.optimizer.step()\n",
            "import torch\nclass MovingAverageMeter:\n    def update(self, val):\n"
            "        self.avg = self.momentum * self.avg + (1 - self.momentum) * val\n\n"
            "class Finetuner:\n    def train(self, loader, ce):\n        meter = MovingAverageMeter()\n"
            "        for x, y in loader:\n            top1, ce_loss = self.compute_loss(x, y, ce)\n"
            "            meter.update(ce_loss.detach())\n            loss = ce_loss\n            loss.backward()\n"
            "            self.optimizer.step()\n",
        ),
        # a list grown by concatenation: each item detached
        Invalid(
            "import torch\ndef train(model, loader, opt):\n    hist = []\n    for x, y in loader:\n"
            "        loss = torch.nn.functional.cross_entropy(model(x), y)\n        opt.zero_grad()\n"
            "        loss.backward()\n        opt.step()\n        hist = hist + [loss]\n    return hist\n",
            "import torch\ndef train(model, loader, opt):\n    hist = []\n    for x, y in loader:\n"
            "        loss = torch.nn.functional.cross_entropy(model(x), y)\n        opt.zero_grad()\n"
            "        loss.backward()\n        opt.step()\n        hist = hist + [loss.detach()]\n    return hist\n",
        ),
        # accumulation by rebinding: `.cpu()` keeps the graph, the copy is made after detaching
        Invalid(
            "import torch\n\ndef embed(model, loader):\n    model.eval()\n    bank = torch.empty(0)\n"
            "    for x in loader:\n        out = model(x)\n        bank = torch.cat((bank, out.cpu()))\n    return bank\n",
            "import torch\n\ndef embed(model, loader):\n    model.eval()\n    bank = torch.empty(0)\n"
            "    for x in loader:\n        out = model(x)\n        bank = torch.cat((bank, out.detach().cpu()))\n    return bank\n",
        ),
    )

    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        super().__init__(context)
        self._running_reported: Set[str] = set()  # running statistics already reported

    def visit_Return(self, node: cst.Return) -> None:
        """An HF `Trainer` subclass's `training_step` that backwards its loss and returns it with
        its graph: the HF loop adds it into its running loss every step."""
        facts = self.facts
        func = facts.tree.function_of(node)
        if node.value is None or func is None or func.name.value != HF_SUMMED_STEP or \
                not facts.regions.in_hf_trainer(func):
            return
        if not facts.roles.backwards_in(func.body) or not facts.values.carries_grad(node.value, node):
            return
        self.report(node.value, (
            f"the HF Trainer adds what `{HF_SUMMED_STEP}` returns into its running loss on every step "
            f"(`tr_loss += ...`), so returning it with its autograd graph links every step's graph into that sum, "
            f"a chain that grows until the next logging step; return `{show(node.value)}.detach()` (HF's own "
            f"`{HF_SUMMED_STEP}` does)"),
            Fix((Replace(node.value, detached(node.value)),), Safety.SAFE, "return the loss detached"))

    def visit_Call(self, node: cst.Call) -> None:
        """`meter.update(loss, n)`, a method that adds its argument into a running sum its
        instance keeps (`self.sum += val * n`), in this module or another of the project."""
        func = node.func
        if type(func) is not cst.Attribute or not node.args:
            return  # (identity, not ABC isinstance: every call of the module passes here)
        facts = self.facts
        statement = facts.tree.parent(node)
        if type(statement) is not cst.Expr or not facts.values.may_keep_arguments(node, summed=True) or \
                not facts.tree.loops_around(node) or facts.regions.grad_enabled(node) is not True:
            return  # (its result unused: nothing the call returns can be backwarded)
        holder = root_name(func.value)  # type: ignore[attr-defined]
        loop = facts.tree.loops_around(node)[0]
        if holder is None or holder != "self" and (facts.values.reset_in_iteration(loop, holder, node) or
                                                   facts.values.reset_each_step(node, holder)):
            return  # a meter made afresh every iteration, or every step
        added = [a for a in facts.values.accumulated_arguments(node) if facts.values.carries_grad(a.value, node)]
        if not added:
            return
        kept = {id(a) for a in facts.values.kept_arguments(node, graph=True)}
        added = [a for a in added if id(a) not in kept]  # (also appended: MEM202 reports the call)
        dotted = dotted_name(func.value) or holder  # type: ignore[attr-defined]
        if not added or facts.values.reaches_backward(facts.tree.scope_of(node), {holder, dotted}) or \
                holder == "self" and facts.values.attribute_backwarded(dotted):
            return  # the sum is backwarded (`meter.total.backward()`): accumulating the graph is its purpose
        context = self._context(loop)
        for arg in added:
            fixed = detach_before_move(arg.value)
            fix = None if fixed is None else Fix((Replace(arg.value, fixed),), Safety.SAFE, f"pass `{show(fixed)}`")
            self.report(arg.value, self._message(
                f"`{show(func)}(...)` adds `{show(arg.value)}` with its autograd graph into a running sum that "
                f"`{show(func.value)}` keeps",  # type: ignore[attr-defined]
                show(func.value), f"pass `{show(fixed or detached(arg.value))}`", context,  # type: ignore[attr-defined]
                over_dataset(facts, node)), fix)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if type(node.operator) is cst.AddAssign:
            self._check(node, node.target, node.value)
        self._check_running_state(node, node.target, node.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if len(node.targets) != 1:
            return
        target = node.targets[0].target
        self._check_running_state(node, target, value)
        text = dotted_name(holder(target))
        if text is None:
            return
        if type(value) is cst.BinaryOperation and type(value.operator) is cst.Add:
            for kept, added in ((value.left, value.right), (value.right, value.left)):
                if _same_entry(_unscaled(kept), target):  # `total + loss`, `0.9 * ema + 0.1 * loss`
                    # `ema.get(k, loss)`: the first value kept carries the graph too, and `.detach()` on the other
                    # side would not drop it
                    default = _unscaled(kept).args[1:2] if type(_unscaled(kept)) is cst.Call else ()  # type: ignore[attr-defined]
                    fixable = not any(self.facts.values.carries_grad(a.value, node) for a in default)
                    self._check(node, target, added, fixable)
                    break
        elif type(value) is cst.Call and self.facts.names.call_name(value) == "torch.cat" and value.args and \
                type(value.args[0].value) in (cst.Tuple, cst.List):
            parts = [e.value for e in value.args[0].value.elements]  # `acc = torch.cat((acc, out))`
            if any(_same_entry(p, target) for p in parts):
                for part in parts:
                    if not _same_entry(part, target) and not type(part) is cst.StarredElement:
                        self._check(node, target, part)

    def _check_running_state(self, node: Union[cst.Assign, cst.AugAssign], target: cst.BaseExpression,
                             value: cst.BaseExpression) -> None:
        """`self.hist_ = torch.scatter_add(0.9 * self.hist_, 0, idx, 0.1 * alpha)` in a loss
        module, `alpha` computed from the outputs it scores (pytorch-metric-learning's
        DynamicSoftMarginLoss): a running statistic the module keeps, updated with the step's
        graph, links each step's graph to the last one's, and the next backward that reads it
        reaches into a graph already freed."""
        facts = self.facts
        state = dotted_name(target)
        if type(target) is not cst.Attribute or root_name(target) != "self" or state is None or \
                facts.regions.grad_enabled(node) is not True:
            return
        tree = facts.tree
        reads_itself = type(node) is cst.AugAssign or any(  # (not `self.avg.detach()`: cut every step)
            type(part) is cst.Attribute and dotted_name(part) == state and not (
                type(tree.parent(part)) is cst.Attribute and tree.parent(part).attr.value in _DETACHED_READS)  # type: ignore[attr-defined]
            for part in expression_nodes(value))
        if not reads_itself or not facts.values.from_loss_inputs(value, node) or state in self._running_reported:
            return
        self._running_reported.add(state)
        self.report(node, (
            f"`{state}`, a running statistic the loss module keeps, is updated from what it scores with their "
            f"graph: each step's graph is linked to the previous one's, which backward has already freed, so "
            f"the history grows and a backward that reads `{state}` fails or reaches back; update it from "
            f"`.detach()`ed values"))

    def _check(self, node: cst.CSTNode, target: cst.BaseExpression, value: cst.BaseExpression,
               fixable: bool = True) -> None:
        facts = self.facts
        loops = facts.tree.loops_around(node)
        root = root_name(target)
        if not loops or root is None or facts.regions.grad_enabled(node) is not True:
            return
        if not facts.values.carries_grad(value, node):
            return
        if (type(target) is cst.Name or type(holder(target)) is cst.Name) and (
                facts.values.reset_in_iteration(loops[0], root, node) or facts.values.reset_each_step(node, root)):
            return  # `total = 0` or `terms = {}` in the iteration, or in the step around it: nothing outlives it
        scope = facts.tree.scope_of(node)
        accumulator = {root} if type(target) is cst.Name else {root, dotted_name(target) or root}
        if facts.values.reaches_backward(scope, accumulator) or facts.values.handed_to_backward(scope, {root}):
            return  # backwarded, or handed to what may backward it (`balancer.backward(terms)`)
        if not type(target) is cst.Name and facts.values.attribute_backwarded(dotted_name(holder(target)) or ""):
            return  # `self.total` backwarded by another method
        local = type(holder(target)) is cst.Name  # `total`, `stats["loss"]`; not `self.total`
        if local and facts.values.leaves_scope(scope, {root}, besides=node) and (
                facts.phase.in_training_function(node) or facts.phase.eval_evidence(loops[0]) is None) and \
                not facts.values.backwarded_in(value, loops[0]):
            return  # a loss function returning its sum: the caller may backward it
        if not local and facts.phase.in_training_function(node):
            return  # `self.aux_loss += ...` in a forward: the caller may backward it
        context = self._context(loops[0])
        if context != "training" and facts.in_model_code(node):
            return  # a model's own loop (over its layers) runs in the grad mode its caller chose
        fixed = _detached_items(value) if type(value) in (cst.List, cst.Tuple) else detach_before_move(value)
        fix = None if fixed is None or not fixable else \
            Fix((Replace(value, fixed),), Safety.SAFE, f"accumulate `{show(fixed)}`")
        acc = show(target)
        self.report(node, self._message(
            f"`{acc}` accumulates a value with its autograd graph", acc, f"accumulate `{show(fixed or detached(value))}`",
            context, over_dataset(facts, node)), fix)

    def _context(self, loop: cst.CSTNode) -> str:
        """"training" where the loop backwards, "unknown" where it hands the graph to code that may, else
        "no-backward"."""
        facts = self.facts
        if any(facts.roles.backwards_in(outer) for outer in [loop, *facts.tree.loops_around(loop)]):
            return "training"
        return "unknown" if facts.values.hands_graph_away(loop) else "no-backward"

    @staticmethod
    def _message(what: str, acc: str, advice: str, context: str, measured: bool) -> str:
        """`what` (`total` accumulates a value with its autograd graph), into `acc`."""
        if context == "training":
            return (f"{what}; in this training loop "
                    f"backward() frees each step's saved tensors, so it holds GPU memory only until "
                    f"backward{' (no measurable cost on an H200)' if measured else ''}, but `{acc}` links "
                    f"every step's autograd history: {advice}")
        if context == "unknown":
            return (f"{what}, which stays linked to every "
                    f"iteration's graph while `{acc}` lives (their saved activations too, unless a "
                    f"backward frees them): {advice}")
        figure = " (a validation loop over a dataset doing this peaked 1 GB higher on an H200 than with `.item()`)"
        return (f"{what}, keeping every iteration's "
                f"saved activations alive while `{acc}` lives{figure if measured else ''}: {advice}")
