"""MEM104 cat-in-loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Set

import libcst as cst

from memlint.analysis.dataflow import Use, sources_of, unpacked_position
from memlint.analysis.loops import FEW_ITERATIONS, Loop, LoopFacts, one_per_model_part, range_span
from memlint.analysis.tree import TreeIndex, argument, children, dotted_name, last_part
from memlint.findings import Fix, InsertAfter, InsertBefore, Replace, Safety
from memlint.rule import Claim, Invalid, Rule

_CAT = frozenset({"torch.cat", "torch.concat", "torch.concatenate"})


@dataclass(frozen=True)
class _Growth:
    """`acc = torch.cat((acc, piece), dim)` (`prepends`: `torch.cat((piece, acc))`); `first`:
    the test of `acc = first if acc is None else torch.cat((acc, piece))`, where the first value
    is taken whole."""

    name: str
    assign: cst.Assign
    call: cst.Call
    piece: cst.BaseExpression
    dim: Optional[cst.BaseExpression]
    prepends: bool
    first: Optional[cst.BaseExpression] = None  # the test choosing the first piece (its reads are no use)
    bindings: int = 1  # the statements that bind the accumulator in the loop


def _cat_branch(choice: cst.IfExp, name: str) -> Optional[cst.BaseExpression]:
    """The branch of `piece if acc is None else torch.cat((acc, piece))` (or `torch.cat(...) if
    acc is not None else piece`) taken once `acc` holds something; None for another test."""
    test = choice.test
    if type(test) is not cst.Comparison or len(test.comparisons) != 1 or type(test.left) is not cst.Name or \
            test.left.value != name or type(test.comparisons[0].comparator) is not cst.Name or \
            test.comparisons[0].comparator.value != "None":  # type: ignore[attr-defined]
        return None
    operator = type(test.comparisons[0].operator)
    if operator is cst.Is:
        return choice.orelse
    return choice.body if operator is cst.IsNot else None


def _if_statement_branch(tree: TreeIndex, node: cst.Assign, name: str) -> Optional[cst.BaseExpression]:
    """`if acc is None: acc = first` / `else: acc = torch.cat((acc, piece))` (or the test
    reversed), `node` the concatenation alone in its branch, the other branch one assignment to
    `acc`: the `if`'s test; None for any other shape."""
    line = tree.parent(node)
    block = tree.parent(line) if line is not None else None
    branch = tree.parent(block) if block is not None else None
    statement = tree.parent(branch) if type(branch) is cst.Else else branch
    if type(statement) is not cst.If or type(block) is not cst.IndentedBlock or len(block.body) != 1 or \
            type(line) is not cst.SimpleStatementLine or len(line.body) != 1:  # type: ignore[union-attr]
        return None
    choice = cst.IfExp(test=statement.test, body=cst.Name("body"), orelse=cst.Name("orelse"))  # type: ignore[union-attr]
    taken = _cat_branch(choice, name)
    if taken is None or (taken.value == "orelse") != (type(branch) is cst.Else):  # type: ignore[attr-defined]
        return None  # the concatenation is not in the branch taken once `acc` holds something
    other = statement.orelse.body if type(branch) is cst.Else else statement.body  # type: ignore[union-attr]
    if type(statement.orelse) is not cst.Else or type(other) is not cst.IndentedBlock or len(other.body) != 1:  # type: ignore[union-attr]
        return None
    first = other.body[0]
    if type(first) is not cst.SimpleStatementLine or len(first.body) != 1 or type(first.body[0]) is not cst.Assign:
        return None
    assign = first.body[0]
    if len(assign.targets) != 1 or type(assign.targets[0].target) is not cst.Name or \
            assign.targets[0].target.value != name:  # type: ignore[attr-defined]
        return None
    return statement.test  # type: ignore[union-attr]


