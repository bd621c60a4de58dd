"""MEM502 torch-load-without-map-location."""

from __future__ import annotations

from typing import Dict, Optional

import libcst as cst

from memlint.analysis.apicalls import ABSENT, ApiSite
from memlint.analysis.checkpoints import Load
from memlint.analysis.memo import per_node
from memlint.analysis.tree import NEW_SCOPES, TreeIndex, dotted_name, last_part
from memlint.findings import Fix, Replace, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import with_keyword

LOAD = "torch.load"


class TorchLoadWithoutMapLocation(Rule):
    """
    ## What it does
    Finds `torch.load(...)` called without `map_location` whose result is loaded into a model or an
    optimizer (`model.load_state_dict(torch.load(path))`, or through the names bound from it: `ckpt
    = torch.load(path); model.load_state_dict(ckpt["model"])`), or whose pickled models, the only
    items taken out of it, the program moves to its device itself (`decoder =
    checkpoint["decoder"].to(device)`): what else the checkpoint holds (the optimizers that trained
    them) is loaded onto the saved GPU only to stay there unused; or that a loop loads again and
    again only to read how far training got (`ckpt["epoch"]`, a driver polling its workers'
    checkpoints): every tensor comes onto that GPU on each pass, for a number. Not when a model is
    only cast (`.to(torch.float16)`), nor when the checkpoint is handed on or walked whole
    (`restore_ema(model, checkpoint)`, `checkpoint.items()`): then all of it may be used there. Also
    through an import name (`from torch import load`), an alias (`ckpt_load = torch.load`) and a
    function of the same module that passes its own `map_location` parameter (left at None) or its
    `**kwargs` on to `torch.load`: then the call of that function is reported.

    ## Why is this bad?
    `torch.load` puts every tensor back on the device it was saved from. A checkpoint saved on
    `cuda:0` is loaded onto `cuda:0` again, before `load_state_dict` copies it into the model:
    for a moment the GPU holds the weights (and the optimizer state) twice. In a distributed job
    every rank loads onto the GPU of the rank that saved, so device 0 holds one copy per process,
    and a checkpoint from a GPU machine cannot be loaded at all where there is no GPU. Where the
    model is still on the CPU when it is loaded (built, not yet moved), the tensors go to that
    GPU only to be copied back to the CPU: the message then says so.

    ## When it is not reported
    - Checkpoints the project saves from the CPU (memlint.analysis.checkpoints): `.cpu()`
      copies, a model moved to the CPU before its `state_dict()` is saved, a `move_to_cpu(...)`
      helper (fairseq's), a full state dict that FSDP offloads (`offload_to_cpu=True`). A save
      writes what a load reads when it is in the same module and names the same file, writes
      the keys the load reads, or the state of the same model (by name or class); in another
      module of the files linted together, when it names the same file. A file linted on its
      own cannot know how another module saves the file it loads by name: then it is reported
      only where it saves that file from a GPU itself.
    - Other loads (data sets, statistics, objects sent between processes: their tensors are as
      often saved on the CPU), the state of a learning-rate scheduler or a GradScaler (numbers,
      not tensors), loads in tests (functions named `test...`: a test loads what it saved, where
      it chose), and modules written for TPUs: they import `torch_xla` unconditionally, or
      save with it (`xm.save` writes CPU tensors). Not a module that imports it only where it
      is available (diffusers' pipelines, for `xm.mark_step()`): it runs on GPUs too.

    ## Why it is opt-in
    Read finding by finding on real code (docs/real-code.md), 5 of 15 were worth a change: where
    the model is still on the CPU when the checkpoint is loaded (the tensors cross to the GPU
    and back for nothing, and the load fails on a machine without one). A one-off load into a
    model already on the GPU, in one process, costs a transient copy that no maintainer
    changed, and a checkpoint saved from the CPU outside the project cannot be told apart.

    ## Example
    ```python
    checkpoint = torch.load(args.resume)
    model.load_state_dict(checkpoint["model"])
    ```

    Use instead:
    ```python
    checkpoint = torch.load(args.resume, map_location="cpu")
    model.load_state_dict(checkpoint["model"])  # copies into the model's own device
    ```

    ## Fix
    Adds `map_location="cpu"` (for a wrapper, its own parameter, by its name).
    `load_state_dict` copies CPU tensors into parameters on any device, and
    `optimizer.load_state_dict` moves state to its parameters' devices.

    ## Fix safety
    Unsafe: tensors that the program uses directly after loading (not through
    `load_state_dict`) are then on the CPU, and a computation mixing them with GPU tensors fails;
    move them with `.to(device)`, or give `map_location=device`.
    """

    CODE = "MEM502"
    DEFAULT_ON = False
    NAME = "torch-load-without-map-location"
    MESSAGE = "`torch.load` without `map_location` loads tensors back onto the GPU they were saved from"
    FIX_SAFETY = Safety.UNSAFE
    CLAIM = Claim.PEAK_LOWER

    VALID = (
        # how far a run got, read once; or what a polling loop reads is more than a number
        "import torch\nckpt = torch.load(path)\nstart = ckpt[\"epoch\"]\n",
        "import time\nimport torch\nwhile True:\n    ckpt = torch.load(path)\n    if ckpt[\"epoch\"] >= epochs:\n"
        "        report(ckpt[\"metrics\"])\n        break\n    time.sleep(10)\n",
        # ... a model under a key that only looks like a score, an item by a key held in a name
        "import glob\nimport torch\nmodels = []\nfor path in glob.glob(\"runs/*/ckpt.pt\"):\n"
        "    models.append(torch.load(path)[\"best_model\"])\n",
        "import torch\nfor path in paths:\n    ckpt = torch.load(path)\n    if \"epoch\" in ckpt:\n"
        "        print(path, ckpt[\"epoch\"])\n    weights.append(ckpt[key])\n",
        "import torch\nfor path in paths:\n    ckpt = torch.load(path)\n    print(path, ckpt[\"epoch\"])\n"
        "    weights.append(ckpt.get(key))\n",
        "import torch\nfor path in paths:\n    models.append(torch.load(path)[\"best_val_model\"])\n",
        # ... numbers the module itself saves, with no model's state
        "import time\nimport torch\n\ndef save_progress(epoch, step):\n"
        "    torch.save({\"epoch\": epoch, \"step\": step}, \"progress.pt\")\n\n"
        "def wait_for(epochs):\n    while True:\n        state = torch.load(\"progress.pt\")\n"
        "        if state[\"epoch\"] >= epochs:\n            return state[\"step\"]\n        time.sleep(30)\n",
        "import torch\nmodel.load_state_dict(torch.load(path, map_location=\"cpu\"))\n",
        "import torch\nstate = torch.load(path, map_location=device)\nmodel.load_state_dict(state)\n",
        "import torch\nmodel.load_state_dict(torch.load(path, lambda storage, loc: storage))\n",  # by position
        "import torch\nmodel.load_state_dict(torch.load(path, **load_kwargs))\n",  # may carry it
        # handed to a function that reads it but loads nothing into a model
        "import torch\n\ndef show(state, path):\n    print(sorted(state), path)\n\n"
        "class Net(torch.nn.Module):\n    def report(self, path):\n        show(torch.load(path)[\"model\"], path)\n",
        # a framework loading its own checkpoints
        "import torch\nmodel = Model.load_from_checkpoint(path)\naccelerator.load_state(folder)\n",
        # the alias and the partial already map
        "import torch\nimport functools\nload = functools.partial(torch.load, map_location=\"cpu\")\n"
        "model.load_state_dict(load(path))\n",
        # a wrapper that maps, or is given the location at every call
        "import torch\n\ndef load(path, map_location=\"cpu\"):\n    return torch.load(path, map_location=map_location)\n\n"
        "model.load_state_dict(load(path))\n",
        "import torch\n\ndef load(path, map_location=None):\n    return torch.load(path, map_location=map_location)\n\n"
        "model.load_state_dict(load(path, map_location=\"cpu\"))\nopt.load_state_dict(load(path, dev))\n",
        # not loaded into a model: data, a scheduler's numbers, a test's own file, TPU checkpoints
        "import torch\nvectors = torch.load(args.vector_cache)\nembedding.weight.data.copy_(vectors)\n",
        "import torch\nscheduler.load_state_dict(torch.load(os.path.join(folder, \"scheduler.pt\")))\n",
        "import torch\n\ndef test_roundtrip(tmp_path):\n    torch.save(model.state_dict(), tmp_path / \"m.pt\")\n"
        "    model.load_state_dict(torch.load(tmp_path / \"m.pt\"))\n",
        "import torch\nimport torch_xla.core.xla_model as xm\nmodel.load_state_dict(torch.load(path))\n",
        "import torch\n\ndef restore(model, path):\n    import torch_xla.core.xla_model as xm\n"
        "    model.load_state_dict(torch.load(path))\n    xm.mark_step()\n",
        "import torch\ntry:\n    import torch_xla.core.xla_model as xm\nexcept ImportError:\n    xm = None\n"
        "xm.save(model.state_dict(), path)\nmodel.load_state_dict(torch.load(path))\n",
        # the same module saves this checkpoint from the CPU: a copy moved there, a model moved
        # there before saving, fairseq's `move_to_cpu`, FSDP's full state dict offloaded
        "import torch\ntorch.save({k: v.cpu() for k, v in model.state_dict().items()}, \"ckpt.pt\")\n"
        "model.load_state_dict(torch.load(\"ckpt.pt\"))\n",
        "import torch\n\ndef train(args):\n    net = Net().cuda()\n    fit(net)\n    net.eval().cpu()\n"
        "    torch.save(net.state_dict(), args.out)\n\ndef stylize(args):\n    model = Net()\n"
        "    model.load_state_dict(torch.load(args.model))\n",
        "import torch\nfrom fairseq import utils\n\nclass Trainer:\n    def save(self, path):\n"
        "        state = utils.move_to_cpu({\"model\": self.model.state_dict(), \"step\": self.step})\n"
        "        torch.save(state, path)\n\n    def load(self, path):\n        state = torch.load(path)\n"
        "        self.model.load_state_dict(state[\"model\"])\n",
        "import torch\nfrom torch.distributed.fsdp import FullStateDictConfig, StateDictType\n"
        "policy = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)\n\ndef save(model, path):\n"
        "    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, policy):\n"
        "        state = model.state_dict()\n    torch.save(state, path)\n\ndef load(model, path):\n"
        "    model.load_state_dict(torch.load(path))\n",
        # whole modules taken out of it with the optimizers that train them: all of it is used
        "import torch\ncheckpoint = torch.load(path)\ndecoder = checkpoint[\"decoder\"]\n"
        "optimizer = checkpoint[\"optimizer\"]\ndecoder = decoder.to(device)\n",
        # ... or only cast to a dtype (the load's device is where it runs), or handed on whole
        "import torch\ncheckpoint = torch.load(path)\nnet = checkpoint[\"net\"]\n"
        "net = net.to(dtype=torch.bfloat16).eval()\nout = net(images.cuda().bfloat16())\n",
        "import torch\ncheckpoint = torch.load(path)\nmodel = checkpoint[\"model\"].to(device)\n"
        "ema = restore_ema(model, checkpoint)\n",
        # some other load
        "import pickle\nstate = pickle.load(f)\n",
        "import torch\nimport numpy as np\nx = np.load(path)\n",
    )
    INVALID = (
        # a driver polling its workers' checkpoints for their epoch (fast-autoaugment's search)
        Invalid("import time\nimport torch\nwhile True:\n    done = 0\n    for path in paths:\n"
                "        latest = torch.load(path)\n        if \"epoch\" in latest and latest[\"epoch\"] >= epochs:\n"
                "            done += 1\n    if done == len(paths):\n        break\n    time.sleep(10)\n",
                "import time\nimport torch\nwhile True:\n    done = 0\n    for path in paths:\n"
                "        latest = torch.load(path, map_location=\"cpu\")\n        if \"epoch\" in latest and latest[\"epoch\"] >= epochs:\n"
                "            done += 1\n    if done == len(paths):\n        break\n    time.sleep(10)\n"),
        Invalid("import torch\ncheckpoint = torch.load(args.resume)\nmodel.load_state_dict(checkpoint[\"model\"])\n",
                "import torch\ncheckpoint = torch.load(args.resume, map_location=\"cpu\")\n"
                "model.load_state_dict(checkpoint[\"model\"])\n"),
        # handed to a class method of this module that builds the model and loads it
        Invalid("import torch\n\nclass Unet(torch.nn.Module):\n    @classmethod\n"
                "    def from_state(klass, config, state_dict):\n        unet = klass(**config)\n"
                "        unet.load_state_dict(state_dict)\n        return unet\n\n    @classmethod\n"
                "    def hydrate(klass, path):\n        pkg = torch.load(path)\n"
                "        config, state_dict = pkg[\"config\"], pkg[\"state_dict\"]\n"
                "        return Unet.from_state(config, state_dict)\n",
                "import torch\n\nclass Unet(torch.nn.Module):\n    @classmethod\n"
                "    def from_state(klass, config, state_dict):\n        unet = klass(**config)\n"
                "        unet.load_state_dict(state_dict)\n        return unet\n\n    @classmethod\n"
                "    def hydrate(klass, path):\n        pkg = torch.load(path, map_location=\"cpu\")\n"
                "        config, state_dict = pkg[\"config\"], pkg[\"state_dict\"]\n"
                "        return Unet.from_state(config, state_dict)\n"),
        # whole modules taken out and moved by the program: the rest stays on the saved GPU
        Invalid("import torch\ncheckpoint = torch.load(path)\ndecoder = checkpoint[\"decoder\"]\n"
                "decoder = decoder.to(device)\nencoder = checkpoint[\"encoder\"].to(device).eval()\n",
                "import torch\ncheckpoint = torch.load(path, map_location=\"cpu\")\ndecoder = checkpoint[\"decoder\"]\n"
                "decoder = decoder.to(device)\nencoder = checkpoint[\"encoder\"].to(device).eval()\n"),
        # torch_xla imported only where it is available: a GPU pipeline still
        Invalid("import torch\nif is_torch_xla_available():\n    import torch_xla.core.xla_model as xm\n"
                "model.load_state_dict(torch.load(path))\n",
                "import torch\nif is_torch_xla_available():\n    import torch_xla.core.xla_model as xm\n"
                "model.load_state_dict(torch.load(path, map_location=\"cpu\"))\n"),
        Invalid("from torch import load, save\nsave(net.cuda().state_dict(), \"model.pt\")\n"
                "net.load_state_dict(load(\"model.pt\"))\n",
                "from torch import load, save\nsave(net.cuda().state_dict(), \"model.pt\")\n"
                "net.load_state_dict(load(\"model.pt\", map_location=\"cpu\"))\n"),
        Invalid("import torch\nckpt_load = torch.load\nstate = ckpt_load(path)\nweights = state[\"model\"]\n"
                "model.load_state_dict(weights)\n",
                "import torch\nckpt_load = torch.load\nstate = ckpt_load(path, map_location=\"cpu\")\n"
                "weights = state[\"model\"]\nmodel.load_state_dict(weights)\n"),
        # the wrapper's parameter reaches torch.load; its caller leaves it at None
        Invalid("import torch\n\ndef load_checkpoint(path, map_location=None):\n"
                "    return torch.load(path, map_location=map_location)\n\nstate = load_checkpoint(args.resume)\n"
                "model.load_state_dict(state)\n",
                "import torch\n\ndef load_checkpoint(path, map_location=None):\n"
                "    return torch.load(path, map_location=map_location)\n\n"
                "state = load_checkpoint(args.resume, map_location=\"cpu\")\nmodel.load_state_dict(state)\n"),
        Invalid("import torch\n\nclass Trainer:\n    def _load(self, path, **kwargs):\n"
                "        return torch.load(path, **kwargs)\n\n    def resume(self, path):\n"
                "        self.model.load_state_dict(self._load(path))\n",
                "import torch\n\nclass Trainer:\n    def _load(self, path, **kwargs):\n"
                "        return torch.load(path, **kwargs)\n\n    def resume(self, path):\n"
                "        self.model.load_state_dict(self._load(path, map_location=\"cpu\"))\n"),
        # returned by a helper, loaded into the model by its caller
        Invalid("import torch\n\ndef read(path):\n    return torch.load(path)\n\nmodel.load_state_dict(read(p))\n",
                "import torch\n\ndef read(path):\n    return torch.load(path, map_location=\"cpu\")\n\n"
                "model.load_state_dict(read(p))\n"),
        Invalid("import torch\nif args.gpu is None:\n    checkpoint = torch.load(args.resume)\nelse:\n"
                "    checkpoint = torch.load(args.resume, map_location=f\"cuda:{args.gpu}\")\n"
                "model.load_state_dict(checkpoint[\"state_dict\"])\n",
                "import torch\nif args.gpu is None:\n    checkpoint = torch.load(args.resume, map_location=\"cpu\")\nelse:\n"
                "    checkpoint = torch.load(args.resume, map_location=f\"cuda:{args.gpu}\")\n"
                "model.load_state_dict(checkpoint[\"state_dict\"])\n"),
    )

    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        super().__init__(context)
        self._sites: Optional[Dict[int, ApiSite]] = None

    def visit_Call(self, node: cst.Call) -> None:
        if self._sites is None and self._on_tpu():
            self._sites = {}  # on TPU, `xm.save` writes CPU tensors: loading puts nothing on an accelerator
        if self._sites is None:
            apicalls = self.facts.apicalls
            checkpoints = self.facts.checkpoints
            self._sites = {id(site.call): site for site in apicalls.sites(LOAD, "map_location", 1)
                           if site.given == ABSENT and not self.facts.in_test(site.call) and (
                               apicalls.loaded_into(site.call) or checkpoints.load(site.call).placed or
                               self._polled(site.call) is not None)}
        site = self._sites.get(id(node))
        if site is None:
            return
        load = self.facts.checkpoints.load(node)
        saved_from_gpu = self._saved_from_gpu(load)
        if saved_from_gpu is False:
            return  # the project saves this checkpoint from the CPU: nothing lands on a GPU
        where = "`torch.load`" if not site.via else f"`{site.via}` (it calls `torch.load`)"
        what = "this checkpoint, which this project saves from a GPU," if saved_from_gpu else "a checkpoint saved from a GPU"
        polled = self._polled(node)
        if polled is not None:
            then = (f"on every pass of this loop, only to read `[\"{polled}\"]`: whatever tensors it holds (a model's "
                    f"weights, an optimizer's state) take that GPU's memory each time, and without a GPU the load fails")
        elif load.placed:
            models = " and ".join(f"`{name}`" for name in load.placed)
            then = (f"and the program moves the pickled {models} to its device itself: whatever else the checkpoint "
                    "holds (an optimizer's state, other models) stays on that GPU as long as the checkpoint is "
                    "referenced")
        elif load.into_cpu:
            then = ("then `load_state_dict` copies them into the model, which is still on the CPU: the GPU memory is "
                    "spent for nothing, and without a GPU the load fails")
        else:
            then = "before `load_state_dict` copies them into the model: with the model there too, that GPU holds the weights twice"
        fix = Fix((Replace(node, with_keyword(node, site.keyword, cst.SimpleString('"cpu"'))),),
                  Safety.UNSAFE, f"load onto the CPU: `{site.keyword}=\"cpu\"`")
        self.report(node, f"{where} without `{site.keyword}` puts the tensors of {what} back on that GPU (in every "
                          f"process, the same one), {then}; load with `map_location=\"cpu\"`", fix)

    @per_node
    def _polled(self, call: cst.Call) -> Optional[str]:
        """The key read, where a loop loads a checkpoint again and again only to read how far a
        training run got (fast-autoaugment's driver, waiting for its workers' epochs): a load
        per pass, every tensor it holds included, for a number (asked when the sites are found,
        and again to report)."""
        facts = self.facts
        if not facts.tree.loops_around(call) or facts.apicalls.loaded_into(call):
            return None
        key = facts.checkpoints.read_for_progress(call)
        if key is None:
            return None
        own = facts.checkpoints.matching(facts.checkpoints.load(call))
        if own and all(facts.checkpoints.saves_progress_only(save) for save in own):
            return None  # the module saves it, with its progress counters alone: numbers
        return key

    def _on_tpu(self) -> bool:
        """The module is written for TPUs: it imports `torch_xla` whatever the machine (at its
        top, or in the functions that use it), or saves with it (`xm.save`). One that imports
        it only where it is available (diffusers' pipelines, for `xm.mark_step()`) runs on GPUs too."""
        facts = self.facts
        if not facts.names.imports("torch_xla"):
            return False
        tree = facts.tree
        for node, _ in tree.listed:
            kind = type(node)
            if kind is cst.Call and (facts.names.call_name(node) or "").startswith("torch_xla.") and \
                    last_part(dotted_name(node.func)) == "save":  # type: ignore[attr-defined]
                return True
            if (kind is cst.Import or kind is cst.ImportFrom) and _imports_xla(node) and not _where_available(node, tree):
                return True
        return False

    def _saved_from_gpu(self, load: Load) -> Optional[bool]:
        """True: the project saves what `load` reads from a GPU (somewhere); False: only from
        the CPU; None: the project does not say (a checkpoint from elsewhere)."""
        own = self.facts.checkpoints.matching(load)
        if any(not save.cpu for save in own):
            return True
        if load.files:
            kinds, _ = self.facts.project.saved(load.files)
            if "gpu" in kinds:
                return True
            if "cpu" in kinds:
                return False
        return False if own else None


def _where_available(node: cst.CSTNode, tree: TreeIndex) -> bool:
    """An import under an `if` or a `try` of its own scope (`if is_torch_xla_available(): import
    torch_xla...`): made where the package is installed, not needed."""
    for ancestor in tree.ancestors(node):
        kind = type(ancestor)
        if kind is cst.If or kind is cst.Try:
            return True
        if kind in NEW_SCOPES:
            return False
    return False


def _imports_xla(node: cst.CSTNode) -> bool:
    """`import torch_xla.core.xla_model as xm`, `from torch_xla.core import xla_model`."""
    if type(node) is cst.ImportFrom:
        return (dotted_name(node.module) or "").split(".")[0] == "torch_xla"  # type: ignore[attr-defined]
    return any((dotted_name(alias.name) or "").split(".")[0] == "torch_xla" for alias in node.names)  # type: ignore[attr-defined]
