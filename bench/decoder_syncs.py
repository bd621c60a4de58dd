"""Time a training step whose decoder loop waits for the GPU at every output frame (MEM105).

Real-Time-Voice-Cloning's Tacotron keeps its reduction factor `r` as a 0-d integer buffer of
the decoder. Its `forward` loops over the output frames, calling the decoder once per `r`
frames; each call slices the decoder's projection with the buffer (`[:, :, :self.r]`: the
host reads the GPU value) and the loop reads it again through a property (`self.r` returns
`self.decoder.r.item()`). Both are the same number on every iteration: read once before the
loop and passed down, the host queues the whole decoder loop ahead of the GPU. This script
times one training step (forward over the frames, backward, optimizer step) both ways, on a
stand-in of the same shape (LSTM cells, fp32).

    python bench/decoder_syncs.py [--batch 32] [--frames 400] [--dim 512] [--repeats 10]

It needs a CUDA device; the figures it printed are in docs/verified.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Optional

import torch
from torch import nn


class Decoder(nn.Module):
    max_r = 20

    def __init__(self, n_mels: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("r", torch.tensor(2, dtype=torch.int))
        self.n_mels = n_mels
        self.prenet = nn.Sequential(nn.Linear(n_mels, dim), nn.ReLU(), nn.Linear(dim, dim), nn.ReLU())
        self.cell1 = nn.LSTMCell(dim, dim)
        self.cell2 = nn.LSTMCell(dim, dim)
        self.mel_proj = nn.Linear(dim, n_mels * self.max_r, bias=False)

    def forward(self, frame, state, r: Optional[int]):
        (h1, c1), (h2, c2) = state
        h1, c1 = self.cell1(self.prenet(frame), (h1, c1))
        h2, c2 = self.cell2(h1, (h2, c2))
        mels = self.mel_proj(h2).view(frame.size(0), self.n_mels, self.max_r)
        mels = mels[:, :, :self.r] if r is None else mels[:, :, :r]  # the wait, or a number passed down
        return mels, ((h1, c1), (h2, c2))


class Tacotron(nn.Module):
    def __init__(self, n_mels: int, dim: int) -> None:
        super().__init__()
        self.decoder = Decoder(n_mels, dim)
        self.dim = dim

    @property
    def r(self) -> int:
        return self.decoder.r.item()

    def forward(self, mels: torch.Tensor, hoisted: bool) -> torch.Tensor:
        batch, _, steps = mels.shape
        zeros = torch.zeros(batch, self.dim, device=mels.device)
        state = ((zeros, zeros), (zeros, zeros))
        r = self.r if hoisted else None  # one wait before the loop
        outputs, stops = [], []
        for t in range(0, steps, self.r if r is None else r):
            frame = mels[:, :, t - 1] if t > 0 else torch.zeros_like(mels[:, :, 0])
            out, state = self.decoder(frame, state, r)
            outputs.append(out)
            stops.extend([out.mean(1)] * (self.r if r is None else r))  # the wait, per iteration
        return torch.cat(outputs, dim=2)


def step_ms(model: Tacotron, mels: torch.Tensor, hoisted: bool, repeats: int) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    times = []
    for attempt in range(repeats + 2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model(mels, hoisted)
        loss = (out - mels[:, :, :out.shape[2]]).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        if attempt >= 2:  # (two warm-up steps)
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--frames", type=int, default=400)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Tacotron(80, args.dim).cuda()
    mels = torch.randn(args.batch, 80, args.frames, device="cuda")
    print(f"{torch.cuda.get_device_name()}, batch {args.batch}, {args.frames} frames, r = {model.r}, "
          f"{args.frames // model.r} decoder steps a training step")
    for hoisted in (False, True, False, True):
        what = "r read once before the loop" if hoisted else "r read from the GPU at every decoder step (twice)"
        print(f"  {what}: {step_ms(model, mels, hoisted, args.repeats):.1f} ms a step (median of {args.repeats})")


if __name__ == "__main__":
    main()
