"""What keeping every sampling step on the GPU costs (MEM202, grad-free loop): an analog of a
diffusion sampler that appends each step's image to a list it uses only when asked for all
timesteps, against the same loop without the list and with the list on the CPU.

    python bench/sampling_steps_kept.py [--batch 16] [--size 128] [--steps 250]

Prints the peak device memory of each variant (torch.cuda.max_memory_allocated) in MiB. Needs
CUDA; `--device cpu` only checks that the three variants run and return the same image.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn


class Denoiser(nn.Module):
    def __init__(self, channels: int = 3, width: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(channels, width, 3, padding=1), nn.SiLU(),
                                 nn.Conv2d(width, width, 3, padding=1), nn.SiLU(),
                                 nn.Conv2d(width, channels, 3, padding=1))

    def forward(self, x: torch.Tensor, t: int) -> torch.Tensor:
        return self.net(x) * (1.0 / (t + 1))


@torch.inference_mode()
def sample(model: nn.Module, shape, steps: int, keep: str, device: str) -> torch.Tensor:
    generator = torch.Generator(device=device).manual_seed(0)
    img = torch.randn(shape, device=device, generator=generator)
    imgs = [img] if keep != "none" else None
    for t in reversed(range(steps)):
        img = img - 0.01 * model(img, t)
        if keep == "device":
            imgs.append(img)
        elif keep == "cpu":
            imgs.append(img.cpu())
    return img


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    model = Denoiser().to(args.device).eval()
    shape = (args.batch, 3, args.size, args.size)
    results = {}
    for keep in ("device", "cpu", "none"):
        if args.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        out = sample(model, shape, args.steps, keep, args.device)
        peak = torch.cuda.max_memory_allocated() / 2**20 if args.device == "cuda" else float("nan")
        results[keep] = out
        print(f"steps kept {keep:>6}: peak {peak:9.1f} MiB")
    same = all(torch.equal(results["none"].cpu(), r.cpu()) for r in results.values())
    print(f"one step: {4 * args.batch * 3 * args.size ** 2 / 2**20:.1f} MiB; same image from all variants: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
