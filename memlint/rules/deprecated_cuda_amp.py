"""MEM402 deprecated-cuda-amp-api."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

import libcst as cst

from memlint.analysis.requirement import SINCE, exists_test
from memlint.analysis.torchapi import checked_first
from memlint.analysis.torchnames import Reference
from memlint.analysis.tree import TreeIndex, dotted_name, last_part
from memlint.findings import Fix, Replace, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.torch_target import TorchVersion

_OLD = "torch.cuda.amp"
_NEW = "torch.amp"
# deprecated API -> the names its positional parameters have (they become keywords)
_POSITIONAL = {
    "autocast": ("enabled", "dtype", "cache_enabled"),
    "GradScaler": ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled"),
    "custom_fwd": (),  # `fwd` stays positional: torch.amp.custom_fwd(fwd=None, *, device_type, ...)
    "custom_bwd": (),
}
_DECORATORS = frozenset({"custom_fwd", "custom_bwd"})
_HANDED = frozenset({"autocast", "GradScaler"})  # APIs handed on uncalled, to be called later (`_handed_on`)
# the torch release whose torch.amp has the replacement (`torch.amp.autocast`: 1.12, when the
# `torch.amp` namespace came; the same class was `torch.autocast` from 1.10)
_SINCE = {api: SINCE[f"{_NEW}.{api}"] for api in _POSITIONAL}
# the oldest replacement of each: where the project's torch predates it, the old spelling stays
# for that torch, beside the replacement behind a check that it exists
_REPLACEMENT = {**{api: f"{_NEW}.{api}" for api in _POSITIONAL}, "autocast": "torch.autocast"}
_CUDA = '"cuda"'


def _keyword(arg: cst.Arg, name: str) -> cst.Arg:
    return arg.with_changes(keyword=cst.Name(name), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))


def _device_type() -> cst.Arg:
    return _keyword(cst.Arg(cst.SimpleString(_CUDA)), "device_type")


def _new_args(api: str, args: Sequence[cst.Arg]) -> Optional[List[cst.Arg]]:
    """The arguments of the torch.amp call meaning what `args` meant; None when unsure."""
    if any(arg.star == "*" for arg in args):
        return None
    positional = [arg for arg in args if arg.keyword is None and not arg.star]
    rest = [arg for arg in args if arg.keyword is not None or arg.star]
    if api in _DECORATORS:
        if len(positional) > 1:
            return None
        return [*positional, _device_type(), *rest]
    names = _POSITIONAL[api]
    if len(positional) > len(names):
        return None
    converted = [_keyword(arg, name) for arg, name in zip(positional, names)]
    first_comma = args[0].comma if args else cst.MaybeSentinel.DEFAULT
    return [cst.Arg(cst.SimpleString(_CUDA), comma=first_comma), *converted, *rest]


@dataclass(frozen=True)
class _Site:
    reference: Reference
    api: str  # autocast, GradScaler, custom_fwd, custom_bwd

    @property
    def node(self) -> cst.CSTNode:
        """What the finding points at: the call, or the bare decorator's name."""
        return self.reference.call or self.reference.node

    @property
    def head(self) -> str:
        return (dotted_name(self.reference.node) or "").split(".")[0]

    def rewritten(self, func: cst.BaseExpression) -> Optional[Tuple[cst.CSTNode, cst.CSTNode]]:
        """(node to replace, its replacement) calling `func`; None when the arguments are unclear."""
        call = self.reference.call
        if call is not None:
            args = _new_args(self.api, call.args)
            return None if args is None else (call, call.with_changes(func=func, args=args))
        decorator = self.reference.parent
        if not type(decorator) is cst.Decorator:
            return None  # handed on uncalled (`_handed_on`): no call to rewrite here
        return decorator, decorator.with_changes(decorator=cst.Call(func, [_device_type()]))


def _spliced(func: cst.BaseExpression) -> cst.BaseExpression:
    """`t.cuda.amp.autocast` -> `t.amp.autocast`."""
    assert type(func) is cst.Attribute and type(func.value) is cst.Attribute
    cuda = func.value.value  # t.cuda
    assert type(cuda) is cst.Attribute
    return func.with_changes(value=cuda.with_changes(attr=cst.Name("amp")))


