"""A small classifier trained with noise augmentation, mixed precision and a validation pass.

It runs, and it learns, but it carries the GPU-memory mistakes memlint finds:
run `memlint examples/` to see them and `memlint --diff examples/` for the fixes. The noise
tensor made afresh every step is reported only by the opt-in MEM101 (`--select ALL`): whether
it raises the peak depends on what else is alive, which `memlint verify` measures.
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.cuda.amp import autocast

SCALE = int(os.environ.get("MEMLINT_SCALE", "1"))
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

batch_size = 64 * SCALE
features = 128


class Classifier(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, width), nn.ReLU(), nn.Linear(width, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def batches(count: int):
    """Synthetic data; every batch must be a fresh tensor, so this is not a finding."""
    for _ in range(count):
        x = torch.randn(batch_size, features)
        y = torch.randint(0, 10, (batch_size,))
        yield x, y


model = Classifier(256 * SCALE).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)


def train_epoch(loader) -> None:
    model.train()
    optimizer.zero_grad()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        noise = torch.randn(batch_size, features, device=device)
        with autocast():
            logits = model(x + 0.1 * noise)
            loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()


def validate(loader):
    model.eval()
    total_loss = 0.0
    predictions = []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        logits = model(x)
        total_loss += F.cross_entropy(logits, y)
        predictions.append(logits.cpu())
    return total_loss / len(predictions), torch.cat(predictions)


for epoch in range(2):
    train_epoch(batches(20))
    val_loss, val_predictions = validate(batches(5))
    print(f"epoch {epoch}: validation loss {val_loss.item():.4f}")
