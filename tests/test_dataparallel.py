"""MEM601 beyond its examples: which conditions are the user's choice (memlint.analysis.guards),
and what the message says where the rule still reports."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from memlint.analysis import Facts
from memlint.engine import check
from memlint.rules import registry
from memlint.rules.dataparallel import named_for_data_parallel

RULE = registry()["MEM601"]


def _chosen(source: str) -> bool:
    facts = Facts(cst.parse_module(textwrap.dedent(source)))
    [call] = [n for n in facts.tree.nodes if isinstance(n, cst.Call) and facts.module.code_for_node(n) == "wrap(m)"]
    return facts.guards.chosen(call)


@pytest.mark.parametrize("source,chosen", [
    ("wrap(m)\n", False),
    ("import torch\nif torch.cuda.is_available():\n    wrap(m)\n", False),
    ("import torch\nif torch.cuda.device_count() > 1:\n    wrap(m)\n", False),
    ("import torch\ndev = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nif dev.type == 'cuda':\n"
     "    wrap(m)\n", False),
    ("import torch\nm = wrap(m) if torch.cuda.device_count() > 1 else m\n", False),
    # the user's: an argument, a parameter, an attribute, the environment, a setting
    ("import torch\nif args.multi_gpu:\n    wrap(m)\n", True),
    ("import torch\ndef f(m, n_gpu):\n    if n_gpu > 1:\n        wrap(m)\n", True),
    ("import torch\nif torch.cuda.is_available() and self.ngpu > 1:\n    wrap(m)\n", True),
    ("import os\nRANK = int(os.getenv('RANK', -1))\nif RANK == -1:\n    wrap(m)\n", True),
    ("import torch\nnum_gpus = 1\nif torch.cuda.is_available() and num_gpus > 1:\n    wrap(m)\n", True),
    ("import torch\nif False:\n    wrap(m)\n", True),
    # a script's main guard is no one's choice; a GPU count its class takes from the hardware alone
    ("import torch\nif __name__ == '__main__':\n    wrap(m)\n", False),
    ("import torch\ndef main():\n    wrap(m)\nif '__main__' == __name__:\n    main()\n", False),
    ("import torch\nclass T:\n    def __init__(self):\n        self.n_gpu = torch.cuda.device_count()\n"
     "    def fit(self, m):\n        if self.n_gpu > 1:\n            wrap(m)\n", False),
    ("import torch\nclass T:\n    def __init__(self, n):\n        self.n_gpu = torch.cuda.device_count()\n"
     "        if n:\n            self.n_gpu = n\n    def fit(self, m):\n        if self.n_gpu > 1:\n            wrap(m)\n", True),
    # ... but not one set from outside the class, by a base of another module, unpacked or augmented
    ("import torch\nclass T:\n    def __init__(self):\n        self.n_gpu = torch.cuda.device_count()\n"
     "    def fit(self, m):\n        if self.n_gpu > 1:\n            wrap(m)\nt = T()\nt.n_gpu = args.n_gpu\n", True),
    ("import torch\nfrom base import BaseTrainer\nclass T(BaseTrainer):\n    def __init__(self):\n"
     "        self.n_gpu = torch.cuda.device_count()\n"
     "    def fit(self, m):\n        if self.n_gpu > 1:\n            wrap(m)\n", True),
    ("import torch\nclass T:\n    def __init__(self):\n        self.n_gpu = torch.cuda.device_count()\n"
     "        self.device, self.n_gpu = setup(args)\n"
     "    def fit(self, m):\n        if self.n_gpu > 1:\n            wrap(m)\n", True),
    ("import torch\nclass T:\n    def __init__(self):\n        self.n_gpu = torch.cuda.device_count()\n"
     "        self.n_gpu //= args.model_parallel\n"
     "    def fit(self, m):\n        if self.n_gpu > 1:\n            wrap(m)\n", True),
    ("import torch\nclass T:\n    def __init__(self):\n        self.n_gpu = torch.cuda.device_count()\n"
     "    def fit(self, m):\n        if self.n_gpu > 1:\n            wrap(m)\nt = T()\nsetattr(t, 'n_gpu', args.n_gpu)\n", True),
    ("import torch\nclass Base:\n    def __init__(self, args):\n        self.n_gpu = args.n_gpu\nclass T(Base):\n"
     "    def __init__(self, args):\n        super().__init__(args)\n        if self.n_gpu < 0:\n"
     "            self.n_gpu = torch.cuda.device_count()\n"
     "    def fit(self, m):\n        if self.n_gpu > 1:\n            wrap(m)\n", True),
    # ... another class's own count is its own; the main guard beside a hardware test
    ("import torch\nclass A:\n    def __init__(self):\n        self.n_gpu = torch.cuda.device_count()\n"
     "class T:\n    def __init__(self):\n        self.n_gpu = torch.cuda.device_count()\n"
     "    def fit(self, m):\n        if self.n_gpu > 1:\n            wrap(m)\n", False),
    ("import torch\nif __name__ == '__main__' and torch.cuda.device_count() > 1:\n    wrap(m)\n", False),
    # an earlier branch of the chain was the user's
    ("import torch\nif args.distributed:\n    pass\nelif torch.cuda.is_available():\n    wrap(m)\n", True),
    # every call of the function doing it is behind a flag
    ("import torch\ndef setup(m):\n    return wrap(m)\nif args.dp:\n    setup(m)\n", True),
    ("import torch\ndef setup(m):\n    return wrap(m)\nsetup(m)\n", False),
])
def test_conditions_about_the_hardware_are_not_a_choice(source, chosen):
    assert _chosen(source) is chosen


@pytest.mark.parametrize("name,named", [("DataParallelStrategy", True), ("setup_dp", True), ("DPWrapper", True),
                                        ("wrap_data_parallel", True), ("setup_module", False), ("update", False)])
def test_code_named_for_data_parallel(name, named):
    assert named_for_data_parallel(name) is named


def _messages(source: str):
    return [f.message for f in check(textwrap.dedent(source), "train.py", [RULE]).findings]


def test_the_message_says_what_ddp_changes_for_a_training_script():
    [message] = _messages("""\
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda":
            net = torch.nn.DataParallel(net)
        for x, y in loader:
            criterion(net(x), y).backward()
        """)
    assert "whenever the hardware allows it" in message
    assert "the loss and the start of its backward run" in message
    assert "each GPU computes its own loss" in message


def test_a_script_that_computes_a_loss_but_never_backwards():
    [message] = _messages("import torch\nnet = torch.nn.DataParallel(net)\nprint(criterion(net(x), y).item())\n")
    assert "where the loss is computed" in message and "backward" not in message
    assert "whenever" not in message  # unconditional


def test_a_script_without_a_loss_is_not_reported():
    assert _messages("import torch\nnet = torch.nn.DataParallel(net)\nprint(net(x))\n") == []


def test_a_script_s_main_guard_is_not_said_to_be_the_hardware_s_choice():
    source = ("import torch\nimport torch.nn as nn\nif __name__ == '__main__':\n    model = nn.DataParallel(net)\n"
              "    loss = criterion(model(x), y)\n    loss.backward()\n")
    [finding] = check(source, "train.py", [RULE]).findings
    assert "whenever the hardware allows it" not in finding.message
