"""A tiled sampler: each denoising step runs the model on every tile, then merges the tiles in
a helper that empties the cache (FaithDiff's `grids_inverse`, MEM501 on a sampler's step).

    memlint verify bench/tiled_sampler.py --select MEM501

The loop over timesteps is the step; the loop over tiles inside it runs the model several
times a step. memlint reports the `empty_cache()` in the merge helper, which runs once per
denoising step, and its fix removes it; the verifier times the sampling loop as written and as
fixed. Sizes: a 128x128 latent of 4 channels cut into four 64x64 tiles, a classifier-free
batch of 2, a stack of 3x3 convolutions 256 channels wide (about 40 GFLOP a tile).
"""

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Tiles:
    """Cuts a latent into four tiles and blends them back."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.half = size // 2

    def grids(self, latent: torch.Tensor) -> torch.Tensor:
        h = self.half
        return torch.cat([latent[:, :, i:i + h, j:j + h] for i in (0, h) for j in (0, h)])

    def grids_inverse(self, outs: torch.Tensor) -> torch.Tensor:
        h = self.half
        merged = torch.zeros(1, outs.shape[1], self.size, self.size, device=outs.device)
        for k, (i, j) in enumerate((i, j) for i in (0, h) for j in (0, h)):
            merged[:, :, i:i + h, j:j + h] = outs[k:k + 1]
        del outs
        torch.cuda.empty_cache()
        return merged


class Sampler:
    def __init__(self, unet: torch.nn.Module, size: int) -> None:
        self.unet = unet
        self.tiles = Tiles(size)

    @torch.no_grad()
    def __call__(self, latent: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        for i, t in enumerate(timesteps):
            grid = []
            for tile in self.tiles.grids(latent).split(1):
                pair = torch.cat([tile, tile])  # classifier-free guidance: unconditioned and conditioned
                uncond, cond = self.unet(pair).chunk(2)
                grid.append(tile - 0.02 * (uncond + 7.5 * (cond - uncond)))
            latent = self.tiles.grids_inverse(torch.cat(grid))
        return latent


width = 256
layers = [torch.nn.Conv2d(4, width, 3, padding=1)]
for _ in range(8):
    layers += [torch.nn.SiLU(), torch.nn.Conv2d(width, width, 3, padding=1)]
layers += [torch.nn.SiLU(), torch.nn.Conv2d(width, 4, 3, padding=1)]
unet = torch.nn.Sequential(*layers).to(device).eval()
sampler = Sampler(unet, 128)
latent = sampler(torch.randn(1, 4, 128, 128, device=device), torch.arange(400, 0, -1))
print(f"latent mean {latent.mean().item():.6f}")
