"""MEM201-MEM206 beyond their examples: helper following, context-aware messages, where a
finding points, fixes that must not be offered."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from memlint import lint_source
from memlint.analysis import Facts
from memlint.engine import check, fix
from memlint.rules import registry

RULES = registry()


def findings(source: str, code: str):
    return [f for f in check(textwrap.dedent(source), "t.py", [RULES[code]]).findings if f.code == code]


def fixed(source: str, code: str) -> str:
    return fix(textwrap.dedent(source), "t.py", [RULES[code]], unsafe=True).source


# -- MEM201 -------------------------------------------------------------------------------------
def test_mem201_validation_message_claims_memory_training_message_does_not():
    (validation,) = findings("""
        import torch
        def validate(model, loader):
            model.eval()
            total = 0.0
            for x, y in loader:
                total += criterion(model(x), y)
            return total
    """, "MEM201")
    assert "1 GB higher on an H200" in validation.message
    (training,) = findings("""
        import torch
        total = 0.0
        for x, y in loader:
            loss = criterion(model(x), y)
            total += loss
            loss.backward()
            optimizer.step()
    """, "MEM201")
    assert "only until backward" in training.message and "no measurable" in training.message
    assert "1 GB" not in training.message


def test_mem201_training_through_a_helper_counts_as_training():
    (finding,) = findings("""
        import torch
        def step(loss):
            loss.backward()
            optimizer.step()
        running = 0
        for x, y in loader:
            loss = criterion(model(x), y)
            running += loss
            step(loss)
    """, "MEM201")
    assert "training loop" in finding.message


def test_mem201_points_at_the_accumulating_statement():
    (finding,) = findings("""
        import torch
        total = 0
        for x, y in loader:
            out = model(x)
            total += criterion(out, y)
    """, "MEM201")
    assert finding.line == 6


def test_mem201_sum_backwarded_through_a_helper_is_not_reported():
    assert not findings("""
        import torch
        def update(loss):
            loss.backward()
        for batch in loader:
            loss = 0
            for x, y in batch:
                loss += criterion(model(x), y)
            update(loss)
    """, "MEM201")


def test_mem201_cpu_and_to_keep_the_graph():
    assert findings("""
        import torch
        total = 0
        for x, y in loader:
            total += criterion(model(x), y).cpu()
    """, "MEM201")
    assert findings("""
        import torch
        total = 0
        for x, y in loader:
            loss = criterion(model(x), y)
            total += loss.to("cpu")
    """, "MEM201")


def test_mem201_fix_parenthesizes_an_expression():
    assert "total += (loss * n).detach()" in fixed("""
        import torch
        total = 0
        for x, y in loader:
            loss = criterion(model(x), y)
            total += loss * n
    """, "MEM201")


# -- MEM202 -------------------------------------------------------------------------------------
def test_mem202_cpu_copy_message_and_training_message():
    (cpu,) = findings("""
        import torch
        preds = []
        for x in loader:
            preds.append(model(x).cpu())
    """, "MEM202")
    assert "stay on the GPU" in cpu.message and "do not detach" in cpu.message and "MB" not in cpu.message
    (training,) = findings("""
        import torch
        losses = []
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            losses.append(loss)
    """, "MEM202")
    assert "not GPU memory" in training.message


def test_mem202_points_at_the_append():
    (finding,) = findings("""
        import torch
        preds = []
        for x in loader:
            out = model(x)
            preds.append(out)
    """, "MEM202")
    assert finding.line == 6 and finding.column == 5


def test_mem202_outputs_returned_from_a_forward_helper_are_not_reported():
    assert not findings("""
        import torch
        def run_chunks(model, chunks):
            outs = []
            for c in chunks:
                outs.append(model(c))
            return torch.cat(outs)
    """, "MEM202")


# -- MEM203 -------------------------------------------------------------------------------------
def test_mem203_through_a_helper_points_at_the_call_in_the_loop():
    source = """
        import torch
        def score_batch(model, x):
            return model(x).softmax(-1).max().item()
        def evaluate(model, loader):
            for x in loader:
                print(score_batch(model, x))
    """
    (finding,) = findings(source, "MEM203")
    assert finding.line == 7 and "through `score_batch`" in finding.message
    assert "1792 MB" in finding.message and "537 MB" in finding.message
    assert "    with torch.no_grad():\n        for x in loader:\n            print(" in fixed(source, "MEM203")


def test_mem203_helper_decorated_no_grad_is_not_reported():
    assert not findings("""
        import torch
        @torch.no_grad()
        def score_batch(model, x):
            return model(x).max().item()
        def evaluate(model, loader):
            for x in loader:
                print(score_batch(model, x))
    """, "MEM203")


def test_mem203_generator_gets_no_with_fix():
    source = """
        import torch
        def predict(model, loader):
            model.eval()
            for x in loader:
                yield model(x)
    """
    (finding,) = findings(source, "MEM203")
    assert finding.fix is None and "@torch.no_grad()" in finding.message
    assert fixed(source, "MEM203") == textwrap.dedent(source)


def test_mem203_wraps_the_outermost_loop_that_does_not_train():
    source = """
        import torch
        def evaluate(model, loaders):
            for loader in loaders:
                for x in loader:
                    print(model(x).sum().item())
    """
    assert "    with torch.no_grad():\n        for loader in loaders:\n" in fixed(source, "MEM203")
    assert len(findings(source, "MEM203")) == 1


def test_mem203_train_mode_loop_after_eval_is_not_eval():
    assert not findings("""
        import torch
        model.eval()
        model.train()
        for x in loader:
            out = model(x)
    """, "MEM203")


def test_mem203_no_fix_without_a_torch_import_spelling():
    (finding,) = findings("""
        from torch.nn import Linear
        net = Linear(4, 2)
        net.eval()
        for x in batches:
            print(net(x))
    """, "MEM203")
    assert finding.fix is None


# -- MEM204 -------------------------------------------------------------------------------------
def test_mem204_is_opt_in():
    source = "import torch\nfor x in loader:\n    out = model(x)\n    print(out.sum())\n"
    assert "MEM204" not in [f.code for f in lint_source(source)]
    assert "MEM204" in [f.code for f in lint_source(source, select=["MEM204"])]


# -- MEM205 -------------------------------------------------------------------------------------
def test_mem205_has_no_fix_and_points_at_backward():
    (finding,) = findings("""
        import torch
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward(retain_graph=True)
    """, "MEM205")
    assert finding.fix is None and finding.line == 5


def test_mem205_in_a_helper_called_from_a_loop():
    (finding,) = findings("""
        import torch
        class Trainer:
            def step(self, x, y):
                loss = criterion(self.model(x), y)
                loss.backward(retain_graph=True)
            def fit(self, loader):
                for x, y in loader:
                    self.step(x, y)
    """, "MEM205")
    assert finding.line == 6


# -- MEM206 -------------------------------------------------------------------------------------
def test_mem206_fix_is_unsafe_and_not_applied_by_default():
    source = textwrap.dedent("""
        import torch
        rnn = torch.nn.GRU(4, 8)
        h = None
        for x, y in loader:
            out, h = rnn(x, h)
            criterion(out, y).backward(retain_graph=True)
    """)
    assert fix(source, "t.py", [RULES["MEM206"]], unsafe=False).source == source
    assert "    h = h.detach()\n" in fix(source, "t.py", [RULES["MEM206"]], unsafe=True).source


def test_mem206_no_fix_when_the_state_is_read_after_the_call():
    (finding,) = findings("""
        import torch
        rnn = torch.nn.GRU(4, 8)
        h = None
        for x, y in loader:
            out, h = rnn(x, h)
            loss = criterion(out, y) + h.pow(2).mean()
            loss.backward(retain_graph=True)
    """, "MEM206")
    assert finding.fix is None


def test_mem206_points_at_the_recurrent_call():
    (finding,) = findings("""
        import torch
        for x, y in loader:
            out, hidden = model(x, hidden)
            criterion(out, y).backward()
    """, "MEM206")
    assert (finding.line, finding.column) == (4, 19)


def test_mem202_losses_returned_after_their_own_backward_are_reported():
    (finding,) = findings("""
        import torch
        def train(model, loader):
            losses = []
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                losses.append(loss)
            return losses
    """, "MEM202")
    assert "training loop" in finding.message


def test_mem203_fix_keeps_comments_and_else():
    source = """
        import torch

        def evaluate(model, loader):
            model.eval()

            # score every batch
            for x in loader:  # trailing
                print(model(x).sum().item())
            else:
                print('done')
    """
    assert fixed(source, "MEM203") == textwrap.dedent("""
        import torch

        def evaluate(model, loader):
            model.eval()

            # score every batch
            with torch.no_grad():
                for x in loader:  # trailing
                    print(model(x).sum().item())
                else:
                    print('done')
    """)


def test_unknown_decorators_leave_grad_mode_unknown():
    source = """
        import torch
        @smart_inference_mode()
        def run(model, loader):
            model.eval()
            total = 0
            for x, y in loader:
                total += criterion(model(x), y)
            return total
        @some_framework.hook
        def other(model, loader):
            model.eval()
            for x in loader:
                print(model(x).sum().item())
    """
    assert not findings(source, "MEM201") and not findings(source, "MEM203")


def test_attributes_backwarded_by_another_method_are_not_reported():
    source = """
        import torch
        class Trainer:
            def collect(self, loader):
                for x, y in loader:
                    self.total += criterion(self.model(x), y)
                    self.parts.append(criterion(self.model(x), y))
            def update(self):
                loss = self.total / 4 + torch.stack(self.parts).sum()
                loss.backward()
    """
    assert not findings(source, "MEM201") and not findings(source, "MEM202")


def test_mem203_eval_inside_an_epoch_loop_without_training():
    source = """
        import torch
        def train_one(x):
            model(x).sum().backward()
        for epoch in range(3):
            model.eval()
            for x in val_loader:
                print(model(x).sum().item())
    """
    (finding,) = findings(source, "MEM203")
    assert finding.line == 8
    assert "    with torch.no_grad():\n        for x in val_loader:\n" in fixed(source, "MEM203")


def test_mem203_sampling_that_returns_its_graph_is_not_reported():
    source = """
        import torch
        def sample(model, z, steps):
            for _ in range(steps):
                z = model(z)
            return z
        def generate(model, ids, n):
            out = []
            for _ in range(n):
                ids = model(ids).argmax(-1)
                out.append(ids)
            return torch.stack(out)
    """
    (finding,) = findings(source, "MEM203")
    assert finding.line == 10  # generate() hands back token ids, no graph


def test_a_namedtuple_holds_the_outputs_it_is_made_of():
    source = textwrap.dedent("""
        import torch
        from collections import namedtuple
        Prediction = namedtuple("Prediction", ["noise", "start"])

        class Sampler:
            def predict(self, x):
                noise = self.model(x)
                return Prediction(noise, x - noise)

            def plain(self, x):
                return Prediction(1, 2)
    """)
    facts = Facts(cst.parse_module(source))
    methods = {n.name.value: n for n in facts.tree.nodes if isinstance(n, cst.FunctionDef)}
    assert facts.values.returns_output(methods["predict"])
    assert not facts.values.returns_output(methods["plain"])


def test_mem203_offers_no_fix_for_a_generator_whose_caller_may_backward_what_it_yields():
    """Wrapping a generator's inner loop in no_grad is safe only in a script that never
    backwards: here `finetune` backwards the features `features` yields, so the finding comes
    without a fix (the advice is a decorator, which the author must weigh)."""
    source = """\
        import torch

        def features(model, clips):
            model.eval()
            for clip in clips:
                parts = []
                for piece in clip.split(4):
                    parts.append(model(piece))
                yield torch.cat(parts)

        def finetune(model, clips, opt):
            for feats in features(model, clips):
                feats.pow(2).mean().backward()
                opt.step()
        """
    (finding,) = findings(source, "MEM203")
    assert finding.fix is None and "decorate the function" in finding.message
    assert fixed(source, "MEM203") == textwrap.dedent(source)


# -- grad modes, running statistics and accumulators: what a review of them broke ---------------
def test_a_grad_mode_entered_by_hand_leaves_the_code_before_it_as_it_was():
    """`torch.no_grad().__enter__()` at the end of a script: the training and validation it
    called before still run with grad on; what runs after it, or in a loop around it, may not."""
    source = """
        import torch
        import torch.nn.functional as F

        def validate(model, loader):
            model.eval()
            outs = []
            for x, y in loader:
                outs.append(model(x.cuda()))
            return torch.cat(outs)

        if __name__ == "__main__":
            model = build().cuda()
            for epoch in range(10):
                validate(model, val_loader)
            torch.no_grad().__enter__()
            outs = []
            for x in test_loader:
                outs.append(model(x.cuda()))
        """
    assert [f.line for f in findings(source, "MEM203")] == [9]
    looped = source.replace("                validate(model, val_loader)\n",
                            "                validate(model, val_loader)\n                torch.no_grad().__enter__()\n")
    assert findings(looped, "MEM203") == []


def test_a_running_statistic_cut_from_its_graph_every_step_is_not_reported():
    source = """
        import torch

        class RunningLoss(torch.nn.Module):
            def forward(self, pred, target):
                loss = ((pred - target) ** 2).mean()
                self.avg = 0.9 * self.avg{} + 0.1 * loss
                return loss / self.avg
        """
    assert len(findings(source.format(""), "MEM201")) == 1
    assert findings(source.format(".detach()"), "MEM201") == []


def test_a_helper_decorated_no_grad_hands_back_no_graph_to_a_loss_module():
    source = """
        import torch

        class CenterLoss(torch.nn.Module):
            def forward(self, feats, labels):
                self.centers = self.updated(self.centers, feats)
                return ((feats - self.centers[labels]) ** 2).mean()

            {}def updated(self, centers, feats):
                return 0.9 * centers + 0.1 * feats.mean(0)
        """
    assert len(findings(source.format(""), "MEM201")) == 1
    assert findings(source.format("@torch.no_grad()\n            "), "MEM201") == []


def test_an_accumulator_is_left_alone_only_for_what_its_class_backwards():
    """What `update` keeps, for the class's own backward, is no leak; kept while the class
    backwards only a detached copy of it (a temperature-scaling calibration), it is."""
    accumulator = """
        import torch
        import torch.nn.functional as F

        class Keeper:
            def __init__(self):
                self.values, self.labels = [], []

            def update(self, value, label):
                self.values.append(value)
                self.labels.append(label)

            def step(self, optimizer, temperature):
                loss = F.cross_entropy(torch.cat(self.values){} / temperature, torch.cat(self.labels))
                loss.backward()
                optimizer.step()

        def run(model, loader, optimizer):
            model.eval()
            keeper = Keeper()
            for x, y in loader:
                keeper.update(model(x.cuda()), y)
            return keeper
        """
    assert findings(accumulator.format(""), "MEM202") == []
    assert len(findings(accumulator.format(".detach()"), "MEM202")) == 1


def test_look_alikes_of_the_review_keep_their_findings():
    """A step's own path under `if not oom:`, a ViT's feature tokens kept on the GPU, a target
    encoder (BYOL, I-JEPA) that is a network, and an evaluation after a teacher made and put in
    eval mode in one statement, where the loop trains the student."""
    step_path = """
        import torch
        import torch.nn.functional as F


        def train(model, loader, optimizer, device):
            for x, y in loader:
                oom = train_step(model, x, y, optimizer, device)
                if not oom:
                    mask = torch.tensor([1.0, 0.5, 0.25]).to(device)
                    print(f"step done", mask)


        def train_step(model, x, y, optimizer, device):
            try:
                logits = model(x.to(device))
                loss = F.cross_entropy(logits, y.to(device))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                return False
            except torch.cuda.OutOfMemoryError:
                return True
        """
    assert len(findings(step_path, "MEM103")) == 1
    vit = """
        import torch

        @torch.no_grad()
        def extract_features(vit, loader):
            all_feats = []
            for images, _ in loader:
                {} = vit(images.cuda())
                all_feats.append({})
            return torch.cat(all_feats).cpu().numpy()
        """
    assert len(findings(vit.format("patch_tokens", "patch_tokens"), "MEM202")) == 1
    assert findings(vit.format("predicted_tokens", "predicted_tokens"), "MEM202") == []
    target = """
        import torch

        def evaluate(target_encoder, loader):
            target_encoder.eval()
            feats = []
            for x, _ in loader:
                feats.append(target_encoder(x.cuda()))
            return torch.cat(feats)
        """
    assert len(findings(target, "MEM203")) == 1
    distillation = """
        import torch
        import torch.nn.functional as F
        import torchvision

        def distillation_loss(student, images, device):
            teacher = torchvision.models.resnet50(weights="DEFAULT").to(device).eval()
            losses = []
            for chunk in images.split(32):
                with torch.no_grad():
                    target = teacher(chunk).softmax(-1)
                losses.append(F.kl_div(student(chunk).log_softmax(-1), target, reduction="batchmean"))
            return torch.stack(losses).mean()
        """
    assert findings(distillation, "MEM203") == []


def test_a_method_that_trains_once_per_call_is_a_step_where_its_name_says_so():
    """DomainBed's `update`, BasicSR's `optimize_parameters`, pytorch_GAN_zoo's
    `optimizeParameters`: one step each call, whatever calls them. A probe of the batch size
    (`try_batch`) trains once too, and is no step."""
    from memlint.rules.eval_without_no_grad import _ERM

    step = _ERM.replace("PASS", "self.network_sma(x)").replace("HOOK", "")
    for name in ("update", "optimize_parameters", "optimizeParameters", "train_one_batch", "_train_step"):
        assert len(findings(step.replace("def update(", f"def {name}("), "MEM203")) == 1, name
    assert findings(step.replace("def update(", "def try_batch("), "MEM203") == []


# -- MEM204: the views and copies of the output ---------------------------------------------------
def test_mem204_reports_a_copy_only_where_one_is_surely_made():
    found = findings("""
        import torch
        with torch.no_grad():
            for batch in loader:
                outputs = model(**batch)
                logits = outputs.logits.contiguous()
                probs = logits.float()
                shifted = probs[..., :-1, :].contiguous()
                kept = shifted.clone()
                last = outputs.logits[:, -1:, :].clone()
                labels = batch[b"labels"]
                print(kept.logsumexp(-1).mean(), last.sum(), labels)
    """, "MEM204")
    # the output, then `shifted` (`contiguous()` of a strided view) and `kept` (`clone()`);
    # `contiguous()` of the whole output and `.float()` may return the output itself; a copy of
    # its last position is small; a bytes key reads no part of it
    assert [f.line for f in found] == [5, 8, 9]
    assert "`del outputs, logits, probs, shifted, kept`" in found[0].message


# -- MEM202: a slice of each iteration's output ----------------------------------------------------
def test_mem202_cloned_slices_are_the_slices_kept():
    import torch

    source = """
        import torch
        device = torch.device("cpu")  # (a GPU where it matters)
        model = torch.nn.Linear(4, 3).to(device)
        tokens = torch.ones(2, 5, 4, device=device)
        kept = []
        for i in range(tokens.size(1)):  # one position per iteration, of a length known at run time
            with torch.no_grad():
                probs = torch.log_softmax(model(tokens * i), dim=-1)
            kept.append(probs[:, i])
        result = torch.cat(kept)
    """
    (finding,) = findings(source, "MEM202")
    assert "a view of `probs`" in finding.message
    after = fixed(source, "MEM202")
    assert "kept.append(probs[:, i].clone())" in after
    before_run, after_run = {}, {}
    torch.manual_seed(0)
    exec(textwrap.dedent(source), before_run)
    torch.manual_seed(0)
    exec(after, after_run)
    assert torch.equal(before_run["result"], after_run["result"])
    assert before_run["kept"][0]._base is not None and after_run["kept"][0]._base is None  # a view, then a copy


@pytest.mark.parametrize("where, off", [
    ("def f(model, x):\n    return model(x)\n", False),
    ("def f(model, x):\n    with torch.no_grad():\n        return model(x)\n", True),
    ("@torch.inference_mode()\ndef f(model, x):\n    return model(x)\n", True),
    ("@smart_inference_mode()\ndef f(model, x):\n    return model(x)\n", True),
    ("torch.set_grad_enabled(False)\ndef f(model, x):\n    return model(x)\n", True),
    ("class M(pl.LightningModule):\n    def validation_step(self, batch, i):\n        return self(batch)\n", True),
    ("def f(model, x):\n    with torch.enable_grad():\n        return model(x)\n", False),
    ("def f(model, x, on):\n    with torch.set_grad_enabled(on):\n        return model(x)\n", False),
])
def test_a_module_turns_grad_off_where_some_call_may_run_without_it(where, off):
    """`Regions.turns_grad_off`, the shortcut of the questions about calls made without grad:
    a block, a statement, a decorator (a home-made one too) or a hook Lightning runs without
    grad; where none is, no call of the module runs without grad."""
    facts = Facts(cst.parse_module("import torch\nimport pytorch_lightning as pl\n" + where))
    assert facts.regions.turns_grad_off is off
    assert off or all(facts.regions.grad_enabled(call) is not False for call in facts.scopes.calls)
