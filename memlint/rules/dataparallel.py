"""MEM601 dataparallel."""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from memlint.rule import Claim, Invalid, Rule

DATA_PARALLEL = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                           "torch.nn.parallel.data_parallel.DataParallel"})
DATA_PARALLEL_FUNCTION = frozenset({"torch.nn.parallel.data_parallel",
                                    "torch.nn.parallel.data_parallel.data_parallel"})
# names that offer the distributed alternative in the same file (`DistributedDataParallel`,
# `smart_DDP`, `FSDP`): DataParallel there is the fallback for a run not started with torchrun
_DISTRIBUTED = re.compile(r"DistributedDataParallel|DDP|FSDP|FullyShardedDataParallel")
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def named_for_data_parallel(name: str) -> bool:
    """`DataParallelStrategy`, `wrap_data_parallel`, `DPWrapper`, `to_dp`: code that exists to
    provide DataParallel."""
    words = [w.lower() for w in _WORDS.findall(name)]
    return "dp" in words or "dataparallel" in "".join(words)


class DataParallel(Rule):
    """
    ## What it does
    Finds models wrapped in `torch.nn.DataParallel(...)` and forwards run through
    `torch.nn.parallel.data_parallel(...)`, at the call, in a module that computes a loss,
    where the script itself decides to use DataParallel: unconditionally, or whenever the
    hardware allows it (`if torch.cuda.is_available():`, `if torch.cuda.device_count() > 1:`,
    `if device == "cuda":` for a device picked that way).

    ## Why is this bad?
    DataParallel runs one process: at every forward it copies the weights from device 0 to the
    others, scatters the batch, and gathers every output back on device 0, where the loss and
    the start of its backward run. Device 0 holds the model, the optimizer state, the gathered
    outputs and the loss, the others a replica and their share of activations: memory is
    unbalanced, so device 0 runs out first and the batch must fit its leftover. One Python
    thread drives every GPU. PyTorch recommends DistributedDataParallel, even on one machine:
    one process per GPU, each with its own model, optimizer and loss, gradients averaged by
    all-reduce. On a single GPU DataParallel runs the module as it is, so the cost shows only
    with several.

    ## Why it is opt-in
    On real code one finding in many was worth a change to the reviewers who read them
    (docs/real-code.md: vq-vae-2's PixelSNAIL script, whose logits over 512 classes at every
    position, gathered on device 0 with their softmax and gradient, come to about 0.8 GB, in a
    repository whose other script already uses DDP). Elsewhere DataParallel is the script's
    simple choice, the outputs it gathers are small, and moving to DDP is a rewrite of how the
    script is launched, not a fix of a line.

    ## Example
    ```python
    model = torch.nn.DataParallel(model).cuda()
    ```

    Use instead (started with `torchrun --nproc-per-node N train.py`):
    ```python
    torch.distributed.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = torch.nn.parallel.DistributedDataParallel(model.cuda(local_rank), device_ids=[local_rank])
    # and a DistributedSampler for the data
    ```

    ## Fix
    None: moving to DDP changes how the script is started, the process group, the sampler, and
    what is logged and saved by which rank.

    ## Fix safety
    The rule only reports.

    ## When it is not reported
    - DataParallel behind the user's choice: a test of a command-line argument, a
      configuration, an environment variable, a parameter, an attribute or a setting
      (`if args.multi_gpu:`, `if self.ngpu > 1:`, `if cfg.n_gpu > 1:`; not an attribute its
      class sets only to the hardware's answer, `self.n_gpu = torch.cuda.device_count()`, nor a
      script's `if __name__ == "__main__":`), also where every call of
      the function wrapping the model is so guarded; a setting that keeps it from running
      (`num_gpus = 1` above `if num_gpus > 1:`) makes it dead code;
    - a fallback: the same file offers the distributed way too (`DistributedDataParallel`,
      `FSDP`, a `smart_DDP` helper), so DataParallel is what a run not started with torchrun
      gets;
    - code that exists to provide DataParallel: a class or function named for it (Lightning's
      `DataParallelStrategy.setup_module`, a `wrap_dp` helper);
    - modules that never compute a loss (inference, feature extraction): outputs gathered on
      device 0 are what such a script wants, and there is no loss or backward to unbalance;
    - tests (functions named `test...`), which wrap a model to test that code works with it;
    - naming the class without calling it (`isinstance(model, nn.DataParallel)`).
    """

    CODE = "MEM601"
    DEFAULT_ON = False
    NAME = "dataparallel"
    MESSAGE = ("`nn.DataParallel` gathers every output on device 0, where the loss is computed: device 0 "
               "runs out of memory first; use `DistributedDataParallel` (one process per GPU, torchrun)")
    FIX_SAFETY = None
    CLAIM = Claim.IMBALANCE_LOWER
    REQUIRES = ("DataParallel", "data_parallel")

    VALID = (
        "import torch\nmodel = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])\n",
        "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n",
        # naming the class is not using it
        "import torch\nif isinstance(model, torch.nn.DataParallel):\n    model = model.module\n",
        "import torch.nn as nn\nparallel = (nn.DataParallel, nn.parallel.DistributedDataParallel)\n",
        # some other DataParallel
        "from mylib import DataParallel\nmodel = DataParallel(model)\n",
        "import torch.nn as nn\n\ndef test_state_dict_of_wrapped_model():\n    model = nn.DataParallel(make())\n"
        "    assert model.state_dict()\n",
        # the user's choice: a flag, a configured GPU count, a setting that keeps it from running
        "import torch\nif args.multi_gpu:\n    model = torch.nn.DataParallel(model)\n"
        "loss = criterion(model(x), y)\nloss.backward()\n",
        "import torch.nn as nn\n\nclass Net(nn.Module):\n    def __init__(self, ngpu):\n        super().__init__()\n"
        "        self.ngpu = ngpu\n\n    def forward(self, x):\n        if x.is_cuda and self.ngpu > 1:\n"
        "            return nn.parallel.data_parallel(self.main, x, range(self.ngpu))\n        return self.main(x)\n\n"
        "loss = criterion(net(x), y)\nloss.backward()\n",
        # ... a GPU count its class takes from the hardware or from its caller
        "import torch\nimport torch.nn as nn\n\nclass Trainer:\n    def __init__(self, model, n_gpu=None):\n"
        "        self.model = model\n        self.n_gpu = torch.cuda.device_count()\n"
        "        if n_gpu is not None:\n            self.n_gpu = n_gpu\n\n"
        "    def train(self, loader):\n        if self.n_gpu > 1:\n            self.model = nn.DataParallel(self.model)\n"
        "        for x, y in loader:\n            nn.functional.cross_entropy(self.model(x), y).backward()\n",
        "import torch\nnum_gpus = 1\nif torch.cuda.is_available() and num_gpus > 1:\n"
        "    model = torch.nn.DataParallel(model, list(range(num_gpus)))\nloss = criterion(model(x), y)\n",
        "import torch\n\ndef wrap(model, gpus):\n    return torch.nn.DataParallel(model, device_ids=gpus)\n\n"
        "if args.gpus:\n    model = wrap(model, args.gpus)\nloss = criterion(model(x), y)\n",
        # a fallback where the same script offers DDP
        "import os\nimport torch\nRANK = int(os.getenv(\"RANK\", -1))\n"
        "if RANK == -1 and torch.cuda.device_count() > 1:\n    model = torch.nn.DataParallel(model)\n"
        "else:\n    model = smart_DDP(model)\nloss = criterion(model(x), y)\n",
        "import torch\nif torch.cuda.device_count() > 1:\n    model = torch.nn.DataParallel(model)\n"
        "elif distributed:\n    model = torch.nn.parallel.DistributedDataParallel(model)\nloss = criterion(model(x), y)\n",
        # what the code exists to provide
        "import torch\nfrom torch.nn import DataParallel\n\nclass DataParallelStrategy(Strategy):\n"
        "    def setup_module(self, module):\n        return DataParallel(module=module, device_ids=self.devices)\n",
        # never computes a loss: feature extraction, inference
        "import torch\nmodel = torch.nn.DataParallel(model).cuda()\nwith torch.no_grad():\n"
        "    for x in loader:\n        features.append(model(x.cuda()).cpu())\n",
    )
    INVALID = (
        Invalid("import torch\nmodel = torch.nn.DataParallel(model).cuda()\nfor x, y in loader:\n"
                "    loss = criterion(model(x), y)\n    loss.backward()\n"),
        # ... in a function a script runs under its main guard (no one's choice)
        Invalid("import torch\n\ndef main():\n    model = torch.nn.DataParallel(net).cuda()\n    for x, y in loader:\n"
                "        criterion(model(x), y).backward()\n\nif __name__ == \"__main__\":\n    main()\n"),
        # ... by a GPU count its class reads off the hardware (reformer-pytorch's trainer)
        Invalid("import torch\nimport torch.nn as nn\n\nclass Trainer:\n    def __init__(self, model):\n"
                "        self.model = model\n"
                "        self.n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0\n\n"
                "    def train(self, loader):\n        if self.n_gpu > 1:\n            self.model = nn.DataParallel(self.model)\n"
                "        for x, y in loader:\n            nn.functional.cross_entropy(self.model(x), y).backward()\n"),
        Invalid("import torch\nimport torch.nn as nn\nif torch.cuda.device_count() > 1:\n    model = nn.DataParallel(model)\n"
                "loss = criterion(model(x), y)\n"),
        Invalid("import torch\ndevice = \"cuda\" if torch.cuda.is_available() else \"cpu\"\nnet = net.to(device)\n"
                "if device == \"cuda\":\n    net = torch.nn.DataParallel(net)\n"
                "loss = criterion(net(x), y)\nloss.backward()\n"),
        Invalid("from torch.nn.parallel import DataParallel as DP\nimport torch.nn.functional as F\n"
                "net = DP(net, device_ids=[0, 1])\nF.cross_entropy(net(x), y).backward()\n"),
        Invalid("import torch.nn as nn\noutput = nn.parallel.data_parallel(netD, x, range(4))\n"
                "errD = criterion(output, label)\nerrD.backward()\n"),
    )

    def visit_Call(self, node: cst.Call) -> None:
        facts = self.facts
        name = facts.names.call_name(node)
        if name not in DATA_PARALLEL and name not in DATA_PARALLEL_FUNCTION or facts.in_test(node):
            return
        trains = self._trains()
        if trains is None or self._offers_distributed() or self._provides(node) or facts.guards.chosen(node):
            return
        what = "`nn.DataParallel`" if name in DATA_PARALLEL else "`nn.parallel.data_parallel`"
        when = " (used whenever the hardware allows it)" if facts.guards.tests(node) else ""
        where = "where the loss and the start of its backward run" if trains else "where the loss is computed"
        self.report(node, f"{what}{when} gathers every output on device 0, {where}: with several GPUs "
                          f"device 0 runs out of memory first; with `DistributedDataParallel` (one process per "
                          f"GPU, torchrun) each GPU computes its own loss and only gradients are exchanged")

    def _trains(self) -> Optional[bool]:
        """True: the module backwards; False: it computes a loss only; None: neither."""
        roles = self.facts.roles
        if roles.backwards:
            return True
        return False if any(roles.is_loss(call) for call in self.facts.scopes.calls) else None

    def _offers_distributed(self) -> bool:
        return any(_DISTRIBUTED.search(name) for name in self.facts.identifiers)

    def _provides(self, node: cst.CSTNode) -> bool:
        """In a class or function named for DataParallel."""
        tree = self.facts.tree
        func = tree.function_of(node)
        while func is not None:
            klass = tree.class_of(func)
            if named_for_data_parallel(func.name.value) or klass is not None and named_for_data_parallel(klass.name.value):
                return True
            func = tree.function_of(func)
        return False
