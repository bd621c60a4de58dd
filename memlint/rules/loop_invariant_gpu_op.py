"""MEM102 loop-invariant-gpu-op."""

from __future__ import annotations

import math
from typing import List, Optional, Set, Tuple

import libcst as cst


from memlint.analysis.hoisting import Hoistable
from memlint.analysis.loops import Loop
from memlint.analysis.purity import Purity
from memlint.analysis.tree import walk, walk_scope
from memlint.findings import Edit, Fix, InsertAfter, InsertBefore, Remove, Replace, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import show
from memlint.torch_target import TorchVersion


# `torch.where(cond, x, number)`: a number as an operand, with numbers' type promotion
_WHERE_TAKES_NUMBERS = TorchVersion(1, 12)
# A fill this far from zero masks scores out (before a softmax, a min): `-9e15 * torch.ones_like(e)`.
_MASKING_FILL = 1e4


def _masking_fill(number: cst.BaseExpression) -> bool:
    """Whether `number` is a masking fill, a literal of magnitude 1e4 or more or an infinity
    (`-9e15`, `float("-inf")`, `-math.inf`; not a large whole number, a token id: `50256`): its tensor is as large as the scores it masks
    (nodes x nodes, heads x tokens x tokens). A fill of zeros, ones or a label (`-100`) masks
    log-probabilities, timesteps or token ids, usually a small tensor beside the step's
    forward, whose one allocation no maintainer changes."""
    value = _literal_value(number)
    if value is None or abs(value) < _MASKING_FILL:
        return False
    return value < 0 or math.isinf(value) or type(number) is not cst.Integer  # (a large whole number is a token id)


def _literal_value(number: cst.BaseExpression) -> Optional[float]:
    """The value of a number written as a literal, `float("inf")`, `math.inf` (any module's
    `inf`), with a sign; None for anything else."""
    kind = type(number)
    if kind is cst.UnaryOperation and type(number.operator) in (cst.Minus, cst.Plus):  # type: ignore[attr-defined]
        inner = _literal_value(number.expression)  # type: ignore[attr-defined]
        return None if inner is None else -inner if type(number.operator) is cst.Minus else inner  # type: ignore[attr-defined]
    try:
        if kind in (cst.Float, cst.Integer):
            return float(number.evaluated_value)  # type: ignore[attr-defined]
        if kind is cst.Attribute and number.attr.value == "inf":  # type: ignore[attr-defined]
            return math.inf
        if kind is cst.Call and type(number.func) is cst.Name and number.func.value == "float" and \
                len(number.args) == 1 and type(number.args[0].value) is cst.SimpleString:  # type: ignore[attr-defined]
            return float(number.args[0].value.evaluated_value)  # type: ignore[attr-defined]
    except (ValueError, OverflowError, TypeError):
        return None
    return None


