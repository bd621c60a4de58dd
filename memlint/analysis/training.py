"""The shape of a training step, from the module's own code.

One walk of the module (done the first time a rule asks) indexes what every autograd, optimizer
and mixed-precision rule needs:

- *calls by role*: `backward()` (also `scaler.scale(loss).backward()`, `accelerator.backward(loss)`,
  `torch.autograd.backward/grad`), `optimizer.step()` (also `scaler.step(optimizer)`),
  `zero_grad()` and `p.grad = None`, forward calls of modules (`model(x)`, `self.net(x)`,
  `model(**batch)`, `model.forward(x)`), loss calls (`criterion(out, y)`, `F.cross_entropy`),
  `model.eval()` / `.train()`, HF `generate()`;
- *regions*: `with torch.no_grad()` / `inference_mode()` / `set_grad_enabled(...)` /
  `enable_grad()`, functions decorated with them, Lightning's `validation_step`-style hooks
  (run without grad by Lightning), `with torch.autocast(...)`, `with accelerator.accumulate(...)`;
- *receivers*: which dotted names are optimizers (built from `torch.optim.*`, used with
  `.zero_grad()` / `.param_groups`, or named like one) and which are models;
- *helpers*: calls from a loop into functions and methods of the same module are followed
  (`train_step(batch)`, `self.validate()`), so a loop "has a backward" when a helper it calls does.

Every question answers conservatively: when unsure whether grad is enabled, `grad_enabled` says
None, and rules do not report.

Rules reach it as `self.facts.training`. The questions they ask most:

- lists: `backwards` (Backward), `optimizer_steps` (OptimizerStep), `zero_grads` (ZeroGrad),
  `autocasts` (Autocast), `grad_regions`, `accumulate_regions`, `mode_calls` (ModeCall);
  per call: `backward_of(call)`, `step_of(call)`, `is_forward(call)`, `is_loss(call)`,
  `is_generate(call)`; per receiver: `is_optimizer(expr)`, `is_model(expr)`, `constructor_of(expr)`;
- under a node (a loop), helpers followed: `backwards_in`, `steps_in`, `forwards_in`, `calls_in`
  (each item with its call site in the node), `is_training(loop)`, `eval_evidence(loop)`;
- at a node: `grad_enabled`, `region_at`, `autocast_at`, `in_accumulate`, `loops_around`,
  `scope_of`, `function_of`, `order` (source order), `ancestors`;
- values: `carries_grad(expr, at)`, `reaches_backward(scope, names)`, `leaves_scope(scope, names)`,
  `reset_in_iteration(loop, name, at)`, `hands_graph_away(loop)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.dataflow import (SCALAR_ATTRIBUTES, SCALAR_FUNCTIONS, SCALAR_METHODS, derived,
                                       leaf_targets, sources_of, target_names)
from memlint.analysis.calls import CallGraph
from memlint.analysis.regions import LIGHTNING_BASES, Regions
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import Scope, TreeIndex, argument, children, dotted_name, last_part, literal_bool

# -- vocabulary --------------------------------------------------------------------------------
# Methods whose result carries no autograd graph.
DETACHING_METHODS = frozenset(SCALAR_METHODS | {
    "detach", "detach_", "numpy", "argmax", "argmin", "eq", "ne", "gt", "lt", "ge", "le",
    "isnan", "isinf", "isfinite", "nonzero", "long", "int", "bool", "short", "byte", "char",
    "logical_and", "logical_or", "logical_not", "logical_xor", "sign", "count_nonzero",
    "zero_grad", "eval", "train", "parameters", "named_parameters", "state_dict", "generate",
    "append", "extend", "insert", "update", "keys", "values", "items", "requires_grad_",
    "argsort", "argwhere", "multinomial", "unique", "bincount", "histc", "bucketize", "searchsorted",
    "floor_divide", "is_nonzero", "equal", "allclose", "isclose", "any", "all",
})
# Calls returning (values, indices): an unpacked element may be the indices, which carry no graph.
_VALUES_INDICES = frozenset({"max", "min", "topk", "sort", "kthvalue", "median", "mode", "nanmedian",
                             "cummax", "cummin"})
DETACHING_ATTRIBUTES = frozenset(SCALAR_ATTRIBUTES | {"data", "grad"})
_NON_DIFF_TORCH = frozenset({
    "torch.argmax", "torch.argmin", "torch.eq", "torch.ne", "torch.gt", "torch.lt", "torch.ge",
    "torch.le", "torch.isnan", "torch.isinf", "torch.isfinite", "torch.nonzero", "torch.tensor",
    "torch.argsort", "torch.multinomial", "torch.unique", "torch.bincount", "torch.bucketize",
    "torch.searchsorted", "torch.equal", "torch.allclose", "torch.isclose", "torch.any", "torch.all",
    "torch.no_grad", "torch.inference_mode", "torch.count_nonzero", "torch.numel", "torch.is_tensor",
})
# torch functions whose result is a tensor computed from their arguments
_TENSOR_FUNCTION = re.compile(r"^torch\.(\w+|nn\.functional\.\w+|linalg\.\w+|fft\.\w+|special\.\w+)$")
_GRAD_SCALER = frozenset({"torch.amp.GradScaler", "torch.cuda.amp.GradScaler",
                          "torch.amp.grad_scaler.GradScaler", "torch.cpu.amp.GradScaler"})
# Helpers whose name says they clear gradients (`zero_grads(model)`, `self.reset_grad()`).
_RESET_NAME = re.compile(r"zero_?grad|reset_?grad|clear_?grad|grad\w*_?(zero|reset|clear|none)", re.IGNORECASE)
_AUTOGRAD_BACKWARD = frozenset({"torch.autograd.backward"})
_AUTOGRAD_GRAD = frozenset({"torch.autograd.grad"})
_EVAL_FUNCTION = re.compile(
    r"(^|_)(eval|evaluate|evaluation|valid|validate|validation|val|test|predict|prediction|infer|"
    r"inference|generate|generation|sample|sampling)(_|$)", re.IGNORECASE)
_SAMPLING_FUNCTION = re.compile(r"(^|_)(generate|generation|sample|sampling)(_|$)", re.IGNORECASE)
# Functions whose result is, by convention, backwarded by their caller.
TRAINING_FUNCTIONS = frozenset({"training_step", "train_step", "compute_loss", "forward",
                                "loss", "get_loss", "compute_losses", "__call__"})
# Objects whose `.backward(loss)` backwards its argument.
_BACKWARD_OWNER = re.compile(r"(accelerator|fabric|engine|trainer|manual_backward)$", re.IGNORECASE)
_OPTIMIZER_NAME = re.compile(
    r"^(opt|optim|optimizer|optimiser)s?(_\w+)?$|_(opt|optim|optimizer|optimiser)$|^opt_?[a-z]$|^optimizer\w*$",
    re.IGNORECASE)
_NOT_OPTIMIZER_NAME = re.compile(r"sched|scaler|lr", re.IGNORECASE)
_MODEL_NAME = re.compile(
    r"^(model|models|net|network|module|encoder|decoder|generator|discriminator|policy|critic|"
    r"actor|classifier|backbone|transformer|rnn|lstm|gru|cell|teacher|student|unet|vae|"
    r"autoencoder|netG|netD|ema_model|lm|llm)\d*$",
    re.IGNORECASE)
# `base_model`, `text_encoder`, `model_ema`: only as a plain name or an attribute of `self`
# (`pipe.generate_language_model(...)` is a method, not a model)
_MODEL_COMPOUND = re.compile(r"^\w+_(model|net|network|encoder|decoder|rnn|lstm|gru)$|^(model|net)_\w+$",
                             re.IGNORECASE)
_NOT_A_MODEL_CALL = re.compile(r"_(cls|class|classes|config|cfg|name|names|path|dir|id|ids|kwargs|args|type|fn_name|"
                               r"factory|builder|pipeline)$")
_MAKES_A_MODEL = re.compile(
    r"^(get|load|build|create|make|init|initialize|setup|prepare|wrap|unwrap|convert|save|export|to|from|copy|"
    r"clone|freeze|unfreeze|compile|quantize|merge|apply|register|find|check|is|has|update|print|log|"
    r"instantiate|restore|download|fetch|construct|define|new|train|evaluate|eval|test|run|truncate)_",
    re.IGNORECASE)
_NN_NOT_MODULE = re.compile(r"^torch\.nn\.(functional|init|utils|parameter|Parameter|parallel\.scatter)")
_MODEL_FACTORIES = re.compile(
    r"(\.from_pretrained$|^timm\.create_model$|^torchvision\.models\.[a-z]\w*$|^torch\.compile$|"
    r"^torch\.nn\.parallel\.DistributedDataParallel$|^torch\.nn\.DataParallel$|^torch\.jit\.script$)")
# `X.from_pretrained` that does not make a module running with grad (diffusers pipelines run
# under no_grad, like HF generate)
_NOT_A_MODULE = re.compile(r"Tokenizer|Processor|Config|Extractor|Pipeline|Scheduler|Dataset")
_MODEL_MOVERS = frozenset({"to", "cuda", "cpu", "half", "float", "bfloat16", "double", "eval", "train",
                           "requires_grad_", "share_memory"})
_LOSS_NAME = re.compile(r"^(criterion|criterion_\w+|\w+_criterion|loss_fn|loss_func|loss_function|"
                        r"lossfn|\w+_loss_fn|loss_fn_\w+|loss_module|compute_loss)$", re.IGNORECASE)
_FUNCTIONAL_LOSS = re.compile(r"^torch\.nn\.functional\.(\w+_loss|cross_entropy|binary_cross_entropy\w*|"
                              r"kl_div|nll_loss|mse_loss|l1_loss)$")


_HARMLESS_FUNCTIONS = frozenset({"print", "len", "float", "int", "str", "repr", "isinstance", "list", "tuple",
                                 "sorted", "zip", "enumerate", "max", "min", "sum", "abs", "round", "format",
                                 "type", "id", "dict", "map"})
_HARMLESS_METHODS = frozenset({"update", "log", "info", "debug", "warning", "add_scalar", "add_scalars",
                               "write", "append", "extend", "insert", "add", "put", "format", "join",
                               "set_postfix", "log_dict", "print"})


# -- facts ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Backward:
    """A call that backpropagates: `loss.backward()`, `accelerator.backward(loss)`,
    `scaler.scale(loss).backward()`, `torch.autograd.backward(loss)`, `torch.autograd.grad(...)`."""

    call: cst.Call
    loss: Optional[cst.BaseExpression]  # what is backwarded (`loss`), when known
    kind: str  # "method", "owner" (accelerator.backward), "scaled", "autograd", "grad"
    scaler: Optional[cst.BaseExpression]  # `scaler` in `scaler.scale(loss).backward()`
    retain_graph: Optional[cst.BaseExpression]  # the value given for retain_graph=, if any
    names: FrozenSet[str]  # plain names the backwarded value comes from


@dataclass(frozen=True)
class OptimizerStep:
    call: cst.Call
    optimizer: Optional[str]  # dotted: "optimizer", "self.opt"; None when not a plain name
    scaler: Optional[str]  # "scaler" in `scaler.step(optimizer)`


@dataclass(frozen=True)
class ZeroGrad:
    """A gradient reset: `x.zero_grad(...)`, or an assignment `p.grad = None`."""

    node: cst.CSTNode  # the Call, or the Assign
    target: Optional[str]  # dotted receiver
    set_to_none: Optional[cst.BaseExpression]  # the value given for set_to_none, if any
    is_optimizer: bool


@dataclass(frozen=True)
class ModeCall:
    """`model.eval()` / `model.train()` (`train(False)` counts as eval)."""

    call: cst.Call
    target: str
    mode: str  # "eval" or "train"


def _stores_into_container(target: cst.CSTNode) -> bool:
    """`obj.a = v`, `d[k] = v`, also inside a tuple target."""
    return any(isinstance(leaf, (cst.Attribute, cst.Subscript)) for leaf in leaf_targets(target))


def _expression_nodes(expr: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The nodes of an expression, lambdas and comprehensions not entered."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            stack.extend(children(node))


def _is_parameters_call(expr: cst.BaseExpression) -> bool:
    """`model.parameters()`, `model.named_parameters()`, `filter(..., model.parameters())`, `[...]`."""
    for node in _expression_nodes(expr):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
                node.func.attr.value in ("parameters", "named_parameters"):
            return True
    return False


class TrainingFacts:
    """The training-step facts of one module (see the module docstring)."""

    def __init__(self, module: cst.Module, names: TorchNames, tree: TreeIndex, scopes: Scopes, regions: Regions,
                 calls: CallGraph) -> None:
        self.module = module
        self.names = names
        self.tree = tree
        self.scopes = scopes
        self.regions = regions
        self.calls = calls
        self.mode_calls: List[ModeCall] = []
        self.requires_grad_off = False  # `x.requires_grad_(False)` / `p.requires_grad = False` seen
        self._grad_assigns: List[cst.Assign] = []
        self._derive()
        self.optimizers: FrozenSet[str] = frozenset(self._find_optimizers() | self._annotated_optimizers()
                                                   | self._built_on_parameters())
        self.models: FrozenSet[str] = frozenset(self._find_models())
        self.loss_objects: FrozenSet[str] = frozenset(
            dotted for assign in self.scopes.assigns if isinstance(assign.value, cst.Call)
            and (self.names.call_name(assign.value) or "").startswith("torch.nn.")
            and (self.names.call_name(assign.value) or "").endswith("Loss")
            for dotted in (dotted_name(t.target) for t in assign.targets) if dotted is not None)
        self.backwards: List[Backward] = [b for b in map(self._backward, self.scopes.calls) if b is not None]
        self._backward_of = {id(b.call): b for b in self.backwards}
        self.optimizer_steps: List[OptimizerStep] = [
            s for s in map(self._optimizer_step, self.scopes.calls) if s is not None]
        self._step_of = {id(s.call): s for s in self.optimizer_steps}
        self.zero_grads: List[ZeroGrad] = self._find_zero_grads()
        self._memo_grad: Dict[Tuple[str, int], bool] = {}
        self._memo_returns: Dict[int, bool] = {}
        self._in_progress: Set[Tuple[str, int]] = set()

    def _derive(self) -> None:
        """What the scopes' inventory shows about grad mode, regions and mode switches."""
        for call in self.scopes.calls:
            func = call.func
            if not isinstance(func, cst.Attribute):
                continue
            method = func.attr.value
            receiver = dotted_name(func.value)
            if method in ("eval", "train") and receiver is not None:
                mode = method
                flag = argument(call, "mode", 0)
                if method == "train" and flag is not None and literal_bool(flag.value) is False:
                    mode = "eval"
                self.mode_calls.append(ModeCall(call, receiver, mode))
            elif method == "requires_grad_":
                flag = argument(call, "requires_grad", 0)
                if flag is not None and literal_bool(flag.value) is False:
                    self.requires_grad_off = True
        for assign in self.scopes.assigns:
            for target in assign.targets:
                tgt = target.target
                if isinstance(tgt, cst.Attribute):
                    if tgt.attr.value == "requires_grad" and literal_bool(assign.value) is False:
                        self.requires_grad_off = True
                    if tgt.attr.value == "grad":
                        self._grad_assigns.append(assign)

    # -- mixed precision and the parts of a step (used by the 3xx/4xx rules) ---------------------
    def _annotated_optimizers(self) -> Set[str]:
        """Parameters annotated as optimizers: `def train(opt: torch.optim.Optimizer)`."""
        found: Set[str] = set()
        for bind in self.scopes.every_binding():
            node = bind.node
            if bind.kind == "param" and isinstance(node, cst.Param) and node.annotation is not None:
                qualified = self.names.qualified_name(node.annotation.annotation) or ""
                if qualified.startswith("torch.optim.") and "lr_scheduler" not in qualified:
                    found.add(bind.name)
        return found

    def _built_on_parameters(self) -> Set[str]:
        """Names bound to an object built on a model's parameters, `hydra.utils.instantiate(cfg.optim,
        model.parameters())`, that are stepped somewhere (`x.step()`): optimizers by what they do."""
        stepped = {dotted_name(c.func.value) for c in self.scopes.calls  # type: ignore[attr-defined]
                   if isinstance(c.func, cst.Attribute) and c.func.attr.value == "step"}
        found: Set[str] = set()
        for assign in self.scopes.assigns:
            value = assign.value
            if not isinstance(value, cst.Call) or "lr_scheduler" in (self.names.call_name(value) or ""):
                continue
            if not any(_is_parameters_call(arg.value) for arg in value.args):
                continue
            for target in assign.targets:
                dotted = dotted_name(target.target)
                if dotted in stepped and not _NOT_OPTIMIZER_NAME.search(last_part(dotted)) and \
                        not re.search(r"ema|swa|averag", last_part(dotted), re.IGNORECASE):
                    found.add(dotted)  # type: ignore[arg-type]
        return found

    def parameters_owners(self, optimizer: str) -> Set[str]:
        """The models an optimizer is built on: `{"model"}` for `opt = SGD(model.parameters())`."""
        owners: Set[str] = set()
        for assign in self.scopes.assigns:
            if not isinstance(assign.value, cst.Call) or \
                    not any(dotted_name(t.target) == optimizer for t in assign.targets):
                continue
            for arg in assign.value.args:
                for node in _expression_nodes(arg.value):
                    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
                            node.func.attr.value in ("parameters", "named_parameters"):
                        owner = dotted_name(node.func.value)
                        if owner is not None:
                            owners.add(owner)
        return owners

    def is_known_optimizer(self, dotted: Optional[str], at: cst.CSTNode, depth: int = 0) -> bool:
        """Whether `dotted`, read at `at`, surely is an optimizer: one of `optimizers`, or a
        parameter of its function that every call of the function in this module passes one."""
        if dotted is None:
            return False
        if dotted in self.optimizers:
            return True
        func = self.tree.function_of(at)
        if func is None or "." in dotted or depth > 3:
            return False
        params = func.params
        positional = [*params.posonly_params, *params.params]
        names = [p.name.value for p in positional]
        if dotted not in names and dotted not in [p.name.value for p in params.kwonly_params]:
            return False
        if any(b.kind != "param" for b in self.scopes.bindings(func, dotted)):
            return False  # rebound in the function
        sites = self.scopes.call_sites(func)
        if not sites:
            return False
        offset = 1 if self.tree.class_of(func) is not None and names[:1] in (["self"], ["cls"]) else 0
        for site in sites:
            arg = argument(site, dotted, names.index(dotted) - offset if dotted in names else None)
            if arg is None or arg.star or not self.is_known_optimizer(dotted_name(arg.value), site, depth + 1):
                return False
        return True

    @property
    def uses_grad_scaler(self) -> bool:
        """A GradScaler is made, or a loss is scaled / a step taken through one, anywhere in the module."""
        if any(b.kind == "scaled" for b in self.backwards) or any(s.scaler for s in self.optimizer_steps):
            return True
        return any(self.names.call_name(call) in _GRAD_SCALER or (  # `loss = self.scaler.scale(loss)`
            isinstance(call.func, cst.Attribute) and call.func.attr.value in ("scale", "unscale_")
            and "scaler" in last_part(dotted_name(call.func.value)).lower()) for call in self.scopes.calls)

    def grad_reads(self, node: cst.CSTNode) -> List[cst.Attribute]:
        """`.grad` read under `node` (nested functions not entered): `p.grad.norm()`, `w.grad is None`;
        not the target of `p.grad = None`."""
        found: List[cst.Attribute] = []
        stack: List[cst.CSTNode] = [node]
        while stack:
            current = stack.pop()
            if current is not node and isinstance(current, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                continue
            if isinstance(current, cst.Assign):
                stack.append(current.value)
                stack.extend(t.target.value for t in current.targets
                             if isinstance(t.target, cst.Attribute) and t.target.attr.value == "grad")
                stack.extend(t.target for t in current.targets
                             if not (isinstance(t.target, cst.Attribute) and t.target.attr.value == "grad"))
                continue
            if isinstance(current, cst.Attribute) and current.attr.value == "grad":
                found.append(current)
            stack.extend(children(current))
        return found

    def is_grad_clip(self, call: cst.Call) -> bool:
        """`torch.nn.utils.clip_grad_norm_(...)` / `clip_grad_value_(...)` (any import spelling)."""
        qualified = self.names.call_name(call) or ""
        return qualified.startswith("torch.nn.utils") and last_part(qualified) in (
            "clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grads_with_norm_")

    def resets_grads(self, call: cst.Call) -> bool:
        """A call that clears gradients: `x.zero_grad()`, `p.grad.zero_()` / `.detach_()` /
        `.fill_(0)`, `torch._foreach_zero_(...)`, or a helper named like it (`zero_grads(model)`)."""
        func = call.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method == "zero_grad":
                return True
            if method in ("zero_", "detach_", "fill_", "requires_grad_"):
                receiver = func.value
                while isinstance(receiver, cst.Attribute) and receiver.attr.value == "data":
                    receiver = receiver.value
                if isinstance(receiver, cst.Attribute) and receiver.attr.value == "grad":
                    return True
        qualified = self.names.call_name(call)
        if qualified == "torch._foreach_zero_":
            return True
        last = last_part(dotted_name(func))
        return bool(_RESET_NAME.search(last))

    def accumulates_grad(self, backward: Backward) -> bool:
        """A backward that adds into `.grad`, of something that surely is a loss (not
        `torch.autograd.grad`, not `planner.backward()`)."""
        if backward.kind == "autograd":  # not torch.distributed.autograd: it fills its context, not .grad
            return self.names.call_name(backward.call) in _AUTOGRAD_BACKWARD
        if backward.kind in ("scaled", "owner"):
            return True
        if backward.kind != "method" or backward.loss is None:
            return False
        if self.carries_grad(backward.loss, backward.call):
            return True
        loss = backward.loss
        while isinstance(loss, cst.Call) and isinstance(loss.func, cst.Attribute):  # loss.mean().backward()
            loss = loss.func.value
        return isinstance(loss, cst.Name) and "loss" in loss.value.lower()

    def after_step(self, step: OptimizerStep, stmt: cst.CSTNode) -> cst.CSTNode:
        """Where code that runs after the step goes: after `scaler.update()` when that follows it."""
        following = self.tree.next_statement(stmt)
        if step.scaler is not None and isinstance(following, cst.SimpleStatementLine) and len(following.body) == 1:
            expr = following.body[0]
            if isinstance(expr, cst.Expr) and isinstance(expr.value, cst.Call) and \
                    dotted_name(expr.value.func) == f"{step.scaler}.update":
                return following
        return stmt

    def origins(self, backward: Backward) -> Tuple[List[cst.CSTNode], List[cst.FunctionDef]]:
        """What the backwarded value is computed from, in its function: the binding statements in
        effect that it comes from (transitively) and the functions of this module their values call."""
        if backward.loss is None:
            return [], []
        nodes: Dict[int, cst.CSTNode] = {}
        functions: Dict[int, cst.FunctionDef] = {}
        seen: Set[Tuple[str, int]] = set()
        values: List[Tuple[cst.CSTNode, cst.CSTNode]] = [(backward.loss, backward.call)]
        while values:
            value, at = values.pop()
            for call in (n for n in _expression_nodes(value) if isinstance(n, cst.Call)):
                target = self.scopes.resolve(call)
                if target is not None:
                    functions.setdefault(id(target), target)
            for name in sources_of(value):
                if (name, id(at)) in seen:
                    continue
                seen.add((name, id(at)))
                for bind in self.scopes.in_effect(name, at):
                    if bind.value is not None and bind.kind != "param":
                        nodes.setdefault(id(bind.node), bind.node)
                        values.append((bind.value, bind.node))
        return list(nodes.values()), list(functions.values())

    # -- roles of calls --------------------------------------------------------------------------
    def _backward(self, call: cst.Call) -> Optional[Backward]:
        func = call.func
        qualified = self.names.call_name(call)
        retain = argument(call, "retain_graph")
        if qualified in _AUTOGRAD_BACKWARD or qualified in _AUTOGRAD_GRAD:
            loss = argument(call, "tensors" if qualified in _AUTOGRAD_BACKWARD else "outputs", 0)
            value = loss.value if loss is not None else None
            kind = "autograd" if qualified in _AUTOGRAD_BACKWARD else "grad"
            return Backward(call, value, kind, None, retain.value if retain else None,
                            frozenset(sources_of(value)) if value is not None else frozenset())
        if qualified is not None and qualified.endswith(".backward"):  # torch.distributed.autograd ...
            names = frozenset().union(*(sources_of(a.value) for a in call.args)) if call.args else frozenset()
            return Backward(call, None, "autograd", None, retain.value if retain else None, names)
        if qualified is not None or not isinstance(func, cst.Attribute) or \
                func.attr.value not in ("backward", "manual_backward"):
            return None
        receiver = func.value
        owner = dotted_name(receiver)
        if func.attr.value == "manual_backward" or (owner is not None and _BACKWARD_OWNER.search(last_part(owner))
                                                    and call.args and call.args[0].keyword is None):
            value = call.args[0].value if call.args else None
            return Backward(call, value, "owner", None, retain.value if retain else None,
                            frozenset(sources_of(value)) if value is not None else frozenset())
        if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute) and \
                receiver.func.attr.value == "scale" and receiver.args:
            value = receiver.args[0].value
            return Backward(call, value, "scaled", receiver.func.value, retain.value if retain else None,
                            frozenset(sources_of(value)))
        return Backward(call, receiver, "method", None, retain.value if retain else None,
                        frozenset(sources_of(receiver)))

    def backward_of(self, call: cst.Call) -> Optional[Backward]:
        return self._backward_of.get(id(call))

    def _find_optimizers(self) -> Set[str]:
        found: Set[str] = set()
        for call in self.scopes.calls:
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value == "zero_grad":
                receiver = dotted_name(func.value)
                if receiver is not None and not _MODEL_NAME.search(last_part(receiver)):
                    found.add(receiver)
        for node in self.scopes.assigns:
            for target in node.targets:
                receiver = dotted_name(target.target)
                if receiver is not None and isinstance(node.value, cst.Call) and \
                        self._is_optimizer_factory(node.value):
                    found.add(receiver)
        for attr in self._param_group_receivers():
            found.add(attr)
        return found

    def _is_optimizer_factory(self, call: cst.Call) -> bool:
        qualified = self.names.call_name(call) or ""
        if qualified.startswith("torch.optim.") and not qualified.startswith("torch.optim.lr_scheduler") \
                and qualified[len("torch.optim."):][:1].isupper():
            return True
        if qualified.startswith(("torch.optim.", "transformers.", "bitsandbytes.optim.", "apex.optimizers.",
                                 "torch.distributed.optim.")) and "Optim" in last_part(qualified) or \
                last_part(qualified) in ("AdamW", "Adafactor", "Adam", "SGD", "Lion"):
            return True
        func = call.func
        return isinstance(func, cst.Attribute) and func.attr.value in ("optimizers", "create_optimizer")

    def _param_group_receivers(self) -> Iterator[str]:
        for call in self.scopes.calls:  # `opt.param_groups` reached from calls is enough: loops read it
            for arg in call.args:
                value = arg.value
                while isinstance(value, cst.Subscript):  # opt.param_groups[0]["lr"]
                    value = value.value
                if isinstance(value, cst.Attribute) and value.attr.value == "param_groups":
                    receiver = dotted_name(value.value)
                    if receiver:
                        yield receiver
        for bind in self.scopes.every_binding():
            value = bind.value
            while isinstance(value, cst.Subscript):
                value = value.value
            if isinstance(value, cst.Attribute) and value.attr.value == "param_groups":
                receiver = dotted_name(value.value)
                if receiver:
                    yield receiver

    def is_optimizer(self, expr: cst.BaseExpression) -> bool:
        """Built from torch.optim.*, used with .zero_grad()/.param_groups, or named like one."""
        dotted = dotted_name(expr)
        if dotted is None:
            return False
        if dotted in self.optimizers:
            return True
        last = last_part(dotted)
        return bool(_OPTIMIZER_NAME.search(last)) and not _NOT_OPTIMIZER_NAME.search(last)

    def _optimizer_step(self, call: cst.Call) -> Optional[OptimizerStep]:
        func = call.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "step":
            return None
        if self.names.call_name(call) is not None:
            return None
        receiver = func.value
        if call.args and call.args[0].keyword is None and self._is_scaler(receiver):
            return OptimizerStep(call, dotted_name(call.args[0].value), dotted_name(receiver))
        if self.is_optimizer(receiver):
            return OptimizerStep(call, dotted_name(receiver), None)
        return None

    def _is_scaler(self, expr: cst.BaseExpression) -> bool:
        dotted = dotted_name(expr)
        if dotted is None:
            return False
        for bind in self.scopes.bindings(self.module, dotted):
            if isinstance(bind.value, cst.Call) and self.names.call_name(bind.value) in _GRAD_SCALER:
                return True
        return "scaler" in last_part(dotted).lower()

    def step_of(self, call: cst.Call) -> Optional[OptimizerStep]:
        return self._step_of.get(id(call))

    def _find_zero_grads(self) -> List[ZeroGrad]:
        found: List[ZeroGrad] = []
        for call in self.scopes.calls:
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value == "zero_grad":
                receiver = dotted_name(func.value)
                arg = argument(call, "set_to_none", 0)
                found.append(ZeroGrad(call, receiver, arg.value if arg else None,
                                      self.is_optimizer(func.value)))
        for assign in self._grad_assigns:
            target = assign.targets[0].target
            found.append(ZeroGrad(assign, dotted_name(target), None, False))
        return found

    # -- models, forwards and losses -----------------------------------------------------------
    def _module_classes(self) -> Set[str]:
        found: Set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, klass in self.scopes.classes.items():
                if name in found:
                    continue
                for base in klass.bases:
                    dotted = dotted_name(base.value) or ""
                    qualified = self.names.qualified_name(base.value) or ""
                    if dotted in found or qualified.startswith(("torch.nn.", "transformers.")) or \
                            LIGHTNING_BASES.search(dotted) or last_part(dotted) in ("Module", "PreTrainedModel"):
                        found.add(name)
                        changed = True
                        break
        return found

    def _find_models(self) -> Set[str]:
        self.module_classes = frozenset(self._module_classes())
        found: Set[str] = set()
        for assign in self.scopes.assigns:
            if self._is_model_value(assign.value, found):
                for target in assign.targets:
                    dotted = dotted_name(target.target)
                    if dotted is not None:
                        found.add(dotted)
        changed = True
        while changed:  # `model = model.to(device)`, `net = DDP(model)`
            changed = False
            for assign in self.scopes.assigns:
                if self._is_model_value(assign.value, found):
                    for target in assign.targets:
                        dotted = dotted_name(target.target)
                        if dotted is not None and dotted not in found:
                            found.add(dotted)
                            changed = True
        return found

    def _is_model_value(self, value: cst.BaseExpression, known: Set[str]) -> bool:
        if not isinstance(value, cst.Call):
            return False
        qualified = self.names.call_name(value) or ""
        if qualified.startswith("torch.nn.") and not _NN_NOT_MODULE.search(qualified) and \
                last_part(qualified)[:1].isupper() and not last_part(qualified).endswith("Loss"):
            return True
        if _MODEL_FACTORIES.search(qualified) and not _NOT_A_MODULE.search(qualified):
            return True
        func = value.func
        if isinstance(func, cst.Name) and func.value in self.module_classes:
            return True
        if isinstance(func, cst.Attribute):
            if func.attr.value == "from_pretrained" and not _NOT_A_MODULE.search(dotted_name(func.value) or ""):
                return True
            if func.attr.value in _MODEL_MOVERS and (dotted_name(func.value) in known or
                                                     self._is_model_value(func.value, known)):
                return True
        return False

    def is_model(self, expr: cst.BaseExpression) -> bool:
        dotted = dotted_name(expr)
        if dotted is None:
            return False
        if dotted in self.models:
            return True
        if self.names.qualified_name(expr) is not None:
            return False  # an imported callable (torch.relu, F.softmax, np.mean)
        last = last_part(dotted)
        if dotted in self.scopes.classes or (last[:1].isupper() and last[1:2].islower()) or \
                _NOT_A_MODEL_CALL.search(last) or _MAKES_A_MODEL.search(last) or \
                any(b.kind == "def" for b in self.scopes.bindings(self.module, dotted)):
            return False  # a class or a function: calling it makes (or loads) a model, it does not run one
        if _LOSS_NAME.search(last):
            return False
        if _MODEL_NAME.search(last):
            return True
        receiver = dotted[:-len(last)].rstrip(".")
        return receiver in ("", "self") and bool(_MODEL_COMPOUND.search(last))

    def is_forward(self, call: cst.Call) -> bool:
        """A call of a model: `model(x)`, `self.net(x)`, `model(**batch)`, `model.forward(x)`.
        Not `model.generate(...)` (HF runs it without grad)."""
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "forward":
            return self.is_model(func.value)
        return self.is_model(func)

    def is_generate(self, call: cst.Call) -> bool:
        func = call.func
        return isinstance(func, cst.Attribute) and func.attr.value == "generate" and self.is_model(func.value)

    def is_loss(self, call: cst.Call) -> bool:
        """`criterion(out, y)`, `F.cross_entropy(...)`, `nn.MSELoss()(...)`."""
        qualified = self.names.call_name(call) or ""
        if _FUNCTIONAL_LOSS.search(qualified):
            return True
        func = call.func
        if isinstance(func, cst.Call):  # nn.CrossEntropyLoss()(out, y)
            inner = self.names.call_name(func) or ""
            return inner.startswith("torch.nn.") and inner.endswith("Loss")
        dotted = dotted_name(func)
        if dotted is None or qualified:
            return False
        return dotted in self.loss_objects or bool(_LOSS_NAME.search(last_part(dotted)))

    # -- grad mode -----------------------------------------------------------------------------
    # -- the step of a loop --------------------------------------------------------------------
    def backwards_in(self, node: cst.CSTNode, follow: bool = True) -> List[Tuple[Backward, cst.Call]]:
        """Backward calls under `node` (and in helpers it calls), each with its call site in `node`."""
        return [(self._backward_of[id(call)], site) for call, site in self.calls.calls_in(node, follow)
                if id(call) in self._backward_of]

    def steps_in(self, node: cst.CSTNode, follow: bool = True) -> List[Tuple[OptimizerStep, cst.Call]]:
        return [(self._step_of[id(call)], site) for call, site in self.calls.calls_in(node, follow)
                if id(call) in self._step_of]

    def forwards_in(self, node: cst.CSTNode, follow: bool = True) -> List[Tuple[cst.Call, cst.Call]]:
        """Forward calls under `node` (and in helpers it calls), each with its call site in `node`."""
        return [(call, site) for call, site in self.calls.calls_in(node, follow) if self.is_forward(call)]

    def is_training(self, node: cst.CSTNode) -> bool:
        """Whether `node` (a loop, usually) trains: it backwards or steps an optimizer, itself or
        through a helper, or runs inside Lightning's `training_step`, `accelerator.accumulate`,
        or a function whose result callers backward by convention (`compute_loss`, `forward`)."""
        if self.backwards_in(node) or self.steps_in(node):
            return True
        return self.in_training_function(node)

    def in_training_function(self, node: cst.CSTNode) -> bool:
        if self.regions.in_accumulate(node):
            return True
        func = self.tree.function_of(node)
        while func is not None:
            if func.name.value in TRAINING_FUNCTIONS or self.regions.is_lightning_training_step(func):
                return True
            klass = self.tree.class_of(func)
            if klass is not None and klass.name.value in self.module_classes and func.name.value == "forward":
                return True
            func = self.tree.function_of(func)
        return False

    # -- grad-carrying values ------------------------------------------------------------------
    def carries_grad(self, expr: cst.BaseExpression, at: Optional[cst.CSTNode] = None) -> bool:
        """Whether `expr`, evaluated at `at` (default: itself), holds an autograd graph: it comes
        from a forward or loss computed in grad mode and no `.item()`, `float()`, `.detach()`,
        `.tolist()`, `.numpy()` or `.data` ended it. `.cpu()` and `.to()` keep the graph."""
        at = at if at is not None else expr
        stack: List[cst.CSTNode] = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Name):
                if self._name_carries_grad(node.value, at):
                    return True
            elif isinstance(node, cst.Attribute):
                if node.attr.value not in DETACHING_ATTRIBUTES:
                    stack.append(node.value)
            elif isinstance(node, cst.Subscript):
                stack.append(node.value)
            elif isinstance(node, cst.Call):
                if self._call_carries_grad(node, at, stack):
                    return True
            elif isinstance(node, (cst.BinaryOperation,)):
                stack.extend((node.left, node.right))
            elif isinstance(node, cst.UnaryOperation):
                if not isinstance(node.operator, cst.Not):
                    stack.append(node.expression)
            elif isinstance(node, cst.BooleanOperation):
                stack.extend((node.left, node.right))
            elif isinstance(node, cst.IfExp):
                stack.extend((node.body, node.orelse))
            elif isinstance(node, (cst.Tuple, cst.List, cst.Set)):
                stack.extend(e.value for e in node.elements)
            elif isinstance(node, cst.Dict):
                stack.extend(e.value for e in node.elements if isinstance(e, (cst.DictElement, cst.StarredDictElement)))
            elif isinstance(node, cst.StarredElement):
                stack.append(node.value)
            elif isinstance(node, cst.NamedExpr):
                stack.append(node.value)
            # constants, comparisons, f-strings, lambdas, comprehensions: no graph (or unknown)
        return False

    def _call_carries_grad(self, call: cst.Call, at: cst.CSTNode, stack: List[cst.CSTNode]) -> bool:
        func = call.func
        if isinstance(func, cst.Name) and func.value in SCALAR_FUNCTIONS:
            return False
        if self.is_forward(call):
            # a forward records a graph in grad mode (unless the file freezes parameters: then
            # only inputs that require grad would, and we do not guess)
            return self.regions.grad_enabled(call) is True and not self.requires_grad_off
        if self.is_loss(call):  # a loss of detached values has no graph
            return self.regions.grad_enabled(call) is True and any(self.carries_grad(a.value, at) for a in call.args)
        qualified = self.names.call_name(call)
        if qualified is not None:
            if _TENSOR_FUNCTION.match(qualified) and qualified not in _NON_DIFF_TORCH:
                stack.extend(arg.value for arg in call.args)
            return False
        if isinstance(func, cst.Attribute):
            if func.attr.value in DETACHING_METHODS:
                return False
            stack.append(func.value)  # out.softmax(-1), loss.cpu(), out.to(device)
            return False
        target = self.scopes.resolve(call)
        if target is not None:
            return self.returns_grad(target)
        return False  # an unknown function: do not guess

    def returns_grad(self, func: cst.FunctionDef) -> bool:
        """Whether a function of this module returns a grad-carrying value."""
        key = id(func)
        if key in self._memo_returns:
            return self._memo_returns[key]
        self._memo_returns[key] = False
        result = False
        if self.regions.grad_enabled_by_decorator(func) is not False:
            stack: List[cst.CSTNode] = [func.body]
            while stack and not result:
                node = stack.pop()
                if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                    continue
                if isinstance(node, cst.Return) and node.value is not None:
                    result = self.carries_grad(node.value, node)
                    continue
                if isinstance(node, cst.BaseExpression):
                    continue
                stack.extend(children(node))
        self._memo_returns[key] = result
        return result

    def _name_carries_grad(self, name: str, at: cst.CSTNode) -> bool:
        key = (name, id(at))
        if key in self._memo_grad:
            return self._memo_grad[key]
        if key in self._in_progress:
            return False
        self._in_progress.add(key)
        result = False
        for bind in self.scopes.in_effect(name, at):
            if bind.value is None or bind.kind == "param":
                continue
            if bind.kind == "for":  # `for loss in losses`: an element of a grad-carrying container
                if self._iter_carries_grad(bind.value, bind.node):
                    result = True
                    break
                continue
            if self.regions.grad_enabled(bind.node) is False and bind.kind != "append":
                continue
            if not bind.whole and isinstance(bind.value, cst.Call) and (
                    last_part(dotted_name(bind.value.func)) in _VALUES_INDICES):
                continue  # `_, predicted = out.max(1)`: do not guess which element it is
            if self.carries_grad(bind.value, bind.node):
                result = True
                break
        self._in_progress.discard(key)
        self._memo_grad[key] = result
        return result

    def _iter_carries_grad(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> bool:
        if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and \
                iterable.func.value in ("zip", "enumerate", "reversed"):
            return any(self._iter_carries_grad(a.value, at) for a in iterable.args)
        if isinstance(iterable, cst.Name):
            return self.carries_grad(iterable, at)
        return False

    # -- where values go -----------------------------------------------------------------------
    def derived_names(self, scope: Scope, names: Set[str]) -> Set[str]:
        """`names` and every name of `scope` bound from a value computed from them (any order)."""
        return derived(self.scopes.flows(scope), names)

    def reaches_backward(self, scope: Scope, names: Set[str]) -> bool:
        """Whether anything derived from `names` in `scope` is backwarded there, or handed to a
        function of this module that backwards."""
        tainted = self.derived_names(scope, names)
        for backward in self.backwards:
            if self.tree.scope_of(backward.call) is scope and backward.names & tainted:
                return True
            if backward.loss is not None and (dotted_name(backward.loss) or "") in names:
                return True  # `self.total.backward()`
        for call in self.scopes.calls:
            if self.tree.scope_of(call) is not scope:
                continue
            target = self.scopes.resolve(call)
            if target is None or not any(sources_of(a.value) & tainted for a in call.args):
                continue
            if self.backwards_in(target.body):
                return True
        return False

    def leaves_scope(self, scope: Scope, names: Set[str]) -> bool:
        """Whether anything derived from `names` is returned or yielded from `scope`, or stored
        into an attribute (where other code may backward it)."""
        tainted = self.derived_names(scope, names)
        if any(sources_of(value) & tainted for value in self.scopes.returned(scope)):
            return True
        for assign in self.scopes.assigns:
            if self.tree.scope_of(assign) is scope and sources_of(assign.value) & tainted and any(
                    _stores_into_container(t.target) for t in assign.targets):
                return True
        return False

    # -- evaluation loops ----------------------------------------------------------------------
    def eval_evidence(self, loop: cst.CSTNode) -> Optional[str]:
        """Why `loop` looks like evaluation or inference rather than part of a training step:
        "eval-mode" (after `model.eval()` in the same function), "named" (in a function named
        like evaluate/validate/predict/infer/generate/sample), "script" (a file with no backward
        and no optimizer step, at module level or in a function returning nothing); else None."""
        scope = self.tree.scope_of(loop)
        position = self.tree.order(loop)
        latest: Dict[str, ModeCall] = {}
        for mode_call in sorted(self.mode_calls, key=lambda m: self.tree.order(m.call)):
            if self.tree.scope_of(mode_call.call) is not scope or self.tree.order(mode_call.call) > position:
                continue
            latest[mode_call.target] = mode_call
        modes = {m.mode for m in latest.values() if self.is_model(m.call.func.value)}  # type: ignore[attr-defined]
        if "train" in modes:
            return None  # the model was put in training mode for this loop
        if "eval" in modes:
            return "eval-mode"
        func = self.tree.function_of(loop)
        while func is not None:
            name = func.name.value
            if _EVAL_FUNCTION.search(name) and not name.startswith("test_"):
                if _SAMPLING_FUNCTION.search(name) and any(
                        self.carries_grad(value, value) for value in self.scopes.returned(func)):
                    return None  # samples handed back with their graph: the caller may train on them
                return "named"
            func = self.tree.function_of(func)
        if not self.backwards and not self.optimizer_steps and self._inference_signs() and (
                scope is self.module or (isinstance(scope, cst.FunctionDef) and scope.name.value == "main"
                                         and not self.scopes.returned(scope))):
            return "script"
        return None

    def reset_in_iteration(self, loop: cst.CSTNode, name: str, at: cst.CSTNode) -> bool:
        """Whether `name` is surely rebound (not by `+=` or an append) in `loop`'s body before `at`:
        then what it holds at `at` does not outlive the iteration."""
        position = self.tree.order(at)
        at_ancestors = {id(a) for a in self.tree.ancestors(at)}
        for bind in self.scopes.bindings(self.tree.scope_of(at), name):
            if bind.kind in ("aug", "append", "param", "def") or bind.node is at:
                continue
            if self.tree.order(bind.node) >= position or not self.tree.contains(loop.body, bind.node):  # type: ignore[attr-defined]
                continue
            block = self.tree.dominating_block(bind.node)
            if block is not None and id(block) in at_ancestors:
                return True
        return False

    def constructor_of(self, expr: cst.BaseExpression) -> Optional[str]:
        """The qualified constructor a model name was built from (`torch.nn.GRU` for
        `rnn = nn.GRU(...).to(device)`), when every assignment to it agrees; else None."""
        dotted = dotted_name(expr)
        if dotted is None:
            return None
        found: Set[Optional[str]] = set()
        for assign in self.scopes.assigns:
            if not any(dotted_name(t.target) == dotted for t in assign.targets):
                continue
            value = assign.value
            while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and \
                    value.func.attr.value in _MODEL_MOVERS and isinstance(value.func.value, cst.Call):
                value = value.func.value
            found.add(self.names.call_name(value) if isinstance(value, cst.Call) else None)
        return found.pop() if len(found) == 1 else None

    def hands_graph_away(self, loop: cst.CSTNode) -> bool:
        """A graph-carrying value passed to a call that may backward it (`trainer.update(loss)`)."""
        training = self
        for call, site in training.calls.calls_in(loop, follow=False):
            func = call.func
            if isinstance(func, cst.Name) and (func.value in _HARMLESS_FUNCTIONS or training.scopes.resolve(call)):
                continue
            if self.names.call_name(call) is not None or training.is_forward(call) or training.is_loss(call):
                continue
            if isinstance(func, cst.Attribute) and (func.attr.value in _HARMLESS_METHODS or
                                                    training.carries_grad(func.value, call)):
                continue
            if any(training.carries_grad(arg.value, call) for arg in call.args):
                return True
        return False

    def _inference_signs(self) -> bool:
        """The file loads trained weights or puts a model in eval mode somewhere."""
        if any(m.mode == "eval" for m in self.mode_calls):
            return True
        for call in self.scopes.calls:
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("load_state_dict", "from_pretrained"):
                return True
            if self.names.call_name(call) in ("torch.load", "torch.hub.load", "torch.jit.load"):
                return True
        return False

    def backwarded_in(self, value: cst.BaseExpression, loop: cst.CSTNode) -> bool:
        """Whether `value` is (built from) something `loop` already backwards itself: its graph
        is spent, so handing it on cannot be for another backward."""
        names = sources_of(value)
        return any(b.names & names for b, site in self.backwards_in(loop, follow=False))

    def attribute_backwarded(self, dotted: str) -> bool:
        """Whether an attribute (`self.total`) reaches a backward anywhere in the module: read in
        the backwarded expression, or into a name that some backward of its scope uses."""
        for backward in self.backwards:
            if backward.loss is not None and self._mentions(backward.loss, dotted):
                return True
        for assign in self.scopes.assigns:
            if not self._mentions(assign.value, dotted):
                continue
            names = {name for t in assign.targets for name in target_names(t.target)}
            if names and self.reaches_backward(self.tree.scope_of(assign), names):
                return True
        return False

    @staticmethod
    def _mentions(expr: cst.CSTNode, dotted: str) -> bool:
        stack = [expr]
        while stack:
            node = stack.pop()
            if type(node) is cst.Attribute and dotted_name(node) == dotted:  # type: ignore[arg-type]
                return True
            stack.extend(children(node))
        return False
