"""Time a decoding step whose KV cache waits for the GPU in every layer (MEM105).

litgpt's sliding-window `KVCache.forward` computes `input_pos.max().item()` to trim the cache:
one host-device wait per layer per generated token. The host cannot queue the next layer's
kernels until the GPU has finished the previous ones, so the GPU idles while Python launches
them. The same step given the position as a Python number (what `generate` already has)
queues every layer ahead. This script times both on a stand-in decoder (bf16, batch 1).

    python bench/layer_sync.py [--layers 32] [--dim 4096] [--tokens 200] [--repeats 5]

It needs a CUDA device; the figures it printed on an H200 are in docs/verified.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
from torch import nn


class Cache(nn.Module):
    def __init__(self, length: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("k", torch.zeros(1, length, dim), persistent=False)
        self.register_buffer("v", torch.zeros(1, length, dim), persistent=False)

    def forward(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor, last: int | None):
        self.k.index_copy_(1, input_pos, k)
        self.v.index_copy_(1, input_pos, v)
        end = (input_pos.max().item() if last is None else last) + 1  # the wait, or a number passed down
        return self.k[:, :end], self.v[:, :end]


class Layer(nn.Module):
    def __init__(self, length: int, dim: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)
        self.cache = Cache(length, dim)

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor, last: int | None) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        keys, values = self.cache(input_pos, k, v, last)
        scores = torch.softmax(q @ keys.transpose(1, 2) / math.sqrt(x.shape[-1]), dim=-1)
        x = x + self.out(scores @ values)
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def per_token_ms(layers: nn.ModuleList, dim: int, tokens: int, wait: bool) -> float:
    device = next(layers.parameters()).device
    x = torch.randn(1, 1, dim, device=device, dtype=torch.bfloat16)
    for warm in (True, False):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for pos in range(10 if warm else tokens):
            input_pos = torch.tensor([pos], device=device)
            h = x
            for layer in layers:
                h = layer(h, input_pos, None if wait else pos)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    return 1000 * elapsed / tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    with torch.device("cuda"):
        layers = nn.ModuleList(Layer(args.tokens + 16, args.dim) for _ in range(args.layers)).to(torch.bfloat16)
    runs: dict = {False: [], True: []}
    with torch.no_grad():
        for _ in range(args.repeats):  # interleaved, so that a slow spell of the host hits both
            for wait in (False, True):
                runs[wait].append(per_token_ms(layers, args.dim, args.tokens, wait))
    passed, waited = (statistics.median(runs[wait]) for wait in (False, True))
    print(f"{args.layers} layers, dim {args.dim}, bf16, batch 1, {args.tokens} tokens, median of {args.repeats}, "
          f"{torch.cuda.get_device_name()}")
    print(f"position passed down: {passed:.3f} ms/token (runs: {', '.join(f'{t:.2f}' for t in runs[False])})")
    print(f"`.item()` in each layer: {waited:.3f} ms/token (runs: {', '.join(f'{t:.2f}' for t in runs[True])}), "
          f"{waited / passed:.2f}x")


if __name__ == "__main__":
    main()
