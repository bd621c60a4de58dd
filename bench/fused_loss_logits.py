"""Whether a bound language-model output costs memory when the loss saves it anyway (MEM207):
a small LM (vocabulary 32,000, batch 8 x 2,048 tokens, bf16: 1,000 MiB of logits) trained four
steps with torch's cross-entropy and with a fused cross-entropy that saves its logits and
writes their gradient into them in place (as lit_gpt's and flash-attn's do), each with the
logits bound through the step, deleted right after the loss, and deleted at the end of the step.

    python bench/fused_loss_logits.py

Prints the peak device memory of each of the six runs (torch.cuda.max_memory_allocated), in
MiB. Needs CUDA.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCABULARY, BATCH, TOKENS = 32000, 8, 2048


class SavingCrossEntropy(torch.autograd.Function):
    """A cross-entropy that keeps its logits for backward and writes the gradient into them."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        lse = torch.logsumexp(logits.float(), -1)
        loss = (lse - logits.gather(-1, labels[:, None]).squeeze(1).float()).mean()
        ctx.save_for_backward(logits, lse, labels)
        return loss

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        logits, lse, labels = ctx.saved_tensors
        rows = logits.shape[0]
        for start in range(0, rows, 4096):  # in chunks: no float32 copy of the whole logits
            chunk = logits[start:start + 4096]
            probs = torch.exp(chunk.float() - lse[start:start + 4096, None])
            probs[torch.arange(probs.shape[0], device=probs.device), labels[start:start + 4096]] -= 1
            chunk.copy_((probs * (grad / rows)).to(chunk.dtype))
        return logits, None


class TinyLM(nn.Module):
    def __init__(self, width: int = 1024, depth: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCABULARY, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
                                    for _ in range(depth))
        self.head = nn.Linear(width, VOCABULARY, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(tokens)
        for block in self.blocks:
            hidden = hidden + block(hidden)
        return self.head(hidden)


def peak(loss_kind: str, delete: str) -> float:
    torch.manual_seed(0)
    model = TinyLM().cuda().to(torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, VOCABULARY, (BATCH, TOKENS), device="cuda")
    labels = torch.randint(0, VOCABULARY, (BATCH * TOKENS,), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(4):
        logits = model(tokens).view(-1, VOCABULARY)
        if loss_kind == "saving":
            loss = SavingCrossEntropy.apply(logits, labels)
        else:
            loss = F.cross_entropy(logits.float(), labels)
        if delete == "after the loss":
            del logits
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if delete == "at the end":
            del logits
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20


def main() -> None:
    for loss_kind in ("saving", "torch"):
        for delete in ("never", "after the loss", "at the end"):
            print(f"{loss_kind} cross-entropy, logits deleted {delete}: peak {peak(loss_kind, delete):,.1f} MiB", flush=True)
    print(f"one logits tensor: {BATCH * TOKENS * VOCABULARY * 2 / 2**20:,.1f} MiB")


if __name__ == "__main__":
    main()