class CatInLoop(Rule):
    """
    ## What it does
    Finds a tensor grown by concatenation on every iteration of a loop:
    `acc = torch.cat((acc, out))` (or `torch.cat((out, acc))`), where `acc` is carried from
    one iteration to the next; also `acc = out if acc is None else torch.cat((acc, out))`, the
    first piece taken whole (reported without a fix), and its `if acc is None:` / `else:` form.

    ## Why is this bad?
    Each `torch.cat` allocates a new tensor as large as everything gathered so far and copies all
    of it: n iterations copy O(n²) elements, and while the copy runs the old and the new
    accumulator are both alive, twice the memory of the result. Appending to a list and
    concatenating once after the loop copies each piece once.

    ## Example
    ```python
    preds = torch.empty(0, device=device)
    for x in loader:
        preds = torch.cat((preds, model(x).argmax(1)))
    ```

    Use instead:
    ```python
    preds = torch.empty(0, device=device)
    preds_parts = [preds]
    for x in loader:
        preds_parts.append(model(x).argmax(1))
    preds = torch.cat(preds_parts)
    ```

    ## When it is not reported
    Loops over a model's layers (`for layer in self.layers`), a dict's items, a short literal range,
    or the indices of a list filled once per part of a model (`for i in range(1, len(embs))`, one
    embedding per text encoder): dense connections, padding, features side by side, the growth is
    the design; loops not known to run many times (not a data loader, a tensor, a `range` or a
    `while`, and no forward in them); a `while` loop that grows it until it is long enough; a mask
    grown by a column of flags per step (`torch.cat([mask, ~done.reshape(bsz, 1)], dim=-1)`: a few
    bytes a step); autoregressive decoding, where the model reads the whole sequence every step (its
    forward costs far more than copying a few token ids), or where the pieces are the token ids each
    step picks and feeds back to the model (`torch.multinomial`, `topk`'s indices, `argmax`, or a
    name that says so: `sampled_tokens`); a loop that reads the accumulator back every iteration
    outside a step; an accumulator bound elsewhere in the loop too, and concatenations of more than
    two tensors.

    ## Fix
    Collects the pieces in a list started with the accumulator's value before the loop, and
    concatenates once after it (`torch.cat(parts[::-1])` when each piece was put in front, which
    keeps the order). Reads of the accumulator inside the loop under a periodic test
    (`if step % 100 == 0:`) become `torch.cat(parts)`. Reported without a fix when a step loop
    reads it otherwise (preallocate it at its final length and write each step into a slice
    instead), when it or a piece may be changed in place, or when the dimension changes in the loop.

    ## Fix safety
    Safe when the loop reads the accumulator nowhere else: the result is the same tensor, built
    by one concatenation. Unsafe when the loop reads it (periodically): each read now builds a
    new tensor, so writing into what it returns would no longer change the accumulator.
    """

    CODE = "MEM104"
    NAME = "cat-in-loop"
    MESSAGE = "a tensor grown by `torch.cat` every iteration copies everything gathered so far, each time"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.TIME_LOWER

    VALID = (
        # a model's forward over its groups of crops (a tensor of two or three boundaries)
        "import torch\nclass MultiCrop(torch.nn.Module):\n    def forward(self, x):\n"
        "        idx_crops = torch.cumsum(torch.tensor([2, 6]), 0)\n        start, output = 0, torch.empty(0)\n"
        "        for end in idx_crops:\n            out = self.backbone(torch.cat(x[start:end]))\n"
        "            output = torch.cat((output, out))\n            start = end\n        return self.head(output)\n",
        # ... over the pieces of one batch, gathered afresh for each: their results make one batch again
        "import torch\nfor path, im in dataset:\n    ims = torch.chunk(im, im.shape[0], 0)\n    pred = None\n"
        "    for image in ims:\n        if pred is None:\n            pred = model(image).unsqueeze(0)\n        else:\n"
        "            pred = torch.cat((pred, model(image).unsqueeze(0)), dim=0)\n    save(path, pred)\n",
        # ... over a few parts named in the code: concatenation is the design
        "import torch\nout = None\nfor part in (head, body, tail):\n    if out is None:\n        out = part\n"
        "    else:\n        out = torch.cat([out, part])\n",
        # grown only under the user's flag, else replaced by the last piece
        "import torch\n\n@torch.no_grad()\ndef embed(model, loader, device, keep_all):\n"
        "    feats = torch.empty(0, 16, device=device)\n    for x, _ in loader:\n        f = model(x.to(device))\n"
        "        feats = torch.cat([feats, f]) if keep_all else f\n    return feats\n",
        # ... the ids a helper picks (mamba's decoding, with a repetition penalty)
        "import torch\n\n\ndef decode(model, input_ids, max_length, penalty):\n    def get_logits(ids):\n"
        "        return model(ids).logits[:, -1]\n\n    scores, sequences, sequences_cat = [], [input_ids], input_ids\n"
        "    while not should_stop(sequences[-1], max_length):\n        scores.append(get_logits(sequences[-1]))\n"
        "        logits = apply_penalty(scores[-1].clone(), sequences_cat, penalty)\n"
        "        sampled_tokens = sample_tokens(logits)\n"
        "        sequences_cat = torch.cat([sequences_cat, sampled_tokens], dim=1)\n        sequences.append(sampled_tokens)\n"
        "    return sequences_cat\n",
        # decoding with a cache: the model reads only the last token, the ids it picks are kept by
        # `torch.cat` (a few integers a step beside its forward)
        "import torch\n\n@torch.no_grad()\ndef sample(model, x, steps, greedy):\n    out = x\n    past = None\n"
        "    for n in range(steps):\n        logits, past = model(x, past=past)\n"
        "        probs = torch.softmax(logits[:, -1], dim=-1)\n        if greedy:\n"
        "            _, x = torch.topk(probs, k=1, dim=-1)\n        else:\n"
        "            x = torch.multinomial(probs, num_samples=1)\n        out = torch.cat((out, x), dim=1)\n"
        "    return out\n",
        # ... picked with a chained assignment (`picked = _, x = torch.topk(...)`)
        "import torch\n\n@torch.no_grad()\ndef sample(model, x, steps):\n    out = x\n    past = None\n"
        "    for n in range(steps):\n        logits, past = model(x, past=past)\n"
        "        picked = _, x = torch.topk(logits[:, -1], k=1, dim=-1)\n        out = torch.cat((out, x), dim=1)\n"
        "    return out\n",
        # decoding: each step's forward reads the whole sequence; copying its ids is nothing beside it
        "import torch\nwith torch.no_grad():\n    for i in range(args.words):\n        out = model(ids)\n"
        "        nxt = out[-1].argmax().view(1, 1)\n        ids = torch.cat([ids, nxt], 0)\n",
        "import torch\nfor _ in range(steps):\n    logits, _ = model(idx[:, -block:])\n"
        "    idx = torch.cat((idx, logits[:, -1].argmax(-1, keepdim=True)), dim=1)\n",
        # ... with a cache: the ids picked by a method of the last position's logits, fed back alone
        "import torch\n\ndef generate(model, idx, max_new_tokens):\n    with torch.no_grad():\n"
        "        logits = model(idx, use_cache=True)\n        for _ in range(max_new_tokens):\n"
        "            next_idx = logits[:, -1].argmax(dim=-1, keepdim=True)\n"
        "            idx = torch.cat([idx, next_idx], dim=1)\n            logits = model(next_idx, use_cache=True)\n"
        "    return idx\n",
        # dense connections over a model's layers: the growth is the architecture
        "import torch\nclass Block(torch.nn.Module):\n    def forward(self, x):\n        for layer in self.layers:\n"
        "            x = torch.cat([x, layer(x)], 1)\n        return x\n",
        # a short literal range, a dict's items, a list of unknown length
        "import torch\nfor _ in range(3):\n    x = torch.cat((x, pad), dim=-1)\n",
        "import torch\nfor k, feat in kwargs.items():\n    x = torch.cat([x, feat], dim=1)\n",
        "import torch\nfor state in states:\n    found = torch.cat((found, state.tokens()))\n",
        # grown until it is long enough
        "import torch\nwhile lengths.sum() < need:\n    lengths = torch.cat([lengths, sample()])\n",
        # a new tensor every iteration, not an accumulator
        "import torch\nfor x, y in loader:\n    both = torch.cat((x, y))\n    model(both)\n",
        # bound twice in the loop
        "import torch\nfor x in loader:\n    acc = torch.cat((acc, x))\n    acc = acc[-100:]\n",
        # a list kept and concatenated once: the recommended form
        "import torch\nparts = []\nfor x in loader:\n    parts.append(model(x))\nout = torch.cat(parts)\n",
        # one piece per text encoder of the model (SDXL's two): the list's length is the model's
        "import torch\n\n@torch.no_grad()\ndef encode(self, prompt):\n    embs = []\n"
        "    for tokenizer, text_encoder in zip(self.tokenizers, self.text_encoders):\n"
        "        embs.append(text_encoder(tokenizer(prompt).cuda())[0])\n    emb = embs[0]\n"
        "    for i in range(1, len(embs)):\n        emb = torch.cat([emb, embs[i]], dim=2)\n    return emb\n",
        # ... also per batch, the accumulator started anew for each
        "import torch\n\n@torch.no_grad()\ndef embed_all(self, loader):\n    outs = []\n    for batch in loader:\n"
        "        embs = []\n        for tokenizer, text_encoder in zip(self.tokenizers, self.text_encoders):\n"
        "            embs.append(text_encoder(tokenizer(batch).cuda())[0])\n        emb = embs[0]\n"
        "        for i in range(1, len(embs)):\n            emb = torch.cat([emb, embs[i]], dim=2)\n"
        "        outs.append(emb)\n    return outs\n",
        # a mask grown by a column of flags per step: a few bytes beside the step's forward
        "import torch\n\ndef generate(model, tokens, max_new_tokens, bsz, eos):\n"
        "    stop_mask = torch.ones(bsz, 1, dtype=torch.int32, device=tokens.device)\n"
        "    done = torch.zeros(bsz, dtype=torch.bool, device=tokens.device)\n    for _ in range(max_new_tokens):\n"
        "        stop_mask = torch.cat([stop_mask, ~done.reshape(bsz, 1)], dim=-1)\n        logits = model(tokens)[:, -1]\n"
        "        nxt = logits.argmax(-1)\n        done = done | (nxt == eos)\n"
        "        tokens = torch.cat([tokens, nxt[:, None]], dim=-1)\n    return tokens, stop_mask\n",
    )
    INVALID = (
        # activations named like tokens (a ViT's output tokens), collected, not fed back
        Invalid(
            "import torch\n\n\n@torch.no_grad()\n"
            "def extract(vit, images, device, batch_size=64):\n"
            "    feats = torch.empty(0, 197, 768, device=device)\n"
            "    for i in range(0, len(images), batch_size):\n"
            "        output_tokens = vit.forward_features(images[i:i + batch_size].to(device))\n"
            "        feats = torch.cat([feats, output_tokens], dim=0)\n    return feats\n",
            "import torch\n\n\n@torch.no_grad()\n"
            "def extract(vit, images, device, batch_size=64):\n"
            "    feats = torch.empty(0, 197, 768, device=device)\n    feats_parts = [feats]\n"
            "    for i in range(0, len(images), batch_size):\n"
            "        output_tokens = vit.forward_features(images[i:i + batch_size].to(device))\n"
            "        feats_parts.append(output_tokens)\n"
            "    feats = torch.cat(feats_parts, dim=0)\n    return feats\n",
        ),
        # one piece per text encoder, but gathered over the whole data set
        Invalid(
            "import torch\n\n@torch.no_grad()\ndef embed_all(self, loader):\n    out = torch.empty(0, device='cuda')\n"
            "    for batch in loader:\n        embs = []\n"
            "        for tokenizer, text_encoder in zip(self.tokenizers, self.text_encoders):\n"
            "            embs.append(text_encoder(tokenizer(batch).cuda())[0])\n"
            "        for i in range(len(embs)):\n            out = torch.cat([out, embs[i]])\n    return out\n"
        ),
        # pseudo-labels picked over a data loader and fed to the student: collected over the data set
        Invalid(
            "import torch\n\n\ndef self_train(teacher, student, loader, opt):\n    teacher.eval()\n"
            "    all_pseudo = torch.empty(0, dtype=torch.long, device=\"cuda\")\n    for batch in loader:\n"
            "        ids = batch[\"input_ids\"].cuda()\n        with torch.no_grad():\n"
            "            pseudo = teacher(ids).logits[:, 0].argmax(-1)\n        out = student(ids, labels=pseudo)\n"
            "        out.loss.backward()\n        opt.step()\n        opt.zero_grad(set_to_none=True)\n"
            "        all_pseudo = torch.cat([all_pseudo, pseudo])\n    return all_pseudo\n"
        ),
        # predictions (an argmax) collected over a data set: not ids fed back to the model
        Invalid(
            "import torch\n\n@torch.no_grad()\ndef predict(model, loader, device):\n    model.eval()\n"
            "    all_preds = torch.empty(0, dtype=torch.long, device=device)\n    for x, y in loader:\n"
            "        logits = model(x.to(device))\n        preds = logits.argmax(-1)\n"
            "        all_preds = torch.cat([all_preds, preds])\n    return all_preds\n"
        ),
        # the first piece taken whole by an `if`, the rest concatenated in its `else`
        Invalid(
            "import torch\n\ndef embed(model, texts, tokenizer, device):\n    model.eval()\n    embeddings = None\n"
            "    with torch.no_grad():\n        for text in texts:\n"
            "            ids = tokenizer(text, return_tensors=\"pt\").input_ids.to(device)\n"
            "            emb = model(ids).last_hidden_state.mean(1)\n            if embeddings is None:\n"
            "                embeddings = emb\n            else:\n                embeddings = torch.cat([embeddings, emb])\n"
            "    return embeddings\n"
        ),
        Invalid(
            "import torch\npreds = torch.empty(0, device=device)\nfor x in loader:\n"
            "    preds = torch.cat((preds, model(x).argmax(1)))\nprint(preds.shape)\n",
            "import torch\npreds = torch.empty(0, device=device)\npreds_parts = [preds]\nfor x in loader:\n"
            "    preds_parts.append(model(x).argmax(1))\npreds = torch.cat(preds_parts)\nprint(preds.shape)\n",
        ),
        # prepending: the list is reversed once at the end, keeping the order
        Invalid(
            "import torch\ndef history(steps, state):\n    trace = state\n    for t in range(steps):\n"
            "        state = step(state)\n        trace = torch.cat([state, trace], dim=1)\n    return trace\n",
            "import torch\ndef history(steps, state):\n    trace = state\n    trace_parts = [trace]\n"
            "    for t in range(steps):\n        state = step(state)\n        trace_parts.append(state)\n"
            "    trace = torch.cat(trace_parts[::-1], dim=1)\n    return trace\n",
        ),
        # read only when logging: unsafe, the read concatenates the list
        Invalid(
            "import torch\nfeats = torch.zeros(0, 16)\nfor i, x in enumerate(loader):\n"
            "    feats = torch.cat((feats, encoder(x)))\n    if i % 100 == 0:\n        print(feats.shape)\n",
            "import torch\nfeats = torch.zeros(0, 16)\nfeats_parts = [feats]\nfor i, x in enumerate(loader):\n"
            "    feats_parts.append(encoder(x))\n    if i % 100 == 0:\n        print(torch.cat(feats_parts).shape)\n"
            "feats = torch.cat(feats_parts)\n",
        ),
        # the first piece taken whole, the others concatenated: reported, no fix
        Invalid(
            "import torch\n\n@torch.no_grad()\ndef embed(model, loader, device):\n    feats = None\n"
            "    for x, _ in loader:\n        f = model(x.to(device))\n"
            "        feats = torch.cat([feats, f]) if feats is not None else f\n    return feats\n"
        ),
        # a step loop that reads all of it back every step (not through a forward): reported, no fix
        Invalid(
            "import torch\nfor x in loader:\n    feats = torch.cat([feats, model(x)], 0)\n"
            "    spread = torch.cdist(feats, feats).mean()\n"
        ),
        # a decoding loop over a progress bar (`trange`, bound by a walrus): the logits no forward reads
        Invalid(
            "import torch\nfrom tqdm import trange\n\ndef generate(model, tokens, n):\n"
            "    kept = model(tokens)[:, -1:]\n    for _ in (pbar := trange(n)):\n"
            "        nxt, logits = step(model, tokens)\n"
            "        tokens = torch.cat([tokens, nxt], dim=-1)\n"
            "        kept = torch.cat([kept, logits], dim=1)\n    return tokens, kept\n",
            "import torch\nfrom tqdm import trange\n\ndef generate(model, tokens, n):\n"
            "    kept = model(tokens)[:, -1:]\n    kept_parts = [kept]\n"
            "    for _ in (pbar := trange(n)):\n        nxt, logits = step(model, tokens)\n"
            "        tokens = torch.cat([tokens, nxt], dim=-1)\n        kept_parts.append(logits)\n"
            "    kept = torch.cat(kept_parts, dim=1)\n    return tokens, kept\n",
        ),
        # flags concatenated along the batch over a whole loader: they grow with the data
        Invalid(
            "import torch\n\ndevice = \"cuda\"\nmodel = model.to(device)\n"
            "correct = torch.empty(0, dtype=torch.bool, device=device)\nwith torch.no_grad():\n"
            "    for x, y in loader:\n        pred = model(x.to(device)).argmax(-1)\n"
            "        correct = torch.cat([correct, pred == y.to(device)])\n"
            "print(correct.float().mean())\n",
            "import torch\n\ndevice = \"cuda\"\nmodel = model.to(device)\n"
            "correct = torch.empty(0, dtype=torch.bool, device=device)\nwith torch.no_grad():\n"
            "    correct_parts = [correct]\n    for x, y in loader:\n"
            "        pred = model(x.to(device)).argmax(-1)\n"
            "        correct_parts.append(pred == y.to(device))\n"
            "    correct = torch.cat(correct_parts)\nprint(correct.float().mean())\n",
        ),
    )

    def visit_Assign(self, node: cst.Assign) -> None:
        growth = self._growth(node)
        if growth is None:
            return
        loops = self.facts.tree.loops_around(node)
        if not loops or self._designed(loops[0], growth.name) or _a_column_of_flags(growth, loops[0]):
            return
        if self.facts.in_model_code(loops[0]) and not (type(loops[0]) is cst.While or
                                                       self.facts.steps.iterates_loader(loops[0])):
            return  # a model's own loop (over crop sizes, chunks, heads): its pieces are few, by design
        loop: Loop = loops[0]  # type: ignore[assignment]
        if self._over_pieces(loop) and any(self.facts.values.reset_in_iteration(outer, growth.name, node)
                                           for outer in loops[1:]):
            return  # the pieces of one batch, gathered afresh for each: their results make one batch again
        facts = self.facts.loop(loop, self.facts.tree.scope_of(loop))
        if facts.bindings_of(growth.name) != growth.bindings or not self.facts.scopes.in_effect(growth.name, loop):
            return
        steps = self.facts.steps.does_step_work(loop)
        if not steps and not self._long(loop):
            return  # a loop of unknown length over a few items: nothing worth a rewrite
        if steps and not self.facts.steps.iterates_loader(loop) and self._picked_tokens(growth.piece, loop):
            return  # a decoding step's picked token ids: a few integers a step beside a forward
        reads = [use for use in facts.flow.uses if use.name == growth.name and not use.store
                 and use.node is not self._acc_node(growth)
                 and not (growth.first is not None and self.facts.tree.contains(growth.first, use.node))]
        if type(loop) is cst.While and growth.name in sources_of(loop.test):
            return  # grown until it is long enough: the loop is about its length
        message = (f"`{growth.name}` is grown by `torch.cat` on every iteration: each one copies everything gathered "
                   f"so far and holds the old and the new `{growth.name}` at once; ")
        if reads and not all(self.facts.steps.periodic(use.node) for use in reads):
            if not steps or self._fed_to_the_model(loop, growth.name):
                return  # read back every iteration: the growth is how it works, or a forward per step dwarfs it
            self.report(node, message + (
                "the loop feeds all of it back every step, so preallocate it at its final length and write "
                "each step into a slice"))
            return
        message += "append the pieces to a list and concatenate once after the loop"
        self.report(node, message, self._fix(loop, facts, growth, reads) if growth.first is None else None)

    def _long(self, loop: Loop) -> bool:
        """The loop runs many times: a `while`, a data loader, a `range` that is not short, a tensor."""
        if type(loop) is cst.While:
            return True
        return self.facts.steps.iterates_loader(loop) or self.facts.syncs.many(loop.iter, loop)

    def _picked_tokens(self, piece: cst.BaseExpression, loop: Loop) -> bool:
        """The piece is the token ids a decoding step picks (`x = torch.multinomial(probs, 1)`,
        `_, x = torch.topk(probs, k=1)`, `logits.argmax(-1)`), bound so in the loop and fed back
        to the model, or so fed back and named so (`sampled_tokens`, from mamba's
        `sample_tokens(...)` helper): one integer per sequence a step, nothing a maintainer would
        rewrite beside the step's forward. Not predictions collected over a data set."""
        if type(piece) is not cst.Name or not self._fed_to_the_model(loop, piece.value):
            return False  # (ids a decoding step feeds back to its model, not predictions collected)
        if self.facts.outputs.names_token_ids(piece.value):
            return True
        binds = [b for b in self.facts.scopes.bindings_seen(piece.value, piece) if self.facts.tree.contains(loop, b.node)]
        return bool(binds) and all(b.kind == "assign" and self._picks(b.value, piece.value, b) for b in binds)

    def _picks(self, value: Optional[cst.BaseExpression], name: str, bind) -> bool:  # type: ignore[no-untyped-def]
        if type(value) is not cst.Call:
            return False
        func = value.func  # type: ignore[attr-defined]
        called = last_part(self.facts.names.call_name(value) or dotted_name(func) or "")  # type: ignore[arg-type]
        if not called and type(func) is cst.Attribute:  # `logits[:, -1].argmax(-1)`: a method of any tensor
            called = func.attr.value
        if called in ("multinomial", "argmax"):
            return bind.whole
        if called == "topk" and not bind.whole:  # `_, x = torch.topk(...)`: the indices
            return unpacked_position(bind.node, name) == 1
        return False

    def _fed_to_the_model(self, loop: cst.CSTNode, name: str) -> bool:
        """A forward in the loop reads the accumulator (or a slice of it): autoregressive decoding,
        where each step's forward over the whole sequence costs far more than copying its ids. A
        function of this module that runs a model counts (mamba's `get_logits(sequences[-1])`)."""
        facts = self.facts
        derived = facts.values.derived_names(facts.tree.scope_of(loop), {name})
        for call, _ in facts.calls.calls_in(loop, follow=False):
            target = facts.scopes.resolve(call)
            forward = facts.roles.is_forward(call) or target is not None and (
                target.name.value in ("forward", "__call__") or bool(facts.roles.forwards_in(target, follow=False)))
            if forward and any(derived & set(sources_of(arg.value)) for arg in call.args):
                return True
        return False

    def _growth(self, node: cst.Assign) -> Optional[_Growth]:
        if len(node.targets) != 1 or not type(node.targets[0].target) is cst.Name:
            return None
        name = node.targets[0].target.value
        call, test, bindings = node.value, None, 1
        if type(call) is cst.IfExp:  # `acc = piece if acc is None else torch.cat((acc, piece))`
            call, test = _cat_branch(call, name), call.test  # type: ignore[attr-defined]
        elif type(call) is cst.Call and self.facts.names.call_name(call) in _CAT:
            test = _if_statement_branch(self.facts.tree, node, name)  # `if acc is None: acc = piece` / `else:`
            bindings = 1 if test is None else 2
        if not type(call) is cst.Call or self.facts.names.call_name(call) not in _CAT:
            return None
        tensors = argument(call, "tensors", 0)
        dim = argument(call, "dim", 1)
        if tensors is None or any(a.keyword is not None and a.keyword.value not in ("tensors", "dim")
                                  for a in call.args) or any(a.star for a in call.args):
            return None
        if not type(tensors.value) in (cst.Tuple, cst.List) or len(tensors.value.elements) != 2:
            return None
        first, second = (e.value if type(e) is cst.Element else None for e in tensors.value.elements)
        if first is None or second is None:
            return None
        if type(first) is cst.Name and first.value == name and name not in sources_of(second):
            piece, prepends = second, False
        elif type(second) is cst.Name and second.value == name and name not in sources_of(first):
            piece, prepends = first, True
        else:
            return None
        return _Growth(name, node, call, piece, dim.value if dim else None, prepends, test, bindings)

    @staticmethod
    def _acc_node(growth: _Growth) -> cst.CSTNode:
        elements = growth.call.args[0].value.elements  # type: ignore[attr-defined]
        return elements[1 if growth.prepends else 0].value

    def _designed(self, loop: cst.CSTNode, accumulator: str) -> bool:
        """A loop over a model's layers or a short literal range: concatenation is its design."""
        if not type(loop) is cst.For:
            return False
        iterable = loop.iter
        while type(iterable) is cst.Call and type(iterable.func) is cst.Name and \
                iterable.func.value in ("enumerate", "zip", "reversed") and iterable.args:
            iterable = iterable.args[0].value
        if type(iterable) in (cst.Tuple, cst.List):
            return True
        if type(iterable) is cst.Call and type(iterable.func) is cst.Attribute and \
                iterable.func.attr.value in ("items", "values", "keys"):
            return True
        if type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value == "range":
            span = range_span(iterable)
            if span is not None:
                return span < FEW_ITERATIONS
            return any("self." in cst.Module([]).code_for_node(a.value) or
                       self._counts_model_parts(a.value, loop, accumulator) for a in iterable.args)
        dotted = dotted_name(iterable) or ""
        if type(iterable) is cst.Call and type(iterable.func) is cst.Attribute:
            dotted = dotted_name(iterable.func.value) or ""  # self.blocks.children()
        return dotted.startswith("self.") or self.facts.receivers.is_model(iterable)

    def _counts_model_parts(self, bound: cst.BaseExpression, loop: cst.For, accumulator: str) -> bool:
        """`len(embs)`, where `embs` holds one element per part of a model (one per text encoder),
        and the accumulator starts anew in each iteration of every loop around this one (else
        it grows with the data: `out` made before a loop over batches)."""
        if type(bound) is not cst.Call or type(bound.func) is not cst.Name or bound.func.value != "len" or \
                len(bound.args) != 1 or type(bound.args[0].value) is not cst.Name:  # type: ignore[attr-defined]
            return False
        tree, scopes = self.facts.tree, self.facts.scopes
        starts = [bind.node for bind in scopes.bindings_seen(accumulator, loop) if not tree.contains(loop, bind.node)]
        if not starts or not all(tree.contains(outer, start) for outer in tree.loops_around(loop) for start in starts):
            return False
        return one_per_model_part(bound.args[0].value.value, loop, scopes)  # type: ignore[attr-defined]

    def _over_pieces(self, loop: Loop) -> bool:
        """`for image in torch.chunk(batch, n)` (or a name bound once to such pieces)."""
        iterable = loop.iter if type(loop) is cst.For else None
        if type(iterable) is cst.Name:
            binds = self.facts.scopes.bindings_seen(iterable.value, loop)  # type: ignore[union-attr]
            return len(binds) == 1 and binds[0].kind == "assign" and binds[0].whole and self._pieces(binds[0].value)
        return self._pieces(iterable)

    def _pieces(self, expr: Optional[cst.BaseExpression]) -> bool:
        """`torch.chunk(x, n)`, `x.split(k)`, `x.unbind(0)`: the pieces of one tensor."""
        if type(expr) is not cst.Call:
            return False
        qualified = self.facts.names.call_name(expr)  # type: ignore[arg-type]
        if qualified is not None:
            return qualified in ("torch.chunk", "torch.split", "torch.unbind", "torch.tensor_split")
        func = expr.func  # type: ignore[attr-defined]
        return type(func) is cst.Attribute and func.attr.value in ("chunk", "split", "unbind", "tensor_split")

    def _fix(self, loop: Loop, facts: LoopFacts, growth: _Growth, reads: List[Use]) -> Optional[Fix]:
        if growth.dim is not None and not facts.is_invariant(growth.dim):
            return None
        if "#" in cst.Module([]).code_for_node(growth.call):
            return None  # a comment inside the call would be lost
        pieces = self._data_names(growth.piece)
        if not pieces or not pieces <= facts.bound or any(facts.changes_in_place(n) for n in pieces) or \
                facts.changes_in_place(growth.name) or \
                growth.name in self.facts.scope_uses(self.facts.tree.scope_of(loop)).declared_global:
            return None
        parts = self._parts_name(growth.name)
        code = cst.Module([]).code_for_node
        order = f"{parts}[::-1]" if growth.prepends else parts
        dim = f", dim={code(growth.dim)}" if growth.dim is not None else ""
        joined = f"{code(growth.call.func)}({order}{dim})"
        edits = [
            InsertBefore(loop, (cst.parse_statement(f"{parts} = [{growth.name}]"),)),
            Replace(growth.assign, cst.Expr(cst.parse_expression(f"{parts}.append({code(growth.piece)})"),
                                            semicolon=growth.assign.semicolon)),
            InsertAfter(loop, (cst.parse_statement(f"{growth.name} = {joined}"),)),
        ]
        edits += [Replace(use.node, cst.parse_expression(joined)) for use in reads]
        return Fix(tuple(edits), Safety.UNSAFE if reads else Safety.SAFE,  # type: ignore[arg-type]
                   f"collect the pieces in `{parts}` and concatenate once after the loop")

    def _data_names(self, expr: cst.BaseExpression) -> Set[str]:
        """The names whose data the piece holds or is computed from (not the models or
        functions it calls): the piece is made afresh each iteration when they all are."""
        found: Set[str] = set()
        stack: List[cst.CSTNode] = [expr]
        while stack:
            node = stack.pop()
            if type(node) is cst.Name:
                found.add(node.value)
            elif type(node) is cst.Attribute:
                stack.append(node.value)
            elif type(node) is cst.Call:
                stack.extend(a.value for a in node.args)
                func = node.func
                if type(func) is cst.Attribute and not self.facts.roles.is_forward(node) and \
                        self.facts.names.qualified_name(func) is None:
                    stack.append(func.value)
            elif isinstance(node, cst.BaseExpression):
                stack.extend(c for c in children(node) if isinstance(c, cst.BaseExpression))
                stack.extend(c.value for c in children(node) if type(c) in (cst.Element, cst.Arg))
                stack.extend(c.slice.value for c in children(node)  # type: ignore[attr-defined]
                             if type(c) is cst.SubscriptElement and type(c.slice) is cst.Index)
        return found

    def _parts_name(self, name: str) -> str:
        taken = self.facts.identifiers
        candidate, number = f"{name}_parts", 2
        while candidate in taken:
            candidate = f"{name}_parts{number}"
            number += 1
        return candidate


