"""Whether a GAN generator step that keeps its discriminators' per-layer feature maps bound
costs memory (MEM207's feature maps): a HiFi-GAN-shaped step (batch 16 x 8,192 samples; a
1-D conv generator; a multi-period discriminator of five periods and a multi-scale one of three
scales, each returning its outputs and the list of every layer's feature maps) trained four
steps, with `fmap_f_r, fmap_f_g, fmap_s_r, fmap_s_g` bound through the step into the next one,
and deleted once the feature-matching loss is computed (the rule's fix).

    python bench/feature_maps_kept.py

Prints the peak device memory of each run's last step (torch.cuda.max_memory_allocated), in
MiB. Needs CUDA.
"""

from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SAMPLES, STEPS = 16, 8192, 4
Maps = List[torch.Tensor]


class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Conv1d(80, 256, 7, padding=3), nn.LeakyReLU(0.1),
                                    nn.ConvTranspose1d(256, 128, 16, 8, padding=4), nn.LeakyReLU(0.1),
                                    nn.ConvTranspose1d(128, 64, 16, 8, padding=4), nn.LeakyReLU(0.1),
                                    nn.ConvTranspose1d(64, 32, 8, 4, padding=2), nn.LeakyReLU(0.1),
                                    nn.Conv1d(32, 1, 7, padding=3), nn.Tanh())

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.layers(mel)


def _layers(convs: nn.ModuleList, post: nn.Module, x: torch.Tensor) -> Tuple[torch.Tensor, Maps]:
    """A discriminator's score and the feature map of every layer on the way (HiFi-GAN's)."""
    maps = []
    for conv in convs:
        x = F.leaky_relu(conv(x), 0.1)
        maps.append(x)
    x = post(x)
    maps.append(x)
    return x.flatten(1), maps


class PeriodDiscriminator(nn.Module):
    def __init__(self, period: int) -> None:
        super().__init__()
        self.period = period
        channels = [1, 32, 128, 512, 1024, 1024]
        self.convs = nn.ModuleList(nn.Conv2d(a, b, (5, 1), (3 if b != 1024 else 1, 1), padding=(2, 0))
                                   for a, b in zip(channels, channels[1:]))
        self.post = nn.Conv2d(1024, 1, (3, 1), padding=(1, 0))

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Maps]:
        b, c, t = x.shape
        x = F.pad(x, (0, (self.period - t % self.period) % self.period), "reflect").view(b, c, -1, self.period)
        return _layers(self.convs, self.post, x)


class ScaleDiscriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(1, 128, 15, 1, padding=7), nn.Conv1d(128, 128, 41, 2, groups=4, padding=20),
                                    nn.Conv1d(128, 256, 41, 2, groups=16, padding=20),
                                    nn.Conv1d(256, 512, 41, 4, groups=16, padding=20),
                                    nn.Conv1d(512, 1024, 41, 4, groups=16, padding=20),
                                    nn.Conv1d(1024, 1024, 5, 1, padding=2)])
        self.post = nn.Conv1d(1024, 1, 3, padding=1)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Maps]:
        return _layers(self.convs, self.post, x)


class Multi(nn.Module):
    def __init__(self, parts: List[nn.Module], pool: bool) -> None:
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.pool = pool

    def forward(self, y: torch.Tensor, y_hat: torch.Tensor):  # type: ignore[no-untyped-def]
        real, fake, maps_real, maps_fake = [], [], [], []
        for i, part in enumerate(self.parts):
            if self.pool and i:
                y, y_hat = F.avg_pool1d(y, 4, 2, padding=2), F.avg_pool1d(y_hat, 4, 2, padding=2)
            r, mr = part(y)
            g, mg = part(y_hat)
            real.append(r)
            fake.append(g)
            maps_real.append(mr)
            maps_fake.append(mg)
        return real, fake, maps_real, maps_fake


def feature_loss(maps_real, maps_fake) -> torch.Tensor:  # type: ignore[no-untyped-def]
    return sum(torch.mean(torch.abs(r - g)) for mr, mg in zip(maps_real, maps_fake) for r, g in zip(mr, mg)) * 2


def run(delete: bool) -> float:
    """The peak of the last step, in MiB: by then the step before it has left what it keeps."""
    torch.manual_seed(0)
    device = torch.device("cuda")
    generator = Generator().to(device)
    mpd = Multi([PeriodDiscriminator(p) for p in (2, 3, 5, 7, 11)], pool=False).to(device)
    msd = Multi([ScaleDiscriminator() for _ in range(3)], pool=True).to(device)
    optim_g = torch.optim.AdamW(generator.parameters(), 2e-4)
    optim_d = torch.optim.AdamW([*mpd.parameters(), *msd.parameters()], 2e-4)
    mel = torch.randn(BATCH, 80, SAMPLES // 256, device=device)
    y = torch.randn(BATCH, 1, SAMPLES, device=device)
    for step in range(STEPS):
        if step == STEPS - 1:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        y_g_hat = generator(mel)
        optim_d.zero_grad()
        r, g, _, _ = mpd(y, y_g_hat.detach())
        loss_d = sum(torch.mean((1 - a) ** 2) + torch.mean(b ** 2) for a, b in zip(r, g))
        r, g, _, _ = msd(y, y_g_hat.detach())
        loss_d = loss_d + sum(torch.mean((1 - a) ** 2) + torch.mean(b ** 2) for a, b in zip(r, g))
        loss_d.backward()
        optim_d.step()
        optim_g.zero_grad()
        _, y_df_hat_g, fmap_f_r, fmap_f_g = mpd(y, y_g_hat)
        _, y_ds_hat_g, fmap_s_r, fmap_s_g = msd(y, y_g_hat)
        loss_fm = feature_loss(fmap_f_r, fmap_f_g) + feature_loss(fmap_s_r, fmap_s_g)
        if delete:
            del fmap_f_r, fmap_f_g, fmap_s_r, fmap_s_g
        loss_g = loss_fm + sum(torch.mean((1 - b) ** 2) for b in (*y_df_hat_g, *y_ds_hat_g))
        loss_g.backward()
        optim_g.step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20


def main() -> None:
    for delete in (False, True):
        peak = run(delete)
        print(f"feature maps {'deleted after the loss' if delete else 'kept bound':<24} "
              f"peak of the last step: {peak:,.1f} MiB")


if __name__ == "__main__":
    main()
