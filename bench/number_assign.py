"""MEM103's number assigned into a tensor, on a GPU: a moved tensor of the number against the
number itself.

    python bench/number_assign.py [--rows 640] [--vocab 32000] [--steps 200] [--repeat 5]

The step of a beam search (fairseq's sequence generators): the decoder's log-probabilities of
every hypothesis, then `lprobs[lprobs != lprobs] = -inf` to rule out NaNs, then the next tokens.
The NaN guard is written two ways, `torch.tensor(-math.inf).to(lprobs)` (what memlint reports)
and `-math.inf`. Printed: each one's median time per step, how many times per step CUDA's
sync debug mode saw the host wait for the device, and whether both give the same tokens.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from typing import List, Tuple

import torch


def decode(moved: bool, weight: torch.Tensor, hidden: torch.Tensor, steps: int) -> List[torch.Tensor]:
    chosen = []
    for _ in range(steps):
        lprobs = torch.log_softmax(hidden @ weight, dim=-1)
        if moved:
            lprobs[lprobs != lprobs] = torch.tensor(-math.inf).to(lprobs)
        else:
            lprobs[lprobs != lprobs] = -math.inf
        tokens = lprobs.argmax(-1)
        hidden = torch.tanh(hidden + weight[:, tokens].T)
        chosen.append(tokens)
    return chosen


def waits_per_step(moved: bool, weight: torch.Tensor, hidden: torch.Tensor) -> int:
    """Host waits CUDA's sync debug mode reports over one step."""
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            decode(moved, weight, hidden, 1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in seen)


def measure(moved: bool, weight: torch.Tensor, hidden: torch.Tensor, steps: int,
            repeat: int) -> Tuple[float, List[torch.Tensor]]:
    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        started = time.perf_counter()
        chosen = decode(moved, weight, hidden, steps)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) / steps)
    return statistics.median(times), chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=640, help="hypotheses (batch x beam)")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda")
    weight = torch.randn(args.hidden, args.vocab, device=device) / args.hidden ** 0.5
    hidden = torch.randn(args.rows, args.hidden, device=device)
    results = {}
    with torch.no_grad():
        for moved in (True, False, True, False):  # warm both, then keep the second round
            results[moved] = measure(moved, weight, hidden, args.steps, args.repeat)
        waits = {moved: waits_per_step(moved, weight, hidden) for moved in (True, False)}
    print(f"{args.rows} hypotheses, vocabulary {args.vocab}, {args.steps} steps, {torch.cuda.get_device_name()}")
    for moved, label in ((True, "torch.tensor(-inf).to(lprobs)"), (False, "-math.inf")):
        per_step, _ = results[moved]
        print(f"{label:32s} {per_step * 1e3:8.3f} ms a step   host waits a step: {waits[moved]}")
    same = all(torch.equal(a, b) for a, b in zip(results[True][1], results[False][1]))
    print(f"same tokens: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
