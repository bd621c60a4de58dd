"""MEM505 torch-load-without-weights-only (opt-in)."""

from __future__ import annotations

from typing import Dict, List, Optional

import libcst as cst

from memlint.analysis.apicalls import ABSENT, ApiSite
from memlint.analysis.tree import argument, walk
from memlint.findings import Fix, Replace, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import with_keyword
from memlint.torch_target import TorchVersion

LOAD = "torch.load"
SAFE_BY_DEFAULT = TorchVersion(2, 6)  # torch.load's weights_only defaults to True from here
WEIGHTS_ONLY_SINCE = TorchVersion(1, 13)  # the argument itself


class TorchLoadWithoutWeightsOnly(Rule):
    """
    ## What it does
    Finds `torch.load(...)` called without `weights_only` (also through an import name, an
    alias, or a function of the same module that passes its `weights_only` parameter or its
    `**kwargs` on), in code that may run on torch older than 2.6. Opt-in.

    ## Why is this bad?
    Before torch 2.6, `torch.load` unpickles whatever the file holds: loading a checkpoint
    runs any code its author put in it, and a checkpoint can carry whole objects (an
    `argparse.Namespace`, a model class) that tie it to the code that saved it. Since 2.6 the
    default is `weights_only=True`, which loads tensors, containers and primitive types only;
    code that runs on older torch gets that only by asking for it.

    ## Example
    ```python
    state = torch.load(path, map_location="cpu")
    ```

    Use instead:
    ```python
    state = torch.load(path, map_location="cpu", weights_only=True)
    ```

    ## Fix
    Adds `weights_only=True` (needs torch >= 1.13). Not offered when `pickle_module` is given,
    which `weights_only` refuses, nor when the checkpoint is known to hold objects that
    `weights_only=True` refuses (memlint.analysis.checkpoints): its result is read at a key
    naming parsed arguments or a configuration (`ckpt["args"]`, `state["cfg"]`), it is a whole
    model (`model = torch.load(f)`, or `torch.load(f)["model"]` put in eval mode), it holds numpy
    arrays (it, or an item of it, is handed to `torch.from_numpy`), or the project saves it with
    such objects (a dict holding `args`, `cfg`, a model; matched as MEM502 matches saves); the
    message then says what it holds.

    ## Fix safety
    Unsafe: a checkpoint that holds other objects than tensors and plain containers (a
    `Namespace` of arguments, a whole `nn.Module`, numpy arrays on old torch) no longer loads;
    allow its types with `torch.serialization.add_safe_globals` (torch 2.4 and later), or pass
    `weights_only=False` for files you trust. Such a checkpoint already fails to load from
    torch 2.6, where `weights_only=True` is the default: the message says so, and asks for
    `weights_only=False` first, which every torch since 1.13 takes.

    ## When it is not reported
    - Code that runs only on torch 2.6 or later, where `weights_only=True` is the default: the
      project's target torch (`target-torch`, or the lower bound of its torch requirement) is
      2.6 or later, or the module uses an API that exists only from 2.6 without checking for it
      first (`torch.accelerator`: memlint.analysis.requirement).
    - Loads where the program chose what `weights_only` may load: inside
      `with torch.serialization.safe_globals([...]):`, or in a module that calls
      `torch.serialization.add_safe_globals(...)`.
    - Objects the program serialized itself (`torch.load(io.BytesIO(...))`, as sent between
      processes), loads in tests, and the fallback for a torch without `weights_only`
      (`except TypeError:` after a `torch.load(..., weights_only=...)`).
    """

    CODE = "MEM505"
    NAME = "torch-load-without-weights-only"
    MESSAGE = "`torch.load` without `weights_only` unpickles arbitrary objects on torch < 2.6"
    FIX_SAFETY = Safety.UNSAFE
    CLAIM = Claim.NONE
    DEFAULT_ON = False

    VALID = (
        "import torch\nstate = torch.load(path, weights_only=True)\n",
        "import torch\nstate = torch.load(path, map_location=\"cpu\", weights_only=False)\n",
        "import torch\nstate = torch.load(path, **kwargs)\n",
        "import torch\n\ndef load(path, weights_only=True):\n    return torch.load(path, weights_only=weights_only)\n\n"
        "state = load(path)\n",
        "import numpy as np\nx = np.load(path)\n",
        # objects the program serialized itself, to send between processes
        "import io\nimport torch\nbuffer = io.BytesIO(payload.numpy())\nobj = torch.load(buffer, map_location=\"cpu\")\n",
        # the fallback for torch < 1.13, which has no weights_only
        "import torch\ntry:\n    state = torch.load(path, weights_only=weights_only)\nexcept TypeError:\n"
        "    if not weights_only:\n        state = torch.load(path)\n",
        "import torch\n\ndef test_save(tmp_path):\n    assert torch.load(tmp_path / \"x.pt\") == 1\n",
        # the program chose what weights_only may load
        "import argparse\nimport torch\nwith torch.serialization.safe_globals([argparse.Namespace]):\n"
        "    state = torch.load(path, map_location=\"cpu\")\n",
        "import torch\ntorch.serialization.add_safe_globals([Config])\nstate = torch.load(path, map_location=\"cpu\")\n",
        # the code needs torch >= 2.6 anyway
        "import torch\ndevice = torch.accelerator.current_accelerator()\nstate = torch.load(path, map_location=device)\n",
    )
    INVALID = (
        Invalid("import torch\nstate = torch.load(path, map_location=\"cpu\")\n",
                "import torch\nstate = torch.load(path, map_location=\"cpu\", weights_only=True)\n"),
        Invalid("from torch import load as torch_load\nckpt = torch_load(\n    args.resume,\n    map_location=device,\n)\n",
                "from torch import load as torch_load\nckpt = torch_load(\n    args.resume,\n    map_location=device,\n"
                "    weights_only=True,\n)\n"),
        Invalid("import torch\n\ndef load(path, **kwargs):\n    return torch.load(path, **kwargs)\n\n"
                "state = load(path, map_location=\"cpu\")\n",
                "import torch\n\ndef load(path, **kwargs):\n    return torch.load(path, **kwargs)\n\n"
                "state = load(path, map_location=\"cpu\", weights_only=True)\n"),
        # weights_only refuses a pickle module: reported, not fixed
        Invalid("import torch\nimport dill\nstate = torch.load(path, pickle_module=dill)\n"),
        # the checkpoint holds parsed arguments: weights_only=True would refuse it, no fix
        Invalid("import torch\nckpt = torch.load(args.path, map_location=\"cpu\")\nmodel = build(ckpt[\"args\"])\n"
                "model.load_state_dict(ckpt[\"model\"])\n"),
        # checked for first: the code still runs on older torch
        Invalid("import torch\nif hasattr(torch, \"accelerator\"):\n    device = torch.accelerator.current_accelerator()\n"
                "state = torch.load(path, map_location=\"cpu\")\n",
                "import torch\nif hasattr(torch, \"accelerator\"):\n    device = torch.accelerator.current_accelerator()\n"
                "state = torch.load(path, map_location=\"cpu\", weights_only=True)\n"),
    )

    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        super().__init__(context)
        self._sites: Optional[Dict[int, ApiSite]] = None

    def visit_Call(self, node: cst.Call) -> None:
        if self._sites is None:
            facts = self.facts
            apicalls = facts.apicalls
            sites = apicalls.sites(LOAD, "weights_only")
            # (the torch the code needs is asked only of a module that loads: reading it reads every name)
            targets = [t for t in (self.target_torch, facts.requirement.needs if sites else None) if t is not None]
            silent = bool(targets) and max(targets) >= SAFE_BY_DEFAULT
            self._sites = {} if silent else {
                id(site.call): site for site in sites
                if site.given == ABSENT and not apicalls.reads_buffer(site.call)
                and not facts.in_test(site.call) and not self._fallback(site.call)
                and not facts.checkpoints.under_safe_globals(site.call)}
        site = self._sites.get(id(node))
        if site is None:
            return
        where = "`torch.load`" if not site.via else f"`{site.via}` (it calls `torch.load`)"
        supports = "which this project supports" if self.target_torch is not None else \
            "and this project declares no lower bound for torch"
        objects = self._objects(node)
        fix = None
        if objects:
            older = "" if self.target_torch is None or self.target_torch >= WEIGHTS_ONLY_SINCE else \
                " where torch has the argument (1.13 and later: older torch takes no `weights_only`)"
            advice = (f"this checkpoint holds {', '.join(objects)}, which `weights_only=True` refuses, so from "
                      f"torch 2.6, where that is the default, this load fails: pass `weights_only=False`{older} for "
                      f"files you trust, or allow their classes with `torch.serialization.add_safe_globals` (torch "
                      f"2.4 and later)")
        else:
            advice = "pass `weights_only=True`"
            if argument(node, "pickle_module", 2) is None:
                fix = Fix((Replace(node, with_keyword(node, site.keyword, cst.Name("True"))),), Safety.UNSAFE,
                          f"load tensors only: `{site.keyword}=True`", min_torch=WEIGHTS_ONLY_SINCE)
        self.report(node, f"{where} without `{site.keyword}` unpickles any object the file holds (it runs its "
                          f"code) on torch before 2.6, {supports}; {advice}", fix)

    def _objects(self, call: cst.Call) -> List[str]:
        """What the loaded checkpoint holds besides tensors, containers and numbers, as far as
        the project tells: the keys its result is read at, how the project saves it."""
        checkpoints = self.facts.checkpoints
        load = checkpoints.load(call)
        saves = checkpoints.matching(load)  # they know what they write; the keys read only suggest it
        found = [o for save in saves for o in save.objects] if saves else list(load.objects)
        if load.files:
            found += self.facts.project.saved(load.files)[1]
        return list(dict.fromkeys(found))

    def _fallback(self, call: cst.Call) -> bool:
        """The call is the fallback for a torch without `weights_only`: it runs in an `except`
        whose `try` calls `torch.load` with it."""
        tree, names = self.facts.tree, self.facts.names
        for ancestor in tree.ancestors(call):
            if type(ancestor) is cst.ExceptHandler:
                attempt = tree.parent(ancestor)
                return type(attempt) is cst.Try and any(
                    type(node) is cst.Call and names.call_name(node) == LOAD and argument(node, "weights_only")
                    for node in walk(attempt.body))
        return False
