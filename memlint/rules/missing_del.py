"""MEM204 missing-del (opt-in)."""

from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import libcst as cst

from memlint.analysis.loops import LoopFacts
from memlint.findings import Fix, InsertAfter, Safety
from memlint.rule import Claim, Invalid, Rule

_LEAVES = (cst.Return, cst.Continue, cst.Break, cst.Raise)
# Methods whose result is the tensor they are called on, a view of it or a copy of its size on
# its device: a view (`view`, `transpose`, `[..., :-1, :]`) keeps the output's memory alive, and
# a copy is a second buffer as large. `.to(...)` is not one of them: it may go to the CPU.
_SAME_SIZE = frozenset({"view", "view_as", "reshape", "reshape_as", "flatten", "contiguous", "transpose", "permute",
                        "squeeze", "unsqueeze", "float", "half", "double", "bfloat16", "clone", "detach", "softmax",
                        "log_softmax"})
# Functions whose result is a new tensor the size of their first argument.
_SOFTMAX_FUNCTIONS = frozenset({"torch.nn.functional.softmax", "torch.nn.functional.log_softmax", "torch.softmax",
                                "torch.log_softmax", "torch.special.softmax", "torch.special.log_softmax"})
# What of a model's output is the output itself (the vocabulary-sized part): `outputs.logits`,
# `outputs["logits"]`; a loss or a shape read off it is not.
_OUTPUT_PARTS = re.compile(r"(\w*_)?logits|last_hidden_state")


def _forward_of(value: cst.BaseExpression, call_name: Callable[[cst.Call], Optional[str]]) -> Optional[cst.Call]:
    """`model(x)`, also reached through `.logits`, `[0]`, `.float()` or a softmax of it
    (`F.log_softmax(model(x), dim=-1)`, as large)."""
    while True:
        if type(value) is cst.Call:
            if value.args and not value.args[0].keyword and call_name(value) in _SOFTMAX_FUNCTIONS:
                value = value.args[0].value
                continue
            return value
        if type(value) in (cst.Attribute, cst.Subscript):
            value = value.value
        else:
            return None


def _shifts(bound: cst.Slice) -> bool:
    """`:-1` or `1:` (no step): the output less one position, as a language model's loss
    shifts its logits against its labels; a view of nearly all of it, and strided."""
    edge = bound.upper if bound.lower is None else bound.lower if bound.upper is None else None
    if edge is None or bound.step is not None:
        return False
    if type(edge) is cst.UnaryOperation and type(edge.operator) is cst.Minus:  # type: ignore[attr-defined]
        return edge is bound.upper and type(edge.expression) is cst.Integer and edge.expression.value == "1"  # type: ignore[attr-defined]
    return edge is bound.lower and type(edge) is cst.Integer and edge.value == "1"  # type: ignore[attr-defined]


