"""The shape of a training step: the facts of memlint.analysis (scopes, regions, calls, receivers,
roles, values, phase)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from memlint.analysis import Facts
from memlint.analysis.guards import a_setting
from memlint.analysis.tree import walk


def facts(source: str):
    return Facts(cst.parse_module(textwrap.dedent(source)))


def code(node) -> str:
    return cst.Module([]).code_for_node(node)


def first(f, node_type, predicate=lambda n: True):
    return next(n for n in walk(f.module) if isinstance(n, node_type) and predicate(n))


def call_named(f, text: str) -> cst.Call:
    return first(f, cst.Call, lambda c: code(c) == text)


def name_at(f, name: str, line_text: str):
    """The Name `name` inside the statement whose code is `line_text`."""
    stmt = first(f, cst.SimpleStatementLine, lambda s: code(s).strip() == line_text)
    return next(n for n in walk(stmt) if isinstance(n, cst.Name) and n.value == name)


def test_backward_forms():
    f = facts("""
        import torch
        loss.backward()
        scaler.scale(loss2).backward()
        accelerator.backward(loss3)
        torch.autograd.backward(loss4)
        y.backward(retain_graph=True)
        g = torch.autograd.grad(out, x)
        self.manual_backward(loss5)
    """)
    got = [(b.kind, code(b.loss)) for b in f.roles.backwards]
    assert got == [("method", "loss"), ("scaled", "loss2"), ("owner", "loss3"), ("autograd", "loss4"),
                   ("method", "y"), ("grad", "out"), ("owner", "loss5")]
    assert code(f.roles.backwards[1].scaler) == "scaler"
    assert code(f.roles.backwards[4].retain_graph) == "True"
    assert f.roles.backwards[1].names == {"loss2", "scaler"} or "loss2" in f.roles.backwards[1].names


def test_optimizer_receivers():
    f = facts("""
        import torch
        from torch import optim
        class T:
            def __init__(self, model):
                self.opt = optim.AdamW(model.parameters())
                self.sched = torch.optim.lr_scheduler.StepLR(self.opt, 1)
        o = torch.optim.SGD(params, lr=0.1)
        thing.zero_grad()
        lr = other.param_groups[0]["lr"]
        o.step(); self.opt.step(); self.sched.step(); thing.step(); other.step()
        optimizer.step(); scaler.step(optimizer); env.step(action); model.zero_grad()
    """)
    assert {"self.opt", "o", "thing", "other"} <= f.receivers.optimizers
    assert "self.sched" not in f.receivers.optimizers and "model" not in f.receivers.optimizers
    steps = [(s.optimizer, s.scaler) for s in f.roles.optimizer_steps]
    assert steps == [("o", None), ("self.opt", None), ("thing", None), ("other", None),
                     ("optimizer", None), ("optimizer", "scaler")]
    assert [(z.target, z.is_optimizer) for z in f.roles.zero_grads] == [("thing", True), ("model", False)]


def test_zero_grad_by_assignment_and_set_to_none():
    f = facts("""
        import torch
        opt.zero_grad(set_to_none=False)
        for p in model.parameters():
            p.grad = None
    """)
    assert code(f.roles.zero_grads[0].set_to_none) == "False"
    assert f.roles.zero_grads[1].target == "p.grad"


def test_models_and_forwards():
    f = facts("""
        import torch
        import torch.nn as nn
        from transformers import AutoModelForCausalLM
        class Net(nn.Module):
            def forward(self, x):
                return self.fc(x)
        lm = AutoModelForCausalLM.from_pretrained("gpt2")
        m = Net().to("cuda")
        wrapped = torch.compile(m)
        f1 = m(x); f2 = wrapped(x); f3 = model(**batch); f4 = self.net(x); f5 = model.forward(x)
        n1 = torch.relu(x); n2 = helper(x); n3 = model.generate(x); n4 = lm.generate(ids)
    """)
    assert {"lm", "m", "wrapped"} <= f.receivers.models
    calls = {code(c.func): c for c in f.scopes.calls}
    for name in ("m", "wrapped", "model", "self.net", "model.forward"):
        assert f.roles.is_forward(calls[name]), name
    for name in ("torch.relu", "helper", "model.generate", "lm.generate"):
        assert not f.roles.is_forward(calls[name]), name
    assert f.roles.is_generate(calls["model.generate"])


def test_pipelines_and_hub_code_record_no_graph_where_it_can_be_told():
    """spaCy's pipeline is no torch model; a sentence-transformers model's `encode` runs under
    no_grad; an embedder loaded with `trust_remote_code=True` has an `encode` from the hub,
    whose grad mode is out of sight. Their calls are no forwards; an encoder's `encode` is."""
    f = facts("""
        import spacy
        from sentence_transformers import SentenceTransformer
        from transformers import AutoModel
        SPACY_MODEL = spacy.load("en_core_web_lg")
        sim_model = SentenceTransformer("all-MiniLM-L6-v2")
        a = SPACY_MODEL(text); b = sim_model.encode(texts)
    """)
    calls = {code(c.func): c for c in f.scopes.calls}
    for name in ("SPACY_MODEL", "sim_model.encode"):
        assert not f.roles.is_forward(calls[name]), name
    local = "import torch\nmodel = AutoModel.from_pretrained(name{})\nout = model.encode(batch)\n"
    for trust, forward in (("", True), (", trust_remote_code=True", False), (", trust_remote_code=args.remote", True)):
        g = facts(local.format(trust))
        assert g.roles.is_forward(call_named(g, "model.encode(batch)")) is forward, trust


