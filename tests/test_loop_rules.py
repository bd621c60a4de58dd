"""The loop rules (MEM102-MEM105, MEM501) beyond their examples: the facts they stand on
(purity, steps, syncs, hoisting), the shapes of the real code they were built from, and what
their fixes compute, run with torch before and after."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from memlint.analysis import Facts
from memlint.analysis.steps import BOUNDARY, INNER, STEP
from memlint.analysis.tree import walk
from memlint.engine import check, fix
from memlint.findings import Safety
from memlint.rules import registry
from memlint.torch_target import TorchVersion

RULES = registry()
LOOP_RULES = [RULES[code] for code in ("MEM102", "MEM103", "MEM104", "MEM105", "MEM501")]


def _facts(source: str):
    module = cst.parse_module(textwrap.dedent(source))
    return module, Facts(module)


def _found(source: str, code: str):
    return [f for f in check(textwrap.dedent(source), "t.py", LOOP_RULES).findings if f.code == code]


def _value(source: str):
    module, facts = _facts(source)
    assign = next(node for node in walk(module) if isinstance(node, cst.Assign))
    return facts.purity.of(assign.value)


# -- purity -------------------------------------------------------------------------------------
@pytest.mark.parametrize("source,pure,random,exact,placed", [
    ("import torch\nx = torch.eye(n, device=device)", True, False, True, True),
    ("import torch\nx = torch.ones(n, n).cuda()", True, False, True, True),
    ("import torch\nx = torch.tril(torch.ones(n, n, device='cuda:1'))", True, False, True, True),
    ("import torch\nx = torch.ones(n, n, device='cpu')", True, False, True, False),
    ("import torch\nx = torch.tensor([0.5, 0.25], device=dev)", True, False, True, True),
    ("import torch\nx = (a @ b).to(device)", True, False, False, True),
    ("import torch\nx = torch.arange(n, device=device) / n", True, False, False, True),
    ("import torch\nx = torch.randn(n, device=device)", False, True, True, True),
    ("import torch\nx = torch.tensor(values, device=device)", False, False, True, True),
    ("import torch\nx = torch.zeros(n, device=device).add_(1)", False, False, True, True),
    ("import torch\nx = torch.ones(n, device=device, requires_grad=True)", False, False, True, True),
    ("import torch\nx = torch.add(a, b, out=c)", False, False, True, False),
    ("import torch\nx = torch.relu(a)", False, False, True, False),
    ("import torch\nx = torch.zeros(3).to(torch.float16)", True, False, True, False),
    ("import torch\nx = torch.zeros(3).to(other)", False, False, True, False),
])
def test_purity_of_expressions(source, pure, random, exact, placed):
    computation = _value(source)
    assert (computation.pure, computation.random) == (pure, random)
    if pure or random:  # an impure expression is not looked at further
        assert (computation.exact, computation.placed) == (exact, placed)


def test_purity_tells_sizes_from_tensor_operands():
    computation = _value("import torch\nx = torch.ones(n, m.size(0), device=d) * scale + w.T")
    used = {item.dotted: item.as_tensor for item in computation.inputs}
    assert used == {"n": False, "m": False, "d": False, "scale": True, "w": True}


# -- steps --------------------------------------------------------------------------------------
STEPS = """
import torch
import ignite.engine

def grad_norm(model):
    norms = []
    for p in model.parameters():
        norm = p.grad.norm()                 # INNER
        norms.append(norm)
    return norms

def train_epoch(loader):
    for step, (x, y) in enumerate(loader):
        loss = model(x).sum()                # STEP
        loss.backward()
        grad_norm(model)
        if step % 100 == 0:
            logged = 1                       # BOUNDARY: every 100 steps
        if args.verbose:
            shown = 1                        # STEP: a flag holds on every step
    log = 1                                  # BOUNDARY

def accumulate(loader):
    for step, batch in enumerate(loader):
        for micro in batch.chunk(4):
            loss = model(micro).sum()
            loss.backward()
            micro_loss = loss                # INNER: four micro-batches per optimizer step
        optimizer.step()

def process(engine, batch):
    engine_out = model(batch)                # STEP: Ignite's Engine calls it once per batch
    return engine_out

trainer = ignite.engine.Engine(process)

def batches():
    for _ in range(10):
        made = 1                             # STEP: in step with the loop that takes its items
        yield made

for x in batches():
    model(x).sum().backward()

for epoch in range(10):
    train_epoch(loader)
    sample = model.decode(z)                 # BOUNDARY: a forward, in the epoch loop
    saved = 1                                # BOUNDARY

class Net(torch.nn.Module):
    def forward(self, x):
        h = self.body(x)                     # STEP
        for block in self.blocks:
            h = block(h)
        return h

    def on_train_epoch_end(self):
        done = 1                             # BOUNDARY

def sample_tiles(latents, views):
    for i, t in enumerate(self.scheduler.timesteps):
        merged = 1                           # STEP: one denoising step an iteration
        for view in views:
            tile = unet(latents[view], t)    # INNER: a view per forward, several per step
        latents = merge(latents)

def sample_views(latents, views):
    for sigma in self.progress_bar(self.scheduler.sigmas):
        for view in views:
            unet(latents[view], sigma)
        blended = 1                          # STEP: a schedule of sigmas, through a progress bar

def train_per_noise_level(loader):
    for t in timesteps:
        for x in loader:
            model(x, t).sum().backward()
            opt.step()
        level_done = 1                       # BOUNDARY: a schedule that trains is an epoch loop

