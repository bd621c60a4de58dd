"""Frameworks that run the step loop for the user, by the names of their base classes.

A LightningModule's `training_step`, an HF Trainer subclass's `compute_loss`: the loop that
calls them is the framework's, so their code runs every step though no loop is in sight.
Which class is whose is told by its ancestors' names as they are imported (through the
project's own classes: memlint.analysis.project's `lineage`).
"""

from __future__ import annotations

import re
from typing import Callable, Optional

import libcst as cst

from memlint.analysis.tree import last_part

# Libraries built on torch: a module importing one is PyTorch code, even without `import torch`.
TORCH_LIBRARIES = ("torch", "lightning", "pytorch_lightning", "transformers", "accelerate", "timm", "torchvision",
                   "torchaudio", "torchtext", "torchmetrics", "fairseq", "detectron2", "apex", "ignite", "deepspeed",
                   "diffusers", "peft", "trl", "fairscale", "xformers", "bitsandbytes", "monai")


def is_torch_library(name: str) -> bool:
    """Whether an imported name (`torch.nn`, `lightning.pytorch.Trainer`) is of a library built on torch."""
    return name.split(".", 1)[0] in TORCH_LIBRARIES


# Lightning modules (pytorch_lightning, lightning, lightning.pytorch), by their base class
LIGHTNING_BASES = re.compile(r"(^|\.)LightningModule$")
# HF `Trainer` and its subclasses (`Seq2SeqTrainer`, TRL's trainers derive from it), by base class
HF_TRAINER_BASES = re.compile(r"^(transformers|trl)(\.\w+)*\.\w*Trainer$")
# Trainer methods the HF loop calls per evaluation batch and does not itself run under no_grad:
# its own `prediction_step` enters `torch.no_grad()` inside, so an override must do it too.
HF_EVAL_HOOKS = frozenset({"prediction_step"})
# Trainer methods the HF loop calls on every batch (`compute_loss` on every training and
# evaluation batch): their code runs per step though no loop is in sight.
HF_STEP_HOOKS = frozenset({"training_step", "compute_loss", "prediction_step"})
# The Trainer method whose result the HF loop adds into its running loss every step
# (`self._tr_loss += tr_loss_step`): its own returns `loss.detach()`.
HF_SUMMED_STEP = "training_step"
# SimulEval's agents (simultaneous translation): its evaluation loop calls these on every
# action, reading one more source segment or writing one more target token.
SIMULEVAL_AGENT_BASES = re.compile(r"^simuleval\.agents(\.\w+)*\.\w*Agent$")
SIMULEVAL_ACTION_HOOKS = frozenset({"policy", "predict", "update_states", "update_states_read",
                                    "update_states_write", "segment_to_units", "units_to_segment"})


def is_simuleval_agent(klass: cst.ClassDef, qualified_name: Callable[[cst.BaseExpression], Optional[str]]) -> bool:
    """A class deriving from one of SimulEval's agents, by the names its bases are imported as
    (`qualified_name`: memlint.analysis.torchnames). SimulEval calls its action hooks with grad
    enabled: the agent turns it off itself, or every step records a graph."""
    return any(SIMULEVAL_AGENT_BASES.match(qualified_name(base.value) or "") for base in klass.bases)
# Bases whose subclasses are model code, by name (`FairseqEncoder`, `BaseModel`, `TransformerLayer`).
MODEL_BASE = re.compile(r"(Module|Model|Encoder|Decoder|Layer|Net|Network|Block|Cell)$")


# OpenMMLab's model packages (`mmseg.models.segmentors.base.BaseSegmentor`, mmdet's detectors,
# `mmengine.model.BaseModel`): their classes are nn.Modules, but for the helpers they keep beside
# (mmdet's assigners and coders in `task_modules`, `utils`, the registries in `builder`).
OPENMMLAB_MODELS = re.compile(r"^(mm\w+\.models\.(?!task_modules\.|utils\.|builder\.)|mmengine\.model\.)")


def is_module_base_name(name: str) -> bool:
    """A base class, by the name it is imported as, whose subclasses are nn.Modules: anything of
    `torch.nn` or transformers, Lightning's module, a `Module`, OpenMMLab's `BaseModule`
    (mmcv, mmengine) and the classes of its model packages, a `PreTrainedModel`."""
    return name.startswith(("torch.nn.", "transformers.")) or bool(LIGHTNING_BASES.search(name)) or \
        bool(OPENMMLAB_MODELS.match(name)) or last_part(name) in ("Module", "BaseModule", "PreTrainedModel")
