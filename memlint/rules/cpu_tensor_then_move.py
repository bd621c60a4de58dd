"""MEM103 cpu-tensor-then-move."""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import libcst as cst

from memlint.analysis.purity import RANDOM_FACTORIES, Move
from memlint.analysis.testcode import in_test_code
from memlint.analysis.tree import dotted_name
from memlint.findings import Fix, Replace, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import show

if TYPE_CHECKING:
    from memlint.analysis import Facts
    from memlint.analysis.scopes import Binding

# Methods between a factory and its move that change nothing but the dtype or the layout: the
# factory can make the tensor on the device and they run there, bit for bit the same.
_CASTS = frozenset({"float", "half", "double", "bfloat16", "long", "int", "bool", "byte", "short", "contiguous"})


_RECORDERS = ("torch.jit.", "torch.onnx.", "torch.fx.", "torch.export.")


# VITS's attention, its proximal bias behind a switch (SWITCH: its default)
_PROXIMAL = (
    "import torch\n\n\nclass MultiHeadAttention(torch.nn.Module):\n"
    "    def __init__(self, channels, heads, proximal_bias=SWITCH):\n"
    "        super().__init__()\n        self.heads = heads\n"
    "        self.proximal_bias = proximal_bias\n\n"
    "    def _attention_bias_proximal(self, length):\n"
    "        r = torch.arange(length, dtype=torch.float32)\n"
    "        diff = torch.unsqueeze(r, 0) - torch.unsqueeze(r, 1)\n"
    "        return torch.unsqueeze(torch.unsqueeze(-torch.log1p(torch.abs(diff)), 0), 0)\n\n"
    "    def forward(self, query, key, value):\n"
    "        scores = query @ key.transpose(-2, -1)\n        if self.proximal_bias:\n"
    "            scores = scores + self._attention_bias_proximal(scores.size(-1)).to(scores.device)\n"
    "        return scores.softmax(-1) @ value\n"
)


def _kwarg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(value=value, keyword=cst.Name(name),
                   equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))


