"""MEM601 dataparallel."""

from __future__ import annotations

import libcst as cst

from memlint.rule import Claim, Invalid, Rule

DATA_PARALLEL = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                           "torch.nn.parallel.data_parallel.DataParallel"})
DATA_PARALLEL_FUNCTION = frozenset({"torch.nn.parallel.data_parallel",
                                    "torch.nn.parallel.data_parallel.data_parallel"})


class DataParallel(Rule):
    """
    ## What it does
    Finds models wrapped in `torch.nn.DataParallel(...)` and forwards run through
    `torch.nn.parallel.data_parallel(...)`, at the call. Not in tests (functions named
    `test...`), which wrap a model to test that code works with DataParallel.

    ## Why is this bad?
    DataParallel runs one process: at every forward it copies the weights from device 0 to the
    others, scatters the batch, and gathers every output back on device 0, where the loss and
    its backward run. Device 0 holds the model, the optimizer state, the gathered outputs and the
    loss, the others a replica and their share of activations: memory is unbalanced, so device
    0 runs out first and the batch must fit its leftover. One Python thread drives every GPU.
    PyTorch recommends DistributedDataParallel, even on one machine: one process per GPU, each
    with its own model, optimizer and loss, gradients averaged by all-reduce.

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
    """

    CODE = "MEM601"
    NAME = "dataparallel"
    MESSAGE = ("`nn.DataParallel` gathers every output on device 0 and computes the loss there: device 0 "
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
    )
    INVALID = (
        Invalid("import torch\nmodel = torch.nn.DataParallel(model).cuda()\n"),
        Invalid("import torch.nn as nn\nif torch.cuda.device_count() > 1:\n    model = nn.DataParallel(model)\n"),
        Invalid("from torch.nn.parallel import DataParallel as DP\nnet = DP(net, device_ids=[0, 1])\n"),
        Invalid("import torch.nn as nn\noutput = nn.parallel.data_parallel(netD, x, range(ngpu))\n"),
    )

    def visit_Call(self, node: cst.Call) -> None:
        name = self.facts.names.call_name(node)
        if name not in DATA_PARALLEL and name not in DATA_PARALLEL_FUNCTION or self.facts.in_test(node):
            return
        if name in DATA_PARALLEL:
            self.report(node)
        elif name in DATA_PARALLEL_FUNCTION:
            self.report(node, "`nn.parallel.data_parallel` gathers every output on device 0 and computes the "
                              "loss there: device 0 runs out of memory first; use `DistributedDataParallel` "
                              "(one process per GPU, torchrun)")