_FLAG_CASTS = frozenset({"bool", "int", "long", "float", "to"})


def _a_column_of_flags(growth: _Growth, loop: cst.CSTNode) -> bool:
    """A mask grown by one column of flags per token of a decoding loop, along its last
    dimension (`torch.cat([mask, ~done.reshape(bsz, 1)], dim=-1)`, `(tok == eos).unsqueeze(-1)`
    with `dim=1`, in a loop over `range(max_new_tokens)`): a bit or a word per sequence and
    step, whose copying is nothing beside the step that computes it. Not flags concatenated
    along the batch or flattened (`(pred == y).view(-1)`), nor in a loop over data, where
    they grow with the data."""
    if growth.dim is None or _unit(growth.dim) is None:
        return False
    iterable = loop.iter if type(loop) is cst.For else None  # type: ignore[attr-defined]
    if type(iterable) is cst.NamedExpr:  # `(pbar := trange(n))`
        iterable = iterable.value  # type: ignore[attr-defined]
    if not (type(loop) is cst.While or type(iterable) is cst.Call and
            last_part(dotted_name(iterable.func)) in ("range", "trange")):  # type: ignore[attr-defined]
        return False
    piece, column, flags = growth.piece, False, False
    while True:  # `~done.reshape(bsz, 1)`, `(tok == eos).unsqueeze(1).int()`, `flags[:, None]`
        kind = type(piece)
        if kind is cst.Call and type(piece.func) is cst.Attribute and piece.func.attr.value in _FLAG_CASTS:  # type: ignore[attr-defined]
            piece = piece.func.value  # type: ignore[attr-defined]
        elif kind is cst.Call and type(piece.func) is cst.Attribute and _to_a_column(piece):  # type: ignore[attr-defined]
            column, piece = True, piece.func.value  # type: ignore[attr-defined]
        elif kind is cst.Subscript and any(type(e.slice) is cst.Index and type(e.slice.value) is cst.Name and  # type: ignore[attr-defined]
                                           e.slice.value.value == "None" for e in piece.slice):  # type: ignore[attr-defined]
            column, piece = True, piece.value  # type: ignore[attr-defined]
        elif kind is cst.UnaryOperation and type(piece.operator) in (cst.BitInvert, cst.Not):  # type: ignore[attr-defined]
            flags, piece = True, piece.expression  # type: ignore[attr-defined]
        else:
            break
    return column and (flags or type(piece) is cst.Comparison)


def _to_a_column(call: cst.Call) -> bool:
    """`.reshape(bsz, 1)`, `.view(-1, 1)`, `.unsqueeze(-1)` / `.unsqueeze(1)`: one column."""
    method = call.func.attr.value  # type: ignore[attr-defined]
    args = [a.value for a in call.args if a.keyword is None]
    if not args:
        return False
    unit = _unit(args[-1])
    if method in ("reshape", "view"):
        return len(args) >= 2 and unit == 1
    return method == "unsqueeze" and unit is not None


def _unit(expr: cst.BaseExpression) -> Optional[int]:
    """1 for `1`, -1 for `-1` (a dimension counted from either end), None for anything else."""
    if type(expr) is cst.Integer and expr.value == "1":  # type: ignore[attr-defined]
        return 1
    if type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Minus and _unit(expr.expression) == 1:  # type: ignore[attr-defined]
        return -1
    return None