class CpuTensorThenMove(Rule):
    """
    ## What it does
    Finds a tensor made by a torch factory on the CPU and then moved to a device:
    `torch.zeros(n).cuda()`, `torch.randn(b, d).to(device)`, `torch.arange(n).long().to(x.device)`,
    the result of a helper of the same file that builds a tensor from factories, or makes one on
    the CPU and only copies GPU values into it (`w = torch.zeros(b, t)`, `w[i, :n] = row`,
    `return w`), or computes what it returns there from a factory's tensor, speaking of no device
    and looping only over a few spelled items (SwinIR's `calculate_mask`, run in every block of
    every forward at test sizes), and is moved at the call (`make_mask(t).to(device)`), a CPU factory used to index a tensor
    (`x[torch.arange(x.shape[0]), idx]`, which copies the index to the tensor's device), and a
    sample of a `torch.distributions` object built from numbers or CPU tensors, moved to the
    device (`self.noise = Normal(0.0, eps)` in `__init__`, `self.noise.sample(x.shape).to(x)` in
    `forward`: a distribution draws on the device of its parameters).

    And a tensor of one number, moved only to be assigned into a tensor (`lprobs[lprobs !=
    lprobs] = torch.tensor(-math.inf).to(lprobs)` on every step of a beam search): the tensor
    takes the number itself. This one is reported in a loop that waits for the device anyway
    too: besides the copy, a device value assigned through a boolean mask makes PyTorch read
    the mask's size on the host, where a number is filled in without a wait. In a loop of a
    module's method the tensor moved to its own target is known to be one even as an item of a
    list of tensors (`lprobs_list[i][mask] = torch.tensor(-math.inf).to(lprobs_list[i])`).

    Only where the code runs every step: in a training or evaluation loop, in the `forward` of a
    module, in a framework's step hook, or in a function called from one (in this file or, when
    the project is linted together, in another module: memlint.analysis.project). One-off setup,
    tests and demos copy once; that is not worth a change.

    ## Why is this bad?
    The tensor is allocated and filled on the host, then copied to the device through pageable
    memory: the host waits until the copy is done, and the copy waits behind every kernel already
    queued, so each step's host-side work stalls. On an H200, `torch.zeros(2).to("cuda")` behind
    600 ms of queued matrix products blocked the host for 430 ms, against 0.09 ms with `device=`.
    For random factories the host's generator is also much slower: `torch.randn(8192, 8192).cuda()`
    took about 2000x as long as `torch.randn(8192, 8192, device="cuda")`.

    ## Why it is opt-in
    Measured on real code (docs/real-code.md), a reviewer who did not write it read every
    finding and asked whether a maintainer would merge the change: 11 of 36 were worth it. The
    copy waits for the GPU, but in most real steps the same code waits anyway (another sync, a
    batch copied in), or the tensor is a few elements next to a full forward. Where it is the
    step's only wait and the tensor is large, or where it runs per element, it is worth it:
    select it (`--select MEM103`) and let `memlint verify` measure the step.

    ## Example
    ```python
    for step in range(steps):
        t = torch.full((batch,), step).to(device)
    ```

    Use instead:
    ```python
    for step in range(steps):
        t = torch.full((batch,), step, device=device)
    ```

    ## When it is not reported
    Code that does not run every step (setup before the loop, a test, a `__main__` demo, a
    function nothing in the project calls per step, a beam search's setup before its decoding
    loop); a loop that already makes the host wait every iteration (decoding that reads each
    token with `.item()`: one more wait changes little), or a move right after the host waited
    (`n = torch.max(lengths).item()` on a line before it, with only sizes read between: nothing
    is left queued to wait for). Data that starts on the host: `torch.tensor(values)`,
    `torch.from_numpy(a)`, loader batches, legacy constructors (`torch.LongTensor(...)`); a
    `.to(x)` whose argument may be a dtype or another tensor; a move to the CPU (also through
    `device = torch.device("cpu")`); a factory that already has a device; code handed to
    `torch.jit.trace` and the like (the move is what they record); an index of a tensor not
    known to live on the device (in data-loading code tensors stay on the CPU); random data in
    tests (drawn on the CPU so that every device sees the same numbers); a helper that fills its
    CPU tensor with host values (`w[i, :n] = 1.0`, a window computed on the host): made on the
    device, each write would be a kernel launch.

    Also when the factory and the move are apart: the tensor bound to a name earlier in the same
    iteration (`ids = torch.arange(n)` ... `ids.to(device)`); moved to another tensor's device
    (`torch.tensor(0.0).type_as(loss)`, `.to(other)` where `other` is on the device, as a
    field of the batch a Lightning step hook is given: `imgs, _ = batch`); a size given
    to a legacy constructor and filled in place (`torch.LongTensor(n).random_(k).to(rank)`).

    For a sample, the distribution must surely be on the host (memlint.analysis.distributions):
    every construction it may come from (each assignment to `self.noise` in the class's methods)
    takes only numbers, tensors made without a device, settings (`args.eps`) or a constructor's
    arguments not annotated as tensors (and none when the constructor also takes a device: what
    it is handed may have been made there). Not reported: a distribution built from tensors on the
    device (`torch.zeros(1, device=dev)`), from a `forward` argument, a parameter, a buffer or a
    network's output (they may be on the device); `.sample()` of anything else (`random.sample`,
    a replay buffer, a sampler class); a sample moved only to a dtype (`.to(torch.float16)`).

    ## Fix
    Puts the device on the factory (`device=device`; a bare `.cuda()` becomes `device="cuda"`)
    and drops the move; dtype casts between them (`.float()`, `.long()`) stay, now on the
    device. An index gets `device=x.device`. A number assigned into a tensor is assigned itself
    (`lprobs[lprobs != lprobs] = -math.inf`). No fix when the move also casts (`.to(device,
    dtype)`), when other operations run between the factory and the move, through a helper, or
    for a sample of a distribution (drawing on the device takes another call, which depends on
    the distribution: `torch.randn_like(x) * std`, or parameters made on the device).

    ## Fix safety
    Safe for deterministic factories (`zeros`, `ones`, `full`, `arange`, `eye`, `linspace`,
    `empty`): the values are the same. Unsafe for random ones (`randn`, `rand`, `randint`,
    `randperm`...): the numbers now come from the device's generator, a different stream, so
    they differ from what the program drew before. A number assigned itself: safe for a whole
    number and for a float that float32 holds exactly (`0.5`); unsafe for others, where the
    tensor rounded it to float32 first (`0.1` into a float64 tensor), and for an infinity or
    NaN (into an integer tensor the number raises, where the tensor stored INT_MIN).
    """

    CODE = "MEM103"
    DEFAULT_ON = False
    NAME = "cpu-tensor-then-move"
    MESSAGE = "a tensor is made on the CPU and then copied to the device; make it there with `device=`"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.TIME_LOWER

    VALID = (
        # a draw from the distribution a tensor holds is made where that tensor lives, and takes
        # no `device=` (`torch.multinomial(w, 1, device=...)` is a TypeError)
        "import torch\nmodel = model.cuda()\nfor x, w in loader:\n    out = model(x.cuda())\n"
        "    picks = torch.multinomial(w, 1).cuda()\n    drop = torch.bernoulli(w).to(out)\n",
        # one-off setup: the copy runs once, not every step
        "import torch\nmask = torch.ones(8, 8).bool().cuda()\nfor x in loader:\n    model(x, mask)\n",
        "import torch\ndef build(device):\n    return torch.zeros(3).to(device)\n",
        # data that starts on the host
        "import torch\nmodel = model.to(device)\nfor x, fill in loader:\n    out = model(x)\n"
        "    out[out != out] = torch.tensor(fill).to(out)\n",
        # ... in a helper of a module's method, its target a parameter: not known a tensor there
        "import math\nimport torch\n\nclass Search(torch.nn.Module):\n"
        "    def _prefix(self, lprobs, mask):\n        lprobs[mask] = torch.tensor(-math.inf).to(lprobs)\n\n"
        "    def search(self, tokens, steps, mask):\n        for step in range(steps):\n"
        "            lprobs = self.model(tokens)\n            if mask is not None:\n                self._prefix(lprobs, mask)\n",
        # ... and a host copy, in a module's method: the target is on the CPU
        "import math\nimport torch\n\nclass Search(torch.nn.Module):\n    def search(self, tokens, steps):\n"
        "        for step in range(steps):\n            scores = [t.cpu() for t in self.model(tokens)]\n"
        "            for i in range(len(scores)):\n                host = scores[i].cpu()\n"
        "                host[host != host] = torch.tensor(-math.inf).to(host)\n",
        # ... and a number assigned once, in setup
        "import math\nimport torch\nbias = model(torch.zeros(1, 8, device=device))\n"
        "bias[bias != bias] = torch.tensor(-math.inf).to(bias)\n",
        "import torch\nfor batch in loader:\n    ids = torch.tensor(batch[\"ids\"]).to(device)\n",
        "import numpy as np, torch\nx = torch.from_numpy(np.ones(4)).cuda()\n",
        "import torch\nlabels = torch.LongTensor(targets).cuda()\n",
        # made on the device already
        "import torch\nx = torch.zeros(4, device=device)\n",
        # a cast, or the device and dtype of another tensor: not known to be a move
        "import torch\nx = torch.arange(10).to(torch.float32)\n",
        "import torch\nx = torch.zeros(3).to(grad)\n",
        # a helper that fills its buffer with host values: made on the device, each write would be a launch
        "import torch\nclass GuidedLoss(torch.nn.Module):\n    def _weights(self, lens, n):\n"
        "        w = torch.zeros(len(lens), n)\n        for i, length in enumerate(lens):\n"
        "            w[i, :length] = 1.0\n        return w\n\n    def forward(self, attn, lens):\n"
        "        return (self._weights(lens, attn.size(1)).to(attn.device) * attn).mean()\n",
        # a helper whose buffer is handed on (`fill` may copy host data into it): not only written into
        "import torch\nclass GuidedLoss(torch.nn.Module):\n    def _weights(self, lens, n):\n"
        "        w = torch.zeros(len(lens), n)\n        fill(w, lens)\n        return w\n\n"
        "    def forward(self, attn, lens):\n        return (self._weights(lens, attn.size(1)).to(attn.device) * attn).mean()\n",
        # random test data, drawn on the CPU so that every device sees the same numbers
        "import torch\ndef test_parity(device):\n    q = torch.rand(4, 8).to(device)\n    check(q)\n",
        # moved to the CPU
        "import torch\nx = torch.ones(3).to(\"cpu\")\n",
        "import torch\ndevice = torch.device(\"cpu\")\nx = torch.zeros(3).to(device)\n",
        # the move is what a trace records
        "import torch\nholder = torch.jit.trace(lambda: torch.ones([]).to(torch.device(device)), example_inputs=[])\n",
        # data-loading code: the indexed tensor stays on the CPU
        "import torch\nclass Noise:\n    def permute(self, tokens):\n        subs = torch.randperm(len(tokens))[:3]\n"
        "        return tokens[subs[torch.randperm(3)]]\n",
        # `.to(t)` where `t` may be a dtype or a host tensor; data given to torch.tensor
        "import torch\nfor x in loader:\n    scale = torch.ones(3).to(dtype)\n    model(x * scale)\n",
        "import torch\nfor batch in loader:\n    ids = torch.tensor(batch['ids']).type_as(template)\n",
        # ... the same hook in a class that is no LightningModule: its batch may be on the host
        "import torch\nclass Task:\n    def training_step(self, batch, batch_idx):\n        imgs, _ = batch\n"
        "        z = torch.randn(imgs.shape[0], 100)\n        z = z.type_as(imgs)\n        return self.model(z)\n",
        # made in one iteration, moved in another: loop-invariant work (MEM102's)
        "import torch\nids = torch.arange(64)\nfor x in loader:\n    model(x, ids.to(device))\n",
        # a loop that waits for the device every iteration anyway (it reads each token back)
        "import torch\nfor i in range(n):\n    out = model(ys)\n    word = out[-1].argmax().item()\n"
        "    nxt = torch.ones(1, 1).fill_(word).to(device)\n    ys = torch.cat([ys, nxt])\n",
        # a list used as an index, not a tensor
        "import torch\nrows = table[torch.arange(3)]\n",
        # a distribution built from tensors on the device draws there
        "import torch\nfrom torch.distributions import Normal\nclass Jitter(torch.nn.Module):\n"
        "    def __init__(self, sigma, dev):\n        super().__init__()\n"
        "        self.noise = Normal(torch.zeros(1, device=dev), torch.ones(1, device=dev) * sigma)\n"
        "    def forward(self, x):\n        h = self.encoder(x)\n"
        "        return self.head(h + self.noise.sample(h.shape[:-1]).to(h))\n",
        # a sample that stays on the host (data augmentation)
        "import torch\nfrom torch.distributions import Normal\nclass Augment:\n    def __init__(self, sigma):\n"
        "        self.noise = Normal(0.0, sigma)\n    def __call__(self, image):\n"
        "        return image + self.noise.sample(image.shape)\n",
        # a sample moved once, when the module is built
        "import torch\nfrom torch.distributions import Normal\nclass Decoder(torch.nn.Module):\n"
        "    def __init__(self, dim, device):\n        super().__init__()\n        self.prior = Normal(0.0, 1.0)\n"
        "        self.fixed_z = self.prior.sample((16, dim)).to(device)\n    def forward(self, z):\n"
        "        return self.net(z)\n",
        # a distribution whose constructor this module hands device tensors
        "import torch\nfrom torch.distributions import Normal\nclass Noise(torch.nn.Module):\n"
        "    def __init__(self, mean, std):\n        super().__init__()\n        self.dist = Normal(mean, std)\n"
        "    def forward(self, x):\n        return x + self.dist.sample(x.shape[:-1]).to(x.device)\n"
        "def build(dim, dev):\n    return Noise(torch.zeros(dim, device=dev), std=torch.ones(dim, device=dev))\n",
        # `.sample()` of something that is no torch distribution
        "import random\nimport torch\nfrom .negatives import NegativeSampler\nclass Scorer(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.sampler = NegativeSampler()\n"
        "    def forward(self, x, pool):\n        picks = random.sample(pool, 4)\n"
        "        neg = self.sampler.sample(x.size(0)).to(x.device)\n        return self.score(x, neg, picks)\n",
        "import torch\nfor states in loader:\n    batch = replay.sample(64).to(device)\n    model(batch).backward()\n",
        # moved to a dtype only
        "import torch\nfrom torch.distributions import Normal\nclass Jitter(torch.nn.Module):\n"
        "    def __init__(self, sigma):\n        super().__init__()\n        self.noise = Normal(0.0, sigma)\n"
        "    def forward(self, x):\n        h = self.encoder(x)\n"
        "        return self.head(h + self.noise.sample(h.shape).to(torch.float16))\n",
        # parameters that may be on the device: a forward argument, an nn.Parameter, a tensor argument
        "import torch\nfrom torch.distributions import Normal\nclass Jitter(torch.nn.Module):\n"
        "    def forward(self, x, std):\n        h = self.encoder(x)\n"
        "        return self.head(h + Normal(0.0, std).sample(h.shape).to(h.device))\n",
        "import torch\nfrom torch.distributions import Normal\nclass Policy(torch.nn.Module):\n"
        "    def __init__(self, dim):\n        super().__init__()\n"
        "        self.log_std = torch.nn.Parameter(torch.zeros(dim))\n        self.mu = torch.nn.Linear(dim, dim)\n"
        "    def forward(self, s):\n        return Normal(self.mu(s), self.log_std.exp()).rsample().to(s.device)\n",
        "import torch\nfrom torch.distributions import Normal\nclass Jitter(torch.nn.Module):\n"
        "    def __init__(self, mean: torch.Tensor, std: torch.Tensor):\n        super().__init__()\n"
        "        self.noise = Normal(mean, std)\n    def forward(self, x):\n"
        "        return x + self.noise.sample(x.shape).to(x.device)\n",
        "import torch\nfrom torch.distributions import Normal\nclass Jitter(torch.nn.Module):\n"
        "    def __init__(self, mean, std, device):\n        super().__init__()\n"
        "        self.noise = Normal(mean, std)\n    def forward(self, x):\n"
        "        return x + self.noise.sample(x.shape).to(x.device)\n",
        # a cache: the mask is made again only when the length changes, not every step
        "import torch\nclass LM(torch.nn.Module):\n    def forward(self, src):\n"
        "        if self.src_mask is None or self.src_mask.size(0) != len(src):\n"
        "            self.src_mask = torch.triu(torch.ones(len(src), len(src)), diagonal=1).to(src.device)\n"
        "        return self.encoder(src, self.src_mask)\n",
        # the host has just waited for the device (`.item()`), then read only a size: the copy finds
        # nothing queued to wait for
        "import torch\ndef lengths_to_mask(lengths):\n    n = torch.max(lengths).item()\n    bsz = lengths.size(0)\n"
        "    steps = torch.arange(n).to(lengths.device)\n    return steps[None, :].expand(bsz, n) < lengths[:, None]\n\n"
        "class Encoder(torch.nn.Module):\n    def forward(self, x, lengths):\n"
        "        return self.layers(x) * lengths_to_mask(lengths)[..., None]\n",
        # once per search (a module's forward runs it), before the decoding loop whose every iteration is a step
        "import torch\nclass Generator(torch.nn.Module):\n    def forward(self, src):\n"
        "        return self._generate(src, 5, 20)\n\n    def _generate(self, src, beam, max_len):\n"
        "        offsets = torch.arange(src.size(0)).to(src.device)\n"
        "        tokens = src.new_zeros(src.size(0) * beam, max_len + 1)\n        for step in range(max_len):\n"
        "            lprobs = self.model.forward_decoder(tokens[:, :step + 1])\n"
        "            tokens[:, step + 1] = lprobs.argmax(-1) + offsets.repeat_interleave(beam)\n"
        "        return tokens\n",
        # ... emptied only on another path (no mask asked for): still a cache where it is filled
        "import torch\nclass LM(torch.nn.Module):\n    def forward(self, src, has_mask=True):\n        if has_mask:\n"
        "            if self.mask is None or self.mask.size(0) != len(src):\n"
        "                self.mask = torch.ones(len(src), len(src)).tril().to(src.device)\n"
        "        else:\n            self.mask = None\n        return self.encoder(src, self.mask)\n",
        # a buffer filled on the host item by item, then moved once: on the device each write would be a launch
        "import torch\nclass Task:\n    def train_step(self, sample, model, hyps):\n"
        "        lengths = torch.empty(len(hyps), dtype=torch.long)\n        for i, hyp in enumerate(hyps):\n"
        "            lengths[i] = len(hyp) + 1\n        sample[\"lengths\"] = lengths.to(sample[\"tokens\"].device)\n"
        "        return model(sample)\n",
        # a computation of a factory and a tensor on the host (`lengths`): `device=` on the factory would mix devices
        "import torch\ndevice = torch.device(\"cuda\")\nmodel = model.to(device)\nfor x, lengths in loader:\n"
        "    mask = (torch.arange(lengths.size(0))[:, None] < lengths[None, :]).to(device)\n"
        "    model(x.to(device), mask).sum().backward()\n    optimizer.step()\n",
        # ... but one filled row by row, as many times as there are rows: the host is the cheaper place
        "import torch\n\n\nclass Decoder(torch.nn.Module):\n    def padding_mask(self, lengths):\n"
        "        mask = torch.zeros(len(lengths), max(lengths))\n"
        "        for i, n in enumerate(lengths):\n            mask[i, :n] = 1\n        return mask\n"
        "\n    def forward(self, x, lengths):\n"
        "        return self.attn(x, mask=self.padding_mask(lengths).to(x.device))\n",
        # ... or one under an instance's switch that is off unless a caller turns it on (VITS's proximal bias)
        _PROXIMAL.replace("SWITCH", "False"),
    )
    INVALID = (
        # ... and with the switch on by default
        Invalid(_PROXIMAL.replace("SWITCH", "True")),
        # a helper that computes a mask on the CPU from a factory's tensor, copied to the device every forward
        Invalid(
            "import torch\n\n\nclass SwinBlock(torch.nn.Module):\n    def calculate_mask(self, x_size):\n"
            "        H, W = x_size\n        img_mask = torch.zeros((1, H, W, 1))\n"
            "        h_slices = (slice(0, -self.window), slice(-self.window, -self.shift), slice(-self.shift, None))\n"
            "        cnt = 0\n        for h in h_slices:\n            img_mask[:, h, :, :] = cnt\n"
            "            cnt += 1\n        windows = img_mask.view(-1, self.window * self.window)\n"
            "        attn_mask = windows.unsqueeze(1) - windows.unsqueeze(2)\n"
            "        return attn_mask.masked_fill(attn_mask != 0, -100.0)\n\n"
            "    def forward(self, x, x_size):\n"
            "        return self.attn(x, mask=self.calculate_mask(x_size).to(x.device))\n"
        ),
        # a `nonlocal` cache lives as long as the call that made it: here, one step
        Invalid(
            "import torch\nimport torch.nn.functional as F\n\n\ndef train(model, loader, optimizer):\n"
            "    for x, y in loader:\n        x, y = x.cuda(), y.cuda()\n        noise = None\n\n"
            "        def perturbed(scale):\n            nonlocal noise\n            if noise is None:\n"
            "                noise = torch.randn(x.shape).cuda()\n            return x + scale * noise\n\n"
            "        loss = sum(F.cross_entropy(model(perturbed(s)), y) for s in (0.0, 0.1, 0.2))\n"
            "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"
        ),
        # moved to the batch's device, the batch moved in a tuple assignment first
        Invalid(
            "import torch\ndef train(model, loader, opt):\n    for x, y in loader:\n        x, y = x.cuda(), y.cuda()\n"
            "        noise = torch.randn(x.size(1), x.size(1)).to(x)\n        loss = model(x @ noise, y)\n"
            "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n"
        ),
        # the host waited once, before the loop: every iteration's copy still waits
        Invalid(
            "import torch\ndef train(model, lengths, opt, device):\n    n = torch.max(lengths).item()\n"
            "    for step in range(1000):\n        steps = torch.arange(n).to(device)\n"
            "        model(steps).sum().backward()\n        opt.step()\n",
            "import torch\ndef train(model, lengths, opt, device):\n    n = torch.max(lengths).item()\n"
            "    for step in range(1000):\n        steps = torch.arange(n, device=device)\n"
            "        model(steps).sum().backward()\n        opt.step()\n",
        ),
        # a forward queued between the wait and the copy: the copy waits for it
        Invalid(
            "import torch\nclass Enc(torch.nn.Module):\n    def forward(self, x, lengths):\n"
            "        n = torch.max(lengths).item()\n        h = self.layers(x)\n"
            "        steps = torch.arange(n).to(x.device)\n        return h * steps\n",
            "import torch\nclass Enc(torch.nn.Module):\n    def forward(self, x, lengths):\n"
            "        n = torch.max(lengths).item()\n        h = self.layers(x)\n"
            "        steps = torch.arange(n, device=x.device)\n        return h * steps\n",
        ),
        # a wait the statement before makes only on some calls
        Invalid(
            "import torch\nclass Enc(torch.nn.Module):\n    def forward(self, x, lengths):\n"
            "        n = torch.max(lengths).item() if self.training else 0\n"
            "        steps = torch.arange(x.size(1)).to(x.device)\n        return self.layers(x) * steps + n\n",
            "import torch\nclass Enc(torch.nn.Module):\n    def forward(self, x, lengths):\n"
            "        n = torch.max(lengths).item() if self.training else 0\n"
            "        steps = torch.arange(x.size(1), device=x.device)\n        return self.layers(x) * steps + n\n",
        ),
        # a helper run every step whose loop is over a batch's parts (micro-batches), not steps of its own
        Invalid(
            "import torch\ndef forward_backward(model, batch, device):\n"
            "    scale = torch.full((1,), 0.25).to(device)\n    for micro in batch.chunk(4):\n"
            "        (model(micro).sum() * scale).backward()\n\n"
            "def main(model, opt, loader, device):\n    for batch in loader:\n"
            "        forward_backward(model, batch.to(device), device)\n        opt.step()\n        opt.zero_grad()\n",
            "import torch\ndef forward_backward(model, batch, device):\n"
            "    scale = torch.full((1,), 0.25, device=device)\n    for micro in batch.chunk(4):\n"
            "        (model(micro).sum() * scale).backward()\n\n"
            "def main(model, opt, loader, device):\n    for batch in loader:\n"
            "        forward_backward(model, batch.to(device), device)\n        opt.step()\n        opt.zero_grad()\n",
        ),
        # a test that holds on every training step is no cache
        Invalid(
            "import torch\nclass LM(torch.nn.Module):\n    def forward(self, src):\n"
            "        if self.pos is None or self.training:\n"
            "            self.pos = torch.arange(len(src)).to(src.device)\n        return self.encoder(src + self.pos)\n",
            "import torch\nclass LM(torch.nn.Module):\n    def forward(self, src):\n"
            "        if self.pos is None or self.training:\n"
            "            self.pos = torch.arange(len(src), device=src.device)\n        return self.encoder(src + self.pos)\n",
        ),
        # a "cache" the function empties again after each use: the fill runs on every call
        Invalid(
            "import torch\nclass LM(torch.nn.Module):\n    def forward(self, src):\n"
            "        if self.pos is None:\n            self.pos = torch.arange(len(src)).to(src.device)\n"
            "        out = self.encoder(src + self.pos)\n        self.pos = None\n        return out\n",
            "import torch\nclass LM(torch.nn.Module):\n    def forward(self, src):\n"
            "        if self.pos is None:\n            self.pos = torch.arange(len(src), device=src.device)\n"
            "        out = self.encoder(src + self.pos)\n        self.pos = None\n        return out\n",
        ),
        # one fill before the move: on the device that is one launch, not a buffer filled item by item
        Invalid(
            "import torch\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
            "        mask = torch.zeros(x.size(1), x.size(1))\n        mask.fill_(float(\"-inf\"))\n"
            "        mask = mask.to(x.device)\n        return self.layer(x, mask)\n"
        ),
        # ... filled with values read from the device instead, each write waiting for it
        Invalid(
            "import torch\nclass Task:\n    def train_step(self, sample, model):\n"
            "        out = model(sample[\"x\"].to(\"cuda\"))\n        rows = torch.zeros(len(out), 4)\n"
            "        for i in range(len(out)):\n            rows[i] = out[i, :4]\n"
            "        return rows.to(\"cuda\").sum()\n"
        ),
        Invalid(
            "import torch\nfor step in range(100):\n    t = torch.full((64,), step).to(device)\n    model(x, t)\n",
            "import torch\nfor step in range(100):\n    t = torch.full((64,), step, device=device)\n    model(x, t)\n",
        ),
        Invalid(
            "import torch\nclass Block(torch.nn.Module):\n    def forward(self, x):\n"
            "        mask = torch.ones(8, 8).bool().cuda()\n        return self.attn(x, mask)\n",
            "import torch\nclass Block(torch.nn.Module):\n    def forward(self, x):\n"
            "        mask = torch.ones(8, 8, device=\"cuda\").bool()\n        return self.attn(x, mask)\n",
        ),
        # random: the fix is unsafe, the numbers come from the GPU's generator
        Invalid(
            "import torch\nfor x in loader:\n    noise = torch.randn(64, 20).to(device)\n    model(x + noise)\n",
            "import torch\nfor x in loader:\n    noise = torch.randn(64, 20, device=device)\n    model(x + noise)\n",
        ),
        # an index made on the CPU for a tensor on the device
        Invalid(
            "import torch\nclass Head(torch.nn.Module):\n    def forward(self, x, idx):\n"
            "        h = self.encoder(x)\n        return h[torch.arange(h.shape[0]), idx]\n",
            "import torch\nclass Head(torch.nn.Module):\n    def forward(self, x, idx):\n"
            "        h = self.encoder(x)\n        return h[torch.arange(h.shape[0], device=h.device), idx]\n",
        ),
        # made on the host and moved apart, or moved to another tensor's device: reported, not fixed
        Invalid(
            "import torch\nfor x, y in loader:\n    ids = torch.arange(x.size(1))\n    ids = ids.to(device)\n"
            "    model(x, ids)\n"
        ),
        # ... the batch's device in a Lightning step hook (Lightning moved the batch there)
        Invalid(
            "import torch\nfrom lightning.pytorch import LightningModule\n\nclass GAN(LightningModule):\n"
            "    def training_step(self, batch, batch_idx):\n        imgs, _ = batch\n"
            "        z = torch.randn(imgs.shape[0], 100)\n        z = z.type_as(imgs)\n"
            "        return self.loss(self.discriminator(self.generator(z)))\n"
        ),
        Invalid(
            "import torch\nimport torch.nn.functional as F\nclass Loss(torch.nn.Module):\n"
            "    def forward(self, out, target):\n        l1 = F.l1_loss(out, target)\n"
            "        extra = torch.tensor(0.0).type_as(l1)\n        return l1 + extra\n"
        ),
        Invalid(
            "import torch\nfor x in loader:\n    perm = torch.LongTensor(64).random_(10).to(device)\n    model(x, perm)\n"
        ),
        # a tensor of one number, moved only to be assigned into a tensor: the number itself,
        # in a decoding loop that waits anyway too (the fix removes this statement's own waits)
        Invalid(
            "import math\nimport torch\n\nclass Search(torch.nn.Module):\n    def search(self, tokens, steps):\n"
            "        for step in range(steps):\n            lprobs = self.model(tokens)\n"
            "            lprobs[lprobs != lprobs] = torch.tensor(-math.inf).to(lprobs)\n"
            "            best = lprobs.argmax(-1)\n            if best[0].item() == self.eos:\n                break\n"
            "            tokens = torch.cat([tokens, best[:, None]], 1)\n",
            "import math\nimport torch\n\nclass Search(torch.nn.Module):\n    def search(self, tokens, steps):\n"
            "        for step in range(steps):\n            lprobs = self.model(tokens)\n"
            "            lprobs[lprobs != lprobs] = -math.inf\n"
            "            best = lprobs.argmax(-1)\n            if best[0].item() == self.eos:\n                break\n"
            "            tokens = torch.cat([tokens, best[:, None]], 1)\n",
        ),
        # ... an item of a list of tensors (one per channel), in a module's method
        Invalid(
            "import math\nimport torch\n\nclass Search(torch.nn.Module):\n    def search(self, tokens, steps):\n"
            "        for step in range(steps):\n            lprobs_list = list(self.model(tokens).values())\n"
            "            for i in range(len(lprobs_list)):\n"
            "                lprobs_list[i][lprobs_list[i] != lprobs_list[i]] = torch.tensor(-math.inf).to(lprobs_list[i])\n",
            "import math\nimport torch\n\nclass Search(torch.nn.Module):\n    def search(self, tokens, steps):\n"
            "        for step in range(steps):\n            lprobs_list = list(self.model(tokens).values())\n"
            "            for i in range(len(lprobs_list)):\n"
            "                lprobs_list[i][lprobs_list[i] != lprobs_list[i]] = -math.inf\n",
        ),
        Invalid(
            "import torch\nmodel = model.to(device)\nfor x in loader:\n    done = model(x) > 0\n"
            "    done[:, :2][ignore] = torch.tensor(0).to(done)\n",
            "import torch\nmodel = model.to(device)\nfor x in loader:\n    done = model(x) > 0\n"
            "    done[:, :2][ignore] = 0\n",
        ),
        # a helper that builds it on the CPU, moved at the call: reported, not fixed
        Invalid(
            "import torch\nclass Net(torch.nn.Module):\n    def causal(self, n):\n"
            "        return torch.triu(torch.ones(n, n), diagonal=1).bool()\n\n    def forward(self, x):\n"
            "        mask = self.causal(x.size(1)).to(x.device)\n        return self.layer(x, mask)\n"
        ),
        # a helper that makes a buffer on the CPU and copies GPU values into it, moved at the call
        Invalid(
            "import torch\nclass GuidedLoss(torch.nn.Module):\n    @staticmethod\n    def _row(n, like):\n"
            "        return torch.arange(n).to(like.device).float() / n\n\n    def _weights(self, lens, like):\n"
            "        w = torch.zeros(len(lens), like.size(1))\n        for i, length in enumerate(lens):\n"
            "            w[i, :length] = self._row(length, like)\n        return w\n\n    def forward(self, attn, lens):\n"
            "        return (self._weights(lens, attn).to(attn.device) * attn).mean()\n"
        ),
        # a sample of a distribution built from numbers on the host, moved every step: reported, not fixed
        Invalid(
            "import torch\nfrom torch.distributions import Normal, Uniform\nclass Perturbed(torch.nn.Module):\n"
            "    def __init__(self, sigma, uniform=False):\n        super().__init__()\n        self.sigma = sigma\n"
            "        if uniform:\n            self.jitter = Uniform(-self.sigma, self.sigma)\n        else:\n"
            "            self.jitter = Normal(0.0, self.sigma)\n\n    def forward(self, x):\n"
            "        h = self.encoder(x)\n        return self.head(h + self.jitter.sample(h.shape).to(h))\n"
        ),
        Invalid(
            "import torch\nimport torch.distributions as D\nprior = D.Normal(torch.tensor([0.0]), torch.tensor([1.0]))\n"
            "for x in loader:\n    z = prior.rsample((x.size(0), 16)).cuda()\n    model(x, z).backward()\n"
        ),
        Invalid(
            "import torch\nfor x, y in loader:\n    lam = torch.distributions.Beta(0.4, 0.4).sample((x.size(0), 1))\n"
            "    lam = lam.to(device)\n    model(lam * x + (1 - lam) * x.flip(0), y).backward()\n"
        ),
        # a computation of factories and numbers, a name used as a size and an operand both (no fix)
        Invalid(
            "import math\nimport torch\n\ndef timestep_embedding(timesteps, dim, max_period=10000):\n    half = dim // 2\n"
            "    freqs = torch.exp(-math.log(max_period) * torch.arange(0, half, dtype=torch.float32) / half)"
            ".to(device=timesteps.device)\n    args = timesteps[:, None].float() * freqs[None]\n"
            "    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)\n\n"
            "class UNet(torch.nn.Module):\n    def forward(self, x, t):\n"
            "        return self.body(x, self.embed(timestep_embedding(t, self.channels)))\n"
        ),
    )

    def _per_step(self, node: cst.CSTNode) -> bool:
        """The copy costs something only where it runs every step (memlint.analysis.steps), in
        a loop that does not already wait for the device every iteration (decoding that reads
        each token with `.item()`: one more wait there changes little)."""
        if self.facts.per_step(node) is None or self.facts.syncs.waited_before(node):
            return False
        loops = self.facts.tree.loops_around(node)
        return not loops or not self.facts.syncs.loop_syncs(loops[0], node, moves=False)

    def visit_Call(self, node: cst.Call) -> None:
        if self._number_assigned(node):
            return
        move = self.facts.purity.mover(node)
        if move is None:
            self._moved_like(node)
            return
        if self._stays_on_the_host(move) or self._traced(node):
            return  # (whether it runs every step is asked last, of a move that would be reported)
        receiver = node.func.value  # type: ignore[attr-defined]
        core, casts = _peel_casts(receiver)
        if type(core) is cst.Call:
            factory = self.facts.purity.factory(core)
            if factory is not None:
                if _has_device(core) or factory in RANDOM_FACTORIES and in_test_code(self.facts.tree, node):
                    return
                if self._per_step(node):
                    self.report(node, self._message(factory, move), self._fix(node, core, factory, move, casts))
                return
        if self._made_on_host(core, node, _target(move)):
            return
        computation = self.facts.purity.of(core)
        if computation.pure and computation.factories and not computation.placed and \
                self._from_numbers(computation) and not any(_has_device(call) for call in computation.factories):
            if self._per_step(node):
                self.report(node, self._message(None, move))
            return
        if type(core) is cst.Call:
            helper = self.facts.scopes.resolve(core)
            if helper is not None:
                summary = self.facts.hoisting.helper(helper)
                if summary.pure and summary.fresh and not summary.placed:
                    if self._per_step(node):
                        self.report(node, self._helper_message(helper))
                    return
                buffer = self.facts.hoisting.host_buffer(helper)
                if buffer is not None:
                    self._filled_from_device(node, buffer.writes, self._buffer_message(helper, buffer.factory))
                elif self.facts.hoisting.host_computed(helper) is not None and \
                        not self.facts.guards.off_by_default(node) and self._per_step(node):
                    self.report(node, self._helper_message(helper))  # (not `if self.proximal_bias:`, off unless asked for)

    def _from_numbers(self, computation) -> bool:  # type: ignore[no-untyped-def]
        """The computation's inputs are numbers, not tensors: each is used only where a number
        goes (a size, `math.log(n)`); or, used as an operand too, it is also passed itself as a
        factory's size in the same computation (`torch.arange(half) / half`), or is a name bound
        to a whole number there (`n = x.size(0)`, `half = n // 2`). A tensor whose size is
        taken (`lengths.size(0)`) is still a tensor."""
        tree = self.facts.tree
        sizes = {item.dotted for item in computation.inputs
                 if not item.as_tensor and type(tree.parent(item.node)) is cst.Arg}
        return all(not item.as_tensor or item.dotted in sizes or type(item.node) is cst.Name and self._a_number(item.node)
                   for item in computation.inputs)

    def _a_number(self, name: cst.Name, depth: int = 0) -> bool:
        """`name` is bound there only to whole numbers: literals, `len()`, `int()`, a size
        (`x.size(0)`, `x.shape[1]`), or arithmetic of those (`half = n // 2`)."""
        binds = self.facts.scopes.in_effect(name.value, name)
        return bool(binds) and depth < 3 and all(
            b.kind == "assign" and b.whole and b.value is not None and self._whole(b.value, depth) for b in binds)

    def _whole(self, value: cst.BaseExpression, depth: int) -> bool:
        kind = type(value)
        if kind is cst.Integer:
            return True
        if kind is cst.Name:
            return self._a_number(value, depth + 1)  # type: ignore[arg-type]
        if kind is cst.BinaryOperation and type(value.operator) in (cst.FloorDivide, cst.Add, cst.Subtract, cst.Multiply):  # type: ignore[attr-defined]
            return self._whole(value.left, depth) and self._whole(value.right, depth)  # type: ignore[attr-defined]
        if kind is cst.Call and type(value.func) is cst.Name:  # type: ignore[attr-defined]
            return value.func.value in ("len", "int")  # type: ignore[attr-defined]
        if kind is cst.Call and type(value.func) is cst.Attribute:  # `x.size(0)`
            return value.func.attr.value == "size" and bool(value.args)  # type: ignore[attr-defined]
        return kind is cst.Subscript and type(value.value) is cst.Attribute and value.value.attr.value == "shape"  # type: ignore[attr-defined]

    def _number_assigned(self, node: cst.Call) -> bool:
        """`x[x != x] = torch.tensor(-math.inf).to(x)`: a tensor of one number made on the host
        and moved to the device only to be assigned into a tensor, which takes the number itself
        (cast to its dtype, on its device). Reported wherever it runs every step, a loop that
        waits anyway included: the number removes the statement's own waits, the copy and, through
        a boolean mask, the read of the mask's size that a device value makes PyTorch do."""
        func = node.func
        if type(func) is not cst.Attribute or func.attr.value not in ("to", "type_as", "cuda") or \
                type(func.value) is not cst.Call:  # type: ignore[attr-defined]
            return False
        facts = self.facts
        assign = facts.tree.parent(node)
        if type(assign) is not cst.Assign or assign.value is not node or len(assign.targets) != 1 or \
                type(assign.targets[0].target) is not cst.Subscript:  # type: ignore[attr-defined]
            return False
        number = facts.purity.one_number(func.value)  # type: ignore[attr-defined]
        target = assign.targets[0].target  # type: ignore[attr-defined]
        if number is None or not (self._to_the_device(node) or self._to_its_target(node, target.value)):
            return False
        if facts.per_step(node) is None:
            return True  # a copy made once: nothing to say of it
        shown = show(number)
        self.report(node, (
            f"`{show(node)}` makes a tensor of one number on the CPU and copies it to the device on every step, "
            f"only to assign it into `{show(target.value)}`, which takes the number itself: `{show(target)} = {shown}` "
            f"(no copy; through a boolean mask a device value also makes the host wait for the mask's size)"),
            Fix((Replace(node, number),), Safety.SAFE if _cast_alike(number) else Safety.UNSAFE,
                f"assign {shown} itself"))
        return True

    def _to_its_target(self, move: cst.Call, target: cst.BaseExpression) -> bool:
        """`x[m] = torch.tensor(v).to(x)` in a loop of a module's method: `x` takes a tensor by
        index and gives `.to()` its place, so it is a tensor (an item of a list of tensors too,
        which nothing else types), on the module's device unless known to be on the host. Only
        in the loop itself: a helper the loop calls (fairseq's `_prefix_tokens`) runs on some
        steps only, and waits for the device right after."""
        like = _one_argument(move)
        if like is None or not like.deep_equals(target) or not self.facts.tree.loops_around(move):
            return False
        syncs = self.facts.syncs
        return syncs.in_module_method(move) and not syncs.on_host(target, move)

    def _to_the_device(self, move: cst.Call) -> bool:
        """`.cuda()`, `.to(<a device>)`, or `.to(t)` / `.type_as(t)` with `t` a tensor on the device."""
        return self.facts.purity.mover(move) is not None or self._device_like(move) is not None

    def _device_like(self, move: cst.Call) -> Optional[cst.BaseExpression]:
        """`t` of `x.type_as(t)` / `x.to(t)` (one plain argument) when it is a tensor on the
        device: the move takes `x` there."""
        func = move.func
        like = _one_argument(move)
        if type(func) is not cst.Attribute or func.attr.value not in ("type_as", "to") or like is None:
            return None
        return like if self.facts.syncs.on_device(like, move) else None

    def _moved_like(self, node: cst.Call) -> None:
        """`x.type_as(t)` / `x.to(t)`, where `t` is a tensor on the device: a move too."""
        like = self._device_like(node)
        func = node.func
        if like is None or not type(like) in (cst.Name, cst.Attribute, cst.Subscript) or \
                self.facts.purity.is_device(like) and func.attr.value == "to":  # type: ignore[attr-defined]
            return
        core, _ = _peel_casts(func.value)  # type: ignore[attr-defined]
        self._made_on_host(core, node, f"`.{func.attr.value}({show(like)})`")

    def _made_on_host(self, core: cst.BaseExpression, node: cst.Call, target: str) -> bool:
        """Report a move (`node`, described by `target`) of a tensor made on the host from sizes
        or constants, right there (`torch.tensor(0.0).type_as(loss)`) or bound to a name earlier
        in the same iteration (`t = torch.arange(n)` ... `t.to(device)`); no fix: the factory and
        the move are apart, or the move also casts."""
        facts = self.facts
        made: Optional[str] = None
        drawn: Optional[Tuple[str, ...]] = None
        draw: cst.BaseExpression = core
        where = ""
        if type(core) is cst.Call:
            made = facts.purity.host_made(core)
            drawn = facts.distributions.host_draw(core) if made is None else None
        elif type(core) is cst.Name:
            binding = _only_binding(facts, core, node)
            if binding is not None and type(binding.value) is cst.Call:
                made = facts.purity.host_made(binding.value)
                if made is None:
                    computation = facts.purity.of(binding.value)
                    if computation.pure and computation.factories and not computation.placed and \
                            self._from_numbers(computation):
                        made = facts.names.call_name(computation.factories[0])
                if made is None:
                    drawn = facts.distributions.host_draw(binding.value)
                    draw = binding.value
                where = f" (`{core.value}`, made from it above)"
                filled = facts.hoisting.filled(core.value, binding.node, node) if made is not None else []
                if filled:  # a buffer filled on the host: made on the device, each write would be a launch
                    self._filled_from_device(node, filled, self._filled_message(made, core.value, target))  # type: ignore[arg-type]
                    return True
        if drawn is not None:
            if in_test_code(facts.tree, node):
                return False
            if self._per_step(node):
                into = f" into `{core.value}`" if type(core) is cst.Name else ""
                self.report(node, _draw_message(draw, drawn, into, target))
            return True
        if made is None or made in RANDOM_FACTORIES and in_test_code(facts.tree, node):
            return False
        if not self._per_step(node):
            return True  # a move made once: nothing to say of it
        self.report(node, (f"`{made}` makes the tensor on the CPU{where} and {target} copies it to the device, "
                           f"which the host waits for on every step; make it there with `device=`"))
        return True

    def _stays_on_the_host(self, move: Move) -> bool:
        """The device is known to be the CPU (`device = torch.device("cpu")`): nothing moves."""
        if move.device is None:
            return False
        types = self.facts.regions.device_types(move.device)
        return types is not None and types <= {"cpu", "meta"}

    def _traced(self, node: cst.Call) -> bool:
        """Inside a call that records the code itself (`torch.jit.trace(lambda: ...)`)."""
        return any(type(a) is cst.Call and (self.facts.names.call_name(a) or "").startswith(_RECORDERS)
                   for a in self.facts.tree.ancestors(node))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        for element in node.slice:
            index = element.slice
            if not type(index) is cst.Index or not type(index.value) is cst.Call:
                continue
            call = index.value
            factory = self.facts.purity.factory(call)
            if factory is None or _has_device(call) or factory.endswith("_like"):
                continue
            owner = dotted_name(node.value)
            if owner is None or not self.facts.syncs.on_device(node.value, node) or not self._per_step(call):
                continue
            device = cst.parse_expression(f"{owner}.device")
            fix = Fix((Replace(call, call.with_changes(args=_with_arg(call.args, _kwarg("device", device)))),),
                      Safety.UNSAFE if factory in RANDOM_FACTORIES else Safety.SAFE,
                      f"make the index on `{owner}`'s device: `device={owner}.device`")
            self.report(call, (
                f"`{show(call)}` is made on the CPU to index `{owner}`: when `{owner}` is on the GPU the "
                f"index is copied there; make it there with `device={owner}.device`"), fix)

    @staticmethod
    def _message(factory: Optional[str], move: Move) -> str:
        target = _target(move)
        if factory is None:
            return (f"this tensor is computed on the CPU from torch factories and then copied to the device by "
                    f"{target}: put `device=` on the factories so it is made there")
        random = (" (keep it only if the numbers must match the CPU generator's stream)"
                  if factory in RANDOM_FACTORIES else "")
        return (f"`{factory}` makes the tensor on the CPU and {target} copies it to the device, which the host "
                f"waits for{random}; make it there with `device=`")

    @staticmethod
    def _helper_message(helper: cst.FunctionDef) -> str:
        return (f"`{helper.name.value}` builds its tensor on the CPU from torch factories, and here it is copied "
                f"to the device; give `{helper.name.value}` a `device` and make it there with `device=`")

    def _filled_from_device(self, move: cst.Call, writes: Sequence[cst.BaseExpression], message: str) -> None:
        """A tensor made on the host and filled there, then moved: reported only where what is
        written comes from the device (each write waits for it) and the move runs every step."""
        if any(self.facts.syncs.on_device(value, value) for value in writes) and self._per_step(move):
            self.report(move, message)

    @staticmethod
    def _filled_message(factory: str, name: str, target: str) -> str:
        return (f"`{factory}` makes `{name}` on the CPU, GPU values are copied into it (the host waits for each) "
                f"and {target} copies it back to the device on every step; make it there with `device=`")

    @staticmethod
    def _buffer_message(helper: cst.FunctionDef, factory: str) -> str:
        name = helper.name.value
        return (f"`{name}` makes the tensor it returns on the CPU (`{factory}`) and copies GPU values into it, "
                f"waiting for each, and here it is copied back to the device, which the host waits for too, on "
                f"every step; give `{name}` a `device` and make the tensor there with `device=`")

    def _fix(self, node: cst.Call, core: cst.Call, factory: str, move: Move,
             casts: List[cst.Call]) -> Optional[Fix]:
        code = cst.Module([]).code_for_node
        receiver = node.func.value  # type: ignore[attr-defined]
        if not move.only_device or code(node).count("#") > code(receiver).count("#"):
            return None  # it also casts, or a comment in the move would be lost
        device = move.device
        if device is None:
            device = cst.SimpleString('"cuda"')
        elif move.call.func.attr.value == "cuda" and type(device) is cst.Integer:  # type: ignore[attr-defined]
            device = cst.SimpleString(f'"cuda:{device.value}"')
        made: cst.BaseExpression = core.with_changes(args=_with_arg(core.args, _kwarg("device", device)))
        for cast in casts:
            made = cast.with_changes(func=cast.func.with_changes(value=made))  # type: ignore[attr-defined]
        random = factory in RANDOM_FACTORIES
        return Fix((Replace(node, made),), Safety.UNSAFE if random else Safety.SAFE,
                   "make the tensor on the device with `device=`" + (
                       " (the numbers now come from the device's generator)" if random else ""))


