"""Loop facts: invariance and escape of a value bound in an iteration."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from memlint.analysis import Facts
from memlint.analysis.tree import walk


def _loop_facts(source: str):
    module = cst.parse_module(textwrap.dedent(source))
    loop = next(node for node in walk(module) if isinstance(node, (cst.For, cst.While)))
    holders = [node for node in walk(module) if isinstance(node, cst.FunctionDef)
               and any(inner is loop for inner in walk(node))]
    scope = holders[-1] if holders else module
    return Facts(module).loop(loop, scope)


ESCAPING = {
    "appended": "for i in r:\n    x = f()\n    xs.append(x)\n",
    "appended view": "for i in r:\n    x = f()\n    v = x[0]\n    xs.append(v)\n",
    "stored in a dict": "for i in r:\n    x = f()\n    d[i] = x\n",
    "stored in an attribute": "for i in r:\n    x = f()\n    obj.last = x.view(-1)\n",
    "extended into a list": "for i in r:\n    x = f()\n    acc += [x]\n",
    "yielded": "def g():\n    for i in r:\n        x = f()\n        yield x * 2\n",
    "returned": "def g():\n    for i in r:\n        x = f()\n        if c:\n            return x\n",
    "captured by a lambda": "for i in r:\n    x = f()\n    fs.append(lambda: 0)\n    h = lambda: x\n",
    "captured by a default": "for i in r:\n    x = f()\n    def h(v=x):\n        return v\n",
    "captured by a partial": "for i in r:\n    x = f()\n    p = functools.partial(g, x)\n    ps.append(p)\n",
    "carried by an alias": "for i in r:\n    if i:\n        use(prev)\n    x = f()\n    prev = x\n",
    "conditionally aliased": "for i in r:\n    x = f()\n    if i % 2:\n        y = x\n    out = model(y)\n",
    "read after the loop": "for i in r:\n    x = f()\nprint(x)\n",
    "read in the loop header": "x = f()\nwhile x.sum() > 0:\n    x = f()\n",
    "derived value kept after": "for i in r:\n    x = f()\n    y = x + 1\nkeep = y\n",
    "folded into a sum kept": "total = 0\nfor i in r:\n    x = f()\n    total = total + x\n",
    "passed to a call that may keep it": "for i in r:\n    x = f()\n    buffer.push_sample(x)\n",
    "put in a queue": "for i in r:\n    x = f()\n    ok = q.put(x)\n",
    "kept by a helper": "kept = []\ndef model(t):\n    kept.append(t * 2)\n    return t\n"
                        "for i in r:\n    x = f()\n    out = model(x)\n",
    "kept by a method": "class M:\n    def keep(self, t):\n        self.last = t\n        return 1\n"
                        "    def run(self):\n        for i in r:\n            x = f()\n            n = self.keep(x)\n",
    "global": "def g():\n    global x\n    for i in r:\n        x = f()\n",
    "locals()": "for i in r:\n    x = f()\n    use(**locals())\n",
    "deleted": "for i in r:\n    x = f()\n    del x\n",
    "made a leaf": "for i in r:\n    x = f()\n    x.requires_grad_()\n    x.sum().backward()\n",
    "made a leaf by attribute": "for i in r:\n    x = f()\n    x.requires_grad = True\n",
}

CONTAINED = {
    "used for a forward and backward": "for i in r:\n    x = f()\n    loss = model(x).sum()\n    loss.backward()\n",
    "a plain number kept": "for i in r:\n    x = f()\n    total += model(x).item()\nprint(total)\n",
    "a plain number read after": "for i in r:\n    x = f()\n    loss = model(x)\nprint(loss.item())\n",
    "printed": "for i in r:\n    x = f()\n    print(x)\n",
    "mutated in place": "for i in r:\n    x = f()\n    x[0] = 1\n    x.add_(2)\n",
    "torch call for effect": "import torch\nfor i in r:\n    x = f()\n    torch.nn.init.normal_(x)\n",
    "shape kept": "for i in r:\n    x = f()\n    shapes.append(x.shape)\n",
    "passed to a helper that only reads it": "def model(t):\n    y = t * 2\n    return y.sum()\n"
                                              "for i in r:\n    x = f()\n    out = model(x)\n",
}


@pytest.mark.parametrize("name", sorted(ESCAPING))
def test_escaping_values(name):
    assert _loop_facts(ESCAPING[name]).escapes("x")


@pytest.mark.parametrize("name", sorted(CONTAINED))
def test_contained_values(name):
    assert not _loop_facts(CONTAINED[name]).escapes("x")


@pytest.mark.parametrize("expression,invariant", [
    ("torch.randn(n, n, device=device)", True),
    ("torch.randn(cfg.batch, 8)", True),
    ("torch.randn(len(data), 8)", True),
    ("torch.randn(w.size(0), 8)", True),
    ("torch.randn(batch.shape[0], 8)", False),  # batch is the loop target
    ("torch.randn(k, 8)", False),  # k is rebound in the loop
    ("torch.randn(state.n, 8)", False),  # state.n is assigned in the loop
    ("torch.randn(next_size(), 8)", False),  # an unknown call may differ each time
    ("torch.randn(*shape)", False),  # shape.append() changes it in the loop
    ("torch.randn(sizes[0], 8)", False),  # sizes.pop() changes it in the loop
])
def test_invariance(expression, invariant):
    facts = _loop_facts(
        "import torch\nfor batch in loader:\n    k = batch.size(0)\n    state.n = k\n"
        "    shape.append(1)\n    sizes.pop()\n"
        f"    x = {expression}\n"
    )
    call = cst.parse_expression(expression)
    assert all(facts.is_invariant(arg.value) for arg in call.args) is invariant


def test_comprehension_conditions_are_read():
    facts = _loop_facts("for i in r:\n    x = f()\n    kept = [v for v in vs if v is x]\n    keep(kept)\n")
    assert facts.escapes("x")
