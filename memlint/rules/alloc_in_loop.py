"""MEM101 tensor-alloc-in-loop."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

import libcst as cst

from memlint.findings import Fix, InsertBefore, Replace, Safety
from memlint.rule import Claim, Invalid, Rule

# factory -> the in-place method that refills a buffer with what the factory would have made
_REFILL = {
    "torch.randn": "normal_",
    "torch.rand": "uniform_",
    "torch.randint": "random_",
    "torch.zeros": "zero_",
    "torch.ones": "fill_",
    "torch.full": "fill_",
}
_RANDOM = frozenset({"torch.randn", "torch.rand", "torch.randint"})
_TO_EMPTY = frozenset({"dtype", "device", "layout", "pin_memory"})  # keywords torch.empty takes too
_SMALL = 2 ** 20  # elements: below this a tensor does not make a peak worth a finding
_DEVICE_NAME = re.compile(r"(^|_)(device|dev)$", re.IGNORECASE)


@dataclass(frozen=True)
class _Factory:
    name: str  # torch.randn ...
    call: cst.Call
    mover: Optional[cst.Call]  # made on the CPU, then moved by `.cuda()` / `.to(device)`

    @property
    def args(self) -> Tuple[cst.Arg, ...]:
        return (*self.call.args, *(self.mover.args if self.mover is not None else ()))


def _bare(arg: cst.Arg) -> cst.Arg:
    return arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)


def _kwarg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(value=value, keyword=cst.Name(name),
                   equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))


def _device_arg(call: cst.Call) -> Optional[cst.Arg]:
    """The device a `.cuda()` / `.to(...)` moves to, as a `device=` argument; None if unsure."""
    method = call.func.attr.value  # type: ignore[attr-defined]
    positional = [a for a in call.args if a.keyword is None]
    keywords = {a.keyword.value: a for a in call.args if a.keyword is not None}
    if set(keywords) - {"non_blocking", "device"}:
        return None
    if method == "cuda":
        if "device" in keywords:
            return _bare(keywords["device"])
        if not positional:
            return _kwarg("device", cst.SimpleString('"cuda"'))
        if len(positional) == 1 and type(positional[0].value) is cst.Integer:
            return _kwarg("device", cst.SimpleString(f'"cuda:{positional[0].value.value}"'))
        return None
    if "device" in keywords and not positional:
        return _bare(keywords["device"])
    if len(positional) == 1 and "device" not in keywords:
        value = positional[0].value
        last = value.attr.value if type(value) is cst.Attribute else getattr(value, "value", "")
        is_device = type(value) is cst.SimpleString or (
            type(value) in (cst.Name, cst.Attribute) and bool(_DEVICE_NAME.search(last))
        )
        return _kwarg("device", value) if is_device else None
    return None


def _split(name: str, call: cst.Call, int64: cst.BaseExpression) -> Optional[Tuple[List[cst.Arg], List[cst.Arg]]]:
    """(arguments for torch.empty, arguments for the refill); None when they cannot be made equal."""
    positional = [_bare(a) for a in call.args if a.keyword is None and a.star != "**"]
    keywords = {a.keyword.value: _bare(a) for a in call.args if a.keyword is not None}
    if any(a.star == "**" for a in call.args):
        return None
    keywords.pop("requires_grad", None)  # only ever False here: the default
    empty = [keywords.pop(k) for k in list(keywords) if k in _TO_EMPTY]
    refill = [keywords.pop("generator")] if "generator" in keywords else []
    if name == "torch.randint":
        bounds = positional[:-1] if "size" not in keywords else positional
        size = positional[-1:] if "size" not in keywords else [keywords.pop("size")]
        bounds += [keywords.pop(k) for k in ("low", "high") if k in keywords]
        if len(bounds) == 1:
            bounds.insert(0, cst.Arg(cst.Integer("0")))
        if len(bounds) != 2 or not size:
            return None
        refill = [cst.Arg(b.value) for b in bounds] + refill
        if not any(a.keyword.value == "dtype" for a in empty if a.keyword):  # randint makes int64
            empty.append(_kwarg("dtype", int64))
        sizes = size
    elif name == "torch.full":
        fill = positional[1:2] or ([keywords.pop("fill_value")] if "fill_value" in keywords else [])
        sizes = positional[:1] or ([keywords.pop("size")] if "size" in keywords else [])
        has_dtype = any(a.keyword.value == "dtype" for a in empty if a.keyword)
        # without dtype=, full() takes its dtype from the fill value: only a float matches empty()
        if len(fill) != 1 or not sizes or not (has_dtype or type(fill[0].value) is cst.Float):
            return None
        refill = [cst.Arg(fill[0].value)]
    else:
        sizes = positional + ([keywords.pop("size")] if "size" in keywords else [])
        if name == "torch.ones":
            refill = [cst.Arg(cst.Integer("1"))]
    if keywords or not sizes:  # out=, names=, requires_grad=False ...: leave it alone
        return None
    return sizes + empty, refill


class TensorAllocInLoop(Rule):
    """
    ## What it does
    Finds a tensor of loop-invariant shape created afresh and bound to the same name on every
    iteration of a loop: `noise = torch.randn(n, n, device=device)`.

    ## Why is this bad?
    When the assignment runs, the tensor of the previous iteration is still bound to the name,
    so the new one is allocated while the old one is alive. That raises the peak only when this
    tensor is the largest thing alive at that moment: for 8192x8192 float32 noise on an H200 the
    peak was 512 MB, and 256 MB with one buffer refilled in place. Where the peak comes later
    (a forward and backward whose activations outweigh it, an output as large) it changed
    nothing in measured runs, and code cannot show which case it is: the rule is opt-in, and
    `memlint verify` measures it on the script. Creating it on the CPU and moving it
    (`torch.randn(n, n).cuda()`) also pays a host-to-device copy every step.

    ## Example
    ```python
    for step in range(steps):
        noise = torch.randn(n, n, device=device)
        loss = model(noise).sum()
    ```

    Use instead:
    ```python
    noise = torch.empty(n, n, device=device)
    for step in range(steps):
        noise.normal_()
        loss = model(noise).sum()
    ```

    ## When it is not reported
    Literal shapes under 2**20 elements (`torch.rand(20, 10)`, also through names bound once to
    literals): too small to make a peak. Only when the tensor never outlives its iteration: not appended or stored, returned,
    yielded, captured by a closure, `functools.partial` or a default argument, aliased into a
    name read in the next iteration, read after the loop, or passed to a call that may keep it.
    Shapes that change per iteration and tensors that require grad are left alone.

    ## Fix safety
    Safe: the buffer comes from `torch.empty` with the same size, dtype, device and layout, and
    the refill (`normal_`, `uniform_`, `random_`, `zero_`, `fill_`) draws the same numbers from
    the same generator as the factory did. Unsafe when a random tensor was made on the CPU and
    moved: the buffer lives on the device, so its numbers come from the device's generator.
    """

    CODE = "MEM101"
    NAME = "tensor-alloc-in-loop"
    MESSAGE = "a same-shaped tensor is allocated every iteration while the previous one is still alive"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.PEAK_LOWER
    DEFAULT_ON = False

    VALID = (
        # escapes: every random tensor must stay fresh
        "import torch\nnoises = []\nfor _ in range(10):\n    noise = torch.randn(4, 4)\n    noises.append(noise)\n",
        # the shape follows the batch
        "import torch\nfor batch in loader:\n    mask = torch.ones(batch.shape[0], 8)\n    model(batch * mask)\n",
        # a leaf that requires grad
        "import torch\nfor _ in range(3):\n    w = torch.randn(4, 4, requires_grad=True)\n    w.sum().backward()\n",
        "import torch\nfor _ in range(3):\n    w = torch.randn(4, 4)\n    w.requires_grad_()\n    w.sum().backward()\n",
        # aliased and read in the next iteration
        "import torch\nprev = None\nfor _ in range(3):\n    if prev is not None:\n        print(prev)\n    x = torch.rand(4)\n    prev = x\n",
        # read after the loop
        "import torch\nfor _ in range(3):\n    x = torch.zeros(4)\n    x += 1\nprint(x)\n",
        # captured by a closure and a partial kept in a list
        "import functools, torch\nfns = []\nfor _ in range(3):\n    x = torch.rand(4)\n    fns.append(functools.partial(print, x))\n",
        "import torch\nfor _ in range(3):\n    x = torch.rand(4)\n    g = lambda: x\n    g()\n",
        # stored in an attribute, returned, yielded
        "import torch\nclass M:\n    def run(self):\n        for _ in range(3):\n            x = torch.rand(4)\n            self.last = x * 2\n",
        "import torch\ndef sample():\n    while True:\n        x = torch.randn(4)\n        yield x\n",
        # the graph built from it is kept across iterations
        "import torch\ntotal = 0\nfor _ in range(3):\n    x = torch.randn(4, 4)\n    total = total + model(x).sum()\ntotal.backward()\n",
        # a different call that merely looks alike
        "import numpy as np\nfor _ in range(3):\n    x = np.random.randn(4, 4)\n    print(x.sum())\n",
        # passed to an unknown call whose result is discarded: it may keep it
        "import torch\nfor _ in range(3):\n    x = torch.randn(4)\n    buffer.push_sample(x)\n",
        # outside any loop
        "import torch\nx = torch.randn(4)\n",
        # rebound twice in the loop
        "import torch\nfor _ in range(3):\n    x = torch.randn(4)\n    x = x * 2\n    print(x.sum())\n",
        # a known small shape (under 2**20 elements), also through constants
        "import torch\nfor step in range(10):\n    inp = torch.rand(20, 10, device=\"cuda\")\n    model(inp).sum().backward()\n",
        "import torch\nbatch, seq = 8, 256\nfor step in range(10):\n"
        "    ids = torch.randint(0, 32000, (batch, seq), device=\"cuda\")\n    model(ids).sum().backward()\n",
    )
    INVALID = (
        Invalid(
            "import torch\nfor step in range(100):\n    noise = torch.randn(n, n, device=device)\n"
            "    loss = model(noise).sum()\n    loss.backward()\n",
            "import torch\nnoise = torch.empty(n, n, device=device)\nfor step in range(100):\n"
            "    noise.normal_()\n    loss = model(noise).sum()\n    loss.backward()\n",
        ),
        Invalid(
            "import torch as t\n\ndef run(loader, width):\n    total = 0.0\n    for batch in loader:\n"
            "        acc = t.zeros(width, dtype=t.float64)\n        acc.add_(batch.sum(0))\n"
            "        total += acc.sum().item()\n    return total\n",
            "import torch as t\n\ndef run(loader, width):\n    total = 0.0\n    acc = t.empty(width, dtype=t.float64)\n"
            "    for batch in loader:\n        acc.zero_()\n        acc.add_(batch.sum(0))\n"
            "        total += acc.sum().item()\n    return total\n",
        ),
        Invalid(
            "import torch\ng = torch.Generator()\nfor _ in range(5):\n"
            "    idx = torch.randint(0, 10, (4096, 4096), generator=g)\n    print(data[idx].mean())\n",
            "import torch\ng = torch.Generator()\nidx = torch.empty((4096, 4096), dtype=torch.int64)\nfor _ in range(5):\n"
            "    idx.random_(0, 10, generator=g)\n    print(data[idx].mean())\n",
        ),
        # made on the CPU and moved: the fix is unsafe (the numbers come from the GPU's generator)
        Invalid(
            "import torch\nwhile training:\n    x = torch.rand(1024, 1024).cuda()\n    loss = model(x).sum()\n",
            "import torch\nx = torch.empty(1024, 1024, device=\"cuda\")\nwhile training:\n    x.uniform_()\n"
            "    loss = model(x).sum()\n",
        ),
    )

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1 or not type(node.targets[0].target) is cst.Name:
            return
        loops = self.facts.tree.loops_around(node)
        if not loops:
            return
        loop = loops[0]
        factory = self._factory(node.value)
        if factory is None:
            return
        name = node.targets[0].target.value
        facts = self.facts.loop(loop, self.context.scope())
        if facts.bindings_of(name) != 1 or facts.escapes(name):
            return
        if not all(facts.is_invariant(arg.value) for arg in factory.args):
            return
        elements = self._elements(factory)
        if elements is not None and elements < _SMALL:
            return  # too small to make a peak
        self.report(node, self._message(name, factory), self._fix(node, loop, name, factory))

    def _elements(self, factory: _Factory) -> Optional[int]:
        """The number of elements of a shape given in literals (or names bound once to them)."""
        split = _split(factory.name, factory.call, cst.Name("int64"))
        if split is None:
            return None
        sizes = [a.value for a in split[0] if a.keyword is None or a.keyword.value == "size"]
        count = 1
        for size in sizes:
            dims = [e.value for e in size.elements] if type(size) in (cst.Tuple, cst.List) else [size]
            for dim in dims:
                value = self.facts.values.constant_int(dim)
                if value is None:
                    return None
                count *= value
        return count

    def _factory(self, value: cst.BaseExpression) -> Optional[_Factory]:
        mover = None
        if (type(value) is cst.Call and type(value.func) is cst.Attribute
                and value.func.attr.value in ("cuda", "to") and type(value.func.value) is cst.Call):
            mover, value = value, value.func.value
        if not type(value) is cst.Call:
            return None
        name = self.facts.names.call_name(value)
        if name not in _REFILL:
            return None
        requires_grad = next((a for a in value.args if a.keyword and a.keyword.value == "requires_grad"), None)
        if requires_grad is not None and not (type(requires_grad.value) is cst.Name
                                              and requires_grad.value.value == "False"):
            return None
        return _Factory(name, value, mover)

    @staticmethod
    def _message(name: str, factory: _Factory) -> str:
        refill = _REFILL[factory.name]
        return (f"`{name}` gets a new same-shaped tensor every iteration while the previous one is "
                f"still alive; if it is the largest thing alive at that moment (not when a forward's "
                f"activations or an output as large come later), the peak holds two of it: allocate it "
                f"once before the loop and refill it in place with `{name}.{refill}()` "
                f"(`memlint verify` measures it)")

    def _fix(self, node: cst.Assign, loop: cst.CSTNode, name: str,
             factory: _Factory) -> Optional[Fix]:
        factory_name, call, mover = factory.name, factory.call, factory.mover
        empty = self.facts.names.local_name_for("torch.empty")
        int64 = self.facts.names.local_name_for("torch.int64")
        if empty is None or int64 is None:
            return None
        split = _split(factory_name, call, cst.parse_expression(int64))
        if split is None:
            return None
        empty_args, refill_args = split
        if mover is not None:
            device = _device_arg(mover)
            if device is None or any(a.keyword and a.keyword.value == "device" for a in empty_args):
                return None
            empty_args.append(device)
        buffer = cst.SimpleStatementLine([cst.Assign(
            [cst.AssignTarget(cst.Name(name))],
            cst.Call(cst.parse_expression(empty), empty_args),
        )])
        refill = cst.Expr(
            cst.Call(cst.Attribute(cst.Name(name), cst.Name(_REFILL[factory_name])), refill_args),
            semicolon=node.semicolon,
        )
        moved_random = mover is not None and factory_name in _RANDOM
        return Fix(
            edits=(InsertBefore(loop, (buffer,)), Replace(node, refill)),  # type: ignore[arg-type]
            safety=Safety.UNSAFE if moved_random else Safety.SAFE,
            description=f"allocate `{name}` once before the loop, refill it with `{name}.{_REFILL[factory_name]}()`",
        )