def _draw_message(drawn: cst.BaseExpression, classes: Tuple[str, ...], where: str, target: str) -> str:
    """A draw from a distribution built on the host, moved to the device: the distribution (one
    of `classes`, as many as its assignments build) is what to change."""
    short = [name.rsplit(".", 1)[-1] for name in classes]
    hints = {"Normal": "`torch.randn_like(x) * std`", "Uniform": "`torch.empty_like(x).uniform_(low, high)`"}
    known = [hints[name] for name in short if name in hints]
    hint = f", or draw on the device directly ({', '.join(known)})" if len(known) == len(short) else ""
    shown = " or ".join(f"`{name}`" for name in short)
    return (f"`{show(drawn)}` draws on the CPU{where}: its {shown} is built from numbers or CPU tensors, and "
            f"{target} copies the sample to the device, which the host waits for on every step; build the "
            f"distribution from tensors on the device{hint}")


def _target(move: Move) -> str:
    return "`.cuda()`" if move.call.func.attr.value == "cuda" else "`.to(...)`"  # type: ignore[attr-defined]


def _only_binding(facts: "Facts", name: cst.Name, at: cst.CSTNode) -> Optional["Binding"]:
    """The one binding of `name` that `at` sees, when it is made in the same iteration of the
    same loop (or, outside loops, in the same call of the same function)."""
    binds = facts.scopes.in_effect(name.value, at)
    if len(binds) != 1 or binds[0].kind != "assign":
        return None
    tree = facts.tree
    if tree.loops_around(binds[0].node)[:1] != tree.loops_around(at)[:1]:
        return None
    return binds[0]