def test_losses():
    f = facts("""
        import torch.nn as nn
        import torch.nn.functional as F
        ce = nn.CrossEntropyLoss()
        a = ce(out, y); b = F.cross_entropy(out, y); c = criterion(out, y); d = nn.MSELoss()(out, y)
        e = F.softmax(out, -1); g = accuracy(out, y)
    """)
    verdicts = {code(c.func): f.roles.is_loss(c) for c in f.scopes.calls}
    assert verdicts["ce"] and verdicts["F.cross_entropy"] and verdicts["criterion"]
    assert verdicts["nn.MSELoss()"]
    assert not verdicts["F.softmax"] and not verdicts["accuracy"]


def test_grad_regions_and_decorators():
    f = facts("""
        import torch
        @torch.no_grad()
        def evaluate():
            a = model(x)
        @torch.inference_mode
        def infer():
            b = model(x)
        def helper():
            c = model(x)
        def only_called_without_grad():
            d = model(x)
        with torch.no_grad():
            e = model(x)
            only_called_without_grad()
            with torch.enable_grad():
                g = model(x)
        with torch.set_grad_enabled(training):
            h = model(x)
        with torch.inference_mode(False):
            i = model(x)
        helper()
        j = model(x)
    """)
    modes = {code(c.func.value if False else c): None for c in f.scopes.calls}
    mode_of = {}
    for stmt in walk(f.module):
        if isinstance(stmt, cst.Assign):
            mode_of[stmt.targets[0].target.value] = f.regions.grad_enabled(stmt)
    assert mode_of == {"a": False, "b": False, "c": True, "d": False, "e": False, "g": True,
                       "h": None, "i": True, "j": True}
    del modes


_CYCLES = """
    import torch
    def recurse(node):                # called without grad, and by itself
        a = model(node)
        for child in node.children:
            recurse(child)
    def alone(node):                  # called by itself only: as a function no one calls
        b = model(node)
        alone(node.left)
    def ping(x):                      # ping and pong call each other; only pong is called from outside
        c = model(x)
        pong(x)
    def pong(x):
        d = model(x)
        ping(x)
    def loop(xs):                     # loop and step call each other; step is also called where grad is set from a flag
        for x in xs:
            e = model(x)
            step(x)
    def step(x):
        f = model(x)
        loop([x])
    def flagged(flag, x):
        with torch.set_grad_enabled(flag):
            step(x)
    def main(tree, x):
        with torch.no_grad():
            recurse(tree)
            pong(x)
"""


def test_functions_that_call_each_other_get_one_grad_mode_whichever_is_asked_first():
    names = "abcdef"
    answers = set()
    orders = [names[i:] + names[:i] for i in range(len(names))]
    for order in orders + [o[::-1] for o in orders]:  # a fresh module each time, its functions asked in this order
        f = facts(_CYCLES)
        statement = {s.targets[0].target.value: s for s in walk(f.module) if isinstance(s, cst.Assign)}
        answers.add(tuple(sorted((name, f.regions.grad_enabled(statement[name])) for name in order)))
    assert answers == {(("a", False), ("b", True), ("c", False), ("d", False), ("e", None), ("f", None))}