class DeprecatedCudaAmpApi(Rule):
    """
    ## What it does
    Finds calls of `torch.cuda.amp.autocast`, `torch.cuda.amp.GradScaler`,
    `torch.cuda.amp.custom_fwd` and `torch.cuda.amp.custom_bwd` (also imported with
    `from torch.cuda.amp import ...`), each at its call site; also `torch.cuda.amp.autocast` or
    `GradScaler` handed on uncalled, to be called later (`autocast = torch.cuda.amp.autocast if
    fp16 else nullcontext`, then `with autocast():`; `functools.partial(torch.cuda.amp.autocast,
    dtype=...)`), where it is picked.

    ## Why is this bad?
    Since torch 2.4 they are deprecated aliases of `torch.amp.autocast("cuda", ...)`,
    `torch.amp.GradScaler("cuda", ...)` and `torch.amp.custom_fwd/custom_bwd(device_type="cuda")`:
    they print a `FutureWarning` (once per call site, under Python's default warning filter)
    and will be removed.

    ## Why it is opt-in
    Like ruff's pyupgrade rules, which its default selection leaves out: the old spelling works,
    warns once per call site, and a project that supports a torch older than the replacement
    (declared, or only asserted in code) must keep it beside the new one. Read on real code
    (docs/real-code.md), 6 of 9 findings were worth the change; two were in a project that
    supports torch 1.8 without declaring it, one in an AMP optimizer used only with `--amp`.

    ## Example
    ```python
    scaler = torch.cuda.amp.GradScaler()
    with torch.cuda.amp.autocast(enabled=use_amp):
        loss = model(x).sum()
    ```

    Use instead:
    ```python
    scaler = torch.amp.GradScaler("cuda")
    with torch.amp.autocast("cuda", enabled=use_amp):
        loss = model(x).sum()
    ```

    ## Fix
    Calls `torch.amp.*` with `"cuda"` as the device and every original argument kept, written
    as keywords: the positional parameters do not line up (`torch.cuda.amp.autocast(False)` means
    `enabled=False`, but `torch.amp.autocast("cuda", False)` would pass `False` as the dtype).
    A bare `@torch.cuda.amp.custom_fwd` becomes `@torch.amp.custom_fwd(device_type="cuda")`.
    Names imported with `from torch.cuda.amp import ...` are imported from `torch.amp` instead
    when every use of them is rewritten, so no import is left unused; otherwise the site is
    reported without a fix unless `torch` itself is imported. An API handed on has no fix: its
    replacement is `functools.partial(torch.amp.autocast, "cuda")`, which takes the same
    keywords but not the same positional arguments, so the calls elsewhere must be read.

    ## Fix safety
    Safe: the deprecated functions are thin wrappers that call exactly these. The replacement
    must exist on the oldest torch the project supports (`target-torch`): `torch.amp.autocast`
    since 1.12 (on 1.10 and 1.11 it is `torch.autocast`: the message names that one, without a
    fix), `torch.amp.GradScaler` since 2.3, `torch.amp.custom_fwd/custom_bwd` since 2.4.
    An import moved to `torch.amp` needs every name it imports: where one of them is newer than
    the target, the finding has no fix, and says why.

    ## Where the project supports an older torch
    Where the oldest torch the project supports (`target-torch`, or the lower bound of its
    declared torch requirement) has no replacement at all (`torch.cuda.amp.autocast` below
    1.10, `GradScaler` below 2.3, `custom_fwd/custom_bwd` below 2.4), the old spelling must stay
    for that torch, and the finding has no fix: it asks for the replacement where it exists,
    behind the check that tells (`torch.amp.GradScaler("cuda") if hasattr(torch, "amp") and
    hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()`), so that torch 2.4 and
    later run without the warning. MEM401's fix makes its scaler that way on such a project.

    ## When it is not reported
    - The fallback for older torch next to the new spelling (`torch.amp.GradScaler("cuda") if
      new_torch else torch.cuda.amp.GradScaler()`, `try: from torch.amp import ...` / `except`).
    """

    CODE = "MEM402"
    DEFAULT_ON = False
    NAME = "deprecated-cuda-amp-api"
    MESSAGE = "`torch.cuda.amp` is deprecated since torch 2.4; use `torch.amp` with device \"cuda\""
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.NONE
    # `torch.cuda.amp` spelled, or one of its APIs by name (imported from a module that took it
    # from there); most PyTorch files have neither, and this rule asks of every name and call
    REQUIRES = ("amp", "autocast", "GradScaler", "custom_fwd", "custom_bwd")

    VALID = (
        "import torch\nwith torch.amp.autocast(\"cuda\", dtype=torch.float16):\n    y = model(x)\n",
        "import torch\nscaler = torch.amp.GradScaler(\"cuda\")\n",
        "from torch.amp import autocast\nwith autocast(\"cuda\"):\n    y = model(x)\n",
        # a compatibility import that picks whichever exists is not a use
        "try:\n    from torch.amp import GradScaler\nexcept ImportError:\n"
        "    from torch.cuda.amp import GradScaler\nscaler = GradScaler(\"cuda\")\n",
        # a fallback for torch < 2.4 next to the new spelling
        "import torch\nscaler = torch.amp.GradScaler(\"cuda\") if NEW_TORCH else torch.cuda.amp.GradScaler()\n",
        "import torch\nif hasattr(torch.amp, \"GradScaler\"):\n    s = torch.amp.GradScaler(\"cuda\")\nelse:\n"
        "    s = torch.cuda.amp.GradScaler()\n",
        # ... the new spelling returned behind a check first, the old one after it
        "import torch\ndef make_scaler():\n    if hasattr(torch, \"amp\") and hasattr(torch.amp, \"GradScaler\"):\n"
        "        return torch.amp.GradScaler(\"cuda\")\n    return torch.cuda.amp.GradScaler()\n",
        "import torch\ndef make_scaler():\n    try:\n        return torch.amp.GradScaler(\"cuda\")\n"
        "    except AttributeError:\n        pass\n    return torch.cuda.amp.GradScaler()\n",
        # something else called autocast
        "import torch\nfrom mylib import autocast\nwith autocast():\n    y = model(x)\n",
        "import torch\nwith torch.cpu.amp.autocast():\n    y = model(x)\n",
        # a type tested, not an API called: the old class is still what old code makes
        "import torch\ndef unscaled(scaler):\n    return not isinstance(scaler, torch.cuda.amp.GradScaler)\n",
    )
    INVALID = (
        # ... and imported by name, then handed to a partial
        Invalid(
            "import functools\nimport torch\nfrom torch.cuda.amp import autocast\n\n"
            "ctx = functools.partial(autocast, enabled=True)\nprint(isinstance(ctx, functools.partial))\n"
        ),
        Invalid(
            "import torch\nscaler = torch.cuda.amp.GradScaler()\nwith torch.cuda.amp.autocast():\n"
            "    loss = model(x)\n",
            "import torch\nscaler = torch.amp.GradScaler(\"cuda\")\nwith torch.amp.autocast(\"cuda\"):\n"
            "    loss = model(x)\n",
        ),
        # positional arguments become keywords: autocast(False) means enabled=False
        Invalid(
            "import torch as t\nwith t.cuda.amp.autocast(False):\n    y = model(x)\n"
            "s = t.cuda.amp.GradScaler(2.0 ** 10, growth_interval=100)\n",
            "import torch as t\nwith t.amp.autocast(\"cuda\", enabled=False):\n    y = model(x)\n"
            "s = t.amp.GradScaler(\"cuda\", init_scale=2.0 ** 10, growth_interval=100)\n",
        ),
        Invalid(
            "import torch\nwith torch.cuda.amp.autocast(enabled=use_amp, dtype=torch.bfloat16, cache_enabled=False):\n"
            "    y = model(x)\n",
            "import torch\nwith torch.amp.autocast(\"cuda\", enabled=use_amp, dtype=torch.bfloat16, cache_enabled=False):\n"
            "    y = model(x)\n",
        ),
        # names imported from torch.cuda.amp: the import moves to torch.amp
        Invalid(
            "import torch\nfrom torch.cuda.amp import autocast, GradScaler\n\nscaler = GradScaler()\n"
            "for x in loader:\n    with autocast(dtype=torch.float16):\n        loss = model(x)\n",
            "import torch\nfrom torch.amp import autocast, GradScaler\n\nscaler = GradScaler(\"cuda\")\n"
            "for x in loader:\n    with autocast(\"cuda\", dtype=torch.float16):\n        loss = model(x)\n",
        ),
        Invalid(
            "import torch\n\nclass F(torch.autograd.Function):\n    @staticmethod\n    @torch.cuda.amp.custom_fwd\n"
            "    def forward(ctx, x):\n        return x\n\n    @staticmethod\n"
            "    @torch.cuda.amp.custom_bwd\n    def backward(ctx, g):\n        return g\n",
            "import torch\n\nclass F(torch.autograd.Function):\n    @staticmethod\n"
            "    @torch.amp.custom_fwd(device_type=\"cuda\")\n    def forward(ctx, x):\n        return x\n\n"
            "    @staticmethod\n    @torch.amp.custom_bwd(device_type=\"cuda\")\n    def backward(ctx, g):\n"
            "        return g\n",
        ),
        Invalid(
            "from torch.cuda.amp import custom_fwd\nimport torch\n\n@custom_fwd(cast_inputs=torch.float32)\n"
            "def forward(ctx, x):\n    return x\n",
            "from torch.amp import custom_fwd\nimport torch\n\n@custom_fwd(device_type=\"cuda\", cast_inputs=torch.float32)\n"
            "def forward(ctx, x):\n    return x\n",
        ),
        Invalid(
            "from torch.cuda import amp\nscaler = amp.GradScaler(\n    init_scale=1024,\n    enabled=True,\n)\n",
            "from torch import amp\nscaler = amp.GradScaler(\n    \"cuda\",\n    init_scale=1024,\n    enabled=True,\n)\n",
        ),
        # the name is also used another way: the import must stay, so there is no fix
        Invalid("from torch.cuda.amp import GradScaler\nscaler = GradScaler()\nassert isinstance(scaler, GradScaler)\n"),
        # the API handed on, called later (`with autocast():`): reported where it is picked, no fix
        Invalid(
            "import torch\nfrom contextlib import nullcontext\n\ndef train(model, loader, config):\n"
            "    autocast = torch.cuda.amp.autocast if config.use_fp16 else nullcontext\n"
            "    for x in loader:\n        with autocast():\n            loss = model(x)\n"
        ),
        # ... and handed to a partial (bark's `funcy.partial`), called later
        Invalid(
            "import functools\nimport torch\n\nautocast = functools.partial(torch.cuda.amp.autocast, dtype=torch.bfloat16)\n"
            "with autocast():\n    loss = model(x)\n"
        ),
    )

    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        super().__init__(context)
        self._plan: Optional[Dict[int, Tuple[_Site, Optional[Fix]]]] = None

    def visit_Call(self, node: cst.Call) -> None:
        name = self.facts.names.call_name(node)
        if name is not None and name.rpartition(".")[0] == _OLD and name.rpartition(".")[2] in _POSITIONAL:
            self._report(node)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        if type(node.decorator) in (cst.Name, cst.Attribute):
            name = self.facts.names.qualified_name(node.decorator)
            if name is not None and name.rpartition(".")[0] == _OLD and name.rpartition(".")[2] in _DECORATORS:
                self._report(node.decorator)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        """`torch.cuda.amp.autocast if use_fp16 else nullcontext`: the API handed on, to be called
        later (`with autocast():`), where it warns all the same."""
        if node.attr.value in _HANDED:
            self._handed(node)

    def visit_Name(self, node: cst.Name) -> None:
        """`partial(autocast, ...)` after `from torch.cuda.amp import autocast`."""
        if node.value in _HANDED:
            self._handed(node)

    def _handed(self, node: cst.BaseExpression) -> None:
        if _handed_on(node, self.facts.tree.parent(node), self.facts.tree) and \
                self.facts.names.qualified_name(node) in (f"{_OLD}.{api}" for api in _HANDED):
            self._report(node)

    def _report(self, node: cst.CSTNode) -> None:
        if self._plan is None:
            self._plan = self._make_plan()
        planned = self._plan.get(id(node))
        if planned is None:
            return
        site, fix = planned
        old = dotted_name(site.reference.node)
        qualified = f"{_OLD}.{site.api}"
        what = f"`{old}`" if old == qualified else f"`{old}` ({qualified})"
        deprecated = f"{what} is deprecated since torch 2.4 (a FutureWarning, shown once for this call site)"
        replacement = _REPLACEMENT[site.api]
        if self._before(SINCE[replacement]):  # the oldest torch supported has no replacement
            torch = self.facts.names.local_name_for("torch") or "torch"
            spelled = torch + replacement[len("torch"):]
            self.report(node, f"{deprecated}, and `{replacement}` is newer than the oldest torch the project "
                              f"supports ({self.target_torch}): keep this call for older torch only, and call "
                              f"`{_call(spelled)}` where `{exists_test(replacement, torch, self.target_torch)}` "
                              "(or behind a version flag)")
            return
        namespace = "torch" if site.api == "autocast" and self._before(_SINCE["autocast"]) else "torch.amp"
        if site.reference.call is None and not type(site.reference.parent) is cst.Decorator:
            self.report(node, f"{what} is deprecated since torch 2.4: handed on here, it warns (a FutureWarning) "
                              f"where it is called; hand on `functools.partial({namespace}.{site.api}, {_CUDA})` "
                              "instead, called with keywords (its positional parameters differ)")
            return
        self.report(node, f"{deprecated}; call `{_call(f'{namespace}.{site.api}')}` with the same arguments, "
                          "as keywords", fix)

    # -- planning: every site of the file at once (a rewritten import must cover all of its uses)
    def _make_plan(self) -> Dict[int, Tuple[_Site, Optional[Fix]]]:
        sites: List[_Site] = []
        for api in _POSITIONAL:
            for reference in self.facts.references(f"{_OLD}.{api}"):
                called = reference.call is not None
                bare = type(reference.parent) is cst.Decorator and api in _DECORATORS or \
                    api in _HANDED and _handed_on(reference.node, reference.parent, self.facts.tree)
                if (called or bare) and not self._compatibility(reference, api):
                    sites.append(_Site(reference, api))
        by_head: Dict[str, List[_Site]] = {}
        for site in sites:
            by_head.setdefault(site.head, []).append(site)
        plan: Dict[int, Tuple[_Site, Optional[Fix]]] = {}
        for head, group in by_head.items():
            head_name = self.facts.names.qualified_name(cst.Name(head))
            if head_name == "torch":  # spelled out: t.cuda.amp.X -> t.amp.X
                for site in group:
                    edit = site.rewritten(_spliced(site.reference.node))  # type: ignore[arg-type]
                    plan[id(site.node)] = (site, self._fix([edit], [site.api], site))
                continue
            if head_name is not None and (head_name + ".").startswith(_OLD + "."):
                edits, apis = self._import_edits(head, group, by_head)
                shared: Dict[str, Optional[Fix]] = {}  # one fix per API for the whole group: it
                for site in group:  # holds every use, so one per site would cost the square
                    if site.api not in shared:
                        shared[site.api] = self._fix(edits, apis, site)
                    plan[id(site.node)] = (site, shared[site.api])
                continue
            for site in group:  # e.g. `from torch import cuda; cuda.amp.autocast()`
                spelled = self.facts.names.local_name_for(f"{_NEW}.{site.api}")
                edit = site.rewritten(cst.parse_expression(spelled)) if spelled else None
                plan[id(site.node)] = (site, self._fix([edit], [site.api], site))
        return plan

    def _before(self, version: TorchVersion) -> bool:
        target = self.target_torch
        return target is not None and target < version

    def _compatibility(self, reference: Reference, api: str) -> bool:
        """The old spelling is the fallback of a branch that uses the new one on newer torch:
        `torch.amp.GradScaler("cuda") if new_torch else torch.cuda.amp.GradScaler()`, or, in the
        same function, after a new spelling the code checks for first (`if hasattr(torch.amp,
        "GradScaler"): return torch.amp.GradScaler("cuda")`, `try:` ... `except AttributeError:`)."""
        facts = self.facts
        new = [r.node for spelling in dict.fromkeys((f"{_NEW}.{api}", _REPLACEMENT[api])) for r in facts.references(spelling)]
        if not new:
            return False
        scope = facts.tree.scope_of(reference.node)
        if any(facts.tree.scope_of(node) is scope and checked_first(facts.tree, node) for node in new):
            return True
        for ancestor in facts.tree.ancestors(reference.node):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Module):
                return False
            if type(ancestor) in (cst.IfExp, cst.If, cst.Try) and \
                    any(facts.tree.contains(ancestor, n) for n in new):
                return True
        return False

    def _import_edits(self, head: str, group: List[_Site], by_head: Dict[str, List[_Site]]
                      ) -> Tuple[List[Optional[Tuple[cst.CSTNode, cst.CSTNode]]], Set[str]]:
        """Rewrite every site of the names one import binds, and the import ([None] if not
        possible); with the APIs that must then exist in torch.amp."""
        imports = self.facts.names.imports_of(head)
        if len(imports) != 1:
            return [None], set()
        statement = imports[0]
        locals_ = _bound_names(statement)
        edits: List[Optional[Tuple[cst.CSTNode, cst.CSTNode]]] = []
        apis = {name for name in _imported_names(statement) if name in _SINCE}
        for local in locals_:
            uses = by_head.get(local, [])
            if len(self.facts.references_through(local)) != len(uses):  # used another way too: the import stays
                return [None], set()
            edits.extend(site.rewritten(site.reference.node) for site in uses)  # type: ignore[arg-type]
            apis.update(site.api for site in uses)
        new_import = _moved_import(statement)
        if new_import is None:
            return [None], set()
        return [*edits, (statement, new_import)], apis

    @staticmethod
    def _fix(edits: Sequence[Optional[Tuple[cst.CSTNode, cst.CSTNode]]], apis: Iterable[str],
             site: _Site) -> Optional[Fix]:
        if not edits or any(edit is None for edit in edits):
            return None
        return Fix(
            edits=tuple(Replace(old, new) for old, new in edits),  # type: ignore[misc]
            safety=Safety.SAFE,
            description=f"call `torch.amp.{site.api}` with device \"cuda\", arguments as keywords",
            min_torch=max(_SINCE[api] for api in {site.api, *apis}),
        )


