"""MEM203's periodic forward on a GPU: samples decoded every few training steps by a decoder
whose parameters ask for gradients, bound until the next sampling, with and without no_grad.

    python bench/periodic_sample.py [--batch 64] [--samples 16] [--size 256] [--steps 12] [--every 4]

A latent-diffusion training step shaped like SiT's: a convolutional denoiser is trained on
latents (4 x size/8 x size/8); every `--every` steps the loop decodes `--samples` latents to
images with a VAE-like decoder (three upsampling stages to size x size) that nothing freezes,
as SiT's `samples = vae.decode(samples / 0.18215).sample` does, and reads their mean for a log.
`samples` stays bound until the next sampling. Run two ways from the same seed: the decode
under `torch.no_grad()` (memlint's fix) first, then recorded by autograd as written; printed:
the peak of the training steps between two samplings (the statistics reset after each
sampling) and of the whole run, and whether both runs give the same losses and images.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before CUDA starts

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def _block(channels_in: int, channels_out: int) -> nn.Module:
    return nn.Sequential(nn.GroupNorm(32, channels_in), nn.SiLU(), nn.Conv2d(channels_in, channels_out, 3, padding=1),
                         nn.GroupNorm(32, channels_out), nn.SiLU(), nn.Conv2d(channels_out, channels_out, 3, padding=1))


class Decoder(nn.Module):
    """A VAE decoder's shape: 4 latent channels up to an image, three 2x upsamplings."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(4, 256, 3, padding=1)
        self.stages = nn.ModuleList([_block(256, 256), _block(256, 128), _block(128, 64)])
        self.out = nn.Conv2d(64, 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.stem(z)
        for stage in self.stages:
            x = stage(F.interpolate(x, scale_factor=2.0, mode="nearest"))
        return self.out(x)


class Denoiser(nn.Module):
    def __init__(self, width: int = 256) -> None:
        super().__init__()
        self.inp = nn.Conv2d(4, width, 3, padding=1)
        self.blocks = nn.ModuleList(_block(width, width) for _ in range(4))
        self.outp = nn.Conv2d(width, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.outp(h)


def run(no_grad: bool, args: argparse.Namespace) -> tuple:
    torch.manual_seed(0)
    model, vae = Denoiser().cuda(), Decoder().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    side = args.size // 8
    generator = torch.Generator().manual_seed(1)
    latents = [torch.randn(args.batch, 4, side, side, generator=generator) for _ in range(args.steps)]
    zs = torch.randn(args.samples, 4, side, side, generator=generator).cuda()
    losses, images, between = [], [], 0
    for step, x in enumerate(latents):
        x = x.cuda()
        noise = torch.randn_like(x)
        loss = F.mse_loss(model(x + noise), noise)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % args.every == 0:
            torch.cuda.synchronize()
            between = max(between, torch.cuda.max_memory_allocated())
            if no_grad:
                with torch.no_grad():
                    samples = vae(zs / 0.18215)
            else:
                samples = vae(zs / 0.18215)
            images.append(samples.mean().item())
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
    torch.cuda.synchronize()
    between = max(between, torch.cuda.max_memory_allocated())
    return between, losses, images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=4)
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; batch {args.batch} latents of "
          f"{args.size // 8}x{args.size // 8}, {args.samples} samples decoded to {args.size}x{args.size} "
          f"every {args.every} steps")
    fixed = run(True, args)
    recorded = run(False, args)
    mib = 2 ** 20
    print(f"decode recorded, samples kept: peak between samplings {recorded[0] / mib:9.1f} MiB")
    print(f"decode under no_grad:          peak between samplings {fixed[0] / mib:9.1f} MiB  "
          f"({fixed[0] / recorded[0]:.2f}x)")
    print(f"same losses: {recorded[1] == fixed[1]}, same images: {recorded[2] == fixed[2]}")


if __name__ == "__main__":
    main()
