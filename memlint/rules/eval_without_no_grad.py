"""MEM203 eval-without-no-grad."""

from __future__ import annotations

from typing import List, Optional, Tuple, Union

import libcst as cst

from memlint.analysis.figures import over_dataset
from memlint.analysis.frameworks import HF_EVAL_HOOKS
from memlint.analysis.tree import dotted_name, walk_scope
from memlint.findings import Fix, Replace, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import show

Loop = Union[cst.For, cst.While]
_WHY = {
    "eval-mode": "after `.eval()`",
    "named": "in an evaluation function",
    "script": "in an inference script that never calls backward",
}


def _suspends(loop: Loop) -> bool:
    """A `yield` or `await` in the loop: a `with` around it would leak no-grad mode to the caller."""
    if isinstance(loop, cst.For) and loop.asynchronous is not None:
        return True
    return any(isinstance(n, (cst.Yield, cst.Await)) for n in walk_scope(loop))


class EvalWithoutNoGrad(Rule):
    """
    ## What it does
    Finds a model called (`model(x)`, `model.encode(x)`) in a loop that never calls `backward()`
    (validation, evaluation, inference) outside `torch.no_grad()` / `torch.inference_mode()`,
    also when the model is called by a helper the loop calls. It looks only at loops that are
    clearly evaluation: after `model.eval()`, in a function named like
    `evaluate`/`validate`/`predict`/`infer`/`generate`, or in a script that never trains.
    Backwards count by scope: a `train()` that backwards its own `loss` says nothing about the
    `loss` of `validate()`.

    Also an evaluation hook that a framework calls on every batch without turning grad off
    itself: an HF `Trainer` subclass's `prediction_step` (HF's own enters `torch.no_grad()`
    inside, so an override that runs the model must too). Lightning's `validation_step`,
    `test_step` and `predict_step` run under no_grad already.

    ## Why is this bad?
    With grad enabled, every forward records a graph and saves the activations a backward would
    need. Nothing backwards, so they stay alive as long as any output does: an eval loop over a
    dataset keeping its outputs peaked at 1792 MB on an H200, against 537 MB under
    `torch.no_grad()`. The message quotes that figure only for loops over a data loader
    (memlint.analysis.figures); elsewhere (a short test, a decoding loop) it says why without one.

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

    ## When it is not reported
    Loops with a backward or an optimizer step (training, gradient accumulation), loops inside
    `training_step`, `compute_loss`, `forward` or `accelerator.accumulate`, Lightning's
    `validation_step` (Lightning disables grad), functions decorated `@torch.no_grad()` or
    called only under no_grad, HF `generate()` (already no-grad), loops whose outputs are
    backwarded after the loop, loops that ask for gradients (`torch.autograd.grad`,
    `requires_grad_()`, `enable_grad()`), and loops in methods of a model class (an
    `nn.Module`, a class defining `forward`, a subclass of an `...Encoder`/`...Model`-like base):
    model code runs in the grad mode its caller chose.

    ## Fix
    Wrap the whole loop statement in `with torch.no_grad():`.

    ## Fix safety
    Safe: the loop computes the same values; its outputs just carry no graph. No fix is offered
    when the loop `yield`s or `await`s (the no-grad mode would leak into the caller while it is
    suspended): decorate the function with `@torch.no_grad()` instead; nor when a model class of
    this module asks for gradients in its own code (under no_grad that forward would fail).
    """

    CODE = "MEM203"
    NAME = "eval-without-no-grad"
    MESSAGE = "a model runs in an evaluation loop with autograd recording"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.PEAK_LOWER
    # the evidence of evaluation it needs: `.eval()`, a function name, loading trained weights
    REQUIRES = ("eval", "val", "test", "predict", "infer", "generat", "sampl", "load")

    VALID = (
        # HF's prediction_step under no_grad; Lightning runs validation_step without grad itself
        "import torch\nfrom transformers import Trainer\n\nclass MyTrainer(Trainer):\n"
        "    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):\n"
        "        with torch.no_grad():\n            outputs = model(**inputs)\n"
        "        return outputs.loss, outputs.logits, inputs[\"labels\"]\n",
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
    )
    INVALID = (
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
    )

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        """An evaluation hook a framework calls per batch without turning grad off itself (an HF
        `Trainer` subclass's `prediction_step`: HF's own enters `torch.no_grad()` inside it)."""
        facts = self.facts
        if node.name.value not in HF_EVAL_HOOKS or not facts.regions.in_hf_trainer(node) or \
                facts.regions.grad_enabled_by_decorator(node) is not None or facts.values.requires_grad_off:
            return
        runs = [call for call, _ in facts.calls.calls_in(node.body)
                if (facts.roles.is_forward(call) or dotted_name(call.func) == "self.compute_loss")
                and facts.regions.grad_enabled(call) is not False]
        if not runs or facts.roles.backwards_in(node.body) or facts.roles.asks_for_grad(node):
            return
        no_grad = facts.names.local_name_for("torch.no_grad")
        fix = None
        if no_grad is not None:
            decorator = cst.Decorator(cst.Call(cst.parse_expression(no_grad)))
            fix = Fix((Replace(node, node.with_changes(decorators=[decorator, *node.decorators])),), Safety.SAFE,
                      f"decorate `{node.name.value}` with `@{no_grad}()`")
        self.report(runs[0], (
            f"`{show(runs[0].func)}` runs in `{node.name.value}`, which the HF Trainer calls on every evaluation "
            f"batch without turning autograd off (its own `{node.name.value}` does so inside): every forward saves "
            f"activations for a backward that never comes, and the outputs it returns keep them; decorate it with "
            f"`@torch.no_grad()`"), fix)

    def visit_For(self, node: cst.For) -> None:
        self._check(node)

    def visit_While(self, node: cst.While) -> None:
        self._check(node)

    def _check(self, loop: Loop) -> None:
        facts = self.facts
        if facts.values.requires_grad_off or facts.phase.is_training(loop):
            return
        if any(not facts.phase.is_training(outer) and facts.phase.eval_evidence(outer) is not None
               for outer in facts.tree.loops_around(loop)):
            return  # the outermost evaluation loop is the one to wrap
        forwards = self._forwards(loop)
        if not forwards:
            return
        why = facts.phase.eval_evidence(loop)
        if why is None or facts.roles.asks_for_grad(loop) or facts.values.hands_graph_away(loop):
            return
        if self._in_model_code(loop):  # (asked late: what a class is may be a question to the project)
            return
        scope = facts.tree.scope_of(loop)
        bound = {b.name for name_binds in (facts.scopes.bindings(scope, n) for n in self._names_bound(loop))
                 for b in name_binds}
        if bound and facts.values.reaches_backward(scope, bound):
            return
        forward, site = forwards[0]
        where = "" if forward is site else f" (through `{show(site.func)}`)"
        fix = None if self._models_ask_for_grad() else self._fix(loop)
        advice = ("wrap the loop in `with torch.no_grad():`" if fix is not None or not _suspends(loop)
                  else "decorate the function with `@torch.no_grad()`")
        measured = (" (an eval loop over a dataset keeping its outputs peaked at 1792 MB on an H200, 537 MB "
                    "under no_grad)" if over_dataset(facts, loop) else
                    ", and they stay alive as long as any output computed from them does")
        message = (f"`{show(forward.func)}` runs{where} in this evaluation loop ({_WHY[why]}) with autograd "
                   f"recording, so every forward saves activations for a backward that never comes"
                   f"{measured}: {advice}")
        self.report(site, message, fix)

    def _forwards(self, loop: Loop) -> List[Tuple[cst.Call, cst.Call]]:
        facts = self.facts
        found = [(call, site) for call, site in facts.roles.forwards_in(loop)
                 if facts.regions.grad_enabled(call) is True and facts.regions.grad_enabled(site) is True]
        return sorted(found, key=lambda pair: facts.tree.order(pair[1]))

    def _in_model_code(self, loop: Loop) -> bool:
        """In a method of a model class: its caller decides the grad mode."""
        tree = self.facts.tree
        func = tree.function_of(loop)
        while func is not None:
            klass = tree.class_of(func)
            if klass is not None and self.facts.receivers.is_model_class(klass):
                return True
            func = tree.function_of(func)
        return False

    def _models_ask_for_grad(self) -> bool:
        """A model class of this module needs autograd in its own code (`torch.autograd.grad`
        in a forward): under no_grad it would fail, so `no_grad` is no fix."""
        facts = self.facts
        return any(facts.roles.asks_for_grad(method) for klass in facts.scopes.classes.values()
                   if facts.receivers.is_model_class(klass)
                   for method in klass.body.body if isinstance(method, cst.FunctionDef))

    @staticmethod
    def _names_bound(loop: Loop) -> List[str]:
        names = []
        for node in walk_scope(loop):
            if isinstance(node, cst.Assign):
                for target in node.targets:
                    if isinstance(target.target, cst.Name):
                        names.append(target.target.value)
            elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
                    node.func.attr.value in ("append", "extend", "insert") and isinstance(node.func.value, cst.Name):
                names.append(node.func.value.value)
        return names

    def _fix(self, loop: Loop) -> Optional[Fix]:
        no_grad = self.facts.names.local_name_for("torch.no_grad")
        if no_grad is None or _suspends(loop):
            return None
        wrapped = cst.With(
            items=[cst.WithItem(cst.Call(cst.parse_expression(no_grad)))],
            body=cst.IndentedBlock([loop.with_changes(leading_lines=())]),
            leading_lines=loop.leading_lines,
        )
        return Fix((Replace(loop, wrapped),), Safety.SAFE, "wrap the loop in `with torch.no_grad():`")