def test_a_cycle_of_calls_is_walked_once_not_once_per_path(monkeypatch):
    from memlint.analysis.regions import Regions

    asked = []
    from_callers = Regions._from_callers
    monkeypatch.setattr(Regions, "_from_callers", lambda self, func: asked.append(func) or from_callers(self, func))
    size = 10  # each function calls every other: 10! paths through them
    f = facts("import torch\n" + "".join(
        f"def f{i}(x):\n    v{i} = model(x)\n" + "".join(f"    f{j}(x)\n" for j in range(size) if j != i)
        for i in range(size)) + "with torch.no_grad():\n    f0(1)\n")
    statement = next(s for s in walk(f.module) if isinstance(s, cst.Assign))
    assert f.regions.grad_enabled(statement) is False
    assert len(asked) <= 3 * size  # a first pass, and a cycle settled in two rounds


def test_lightning_hooks_and_bare_toggle():
    f = facts("""
        import torch
        import lightning as L
        class Lit(L.LightningModule):
            def training_step(self, batch, i):
                a = self.model(batch)
            def validation_step(self, batch, i):
                b = self.model(batch)
        def g():
            torch.set_grad_enabled(False)
            c = model(x)
    """)
    mode_of = {s.targets[0].target.value: f.regions.grad_enabled(s)
               for s in walk(f.module) if isinstance(s, cst.Assign)}
    assert mode_of == {"a": True, "b": False, "c": None}
    training_step = f.scopes.classes["Lit"].body.body[0]
    assert f.regions.is_lightning_training_step(training_step)


def test_helpers_are_followed_from_a_loop():
    f = facts("""
        import torch
        class Trainer:
            def step(self, batch):
                loss = self.model(batch).sum()
                loss.backward()
                self.optimizer.step()
            def fit(self, loader):
                for batch in loader:
                    self.step(batch)
        def validate(batch):
            return model(batch)
        def train_loop():
            for batch in loader:
                validate(batch)
    """)
    loops = [n for n in walk(f.module) if isinstance(n, cst.For)]
    fit_loop, val_loop = loops
    assert f.phase.is_training(fit_loop)
    ((backward, site),) = f.roles.backwards_in(fit_loop)
    assert code(site) == "self.step(batch)"
    assert not f.phase.is_training(val_loop)
    ((forward, site),) = f.roles.forwards_in(val_loop)
    assert code(forward) == "model(batch)" and code(site) == "validate(batch)"
    assert f.roles.steps_in(fit_loop)[0][0].optimizer == "self.optimizer"


def test_training_conventions():
    f = facts("""
        import torch
        def compute_loss(model, batches):
            total = 0
            for b in batches:
                total = total + model(b).sum()
            return total
        with accelerator.accumulate(model):
            for b in chunks:
                out = model(b)
    """)
    loops = [n for n in walk(f.module) if isinstance(n, cst.For)]
    assert all(f.phase.is_training(loop) for loop in loops)


def test_grad_carrying_values():
    f = facts("""
        import torch
        for x, y in loader:
            out = model(x)
            loss = criterion(out, y)
            a = loss
            b = loss.item()
            c = loss.detach()
            d = loss.cpu()
            e = out.to("cpu")
            g = float(loss)
            h = out.argmax(1)
            i = out.softmax(-1)
            j = loss.detach().cpu()
            k = out.data
            with torch.no_grad():
                m = model(x)
            n = m
            p = torch.stack([loss, loss])
            q = x * 2
    """)
    verdict = {}
    for stmt in walk(f.module):
        if isinstance(stmt, cst.Assign) and isinstance(stmt.targets[0].target, cst.Name):
            verdict[stmt.targets[0].target.value] = f.values.carries_grad(stmt.value, stmt)
    assert verdict == {"out": True, "loss": True, "a": True, "b": False, "c": False, "d": True, "e": True,
                       "g": False, "h": False, "i": True, "j": False, "k": False, "m": False, "n": False,
                       "p": True, "q": False}


def test_grad_carrying_follows_the_binding_in_effect():
    f = facts("""
        import torch
        def run():
            for x in train:
                loss = criterion(model(x), y)
                loss.backward()
            for x in val:
                with torch.no_grad():
                    loss = criterion(model(x), y)
                total += loss
    """)
    aug = first(f, cst.AugAssign)
    assert not f.values.carries_grad(aug.value, aug)


def test_helper_results_carry_grad():
    f = facts("""
        import torch
        def step(x):
            return criterion(model(x), y)
        @torch.no_grad()
        def score(x):
            return model(x)
        for x in loader:
            a = step(x)
            b = score(x)
    """)
    verdict = {s.targets[0].target.value: f.values.carries_grad(s.value, s) for s in walk(f.module)
               if isinstance(s, cst.Assign)}
    assert verdict == {"a": True, "b": False}


