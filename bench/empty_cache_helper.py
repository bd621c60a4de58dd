"""A training step that calls a helper which only empties the cache (MEM501's helper form).

    memlint verify bench/empty_cache_helper.py --select MEM501

Projects wrap `torch.cuda.empty_cache()` to pick the device (TRL's `empty_cache()`) and call
the wrapper at the end of every `compute_loss`. memlint reports the call and its fix removes
it; the verifier times the loop as written and as fixed. Sizes as the MEM501 fixture at
MEMLINT_SCALE=8: 32 MiB activations, about 40 of them allocated again every step.
"""

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


def empty_cache() -> None:
    """Empty the cache of the device there is."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


batch, width = 2048 * 64, 64
model = torch.nn.Sequential(
    *[layer for _ in range(8) for layer in (torch.nn.Linear(width, width), torch.nn.ReLU())]
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

for step in range(96):
    x = torch.randn(batch, width, device=device)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    empty_cache()

print(f"final loss {loss.item():.6f}")
