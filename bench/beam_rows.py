"""MEM105's per-hypothesis loop of a beam search on a GPU: element reads row by row, against
one read before the loop, against no read at all.

    python bench/beam_rows.py [--rows 40] [--vocab 1024] [--steps 100] [--repeat 5]

The duration constraint of a multichannel beam search (fairseq's speech_dlm generator): on every
decoding step, each hypothesis whose duration counter is still on may only repeat its previous
token, so every other entry of its row of log-probabilities is set to -inf. Each step also runs a
small model (one linear layer over the vocabulary) so that the device has work to wait for. Three
ways to apply the constraint:

- per row: `if copy[j]:` and `lprobs[j, :prev] = -inf` with `prev = tokens[j, step]`, each a
  wait for the GPU (the code memlint reports);
- read once: `copy.tolist()` and `tokens[:, step].tolist()` before the loop, then the same loop
  on host values (one wait per step);
- on the device: one `masked_fill` with a mask built by comparing against the previous tokens
  (no wait).

Printed: the median time per decoding step of each, and whether all three give the same
log-probabilities.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Callable, List

import torch


def per_row(lprobs: torch.Tensor, copy: torch.Tensor, tokens: torch.Tensor, step: int) -> None:
    for j in range(copy.size(0)):
        if copy[j]:
            prev = tokens[j, step]
            lprobs[j, :prev] = -math.inf
            lprobs[j, prev + 1:] = -math.inf


def read_once(lprobs: torch.Tensor, copy: torch.Tensor, tokens: torch.Tensor, step: int) -> None:
    copies, prevs = copy.tolist(), tokens[:, step].tolist()
    for j, (copied, prev) in enumerate(zip(copies, prevs)):
        if copied:
            lprobs[j, :prev] = -math.inf
            lprobs[j, prev + 1:] = -math.inf


def on_device(lprobs: torch.Tensor, copy: torch.Tensor, tokens: torch.Tensor, step: int) -> None:
    vocab = torch.arange(lprobs.size(1), device=lprobs.device)
    others = vocab[None, :] != tokens[:, step, None]
    lprobs.masked_fill_(copy[:, None] & others, -math.inf)


def decode(apply: Callable[..., None], model: torch.nn.Linear, start: torch.Tensor, counters: torch.Tensor,
           steps: int) -> List[torch.Tensor]:
    """`steps` decoding steps of greedy search under the duration constraint; the log-probabilities
    of each step."""
    rows = start.size(0)
    tokens = torch.zeros(rows, steps + 1, dtype=torch.long, device=start.device)
    hidden, seen = start, []
    for step in range(steps):
        lprobs = torch.log_softmax(model(hidden), dim=-1)
        copy = counters[:, step] != 1
        apply(lprobs, copy, tokens, step)
        tokens[:, step + 1] = lprobs.argmax(-1)
        hidden = torch.tanh(hidden + lprobs.exp() @ model.weight)
        seen.append(lprobs)
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40, help="hypotheses (batch x beam)")
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = torch.nn.Linear(args.hidden, args.vocab, device=device)
    start = torch.randn(args.rows, args.hidden, device=device)
    counters = torch.randint(1, 4, (args.rows, args.steps), device=device)  # about two rows in three copy
    ways = {"per row (reported)": per_row, "read once": read_once, "on the device": on_device}
    results = {}
    with torch.no_grad():
        for _ in range(2):  # warm every way, then keep the second round
            for label, apply in ways.items():
                times = []
                for _ in range(args.repeat):
                    torch.cuda.synchronize()
                    started = time.perf_counter()
                    seen = decode(apply, model, start, counters, args.steps)
                    torch.cuda.synchronize()
                    times.append((time.perf_counter() - started) / args.steps)
                results[label] = (statistics.median(times), seen)
    reference = results["per row (reported)"][1]
    print(f"{args.rows} hypotheses, vocabulary {args.vocab}, {args.steps} decoding steps, {torch.cuda.get_device_name()}")
    for label, (per_step, seen) in results.items():
        same = all(torch.equal(a, b) for a, b in zip(seen, reference))
        print(f"{label:20s} {per_step * 1e3:8.3f} ms a step   same log-probabilities: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