def test_autocast_regions():
    f = facts("""
        import torch
        from torch.cuda.amp import autocast
        with torch.autocast("cuda", dtype=torch.bfloat16):
            a = model(x)
        with autocast(enabled=False):
            b = model(x)
        with torch.amp.autocast(device_type="cuda"):
            c = model(x)
    """)
    got = [(a.device_type, a.dtype, a.enabled, a.deprecated) for a in f.regions.autocasts]
    assert got == [("cuda", "torch.bfloat16", None, False), ("cuda", None, False, True),
                   ("cuda", None, None, False)]
    stmt = first(f, cst.Assign, lambda s: s.targets[0].target.value == "c")
    assert f.regions.autocast_at(stmt) is f.regions.autocasts[2]


def test_mode_calls():
    f = facts("""
        model.eval()
        net.train()
        net.train(False)
    """)
    assert [(m.target, m.mode) for m in f.roles.mode_calls] == [("model", "eval"), ("net", "train"), ("net", "eval")]


def test_each_fact_is_built_once_and_shared():
    module = cst.parse_module("import torch\n")
    facts_ = Facts(module)
    for name in ("tree", "names", "scopes", "regions", "calls", "receivers", "roles", "values", "phase"):
        assert getattr(facts_, name) is getattr(facts_, name)
    # a fact object reads the very objects it depends on, not copies of its own
    assert facts_.phase.values is facts_.values and facts_.values.roles is facts_.roles
    assert facts_.roles.calls is facts_.calls and facts_.calls.regions is facts_.regions
    assert facts_.regions.scopes is facts_.scopes and facts_.scopes.tree is facts_.tree


def loops_of(f):
    return [n for n in walk(f.module) if isinstance(n, (cst.For, cst.While))]


def test_eval_evidence():
    f = facts("""
        import torch
        def evaluate(model, loader):
            for x in loader:
                model(x)
        def run(model, loader):
            model.eval()
            for x in loader:
                model(x)
            model.train()
            for x in loader:
                model(x)
        def test_shapes(model):
            for x in xs:
                model(x)
    """)
    assert [f.phase.eval_evidence(loop) for loop in loops_of(f)] == ["named", "eval-mode", None, None]


def test_script_evidence_needs_signs_of_inference():
    with_weights = facts("""
        import torch
        model.load_state_dict(torch.load("w.pt"))
        for x in xs:
            model(x)
    """)
    assert with_weights.phase.eval_evidence(loops_of(with_weights)[0]) == "script"
    bare = facts("""
        import torch
        for x in xs:
            model(x)
    """)
    assert bare.phase.eval_evidence(loops_of(bare)[0]) is None


def test_reaches_backward_and_leaves_scope():
    f = facts("""
        import torch
        def a(parts):
            total = 0
            for p in parts:
                total += model(p).sum()
            loss = total / len(parts)
            loss.backward()
        def b(parts):
            total = 0
            for p in parts:
                total += model(p).sum()
            return total * 2
    """)
    fa, fb = f.scopes.functions["a"], f.scopes.functions["b"]
    assert f.values.reaches_backward(fa, {"total"}) and not f.values.leaves_scope(fa, {"total"})
    assert not f.values.reaches_backward(fb, {"total"}) and f.values.leaves_scope(fb, {"total"})


def test_hands_graph_away():
    f = facts("""
        import torch
        for x in xs:
            loss = criterion(model(x), y)
            trainer.apply(loss)
        for x in xs:
            loss = criterion(model(x), y)
            print(loss.item())
            metric.update(model(x), y)
    """)
    first, second = loops_of(f)
    assert f.values.hands_graph_away(first) and not f.values.hands_graph_away(second)


def test_reset_in_iteration():
    f = facts("""
        import torch
        for x in xs:
            total = 0
            total += model(x).sum()
        acc = 0
        for x in xs:
            acc += model(x).sum()
    """)
    first, second = loops_of(f)
    augs = [n for n in walk(f.module) if isinstance(n, cst.AugAssign)]
    assert f.values.reset_in_iteration(first, "total", augs[0])
    assert not f.values.reset_in_iteration(second, "acc", augs[1])


def test_constructor_of_and_attribute_backwarded():
    f = facts("""
        import torch
        rnn = torch.nn.GRU(4, 8).to("cuda")
        class T:
            def step(self):
                loss = self.total * 2
                loss.backward()
    """)
    assert f.receivers.constructor_of(cst.parse_expression("rnn")) == "torch.nn.GRU"
    assert f.values.attribute_backwarded("self.total") and not f.values.attribute_backwarded("self.other")