def _handed_on(node: cst.CSTNode, parent: Optional[cst.CSTNode], tree: TreeIndex) -> bool:
    """The API is a value bound or picked to be called later: a branch of a conditional
    expression (`torch.cuda.amp.autocast if fp16 else nullcontext`), the value of an
    assignment (`autocast = torch.cuda.amp.autocast`), or what a partial will call
    (`functools.partial(torch.cuda.amp.autocast, dtype=torch.bfloat16)`, funcy's alike). Not a
    type tested with `isinstance`."""
    if type(parent) is cst.IfExp:
        return parent.body is node or parent.orelse is node
    if type(parent) is cst.Arg:
        call = tree.parent(parent)
        return type(call) is cst.Call and call.args[0] is parent and parent.keyword is None and \
            last_part(dotted_name(call.func)) == "partial"  # type: ignore[attr-defined]
    return type(parent) is cst.Assign and parent.value is node


def _call(api: str) -> str:
    """How the replacement is called: `torch.amp.GradScaler("cuda", ...)`."""
    return f"{api}(device_type=\"cuda\")" if api.rpartition(".")[2] in _DECORATORS else f"{api}(\"cuda\", ...)"


def _imported_names(statement: cst.CSTNode) -> List[str]:
    """`autocast`, `GradScaler` for `from torch.cuda.amp import autocast, GradScaler as S`."""
    aliases = getattr(statement, "names", ())
    return [dotted_name(alias.name) or "" for alias in aliases] if isinstance(aliases, (list, tuple)) else []


def _bound_names(statement: cst.CSTNode) -> List[str]:
    names: List[str] = []
    aliases = getattr(statement, "names", ())
    for alias in aliases if isinstance(aliases, (list, tuple)) else ():
        if alias.asname is not None:
            names.append(alias.asname.name.value)
        else:
            names.append((dotted_name(alias.name) or "").split(".")[0])
    return names


def _moved_import(statement: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The same import from torch.amp; None when it imports anything that would not move."""
    if type(statement) is cst.ImportFrom and statement.module is not None and not statement.relative:
        module = dotted_name(statement.module)
        names = [dotted_name(alias.name) for alias in statement.names]  # type: ignore[union-attr]
        if module == _OLD and all(name in _POSITIONAL for name in names):
            return statement.with_changes(module=cst.parse_expression(_NEW))
        if module == "torch.cuda" and names == ["amp"]:
            return statement.with_changes(module=cst.Name("torch"))
        return None
    if type(statement) is cst.Import and len(statement.names) == 1:
        alias = statement.names[0]
        if dotted_name(alias.name) == _OLD and alias.asname is not None:
            return statement.with_changes(names=[alias.with_changes(name=cst.parse_expression(_NEW))])
    return None