class LoopInvariantGpuOp(Rule):
    """
    ## What it does
    Finds GPU work that computes the same tensor on every iteration of a loop: a statement
    `name = <expr>` directly in the loop body whose value is built only by deterministic torch
    factories and operations (`torch.eye(n, device=d)`, `torch.ones(...).cuda()`,
    `torch.tril(...)`, `w.to(device)`, `A @ B`) from inputs that never change in the loop, also
    when it is computed by a pure helper of the same file called with unchanging arguments
    (reported at the call). Also finds such work in a module's `forward`, whose inputs are only
    constants and attributes set in `__init__`: it is rebuilt on every call, that is every step
    (not a tensor of one literal number: `torch.tensor(1.0, device=x.device)`). And a tensor
    of one number shaped like another, built every step only to be an operand of `torch.where` (`zero_vec = -9e15 * torch.ones_like(e)`, `torch.where(adj > 0, e, zero_vec)`):
    `torch.where` takes the number itself. Only for a masking fill, a number of magnitude 1e4 or
    more or an infinity (`-9e15`, `float("-inf")`): its tensor is as large as the scores it masks. A fill of zeros or of a label
    (`torch.zeros_like(log_probs)`, `torch.full_like(ids, -100)`) is left alone: read on real
    trainers, such masks were timesteps, token ids and top-k log-probabilities, small beside
    the step's forward, and no maintainer would change them.

    ## Why is this bad?
    Every iteration allocates the tensor again and launches the kernels (or the host-to-device
    copy) that fill it, and throws the previous one away, for a value that never changes. On an
    H200, hoisting a loop-invariant `torch.ones(n, n).cuda()` made the loop 6x faster at the same
    peak memory.

    ## Example
    ```python
    for x, y in loader:
        causal = torch.triu(torch.ones(t, t, device=device), diagonal=1).bool()
        loss = criterion(model(x, mask=causal), y)
    ```

    Use instead:
    ```python
    causal = torch.triu(torch.ones(t, t, device=device), diagonal=1).bool()
    for x, y in loader:
        loss = criterion(model(x, mask=causal), y)
    ```

    ## When it is not reported
    The purity model is an allow-list: a call that is not on it, a random factory
    (`torch.randn`), an in-place operation, `out=` or `requires_grad=True` make the value
    impure. An input that the loop rebinds or changes in place (also in a helper it calls), a
    model's weights or an optimizer's state (changed by `step()`), a function argument used as a
    tensor (it may require grad), an attribute stored in the loop, a statement under `if`,
    `with` or `try` in the loop (hoisting would leave that context), a value changed in place
    or kept beyond its iteration, work on the CPU only, and `torch.set_default_dtype` or
    `torch.cuda.set_device` in the loop: not reported. Nor a tensor too small for its
    allocation to matter, however it is placed: one number (`torch.zeros(()).cuda()`); in a
    loop, a fill of a batch size (`batch_size`, `bs`, `args.batch_size`) and at most 16 values a
    sample (a GAN's `torch.ones(batch_size, 1).to(device)` labels); in `forward`, a table of a
    literal shape under 4,096 elements (`torch.eye(3, device=x.device)`, stylegan3's
    augmentation matrices), for which no maintainer registers a buffer. Each is one small
    kernel or copy per step.

    ## Fix
    Moves the statement to just before the loop (the call of a pure helper too: the helper is
    not changed). In `forward`, registers the value once in `__init__` with
    `self.register_buffer(name, value, persistent=False)` (without its `device=`: the buffer
    follows `module.to(...)`) and reads the buffer in `forward`.

    The number given to `torch.where` in place of its tensor: `torch.where(adj > 0, e, -9e15)`,
    and the statement that built the tensor removed.

    ## Fix safety
    `torch.where` with a number, for `c * torch.ones_like(x)`: safe, on torch 1.12 and later
    (`torch.where` promotes the number as the product did; the fix is held back for an older
    `target-torch`). For `torch.full_like(x, n)`: unsafe, since it keeps `x`'s dtype where the
    number promotes: a bool `x` gives an int64 result. The tensor must be shaped like the other operand as it is at the call, and read
    nowhere else.

    Hoisting, in a loop: safe, the value is computed by the same pure operations from the same
    inputs, once. Unsafe in `forward`: the buffer moves and changes dtype with the module
    (`model.half()` makes it float16), and lives on the module's device rather than the input's.
    """

    CODE = "MEM102"
    NAME = "loop-invariant-gpu-op"
    MESSAGE = "the same GPU tensor is computed on every iteration: its inputs never change in the loop"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.TIME_LOWER

    VALID = (
        # a GAN's real and fake labels, one value per sample: one small copy a step, no change worth making
        "import torch\n\n\ndef train(G, D, loader, batch_size, device):\n"
        "    for images, _ in loader:\n        real_labels = torch.ones(batch_size, 1).to(device)\n"
        "        fake_labels = torch.zeros(batch_size, 1).to(device)\n"
        "        loss = criterion(D(images.to(device)), real_labels) + criterion(D(G(images.to(device))), fake_labels)\n"
        "        loss.backward()\n",
        # ... its size given by keyword
        "import torch\n\n\ndef train(D, loader, batch_size, device, opt):\n    for x, _ in loader:\n"
        "        real = torch.ones(size=(batch_size, 1)).to(device)\n        loss = ((D(x.to(device)) - real) ** 2).mean()\n"
        "        loss.backward()\n        opt.step()\n",
        # a zero-dimensional tensor placed after it is made: one number
        "import torch\n\n\nclass NoBottleneck(torch.nn.Module):\n    def __init__(self, levels):\n"
        "        super().__init__()\n        self.levels = levels\n\n    def forward(self, xs):\n"
        "        zero = torch.zeros(()).cuda()\n"
        "        return xs, [zero for _ in range(self.levels)]\n",
        # the operand bound beside another name in one statement: removing it would lose `scale`
        "import torch\nclass GraphAttention(torch.nn.Module):\n    def forward(self, h, adj):\n"
        "        e = self.scores(h)\n        zero_vec, scale = -9e15 * torch.ones_like(e), h.size(-1) ** -0.5\n"
        "        attention = torch.where(adj > 0, e, zero_vec) * scale\n        return attention @ h\n",
        # torch.where's operand shaped like another tensor, read elsewhere too, or a float cast by full_like
        "import torch\nclass GraphAttention(torch.nn.Module):\n    def forward(self, h, adj):\n"
        "        e = self.scores(h)\n        return torch.where(adj > 0, e, -9e15 * torch.ones_like(adj))\n",
        "import torch\nclass GraphAttention(torch.nn.Module):\n    def forward(self, h, adj):\n"
        "        e = self.scores(h)\n        floor = -9e15 * torch.ones_like(e)\n"
        "        return torch.where(adj > 0, e, floor), floor\n",
        "import torch\nfor x in loader:\n    out = model(x)\n    kept = torch.where(out > 0, out, torch.full_like(out, 0.5))\n",
        # a tensor of one literal number in `forward`: one tiny copy per call, no buffer worth its keep
        "import torch\nclass Loss(torch.nn.Module):\n    def __init__(self, eps):\n        super().__init__()\n"
        "        self.eps = eps\n\n    def forward(self, x):\n        ratios = torch.tensor(1.0, device=x.device)\n"
        "        return x.mean() * ratios\n",
        # a mask of zeros or of a label: a small tensor beside the step's forward
        "import torch\nfor x in loader:\n    out = model(x)\n    kept = torch.where(out > 0, out, torch.zeros_like(out))\n"
        "    kept.sum().backward()\n",
        "import torch\nfor ids, labels in loader:\n    loss = model(ids, labels=torch.where(labels == pad, torch.full_like(labels, -100), labels))\n"
        "    loss.backward()\n",
        "import torch\nfor x in loader:\n    out = model(x)\n"
        "    kept = torch.where(out > 0, out, torch.zeros_like(out, dtype=torch.float32))\n",
        # an epoch loop (it calls the step loop): the work repeats once per epoch, not per step
        "import torch\ndef train(loader):\n    for x in loader:\n        model(x).sum().backward()\n\n"
        "for epoch in range(epochs):\n    train(loader)\n    z = torch.ones(64, 20, device=\"cuda\")\n"
        "    sample = model.decode(z)\n",
        # the shape follows the batch
        "import torch\nfor x in loader:\n    mask = torch.ones(x.shape[0], 8, device=device)\n    model(x * mask)\n",
        # random: every iteration must draw new numbers
        "import torch\nfor x in loader:\n    noise = torch.randn(64, 8, device=device)\n    model(x + noise)\n",
        # on the CPU: no device work to save
        "import torch\nfor x in loader:\n    eye = torch.eye(8)\n    model(x @ eye)\n",
        # a model's weight changes with every optimizer step
        "import torch\nfor x in loader:\n    w = model.weight.to(device)\n    loss = (x @ w).sum()\n"
        "    loss.backward()\n    opt.step()\n",
        # a function argument used as a tensor may require grad
        "import torch\ndef run(a, loader, device):\n    for x in loader:\n        b = a.to(device)\n"
        "        print((x * b).sum())\n",
        # changed in place in the loop
        "import torch\nfor x in loader:\n    acc = torch.zeros(8, device=device)\n    acc += x.sum(0)\n"
        "    print(acc)\n",
        "import torch\nfor x in loader:\n    mask = torch.ones(8, device=device)\n    mask[x > 0] = 0\n"
        "    model(x * mask)\n",
        # kept beyond its iteration
        "import torch\nmasks = []\nfor x in loader:\n    mask = torch.ones(8, device=device)\n    masks.append(mask)\n",
        # its input is rebound in the loop
        "import torch\nn = 4\nfor x in loader:\n    eye = torch.eye(n, device=device)\n    n = n + 1\n    model(eye)\n",
        # under a condition the loop tests every time
        "import torch\nfor i, x in enumerate(loader):\n    if i == 0:\n        eye = torch.eye(8, device=device)\n"
        "    model(x @ eye)\n",
        # the default dtype changes in the loop
        "import torch\nfor dtype in (torch.float16, torch.float32):\n    torch.set_default_dtype(dtype)\n"
        "    eye = torch.eye(8, device=device)\n    print(eye.dtype)\n",
        # requires grad: each iteration needs its own leaf
        "import torch\nfor x in loader:\n    w = torch.ones(8, device=device, requires_grad=True)\n"
        "    (x * w).sum().backward()\n",
        # forward: the size comes from the input
        "import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        t = x.size(1)\n"
        "        mask = torch.ones(t, t, device=x.device).tril()\n        return x @ mask\n",
        # a table of literal size too small to keep: one launch writing nine values
        "import torch\nclass Augment(torch.nn.Module):\n    def forward(self, images):\n"
        "        eye = torch.eye(3, device=images.device)\n        return self.warp(images, eye)\n",
    )
    INVALID = (
        # a fill of a shape held in a name may be any size: not a batch's labels
        Invalid(
            "import torch\n\n\n"
            "def train(model, loader, opt, batch_size, seq_len, n, shape, img_shape, device):\n"
            "    for x, y in loader:\n        buf = torch.zeros(shape).to(device)\n"
            "        loss = model(x.to(device), buf).sum()\n        loss.backward()\n"
            "        opt.step()\n",
            "import torch\n\n\n"
            "def train(model, loader, opt, batch_size, seq_len, n, shape, img_shape, device):\n"
            "    buf = torch.zeros(shape).to(device)\n    for x, y in loader:\n"
            "        loss = model(x.to(device), buf).sum()\n        loss.backward()\n"
            "        opt.step()\n",
        ),
        # ... an image-sized fill of a fixed shape is rebuilt every step
        Invalid(
            "import torch\n\n\ndef train(G, D, loader, batch_size, device):\n"
            "    for images, _ in loader:\n"
            "        canvas = torch.zeros(batch_size, 3, 64, 64).to(device)\n"
            "        loss = criterion(D(images.to(device) + canvas), G(canvas))\n"
            "        loss.backward()\n",
            "import torch\n\n\ndef train(G, D, loader, batch_size, device):\n"
            "    canvas = torch.zeros(batch_size, 3, 64, 64).to(device)\n    for images, _ in loader:\n"
            "        loss = criterion(D(images.to(device) + canvas), G(canvas))\n"
            "        loss.backward()\n",
        ),
        # a large table whose fill value is a literal 0: its shape, not its arguments, is its size
        Invalid(
            "import torch\nclass Masker(torch.nn.Module):\n    def forward(self, x):\n"
            "        mask = torch.full((2048, 2048), 0, device=x.device)\n        return self.net(x, mask)\n"
        ),
        # normalisation constants made on every step, the batch normalised with them and rebound
        # (the loop's own target is bound afresh each iteration: nothing of the previous one is kept)
        Invalid(
            "import torch\ndef train(model, loader, optimizer, device):\n    for x, y in loader:\n"
            "        x, y = x.to(device), y.to(device)\n"
            "        mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)\n"
            "        x = x - mean\n        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
            "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
            "import torch\ndef train(model, loader, optimizer, device):\n"
            "    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)\n    for x, y in loader:\n"
            "        x, y = x.to(device), y.to(device)\n"
            "        x = x - mean\n        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
            "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
        ),
        # a tensor of one number, built per step only to be torch.where's operand
        Invalid(
            "import torch\nclass GraphAttention(torch.nn.Module):\n    def forward(self, h, adj):\n"
            "        e = self.scores(h)\n        zero_vec = -9e15 * torch.ones_like(e)\n"
            "        attention = torch.where(adj > 0, e, zero_vec)\n        return torch.softmax(attention, dim=1) @ h\n",
            "import torch\nclass GraphAttention(torch.nn.Module):\n    def forward(self, h, adj):\n"
            "        e = self.scores(h)\n"
            "        attention = torch.where(adj > 0, e, -9e15)\n        return torch.softmax(attention, dim=1) @ h\n",
        ),
        Invalid(
            "import torch\nfor step in range(100):\n    eye = torch.eye(512, device=device)\n"
            "    loss = model(x @ eye).sum()\n    loss.backward()\n",
            "import torch\neye = torch.eye(512, device=device)\nfor step in range(100):\n"
            "    loss = model(x @ eye).sum()\n    loss.backward()\n",
        ),
        # matmul of tensors made by factories before the loop
        Invalid(
            "import torch\nbasis = torch.linspace(0, 1, 64, device=device).view(8, 8)\n"
            "for x in loader:\n    gram = basis @ basis.T\n    print((x @ gram).sum())\n",
            "import torch\nbasis = torch.linspace(0, 1, 64, device=device).view(8, 8)\n"
            "gram = basis @ basis.T\nfor x in loader:\n    print((x @ gram).sum())\n",
        ),
        # a pure helper called with unchanging arguments: reported at the call, fixed in the loop
        Invalid(
            "import torch\n\ndef causal_mask(n, device):\n    ones = torch.ones(n, n, device=device)\n"
            "    return torch.triu(ones, diagonal=1).bool()\n\n"
            "def train(model, loader, n, device):\n    for x in loader:\n        mask = causal_mask(n, device)\n"
            "        model(x, mask).sum().backward()\n",
            "import torch\n\ndef causal_mask(n, device):\n    ones = torch.ones(n, n, device=device)\n"
            "    return torch.triu(ones, diagonal=1).bool()\n\n"
            "def train(model, loader, n, device):\n    mask = causal_mask(n, device)\n    for x in loader:\n"
            "        model(x, mask).sum().backward()\n",
        ),
        # a module's forward: registered once as a buffer (unsafe)
        Invalid(
            "import torch\nclass Attention(torch.nn.Module):\n    def __init__(self, block):\n"
            "        super().__init__()\n        self.block = block\n\n    def forward(self, x):\n"
            "        mask = torch.ones(self.block, self.block, device=x.device).tril()\n"
            "        return x.masked_fill(mask == 0, 0.0)\n",
            "import torch\nclass Attention(torch.nn.Module):\n    def __init__(self, block):\n"
            "        super().__init__()\n        self.block = block\n"
            "        self.register_buffer(\"mask\", torch.ones(self.block, self.block).tril(), persistent=False)\n\n"
            "    def forward(self, x):\n        mask = self.mask\n"
            "        return x.masked_fill(mask == 0, 0.0)\n",
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        """`mask = -9e16 * torch.ones_like(e)` ... `torch.where(adj > 0, e, mask)`: a tensor of one
        number, as large as `e`, built on every call only to be `torch.where`'s operand."""
        facts = self.facts
        if len(node.args) != 3 or any(a.keyword is not None or a.star for a in node.args) or \
                facts.names.call_name(node) != "torch.where":
            return
        first, second = node.args[1].value, node.args[2].value
        for operand, other in ((first, second), (second, first)):
            found = self._filled_operand(operand, node)
            if found is None or type(other) is not cst.Name:
                continue
            number, like, exact, statement = found
            if not _masking_fill(number):
                return  # a mask of zeros or labels: most often a small tensor, not worth a change
            if type(like) is not cst.Name or like.value != other.value or statement is not None and \
                    facts.scopes.in_effect(other.value, statement) != facts.scopes.in_effect(other.value, node):
                continue  # shaped like another tensor, or like `other` before it was bound again
            if facts.per_step(node) is None:
                return
            edits: List[Edit] = [Replace(operand, number)]
            if statement is not None:
                block = facts.tree.parent(statement)
                if type(block) is not cst.IndentedBlock or len(block.body) < 2:  # type: ignore[attr-defined]
                    continue
                edits.append(Remove(statement))  # type: ignore[arg-type]
            shown = show(number)
            self.report(statement or operand, (
                f"`{show(operand)}` is a tensor as large as `{like.value}` filled with {shown}, built on every "
                f"step only to be `torch.where`'s operand (an allocation and a kernel for nothing): pass the "
                f"number itself, `torch.where(..., {shown})`"),
                Fix(tuple(edits), Safety.SAFE if exact else Safety.UNSAFE,
                    f"pass {shown} to `torch.where` instead of a tensor of it", min_torch=_WHERE_TAKES_NUMBERS))
            return

    def _filled_operand(self, operand: cst.BaseExpression, where: cst.Call) -> Optional[
            Tuple[cst.BaseExpression, cst.BaseExpression, bool, Optional[cst.SimpleStatementLine]]]:
        """(the number, the tensor it is shaped like, whether the number promotes as the tensor
        did, the statement that binds it) for an operand filled with one number
        (memlint.analysis.purity), written in place (no statement) or bound to a name once just
        for this use."""
        facts = self.facts
        if type(operand) is not cst.Name:
            fill = facts.purity.constant_fill(operand)
            return None if fill is None else (*fill, None)
        binds = facts.scopes.in_effect(operand.value, where)
        if len(binds) != 1 or binds[0].kind != "assign" or not binds[0].whole or binds[0].value is None:
            return None
        fill = facts.purity.constant_fill(binds[0].value)
        statement = facts.tree.parent(binds[0].node)
        scope = facts.tree.scope_of(where)
        uses = [n for n in walk_scope(scope) if type(n) is cst.Name and n.value == operand.value]  # type: ignore[attr-defined]
        if fill is None or type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1 or \
                facts.tree.scope_of(statement) is not scope or len(uses) != 2:
            return None  # bound with something else on its line, or read elsewhere too
        return (*fill, statement)

    def visit_For(self, node: cst.For) -> None:
        self._loop(node)

    def visit_While(self, node: cst.While) -> None:
        self._loop(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node.name.value != "forward" or not type(node.body) is cst.IndentedBlock:
            return
        for statement in node.body.body:
            found = self.facts.hoisting.in_forward(statement)
            if found is not None:
                self.report(statement, self._forward_message(found), self._buffer_fix(node, found))

    def _loop(self, loop: Loop) -> None:
        if not type(loop.body) is cst.IndentedBlock:
            return
        per_step: Optional[bool] = None  # asked once something is found: the question may go
        for statement in loop.body.body:  # to the project, whose answer a file then depends on
            found = self.facts.hoisting.in_loop(statement, loop)
            if found is None:
                continue
            if per_step is None:
                per_step = self.facts.per_step(loop.body) is not None
            if not per_step:
                return  # setup or epoch loops: the work repeats a few times, not every step
            fix = None
            if len(loop.body.body) > 1:
                moved = statement.with_changes(leading_lines=[line for line in statement.leading_lines
                                                              if line.comment is not None])
                fix = Fix((Remove(statement), InsertBefore(loop, (moved,))), Safety.SAFE,  # type: ignore[arg-type]
                          f"compute `{found.name}` once, before the loop")
            self.report(found.value if found.helper is not None else statement, self._message(found), fix)

    @staticmethod
    def _message(found: Hoistable) -> str:
        if found.helper is not None:
            return (f"`{show(found.value)}` builds the same GPU tensor on every iteration: `{found.helper.name.value}` "
                    f"computes it with pure torch operations from arguments that never change in the loop; "
                    f"call it once, before the loop")
        return (f"`{found.name} = {show(found.value)}` computes the same GPU tensor on every iteration "
                f"(allocation and kernels again, for a value that never changes): its inputs never change in "
                f"the loop; compute it once, before the loop")

    @staticmethod
    def _forward_message(found: Hoistable) -> str:
        return (f"`forward` rebuilds `{found.name}` on every call (every step), though it depends only on "
                f"constants and attributes set in `__init__`; register it once there as a buffer "
                f"(`self.register_buffer(..., persistent=False)`)")

    def _buffer_fix(self, forward: cst.FunctionDef, found: Hoistable) -> Optional[Fix]:
        klass = self.facts.tree.class_of(forward)
        if klass is None or not type(klass.body) is cst.IndentedBlock:
            return None
        init = next((s for s in klass.body.body if type(s) is cst.FunctionDef and s.name.value == "__init__"),
                    None)
        if init is None or not type(init.body) is cst.IndentedBlock or not init.body.body:
            return None
        stripped = _without_placement(found.value, self.facts.purity)
        if stripped is None:
            return None
        attribute = _free_attribute(klass, found.name)
        register = cst.parse_statement(
            f'self.register_buffer("{attribute}", {cst.Module([]).code_for_node(stripped)}, persistent=False)')
        return Fix((InsertAfter(init.body.body[-1], (register,)),  # type: ignore[arg-type]
                    Replace(found.value, cst.parse_expression(f"self.{attribute}"))),
                   Safety.UNSAFE, f"register `{found.name}` once in `__init__` as a buffer")


class _StripPlacement(cst.CSTTransformer):
    """Drops `device=` arguments and `.to(device)` / `.cuda()` moves; fails on any other `.to`."""

    def __init__(self, purity: Purity) -> None:
        super().__init__()
        self.purity = purity
        self.failed = False

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        move = self.purity.mover(original)
        if move is not None:
            if not move.only_device:
                self.failed = True
            return updated.func.value  # type: ignore[attr-defined,no-any-return]
        args = [a for a in updated.args if not (a.keyword is not None and a.keyword.value == "device")]
        if len(args) != len(updated.args) and args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(args=args)


def _without_placement(value: cst.BaseExpression, purity: Purity) -> Optional[cst.BaseExpression]:
    stripper = _StripPlacement(purity)
    stripped = value.visit(stripper)
    return None if stripper.failed else stripped  # type: ignore[return-value]


def _free_attribute(klass: cst.ClassDef, wanted: str) -> str:
    """An attribute name for the buffer that nothing in the class uses yet."""
    used: Set[str] = set()
    for node in walk(klass):
        if type(node) is cst.Attribute:
            used.add(node.attr.value)
        elif type(node) is cst.FunctionDef:
            used.add(node.name.value)
        elif type(node) is cst.SimpleString and isinstance(node.evaluated_value, str):
            used.add(node.evaluated_value)
    candidate, number = wanted, 1
    while candidate in used:
        candidate = f"{wanted}_buffer" if number == 1 else f"{wanted}_buffer{number}"
        number += 1
    return candidate
