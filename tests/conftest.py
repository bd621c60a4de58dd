"""Tests marked `gpu` need CUDA: they are skipped on machines without it (CI has none)."""

from __future__ import annotations

import pytest


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if any("gpu" in item.keywords for item in items) and not _has_cuda():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
