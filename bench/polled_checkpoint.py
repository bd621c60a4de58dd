"""What a process pays to read a training checkpoint's epoch from a GPU-saved file (MEM502).

fast-autoaugment's search driver waits for its workers by loading each worker's checkpoint
every ten seconds and reading `["epoch"]`. The workers save the model, the optimizer and an
EMA from the GPU, so `torch.load(path)` puts all of it back on that GPU in the driver, a
process that otherwise uses no GPU. This script saves such a checkpoint (a stand-in model of
the given size, with Adam's state) from the GPU, then, in fresh processes, polls it the
driver's way with and without `map_location="cpu"` and prints the GPU memory each process
took (its allocator's peak, and whether it started CUDA at all).

    python bench/polled_checkpoint.py [--params 50] [--polls 5]

It needs a CUDA device; the figures it printed are in docs/verified.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import torch

_POLL = """
import sys, torch
path, polls, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "cpu"
epochs = []
for _ in range(polls):
    latest = torch.load(path, map_location="cpu") if cpu else torch.load(path)
    epochs.append(latest["epoch"])
started = torch.cuda.is_initialized()
peak = torch.cuda.max_memory_allocated() / 2**20 if started else 0.0
print(f"{started} {peak:.0f}")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, default=50, help="model size, millions of parameters")
    parser.add_argument("--polls", type=int, default=5)
    args = parser.parse_args()
    width = 1000
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(max(1, args.params)))).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(8, width, device="cuda")).sum().backward()
    optimizer.step()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "checkpoint.pth")
        torch.save({"epoch": 3, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
        size = os.path.getsize(path) / 2**20
        print(f"{torch.cuda.get_device_name()}: a checkpoint of {size:.0f} MiB (model and Adam's state), "
              f"saved from the GPU, polled {args.polls} times for its epoch")
        for where in ("gpu", "cpu"):
            out = subprocess.run([sys.executable, "-c", _POLL, path, str(args.polls), where],
                                 capture_output=True, text=True, check=True).stdout.split()
            started, peak = out[0] == "True", float(out[1])
            how = "torch.load(path)" if where == "gpu" else 'torch.load(path, map_location="cpu")'
            print(f"  {how}: CUDA started: {started}; GPU memory at its peak: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