def _one_argument(call: cst.Call) -> Optional[cst.BaseExpression]:
    """The one plain argument of `x.to(t)`; None for none, several, a keyword or a star."""
    args = call.args
    return args[0].value if len(args) == 1 and args[0].keyword is None and not args[0].star else None


def _cast_alike(number: cst.BaseExpression) -> bool:
    """Assigning `number` itself stores what its float32 tensor, moved, stored: a whole number
    (`torch.tensor(3)` is int64, cast as the number is), or a float that float32 holds exactly
    (`0.5`). Not `0.1` (rounded to float32 first, then to a float64 target), nor an infinity or
    NaN (an integer target raises on the number, where the tensor stored INT_MIN)."""
    if type(number) is cst.UnaryOperation and type(number.operator) is cst.Minus:  # type: ignore[attr-defined]
        number = number.expression  # type: ignore[attr-defined]
    if type(number) is cst.Integer:
        return True
    if type(number) is not cst.Float:
        return False
    value = float(number.value.replace("_", ""))  # type: ignore[attr-defined]
    return math.isfinite(value) and struct.unpack("f", struct.pack("f", value))[0] == value


def _peel_casts(expr: cst.BaseExpression) -> Tuple[cst.BaseExpression, List[cst.Call]]:
    """`torch.ones(n).bool()` -> (`torch.ones(n)`, [the `.bool()` call]), innermost cast first."""
    casts: List[cst.Call] = []
    while type(expr) is cst.Call and type(expr.func) is cst.Attribute and \
            expr.func.attr.value in _CASTS and not expr.args:
        casts.append(expr)
        expr = expr.func.value
    return expr, list(reversed(casts))


def _has_device(call: cst.Call) -> bool:
    return any(a.keyword is not None and a.keyword.value == "device" for a in call.args) or \
        any(a.star == "**" for a in call.args)


def _with_arg(args: Sequence[cst.Arg], new: cst.Arg) -> List[cst.Arg]:
    """`args` and `new` after them; the space before the closing bracket (a line break in a call
    written over several lines) moves after the new argument."""
    args = list(args)
    if not args:
        return [new]
    last = args[-1]
    if last.comma is cst.MaybeSentinel.DEFAULT:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
                                     whitespace_after_arg=cst.SimpleWhitespace(""))
        new = new.with_changes(whitespace_after_arg=last.whitespace_after_arg)
    else:  # a trailing comma: the new argument goes where the next one would, laid out like the others
        comma = last.comma
        between = args[-2].comma.whitespace_after if len(args) > 1 and type(args[-2].comma) is cst.Comma \
            else cst.SimpleWhitespace(" ")
        args[-1] = last.with_changes(comma=comma.with_changes(whitespace_after=between))
        new = new.with_changes(comma=cst.Comma(whitespace_after=comma.whitespace_after))  # type: ignore[union-attr]
    return [*args, new]