def sample_every(step, epoch):
    if step == 0:
        if not args.sample_at_first:
            return
    elif args.every_n_epochs is not None:
        if epoch is None or epoch % args.every_n_epochs != 0:
            return
    elif step % args.every_n_steps != 0:
        return
    sampled = 1                              # BOUNDARY: past tests that leave unless a counter says so

def tidy_every(step):
    if step % 100 == 0:
        return
    tidied = 1                               # STEP: leaves on one step in a hundred only

def check_every(step, x):
    if x is None:
        return
    checked = 1                              # STEP: a test of the data, not of the step

def log_in_loop(loader):
    for i, x in enumerate(loader):
        model(x).sum().backward()
        if i % 50:
            continue
        logged_here = 1                      # BOUNDARY: the other iterations continue

def limited(loader):
    for step, x in enumerate(loader):
        if step >= 10000:
            break
        model(x).sum().backward()
        limited_work = 1                     # STEP: a step limit holds on every step but the last

def sharded(loader):
    for i, x in enumerate(loader):
        if i % world_size != rank:
            continue
        model(x).sum().backward()
        shard_work = 1                       # STEP: each rank runs its share of the steps

def accumulated(loader):
    for step, x in enumerate(loader):
        model(x).sum().backward()
        if (step + 1) % accum != 0:
            continue
        opt.step()
        stepped = 1                          # STEP: past the accumulation guard comes the optimizer step

def skipped_before_the_work(loader):
    for i, x in enumerate(loader):
        if i % 50:
            continue
        model(x).sum().backward()
        kept_work = 1                        # STEP: the iterations it runs are its steps

for step, x in enumerate(loader):
    model(x).sum().backward()
    sample_every(step, None)
    tidy_every(step)
    check_every(step, x)

