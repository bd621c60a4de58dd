"""MEM203 on a model's own `predict`: a method that scores every label with autograd on, on a GPU.

    python bench/predict_method.py [--batch 50000] [--width 500] [--labels 10]

A forward-forward network's prediction: the input is scored once per label (the label written
into its first pixels) through every layer, and the label with the largest goodness wins. The
method returns only `argmax`, so no caller can backward through it, yet as written it records
every pass. Printed: the peak memory of the call and a checksum of the predictions.
`memlint verify bench/predict_method.py --select MEM203` decorates the method with
`@torch.no_grad()` (memlint's fix), runs both versions and compares their peaks; the two
printed checksums show the predictions are the same.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn


class Layer(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(super().forward(x / (x.norm(2, 1, keepdim=True) + 1e-4)))


class Net(nn.Module):
    def __init__(self, dims: list) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(a, b) for a, b in zip(dims, dims[1:]))

    def predict(self, x: torch.Tensor, labels: int) -> torch.Tensor:
        scores = []
        for label in range(labels):
            h = x.clone()
            h[:, :labels] = 0.0
            h[:, label] = x.max()
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness.append(h.pow(2).mean(1))
            scores.append(sum(goodness).unsqueeze(1))
        return torch.cat(scores, 1).argmax(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=50000)
    parser.add_argument("--width", type=int, default=500)
    parser.add_argument("--labels", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    net = Net([784, args.width, args.width])
    net.cuda()
    x = torch.rand(args.batch, 784, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    predictions = net.predict(x, args.labels)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2 ** 20
    checksum = int((predictions * torch.arange(len(predictions), device="cuda")).sum())
    print(f"peak {peak:.1f} MiB; predictions checksum {checksum}")


if __name__ == "__main__":
    main()
