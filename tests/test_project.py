"""The project-wide layer: what the other modules of the files linted together say about one.

Each test lints a small package as a whole and each of its files alone: the whole run knows
more (a helper's loop in another module, a base class's lineage, what a metric keeps), and a
file alone never reports more than it does in its project.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import libcst as cst
import pytest

import memlint.run as run_module
from memlint.analysis import Facts
from memlint.analysis.often import INNER, STEP
from memlint.analysis.project import (Project, ProjectView, answers, imported_modules, module_name, namespace_names,
                                      project_files)
from memlint.analysis.summary import ModuleSummary
from memlint.config import Config, Selection
from memlint.engine import check
from memlint.rules import registry
from memlint.run import Options, run


def tree(top: Path, files: Dict[str, str]) -> List[Path]:
    paths = []
    for name, text in files.items():
        path = top / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        paths.append(path)
    return paths


def lint(top: Path, *paths: Path, jobs: int = 1, cache: Optional[Path] = None,
         select: Sequence[str] = ("ALL",)) -> List[Tuple[str, int, str]]:
    from memlint.cache import open_cache

    config = Config(root=top, selection=Selection(select=list(select)))
    options = Options(jobs=jobs, cache=open_cache(config, cache) if cache is not None else None)
    outcomes = run([str(p) for p in (paths or [top])], config, registry(), options)
    assert all(o.error is None for o in outcomes), [o.error for o in outcomes]
    return [(Path(o.display).name, f.line, f.code) for o in outcomes for f in o.findings]


def facts_in_project(paths: List[Path], path: Path) -> Facts:
    """The facts of `path` as a run over `paths` sees them once every summary is known."""
    modules = project_files(paths)
    sources = {str(p): p.read_text() for p in paths}
    imported, _ = imported_modules(sources, modules)
    aliases = namespace_names(modules, imported)
    names = frozenset(name for _, name in modules.values()) | frozenset(aliases)
    imported |= frozenset(aliases[name][1] for name in imported if name in aliases)
    summaries: Dict[str, ModuleSummary] = {}
    for each in paths:
        checked = check(each.read_text(), str(each), list(registry().values()),
                        project=ProjectView(None, names, str(each), imported), summarize=True)
        summaries[str(each)] = checked.summary  # type: ignore[assignment]
    view = ProjectView(Project(modules, summaries, imported, aliases), names, str(path))
    return Facts(cst.parse_module(path.read_text()), project=view)


def node_at(facts: Facts, code: str) -> cst.CSTNode:
    for node in facts.tree.nodes:
        if isinstance(node, cst.Call) and facts.module.code_for_node(node) == code:
            return node
    raise AssertionError(code)


def test_the_modules_a_project_imports_are_read_from_its_import_lines(tmp_path):
    paths = tree(tmp_path, {
        "pkg/__init__.py": "from .metrics import Accuracy\n",
        "pkg/metrics.py": "import torch\n",
        "pkg/train.py": "import os, pkg.losses as losses\nfrom pkg import (\n    models,\n    data,\n)\n",
        "script.py": "from pkg.train import run  # the entry point\n",
    })
    modules = project_files(paths)
    found, _ = imported_modules({str(p): p.read_text() for p in paths}, modules)
    assert {"pkg.metrics", "pkg.metrics.Accuracy", "os", "pkg.losses", "pkg.models", "pkg.data",
            "pkg.train", "pkg.train.run"} <= found
    assert "script" not in found


@pytest.mark.parametrize("text", [
    "from a import (b,\n    c)  # import x\nimport y\n",  # a second `import` on the line a match ends on
    "import os; import sys\n",  # the second statement of a line is not at its start
    "x = 'import'\nimport a, b as c\n",
    "\r\nimport a\rimport b\n",  # a lone CR starts no line for `^`
    "from importlib import util\n    from . import (\n    a)\nfrom .b import c  # import\n",
    "import", "  import\timport\n", 's = """\nimport inside_a_string\n"""\n', "# import a\nimport b",
])
def test_import_lines_are_read_as_the_pattern_reads_them_through_the_whole_text(text):
    from memlint.analysis.project import _IMPORT, _import_statements

    assert [(m.span(), m.groups()) for m in _import_statements(text)] == \
        [(m.span(), m.groups()) for m in _IMPORT.finditer(text)]


def test_module_names_follow_packages_and_roots(tmp_path):
    tree(tmp_path, {"src/pkg/__init__.py": "", "src/pkg/sub/__init__.py": "", "src/pkg/sub/mod.py": "",
                    "scripts/train.py": "", "scripts/utils.py": ""})
    assert module_name(str(tmp_path / "src/pkg/sub/mod.py")) == (str(tmp_path / "src"), "pkg.sub.mod")
    assert module_name(str(tmp_path / "src/pkg/__init__.py")) == (str(tmp_path / "src"), "pkg")
    assert module_name(str(tmp_path / "scripts/train.py")) == (str(tmp_path / "scripts"), "train")


HELPER_LOOP = {
    "pkg/__init__.py": "",
    "pkg/steps.py": """\
        import torch

        def score(model, batch):
            out = model(batch)
            for row in out:
                print(row.sum().item())
        """,
    "pkg/train.py": """\
        import torch
        from pkg.steps import score

        model = torch.nn.Linear(4, 4).cuda()
        for batch in loader:
            score(model, batch)
        """,
}


def test_a_helper_called_from_a_loop_in_another_module_runs_per_step(tmp_path):
    paths = tree(tmp_path, HELPER_LOOP)
    steps = tmp_path / "pkg/steps.py"
    item = "row.sum().item()"
    in_project = facts_in_project(paths, steps)
    assert in_project.steps.function_how_often(in_project.tree.function_of(node_at(in_project, item))) == STEP
    assert in_project.steps.how_often(node_at(in_project, item)) == INNER
    alone = Facts(cst.parse_module(steps.read_text()))
    assert alone.steps.how_often(node_at(alone, item)) is None


EPOCH_HELPER = {
    "pkg/__init__.py": "",
    "pkg/report.py": """\
        import torch

        def report(model):
            for p in model.parameters():
                print(p.norm().item())
        """,
    "pkg/train.py": """\
        import torch
        from pkg.report import report

        model = torch.nn.Linear(4, 4).cuda()
        for epoch in range(10):
            for x in loader:
                model(x).sum().backward()
            report(model)
        """,
}


def test_a_helper_called_between_steps_elsewhere_gets_the_answer_it_had_alone(tmp_path):
    """Between steps is the same as unknown to every fact, so the module is not linted twice."""
    paths = tree(tmp_path, EPOCH_HELPER)
    report = tmp_path / "pkg/report.py"
    facts = facts_in_project(paths, report)
    func = facts.tree.function_of(node_at(facts, "p.norm().item()"))
    assert facts.project.project.external_often(*module_name(str(report)), "report") == "boundary"
    assert facts.steps.function_how_often(func) is None
    assert facts.project.asked == {"often report": None}  # what the first phase guessed


VIRTUAL = {
    "lib/__init__.py": "",
    "lib/base.py": """\
        class Runner:
            def fit(self, loader):
                for batch in loader:
                    self.step(batch)

            def step(self, batch):
                raise NotImplementedError
        """,
    "lib/impl.py": """\
        import torch
        from lib.base import Runner

        class Mine(Runner):
            def step(self, batch):
                mask = torch.ones(8, 8).cuda()
                return self.model(batch, mask)
        """,
}


def test_an_override_of_what_a_base_class_calls_every_step_runs_per_step(tmp_path):
    paths = tree(tmp_path, VIRTUAL)
    impl = tmp_path / "lib/impl.py"
    facts = facts_in_project(paths, impl)
    assert facts.steps.how_often(node_at(facts, "torch.ones(8, 8).cuda()")) == STEP
    assert facts.project.asked["often Mine.step"] == STEP



@pytest.mark.parametrize("init, held", [
    ("self.step = step_fn", True),
    ("self.step = torch.compile(self.step)", False),  # the method, wrapped: still the override's
    ("if step_fn is not None:\n                    self.step = step_fn", False),  # only on a condition
])
def test_a_call_of_what_the_instance_holds_reaches_no_override(tmp_path, init, held):
    """`self.step = step_fn` at the top of the base's `__init__`, then `self.step(batch)` every
    step: the call reaches the object the instance holds (an instance attribute hides a method
    of the same name, a subclass's too), so the summary keeps no edge for it, and `Mine.step`
    is not called per step through it. The method wrapped (`torch.compile(self.step)`), or
    replaced only on a condition, is still what a call may reach."""
    files = dict(VIRTUAL)
    files["lib/base.py"] = "        import torch\n" + VIRTUAL["lib/base.py"].replace(
        "class Runner:\n", f"class Runner:\n            def __init__(self, step_fn=None):\n                {init}\n\n")
    paths = tree(tmp_path, files)
    base = tmp_path / "lib/base.py"
    view = ProjectView(None, frozenset({"lib", "lib.base", "lib.impl"}), str(base), frozenset({"lib.base"}))
    summary = check(base.read_text(), str(base), list(registry().values()), project=view, summarize=True).summary
    assert summary is not None and ([e.callee for e in summary.calls if e.on_self] == []) is held
    facts = facts_in_project(paths, tmp_path / "lib/impl.py")
    assert facts.steps.how_often(node_at(facts, "torch.ones(8, 8).cuda()")) == (None if held else STEP)


SIBLINGS = {
    "pipes/__init__.py": "",
    "pipes/base.py": """\
        import torch

        class Pipeline:
            def free_hooks(self):
                self.offload()

            def offload(self):
                pass
        """,
    "pipes/prior.py": """\
        import torch
        from pipes.base import Pipeline

        class Prior(Pipeline):
            def training_step(self, batch, batch_idx):
                self.free_hooks()
                return batch
        """,
    "pipes/inpaint.py": """\
        import torch
        from pipes.base import Pipeline

        class Inpaint(Pipeline):
            def offload(self):
                torch.cuda.empty_cache()
        """,
}


def test_an_override_runs_as_often_as_the_calls_made_on_its_own_class(tmp_path):
    """`Prior` frees its hooks every step, and the base's `free_hooks` calls `self.offload()`:
    that reaches `Inpaint.offload` only when `self` is an `Inpaint`, which nothing calls so."""
    paths = tree(tmp_path, SIBLINGS)
    prior = facts_in_project(paths, tmp_path / "pipes/prior.py")
    assert prior.steps.how_often(node_at(prior, "self.free_hooks()")) == STEP
    inpaint = facts_in_project(paths, tmp_path / "pipes/inpaint.py")
    assert inpaint.steps.how_often(node_at(inpaint, "torch.cuda.empty_cache()")) is None
    assert [f for f in lint(tmp_path) if f[2] == "MEM501"] == []
    (tmp_path / "pipes/inpaint.py").write_text(textwrap.dedent(SIBLINGS["pipes/inpaint.py"]) + textwrap.indent(
        "def training_step(self, batch, batch_idx):\n    self.free_hooks()\n    return batch\n", "    "))
    assert [f for f in lint(tmp_path) if f[2] == "MEM501"] == [("inpaint.py", 6, "MEM501")]



def test_an_override_a_class_mixes_in_beside_the_caller_runs_per_step(tmp_path):
    """`MyPipe(TrainLoopMixin, CudaOffloadMixin)`: one sibling's step frees the hooks, the
    other's `offload` answers, on the same instance."""
    files = {name: text for name, text in SIBLINGS.items() if name != "pipes/prior.py"}
    files["pipes/train.py"] = SIBLINGS["pipes/prior.py"].replace("Prior", "TrainLoopMixin")
    files["pipes/model.py"] = """\
        import torch
        from pipes.train import TrainLoopMixin
        from pipes.inpaint import Inpaint

        class MyPipe(TrainLoopMixin, Inpaint):
            pass
        """
    tree(tmp_path, files)
    assert [f for f in lint(tmp_path) if f[2] == "MEM501"] == [("inpaint.py", 6, "MEM501")]


def test_an_override_whose_class_also_overrides_the_caller_is_not_narrowed(tmp_path):
    """`Inpaint.free_hooks` calls `super().free_hooks()` (no edge): its own step reaches its
    `offload` every step through the base's method."""
    files = dict(SIBLINGS)
    files["pipes/inpaint.py"] = """\
        import torch
        from pipes.base import Pipeline

        class Inpaint(Pipeline):
            def free_hooks(self):
                super().free_hooks()
                self.mask_cache = None

            def offload(self):
                torch.cuda.empty_cache()

            def training_step(self, batch, batch_idx):
                self.free_hooks()
                return batch
        """
    tree(tmp_path, files)
    assert [f for f in lint(tmp_path) if f[2] == "MEM501"] == [("inpaint.py", 10, "MEM501")]


LINEAGE = {
    "crit/__init__.py": "from .base import BaseCriterion\n",
    "crit/base.py": """\
        from torch.nn.modules.loss import _Loss

        class BaseCriterion(_Loss):
            pass
        """,
    "crit/mine.py": """\
        import torch
        from crit import BaseCriterion

        class MyCriterion(BaseCriterion):
            def forward(self, model, sample):
                return model(sample).sum()
        """,
}


def test_a_class_deriving_from_a_project_module_class_through_a_reexport_is_a_module(tmp_path):
    paths = tree(tmp_path, LINEAGE)
    mine = tmp_path / "crit/mine.py"
    facts = facts_in_project(paths, mine)
    assert "MyCriterion" in facts.receivers.module_classes
    assert facts.steps.how_often(node_at(facts, "model(sample)")) == STEP
    alone = Facts(cst.parse_module(mine.read_text()))
    assert "MyCriterion" not in alone.receivers.module_classes


STAR = {
    "pkg/__init__.py": "from .encoders import *\n",
    "pkg/encoders.py": """\
        import torch

        class SpeechEncoder(torch.nn.Module):
            pass

        class SpeechConfig:
            pass
        """,
    "train.py": """\
        import torch
        from pkg import SpeechEncoder, SpeechConfig

        class Mine(SpeechEncoder):
            pass

        class Settings(SpeechConfig):
            pass
        """,
}


def test_a_class_deriving_from_a_generic_module_class_of_another_module_is_a_module(tmp_path):
    """flair's `TransformerBaseEmbeddings(Embeddings[Sentence])`, where `flair.embeddings.base`
    defines `class Embeddings(torch.nn.Module, Generic[DT])`: its `forward` runs per step."""
    paths = tree(tmp_path, {
        "flair/__init__.py": "",
        "flair/base.py": """\
            from typing import Generic, TypeVar
            import torch

            DT = TypeVar("DT")


            class Embeddings(torch.nn.Module, Generic[DT]):
                pass
            """,
        "flair/transformer.py": """\
            import torch
            from flair.base import Embeddings


            class TransformerBaseEmbeddings(Embeddings[str]):
                pass


            class TransformerEmbeddings(TransformerBaseEmbeddings):
                def forward(self, input_ids):
                    return self.model(input_ids)
            """,
    })
    facts = facts_in_project(paths, tmp_path / "flair/transformer.py")
    assert "TransformerBaseEmbeddings" in facts.receivers.module_classes
    assert "TransformerEmbeddings" in facts.receivers.module_classes


def test_a_class_behind_a_star_import_is_traced_to_its_definition(tmp_path):
    paths = tree(tmp_path, STAR)
    facts = facts_in_project(paths, tmp_path / "train.py")
    assert "Mine" in facts.receivers.module_classes  # `pkg` imports everything of `pkg.encoders`
    assert "Settings" not in facts.receivers.module_classes


def test_a_helper_of_another_module_returning_a_device_tensor_places_its_result(tmp_path):
    """StyleTTS2's `maximum_path` (in `utils.py`, imported with `from utils import *`) moves its
    result to the input's device: a bound read from it per phoneme makes the host wait. The
    same helper handing back a host copy does not."""
    step = """\
        import torch
        from utils import *


        def train(model, loader, optimizer, device):
            for mels, lengths in loader:
                attn = model(mels.to(device))
                durations = maximum_path(attn, lengths).sum(-1)
                target = torch.zeros_like(attn)
                for row, duration in zip(target, durations):
                    for p in range(row.shape[0]):
                        row[p, :duration[p]] = 1
                loss = (attn - target).abs().mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        """
    helper = """\
        import numpy as np
        import torch


        def maximum_path(attn, lengths):
            device = attn.device
            path = np.zeros(attn.shape, dtype=np.int32)
            return torch.from_numpy(path).to(device=device, dtype=attn.dtype)
        """
    on_device = tree(tmp_path / "a", {"train.py": step, "utils.py": helper})
    on_host = tree(tmp_path / "b", {"train.py": step, "utils.py": helper.replace(
        ".to(device=device, dtype=attn.dtype)", ".to(dtype=attn.dtype).cpu()")})
    assert ("train.py", "MEM105") in {(name, code) for name, _, code in lint(tmp_path / "a", *on_device)}
    assert ("train.py", "MEM105") not in {(name, code) for name, _, code in lint(tmp_path / "b", *on_host)}


BARK = {
    "bark/__init__.py": "",
    "bark/generation.py": """\
        import torch


        def generate_fine(model, tokens):
            with torch.inference_mode():
                return model(tokens.cuda()).argmax(-1)


        def codec_decode(codec, codes):
            out = codec.decoder(codes.cuda())
            return out.detach().cpu().numpy().squeeze()
        """,
    "bark/api.py": """\
        import torch
        from .generation import codec_decode, generate_fine


        def generate_audio(model, codec, text):
            tokens = generate_fine(model, text)
            audio = codec_decode(codec, tokens)
            return audio
        """,
}


def _bark(tmp_path: Path, **edits: Tuple[str, str, str]) -> List[Path]:
    files = dict(BARK)
    for name, (path, old, new) in edits.items():
        files[path] = files.get(path, "").replace(old, new) if old else new
    return tree(tmp_path, files)


@pytest.mark.parametrize("edits, reported", [
    ({}, True),
    # called under no_grad
    ({"caller": ("bark/api.py", "    audio = codec_decode(codec, tokens)",
                 "    with torch.no_grad():\n                audio = codec_decode(codec, tokens)")}, False),
    # ... by a function every call of which another module makes under no_grad
    ({"main": ("main.py", "", "import torch\nfrom bark.api import generate_audio\n\n\ndef main(m, c, t):\n"
                              "    with torch.no_grad():\n        return generate_audio(m, c, t)\n")}, False),
    # ... by a function a home-made decorator of another module runs without grad (no `no_grad` spelled here)
    ({"decorated": ("bark/api.py", "def generate_audio(", "@smart_inference_mode()\n        def generate_audio("),
      "imp": ("bark/api.py", "from .generation import", "from .utils import smart_inference_mode\n        from .generation import")},
     False),
    # ... by a Lightning module's validation hook, which Lightning runs without grad
    ({"hook": ("bark/api.py", "def generate_audio(model, codec, text):", "class Voice(lightning.LightningModule):\n"
               "            def validation_step(self, model, codec, text):"),
      "body": ("bark/api.py", "    tokens = generate_fine(model, text)\n            audio = codec_decode(codec, tokens)\n"
               "            return audio", "        tokens = generate_fine(model, text)\n"
               "                audio = codec_decode(codec, tokens)\n                return audio"),
      "imp": ("bark/api.py", "import torch\n", "import torch\n        import lightning\n")}, False),
    # ... from a module that turns grad off at its top
    ({"top": ("bark/api.py", "import torch\n", "import torch\n        torch.set_grad_enabled(False)\n")}, False),
    # it hands back what it decodes with its graph: a caller may train on it
    ({"graph": ("bark/generation.py", ".detach().cpu().numpy().squeeze()", "")}, False),
    # ... or stores it into an item
    ({"item": ("bark/generation.py", "            out = codec.decoder(codes.cuda())\n",
               "            cache[\"out\"] = codec.decoder(codes.cuda())\n            out = cache[\"out\"]\n")}, False),
    # the module trains somewhere
    ({"trains": ("bark/generation.py", "def codec_decode(", "def finetune(codec, codes, opt):\n"
                 "            codec(codes).mean().backward()\n            opt.step()\n\n\n        def codec_decode(")}, False),
    # its other functions record a graph too: nothing says how it means to infer
    ({"mode": ("bark/generation.py", "            with torch.inference_mode():\n                return",
               "            if True:\n                return")}, False),
    # a model of a project class built in place: reported, unless its forward runs without grad
    ({"codec": ("bark/codec.py", "", "import torch\n\n\nclass Codec(torch.nn.Module):\n    def forward(self, codes):\n"
                "        return self.decoder(codes)\n"),
      "build": ("bark/generation.py", "            out = codec.decoder(codes.cuda())\n",
                "            model = Codec().to(\"cuda\").eval()\n            out = model(codes.cuda())\n"),
      "imp": ("bark/generation.py", "        import torch\n", "        import torch\n        from .codec import Codec\n")}, True),
    ({"codec": ("bark/codec.py", "", "import torch\n\n\nclass Codec(torch.nn.Module):\n    @torch.no_grad()\n"
                "    def forward(self, codes):\n        return self.decoder(codes)\n"),
      "build": ("bark/generation.py", "            out = codec.decoder(codes.cuda())\n",
                "            model = Codec().to(\"cuda\")\n            out = model(codes.cuda())\n"),
      "imp": ("bark/generation.py", "        import torch\n", "        import torch\n        from .codec import Codec\n")}, False),
    # a model of the project needs gradients in its forward (forces from an energy)
    ({"forces": ("bark/models.py", "", "import torch\n\n\nclass ForceField(torch.nn.Module):\n"
                 "    def forward(self, pos):\n        energy = self.net(pos).sum()\n"
                 "        return torch.autograd.grad(energy, pos, create_graph=True)[0]\n")}, False),
])
def test_a_decoding_function_called_with_grad_on_from_another_module_is_reported(tmp_path, edits, reported):
    """bark's `generation.codec_decode` runs the codec with grad on beside functions that run
    their models under `inference_mode`; `api.py` calls it. Reported only where every call of
    the project records a graph, the module never trains, and no model of the project needs
    gradients in its forward; never for the module linted alone."""
    paths = _bark(tmp_path, **edits)
    found = {(name, code) for name, _, code in lint(tmp_path, *paths)}
    assert (("generation.py", "MEM203") in found) is reported
    assert ("generation.py", "MEM203") not in {(name, code) for name, _, code in lint(tmp_path, paths[1])}


@pytest.mark.parametrize("head, step, reported", [
    ("class LossCompute(torch.nn.Module):", "pass", True),
    # a method that backwards, or hands the loss to another module's function, or keeps it
    ("class LossCompute(torch.nn.Module):", "loss.backward()", False),
    ("class LossCompute(torch.nn.Module):", "backward_step(loss)", False),
    ("class LossCompute(torch.nn.Module):", "self.pending.append(loss)", False),
    # a base of a library, which may train on it
    ("class LossCompute(LossComputeBase):", "pass", False),
])
def test_outputs_handed_to_a_project_class_that_never_learns_are_still_an_evaluations(tmp_path, head, step, reported):
    """OpenNMT's `LM_scoring.py` hands each batch's outputs to `LossCompute` (another module's
    nn.Module that only computes the loss): the loop after `model.eval()` still only evaluates.
    A class with a method that backwards, hands the loss on or keeps it, or one deriving from a
    library's class, may train on what it is handed; linted alone, the class is unknown and may too."""
    loss = """\
        import torch
        from onmt.steps import backward_step
        from somelib.losses import LossComputeBase


        HEAD
            def __init__(self, criterion):
                super().__init__()
                self.criterion = criterion

            def forward(self, batch, outputs):
                loss = self.criterion(outputs, batch["tgt"])
                STEP
                return loss
        """.replace("HEAD", head).replace("STEP", step)
    steps = "import torch\n\n\ndef backward_step(loss):\n    loss.backward()\n"
    score = """\
        import torch
        from onmt.loss import LossCompute


        def main(model, batches, device):
            valid_loss = LossCompute(torch.nn.CrossEntropyLoss(reduction="none"))
            model.to(device)
            model.eval()
            total = 0.0
            for batch in batches:
                outputs = model(batch["src"])
                loss = valid_loss(batch, outputs)
                total += loss.sum().item()
            return total
        """
    paths = tree(tmp_path, {"onmt/__init__.py": "", "onmt/loss.py": loss, "onmt/steps.py": steps,
                            "tools/score.py": score})
    assert (("score.py", 11, "MEM203") in lint(tmp_path, *paths)) is reported
    assert ("score.py", 11, "MEM203") not in lint(tmp_path, paths[3])


def test_of_two_star_imports_defining_a_name_the_last_one_gives_it(tmp_path):
    utils = {
        "utils_a.py": "import torch\n\n\ndef infer(model, x):\n    return model(x)\n",
        "utils_b.py": "import torch\n\n\ndef infer(model, x):\n    with torch.no_grad():\n        return model(x).cpu()\n",
    }
    script = """\
        import torch
        from {} import *
        from {} import *


        def evaluate(model, loader):
            model.eval()
            outs = []
            for x, y in loader:
                outs.append(infer(model, x.cuda()))
            return torch.cat(outs)
        """
    quiet = tree(tmp_path / "a", {**utils, "run_eval.py": script.format("utils_a", "utils_b")})
    loud = tree(tmp_path / "b", {**utils, "run_eval.py": script.format("utils_b", "utils_a")})
    assert ("run_eval.py", "MEM202") not in {(n, c) for n, _, c in lint(tmp_path / "a", *quiet)}
    assert ("run_eval.py", "MEM202") in {(n, c) for n, _, c in lint(tmp_path / "b", *loud)}


def test_a_method_reexported_through_a_star_import_is_followed(tmp_path):
    """PyG's `from torch_geometric.llm import GLEM`, where the package's `__init__.py` imports
    everything of `.models`, which imports `GLEM` from its module: `GLEM.inference` runs
    without grad, and a call of it records nothing. A name a module binds itself is not taken
    for the star's."""
    paths = tree(tmp_path, {
        **_INFERENCE_METHODS,
        "pkg/__init__.py": "from .models import *\n",
        "pkg/run.py": """\
            import torch
            from pkg import GNN

            model = GNN().to("cuda")
            model.eval()
            for loader in loaders:
                model.inference(loader, "cuda")
            """,
        "pkg/shadow.py": """\
            import torch
            from pkg import *


            class GNN(torch.nn.Module):
                def inference(self, loader, device):
                    return torch.cat([self(x.to(device)) for x in loader])


            model = GNN().to("cuda")
            model.eval()
            for loader in loaders:
                model.inference(loader, "cuda")
            """,
    })
    found = {(name, code) for name, _, code in lint(tmp_path, *paths)}
    assert ("run.py", "MEM203") not in found
    assert ("shadow.py", "MEM203") in found


OPENMMLAB = {
    "depther/__init__.py": "",
    "depther/base.py": """\
        import torch
        from mmcv.runner import BaseModule

        class BaseDepther(BaseModule):
            pass
        """,
    "depther/encoder_decoder.py": """\
        import torch
        from .base import BaseDepther

        class DepthEncoderDecoder(BaseDepther):
            def encode_decode(self, img):
                return self.decode_head(self.backbone(img))

            def slide_inference(self, img, crops):
                preds = img.new_zeros(img.shape)
                for crop in crops:
                    preds += self.encode_decode(img[crop])
                return preds
        """,
}


def test_a_class_deriving_from_openmmlab_base_module_in_another_module_is_a_module(tmp_path):
    paths = tree(tmp_path, OPENMMLAB)
    facts = facts_in_project(paths, tmp_path / "depther/encoder_decoder.py")
    assert "DepthEncoderDecoder" in facts.receivers.module_classes
    assert not [f for f in lint(tmp_path) if f[2] == "MEM203"]  # its caller owns grad mode


def test_only_the_classes_a_finding_hangs_on_are_asked_about(tmp_path):
    """Whether a class is an nn.Module is asked of the project only for a class something asks
    about: a file is linted again when an answer it got changes, so an answer nobody needed
    must not be asked for."""
    paths = tree(tmp_path, {
        "lib/__init__.py": "",
        "lib/blocks.py": "import torch\n\nclass Stem(torch.nn.Module):\n    pass\n",
        "train.py": """\
            import torch
            from lib.blocks import Stem

            class Wide(Stem):
                pass

            class Head(torch.nn.Module):
                def forward(self, x):
                    return x.relu()

            model = Head()

            def train(loader, optimizer):
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
    })
    modules = project_files(paths)
    names = frozenset(name for _, name in modules.values())
    train = tmp_path / "train.py"
    checked = check(train.read_text(), str(train), list(registry().values()), project=ProjectView(None, names, str(train)))
    assert not any(question.startswith("module ") for question in checked.asked)
    facts = facts_in_project(paths, train)
    assert "Wide" in facts.receivers.module_classes  # asked, it is answered through the project
    assert facts.project.asked == {"module lib.blocks.Stem": True}


METRIC = {
    "emo/__init__.py": "",
    "emo/utils.py": """\
        import torch

        class Accuracy:
            def __init__(self):
                self.y, self.yhat = [], []

            def update(self, yhat, y):
                self.yhat.append(yhat)
                self.y.append(y)

            def acc(self):
                return (torch.cat(self.yhat) == torch.cat(self.y)).float().mean().item()
        """,
    "emo/valid.py": """\
        import torch
        from .utils import Accuracy

        def valid_epoch(model, loader, device):
            model.eval()
            acc = Accuracy()
            for x, y in loader:
                yhat = model(x.to(device))
                acc.update(yhat, y.to(device))
            return acc.acc()
        """,
}


def test_a_metric_of_another_module_that_keeps_its_argument_retains_the_graph(tmp_path):
    tree(tmp_path, METRIC)
    assert ("valid.py", 9, "MEM202") in lint(tmp_path)
    assert ("valid.py", 9, "MEM202") not in lint(tmp_path, tmp_path / "emo/valid.py")


def test_a_metric_named_again_after_the_loop_is_still_the_metric_inside_it(tmp_path):
    rebound = dict(METRIC)
    rebound["emo/valid.py"] = METRIC["emo/valid.py"].replace(
        "            return acc.acc()\n", "            acc = acc.acc()\n            return acc\n")
    tree(tmp_path, rebound)
    assert ("valid.py", 9, "MEM202") in lint(tmp_path)


METER = {
    "imagenet/__init__.py": "",
    "imagenet/meters.py": """\
        class AverageMeter:
            def __init__(self, name):
                self.name = name
                self.sum = 0
                self.count = 0

            def update(self, val, n=1):
                self.val = val
                self.sum += val * n
                self.count += n
        """,
    "imagenet/train.py": """\
        import torch
        from .meters import AverageMeter

        def train(loader, model, criterion, optimizer, device):
            losses = AverageMeter("Loss")
            for images, target in loader:
                loss = criterion(model(images.to(device)), target.to(device))
                losses.update(loss, images.size(0))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            return losses.sum / losses.count
        """,
}


def test_a_meter_of_another_module_that_sums_its_argument_accumulates_the_graph(tmp_path):
    tree(tmp_path, METER)
    assert ("train.py", 8, "MEM201") in lint(tmp_path)
    assert ("train.py", 8, "MEM201") not in lint(tmp_path, tmp_path / "imagenet/train.py")
    meters = tmp_path / "imagenet/meters.py"
    meters.write_text(meters.read_text().replace("self.sum += val * n", "self.sum += val.item() * n"))
    assert ("train.py", 8, "MEM201") not in lint(tmp_path)


def test_a_subclass_defining_forward_guesses_its_project_base_a_module_and_is_linted_once(tmp_path, monkeypatch):
    """Before the project is known, a base class of another module is guessed a model by its
    name (`Block`, `Encoder`, ...), and also where the class deriving from it here defines
    `forward` (detectron2's `CNNBlockBase`, fairseq's `TransformerDecoderBase`): guessed
    right, the first lint stands."""
    tree(tmp_path, {"pkg/__init__.py": "", "pkg/base.py": """\
        import torch


        class Base(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = torch.nn.Linear(4, 4)
        """, "pkg/net.py": """\
        import torch
        from pkg.base import Base


        class Net(Base):
            def forward(self, x):
                return self.proj(x)


        def evaluate(loader):
            model = Net().cuda()
            model.eval()
            outputs = []
            for x in loader:
                outputs.append(model(x.cuda()))
            return outputs
        """})
    stood: Dict[str, bool] = {}
    real = run_module.same_answers

    def same_answers(project, path, asked):
        stood[Path(path).name] = real(project, path, asked)
        return stood[Path(path).name]

    monkeypatch.setattr(run_module, "same_answers", same_answers)
    found = lint(tmp_path)
    assert ("net.py", 15, "MEM203") in found
    assert stood["net.py"]


def test_a_meter_class_behind_a_star_import_accumulates_the_graph(tmp_path):
    """ReMoS's finetuner builds `MovingAverageMeter` from `from utils import *`."""
    starred = dict(METER)
    starred["imagenet/train.py"] = METER["imagenet/train.py"].replace("from .meters import AverageMeter",
                                                                      "from .meters import *")
    tree(tmp_path, starred)
    assert ("train.py", 8, "MEM201") in lint(tmp_path)


def test_what_the_project_knows_of_a_module_does_not_depend_on_the_rules_selected(tmp_path):
    """The meter's module names neither torch nor any word MEM201 needs; selected alone,
    MEM201 still learns from its summary that `update` sums what it is given."""
    tree(tmp_path, METER)
    meters = tmp_path / "imagenet/meters.py"
    meters.write_text(meters.read_text().replace("        self.val = val\n", ""))
    assert ("train.py", 8, "MEM201") in lint(tmp_path, select=["MEM201"])


def test_a_meter_of_a_module_imported_whole_accumulates_the_graph(tmp_path):
    whole = {"meters.py": METER["imagenet/meters.py"],
             "train.py": METER["imagenet/train.py"].replace("from .meters import AverageMeter", "import meters")
             .replace("AverageMeter(\"Loss\")", "meters.AverageMeter(\"Loss\")")}
    tree(tmp_path, whole)
    assert ("train.py", 8, "MEM201") in lint(tmp_path)


HELPER_OUTPUT = {
    "helpers.py": """\
        import torch

        def logits_of(model, x):
            return model(x) * 2.0
        """,
    "train.py": """\
        import torch
        from helpers import logits_of

        kept = []
        for x, y in loader:
            logits = logits_of(model, x)
            criterion(logits, y).backward()
            optimizer.step()
            optimizer.zero_grad()
            kept.append(logits)
        """,
}


@pytest.mark.parametrize("imported", ["from helpers import logits_of", "import helpers", "import helpers as h"])
def test_a_helper_of_a_module_imported_whole_returns_its_graph_as_one_imported_by_name(tmp_path, imported):
    call = {"import helpers": "helpers.logits_of", "import helpers as h": "h.logits_of"}.get(imported, "logits_of")
    tree(tmp_path, {**HELPER_OUTPUT, "train.py": HELPER_OUTPUT["train.py"]
                    .replace("from helpers import logits_of", imported).replace("logits_of(model", f"{call}(model")})
    assert ("train.py", 10, "MEM202") in lint(tmp_path)


TOKENIZER = {
    "tokenizer.py": """\
        import typing
        from typing import Dict, List

        import torch
        from sentencepiece import SentencePieceProcessor

        class Tokenizer:
            def __init__(self, path):
                self.sp_model = SentencePieceProcessor(model_file=path)

            def encode(self, s: str, bos: bool) -> ANNOTATION:
                t = self.sp_model.encode(s)
                if bos:
                    t = [1] + t
                return t
        """,
    "pretokenize.py": """\
        import numpy as np
        import torch
        from tokenizer import Tokenizer

        def process_shard(path, data, out):
            enc = Tokenizer(path)
            all_tokens = []
            for example in data:
                tokens = enc.encode(example["story"], bos=True)
                all_tokens.extend(tokens)
            all_tokens = np.array(all_tokens, dtype=np.uint16)
            with open(out, "wb") as f:
                f.write(all_tokens.tobytes())
        """,
}


@pytest.mark.parametrize("annotation, reported", [
    ("List[int]", False), ("list[int] | None", False), ("typing.Tuple[List[int], ...]", False),
    ("List[torch.Tensor]", True), ("torch.Tensor", True), ("float", True), ("Dict[str, float]", True),
])
def test_a_helper_of_another_module_annotated_to_return_no_tensor_returns_no_graph(tmp_path, annotation, reported):
    """llama2.c's `Tokenizer.encode(...) -> List[int]` calls SentencePiece's `sp_model.encode`,
    which reads like a model's encoder: its annotation says that no tensor comes back."""
    tree(tmp_path, {**TOKENIZER, "tokenizer.py": TOKENIZER["tokenizer.py"].replace("ANNOTATION", annotation)})
    assert (("pretokenize.py", 10, "MEM202") in lint(tmp_path)) is reported


CACHE_HELPER = {
    "pkg/__init__.py": "",
    "pkg/utils.py": """\
        import torch
        from transformers.utils import is_torch_npu_available

        def empty_cache():
            \"\"\"Empties the cache of the device there is.\"\"\"
            if is_torch_npu_available():
                torch.npu.empty_cache()
            else:
                torch.cuda.empty_cache()

        def phase_end():
            torch.cuda.empty_cache()
            print("phase done")
        """,
    "pkg/trainer.py": """\
        import torch
        from transformers import Trainer
        from .utils import empty_cache, phase_end

        class MyTrainer(Trainer):
            def compute_loss(self, model, inputs, return_outputs=False):
                loss = model(**inputs).loss
                empty_cache()
                phase_end()
                return loss
        """,
}


def test_a_helper_of_another_module_that_only_empties_the_cache_is_reported_where_a_step_calls_it(tmp_path):
    tree(tmp_path, CACHE_HELPER)
    found = [f for f in lint(tmp_path) if f[2] == "MEM501"]
    assert ("trainer.py", 8, "MEM501") in found  # `empty_cache()`: the call goes
    assert ("utils.py", 9, "MEM501") not in found  # the wrapper stays for its other callers
    assert ("trainer.py", 9, "MEM501") not in found  # `phase_end()` does more: its own body is what runs
    assert not [f for f in lint(tmp_path, tmp_path / "pkg/trainer.py") if f[2] == "MEM501"]  # alone: not known


NAMESPACE = {  # folders without an `__init__.py`, imported from the folder above `ldm/`
    "ldm/modules/util.py": """\
        import math
        import torch

        def timestep_embedding(timesteps, dim):
            half = dim // 2
            freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half).to(timesteps.device)
            return timesteps[:, None].float() * freqs[None]
        """,
    "ldm/models/unet.py": """\
        import torch
        from ldm.modules.util import (
            timestep_embedding,
        )

        class UNet(torch.nn.Module):
            def forward(self, x, t):
                return self.body(x, timestep_embedding(t, 128))
        """,
}


def test_a_module_of_a_namespace_package_is_the_one_the_project_imports(tmp_path):
    tree(tmp_path, NAMESPACE)
    assert ("util.py", 6, "MEM103") in lint(tmp_path)  # the UNet's forward calls it every step
    assert not lint(tmp_path, tmp_path / "ldm/modules/util.py")  # alone: how often it runs is not known


NEIGHBOUR = """\
    import torch
    from .util import timestep_embedding

    class Block(torch.nn.Module):
        def forward(self, x, t):
            return self.body(x, timestep_embedding(t, 128))
    """


@pytest.mark.parametrize("layout", [
    {  # a neighbour imports it relatively, another module by its longer name
        "ldm/modules/util.py": NAMESPACE["ldm/modules/util.py"],
        "ldm/modules/attention.py": NEIGHBOUR,
        "ldm/models/other.py": "from ldm.modules.util import timestep_embedding\n",
    },
    {  # a package under a folder without `__init__.py`, imported through that folder by a script
        "src/pkg/__init__.py": "",
        "src/pkg/util.py": NAMESPACE["ldm/modules/util.py"],
        "src/pkg/model.py": NEIGHBOUR,
        "scripts/train.py": "from src.pkg.model import Block\n",
    },
    {  # reached two ways: from the repository's top, and from the folder above `ldm/` by a script
        "stable/ldm/modules/util.py": NAMESPACE["ldm/modules/util.py"],
        "stable/ldm/models/unet.py": NAMESPACE["ldm/models/unet.py"].replace("from ldm.", "from stable.ldm."),
        "stable/scripts/sample.py": "from ldm.modules.util import timestep_embedding\n",
    },
    {  # a folder without `__init__.py` inside a regular package
        "ldm/__init__.py": "",
        **NAMESPACE,
    },
])
def test_a_namespace_name_leaves_the_names_the_neighbours_use(tmp_path, layout):
    paths = tree(tmp_path, layout)
    assert ("util.py", 6, "MEM103") in lint(tmp_path)
    for path in paths:
        assert set(lint(tmp_path, path)) <= set(lint(tmp_path)), path


DEVICE_CALLER = {  # a trainer that names the device, a mixed-precision helper of another module that does not
    "pkg/__init__.py": "",
    "pkg/mixed.py": """\
        import torch

        class MixedPrecision:
            def __init__(self, model):
                self.params = list(model.parameters())

            def optimize(self, opt):
                print(self.grad_norm())
                opt.step()

            def grad_norm(self):
                total = 0.0
                for p in self.params:
                    total += p.grad.norm().item() ** 2
                return total ** 0.5
        """,
    "pkg/train.py": """\
        import torch
        from pkg.mixed import MixedPrecision

        class TrainLoop:
            def __init__(self, model, opt, data):
                self.model = model.to(torch.device("cuda"))
                self.mixed = MixedPrecision(self.model)
                self.opt, self.data = opt, data

            def run_loop(self):
                while True:
                    self.run_step(next(self.data))

            def run_step(self, batch):
                self.opt.zero_grad()
                for i in range(0, len(batch), 4):
                    self.model(batch[i:i + 4]).mean().backward()
                self.mixed.optimize(self.opt)
        """,
}


def test_a_helper_of_another_module_gets_its_tensors_on_the_device_its_callers_name(tmp_path):
    tree(tmp_path, DEVICE_CALLER)
    assert ("mixed.py", 14, "MEM105") in lint(tmp_path)  # a sync per parameter, on every step
    assert not [f for f in lint(tmp_path, tmp_path / "pkg/mixed.py") if f[2] == "MEM105"]  # alone: no device
    train = tmp_path / "pkg/train.py"
    train.write_text(train.read_text().replace('model.to(torch.device("cuda"))', "model"))
    assert not [f for f in lint(tmp_path) if f[2] == "MEM105"]  # a project on the CPU: its reads wait for nothing


NESTED_STEP = {
    "ijepa/__init__.py": "",
    "ijepa/logging.py": """\
        import torch

        def grad_logger(named_params):
            norms = []
            for name, p in named_params:
                if p.grad is not None:
                    norms.append(float(torch.norm(p.grad)))
            return norms
        """,
    "ijepa/train.py": """\
        import torch
        from ijepa.logging import grad_logger

        def main(encoder, loader, optimizer, epochs):
            encoder = encoder.to(torch.device("cuda"))
            for epoch in range(epochs):
                for x in loader:
                    def train_step():
                        loss = encoder(x.cuda()).mean()
                        loss.backward()
                        optimizer.step()
                        stats = grad_logger(encoder.named_parameters())
                        optimizer.zero_grad()
                        return float(loss), stats
                    (loss, stats), elapsed = gpu_timer(train_step)
        """,
}


def test_a_helper_called_from_a_step_function_nested_in_another_one_runs_per_step(tmp_path):
    """A closure named as a step (`def train_step():` in the batch loop, handed to a timer) is a
    step wherever it is defined: what it calls in another module runs every step."""
    tree(tmp_path, NESTED_STEP)
    assert ("logging.py", 7, "MEM105") in lint(tmp_path)  # a sync per parameter, on every step
    train = tmp_path / "ijepa/train.py"
    train.write_text(train.read_text().replace("train_step", "timed"))
    assert not [f for f in lint(tmp_path) if f[2] == "MEM105"]  # a closure named for nothing: who calls it decides


VERSIONED_CLASS = {
    "hooks/__init__.py": "",
    "hooks/clip.py": """\
        import torch

        def clip_grads(params):
            for p in params:
                print(p.grad.cuda().norm().item())
        """,
    "hooks/optimizer.py": """\
        import torch
        from hooks.clip import clip_grads

        if torch.__version__ >= "1.6":
            class Fp16OptimizerHook:
                def after_train_iter(self, runner):
                    runner.outputs["loss"].backward()
                    clip_grads(runner.model.parameters())
        else:
            class Fp16OptimizerHook:
                def after_train_iter(self, runner):
                    clip_grads(runner.model.parameters())
        """,
}


def test_a_class_defined_under_a_module_level_condition_calls_into_the_project_without_a_crash(tmp_path):
    """mmcv defines its fp16 hook once per torch version, under an `if`: a module's summary
    holds only its top-level classes, so such a class is asked about by name and not found."""
    tree(tmp_path, VERSIONED_CLASS)
    assert lint(tmp_path) == lint(tmp_path, jobs=2)  # (a KeyError before, in the project's reading)


def test_an_import_edited_elsewhere_gives_a_warm_run_what_a_cold_run_gives(tmp_path):
    tree(tmp_path, NAMESPACE)
    cache = tmp_path / "cache"
    assert lint(tmp_path, cache=cache) == lint(tmp_path)
    (tmp_path / "ldm/models/unet.py").write_text("import torch\n\nclass UNet(torch.nn.Module):\n    pass\n")
    assert lint(tmp_path, cache=cache) == lint(tmp_path) == []  # nothing calls it per step now


# An nn.Module of another module named like an input preparer: whether `encoder` is a model
# must not hang on the project (here its being one spares a loop over the model's stages).
PREPARER = {
    "stages/__init__.py": "",
    "stages/proc.py": """\
        import torch.nn as nn

        class StageEncoderProcessor(nn.ModuleList):
            def __init__(self, dims):
                super().__init__(nn.Conv2d(d, d, 3, padding=1) for d in dims)
        """,
    "stages/run.py": """\
        import torch
        from .proc import StageEncoderProcessor

        def pyramid(model, x, dims):
            encoder = StageEncoderProcessor(dims)
            trace = x
            for stage in encoder:
                out = model(stage(x))
                trace = torch.cat([out, trace], dim=1)
            return trace
        """,
}


QUIET_MODE = {
    "gan/__init__.py": "",
    "gan/pix2pix.py": """\
        import torch

        class Pix2PixModel(torch.nn.Module):
            def forward(self, data, mode):
                semantics = self.preprocess_input(data)
                if mode == "encode_only":
                    return self.encode_z(semantics)
                elif mode == "inference":
                    with torch.no_grad():
                        fake_image, _ = self.generate_fake(semantics)
                    return fake_image
                raise ValueError(mode)
        """,
    "gan/test.py": """\
        from gan.pix2pix import Pix2PixModel

        model = Pix2PixModel()
        model.eval()
        images, codes = [], []
        for data in loader:
            images.append(model(data, mode="inference"))
        for data in loader:
            codes.append(model(data, mode="encode_only"))
        """,
}


def test_a_mode_the_model_runs_without_grad_in_another_module_is_no_evaluation_forward(tmp_path):
    paths = tree(tmp_path, QUIET_MODE)
    whole = lint(tmp_path)
    assert [line for name, line, code in whole if code in ("MEM202", "MEM203")] == [9, 9]  # the encoding loop alone
    assert lint(tmp_path, paths[-1]) == []  # alone, a class it cannot read may do the same: left alone


def test_a_class_the_project_cannot_read_is_left_alone_only_in_a_mode_for_inference(tmp_path):
    tree(tmp_path, {"run.py": """\
        import torch
        from mylib import Detector

        model = Detector().cuda()
        model.eval()
        kept, scored = [], []
        for images in loader:
            kept.append(model(images.cuda(), mode="inference"))
        for images in loader:
            scored.append(model(images.cuda(), reduction="mean"))
        """})
    assert [(line, code) for _, line, code in lint(tmp_path)] == [(10, "MEM202"), (10, "MEM203")]


def test_a_file_alone_reports_nothing_its_project_does_not(tmp_path):
    paths = tree(tmp_path, {**HELPER_LOOP, **VIRTUAL, **LINEAGE, **METRIC, **METER, **CACHE_HELPER, **NAMESPACE,
                                 **DEVICE_CALLER, **NESTED_STEP, **PREPARER, **QUIET_MODE})
    whole = set(lint(tmp_path))
    for path in paths:
        assert set(lint(tmp_path, path)) <= whole, path


# Two functions that call each other beside a loop that also calls another module's helper:
# some facts of a cycle (what `b` returns) depend on which of its functions is asked about first,
# so a first lint that worked its facts out in another order than a second lint could differ
CYCLE_BESIDE_HELPER = {
    "cycle/helpers.py": """\
        import torch
        net = torch.nn.Linear(2, 2)


        def f(x):
            return net(x).sum()
        """,
    "cycle/m.py": """\
        import torch
        from helpers import f
        model = torch.nn.Linear(2, 2)


        def a(x):
            if x.dim() > 3:
                return model(x).sum()
            return b(x)


        def b(x):
            return a(x[0])


        def evaluate(loader):
            total = 0
            other = 0
            for batch in loader:
                total += b(batch)
                other += f(batch)
            print(total, other)
        """,
    "cycle/runner.py": "from m import evaluate\nevaluate([])\n",
}


def test_a_cycle_of_calls_beside_another_modules_helper_gives_one_answer_whatever_the_jobs(tmp_path):
    tree(tmp_path, CYCLE_BESIDE_HELPER)
    cold = lint(tmp_path)
    assert [(name, line, code) for name, line, code in cold if name == "m.py"] == [
        ("m.py", 20, "MEM201"), ("m.py", 20, "MEM203"), ("m.py", 21, "MEM201")]
    assert lint(tmp_path, jobs=2) == cold


def test_jobs_and_the_cache_give_what_one_cold_run_gives(tmp_path):
    tree(tmp_path / "src", {**HELPER_LOOP, **VIRTUAL, **LINEAGE, **METRIC, **METER, **CACHE_HELPER, **NAMESPACE,
                            **DEVICE_CALLER, **NESTED_STEP, **CYCLE_BESIDE_HELPER})
    cold = lint(tmp_path / "src")
    assert lint(tmp_path / "src", jobs=2) == cold
    assert lint(tmp_path / "src", cache=tmp_path / "cache") == cold
    assert lint(tmp_path / "src", cache=tmp_path / "cache", jobs=2) == cold  # warm


def test_a_changed_helper_module_changes_the_cached_result_of_its_caller(tmp_path):
    tree(tmp_path / "src", METRIC)
    cache = tmp_path / "cache"
    assert ("valid.py", 9, "MEM202") in lint(tmp_path / "src", cache=cache)
    utils = tmp_path / "src/emo/utils.py"
    utils.write_text(utils.read_text().replace("self.yhat.append(yhat)", "self.yhat.append(yhat.detach().cpu())")
                     .replace("self.y.append(y)", "self.y.append(y.cpu())"))
    assert ("valid.py", 9, "MEM202") not in lint(tmp_path / "src", cache=cache)


PLAIN = """\
def check(model, loader):
    model.eval()
    results = []
    for batch in loader:
        results.append(model(batch))
    return results
"""


def test_code_that_is_not_pytorch_is_left_alone(tmp_path):
    tree(tmp_path, {"plain.py": PLAIN, "with_torch.py": "import torch\n" + PLAIN})
    found = {name for name, _, _ in lint(tmp_path)}
    assert found == {"with_torch.py"}


def test_a_module_using_torch_through_a_project_helper_is_pytorch_code(tmp_path):
    tree(tmp_path, {"app/__init__.py": "", "app/nets.py": "import torch\n\ndef build():\n    return torch.nn.Linear(4, 2)\n",
                    "app/run.py": "from app.nets import build\n" + PLAIN})
    assert {name for name, _, _ in lint(tmp_path)} == {"run.py"}
    assert lint(tmp_path, tmp_path / "app/run.py") == []  # alone: nothing says it is PyTorch code


def test_a_helper_of_a_tests_folder_is_summarised_whole_whatever_rules_run(tmp_path):
    """Only the rules of tests look into a test module, but its summary is the others' to
    read: a loss helper under `testing/` returns its graph, with or without such a rule."""
    tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/testing/__init__.py": "",
        "pkg/testing/helpers.py": """\
            import torch

            def compute_loss(model, x, y):
                return torch.nn.functional.cross_entropy(model(x), y)
            """,
        "pkg/train.py": """\
            import torch
            from pkg.testing.helpers import compute_loss

            model = model.to(device)
            model.eval()
            losses = []
            for x, y in loader:
                loss = compute_loss(model, x, y)
                losses.append(loss)
            print(sum(losses))
            """,
    })
    for ignore in ([], ["MEM503"]):
        config = Config(root=tmp_path, selection=Selection(select=["ALL"], ignore=ignore))
        outcomes = run([str(tmp_path)], config, registry(), Options(jobs=1))
        found = [(Path(o.display).name, f.line, f.code) for o in outcomes for f in o.findings]
        assert ("train.py", 9, "MEM202") in found, ignore


def test_a_script_named_like_a_test_still_speaks_for_the_project(tmp_path):
    """`train_test.py` is a test module by its name, but may be the script that trains: its
    calls count as the project's steps (a helper it calls per batch is per-step code)."""
    tree(tmp_path, {
        "src/steps.py": """\
            import torch

            def step(n):
                return torch.ones(n).cuda()
            """,
        "src/train_test.py": """\
            import torch
            from steps import step

            for batch in loader:
                step(batch.size(0))
            """,
    })
    assert ("steps.py", 4, "MEM103") in lint(tmp_path)


_EVALUATES_FOR_AN_IMPORTER = {
    "p/evaluate.py": """\
        import torch

        class Runner:
            def __init__(self, path):
                self.model = torch.load(path, weights_only=True)
                self.outputs = []

            def collect(self, batches):
                for x in batches:
                    self.outputs.append(self.model(x))

        def dataset_loss(model, batches):
            losses = []
            for x, y in batches:
                losses.append(torch.nn.functional.mse_loss(model(x), y))
            return sum(losses) / len(losses)

        if __name__ == "__main__":
            model = torch.load("m.pt", weights_only=True)
            model.eval()
            print(dataset_loss(model, batches))
        """,
}


def test_a_script_another_module_imports_is_not_taken_for_inference(tmp_path):
    """A script that never backwards is inference only when nothing else imports it: a training
    module may backward what its functions return or keep (`no_grad` or `.detach()` there would
    break that training, so no such fix is safe). Once nothing imports it, it evaluates."""
    importer = {"p/train.py": """\
        import torch
        from evaluate import Runner, dataset_loss

        runner = Runner("m.pt")
        runner.collect(batches)
        torch.stack(runner.outputs).mean().backward()
        dataset_loss(runner.model, batches).backward()
        """}
    paths = tree(tmp_path, {**_EVALUATES_FOR_AN_IMPORTER, **importer})
    assert [f for f in lint(tmp_path) if f[2] == "MEM203"] == []
    before = paths[0].read_text()  # what it keeps, MEM202 may report, but not detach as safe
    run([str(tmp_path)], Config(root=tmp_path, selection=Selection(select=["ALL"])), registry(), Options(jobs=1, fix=True))
    assert paths[0].read_text() == before
    paths[1].write_text("import torch\n")
    assert {code for name, _, code in lint(tmp_path) if name == "evaluate.py"} >= {"MEM203"}


def test_a_featurising_generator_of_a_script_nobody_imports_gets_its_inner_loop_wrapped(tmp_path):
    """A script that never backwards, and that no module imports, evaluates in any of its
    functions: a generator's forward outside `no_grad` is reported, and the fix wraps the inner
    loop that does not yield (a `with` around the `yield` would leak no-grad mode to the caller)."""
    source = """\
        import torch

        class Codes:
            def __init__(self, path):
                self.model = torch.load(path, weights_only=True)
                self.model.eval()

            def batches(self, clips):
                for clip in clips:
                    parts = []
                    for piece in clip.split(4096):
                        feats = self.model.feature_extractor(piece)
                        with torch.no_grad():
                            parts.append(self.model.head(feats).argmax(-1).cpu())
                    yield torch.cat(parts).tolist()

        if __name__ == "__main__":
            for codes in Codes("m.pt").batches(clips):
                print(codes)
        """
    paths = tree(tmp_path, {"p/featurize.py": source, "p/util.py": "import torch\n"})
    assert ("featurize.py", 12, "MEM203") in lint(tmp_path)
    config = Config(root=tmp_path, selection=Selection(select=["MEM203"]))
    run([str(tmp_path)], config, registry(), Options(jobs=1, fix=True))
    fixed = paths[0].read_text()
    assert "            with torch.no_grad():\n                for piece in clip.split(4096):\n" in fixed
    assert fixed.count("yield") == 1 and "    with torch.no_grad():\n            for clip in clips" not in fixed


@pytest.mark.parametrize("edit", ["keeps", "renamed"])
def test_a_warm_run_after_another_module_changed_gives_what_a_cold_run_gives(tmp_path, edit):
    kept = METRIC["emo/utils.py"]
    detached = kept.replace("self.yhat.append(yhat)", "self.yhat.append(yhat.detach().cpu())")
    tree(tmp_path / "src", {**METRIC, "emo/utils.py": detached if edit == "keeps" else kept})
    cache = tmp_path / "cache"
    before = lint(tmp_path / "src", cache=cache)
    if edit == "keeps":  # the helper now keeps its argument's graph
        (tmp_path / "src/emo/utils.py").write_text(textwrap.dedent(kept))
    else:  # the same text under another name: `from .utils import` names nothing the project has
        (tmp_path / "src/emo/utils.py").rename(tmp_path / "src/emo/metrics.py")
    after = lint(tmp_path / "src")
    assert after != before
    assert lint(tmp_path / "src", cache=cache) == after
    assert lint(tmp_path / "src", cache=cache) == after  # and once more, from what that run kept


_CONTEXTS = {
    "pkg/__init__.py": "",
    "pkg/utils.py": """\
        import contextlib
        import torch


        @contextlib.contextmanager
        def torch_autocast(device_type="cuda", **kwargs):
            if NEW_TORCH:
                with torch.amp.autocast(device_type=device_type, **kwargs):
                    yield
            else:
                with torch.cuda.amp.autocast(**kwargs):
                    yield


        @contextlib.contextmanager
        def quiet():
            with torch.inference_mode(), torch.no_grad():
                yield
        """,
    "pkg/train.py": """\
        import torch
        from pkg.utils import torch_autocast, quiet


        def train(model, loader, optimizer, params):
            for x, y in loader:
                with torch_autocast(enabled=params.use_fp16):
                    loss = model(x.cuda()).sum()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


        def sample(model, x, steps):
            model.eval()
            with quiet():
                for _ in range(steps):
                    x = model(x.cuda())
            return x
        """,
}


def test_a_context_manager_of_another_module_is_the_no_grad_or_autocast_it_enters(tmp_path):
    """icefall's `torch_autocast(...)` is a float16 autocast on CUDA unless told otherwise (the
    same autocast, spelled for each torch), and bark's `_inference_mode()` turns grad off: the
    project's summary of the wrapper says so."""
    tree(tmp_path, _CONTEXTS)
    found = {(name, code) for name, _, code in lint(tmp_path)}
    assert ("train.py", "MEM401") in found  # backwarded under the wrapper's float16, no GradScaler
    assert ("train.py", "MEM203") not in found  # the sampler runs under the wrapper's inference_mode


def test_a_context_manager_told_another_device_or_dtype_is_that_autocast(tmp_path):
    files = dict(_CONTEXTS)
    files["pkg/train.py"] = files["pkg/train.py"].replace(
        "torch_autocast(enabled=params.use_fp16)", "torch_autocast(dtype=torch.bfloat16)")
    tree(tmp_path, files)
    assert "MEM401" not in {code for _, _, code in lint(tmp_path)}
    files["pkg/train.py"] = files["pkg/train.py"].replace("torch_autocast(dtype=torch.bfloat16)", 'torch_autocast("cpu")')
    tree(tmp_path, files)
    assert "MEM401" not in {code for _, _, code in lint(tmp_path)}


_INFERENCE_METHODS = {
    "pkg/__init__.py": "",
    "pkg/models.py": """\
        import torch


        class GNN(torch.nn.Module):
            def forward(self, x):
                return self.lin(x)

            @torch.no_grad()
            def inference(self, loader, device):
                return torch.cat([self(x.to(device)) for x in loader])
        """,
    "pkg/factory.py": """\
        from pkg.models import GNN


        def get_model(name):
            return GNN()
        """,
    "pkg/bench.py": """\
        import torch
        from pkg.factory import get_model

        model = get_model("gnn").to("cuda")
        model.eval()
        for loader in loaders:
            model.inference(loader, "cuda")
        """,
}


def test_a_method_every_class_of_the_project_runs_without_grad_records_nothing(tmp_path):
    """PyG's models decorate `inference` with `@torch.no_grad()`: a model from a factory is
    one of them, whichever it is (a script's own class, which nothing imports, cannot be). A
    class of the package that defines `inference` with grad on may be the one."""
    other = """\
        import torch


        class Decoder(torch.nn.Module):
            def inference(self, loader, device):
                return [self(x.to(device)) for x in loader]
        """
    tree(tmp_path, {**_INFERENCE_METHODS, "pkg/script.py": other})
    assert ("bench.py", "MEM203") not in {(name, code) for name, _, code in lint(tmp_path)}
    tree(tmp_path, {"pkg/other.py": other, "pkg/__init__.py": "from pkg.other import Decoder\n"})
    assert ("bench.py", "MEM203") in {(name, code) for name, _, code in lint(tmp_path)}


def test_a_method_of_a_library_class_is_not_taken_for_the_projects_grad_free_one(tmp_path):
    """The project's `FrozenCLIP.encode` runs without grad; diffusers' `AutoencoderKL.encode`,
    called on a VAE the code makes from its class, does not."""
    tree(tmp_path, {
        "proj/__init__.py": "",
        "proj/text.py": """\
            import torch


            class FrozenCLIP(torch.nn.Module):
                @torch.no_grad()
                def encode(self, ids):
                    return self.model(ids)[0]
            """,
        "proj/cache_latents.py": """\
            import torch
            from diffusers import AutoencoderKL
            from proj.text import FrozenCLIP


            def cache(loader, name):
                vae = AutoencoderKL.from_pretrained(name, subfolder="vae").cuda()
                vae.eval()
                text = FrozenCLIP()
                latents = []
                for batch in loader:
                    latents.append(vae.encode(batch.cuda()).latent_dist.sample())
                return torch.cat(latents)
            """,
    })
    assert {"MEM202", "MEM203"} <= {code for name, _, code in lint(tmp_path) if name == "cache_latents.py"}


def test_every_question_a_module_asks_the_project_is_answered_again_the_same(tmp_path):
    """Once the project is known, a file whose questions get the answers it recorded keeps its
    first lint: a question `answers` cannot ask again would have it linted twice on every run."""
    paths = tree(tmp_path, {**_CONTEXTS, **_INFERENCE_METHODS, "pkg/offload.py": """\
        import torch
        from pkg.utils import quiet


        def free():
            torch.cuda.empty_cache()


        def run(model, loader):
            for x in loader:
                with quiet():
                    model(x.cuda(), mode="infer")
                    model.inference(x)
                free()
        """})
    for path in paths:
        facts = facts_in_project(paths, path)
        facts.roles  # (what the rules would ask: every fact of the module, read)
        for node in facts.tree.nodes:
            if isinstance(node, cst.Call):
                facts.values.carries_grad(node, node)
                facts.steps.site(node)
        asked = dict(facts.project.asked)
        assert answers(facts.project.project, str(path), asked) == asked, path


_EVERY_QUESTION = {  # each question of ProjectView, with what to ask it of
    "external_often": [("step",)], "called_elsewhere": [("step", True), ("step", False)],
    "method_called_quietly": [("inference",)], "forward_asks_for_grad": [()], "called_from_device_code": [()],
    "is_module": [("pkg.nets.Net",), ("pkg.nets.Renamed", True)],  # (Renamed: an alias, not traced)
    "is_lightning_module": [("pkg.nets.Net",)], "uses_torch": [("pkg.nets",)],
    "set_elsewhere": [("DEBUG",)], "imported_elsewhere": [()], "is_hf_trainer": [("pkg.nets.Net",)],
    "returns": [("pkg.nets.loss_of", True), ("pkg.nets.loss_of", False)], "learns": [("pkg.nets.Meter",)],
    "defines": [("pkg.nets.Net",)], "returns_device": [("pkg.nets.loss_of",)],
    "language_model": [("pkg.nets.loss_of",)], "context": [("pkg.nets.quiet",)], "grad_off": [("pkg.nets.Net.infer",)],
    "grad_off_method": [("infer",)], "empties_cache": [("pkg.nets.free",)], "quiet_modes": [("pkg.nets.Net",)],
    "keeps": [("pkg.nets.Meter.update", True), ("pkg.nets.Meter.update", False)],
    "accumulates": [("pkg.nets.Meter.update",)], "saved": [(["ckpt.pt"],)],
}


def test_every_kind_of_question_is_answered_again_the_same(tmp_path):
    """`answers` must ask again every kind of question a view asks: one it cannot ask is never
    the same, so a module that asks it is linted twice on every run, and its cached result
    never stands in another project. Every question method of the view is asked here (a new
    one must be added to `_EVERY_QUESTION`)."""
    paths = tree(tmp_path, {"pkg/__init__.py": "", "pkg/nets.py": """\
        import contextlib
        import torch


        class Net(torch.nn.Module):
            @torch.no_grad()
            def infer(self, x):
                return self(x)


        Renamed = Net


        class Meter:
            def __init__(self):
                self.seen = []

            def update(self, value):
                self.seen.append(value)


        def loss_of(model, x):
            return model(x).sum()


        @contextlib.contextmanager
        def quiet():
            with torch.no_grad():
                yield


        def free():
            torch.cuda.empty_cache()
        """, "pkg/train.py": """\
        import torch
        from pkg.nets import Meter, Net, free, loss_of, quiet

        DEBUG = False


        def step(model, x, meter):
            loss = loss_of(model, x)
            meter.update(loss)
            loss.backward()
            free()
            torch.save(model.state_dict(), "ckpt.pt")
        """})
    methods = {name for name, value in vars(ProjectView).items()
               if callable(value) and not name.startswith("_") and name not in ("knows", "fresh")}
    assert methods == set(_EVERY_QUESTION)
    train = tmp_path / "pkg" / "train.py"
    view = facts_in_project(paths, train).project.fresh()
    for method, calls in _EVERY_QUESTION.items():
        for arguments in calls:
            getattr(view, method)(*arguments)
    assert len(view.asked) == sum(map(len, _EVERY_QUESTION.values()))
    assert answers(view.project, str(train), dict(view.asked)) == view.asked


def test_a_model_of_another_module_whose_forward_works_under_no_grad_records_nothing(tmp_path):
    """RWKV's inference model wraps its whole `forward` in `with torch.no_grad():`, in a
    module of its own: a script that imports it and runs it over prompts records no graph.
    A model of that module whose `forward` computes before it turns grad off does."""
    paths = tree(tmp_path, {
        "rwkv/__init__.py": "",
        "rwkv/model.py": """\
            import torch


            class RNN(torch.jit.ScriptModule):
                def forward(self, token, state):
                    with torch.no_grad():
                        return self.emb[token] @ self.head, state


            class Tuned(torch.nn.Module):
                def forward(self, token, state):
                    x = self.emb(token)
                    with torch.no_grad():
                        state = self.mix(state)
                    return self.head(x), state
            """,
        "run.py": """\
            import torch
            from rwkv.model import RNN


            model = RNN().cuda()
            model.eval()
            state = None
            for token in prompt:
                out, state = model.forward(token, state)
                print(out.argmax().item())
            """,
    })
    assert ("run.py", "MEM203") not in {(name, code) for name, _, code in lint(tmp_path)}
    paths[-1].write_text(paths[-1].read_text().replace("RNN", "Tuned"))
    assert ("run.py", "MEM203") in {(name, code) for name, _, code in lint(tmp_path)}


def test_a_factorys_model_is_not_taken_for_a_project_class_whose_forward_runs_without_grad(tmp_path):
    """`timm.create_model(...)` makes no class of the project: that the project's one module
    class runs its forward without grad (a running class prior) says nothing of the ViT's."""
    tree(tmp_path, {
        "utils/__init__.py": "",
        "utils/prior.py": """\
            import torch


            class ClassPrior(torch.nn.Module):
                def forward(self, logits):
                    with torch.no_grad():
                        self.counts += torch.bincount(logits.argmax(-1), minlength=1000)
                        return self.counts / self.counts.sum()
            """,
        "extract.py": """\
            import timm
            import torch
            from utils.prior import ClassPrior

            model = timm.create_model("vit_base_patch16_224", pretrained=True).cuda()
            model.eval()
            prior = ClassPrior().cuda()
            kept = []
            for images, _ in val_loader:
                kept.append(model.forward(images.cuda()))
            print(prior(torch.cat(kept)))
            """,
    })
    assert {("extract.py", "MEM203"), ("extract.py", "MEM202")} <= {(name, code) for name, _, code in lint(tmp_path)}


def test_a_method_a_local_class_inherits_from_another_module_is_judged_by_the_project(tmp_path):
    """`Net(Base)` inherits `inference` from a base of another module of the project, which
    decorates it `@torch.no_grad()`: the local class does not say, and the project does."""
    tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/base.py": """\
            import torch


            class Base(torch.nn.Module):
                @torch.no_grad()
                def inference(self, x):
                    return self(x).argmax(-1)
            """,
        "pkg/script.py": """\
            import torch
            from pkg.base import Base


            class Net(Base):
                def forward(self, x):
                    return self.fc(x)


            model = Net().cuda()
            model.eval()
            preds = []
            for x in loader:
                preds.append(model.inference(x.cuda()))
            """,
    })
    assert not {code for name, _, code in lint(tmp_path) if name == "script.py"} & {"MEM202", "MEM203"}


_NERF = """
    import torch
    from helpers import *

    DEBUG = False
    device = torch.device("cuda")


    def render_rays(model, rays):
        ret = {"rgb": model(rays)}
        for k in ret:
            if torch.isnan(ret[k]).any() and DEBUG:
                print(k, "contains nan")
        return ret


    def train(model, optimizer, loader):
        for rays, target in loader:
            loss = ((render_rays(model, rays.to(device))["rgb"] - target) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def test_a_switch_another_module_sets_is_not_read_as_its_module_writes_it(tmp_path):
    """MEM105's test thrown away after a tensor (`... and DEBUG`) needs the switch off: where
    `main.py` sets `nerf.DEBUG = args.debug`, it may be on; where no module sets it, it is
    off; linted alone, `nerf.py` cannot tell, and does not report."""
    nerf, = tree(tmp_path / "a", {"nerf.py": _NERF})
    tree(tmp_path / "a", {"main.py": "import nerf\n\nnerf.train(model, optimizer, loader)\n"})
    assert lint(tmp_path / "a", select=("MEM105",)) == [("nerf.py", 12, "MEM105")]
    assert lint(tmp_path / "a", nerf, select=("MEM105",)) == []  # alone
    tree(tmp_path / "a", {"main.py": "import nerf\n\nnerf.DEBUG = args.debug\nnerf.train(model, optimizer, loader)\n"})
    assert lint(tmp_path / "a", select=("MEM105",)) == []


@pytest.mark.parametrize("setter", [
    "import argparse\nimport nerf\n\nargs = argparse.ArgumentParser().parse_args()\nnerf.DEBUG = args.debug\n",  # no rule's word
    "import nerf\n\nfor key, value in vars(args).items():\n    setattr(nerf, key, value)\n",
    "import nerf\n\nnerf.__dict__.update(vars(args))\n",
    "import nerf\n\nnerf.DEBUG, nerf.STEPS = args.debug, 10\n",
])
def test_a_switch_set_by_another_module_in_other_ways(tmp_path, setter):
    tree(tmp_path / "a", {"nerf.py": _NERF, "main.py": setter + "nerf.train(model, optimizer, loader)\n"})
    assert lint(tmp_path / "a", select=("MEM105",)) == []


def test_a_module_that_reaches_itself_may_set_its_own_switch(tmp_path):
    own = textwrap.dedent(_NERF).replace("DEBUG = False", "DEBUG = False\nthis = sys.modules[__name__]\n\n\n"
                                         "def debug(flag):\n    this.DEBUG = flag")
    tree(tmp_path / "a", {"nerf.py": "import sys\n" + own, "main.py": "import nerf\n\nnerf.train(m, o, d)\n"})
    assert lint(tmp_path / "a", select=("MEM105",)) == []


def test_code_under_a_switch_another_module_sets_is_read_as_its_module_writes_it(tmp_path):
    """Rules that leave out code under a switch that is off read it as its module writes it,
    in the project as alone: the same findings both ways (MEM207 where `torch.compile` is off)."""
    trainer, = tree(tmp_path / "a", {"trainer.py": """
        import torch

        USE_COMPILE = False


        def fit(model, loader, optimizer, steps):
            if USE_COMPILE:
                model = torch.compile(model)
            for step in range(steps):
                x, y = loader.next_batch()
                logits, loss = model(x, y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
    """})
    tree(tmp_path / "a", {"main.py": "import trainer\n\ntrainer.USE_COMPILE = args.compile\ntrainer.fit(m, l, o, 1000)\n"})
    whole = lint(tmp_path / "a", select=("MEM207",))
    assert whole == [("trainer.py", 12, "MEM207")] == lint(tmp_path / "a", trainer, select=("MEM207",))


def test_a_model_built_by_a_language_models_module_is_a_language_model(tmp_path):
    """MEM207: `outputs = model(...); loss = outputs.loss` holds vocabulary-sized logits when the
    model is what a function of a language model's module returns (CodeT5's
    `build_or_load_gen_model`, its module naming `T5ForConditionalGeneration`), also wrapped in
    DataParallel under the same name; a classifier's builder says nothing, and alone the
    training script knows nothing of either."""
    builder = """
        import torch
        from transformers import {classes}
        MODEL_CLASSES = {{"t5": (T5Config, {model}), "roberta": (RobertaConfig, RobertaModel)}}


        def build_model(args):
            config_class, model_class = MODEL_CLASSES[args.model_type]
            model = model_class.from_pretrained(args.model_name)
            return config_class, model
    """
    train = """
        import torch
        from models import build_model


        def main(args, loader, optimizer):
            config, model = build_model(args)
            model.to(args.device)
            if args.n_gpu > 1:
                model = torch.nn.DataParallel(model)
            while True:
                batch = next(loader)
                outputs = model(input_ids=batch[0], labels=batch[1])
                loss = outputs.loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if args.do_eval:
                    with torch.no_grad():
                        outputs = model(input_ids=batch[0], labels=batch[1])
                        print(outputs.loss.item())
    """
    lm = "T5Config, T5ForConditionalGeneration, RobertaConfig, RobertaModel"
    script, _ = tree(tmp_path / "lm", {"train.py": train, "models.py": builder.format(
        classes=lm, model="T5ForConditionalGeneration")})
    assert lint(tmp_path / "lm", select=("MEM207",)) == [("train.py", 13, "MEM207")]
    assert lint(tmp_path / "lm", script, select=("MEM207",)) == []
    classifier = "T5Config, T5ForSequenceClassification, RobertaConfig, RobertaModel"
    tree(tmp_path / "cls", {"train.py": train, "models.py": builder.format(
        classes=classifier, model="T5ForSequenceClassification")})
    assert lint(tmp_path / "cls", select=("MEM207",)) == []
    # a language model's class beside a classifier of the module's own, and a text classifier
    # whose embedding a vocabulary sizes: neither says what the builder returns is a language model
    tree(tmp_path / "mixed", {"train.py": train, "models.py": textwrap.dedent(builder.format(
        classes=lm, model="T5ForConditionalGeneration"))
                              + "\n\nclass Classifier(torch.nn.Module):\n    def __init__(self, num_labels):\n"
                              "        super().__init__()\n"})
    assert lint(tmp_path / "mixed", select=("MEM207",)) == []
    tree(tmp_path / "text", {"train.py": train, "models.py": """
        import torch


        class SentimentNet(torch.nn.Module):
            def __init__(self, cfg):
                super().__init__()
                self.emb = torch.nn.Embedding(cfg.vocab_size, 128)
                self.out = torch.nn.Linear(128, 3)


        def build_model(cfg):
            return None, SentimentNet(cfg)
    """})
    assert lint(tmp_path / "text", select=("MEM207",)) == []


_PET_HELPERS = """
    import torch


    class TaskHelper:
        def __init__(self, wrapper):
            self.wrapper = wrapper

        def eval_step(self, batch):
            outputs = []
            for choice in batch["choices"]:
                outputs.append(self.wrapper.model(choice.cuda())[0])
            return torch.stack(outputs)
"""
_PET_WRAPPER = """
    import torch
    from helpers import TaskHelper


    class Wrapper:
        def __init__(self, model):
            self.model = model
            self.task_helper = {{"copa": TaskHelper}}["copa"](self)

        def eval(self, loader):
            self.model.eval()
            preds = []
            for batch in loader:
                {call}
                preds.append(logits.cpu())
            return preds
"""


@pytest.mark.parametrize("call, reported", [
    ("with torch.no_grad():\n                    logits = self.task_helper.eval_step(batch)", False),
    ("logits = self.task_helper.eval_step(batch)", True),
])
def test_an_evaluation_method_every_other_module_calls_without_grad_records_no_graph(tmp_path, call, reported):
    """PET's task helpers' `eval_step`, called nowhere in its module and, through a registry of
    helpers whose class the caller cannot tell, only inside `with torch.no_grad():`: no graph
    is recorded. Where a call records one, the loop in the helper is reported; linted alone,
    the helper's callers are unknown, and it is not."""
    paths = tree(tmp_path, {"helpers.py": _PET_HELPERS, "wrapper.py": _PET_WRAPPER.format(call=call)})
    found = {(name, code) for name, _, code in lint(tmp_path, *paths)}
    assert (("helpers.py", "MEM203") in found) is reported
    assert ("helpers.py", "MEM203") not in {(name, code) for name, _, code in lint(tmp_path, paths[0])}


def test_a_module_s_eval_mode_is_no_call_of_an_evaluation_method(tmp_path):
    """`model.eval()` under no_grad elsewhere switches a mode: it is no quiet call of the
    helper's evaluation method `eval(batch)`."""
    helpers = _PET_HELPERS.replace("def eval_step(self, batch):", "def eval(self, batch):")
    caller = ("import torch\nfrom helpers import TaskHelper\n\n\ndef run(model):\n"
              "    with torch.no_grad():\n        model.eval()\n")
    paths = tree(tmp_path, {"helpers.py": helpers, "runner.py": caller})
    assert ("helpers.py", "MEM203") in {(name, code) for name, _, code in lint(tmp_path, *paths)}


ALIASED_BASE = {
    "pkg/__init__.py": "",
    "pkg/layers.py": """\
        import torch


        class Mixer(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = torch.nn.Linear(4, 4)

            def forward(self, x):
                return self.proj(x)


        OldMixer = Mixer  # the name earlier releases exported
        """,
    "pkg/net.py": """\
        import torch
        from pkg.layers import OldMixer


        class Tagger(OldMixer):
            def forward(self, x):
                scale = torch.arange(4, device="cuda").float()
                return self.proj(x) * scale
        """,
}


def test_a_class_deriving_from_a_module_level_alias_of_a_model_is_a_model(tmp_path):
    """`OldMixer = Mixer` is followed as an import is (detectron2's `ResNetBlockBase =
    CNNBlockBase`): `Tagger`, which derives from the alias and whose name says nothing, is a
    model, so its `forward` runs every step and the table it rebuilds there is found. Not
    followed, the alias's name was all the project had, and it says no model."""
    paths = tree(tmp_path, ALIASED_BASE)
    assert facts_in_project(paths, paths[2]).project.is_module("pkg.layers.OldMixer")
    assert ("net.py", 7, "MEM102") in lint(tmp_path)
    # the summary of `layers.py` kept in the cache holds the alias too
    cache = tmp_path.parent / f"{tmp_path.name}-cache"
    assert ("net.py", 7, "MEM102") in lint(tmp_path, cache=cache)
    paths[2].write_text(paths[2].read_text() + "# edited\n")
    assert ("net.py", 7, "MEM102") in lint(tmp_path, cache=cache)


def test_an_alias_in_a_module_without_torch_is_followed_too(tmp_path):
    """A module no rule reads (it never names torch) is summarised by Python's own parser: its
    aliases are followed alike (a compatibility module re-exporting old names)."""
    files = dict(ALIASED_BASE)
    files["pkg/compat.py"] = "from pkg.layers import Mixer\n\nOldMixer = Mixer\n"
    files["pkg/net.py"] = files["pkg/net.py"].replace("from pkg.layers import OldMixer", "from pkg.compat import OldMixer")
    tree(tmp_path, files)
    assert ("net.py", 7, "MEM102") in lint(tmp_path)


def test_an_alias_the_module_binds_again_is_not_followed(tmp_path):
    """Imported again after it (`from pkg.legacy import OldMixer`), the alias names the other
    class when the code runs: not followed, `Tagger` is not taken for a model."""
    files = dict(ALIASED_BASE)
    files["pkg/legacy.py"] = "class OldMixer:\n    pass\n"
    files["pkg/layers.py"] = textwrap.dedent(files["pkg/layers.py"]) + "\nfrom pkg.legacy import OldMixer  # noqa: F811\n"
    tree(tmp_path, files)
    assert ("net.py", 7, "MEM102") not in lint(tmp_path)


_BOUND_AGAIN = "from pkg.layers import Mixer\nfrom pkg.legacy import Legacy\nOld = Mixer\n"


@pytest.mark.parametrize("text, followed", [
    ("from pkg.layers import Mixer\nOld = Mixer\n", {"Old": "pkg.layers.Mixer"}),
    ("from .layers import Mixer\nOld = Mixer\n", {"Old": "pkg.layers.Mixer"}),
    ("import pkg.layers as layers\nOld = layers.Mixer\n", {"Old": "pkg.layers.Mixer"}),
    ("import pkg.layers\nOld = pkg.layers.Mixer\n", {"Old": "pkg.layers.Mixer"}),
    ("class Mixer:\n    pass\n\n\nOld = Mixer\n", {"Old": "pkg.compat.Mixer"}),
    ("class Mixer:\n    def forward(self, x):\n        return x\n\n\nold_forward = Mixer.forward\n",
     {"old_forward": "pkg.compat.Mixer.forward"}),
    ("def mix(x):\n    return x\n\n\nold_mix = mix\n", {"old_mix": "pkg.compat.mix"}),
    # the alias bound again, anywhere: which binding holds when the code runs is not sure
    (_BOUND_AGAIN + "if FLAG:\n    Old = Legacy\n", {}),
    (_BOUND_AGAIN + "for Old in ():\n    pass\n", {}),
    (_BOUND_AGAIN + "from pkg.legacy import Old\n", {}),
    (_BOUND_AGAIN + "def use_legacy():\n    global Old\n    Old = Legacy\n", {}),
    (_BOUND_AGAIN + "_ = [Old := m for m in (Legacy,)]\n", {}),
    (_BOUND_AGAIN + "try:\n    pass\nexcept ImportError as Old:\n    pass\n", {}),
    (_BOUND_AGAIN + "del Old\n", {}),
    (_BOUND_AGAIN + "class Holder:\n    Old = Legacy\n", {}),
    (_BOUND_AGAIN + "from pkg.legacy import *\n", {}),
    # what it names bound again, or bound only in a block or a function, or after it
    ("from pkg.layers import Mixer\nMixer = wrap(Mixer)\nOld = Mixer\n", {}),
    ("from pkg.legacy import Mixer\nOld = Mixer\nfrom pkg.layers import Mixer\n", {}),
    ("import os\nfrom pkg.layers import Mixer\nif os.environ.get('LEGACY'):\n    from pkg.legacy import Mixer\n"
     "Old = Mixer\n", {}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.layers import Mixer\nOld = Mixer\n", {}),
    ("from pkg.legacy import *\ndef upgrade():\n    from pkg.layers import Mixer\n    return Mixer\nOld = Mixer\n", {}),
    ("class Mixer:\n    pass\n\n\nclass Mixer:\n    pass\n\n\nOld = Mixer\n", {}),
    ("Old = Mixer\n\n\nclass Mixer:\n    pass\n", {}),
    ("SIZE = 4\nOld = SIZE\n", {}),
    ("def build():\n    return Mixer\n\n\nOld = build()\n", {}),
    ("try:\n    from pkg.layers import Mixer\n    Old = Mixer\nexcept ImportError:\n    pass\n", {}),
    ("@register\nclass Mixer:\n    pass\n\n\nOld = Mixer\n", {}),  # a decorator may hand back anything
    # what binds names out of sight
    (_BOUND_AGAIN + "globals()['Old'] = Legacy\n", {}),
    (_BOUND_AGAIN + "exec('Old = Legacy')\n", {}),
    (_BOUND_AGAIN + "import sys\nsetattr(sys.modules[__name__], 'Old', Legacy)\n", {}),
    (_BOUND_AGAIN + "import sys\nsys.modules[__name__].Old = Legacy\n", {}),
    ("flag = True\nOld = flag\n", {}),
])
def test_an_alias_is_followed_only_where_nothing_else_binds_it_or_what_it_names(tmp_path, text, followed):
    """A module-level alias is followed only where what it names when the code runs is sure:
    a top-level `alias = name` after the top-level import or definition of `name`, and nothing
    else in the module, in any scope, binding either name (nor a star import). Both summaries
    (LibCST's tree, for a module a rule reads; Python's own, for one no rule reads) carry the
    same aliases."""
    from memlint.analysis.summary import module_aliases, summarize, summarize_plain

    assert module_aliases(ast.parse(text), "pkg.compat", "pkg") == followed
    path = tree(tmp_path, {"pkg/__init__.py": "", "pkg/compat.py": text})[1]
    facts = Facts(cst.parse_module(text), project=ProjectView(None, frozenset({"pkg.compat", "pkg.layers"}),
                                                                str(path), frozenset({"pkg.compat"})))
    assert facts.project.name == "pkg.compat"
    for summary in (summarize(facts, source=text), summarize(facts), summarize_plain(text, "pkg.compat", "pkg")):
        assert summary.aliases == followed


def test_an_alias_of_a_definition_says_nothing_of_what_the_module_imports(tmp_path):
    """An alias of the module's own function is kept apart from its imports: a module that
    imports nothing of torch stays one that does not, whatever name its importers reach it by
    (`src.timm.helpers`), so a loop of another library's autograd there is not PyTorch's."""
    tree(tmp_path, {"src/timm/__init__.py": "", "src/timm/helpers.py": """\
        def _ntuple(n):
            return n


        to_ntuple = _ntuple
        """, "train.py": """\
        from src.timm.helpers import to_ntuple


        def train(model, loader, opt):  # another library's autograd, no torch here
            total = 0
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                opt.step()
                total += loss
            return total
        """})
    assert lint(tmp_path) == []


def test_an_attribute_chain_longer_than_python_recursion_is_no_error(tmp_path):
    """A module no rule reads, with a top-level `x = a.a. ... .a` of 1,200 attributes (CPython
    compiles 2,900), is summarised without an internal error, as is a class deriving from one."""
    chain = "a" + ".a" * 1200
    tree(tmp_path, {"c.py": f"import os\nX = {chain}\n", "d.py": f"import os\n\n\nclass A({chain}):\n    pass\n"})
    assert lint(tmp_path) == []


def test_a_package_whose_star_imports_the_run_lacks_is_resolved_at_once(tmp_path, monkeypatch):
    """Pre-commit lints the files that changed: timm's `models/__init__.py`, which imports
    everything of 91 modules, and one of those modules. A name looked for through a star import
    of a module the run lacks was looked for in the package again, through every star import,
    at each of eight steps: the run grew to 18 GB before it was killed. A star module the run
    holds is still followed."""
    missing = "".join(f"from .part{n} import *\n" for n in range(12))
    paths = tree(tmp_path, {
        "pkg/__init__.py": missing + "from .helpers import *\n",
        "pkg/helpers.py": "import torch\n\n\ndef infer(model, x):\n    return model(x)\n",
        "run_eval.py": """\
            import torch
            from pkg import infer, score


            def evaluate(model, loader):
                model.eval()
                outs, scores = [], []
                for x, y in loader:
                    outs.append(infer(model, x.cuda()))
                    scores.append(score(model, x.cuda()))
                return torch.cat(outs), scores
            """,
    })
    asked = []
    resolve = Project.resolve

    def counted(self, *args, **kwargs):
        asked.append(args)
        if len(asked) > 10_000:
            pytest.fail("the project looks for the same names again and again")
        return resolve(self, *args, **kwargs)

    monkeypatch.setattr(Project, "resolve", counted)
    assert ("run_eval.py", "MEM202") in {(name, code) for name, _, code in lint(tmp_path, *paths)}