setup = 1                                    # unknown
"""


@pytest.mark.parametrize("target,expected", [
    ("norm", INNER), ("loss", STEP), ("log", BOUNDARY), ("saved", BOUNDARY), ("done", BOUNDARY),
    ("setup", None), ("logged", BOUNDARY), ("shown", STEP), ("sample", BOUNDARY), ("made", STEP),
    ("micro_loss", INNER), ("engine_out", STEP), ("merged", STEP), ("tile", INNER), ("level_done", BOUNDARY),
    ("blended", STEP), ("sampled", BOUNDARY), ("tidied", STEP), ("checked", STEP), ("logged_here", BOUNDARY),
    ("limited_work", STEP), ("shard_work", STEP), ("kept_work", STEP), ("stepped", STEP),
])
def test_how_often_code_runs_per_step(target, expected):
    module, facts = _facts(STEPS)
    node = next(n for n in walk(module) if isinstance(n, cst.Assign) and n.targets[0].target.value == target)
    assert facts.steps.how_often(node) == expected


def test_forward_of_a_module_runs_per_step():
    module, facts = _facts(STEPS)
    forward = next(n for n in walk(module) if isinstance(n, cst.FunctionDef) and n.name.value == "forward")
    assert facts.steps.function_how_often(forward) == STEP


# -- syncs --------------------------------------------------------------------------------------
def test_syncs_only_on_tensors():
    module, facts = _facts("""
        import numpy as np, torch
        out = model(x)
        arr = np.ones(3)
        a = out.argmax(1)[0].item()
        b = arr[0].item()
        c = int(out.sum())
        d = int(n)
        e = torch.cuda.synchronize()
        f = model.cpu()
    """)
    kinds = {}
    for node in walk(module):
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call):
            kinds[node.targets[0].target.value] = facts.syncs.sync(node.value)  # type: ignore[attr-defined]
    assert kinds == {"out": None, "arr": None, "a": "item", "b": None, "c": "int", "d": None,
                     "e": "synchronize", "f": None}


@pytest.mark.parametrize("iterable,many", [
    ("model.parameters()", True), ("range(len(y))", True), ("range(3)", False), ("range(64)", True),
    ("losses.items()", False), ("(a, b)", False), ("zip(preds, y)", True), ("enumerate(names)", False),
])
def test_what_loops_repeat_over(iterable, many):
    module, facts = _facts(f"import torch\npreds = model(x)\ny = torch.zeros(4)\nfor v in {iterable}:\n    pass\n")
    loop = next(n for n in walk(module) if isinstance(n, cst.For))
    assert facts.syncs.many(loop.iter, loop) is many


# -- MEM102: what may not move ------------------------------------------------------------------
# Each case is reported without the line marked `# <-`, and not with it: the line is the reason.
NOT_HOISTED = {
    "an attribute a helper of the loop stores": """
    import torch
    class T:
        def grow(self):
            self.n += 1
        def run(self):
            for x in loader:
                eye = torch.eye(self.n, device=self.device)
                self.grow()  # <-
                out = model(x @ eye)
                out.sum().backward()
    """,
    "an attribute of something handed to a call that cannot be followed": """
    import torch
    for x in loader:
        eye = torch.eye(cfg.n, device=device)
        update_config(cfg)  # <-
        out = model(x @ eye)
        out.sum().backward()
    """,
    "written into by a torch function": """
    import torch
    for x in loader:
        mask = torch.ones(8, device=device)
        torch.nn.functional.dropout(mask, 0.5, True, inplace=True)  # <-
        out = model(x * mask)
        out.sum().backward()
    """,
    "a view of it changed in place": """
    import torch
    for x in loader:
        mask = torch.ones(8, device=device)
        row = mask.view(2, 4)
        row.mul_(2)  # <-
        out = model(x * mask)
        out.sum().backward()
    """,
    "an input written into by a torch function": """
    import torch
    base = torch.zeros(8, device=device)
    for x in loader:
        torch.nn.init.normal_(base)  # <-
        scaled = base * 2
        out = model(x + scaled)
        out.sum().backward()
    """,
    "the device changes in the loop": """
    import torch
    for rank in range(4):
        torch.cuda.set_device(rank)  # <-
        eye = torch.eye(8).cuda()
        out = model(eye)
        out.sum().backward()
    """,
    "read after the loop: after zero iterations the old value would be seen": """
    import torch
    eye = None
    for x in loader:
        eye = torch.eye(8, device=device)
        out = model(x @ eye)
        out.sum().backward()
    print(eye)  # <-
    """,
    "a global a helper reads is rebound in the loop": """
    import torch
    SIZE = 8
    def eye():
        return torch.eye(SIZE, device="cuda")
    for x in loader:
        e = eye()
        SIZE = x.shape[0]  # <-
        out = model(x @ e)
        out.sum().backward()
    """,
}


@pytest.mark.parametrize("case", sorted(NOT_HOISTED))
def test_mem102_does_not_hoist(case):
    source = NOT_HOISTED[case]
    without = "\n".join(line for line in source.splitlines() if "# <-" not in line) + "\n"
    assert len(_found(without, "MEM102")) == 1
    assert _found(source, "MEM102") == []


def test_mem102_does_not_hoist_a_tensor_argument_of_the_function():
    # it may require grad: the hoisted product would share one graph between iterations
    source = """
    import torch
    def fit(w, loader, device):
        for x in loader:
            wd = w.to(device) * 2
            loss = (x * wd).sum()
            loss.backward()
    """
    assert _found(source, "MEM102") == []


def test_mem102_forward_needs_attributes_set_only_in_init():
    source = """
    import torch
    class M(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.n = n
        def resize(self, n):
            self.n = n
        def forward(self, x):
            mask = torch.ones(self.n, self.n, device=x.device).tril()
            return x @ mask
    """
    assert _found(source, "MEM102") == []


def test_mem102_forward_buffer_computes_the_same_output():
    torch = pytest.importorskip("torch")
    source = textwrap.dedent("""
        import torch
        class Causal(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self.n = n

            def forward(self, x):
                mask = torch.ones(self.n, self.n, device=x.device).tril().bool()
                return x.masked_fill(~mask, 0.0)
    """)
    [finding] = _found(source, "MEM102")
    assert finding.fix is not None and finding.fix.safety is Safety.UNSAFE
    fixed = fix(source, "t.py", [RULES["MEM102"]], unsafe=True).source
    assert "register_buffer(\"mask\", torch.ones(self.n, self.n).tril().bool(), persistent=False)" in fixed
    x = torch.randn(5, 5)
    outputs = []
    for code in (source, fixed):
        space: dict = {}
        exec(compile(code, "t.py", "exec"), space)
        module = space["Causal"](5)
        outputs.append(module(x))
        assert ("mask" in dict(module.named_buffers())) is (code is fixed)
        assert "mask" not in module.state_dict()
    assert torch.equal(*outputs)


# -- MEM103 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("statement,fixed,safety", [
    ("x = torch.zeros(4, 4).to(device)", "x = torch.zeros(4, 4, device=device)", Safety.SAFE),
    ("x = torch.arange(6).long().cuda(0)", 'x = torch.arange(6, device="cuda:0").long()', Safety.SAFE),
    ("x = torch.eye(3).to(device=dev, non_blocking=True)", "x = torch.eye(3, device=dev)", Safety.SAFE),
    ("x = torch.empty(8).to(x.device)", "x = torch.empty(8, device=x.device)", Safety.SAFE),
    ("x = torch.randperm(10).to(local_rank)", "x = torch.randperm(10, device=local_rank)", Safety.UNSAFE),
    ("x = torch.zeros(4, device='cpu').cuda()", None, None),
    ("x = torch.ones(4).to(device, torch.float16)", "report", None),
])
def test_mem103_fixes(statement, fixed, safety):
    source = f"import torch\nfor batch in loader:\n    {statement}\n"
    found = _found(source, "MEM103")
    if fixed is None:
        assert found == []
        return
    assert len(found) == 1
    if fixed == "report":
        assert found[0].fix is None
        return
    assert found[0].fix is not None and found[0].fix.safety is safety
    assert fix(source, "t.py", [RULES["MEM103"]], unsafe=True).source == f"import torch\nfor batch in loader:\n    {fixed}\n"


@pytest.mark.parametrize("value,number,safety", [
    ("torch.tensor(0).to(out)", "0", Safety.SAFE),  # int64, cast as the number is
    ("torch.tensor(-2).type_as(out)", "-2", Safety.SAFE),
    ("torch.tensor(0.5).to(out.device)", "0.5", Safety.SAFE),  # float32 holds it exactly
    ("torch.tensor(0.1).to(out)", "0.1", Safety.UNSAFE),  # rounded to float32 first
    ("torch.tensor(-math.inf).to(out)", "-math.inf", Safety.UNSAFE),  # an integer `out` would raise
    ("torch.tensor(float('nan')).cuda()", "float('nan')", Safety.UNSAFE),
])
def test_mem103_a_number_assigned_into_a_tensor(value, number, safety):
    """Assigning the number stores what the moved tensor of it stored, unless float32 rounding
    or an integer target tells them apart: only then is the fix unsafe."""
    head = "import math\nimport torch\nmodel = model.to(device)\nfor batch in loader:\n    out = model(batch)\n"
    source = f"{head}    out[out != out] = {value}\n"
    found = _found(source, "MEM103")
    assert len(found) == 1 and found[0].fix is not None and found[0].fix.safety is safety
    assert fix(source, "t.py", [RULES["MEM103"]], unsafe=True).source == f"{head}    out[out != out] = {number}\n"


def test_mem103_one_off_setup_is_not_reported():
    step = "import torch\nfor batch in loader:\n    x = torch.zeros(4, 4).to(device)\n"
    setup = "import torch\nx = torch.zeros(4, 4).to(device)\nfor batch in loader:\n    model(batch, x)\n"
    assert len(_found(step, "MEM103")) == 1
    assert _found(setup, "MEM103") == []


def test_mem103_fix_keeps_the_layout_of_calls_over_several_lines():
    source = "import torch\nfor b in loader:\n    x = base + torch.arange(\n        0, n, step\n    ).to(dev.device)\n" \
             "    y = torch.zeros(\n        n,\n        m,\n    ).to(device)\n"
    fixed = fix(source, "t.py", [RULES["MEM103"]]).source
    assert fixed == ("import torch\nfor b in loader:\n    x = base + torch.arange(\n        0, n, step, device=dev.device\n    )\n"
                     "    y = torch.zeros(\n        n,\n        m,\n        device=device,\n    )\n")


def test_mem103_no_fix_that_would_drop_a_comment():
    source = "import torch\nfor b in loader:\n    mask = torch.arange(\n        t\n    ).to(  # a (T,) tensor\n        lengths.device\n    )\n"
    [finding] = _found(source, "MEM103")
    assert finding.fix is None


def test_mem103_deterministic_fix_keeps_the_values():
    torch = pytest.importorskip("torch")
    source = "import torch\nfor batch in loader:\n    x = torch.full((3, 2), 0.5).double().to(device)\n"
    fixed = fix(source, "t.py", [RULES["MEM103"]]).source
    values = []
    for code in (source, fixed):
        space = {"device": "cpu", "loader": [0]}
        exec(compile(code, "t.py", "exec"), space)
        values.append(space["x"])
    assert fixed != source and values[0].dtype == values[1].dtype == torch.float64
    assert torch.equal(*values)


# -- MEM104 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("grow", ["acc = torch.cat((acc, piece))", "acc = torch.cat([piece, acc], dim=1)",
                                  "acc = torch.concat((acc, piece), 1)"])
def test_mem104_list_version_builds_the_same_tensor(grow):
    torch = pytest.importorskip("torch")
    source = textwrap.dedent(f"""
        import torch
        acc = torch.zeros(2, 1)
        for i in range(40):
            piece = torch.full((2, 1), float(i))
            {grow}
        if i % 10 == 0:
            print(acc.shape)
    """)
    fixed = fix(source, "t.py", [RULES["MEM104"]]).source
    assert "_parts" in fixed and "torch.cat((acc, piece))" not in fixed
    results = []
    for code in (source, fixed):
        space: dict = {}
        exec(compile(code, "t.py", "exec"), space)
        results.append(space["acc"])
    assert torch.equal(*results)


def test_mem104_logged_reads_are_rewritten_and_give_the_same_values():
    torch = pytest.importorskip("torch")
    source = textwrap.dedent("""
        import torch
        seen = []
        acc = torch.zeros(0)
        for i in range(30):
            acc = torch.cat((acc, torch.ones(2) * i))
            if i % 7 == 0:
                seen.append(acc.sum().item())
    """)
    [finding] = _found(source, "MEM104")
    assert finding.fix is not None and finding.fix.safety is Safety.UNSAFE
    fixed = fix(source, "t.py", [RULES["MEM104"]], unsafe=True).source
    results = []
    for code in (source, fixed):
        space: dict = {}
        exec(compile(code, "t.py", "exec"), space)
        results.append((space["acc"], space["seen"]))
    assert torch.equal(results[0][0], results[1][0]) and results[0][1] == results[1][1]


@pytest.mark.parametrize("source", [
    # a piece that is a persistent buffer refilled in place: the list would hold it n times
    """
    import torch
    buf = torch.zeros(4)
    acc = torch.zeros(0)
    for x in loader:
        buf.copy_(x)
        acc = torch.cat((acc, buf))
    """,
    # the dimension changes in the loop
    """
    import torch
    for d in dims:
        acc = torch.cat((acc, model(x)), d)
    """,
])
def test_mem104_reports_without_a_fix_when_the_list_would_differ(source):
    [finding] = _found(source, "MEM104")
    assert finding.fix is None


# -- MEM501 -------------------------------------------------------------------------------------
def test_mem501_alone_in_a_device_check_removes_the_check():
    source = textwrap.dedent("""
        import torch
        for x in loader:
            model(x).sum().backward()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    """)
    fixed = fix(source, "t.py", [RULES["MEM501"]]).source
    assert fixed == "\nimport torch\nfor x in loader:\n    model(x).sum().backward()\n"


def test_mem501_in_a_lightning_batch_hook():
    source = """
    import torch
    import lightning as L
    class M(L.LightningModule):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            torch.cuda.empty_cache()
    """
    assert [f.line for f in _found(source, "MEM501")] == [6]


# -- shapes of real code (written afresh) --------------------------------------------------------
def test_sampling_per_epoch_made_on_the_cpu_and_moved():
    # a VAE script draws its samples on the CPU each epoch and moves them: the loop reads its
    # images back to the host every iteration anyway, and runs once an epoch
    source = """
    import torch
    for epoch in range(1, epochs + 1):
        train(epoch)
        with torch.no_grad():
            z = torch.randn(16, latent).to(device)
            images = model.decode(z).cpu()
    """
    assert _found(source, "MEM103") == []
    [finding] = _found(source.replace("model.decode(z).cpu()", "model.decode(z)"), "MEM103")
    assert finding.fix is not None and finding.fix.safety is Safety.UNSAFE


def test_generation_that_feeds_the_grown_sequence_to_the_model_is_not_reported():
    source = """
    import torch
    tokens = torch.randint(vocab, (1, 1)).to(device)
    with torch.no_grad():
        for i in range(n_words):
            logits = model(tokens)
            nxt = torch.multinomial(logits[-1].softmax(-1), 1).view(1, 1)
            tokens = torch.cat([tokens, nxt], 0)
    """
    assert _found(source, "MEM104") == []


def test_a_step_loop_that_reads_the_grown_tensor_otherwise_has_no_fix():
    source = """
    import torch
    for x in loader:
        feats = torch.cat([feats, model(x)], 0)
        spread = torch.cdist(feats, feats).mean()
    """
    [finding] = _found(source, "MEM104")
    assert finding.fix is None and "preallocate" in finding.message


def test_index_built_on_the_cpu_for_a_projection():
    source = """
    import torch
    class TextEncoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(64)

        def forward(self, tokens, hidden):
            hidden = self.norm(hidden)
            return hidden[torch.arange(hidden.shape[0]), tokens.argmax(dim=-1)]
    """
    [finding] = _found(source, "MEM103")
    assert finding.fix is not None and finding.fix.safety is Safety.SAFE
    assert "device=hidden.device" in fix(textwrap.dedent(source), "t.py", [RULES["MEM103"]]).source


def test_causal_mask_helper_built_on_the_cpu_and_moved_in_forward():
    source = """
    import torch
    class Decoder(torch.nn.Module):
        def square_mask(self, size):
            mask = torch.triu(torch.ones(size, size), diagonal=1)
            return mask.masked_fill(mask == 1, float("-inf"))

        def forward(self, x):
            mask = self.square_mask(x.size(0)).to(x.device)
            return self.layers(x, mask)
    """
    [finding] = _found(source, "MEM103")
    assert finding.fix is None and "square_mask" in finding.message
    assert _found(source, "MEM102") == []  # the size comes from the input


def test_dense_block_is_not_cat_in_loop():
    source = """
    import torch
    class Dense(torch.nn.Module):
        def forward(self, x):
            for i in range(len(self.convs)):
                x = torch.cat([x, self.convs[i](x)], 1)
            return x
    """
    assert _found(source, "MEM104") == []


def test_fixed_loop_rules_compile_and_settle():
    source = textwrap.dedent("""
        import torch
        device = "cuda"
        preds = torch.empty(0, device=device)
        for x, y in loader:
            eye = torch.eye(8, device=device)
            level = torch.zeros(4).to(device)
            preds = torch.cat((preds, model(x @ eye).argmax(1)))
            torch.cuda.empty_cache()
    """)
    first = fix(source, "t.py", LOOP_RULES, unsafe=True)
    compile(first.source, "t.py", "exec")
    # MEM102 hoists `level` above the loop, where its copy runs once: MEM103's finding goes with
    # it, and counts as fixed (so `memlint` and `memlint --fix` count alike)
    assert {f.code for f in first.applied} == {"MEM102", "MEM103", "MEM104", "MEM501"}
    assert fix(first.source, "t.py", LOOP_RULES, unsafe=True).source == first.source


@pytest.mark.parametrize("path,reported", [("train.py", True), ("tests/helpers/models.py", False),
                                           ("pkg/test_model.py", False), ("conftest.py", False)])
def test_per_step_rules_leave_test_modules_alone(path, reported):
    source = "import torch\nfor x in loader:\n    t = torch.zeros(4).to(device)\n    model(x, t)\n"
    found = [f.code for f in check(source, path, [RULES["MEM103"]]).findings]
    assert found == (["MEM103"] if reported else [])


def test_meta_learning_tasks_each_backwarded_and_read_back_sync_per_task():
    # MAML: each task adapts (its own inner loop of steps in a helper), backwards its error and
    # reads it back; the optimizer steps once all tasks are in
    source = """
    import torch
    model = model.to(device)

    def adapt(batch, learner):
        for _ in range(steps):
            learner.adapt(criterion(learner(batch), batch.y))
        out = learner(batch)
        return criterion(out, batch.y), (out.argmax(1) == batch.y).float().mean()

    for iteration in range(iterations):
        optimizer.zero_grad()
        for task in range(tasks_per_step):
            error, accuracy = adapt(sample(), model.clone())
            error.backward()
            total += error.item()
        optimizer.step()
    """
    [finding] = _found(source, "MEM105")
    assert finding.line == 16 and "micro-batch" in finding.message


_LOGGED_EVALUATION = textwrap.dedent("""\
    import torch

    def evaluate(model, x, y, mask):
        model.eval()
        with torch.no_grad():
            out = model(x)[mask]
            loss = criterion(out, y[mask])
        return loss.item(), (out.argmax(1) == y[mask]).float().mean().item()

    def train_step(epoch, model, x, y, train_mask, val_mask, print_every=10):
        model.train()
        optimizer.zero_grad()
        criterion(model(x)[train_mask], y[train_mask]).backward()
        optimizer.step()
        train_loss, train_acc = evaluate(model, x, y, train_mask)
        val_loss, val_acc = evaluate(model, x, y, val_mask)
        if epoch % print_every == 0:
            print(epoch, train_loss, train_acc, val_loss, val_acc)

    model = model.to(device)
    for epoch in range(epochs):
        train_step(epoch, model, x, y, train_mask, val_mask)
""")


def test_mem105_an_evaluation_every_step_for_a_periodic_log_is_one_finding():
    """Two evaluations per step whose results only a log every N steps reads: one finding, at
    the first, naming the condition; none when a read runs every step, under a flag or under
    another condition too, or when the evaluation also keeps something."""
    rule = registry()["MEM105"]
    found = check(_LOGGED_EVALUATION, "train.py", [rule]).findings
    assert [(f.line, f.code) for f in found] == [(15, "MEM105")]
    assert "`evaluate(...)`" in found[0].message and "`epoch % print_every == 0`" in found[0].message
    read_every_step = _LOGGED_EVALUATION.replace("print(epoch,", "pass\n    scheduler.step(val_loss)\n    print(epoch,")
    assert check(read_every_step, "train.py", [rule]).findings == []
    flag = _LOGGED_EVALUATION.replace("if epoch % print_every == 0:", "if verbose:")
    assert check(flag, "train.py", [rule]).findings == []
    stores = _LOGGED_EVALUATION.replace("    model.eval()\n", "    model.eval()\n    model.last = x\n", 1)
    assert check(stores, "train.py", [rule]).findings == []
    counts = _LOGGED_EVALUATION.replace("    model.eval()\n", "    model.eval()\n    model.calls += 1\n", 1)
    assert check(counts, "train.py", [rule]).findings == []
    two_logs = _LOGGED_EVALUATION.replace("val_loss, val_acc)\n", "val_loss, val_acc)\n    if epoch % 7 == 0:\n"
                                          "        print(train_loss, val_loss)\n")
    assert check(two_logs, "train.py", [rule]).findings == []


# -- MEM102: a tensor of one number as torch.where's operand ---------------------------------
WHERE_OPERAND = """\
    import torch
    class GraphAttention(torch.nn.Module):
        def forward(self, h, adj):
            e = self.scores(h)
            zero_vec = -9e15 * torch.ones_like(e)
            return torch.where(adj > 0, e, zero_vec)
    """


@pytest.mark.parametrize("target,fixed", [(None, True), (TorchVersion(1, 12), True), (TorchVersion(1, 11), False)])
def test_a_number_for_torch_where_is_written_only_where_the_torch_takes_one(target, fixed):
    source = textwrap.dedent(WHERE_OPERAND)
    (finding,) = [f for f in check(source, "t.py", [RULES["MEM102"]], target_torch=target).findings]
    assert finding.line == 5
    result = fix(source, "t.py", [RULES["MEM102"]], target_torch=target).source
    assert ("torch.where(adj > 0, e, -9e15)" in result and "zero_vec" not in result) is fixed
    assert (result == source) is not fixed


@pytest.mark.parametrize("fill,number,safe", [("torch.ones_like(e) * -1e9", "-1e9", True),
                                              ('float("-inf") * torch.ones_like(e)', 'float("-inf")', True),
                                              ("torch.full_like(e, -100000)", "-100000", False)])
def test_each_masking_fill_becomes_that_number_safely_only_where_it_promotes_alike(fill, number, safe):
    source = textwrap.dedent(WHERE_OPERAND).replace("-9e15 * torch.ones_like(e)", fill)
    (finding,) = check(source, "t.py", [RULES["MEM102"]]).findings
    assert finding.fix is not None and (finding.fix.safety is Safety.SAFE) is safe
    result = fix(source, "t.py", [RULES["MEM102"]], unsafe=True).source
    assert f"torch.where(adj > 0, e, {number})" in result


@pytest.mark.parametrize("fill", ["torch.zeros_like(e)", "torch.ones_like(e)", "torch.full_like(e, -100)",
                                  "torch.ones_like(e) * 0.5", "-1 * torch.ones_like(e)"])
def test_a_fill_that_masks_no_scores_is_left_alone(fill):
    source = textwrap.dedent(WHERE_OPERAND).replace("-9e15 * torch.ones_like(e)", fill)
    assert not check(source, "t.py", [RULES["MEM102"]]).findings


def test_a_bool_tensor_keeps_its_dtype_only_with_the_tensor_of_its_number():
    """Why `full_like` is an unsafe fix: against the number, torch.where promotes bool to int64."""
    torch = pytest.importorskip("torch")
    mask, kept = torch.tensor([True, False]), torch.tensor([True, True])
    assert torch.where(mask, kept, torch.full_like(kept, -100000)).dtype == torch.bool
    assert torch.where(mask, kept, -100000).dtype == torch.int64
    assert torch.where(mask, kept, -9e16 * torch.ones_like(kept)).dtype == torch.where(mask, kept, -9e16).dtype


def test_a_tensor_the_operand_was_shaped_like_before_it_was_bound_again_is_left_alone():
    source = textwrap.dedent(WHERE_OPERAND).replace(
        "        return torch.where", "        e = e.t()\n        return torch.where")
    assert "e = e.t()" in source
    assert not check(source, "t.py", [RULES["MEM102"]]).findings


@pytest.mark.parametrize("test", ['args.impl == b"kto"', 'args.impl in (b"a", b"b")'])
def test_a_bytes_literal_compared_with_a_setting_is_no_mode_and_no_crash(test):
    source = f"""\
        import torch
        model = model.cuda()
        for x in loader:
            if {test}:
                out = model(x.cuda())
                print(out)
            out.sum().backward()
        """
    assert _found(source, "MEM105") == []


_ACCURACY = '(out.argmax(-1) == y.cuda()).float().mean()'


@pytest.mark.parametrize("body, reported", [
    ([f'metrics["acc"] = {_ACCURACY}', 'print(metrics)'], True),
    (['print(metrics)', f'metrics["acc"] = {_ACCURACY}'], False),  # printed before it is filled
    (['if evaluate:', f'    metrics["acc"] = {_ACCURACY}', '    continue', 'print(metrics)'], False),  # another path
    ([f'metrics[b"acc"] = {_ACCURACY}', 'print(metrics)'], True),  # a bytes key: read without a crash
    (['with torch.no_grad():', f'    metrics["acc"] = {_ACCURACY}', 'print(metrics)'], True),  # a `with` runs its body
])
def test_a_dict_is_printed_with_gpu_tensors_only_where_they_are_stored_before_it_on_its_path(body, reported):
    lines = ["import torch", "model = model.cuda()", "for x, y in loader:", "    metrics = {}",
             "    out = model(x.cuda())", *("    " + line for line in body), "    crit(out, y.cuda()).backward()"]
    assert bool(_found("\n".join(lines) + "\n", "MEM105")) is reported


def test_a_setting_about_logging_compared_with_a_name_is_no_mode():
    source = """\
        import torch
        model = model.cuda()
        for x in loader:
            if args.log_level == "all":
                out = model(x.cuda())
                print(out)
            model(x.cuda()).sum().backward()
        """
    assert _found(source, "MEM105") == []
    assert len(_found(source.replace("args.log_level", "args.train_impl"), "MEM105")) == 1


@pytest.mark.parametrize("name, reported", [("cu_seqlens", True), ("seq_lens", False), ("num_tokens", False)])
def test_a_layer_parameter_is_a_host_size_only_where_a_part_of_its_name_says_so(name, reported):
    source = f"""\
        import torch
        from torch import nn

        class Attention(nn.Module):
            def forward(self, x: torch.Tensor, {name}: torch.Tensor):
                longest = ({name}[1:] - {name}[:-1]).max().item()
                return self.attend(x, {name}, longest)

        class Model(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.layers = nn.ModuleList([Attention() for _ in range(n)])

        model = Model(4).cuda()
        """
    assert bool(_found(source, "MEM105")) is reported


_LAYER_SYNC = """\
    import torch
    from torch import nn

    class Block(nn.Module):
        def forward(self, x: torch.Tensor):
            {wait}
            return self.ff(x)

    class Model(nn.Module):
        def __init__(self, n, classes):
            super().__init__()
    {build}

    model = Model(4, [3, 5]).cuda()
    """


@pytest.mark.parametrize("build, reported", [
    ("        self.layers = nn.ModuleList([Block() for _ in range(n)])", True),
    ("        self.layers = nn.ModuleList()\n        for i in range(n):\n            layer = Block()\n"
     "            self.layers.append(layer)", True),  # Swin's, timm's
    ("        self.blocks = []\n        for i in range(n):\n            self.blocks.extend([Block()])", True),
    ("        self.heads = nn.ModuleList([Block() for c in classes])", False),  # one head per class: alternatives
    ("        for split in ('train', 'val'):\n            self.metrics.append(Block())", False),
    ("        for i in range(n):\n            self.block = Block()", False),  # the last one is kept
])
def test_a_layer_is_one_of_a_count_of_modules_built_in_turn(build, reported):
    source = textwrap.dedent(_LAYER_SYNC).format(wait="n = x.abs().max().item()", build=build)
    assert bool(_found(source, "MEM105")) is reported


def test_a_cache_each_layer_of_a_loop_is_given_is_a_layer():
    """gpt-fast: `for layer in self.layers: layer.attention.kv_cache = KVCache(...)`."""
    source = """\
        import torch
        from torch import nn

        class KVCache(nn.Module):
            def forward(self, input_pos: torch.Tensor, k: torch.Tensor):
                return k[:, :, :input_pos.max().item() + 1]

        class Transformer(nn.Module):
            def setup_caches(self, batch, length):
                for layer in self.layers:
                    layer.attention.kv_cache = KVCache(batch, length)

        model = Transformer().cuda()
        """
    assert len(_found(source, "MEM105")) == 1
    assert _found(source.replace("layer.attention.kv_cache =", "self.cache ="), "MEM105") == []


@pytest.mark.parametrize("test, reported", [
    ("x.dtype == torch.float16 and torch.isinf(x).any()", False),  # half precision only: the caller's choice
    ("x.dtype != torch.float16 and torch.isnan(x).any()", True),  # every other precision
    ("self.debug_checks and torch.isnan(x).any()", False),
    ("self.return_logits and torch.isnan(x).any()", True),  # `logits` is no log
])
def test_a_layer_wait_under_a_choice_of_its_caller_is_left_alone(test, reported):
    source = textwrap.dedent(_LAYER_SYNC).format(
        wait=f"if {test}:\n                raise ValueError('bad values')",
        build="        self.layers = nn.ModuleList([Block() for _ in range(n)])")
    assert bool(_found(source, "MEM105")) is reported


def test_which_classes_are_layers_does_not_depend_on_their_order():
    """A and B build each other in `__init__`; the model builds A per layer: both are layers."""
    blocks = {
        "A": "class A(nn.Module):\n    def __init__(self, depth):\n        super().__init__()\n"
             "        self.inner = B(depth - 1) if depth else None\n\n"
             "    def forward(self, x: torch.Tensor):\n        n = x.abs().max().item()\n        return x\n",
        "B": "class B(nn.Module):\n    def __init__(self, depth):\n        super().__init__()\n"
             "        self.inner = A(depth - 1) if depth else None\n\n"
             "    def forward(self, x: torch.Tensor):\n        n = x.abs().max().item()\n        return x\n",
    }
    tail = ("class Model(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
            "        self.layers = nn.ModuleList([A(2) for _ in range(n)])\n\nmodel = Model(4).cuda()\n")
    for order in ("AB", "BA"):
        source = "import torch\nfrom torch import nn\n\n" + "\n".join(blocks[c] for c in order) + "\n" + tail
        assert len(_found(source, "MEM105")) == 2, order


def test_a_class_built_in_a_loops_iterable_is_built_once():
    source = """\
        import torch
        from torch import nn

        class Backbone(nn.Module):
            def forward(self, x: torch.Tensor):
                n = x.abs().max().item()
                return x

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                for name, child in Backbone().named_children():
                    self.add_module(name, child)
                self.trunk = nn.ModuleList([m for m in Backbone().children()])

        model = Model().cuda()
        """
    assert _found(source, "MEM105") == []


# -- waits per time step of a decoder loop inside a step ----------------------------------------
_DECODER = """
    import torch
    from torch import nn


    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("r", torch.tensor(2, dtype=torch.int))
            self.cell = nn.LSTMCell(80, 256)

        def forward(self, frame, state):
            h, c = self.cell(frame, state)
            return h[:, :128 * self.r], (h, c)


    class Tacotron(nn.Module):
        def __init__(self):
            super().__init__()
            self.decoder = Decoder()

        @property
        def r(self):
            return self.decoder.r.item()

        def forward(self, mels, state):
            frames = []
            for t in range(0, mels.size(1), self.r):
                frame, state = self.decoder(mels[:, t], state)
                frames.extend([frame] * self.r)
            return torch.stack(frames, 1)


    model = Tacotron().cuda()
"""


def test_a_decoder_loop_s_settled_waits_are_named_with_the_loop_that_repeats_them():
    by_line = {f.line: f.message for f in _found(_DECODER, "MEM105")}
    assert sorted(by_line) == [14, 30]
    assert "once per iteration of the loop over `range(0, mels.size(1), self.r)` in `Tacotron.forward`" in by_line[14]
    assert "a property that returns `self.decoder.r.item()`" in by_line[30]
    assert "`Tacotron.forward` runs on every step, though `self.decoder.r` is the same on each" in by_line[30]


@pytest.mark.parametrize("change", [
    "        self.step += 1\n        self.r += 1\n",  # stored outside `__init__`: it may change per time step
    "        self.r.fill_(3)\n",  # changed in place, itself or through what it holds
    "        self.r.data += 1\n",
    "        self.r.data.add_(1)\n",
    "        self.r[...] = 3\n",
    "        setattr(self, \"r\", self.r + 1)\n",
    "        torch.add(self.r, 1, out=self.r)\n",
    "        r = self.r\n        r.add_(1)\n",  # under another name
    "        r, c = self.r, 0\n        r += 1\n",
    "        nn.init.constant_(self.r, 3)\n",  # by a function that writes in place
    "        self.register_buffer(\"r\", self.r + 1)\n",  # registered again
    "        for k, v in self.overrides.items():\n            setattr(self, k, v)\n",  # by a name it computes
])
def test_a_value_the_decoder_changes_is_not_settled(change):
    source = textwrap.dedent(_DECODER).replace("        h, c = self.cell(frame, state)\n",
                                                "        h, c = self.cell(frame, state)\n" + change)
    assert [f.line for f in _found(source, "MEM105") if "property" in f.message] == []


_SETTER = ("            return self.decoder.r.item()\n",
           "            return self.decoder.r.item()\n\n        @r.setter\n        def r(self, value):\n"
           "            self.decoder.r = self.decoder.r.new_tensor(value)\n")


@pytest.mark.parametrize("edits", [
    # the read runs once, or by a switch
    [("                frames.extend([frame] * self.r)\n",
      "                if t == 0:\n                    frames.extend([frame] * self.r)\n")],
    [("                frames.extend([frame] * self.r)\n",
      "                if self.debug:\n                    frames.extend([frame] * self.r)\n")],
    # a setter the loop calls changes what the property reads
    [_SETTER, ("                frames.extend([frame] * self.r)\n",
               "                frames.extend([frame] * self.r)\n                self.r = 1\n")],
    # a base of another module may change it, the model's or the decoder's
    [("    class Tacotron(nn.Module):", "    class Tacotron(Stepping):")],
    [("    class Decoder(nn.Module):", "    class Decoder(Stepping):")],
    # ... past a `continue` the first iterations take, or in one case of a `match`
    [("                frames.extend([frame] * self.r)\n",
      "                if t > 0:\n                    continue\n                frames.extend([frame] * self.r)\n")],
    [("                frames.extend([frame] * self.r)\n",
      "                match t:\n                    case 0:\n                        frames.extend([frame] * self.r)\n")],
])
def test_a_read_that_may_not_repeat_the_same_value_is_not_reported(edits):
    source = _DECODER
    for old, new in edits:
        assert old in source
        source = source.replace(old, new)
    assert [f.line for f in _found(source, "MEM105") if "property" in f.message] == []


def test_a_setter_no_code_of_the_module_calls_leaves_the_value_settled():
    source = _DECODER.replace(*_SETTER)
    assert [f.line for f in _found(source, "MEM105") if "property" in f.message] == [34]


def test_a_module_called_in_a_loop_over_a_spelled_count_runs_no_time_steps():
    module, facts = _facts(_DECODER.replace("range(0, mels.size(1), self.r)", "range(3)"))
    decoder = facts.scopes.classes["Decoder"]
    assert not facts.steps.layers.is_layer(decoder)
    module, facts = _facts(_DECODER)
    loop = facts.steps.layers.time_step_loop(facts.scopes.classes["Decoder"])
    assert isinstance(loop, cst.For) and facts.tree.function_of(loop).name.value == "forward"