def test_a_tuple_of_values_gives_each_name_its_own():
    """`x, y = x.cuda(), y.cpu()`: `x` is read as `x.cuda()` alone (on the device), `y` as
    `y.cpu()`; the assignment itself still binds both names, unpacked."""
    f = facts("""
        import torch
        def step(x, y, model):
            x, y = x.cuda(), y.cpu()
            a = x.float()
            b = y.float()
    """)
    assert f.syncs.on_device(name_at(f, "x", "a = x.float()"), name_at(f, "x", "a = x.float()"))
    assert not f.syncs.on_device(name_at(f, "y", "b = y.float()"), name_at(f, "y", "b = y.float()"))
    func = first(f, cst.FunctionDef)
    assert [b.whole for b in f.scopes.bindings(func, "x") if b.kind == "assign"] == [False]


BINDINGS = textwrap.dedent("""
    import torch

    class Base(torch.nn.Module):
        def forward(self, x, device="cpu"):
            return x

        @classmethod
        def build(cls, config, state):
            return cls(**config)

        @staticmethod
        def merge(config, state):
            return config

    class Child(Base):
        def forward(self, x, device="cpu"):
            a = Base.forward(self, x, device)
            b = self.build(x, device)
            c = Base.build(x, state=device)
            d = Base.merge(x, device)
            return a
    """)


def _calls(facts: Facts, name: str) -> list:
    return [c for c in facts.scopes.calls if cst.Module([]).code_for_node(c.func).endswith(name)]


def test_arguments_bind_to_parameters_as_python_binds_them():
    facts = Facts(cst.parse_module(BINDINGS))
    base = {f.name.value: f for f in facts.scopes.classes["Base"].body.body}
    shown = cst.Module([]).code_for_node

    def bound(call: cst.Call) -> list:
        return [(shown(arg.value), name) for arg, name in facts.scopes.parameters_given(call, facts.scopes.resolve(call))]

    assert bound(_calls(facts, "Base.forward")[0]) == [("self", "self"), ("x", "x"), ("device", "device")]
    assert bound(_calls(facts, "self.build")[0]) == [("x", "config"), ("device", "state")]
    assert bound(_calls(facts, "Base.build")[0]) == [("x", "config"), ("device", "state")]
    assert bound(_calls(facts, "Base.merge")[0]) == [("x", "config"), ("device", "state")]
    x = base["forward"].params.params[1]
    assert [(shown(site), shown(value)) for site, value in facts.scopes.arguments_for(x)] == \
        [("Base.forward(self, x, device)", "x")]


@pytest.mark.parametrize("test,setting", [
    ("args.fp16", True), ("not args.fp16", True), ("self.args.batch_eval_metrics", True),
    ("self.use_liger_loss", True), ("self.ema_enabled and cfg.train", True), ("args.freeze_backbone", True),
    ("self.control.should_evaluate", False), ("self.first_step", False), ("args.empty_cache", False),
    ("self.use_low_mem", False), ("step % 10 == 0", False), ("args.fp16 or is_last", False),
    ("args.lowvram", False), ("cfg.medvram", False), ("args.allow_tf32", True),
])
def test_a_setting_is_a_flag_of_the_configuration_not_of_the_state(test, setting):
    assert a_setting(cst.parse_expression(test)) is setting


# -- guards: a switch that is off --------------------------------------------------------------------
_SWITCHED = """
import torch
HEAD


def step(x):
    if DEBUG:
        report(x)
"""


@pytest.mark.parametrize("head,off", [
    ("DEBUG = False", True),
    ("from helpers import *\nDEBUG = False", True),  # the binding after the star import surely runs
    ("print(vars(args))\nDEBUG = False", True),  # another object's namespace read
    ("DEBUG = False\nfrom helpers import *", False),  # the star import may set it
    ("import os\nfrom helpers import *\nif os.environ.get('FAST'):\n    DEBUG = False", False),  # only on some paths
    ("DEBUG = False\ntry:\n    from local_settings import DEBUG\nexcept ImportError:\n    pass", False),
    ("import sys\nDEBUG = False\nvars(sys.modules[__name__]).update(overrides())", False),
    ("import sys\nDEBUG = False\nsetattr(sys.modules[__name__], 'DEBUG', '-d' in sys.argv)", False),
])
def test_code_under_a_switch_that_is_off_never_runs(head, off):
    f = facts(_SWITCHED.replace("HEAD", head))
    assert f.guards.dead(call_named(f, "report(x)")) is off
