"""MEM203's metric forward on a GPU: a second pass run only for a metric, with and without no_grad.

    python bench/metric_forward.py [--batch 64] [--frames 500] [--channels 256] [--layers 6] [--steps 6]

A training step shaped like a pitch predictor's: a convolutional model predicts a distribution
over bins per frame and is trained on it; the same step runs the model's `inference` (the
forward again, then a conversion) only to compute an L1 metric read with `.item()`. Run two
ways from the same seed, with deterministic kernels: the metric pass under `torch.no_grad()`
(memlint's fix) first, then recorded by autograd as written; printed: each run's peak memory,
and whether the two give the same losses, metrics and weights.

The peak statistics are never reset: the recorded run, measured second, is the larger, so the
process's own peak is that run's, and `memlint verify bench/metric_forward.py` (which wraps the
recorded pass in no_grad too) compares the two as well.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before CUDA starts

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Predictor(nn.Module):
    def __init__(self, vocab: int, channels: int, layers: int, bins: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, channels)
        self.convs = nn.ModuleList(nn.Conv1d(channels, channels, 5, padding=2) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(channels) for _ in range(layers))
        self.dropout = nn.Dropout(0.1)
        self.proj = nn.Linear(channels, bins)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for conv, norm in zip(self.convs, self.norms):
            x = self.dropout(norm(x + F.relu(conv(x.transpose(1, 2))).transpose(1, 2)))
        return torch.sigmoid(self.proj(x))

    def inference(self, tokens: torch.Tensor) -> torch.Tensor:
        probs = self(tokens)
        bins = torch.arange(probs.size(-1), device=probs.device, dtype=probs.dtype)
        return (probs * bins).sum(-1) / probs.sum(-1)


def run(no_grad: bool, args: argparse.Namespace) -> tuple:
    torch.manual_seed(0)
    model = Predictor(100, args.channels, args.layers, 50).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 100, (args.batch, args.frames), generator=generator),
                torch.rand(args.batch, args.frames, 50, generator=generator))
               for _ in range(args.steps)]
    losses, metrics = [], []
    for tokens, target in batches:
        tokens, target = tokens.cuda(), target.cuda()
        probs = model(tokens)
        if no_grad:
            with torch.no_grad():
                raw = model.inference(tokens)
        else:
            raw = model.inference(tokens)
        loss = F.binary_cross_entropy(probs, target)
        metrics.append(F.l1_loss(raw, target.argmax(-1).float()).item())
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
    return peak, losses, metrics, weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--frames", type=int, default=500)
    parser.add_argument("--channels", type=int, default=256)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; batch {args.batch}, {args.frames} frames, "
          f"{args.channels} channels, {args.layers} layers")
    fixed = run(True, args)
    recorded = run(False, args)
    mib = 2 ** 20
    print(f"metric pass recorded:      peak {recorded[0] / mib:9.1f} MiB")
    print(f"metric pass under no_grad: peak {fixed[0] / mib:9.1f} MiB  ({fixed[0] / recorded[0]:.2f}x)")
    print(f"same losses: {recorded[1] == fixed[1]}, same metrics: {recorded[2] == fixed[2]}, "
          f"same weights: {torch.equal(recorded[3], fixed[3])}")


if __name__ == "__main__":
    main()
