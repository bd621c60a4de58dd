"""Receivers: which names are optimizers, models and losses.

Asked as `facts.receivers`, from what names are bound to, how they are used, and how they are
named:

- `optimizers`: dotted names built from `torch.optim.*` (and transformers, bitsandbytes, apex
  optimizers), used with `.zero_grad()` or `.param_groups`, annotated as one, or built on a
  model's parameters and stepped; `is_optimizer(expr)` adds names that read like one (`opt`,
  `g_optimizer`, not `scheduler`); `is_known_optimizer(dotted, at)` also accepts a parameter
  that every call site passes an optimizer, one named like an optimizer that no call of this
  module passes anything (a training function that other modules call), and an attribute a
  class sets only from such names (`self.optimizer = optimizer`); `parameters_owners(optimizer)`:
  the models it is built on; `is_scaler(expr)`: a GradScaler;
- `models`: names bound to an `nn.Module` (a torch.nn class, a class of this module deriving from
  one, `from_pretrained`, `torch.compile`, DDP, moved with `.to()`/`.cuda()`), or whose
  parameters an optimizer is built on (`Adam(cnn.parameters())`); `module_classes`:
  the classes of this module that are modules; `is_model(expr)` adds names that read like one
  (`model`, `net`, `self.encoder`, a model's `model.feature_extractor`) and refuses classes,
  factories and losses; `is_model_class(klass)`:
  a class whose methods are model code (a module class, one defining `forward`, or one deriving
  from an `...Encoder`, `...Model`, `...Layer`-like base);
  `constructor_of(expr)`: the class a model was built from (`torch.nn.GRU`);
- `loss_objects`: names bound to a `torch.nn.*Loss()`, moved or not.

A name that holds an HF `pipeline(...)` is no model (HF runs it under no_grad), however it is named,
nor one that holds the `rwkv` package's inference model; nor is one that holds a model compiled
for a runtime off the CUDA GPU (optimum's Neuron, OpenVINO and IPEX models), or made by another
inference runtime (OpenVINO's `compile_model`, ONNX Runtime, TensorRT), which records no graph.
A binding in code that never runs as written (memlint.analysis.guards: `dead`) makes no model
of a name whose other bindings make a pipeline.

`assignments_to(dotted)`: the module's assignments to a dotted name (MEM203: how an optimizer
is built).

Asked by: roles (what a forward, a step or a zero_grad is called on), phase (`model.eval()`,
`forward` of a module class), MEM301 (`is_known_optimizer`), MEM302 (`is_model`,
`parameters_owners`), MEM206 (`constructor_of`).
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Dict, FrozenSet, Iterator, List, Optional, Set

import libcst as cst

from memlint.analysis.dataflow import unpacked_position
from memlint.analysis.project import ProjectView
from memlint.analysis.frameworks import MODEL_BASE, is_module_base_name
from memlint.analysis.guards import Guards
from memlint.analysis.memo import per_node
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import (TreeIndex, base_class, constructed, dotted_name, expression_nodes, last_part,
                                   own_method)

GRAD_SCALER = frozenset({"torch.amp.GradScaler", "torch.cuda.amp.GradScaler",
                          "torch.amp.grad_scaler.GradScaler", "torch.cpu.amp.GradScaler"})
_OPTIMIZER_NAME = re.compile(
    r"^(opt|optim|optimizer|optimiser)s?(_\w+)?$|_(opt|optim|optimizer|optimiser)$|^opt_?[a-z]$|^optimizer\w*$",
    re.IGNORECASE)
_NOT_OPTIMIZER_NAME = re.compile(r"sched|scaler|lr", re.IGNORECASE)
# What makes a pipeline that records no graph when run: HF's inference pipelines (their model
# runs under no_grad), spaCy's (no torch), sentence-transformers' models, run through `encode`
# (under no_grad, returning arrays), and the `rwkv` package's inference model (its forward
# runs in `with torch.no_grad():`, on weights loaded as plain tensors).
_PIPELINES = frozenset({"transformers.pipeline", "transformers.pipelines.pipeline", "spacy.load", "spacy.blank",
                        "sentence_transformers.SentenceTransformer", "rwkv.model.RWKV"})
# optimum's classes of models compiled for a runtime other than torch's, on hardware other than
# a CUDA GPU: AWS Neuron's inference models, OpenVINO's, and IPEX's (whose forward runs under
# no_grad). Their runs record no graph and keep nothing on a CUDA GPU. Not ONNX Runtime's (its
# CUDA provider returns GPU tensors), INC's (plain transformers models), nor Neuron's training
# models (`optimum.neuron.models.training`: PyTorch modules).
_COMPILED_MODEL_CLASS = re.compile(r"^optimum\.(neuron|intel)\.(?!models\.training\.)([\w.]+\.)?(Neuron|OV|IPEX)Model\w*$")
# Inference runtimes other than torch: what they compile or load runs there, records no graph
# (`compiled_model = ov.Core().compile_model(...)`, `sess = onnxruntime.InferenceSession(...)`)
_OTHER_RUNTIMES = frozenset({"openvino", "onnxruntime", "tensorrt", "tflite_runtime", "ctranslate2"})
_MODEL_NAME = re.compile(
    r"^(model|models|net|network|module|encoder|decoder|generator|discriminator|policy|critic|"
    r"actor|classifier|backbone|transformer|rnn|lstm|gru|cell|teacher|student|unet|vae|"
    r"autoencoder|netG|netD|ema_model|lm|llm|cnn|mlp|convnet|resnet|vgg|lenet|alexnet|densenet|bert|vit)\d*$",
    re.IGNORECASE)
# `base_model`, `text_encoder`, `model_ema`: only as a plain name or an attribute of `self`
# (`pipe.generate_language_model(...)` is a method, not a model)
_MODEL_COMPOUND = re.compile(r"^\w+_(model|net|network|encoder|decoder|rnn|lstm|gru)$|^(model|net|network)_\w+$",
                             re.IGNORECASE)
# `model.feature_extractor`, `self.model.text_encoder`: a part of a model, by name, only as an
# attribute of a model (alone, `feature_extractor` is as likely HF's audio preprocessor)
_SUBMODULE = re.compile(r"^\w+_(model|net|network|encoder|decoder|rnn|lstm|gru|extractor)$", re.IGNORECASE)
# Calls that write a model out or show it, and place nothing (`export_to_openvino(model, path)`)
_WRITES_OUT = re.compile(r"^(export|save|print|log|summary|count_parameters)(_|$)")
# Keywords of `from_pretrained` that place the model on a device: `device_map="auto"`, a quantized load.
_PLACES = re.compile(r"device|load_in_|quantization_config$")
# An imported class whose instances prepare a model's inputs (HF's `AutoProcessor`, a pipeline's
# `...ProcessorStep`, a tokenizer, a collator): calling one records no graph, whatever the name
# that holds it (`encoder = RobometerEncoderProcessorStep(...)`). Not `FeatureExtractor` or
# `Transform`: users name their own networks so.
_PREPARES_INPUTS = re.compile(r"(Processor|ProcessorStep|Tokenizer|TokenizerFast|Collator)$")
# An encoder of labels or symbols into ids (SpeechBrain's `self.input_encoder`, a `label_encoder`),
# where the code does not say it builds a module: no model.
_LABEL_ENCODER = re.compile(r"^(label|input|char|phoneme|token|category|class)_encoder$")
# A model of another framework, by the prefix its plain name carries (`tf_model`, `onnx_model`),
# where nothing of the module makes it a torch module: a TensorFlow, JAX or exported model
# records no torch graph.
_OTHER_FRAMEWORK = re.compile(r"^(tf|keras|flax|jax|onnx|trt|tflite|openvino)_", re.IGNORECASE)
# Transformers' classes of its Flax and TensorFlow models: `FlaxBertModel`, `TFT5ForConditionalGeneration`.
_OTHER_FRAMEWORK_CLASS = re.compile(r"^(Flax|TF)[A-Z]")
# What only a torch module is asked to do, of what a model of another framework might be named for.
_TORCH_MODULE_METHODS = frozenset({"cuda", "to", "eval", "train", "half", "float", "bfloat16", "requires_grad_"})
# Dynamic quantization: the layers it makes run on the CPU only.
_QUANTIZE_DYNAMIC = frozenset({"torch.quantization.quantize_dynamic", "torch.ao.quantization.quantize_dynamic"})
_NOT_A_MODEL_CALL = re.compile(r"_(cls|class|classes|config|cfg|name|names|path|dir|id|ids|kwargs|args|type|fn_name|"
                               r"factory|builder|pipeline)$")
_MAKES_A_MODEL = re.compile(
    r"^(get|load|build|create|make|init|initialize|setup|prepare|wrap|unwrap|convert|save|export|to|from|copy|"
    r"clone|freeze|unfreeze|compile|quantize|merge|apply|register|find|check|is|has|update|print|log|"
    r"instantiate|restore|download|fetch|construct|define|new|train|evaluate|eval|test|run|truncate|reset|"
    r"detach|set|tie|remove|clear|zero|enable|disable|prune|resize|add|replace)_|"
    r"^(model|net|network|module)s?_to_(device|cuda|gpu|cpu|half|float|fp16|bf16|dtype)$",  # `self.model_to_device(net)`
    re.IGNORECASE)
_NN_NOT_MODULE = re.compile(r"^torch\.nn\.(functional|init|utils|parameter|Parameter|parallel\.scatter)")
# torch.nn modules that hold no parameters: run with grad on, they record only what their
# inputs already carry, so they are no model (`cos = nn.CosineSimilarity(dim=1)` in an eval loop)
_PARAMETER_FREE = re.compile(
    r"^torch\.nn\.(modules\.\w+\.)?((Log)?Softmax2?d?|Softmin|(Leaky|R)?ReLU6?|[CS]?ELU|GELU|SiLU|Mish|"
    r"(Log|Hard)?[Ss]igmoid|Tanh|Hardtanh|Hardswish|Softplus|Softsign|(Soft|Hard|Tanh)shrink|Threshold|GLU|"
    r"CosineSimilarity|PairwiseDistance|(Feature)?(Alpha)?Dropout\w*|(Adaptive)?(Max|Avg|LP)Pool\dd|"
    r"FractionalMaxPool\dd|MaxUnpool\dd|Flatten|Unflatten|Identity|Upsampl\w*|Pixel(Un)?[Ss]huffle|ChannelShuffle|"
    r"(Zero|Constant|Reflection|Replication|Circular)Pad\dd|Fold|Unfold)$")
_MODEL_FACTORIES = re.compile(
    r"(\.from_pretrained$|^timm\.create_model$|^torchvision\.models\.[a-z]\w*$|^torch\.compile$|"
    r"^torch\.nn\.parallel\.DistributedDataParallel$|^torch\.nn\.DataParallel$|^torch\.jit\.script$)")
# `X.from_pretrained` that does not make a module running with grad (diffusers pipelines run
# under no_grad, like HF generate)
# What makes a DeepSpeed engine (`Receivers.is_engine`).
_ENGINE_FACTORY = "deepspeed.initialize"
_NOT_A_MODULE = re.compile(r"Tokenizer|Processor|Config|Extractor|Pipeline|Scheduler|Dataset")
_DEVICE_MOVES = frozenset({"to", "cuda"})
_MODEL_MOVERS = frozenset({"to", "cuda", "cpu", "half", "float", "bfloat16", "double", "eval", "train",
                           "requires_grad_", "share_memory"})
LOSS_NAME = re.compile(r"^(criterion|criterion_\w+|\w+_criterion|loss_fn|loss_func|loss_function|"
                        r"lossfn|\w+_loss_fn|loss_fn_\w+|loss_module|compute_loss)$", re.IGNORECASE)


def _element(target: cst.BaseExpression, iterable: Optional[cst.BaseExpression], name: str) -> Optional[str]:
    """The container `name` takes its items from: `self.layers` for `for name in self.layers`,
    `for i, name in enumerate(self.layers)` or `reversed(self.layers)`; else None."""
    if type(iterable) is cst.Call and type(iterable.func) is cst.Name and len(iterable.args) == 1:
        if iterable.func.value == "reversed":
            return _element(target, iterable.args[0].value, name)
        if iterable.func.value == "enumerate" and type(target) is cst.Tuple and len(target.elements) == 2:
            return _element(target.elements[1].value, iterable.args[0].value, name)
        return None
    if type(target) is cst.Name and target.value == name and iterable is not None:
        return dotted_name(iterable)
    return None


def _is_parameters_call(expr: cst.BaseExpression) -> bool:
    """`model.parameters()`, `model.named_parameters()`, `filter(..., model.parameters())`, `[...]`."""
    for node in expression_nodes(expr):
        if type(node) is cst.Call and type(node.func) is cst.Attribute and \
                node.func.attr.value in ("parameters", "named_parameters"):
            return True
    return False


def _class_called(call: cst.Call) -> cst.BaseExpression:
    """The class a call builds from: `Cls` of `Cls(...)` and of `Cls.from_pretrained(...)`."""
    func = call.func
    if type(func) is cst.Attribute and func.attr.value == "from_pretrained":
        return func.value
    return func


class Receivers:
    """The optimizers, models and losses of one module (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes, project: ProjectView, guards: Guards) -> None:
        self.names = names
        self.project = project
        self.tree = tree
        self.scopes = scopes
        self.guards = guards
        self.module = tree.module
        self._pipeline_names: Dict[str, bool] = {}

    @cached_property
    def optimizers(self) -> FrozenSet[str]:
        return frozenset(self._find_optimizers() | self._annotated_optimizers() | self._built_on_parameters())

    @cached_property
    def module_classes(self) -> "ModuleClasses":
        """The classes of this module that are nn.Modules, through their bases here and in the
        project's other modules (`name in module_classes`)."""
        return ModuleClasses(self.names, self.scopes, self.project)

    @cached_property
    def local_module_classes(self) -> "ModuleClasses":
        """Those this module alone shows to be nn.Modules (what its summary says)."""
        return ModuleClasses(self.names, self.scopes, None)

    @cached_property
    def models(self) -> FrozenSet[str]:
        return frozenset(self._find_models() | self._optimized())

    def _optimized(self) -> Set[str]:
        """Whose parameters an optimizer is built on (`torch.optim.Adam(cnn.parameters())`): a model,
        wherever it was made."""
        found: Set[str] = set()
        for assign in self.scopes.assigns:
            if type(assign.value) is not cst.Call:
                continue
            owners = [dotted_name(value.func.value) for value in (arg.value for arg in assign.value.args)  # type: ignore[attr-defined]
                      if type(value) is cst.Call and type(value.func) is cst.Attribute and
                      value.func.attr.value in ("parameters", "named_parameters")]
            if owners and self._is_optimizer_factory(assign.value):  # type: ignore[arg-type]
                found.update(owner for owner in owners if owner is not None)
        return found

    @cached_property
    def loss_objects(self) -> FrozenSet[str]:
        """Names bound to a `torch.nn.*Loss()`, moved or not (`nn.CrossEntropyLoss().to(device)`)."""
        return frozenset(
            dotted for assign in self.scopes.assigns
            if is_loss_class(self.names.call_name(_unmoved(assign.value)) or "")
            for dotted in (dotted_name(t.target) for t in assign.targets) if dotted is not None)

    def _find_optimizers(self) -> Set[str]:
        found: Set[str] = set()
        for call in self.scopes.calls:
            func = call.func
            if type(func) is cst.Attribute and func.attr.value == "zero_grad":
                receiver = dotted_name(func.value)
                if receiver is not None and not _MODEL_NAME.search(last_part(receiver)):
                    found.add(receiver)
        for node in self.scopes.assigns:
            for target in node.targets:
                receiver = dotted_name(target.target)
                if receiver is not None and type(node.value) is cst.Call and \
                        self._is_optimizer_factory(node.value):
                    found.add(receiver)
        for attr in self._param_group_receivers():
            found.add(attr)
        return found

    def _annotated_optimizers(self) -> Set[str]:
        """Parameters annotated as optimizers: `def train(opt: torch.optim.Optimizer)`."""
        found: Set[str] = set()
        for bind in self.scopes.every_binding():
            node = bind.node
            if bind.kind == "param" and type(node) is cst.Param and node.annotation is not None:
                qualified = self.names.qualified_name(node.annotation.annotation) or ""
                if qualified.startswith("torch.optim.") and "lr_scheduler" not in qualified:
                    found.add(bind.name)
        return found

    def _built_on_parameters(self) -> Set[str]:
        """Names bound to an object built on a model's parameters, `hydra.utils.instantiate(cfg.optim,
        model.parameters())`, that are stepped somewhere (`x.step()`): optimizers by what they do."""
        stepped = {dotted_name(c.func.value) for c in self.scopes.calls  # type: ignore[attr-defined]
                   if type(c.func) is cst.Attribute and c.func.attr.value == "step"}
        found: Set[str] = set()
        for assign in self.scopes.assigns:
            value = assign.value
            if not type(value) is cst.Call or "lr_scheduler" in (self.names.call_name(value) or ""):
                continue
            if not any(_is_parameters_call(arg.value) for arg in value.args):
                continue
            for target in assign.targets:
                dotted = dotted_name(target.target)
                if dotted in stepped and not _NOT_OPTIMIZER_NAME.search(last_part(dotted)) and \
                        not re.search(r"ema|swa|averag", last_part(dotted), re.IGNORECASE):
                    found.add(dotted)  # type: ignore[arg-type]
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
        return type(func) is cst.Attribute and func.attr.value in ("optimizers", "create_optimizer")

    def _param_group_receivers(self) -> Iterator[str]:
        for call in self.scopes.calls:  # `opt.param_groups` reached from calls is enough: loops read it
            for arg in call.args:
                value = arg.value
                while type(value) is cst.Subscript:  # opt.param_groups[0]["lr"]
                    value = value.value
                if type(value) is cst.Attribute and value.attr.value == "param_groups":
                    receiver = dotted_name(value.value)
                    if receiver:
                        yield receiver
        for bind in self.scopes.every_binding():
            value = bind.value
            while type(value) is cst.Subscript:
                value = value.value
            if type(value) is cst.Attribute and value.attr.value == "param_groups":
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

    def is_known_optimizer(self, dotted: Optional[str], at: cst.CSTNode, depth: int = 0) -> bool:
        """Whether `dotted`, read at `at`, surely is an optimizer: one of `optimizers`, or a
        parameter of its function that every call of the function in this module passes one.
        A parameter that no call of this module passes is known by its name alone
        (`def train(model, loader, optimizer)`, called from a script beside it): the name is
        what its callers were told to pass."""
        if dotted is None:
            return False
        if dotted in self.optimizers:
            return True
        func = self.tree.function_of(at)
        if func is None or depth > 3:
            return False
        if dotted.startswith("self.") and dotted.count(".") == 1:
            return self._set_from_known_optimizers(dotted, func, depth)
        if "." in dotted:
            return False
        params = func.params
        param = next((p for p in (*params.posonly_params, *params.params, *params.kwonly_params)
                      if p.name.value == dotted), None)
        if param is None or any(b.kind != "param" for b in self.scopes.bindings(func, dotted)):
            return False  # not a parameter, or rebound in the function
        passed = self.scopes.arguments_for(param)
        if passed == []:
            return self.is_optimizer(cst.Name(dotted))
        return bool(passed) and all(value is not None and self.is_known_optimizer(dotted_name(value), site, depth + 1)
                                    for site, value in passed)  # type: ignore[union-attr]

    def _set_from_known_optimizers(self, attribute: str, func: cst.FunctionDef, depth: int) -> bool:
        """`self.optimizer`, read in a method of a class whose methods set it only from names
        known to be optimizers (`self.optimizer = optimizer`, a parameter of `__init__` named
        like one that no call of this module passes anything else)."""
        klass = self.tree.class_of(func)
        if klass is None:
            return False
        assigns = [a for a in self._assigns_by_target.get(attribute, ())
                   if self.tree.class_of(self.tree.function_of(a)) is klass]
        return bool(assigns) and all(
            len(a.targets) == 1 and type(a.value) is cst.Name and
            self.is_known_optimizer(a.value.value, a, depth + 1) for a in assigns)  # type: ignore[attr-defined]

    def parameters_owners(self, optimizer: str) -> Set[str]:
        """The models an optimizer is built on: `{"model"}` for `opt = SGD(model.parameters())`."""
        owners: Set[str] = set()
        for assign in self.scopes.assigns:
            if not type(assign.value) is cst.Call or \
                    not any(dotted_name(t.target) == optimizer for t in assign.targets):
                continue
            for arg in assign.value.args:
                for node in expression_nodes(arg.value):
                    if type(node) is cst.Call and type(node.func) is cst.Attribute and \
                            node.func.attr.value in ("parameters", "named_parameters"):
                        owner = dotted_name(node.func.value)
                        if owner is not None:
                            owners.add(owner)
        return owners

    def is_engine(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A name every binding in effect at `at` makes a DeepSpeed engine: the first of what
        `deepspeed.initialize(...)` returns (`model, optimizer, _, _ = deepspeed.initialize(...)`).
        Its `backward(loss)` backwards the loss, and its `step()` steps and clears the gradients."""
        if type(expr) is not cst.Name:
            return False
        binds = self.scopes.in_effect(expr.value, at)
        return bool(binds) and all(
            b.kind == "assign" and type(b.value) is cst.Call and self.names.call_name(b.value) == _ENGINE_FACTORY
            and not b.whole and unpacked_position(b.node, expr.value) == 0 for b in binds)

    def is_scaler(self, expr: cst.BaseExpression) -> bool:
        dotted = dotted_name(expr)
        if dotted is None:
            return False
        for bind in self.scopes.bindings(self.module, dotted):
            if type(bind.value) is cst.Call and self.names.call_name(bind.value) in GRAD_SCALER:
                return True
        return "scaler" in last_part(dotted).lower()

    def is_model_class(self, klass: cst.ClassDef) -> bool:
        """A class whose methods are model code, run in whatever grad mode their caller chose:
        a module class, a class defining `forward`, or one deriving from a model-like base."""
        if klass.name.value in self.module_classes:
            return True
        if own_method(klass, "forward") is not None:
            return True
        return any(MODEL_BASE.search(last_part(dotted_name(b.value))) for b in klass.bases)

    def _find_models(self) -> Set[str]:
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
        if type(value) is cst.List:  # `[Layer(a, b), Layer(b, c)]`: a list of modules
            return bool(value.elements) and all(
                type(e) is cst.Element and self._is_model_value(e.value, known) for e in value.elements)
        if type(value) is cst.BinaryOperation and type(value.operator) is cst.Add:  # `self.layers + [Layer(...)]`
            return any(type(side) is cst.List and self._is_model_value(side, known) for side in (value.left, value.right))
        if type(value) is not cst.Call:
            return False
        qualified = self.names.call_name(value) or ""
        if qualified.startswith("torch.nn.") and not _NN_NOT_MODULE.search(qualified) and \
                last_part(qualified)[:1].isupper() and not last_part(qualified).endswith("Loss") and \
                not _PARAMETER_FREE.match(qualified):
            return True
        func = value.func
        if type(func) is cst.Attribute and func.attr.value == "from_pretrained" and \
                self._compiled_model_class(func.value, frozenset()):
            return False
        if _MODEL_FACTORIES.search(qualified) and not _NOT_A_MODULE.search(qualified):
            return True
        if type(func) is cst.Name and func.value in self.module_classes:
            return True
        if type(func) is cst.Attribute:
            if func.attr.value == "from_pretrained" and not _NOT_A_MODULE.search(dotted_name(func.value) or ""):
                return True
            if func.attr.value in _MODEL_MOVERS and (dotted_name(func.value) in known or
                                                     self._is_model_value(func.value, known)):
                return True
        return False

    @per_node
    def is_model(self, expr: cst.BaseExpression) -> bool:
        dotted = dotted_name(expr)
        if dotted is None:
            return False
        if type(expr) is cst.Name and (_OTHER_FRAMEWORK.match(dotted) and not self._torch_module_named(dotted) or
                                       self._built_by_another_framework(expr)):
            return False
        if dotted in self.models:  # (unless the binding that runs makes a pipeline: the one that made a model never runs)
            return not (type(expr) is cst.Name and self._binds_a_pipeline(dotted) and self._holds_pipeline(expr, 0))  # type: ignore[arg-type]
        if self.names.qualified_name(expr) is not None:
            return False  # an imported callable (torch.relu, F.softmax, np.mean)
        last = last_part(dotted)
        if dotted in self.scopes.classes or (last[:1].isupper() and last[1:2].islower()) or \
                _NOT_A_MODEL_CALL.search(last) or _MAKES_A_MODEL.search(last) or \
                any(b.kind == "def" for b in self.scopes.bindings(self.module, dotted)):
            return False  # a class or a function: calling it makes (or loads) a model, it does not run one
        if LOSS_NAME.search(last):
            return False
        if type(expr) is cst.Name and self._holds_pipeline(expr, 0) or self._pipeline_attribute(expr, dotted):
            return False  # `generator = pipeline("text-generation", ...)`, `nlp = spacy.load(...)`: no graph
        if type(expr) is cst.Name and self._holds_input_preparer(expr):
            return False
        if _MODEL_NAME.search(last) or type(expr) is cst.Name and self._iterates_models(expr):
            return True
        receiver = dotted[:-len(last)].rstrip(".")
        if receiver in ("", "self"):
            return bool(_MODEL_COMPOUND.search(last)) and not _LABEL_ENCODER.match(last)
        return type(expr) is cst.Attribute and bool(_SUBMODULE.search(last)) and self.is_model(expr.value)

    def _built_by_another_framework(self, name: cst.Name) -> bool:
        """Every binding of `name` seen where it is used builds a model of Transformers' Flax or
        TensorFlow classes (`model, params = FlaxWhisperForConditionalGeneration.from_pretrained(...)`,
        `TFBertModel(config)`): it records no torch graph."""
        binds = self.scopes.bindings_seen(name.value, name)
        return bool(binds) and all(bind.kind == "assign" and type(bind.value) is cst.Call and
                                   _OTHER_FRAMEWORK_CLASS.match(last_part(dotted_name(_class_called(bind.value)) or ""))
                                   for bind in binds)

    def _torch_module_named(self, name: str) -> bool:
        """`tf_model` is a torch module after all: built from a module class of this module
        (`TransformerLM()`), or moved, cast or put in a mode as only torch modules are
        (`.cuda()`, `.to(...)`, `.eval()`, `.half()`)."""
        for call in self.scopes.calls:
            func = call.func
            if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == name and \
                    func.attr.value in _TORCH_MODULE_METHODS:  # type: ignore[attr-defined]
                return True
        for bind in self.scopes.bindings(self.module, name):
            value = bind.value
            while type(value) is cst.Call and type(value.func) is cst.Attribute:  # `TransformerLM().cuda()`
                if value.func.attr.value in _TORCH_MODULE_METHODS:  # type: ignore[attr-defined]
                    return True
                value = value.func.value  # type: ignore[attr-defined]
            if type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in self.module_classes:  # type: ignore[attr-defined]
                return True
        return False

    def _binds_a_pipeline(self, dotted: str) -> bool:
        """Some assignment binds the model name `dotted` to a pipeline (`model = RWKV(...)`
        beside `model = AutoModelForCausalLM.from_pretrained(...)` under a switch)."""
        found = self._pipeline_names.get(dotted)
        if found is None:
            found = self._pipeline_names[dotted] = any(
                type(assign.value) is cst.Call and self._records_no_graph(assign.value)  # type: ignore[arg-type]
                for assign in self._assigns_by_target.get(dotted, ()))
        return found

    def _holds_pipeline(self, name: cst.Name, depth: int) -> bool:
        """`name` surely holds a pipeline that records no graph (`_PIPELINES`: HF's
        `pipeline(...)`, spaCy's, a sentence-transformers model): every binding of it there is one, made in
        place, returned by a function of this module, or passed to the parameter it is by every
        call of its function (followed two calls deep); a binding in code that never runs as
        written (`if HF_MODE:` after `HF_MODE = False`) holds nothing."""
        if depth > 2:
            return False
        binds = self.scopes.bindings_seen(name.value, name)
        pipelines = [self._pipeline_binding(bind, depth) for bind in binds]
        return any(pipelines) and all(made or self.guards.dead(bind.node) for bind, made in zip(binds, pipelines))

    def _pipeline_attribute(self, expr: cst.BaseExpression, dotted: str) -> bool:
        """`self.generator` (or `bot.generator`, `bot = Chatbot(...)`), where every assignment
        to it in the class is an HF `pipeline(...)`."""
        if dotted.count(".") != 1 or type(expr) is not cst.Attribute or type(expr.value) is not cst.Name:
            return False
        owner = expr.value
        klass = self.scopes.enclosing_class(expr) if owner.value == "self" else self.scopes.instance_class(owner)
        values = self.scopes.attribute_values(klass, expr.attr.value) if klass is not None else []
        return bool(values) and all(type(v) is cst.Call and self._records_no_graph(v) for v in values)

    def _records_no_graph(self, call: cst.Call) -> bool:
        """`call` makes a pipeline (`_PIPELINES`), loads a compiled model
        (`NeuronModelForCausalLM.from_pretrained(...)`, `_COMPILED_MODEL_CLASS`), or is made by
        another inference runtime (`_OTHER_RUNTIMES`: `core.compile_model(...)` where `core =
        openvino.Core()`), whose runs record no graph."""
        qualified = self.names.call_name(call)
        if qualified in _PIPELINES or self._of_another_runtime(qualified):
            return True
        func = call.func
        if type(func) is cst.Attribute and type(func.value) is cst.Name:  # `core.compile_model(...)`
            binds = self.scopes.bindings_seen(func.value.value, func.value)
            if binds and all(bind.kind == "assign" and bind.whole and type(bind.value) is cst.Call and
                             self._of_another_runtime(self.names.call_name(bind.value)) for bind in binds):
                return True
        return type(func) is cst.Attribute and func.attr.value == "from_pretrained" and \
            self._compiled_model_class(func.value, frozenset())  # type: ignore[attr-defined]

    @staticmethod
    def _of_another_runtime(qualified: Optional[str]) -> bool:
        """Not `onnxruntime.training`: its `ORTModule` is a torch module that trains."""
        return qualified is not None and qualified.split(".", 1)[0] in _OTHER_RUNTIMES and \
            not qualified.startswith("onnxruntime.training")

    def _compiled_model_class(self, klass: cst.BaseExpression, seen: FrozenSet[str]) -> bool:
        """`klass` is a class of a compiled model (`_COMPILED_MODEL_CLASS`): imported, and
        bound to nothing else in the module but a stand-in for a failed import
        (`NeuronModelForCausalLM = object`), or a class of this module whose bases all are one
        (`class CustomNeuronModel(NeuronModelForCausalLM)`)."""
        qualified = self.names.qualified_name(klass)
        if qualified is not None:
            return bool(_COMPILED_MODEL_CLASS.match(qualified)) and (type(klass) is not cst.Name or all(
                type(bind.value) is cst.Name and bind.value.value in ("object", "None")  # type: ignore[attr-defined]
                for bind in self.scopes.bindings(self.module, klass.value)))  # type: ignore[attr-defined]
        if type(klass) is not cst.Name or klass.value in seen or klass.value not in self.scopes.classes:  # type: ignore[attr-defined]
            return False
        seen = seen | {klass.value}  # type: ignore[attr-defined]
        bases = self.scopes.classes[klass.value].bases  # type: ignore[attr-defined]
        return bool(bases) and all(self._compiled_model_class(base.value, seen) for base in bases)

    def _pipeline_binding(self, bind, depth: int) -> bool:  # type: ignore[no-untyped-def]
        if bind.kind == "param":
            passed = self.scopes.arguments_for(bind.node)
            return bool(passed) and all(type(value) is cst.Name and self._holds_pipeline(value, depth + 1)
                                        for _, value in passed)  # type: ignore[union-attr]
        value = bind.value
        if bind.kind != "assign" or not bind.whole or type(value) is not cst.Call:
            return False
        if self._records_no_graph(value):
            return True
        target = self.scopes.resolve(value)
        returned = self.scopes.returned(target) if target is not None else []
        return bool(returned) and depth < 2 and all(
            type(r) is cst.Name and self._holds_pipeline(r, depth + 1) for r in returned)

    def loaded_on_the_cpu(self, model: cst.BaseExpression, seen: FrozenSet[str] = frozenset()) -> bool:
        """The model a call runs (`model` of `model(ids)` or `model.encode(x)`) is a name only ever
        bound to `...from_pretrained(...)` with nothing that places it (`device_map`, a
        quantized load) and handed to no call, in a module that moves nothing (`.to(...)`,
        `.cuda()`): Transformers loads it on the CPU, and there it stays. A helper's parameter
        is such a model where every call passes one (`_given_loaded_on_the_cpu`)."""
        while type(model) is cst.Attribute:
            model = model.value  # type: ignore[attr-defined]
        if type(model) is not cst.Name or self._moves_anything or model.value in seen:  # type: ignore[attr-defined]
            return False
        binds = self.scopes.bindings_seen(model.value, model)  # type: ignore[attr-defined]
        if binds and all(bind.kind == "param" for bind in binds):
            return all(self._given_loaded_on_the_cpu(bind.node) for bind in binds)  # type: ignore[arg-type]
        seen = seen | {model.value}  # type: ignore[attr-defined]
        return bool(binds) and not self._handed_to_a_call(model.value) and all(  # type: ignore[attr-defined]
            bind.kind == "assign" and bind.whole and type(bind.value) is cst.Call and
            type(bind.value.func) is cst.Attribute and bind.value.func.attr.value == "from_pretrained" and  # type: ignore[attr-defined]
            all(self._places_nothing(arg, seen) for arg in bind.value.args)  # type: ignore[attr-defined]
            for bind in binds)

    def quantized_dynamically(self, model: cst.BaseExpression) -> bool:
        """The model a call runs is a name only ever bound to `torch.quantization.quantize_dynamic(...)`
        (or `torch.ao.quantization`'s): dynamically quantized layers run on the CPU only."""
        while type(model) is cst.Attribute:
            model = model.value  # type: ignore[attr-defined]
        if type(model) is not cst.Name:
            return False
        binds = self.scopes.bindings_seen(model.value, model)  # type: ignore[attr-defined]
        return bool(binds) and all(
            bind.kind == "assign" and bind.whole and type(bind.value) is cst.Call and
            self.names.call_name(bind.value) in _QUANTIZE_DYNAMIC for bind in binds)  # type: ignore[arg-type]

    @per_node
    def _given_loaded_on_the_cpu(self, param: cst.Param) -> bool:
        """Every call of the parameter's function in this module passes it a model loaded on the
        CPU that stays there (`test_string(slow, fast, text)`, `slow = cls.from_pretrained(...)`),
        through helpers that pass their own parameter on: the parameters so linked are read as
        one, and at least one call must come from outside them (a recursion alone passes nothing)."""
        pending, linked, sources = [param], {id(param)}, 0
        while pending:
            passed = self.scopes.arguments_for(pending.pop())
            if not passed:
                return False
            for _, value in passed:
                if value is None:
                    return False
                binds = self.scopes.bindings_seen(value.value, value) if type(value) is cst.Name else []  # type: ignore[attr-defined]
                if binds and all(bind.kind == "param" for bind in binds):
                    for bind in binds:
                        if id(bind.node) not in linked:
                            linked.add(id(bind.node))
                            pending.append(bind.node)  # type: ignore[arg-type]
                    continue
                if not (self._unbound(value) or self.loaded_on_the_cpu(value)):
                    return False
                sources += 1
        return sources > 0

    def _unbound(self, value: cst.BaseExpression) -> bool:
        """A name bound nowhere in the module (not even through `global` in a function), in a
        module with no star import that binds no names through `globals()` or `exec`: the call
        fails before it runs anything (`check_diff(a, b, sp, tok)` with no `sp`)."""
        return type(value) is cst.Name and not self.names.star_modules and \
            self.names.qualified_name(value) is None and value.value not in self._bound_names and \
            not {"globals", "vars", "exec"} & self._called_names  # type: ignore[attr-defined]

    @cached_property
    def _called_names(self) -> FrozenSet[str]:
        """The plain names the module calls (`globals`, `exec`: they bind names no code spells)."""
        return frozenset(call.func.value for call in self.scopes.calls if type(call.func) is cst.Name)  # type: ignore[attr-defined]

    @cached_property
    def _bound_names(self) -> FrozenSet[str]:
        """Every name something in the module binds, in any scope, or declares `global`."""
        bound: Set[str] = set()
        for node in self.tree.nodes:
            kind = type(node)
            if kind is cst.Global or kind is cst.Nonlocal:
                bound.update(item.name.value for item in node.names)  # type: ignore[attr-defined]
            elif kind is cst.Name and type(self.tree.parent(node)) in (cst.AssignTarget, cst.Param, cst.For, cst.AsName, cst.CompFor, cst.NamedExpr, cst.FunctionDef, cst.ClassDef, cst.Element, cst.Tuple, cst.List, cst.AugAssign, cst.AnnAssign, cst.ImportAlias):
                bound.add(node.value)  # type: ignore[attr-defined]
        return frozenset(bound)

    def _handed_to_a_call(self, name: str) -> bool:
        """Some call of the module takes `name` as an argument (`helpers.place(model)`,
        `accelerator.prepare(model)`): a module moves in place, so that call may place it. Not
        one that writes it out or shows it (`export_to_onnx(model, path)`, `print(model)`), nor
        a function of this module that only calls the model's methods and passes it to such
        functions (`_kept_here`)."""
        for call in self.scopes.calls:
            for arg in call.args:
                if type(arg.value) is cst.Name and arg.value.value == name and not self._harmless(call, arg):  # type: ignore[attr-defined]
                    return True
        return False

    def _harmless(self, call: cst.Call, arg: cst.Arg) -> bool:
        """Handing `arg` to `call` cannot place it: a call that writes it out or shows it, or a
        function of this module whose parameter it binds stays there (`_kept_here`)."""
        if _WRITES_OUT.match(last_part(dotted_name(call.func))):
            return True
        helper = self.scopes.resolve(call)
        given = [param for passed, param in self.scopes.parameters_given(call, helper) if passed is arg] \
            if helper is not None else []
        return bool(given) and self._kept_here(helper, given[0])  # type: ignore[arg-type]

    def _kept_here(self, function: cst.FunctionDef, name: str) -> bool:
        """Within `function`, its parameter `name` is only the receiver of a method call
        (`m.encode(x)`, `m(x)`) or handed harmlessly on (`_harmless`): not passed as a part, in a
        tuple, bound to another name or returned, any of which may reach a call that places it
        (`deepspeed.init_inference(m.transformer)`). A chain of helpers is read once."""
        pending, linked = [(function, name)], {(id(function), name)}
        while pending:
            current, param = pending.pop()
            for node in self.tree.walk_scope(current):
                if type(node) is not cst.Name or node.value != param:  # type: ignore[attr-defined]
                    continue
                parent = self.tree.parent(node)
                if type(parent) is cst.Param:
                    continue
                if type(parent) is cst.Attribute and parent.value is node and type(self.tree.parent(parent)) is cst.Call \
                        and self.tree.parent(parent).func is parent or type(parent) is cst.Call and parent.func is node:  # type: ignore[attr-defined]
                    continue  # `m.encode(x)`, `m(x)`: the model's own work
                call = self.tree.parent(parent) if type(parent) is cst.Arg else None
                if type(call) is not cst.Call or parent.value is not node:  # type: ignore[attr-defined]
                    return False
                if _WRITES_OUT.match(last_part(dotted_name(call.func))):  # type: ignore[attr-defined]
                    continue
                helper = self.scopes.resolve(call)  # type: ignore[arg-type]
                given = [p for passed, p in self.scopes.parameters_given(call, helper) if passed is parent] \
                    if helper is not None else []  # type: ignore[arg-type]
                if not given:
                    return False
                if (id(helper), given[0]) not in linked:
                    linked.add((id(helper), given[0]))
                    pending.append((helper, given[0]))  # type: ignore[arg-type]
        return True

    def _places_nothing(self, arg: cst.Arg, seen: FrozenSet[str]) -> bool:
        """An argument of `from_pretrained` that cannot put the model on a device: not a
        placing keyword, not `**settings` (which may hold `device_map`), and not a model loaded
        elsewhere (`PeftModel.from_pretrained(base, ...)` wraps `base` where it is)."""
        if arg.star:
            return False
        if arg.keyword is not None:
            return not _PLACES.match(arg.keyword.value)
        value = arg.value
        if type(value) is not cst.Name:
            return True
        binds = self.scopes.bindings_seen(value.value, value)
        loads = any(type(bind.value) is cst.Call and type(bind.value.func) is cst.Attribute and  # type: ignore[attr-defined]
                    bind.value.func.attr.value == "from_pretrained" for bind in binds)  # type: ignore[attr-defined]
        return not loads or self.loaded_on_the_cpu(value, seen)

    @cached_property
    def _moves_anything(self) -> bool:
        return any(type(call.func) is cst.Attribute and call.func.attr.value in ("to", "cuda")  # type: ignore[attr-defined]
                   for call in self.scopes.calls)

    def _holds_input_preparer(self, name: cst.Name) -> bool:
        """`name` is only ever an instance of an imported class that prepares inputs
        (`_PREPARES_INPUTS`): made in place (`encoder = RobometerEncoderProcessorStep(...)`) or a
        parameter annotated with it (`encoder: TOPRewardEncoderProcessorStep`). Not a class of
        this module: its code is in sight, and it may run a network (a hook-based feature
        extractor). The answer does not ask the project, so a file linted alone gets the same
        one (where `is_model` holding spares a finding, as a loop over a model's layers does, an
        answer the project alone could change would report more alone)."""
        binds = self.scopes.bindings_seen(name.value, name)
        return bool(binds) and all(self._prepares_inputs(bind) for bind in binds)

    def _prepares_inputs(self, bind) -> bool:  # type: ignore[no-untyped-def]
        if bind.kind == "param":
            annotation = bind.node.annotation
            made = annotation.annotation if annotation is not None else None
        else:
            made = bind.value.func if bind.kind == "assign" and bind.whole and type(bind.value) is cst.Call else None
        dotted = dotted_name(made) if made is not None else None
        return dotted is not None and bool(_PREPARES_INPUTS.search(last_part(dotted))) and \
            dotted.partition(".")[0] not in self.scopes.classes

    def _iterates_models(self, name: cst.Name) -> bool:
        """`layer` in `for layer in self.layers` (or `for i, layer in enumerate(self.layers)`),
        where `self.layers` holds modules (an `nn.ModuleList`, a list of module instances)."""
        binds = self.scopes.bindings_seen(name.value, name)
        return bool(binds) and all(bind.kind == "for" and _element(bind.node.target, bind.value, name.value)  # type: ignore[attr-defined]
                                   in self.models for bind in binds)

    def assignments_to(self, dotted: str) -> List[cst.Assign]:
        """The assignments to the dotted name `dotted` in the module, in source order."""
        return self._assigns_by_target.get(dotted, [])

    @cached_property
    def _assigns_by_target(self) -> Dict[str, List[cst.Assign]]:
        """Dotted target name -> the assignments to it, in source order."""
        found: Dict[str, List[cst.Assign]] = {}
        for assign in self.scopes.assigns:
            for dotted in dict.fromkeys(dotted_name(t.target) for t in assign.targets):
                if dotted is not None:
                    found.setdefault(dotted, []).append(assign)
        return found

    def constructor_of(self, expr: cst.BaseExpression) -> Optional[str]:
        """The qualified constructor a model name was built from (`torch.nn.GRU` for
        `rnn = nn.GRU(...).to(device)`; a class of this module by its name), when every
        assignment to it agrees; else None."""
        dotted = dotted_name(expr)
        if dotted is None:
            return None
        found: Set[Optional[str]] = set()
        for assign in self._assigns_by_target.get(dotted, ()):
            value = assign.value
            while type(value) is cst.Call and type(value.func) is cst.Attribute and \
                    value.func.attr.value in _MODEL_MOVERS and type(value.func.value) is cst.Call:
                value = value.func.value
            found.add(self._class_called(value) if type(value) is cst.Call else None)
        return found.pop() if len(found) == 1 else None

    def class_of(self, expr: cst.BaseExpression) -> Optional[str]:
        """The class a model name holds, where its constructor says (`Net` for `net = Net(...)`,
        and for `net = Net.from_pretrained(...)`: a class's own factory method makes the class);
        None for a factory function (`timm.create_model`) or a name bound several ways."""
        made = self.constructor_of(expr) or ""
        if not last_part(made)[:1].isupper():
            made = made.rpartition(".")[0]
        return made if last_part(made)[:1].isupper() else None

    def annotated_class(self, expr: cst.BaseExpression) -> Optional[str]:
        """The class of this module or of the project that a model name holds by the annotation
        of the parameter it was handed, where no constructor says which class it holds: a
        parameter itself (`def run(model: Transformer)`), or `self.<attr>` that the methods of
        the receiver's own class bind only to such parameters (`def __init__(self, model:
        Transformer): self.model = model`)."""
        dotted = dotted_name(expr)
        if dotted is None or dotted.count(".") > 1 or "." in dotted and not dotted.startswith("self."):
            return None
        if "." in dotted:
            klass = self.scopes.enclosing_class(expr)
            values = self.scopes.attribute_values(klass, dotted[5:]) if klass is not None else []
        else:
            values = [expr]
        if not values or not all(type(value) is cst.Name and value.value in self._annotated_parameters  # type: ignore[attr-defined]
                                 for value in values):
            return None
        found: Set[Optional[str]] = set()
        for value in values:
            binds = self.scopes.in_effect(value.value, value)  # type: ignore[attr-defined]
            if not binds:
                return None
            found.update(self._class_named(bind.node.annotation.annotation)  # type: ignore[attr-defined]
                         if bind.kind == "param" and type(bind.node) is cst.Param and bind.node.annotation is not None
                         else None for bind in binds)
        made = found.pop() if len(found) == 1 else None
        return made if made in self.scopes.classes or self.project.knows(made) else None

    @cached_property
    def _annotated_parameters(self) -> FrozenSet[str]:
        """The names of the module's parameters annotated with what may be a class (`model:
        Transformer`, a capitalised name): the only ones `annotated_class` can place."""
        return frozenset(param.name.value for node in self.tree.nodes_of(cst.FunctionDef)
                         for param in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params)  # type: ignore[attr-defined]
                         if param.annotation is not None and
                         last_part(dotted_name(param.annotation.annotation))[:1].isupper())

    def is_parameter_free(self, func: cst.BaseExpression) -> bool:
        """`func` is a torch module without parameters (`_PARAMETER_FREE`): made in place
        (`nn.Softmax(dim=1)(x)`) or held by a name every assignment makes one (`cos =
        nn.CosineSimilarity(dim=1)`). It is no model, and its output carries its inputs' graph."""
        made = self.names.call_name(func) if type(func) is cst.Call else self.constructor_of(func)
        return bool(made) and bool(_PARAMETER_FREE.match(made))  # type: ignore[arg-type]

    def _class_called(self, call: cst.Call) -> Optional[str]:
        """The qualified name of what `call` calls, or the name of this module's class it makes
        (`Net`, or `Net.from_pretrained` for its factory method)."""
        return self._class_named(call.func)

    def _class_named(self, expr: cst.BaseExpression) -> Optional[str]:
        """The qualified name `expr` names, or the name of this module's class (`Net`, `Net.from_pretrained`)."""
        qualified = self.names.qualified_name(expr)
        if qualified is None:
            local = dotted_name(expr)
            if local is not None and local.partition(".")[0] in self.scopes.classes and local.count(".") <= 1:
                return local
        return qualified


class ModuleClasses:
    """The classes of one module that are nn.Modules, each found when something asks about it
    (`name in module_classes`): what it takes to know may be a question to the project, and a
    file is linted again when the project's answer to a question it asked changes, so only
    the classes that matter to a finding are asked about. (It holds no fact that holds it: the
    engine frees a file's facts without the cycle collector.)"""

    def __init__(self, names: TorchNames, scopes: Scopes, project: Optional[ProjectView]) -> None:
        """`project`: also through the bases of other modules of the project (None: this module alone)."""
        self._names = names
        self._scopes = scopes
        self._project = project
        self._known: Dict[str, bool] = {}
        self._open: Set[str] = set()  # being decided: a class among its own bases does not decide

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        known = self._known.get(name)
        if known is not None:
            return known
        if name in self._open:
            return False
        klass = self._scopes.classes.get(name)
        self._open.add(name)
        known = klass is not None and any(self._module_base(base, klass) for base in klass.bases)
        self._open.discard(name)
        if known or not self._open:  # a "no" that leaned on an open class is asked again later
            self._known[name] = known
        return known

    def _module_base(self, base: cst.Arg, klass: cst.ClassDef) -> bool:
        """A base that makes `klass` an nn.Module: torch's, a library's or Lightning's module,
        a module class of this module, or, with the project, of another module (before the
        project is known, guessed one where `klass` defines `forward`)."""
        named = base_class(base.value)
        dotted = dotted_name(named) or ""
        if dotted in self._scopes.classes and dotted in self:
            return True  # (else still what it is imported as: `class Module(Module)` redefines it)
        qualified = self._names.qualified_name(named) or ""
        if is_module_base_name(qualified) or is_module_base_name(dotted):
            return True
        if self._project is None:
            return False
        absolute = self._names.absolute_name(dotted)  # a class of another module of the project
        return absolute is not None and self._project.knows(absolute) and \
            self._project.is_module(absolute, likely=own_method(klass, "forward") is not None)


def _unmoved(value: cst.BaseExpression) -> cst.BaseExpression:
    """The module a chain of moves starts from: `nn.MSELoss()` of `nn.MSELoss().to(device).cuda()`."""
    return constructed(value, _DEVICE_MOVES)


def is_loss_class(qualified: str) -> bool:
    """A loss module class of torch (`torch.nn.CrossEntropyLoss`, `torch.nn.modules.loss.MSELoss`)."""
    return qualified.startswith("torch.nn.") and qualified.endswith("Loss")

