"""Writes memlint/data/torch_api.json: the names torch's public modules define, for MEM503.

Run it with the torch whose API memlint should know (the linter never imports torch):

    python scripts/torch_api.py            # writes memlint/data/torch_api.json
    python scripts/torch_api.py --check    # exits 1 if the file differs from what it would write

For each module in MODULES it records every attribute name (`dir()`), the submodules its
package holds (also those `import torch` does not load, such as `torch.utils.tensorboard`), and
the names a module-level `__getattr__` serves: the string constants in its code and the keys of
the module-level collections it reads (`torch` serves `_lazy_modules` and `_deprecated_attrs`
that way). A module that is an object of its own class (`torch.backends.cudnn`) adds its
class's names and those of the module it wraps. `torch.Tensor` is recorded as well (its methods name the in-place refills MEM503
suggests). Only what this torch has is recorded: a name added in a later release, or removed
before this one, is simply absent, and MEM503 reports absent names only where it is sure (see
its documentation).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import types
from pathlib import Path

OUTPUT = Path(__file__).resolve().parent.parent / "memlint" / "data" / "torch_api.json"

# The modules whose namespace is recorded whole. Others (torch.ops, torch._C, torch.classes,
# anything private) are dynamic or not public: MEM503 never judges names under them.
MODULES = (
    "torch", "torch.amp", "torch.autograd", "torch.backends", "torch.backends.cuda", "torch.backends.cudnn",
    "torch.cuda", "torch.cuda.amp", "torch.cuda.memory", "torch.distributed", "torch.fft", "torch.hub",
    "torch.jit", "torch.linalg", "torch.multiprocessing", "torch.nn", "torch.nn.functional", "torch.nn.init",
    "torch.nn.parallel", "torch.nn.utils", "torch.optim", "torch.optim.lr_scheduler", "torch.random",
    "torch.special", "torch.utils", "torch.utils.checkpoint", "torch.utils.data", "torch.mps", "torch.xpu",
)
CLASSES = ("torch.Tensor",)


def _served_by_getattr(module) -> set:
    """Names a module-level `__getattr__` answers, as far as its code tells."""
    getattr_ = vars(module).get("__getattr__")
    code = getattr(getattr_, "__code__", None)
    if code is None:
        return set()
    names = {c for c in code.co_consts if isinstance(c, str) and c.isidentifier()}
    for global_name in code.co_names:
        value = vars(module).get(global_name)
        if isinstance(value, (dict, set, frozenset, list, tuple)):
            names |= {key for key in value if isinstance(key, str) and key.isidentifier()}
    return names


def _names(qualified: str) -> list:
    module = importlib.import_module(qualified)
    names = set(dir(module)) | _served_by_getattr(module)
    if type(module) is not types.ModuleType:  # a module object of its own class (torch.backends.cudnn)
        names |= set(dir(type(module)))
        wrapped = vars(module).get("m")  # torch.backends.PropModule answers from the module it wraps
        if isinstance(wrapped, types.ModuleType):
            names |= set(dir(wrapped))
        elif "__getattr__" in vars(type(module)):
            raise SystemExit(f"{qualified}: its class answers attributes in a way this script cannot list")
    for info in pkgutil.iter_modules(getattr(module, "__path__", None) or []):
        names.add(info.name)
    return sorted(names)


def record() -> dict:
    import torch

    modules = {name: _names(name) for name in MODULES}
    for qualified in CLASSES:
        owner, _, attr = qualified.rpartition(".")
        modules[qualified] = sorted(dir(getattr(importlib.import_module(owner), attr)))
    return {"torch": torch.__version__.split("+")[0], "modules": modules}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the data file is not what this torch gives")
    args = parser.parse_args(argv)
    text = json.dumps(record(), indent=0, sort_keys=True) + "\n"
    if args.check:
        same = OUTPUT.exists() and OUTPUT.read_text(encoding="utf-8") == text
        print(f"{OUTPUT}: {'up to date' if same else 'differs from this torch'}")
        return 0 if same else 1
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
