"""What a slice kept of each iteration's output costs on a GPU (MEM202's view case, and MEM204's
`del` of an output with the views and copies made from it).

    python bench/view_kept.py [--rows 400] [--length 160] [--vocabulary 33]

1. ESM's masked marginals: for each of `--length` positions a forward with grad off gives
   log-probabilities of shape 1 x rows x length x vocabulary (float32), and the loop keeps the
   row-0 slice at its own position: `probs[:, 0, i]` (a view, as written) against
   `probs[:, 0, i].clone()` (memlint's fix).
2. LLaMA-Factory's perplexity loop: a no-grad forward (whose own peak, as an LLM's, is above
   what the loss needs) whose logits (batch 4 x 1,024 tokens x 32,000, bf16) are sliced (`shift_logits`, a view) and made contiguous (`flatten_logits`, a
   copy), six batches, with nothing deleted, with `del outputs` alone, and with `del outputs,
   shift_logits, flatten_logits` (memlint's fix).
3. lm-evaluation-harness's Megatron-LM scorer: the same stand-in model run through a helper
   (`_model_forward`), its bf16 logits turned into float32 log-probabilities
   (`log_softmax(logits.float(), dim=-1)`, a copy twice as large) and a few read back, six
   chunks, with nothing deleted, with `del logits` alone, and with `del logits, log_probs`
   (memlint's fix).

Prints, per run, the peak device memory (torch.cuda.max_memory_allocated) and what is still
allocated after the loop, in MiB, and whether the variants give the same numbers. Needs CUDA.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn

MIB = 2 ** 20


def _mib(value: int) -> str:
    return f"{value / MIB:,.0f} MiB"


def masked_marginals(rows: int, length: int, vocabulary: int, copy: bool) -> torch.Tensor:
    """The loop of ESM's `predict.py` for the MSA Transformer, with a stand-in model."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(vocabulary, 64), nn.Linear(64, vocabulary)).cuda().eval()
    tokens = torch.randint(vocabulary, (1, rows, length))
    kept = []
    for i in range(length):
        masked = tokens.clone()
        masked[0, 0, i] = 0
        with torch.no_grad():
            probs = torch.log_softmax(model(masked.cuda()), dim=-1)
        kept.append(probs[:, 0, i].clone() if copy else probs[:, 0, i])
    return torch.cat(kept, dim=0)


class WideLM(nn.Module):
    """A stand-in language model whose forward, as a real one's, holds more than its logits
    while it runs: a 1 GiB intermediate (4 x 1,024 x 131,072 bf16), gone when it returns."""

    def __init__(self, vocabulary: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocabulary, 256)
        self.head = nn.Linear(256, vocabulary)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        wide = self.embed(ids).repeat(1, 1, 512)
        return self.head(wide.view(*ids.shape, 512, 256).mean(-2))


def perplexities(deleted: tuple) -> list:
    """The loop of LLaMA-Factory's `cal_ppl.py`, with a stand-in model that returns logits."""
    torch.manual_seed(0)
    vocabulary, batch, tokens = 32000, 4, 1024
    model = WideLM(vocabulary).cuda().to(torch.bfloat16)
    criterion = nn.CrossEntropyLoss(reduction="none")
    found = []
    with torch.no_grad():
        for _ in range(6):
            ids = torch.randint(vocabulary, (batch, tokens), device="cuda")
            outputs = {"logits": model(ids)}
            shift_logits = outputs["logits"][..., :-1, :]
            shift_labels = ids[..., 1:]
            flatten_logits = shift_logits.contiguous().view(shift_labels.size(0) * shift_labels.size(1), -1)
            token_logps = criterion(flatten_logits, shift_labels.contiguous().view(-1))
            found.extend(token_logps.view(batch, -1).mean(-1).exp().tolist())
            if "outputs" in deleted:
                del outputs
            if "shift_logits" in deleted:
                del shift_logits
            if "flatten_logits" in deleted:
                del flatten_logits
    return found


class Scorer:
    """lm-evaluation-harness's Megatron-LM scorer, with the stand-in model."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.vocabulary = 32000
        self.model = WideLM(self.vocabulary).cuda().to(torch.bfloat16)

    @torch.no_grad()
    def _model_forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)

    def loglikelihoods(self, deleted: tuple) -> list:
        found = []
        generator = torch.Generator(device="cuda").manual_seed(0)
        for _ in range(6):
            input_ids = torch.randint(self.vocabulary, (4, 1024), device="cuda", generator=generator)
            logits = self._model_forward(input_ids)
            log_probs = torch.nn.functional.log_softmax(logits.float(), dim=-1)
            for i in range(4):
                found.append(log_probs[i, -1, input_ids[i, -1]].item())
            if "logits" in deleted:
                del logits
            if "log_probs" in deleted:
                del log_probs
        return found


def _measured(run):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    result = run()
    return result, torch.cuda.max_memory_allocated() - start, torch.cuda.memory_allocated() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--length", type=int, default=160)
    parser.add_argument("--vocabulary", type=int, default=33)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA")
    print(f"masked marginals, {args.rows} rows x {args.length} positions x {args.vocabulary}:")
    results = []
    for label, copy in (("view kept (as written)", False), ("slice cloned (the fix)", True)):
        result, peak, left = _measured(lambda: masked_marginals(args.rows, args.length, args.vocabulary, copy))
        results.append(result)
        print(f"  {label:24} peak {_mib(peak):>12}   after the loop {_mib(left):>12}")
        del result
    print(f"  same numbers: {torch.equal(results[0], results[1])}")
    del results
    print("perplexity loop, 6 batches of 4 x 1,024 tokens, vocabulary 32,000, bf16:")
    values = []
    for label, deleted in (("nothing deleted", ()), ("del outputs", ("outputs",)),
                           ("del all three (the fix)", ("outputs", "shift_logits", "flatten_logits"))):
        found, peak, _ = _measured(lambda: perplexities(deleted))
        values.append(found)
        print(f"  {label:24} peak {_mib(peak):>12}")
    print(f"  same numbers: {values[0] == values[1] == values[2]}")
    print("Megatron-LM scorer, 6 chunks of 4 x 1,024 tokens, vocabulary 32,000, bf16 logits, float32 log-probabilities:")
    scorer = Scorer()
    values = []
    for label, deleted in (("nothing deleted", ()), ("del logits", ("logits",)),
                           ("del logits, log_probs (fix)", ("logits", "log_probs"))):
        found, peak, _ = _measured(lambda: scorer.loglikelihoods(deleted))
        values.append(found)
        print(f"  {label:27} peak {_mib(peak):>12}")
    print(f"  same numbers: {values[0] == values[1] == values[2]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