def _made_from(value: cst.BaseExpression, strided: Dict[str, bool],
               call_name: Callable[[cst.Call], Optional[str]]) -> Optional[Tuple[bool, bool]]:
    """(whether it is a strided view, whether it is surely a copy as large) when `value` is one
    of the tensors `strided` names (each with whether it is a strided view), a view of it or a
    copy of its size (`outputs["logits"][..., :-1, :]`, `shift_logits.contiguous().view(n,
    -1)`: `contiguous()` of a strided view copies it; a softmax or log-softmax of it,
    `F.log_softmax(logits.float(), dim=-1)`); None when it is anything else, smaller ones
    included (an element `[0]`, a reduction, a loss read off the output). `call_name`: a
    call's import-aware name."""
    methods: List[str] = []  # outermost first
    sliced = False
    while True:
        kind = type(value)
        if kind is cst.Name:
            if value.value not in strided:  # type: ignore[attr-defined]
                return None
            view = strided[value.value]  # type: ignore[attr-defined]
            break
        if kind is cst.Attribute and _OUTPUT_PARTS.fullmatch(value.attr.value):  # type: ignore[attr-defined]
            value = value.value  # type: ignore[attr-defined]
        elif kind is cst.Subscript and all(type(e.slice) is cst.Slice or type(e.slice.value) is cst.Ellipsis  # type: ignore[attr-defined]
                                           for e in value.slice):  # type: ignore[attr-defined]
            bounded = [e.slice for e in value.slice if type(e.slice) is cst.Slice and  # type: ignore[attr-defined]
                       (e.slice.lower is not None or e.slice.upper is not None)]  # type: ignore[attr-defined]
            if not all(_shifts(bound) for bound in bounded):
                return None  # (`[:, -1:, :]`: a position of the output, not one as large)
            sliced = sliced or bool(bounded)
            value = value.value  # type: ignore[attr-defined]
        elif kind is cst.Subscript and len(value.slice) == 1 and type(value.slice[0].slice) is cst.Index and \
                type(value.slice[0].slice.value) is cst.SimpleString and \
                isinstance(value.slice[0].slice.value.evaluated_value, str) and \
                _OUTPUT_PARTS.fullmatch(value.slice[0].slice.value.evaluated_value):  # type: ignore[attr-defined]
            value = value.value  # type: ignore[attr-defined]
        elif kind is cst.Call and value.args and not value.args[0].keyword and \
                call_name(value) in _SOFTMAX_FUNCTIONS:  # type: ignore[arg-type, attr-defined]
            methods.append("softmax")
            value = value.args[0].value  # type: ignore[attr-defined]
        elif kind is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in _SAME_SIZE:  # type: ignore[attr-defined]
            methods.append(value.func.attr.value)  # type: ignore[attr-defined]
            value = value.func.value  # type: ignore[attr-defined]
        else:
            return None
    # read from the inside out: a slice makes a strided view, `contiguous()` of one copies it
    view = view or sliced and not methods
    copies = False
    for method in reversed(methods):
        if method in ("clone", "softmax", "log_softmax") or method == "contiguous" and (view or sliced):
            copies, view, sliced = True, False, False
    return view or (sliced and not copies), copies


# LLaMA-Factory's perplexity loop, for the examples
_PERPLEXITY = (
    "import torch\ncriterion = torch.nn.CrossEntropyLoss(reduction=\"none\")\nwith torch.no_grad():\n"
    "    for batch in dataloader:\n        batch = batch.to(model.device)\n        outputs = model(**batch)\n"
    "        shift_logits: torch.Tensor = outputs[\"logits\"][..., :-1, :]\n"
    "        shift_labels = batch[\"labels\"][..., 1:]\n"
    "        flatten_logits = shift_logits.contiguous().view(shift_labels.size(0) * shift_labels.size(1), -1)\n"
    "        token_logps = criterion(flatten_logits, shift_labels.contiguous().view(-1))\n"
    "        perplexities.extend(token_logps.view(shift_logits.size(0), -1).mean(-1).exp().tolist())\n"
)


# lm-evaluation-harness's Megatron-LM scorer, for the examples
_HARNESS = (
    "import torch\n\n\nclass MegatronLM:\n    @torch.no_grad()\n    def _model_forward(self, input_ids):\n"
    "        return self.model(input_ids)\n\n    def loglikelihood(self, chunks, targets):\n        scores = []\n"
    "        for input_ids in chunks:\n            logits = self._model_forward(input_ids.to(self.device))\n"
    "            log_probs = torch.nn.functional.log_softmax(logits.float(), dim=-1)\n"
    "            scores.append(log_probs[0, -1, targets[0]].item())\n"
)


