"""MEM102's `torch.where` operand on a GPU: a tensor of one number against the number itself.

    python bench/where_operand.py [--nodes 2708] [--heads 8] [--repeat 20]

A graph-attention step at Cora's size (8 heads, 2,708 nodes): scores `e` (heads x N x N), masked
by the graph's adjacency, then softmax, a product with the features and backward. The masked
scores are computed two ways, `torch.where(adj > 0, e, -9e16 * torch.ones_like(e))` and
`torch.where(adj > 0, e, -9e16)`; printed: each one's peak memory over the step, its median time
per step, and whether the two give the same result and gradient.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def step(e: torch.Tensor, adj: torch.Tensor, h: torch.Tensor, number_operand: bool) -> torch.Tensor:
    if number_operand:
        masked = torch.where(adj > 0, e, -9e16)
    else:
        mask = -9e16 * torch.ones_like(e)
        masked = torch.where(adj > 0, e, mask)
    out = torch.softmax(masked, dim=-1) @ h
    out.sum().backward()
    return out.detach()


def measure(number_operand: bool, e: torch.Tensor, adj: torch.Tensor, h: torch.Tensor, repeat: int):
    times = []
    for _ in range(repeat):
        e.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        out = step(e, adj, h, number_operand)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return torch.cuda.max_memory_allocated(), statistics.median(times), out, e.grad.clone()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2708)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    n, device = args.nodes, torch.device("cuda")
    e = torch.randn(args.heads, n, n, device=device, requires_grad=True)
    adj = (torch.rand(n, n, device=device) < 0.002).float() + torch.eye(n, device=device)
    h = torch.randn(args.heads, n, args.hidden, device=device)
    results = {}
    for number_operand in (False, True, False, True):  # warm both, then keep the second round
        results[number_operand] = measure(number_operand, e, adj, h, args.repeat)
    for number_operand, label in ((False, "tensor of -9e16"), (True, "the number -9e16")):
        peak, seconds, _, _ = results[number_operand]
        print(f"{label:18} peak {peak / 2**20:8.1f} MiB   {seconds * 1e3:7.3f} ms per step")
    same = torch.equal(results[False][2], results[True][2]) and torch.equal(results[False][3], results[True][3])
    print(f"same result and gradient: {same}")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