class MissingDel(Rule):
    """
    ## What it does
    Finds a model output bound in the body of a loop without a backward (evaluation, inference)
    and still referenced when the next iteration's forward runs: nothing frees it between the
    end of one iteration and the rebinding in the next. The model may run through a helper of
    the module named for it that hands back its output (`self._model_forward(input_ids)`).
    Opt-in: whether it matters depends on the output's size, so the verifier decides.

    ## Why is this bad?
    `out = model(x)` allocates the new output while the name still holds the previous one, so
    the forward's peak holds two outputs: it matters when the output is large next to the
    forward's activations (language-model logits: batch x sequence x vocab). In a no-grad
    evaluation loop with vocabulary-sized outputs `del` took the peak from 326 to 237 MB on an
    H200; in training loops it changed nothing (the peak is in forward+backward, after the
    previous output was released), so loops with a backward are not reported.

    ## Example
    ```python
    with torch.no_grad():
        for x, y in loader:
            logits = model(x)  # batch x sequence x vocabulary
            total += criterion(logits.flatten(0, 1), y.flatten()).item()
    ```

    Use instead:
    ```python
    with torch.no_grad():
        for x, y in loader:
            logits = model(x)
            total += criterion(logits.flatten(0, 1), y.flatten()).item()
            del logits
    ```

    ## When it is not reported
    Loops with a backward (also in an enclosing loop or a helper), models of another framework
    by their name's prefix (`tf_model`, `onnx_model`, `ort_session`), models loaded on the CPU by
    `from_pretrained` with nothing placing them and handed to no call, in a module that moves
    nothing, names no device and that no device code of the project calls, a classifier's scores (the loop
    takes one class per example from them: `output.argmax(1)`), outputs that outlive the
    iteration anyway (appended, stored, returned, read after the loop or in the next
    iteration), outputs bound only on some paths (a `del` could fail), and bodies that already
    `del` them.

    ## Fix
    `del name` after the last statement of the loop body, with the names the body binds to the
    output, a view of it or a copy as large (`shift_logits = outputs["logits"][..., :-1, :]`,
    `flatten_logits = shift_logits.contiguous().view(n, -1)`, `log_probs =
    F.log_softmax(logits.float(), dim=-1)`): a `del` of the output alone frees nothing while a
    view of it is alive, and each copy, reported on its own, is another output's
    worth at the forward's peak.

    ## Fix safety
    Safe: the name is not read after the loop nor in the next iteration before it is bound
    again. No fix when the body ends by leaving the loop (`return`, `continue`, `raise`).
    """

    CODE = "MEM204"
    NAME = "missing-del"
    MESSAGE = "a forward output is still alive while the next iteration's forward runs"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.PEAK_LOWER
    DEFAULT_ON = False

    VALID = (
        # a TensorFlow model (`tf_model`, `onnx_model`: another framework's, by its name's prefix)
        "import torch\nimport transformers\n\ntf_model = transformers.TFBertModel.from_pretrained(\"bert-base-uncased\")\n"
        "model = transformers.BertModel.from_pretrained(\"bert-base-uncased\").cuda()\nfor batch in batches:\n"
        "    tf_out = tf_model(batch, training=False)\n    print(tf_out.last_hidden_state.shape)\n",
        "import torch\nwith torch.no_grad():\n    for x in loader:\n        out = model(x)\n        print(out.sum())\n"
        "        del out\n",
        # a training loop: the peak is in forward+backward, after rebinding released the old output
        "import torch\nfor x, y in loader:\n    logits = model(x)\n    loss = criterion(logits, y)\n"
        "    loss.backward()\n    optimizer.step()\n",
        "import torch\nouts = []\nfor x in loader:\n    out = model(x)\n    outs.append(out)\n",
        "import torch\nfor x in loader:\n    out = model(x)\nprint(out)\n",
        "import torch\nfor x in loader:\n    if x is not None:\n        out = model(x)\n        print(out.sum())\n",
        "import torch\nfor x in loader:\n    y = torch.relu(x)\n    print(y.sum())\n",
        "import torch\nprev = None\nfor x in loader:\n    if prev is not None:\n        print(prev)\n"
        "    out = model(x)\n    prev = out\n",
        # a classifier's scores: one class per example taken, small next to the activations
        "import torch\ncorrect = 0\nwith torch.no_grad():\n    for x, y in loader:\n        scores = model(x)\n"
        "        correct += (scores.argmax(dim=1) == y).sum().item()\n",
        # loaded on the CPU, in a script that names no device: no GPU peak
        "import torch\nfrom transformers import AutoModelForCausalLM\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2')\nwith torch.no_grad():\n"
        "    for ids in batches:\n        logits = model(ids).logits\n        print(logits.logsumexp(-1).mean())\n",
        # HF generate() results are not forward outputs with activations
        "import torch\nfor batch in loader:\n    ids = model.generate(**batch)\n    print(ids.shape)\n",
        # a helper not named for running the model, and ones named so that hand back host
        # values, a loss or a choice computed from the output
        _HARNESS.replace("_model_forward", "_score"),
        _HARNESS.replace("return self.model(input_ids)", "return self.model(input_ids).tolist()"),
        _HARNESS.replace("return self.model(input_ids)", "return torch.nn.functional.cross_entropy(self.model(input_ids), self.y)"),
        _HARNESS.replace("return self.model(input_ids)", "return self.model(input_ids).topk(5, dim=-1)"),
    )
    INVALID = (
        # what is not the output: its loss, its shape, a copy on the CPU
        Invalid(
            "import torch\nwith torch.no_grad():\n    for batch in loader:\n        outputs = model(**batch)\n"
            "        loss = outputs.loss\n        shape = outputs.logits.shape\n        logits = outputs.logits.to(\"cpu\")\n"
            "        total += loss.item() * shape[0]\n        print(logits.float().mean())\n",
            "import torch\nwith torch.no_grad():\n    for batch in loader:\n        outputs = model(**batch)\n"
            "        loss = outputs.loss\n        shape = outputs.logits.shape\n        logits = outputs.logits.to(\"cpu\")\n"
            "        total += loss.item() * shape[0]\n        print(logits.float().mean())\n        del outputs\n",
        ),
        # LLaMA-Factory's perplexity script: a view of the logits and a copy as large, deleted with them
        Invalid(_PERPLEXITY, _PERPLEXITY + "        del outputs, shift_logits, flatten_logits\n"),
        # lm-evaluation-harness's Megatron-LM scorer: the model run through a helper named for it,
        # and a log-softmax of its logits, as large
        Invalid(_HARNESS, _HARNESS + "            del logits, log_probs\n"),
        # the log-softmax of a forward bound instead of the forward: as large
        Invalid("import torch\nimport torch.nn.functional as F\nwith torch.no_grad():\n    for ids in batches:\n"
                "        log_probs = F.log_softmax(model(ids.cuda()), dim=-1)\n        print(log_probs[0, -1].max().item())\n",
                "import torch\nimport torch.nn.functional as F\nwith torch.no_grad():\n    for ids in batches:\n"
                "        log_probs = F.log_softmax(model(ids.cuda()), dim=-1)\n        print(log_probs[0, -1].max().item())\n"
                "        del log_probs\n"),
        # a model bound through `global` in a function is bound: it may have come back on a GPU
        Invalid(
            "import torch\n\n\ndef setup(path):\n    global model\n    model = torch.load(path)\n\n\n"
            "def run(net, loader):\n    for x in loader:\n        out = net(x)\n"
            "        print(out.sum())\n\n\nsetup(\"m.pt\")\nrun(model, loader)\n"
        ),
        # a helper called only by itself: nothing says what model it is given
        Invalid(
            "import torch\n\n\ndef refine(model, loader, rounds=0):\n    model.eval()\n"
            "    for x in loader:\n        out = model(x)\n        feats = out.mean(1)\n"
            "        print(feats.norm())\n    if rounds < 3:\n"
            "        refine(model, loader, rounds + 1)\n"
        ),
        Invalid(
            "import torch\ntotal = 0.0\nwith torch.no_grad():\n    for x, y in loader:\n        logits = model(x)\n"
            "        total += criterion(logits.flatten(0, 1), y.flatten()).item()\n",
            "import torch\ntotal = 0.0\nwith torch.no_grad():\n    for x, y in loader:\n        logits = model(x)\n"
            "        total += criterion(logits.flatten(0, 1), y.flatten()).item()\n        del logits\n",
        ),
        Invalid(
            "import torch\ndef run(model, loader):\n    for batch in loader:\n        out = model(**batch).logits\n"
            "        if out.isnan().any():\n            print('nan')\n",
            "import torch\ndef run(model, loader):\n    for batch in loader:\n        out = model(**batch).logits\n"
            "        if out.isnan().any():\n            print('nan')\n        del out\n",
        ),
        Invalid("import torch\nfor x in loader:\n    out = model(x)\n    print(out.sum())\n    continue\n"),
        # a model handed to a helper, which may place it (a module moves in place)
        Invalid("import torch\nimport helpers\nfrom transformers import AutoModelForCausalLM\n"
                "model = AutoModelForCausalLM.from_pretrained('gpt2')\nhelpers.place(model)\nwith torch.no_grad():\n"
                "    for ids in batches:\n        logits = model(ids).logits\n        print(logits.logsumexp(-1).mean())\n"),
    )

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1 or not type(node.targets[0].target) is cst.Name:
            return
        loops = self.facts.tree.loops_around(node)
        if not loops:
            return  # (asked first: naming the calls a value is made through costs more)
        loop = loops[0]
        facts = self.facts
        call = _forward_of(node.value, facts.names.call_name)
        if call is None or not (facts.roles.is_forward(call) or facts.values.forward_through_helper(call)):
            return
        if any(facts.roles.backwards_in(outer) for outer in facts.tree.loops_around(node)) or \
                facts.phase.in_training_function(node):
            return  # the peak is in forward+backward, after rebinding released the old output
        line = facts.tree.parent(node)
        if not type(line) is cst.SimpleStatementLine or facts.tree.parent(line) is not loop.body:
            return  # bound only on some paths: `del` could meet an unbound name
        name = node.targets[0].target.value
        if facts.runs_on_the_cpu([call]):
            return  # an inference script's model loaded on the CPU: no GPU peak to lower
        if facts.values.class_predictions_from(loop, name):
            return  # a classifier's scores: small next to the activations that made them
        loop_facts = self.facts.loop(loop, self.context.scope())
        if loop_facts.bindings_of(name) != 1 or loop_facts.escapes(name):
            return
        body = loop.body.body
        last = body[-1] if isinstance(body, (tuple, list)) else body
        made = self._made_from_output(body, line, name, loop_facts)
        names = ", ".join([name] + [made_name for made_name, _, _ in made])
        fix = None
        if last is not line and not (type(last) is cst.SimpleStatementLine
                                     and any(isinstance(s, _LEAVES) for s in last.body)):
            fix = Fix((InsertAfter(last, (cst.parse_statement(f"del {names}"),)),), Safety.SAFE,
                      f"`del {names}` at the end of the loop body")
        views = f" (`{'`, `'.join(n for n, _, _ in made)}` {'is' if len(made) == 1 else 'are'} made from it: " \
            f"a view keeps its memory, a copy is another as large)" if made else ""
        self.report(node, (
            f"in this loop without a backward, `{name}` (a forward output) is still alive when the next "
            f"iteration's forward runs, so the forward's peak holds two of them; that matters when the "
            f"output is large next to the activations (vocabulary-sized logits): `del {names}` at the end "
            f"of the loop body{views} (`memlint verify` measures it)"), fix)
        for made_name, statement, copies in made:
            if copies:
                self.report(statement, (
                    f"`{made_name}` is a copy of the forward output `{name}`, as large, and it too is still alive "
                    f"when the next iteration's forward runs: `del {names}` at the end of the loop body"))

    def _made_from_output(self, body: Sequence[cst.BaseStatement], line: cst.CSTNode, name: str,
                          loop_facts: LoopFacts) -> List[Tuple[str, cst.CSTNode, bool]]:
        """The names the loop body binds, once and at its own level, after the output, to the
        output itself, a view of it or a copy as large, in order, each with its assignment and
        whether it is a copy; none that outlives the iteration (a `del` of the output alone
        would free nothing while a view of it is alive: LLaMA-Factory's `shift_logits`)."""
        made: List[Tuple[str, cst.CSTNode, bool]] = []
        strided = {name: False}  # the names made from the output so far, each with whether it is a strided view
        after = False
        for statement in body:
            if statement is line:
                after = True
                continue
            if not after or type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1:
                continue
            small = statement.body[0]
            if type(small) is cst.Assign and len(small.targets) == 1:
                target, value = small.targets[0].target, small.value
            elif type(small) is cst.AnnAssign and small.value is not None:
                target, value = small.target, small.value
            else:
                continue
            if type(target) is not cst.Name:
                continue
            found = _made_from(value, strided, self.facts.names.call_name)
            if found is not None and loop_facts.bindings_of(target.value) == 1 and \
                    not loop_facts.escapes(target.value):
                strided[target.value] = found[0]
                made.append((target.value, small, found[1]))
        return made
