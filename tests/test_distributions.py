"""memlint.analysis.distributions: torch distributions built from host parameters, and their draws."""

from __future__ import annotations

import textwrap
from typing import Optional, Tuple

import libcst as cst
import pytest

from memlint.analysis import Facts


def _draw(source: str) -> Optional[Tuple[str, ...]]:
    """What `host_draw` answers of the last `.sample()` / `.rsample()` call of `source`."""
    module = cst.parse_module(textwrap.dedent(source))
    facts = Facts(module)
    draws = [n for n in facts.tree.nodes if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
             and n.func.attr.value in ("sample", "rsample")]
    return facts.distributions.host_draw(draws[-1])


_CLASS = """
    import torch
    import torch.distributions as D
    class Noise(torch.nn.Module):
        def __init__(self, {params}):
            super().__init__()
            {body}
        def forward(self, x):
            return self.noise.sample(x.shape)
"""


@pytest.mark.parametrize("params,body", [
    ("eps", "self.noise = D.Normal(0.0, eps)"),
    ("eps: float = 0.1", "self.noise = D.Normal(0.0, eps)"),
    ("args", "self.noise = D.Normal(0.0, args.noise_std)"),
    ("dim", "self.noise = D.Normal(torch.zeros(dim), torch.ones(dim))"),
    ("eps", "self.noise = D.Uniform(torch.tensor([-eps]), torch.tensor([eps]))"),
    ("eps", "self.eps = float(eps)\n            self.noise = D.Normal(0.0, self.eps * 2)"),
    ("dim", "self.noise = D.Independent(D.Normal(torch.zeros(dim), 1.0), 1)"),
])
def test_host_parameters_make_a_host_distribution(params, body):
    assert _draw(_CLASS.format(params=params, body=body)) is not None


@pytest.mark.parametrize("params,body", [
    ("dev", "self.noise = D.Normal(torch.zeros(1, device=dev), 1.0)"),  # made on the device
    ("mean: torch.Tensor", "self.noise = D.Normal(mean, 1.0)"),  # a tensor handed in
    ("mean, device", "self.noise = D.Normal(mean, 1.0)"),  # a constructor that takes a device
    ("x", "self.noise = D.Normal(torch.zeros_like(x), 1.0)"),  # on `x`'s device
    ("dim", "self.loc = torch.nn.Parameter(torch.zeros(dim))\n            self.noise = D.Normal(self.loc, 1.0)"),
    ("*args", "self.noise = D.Normal(0.0, args[0])"),
    ("eps", "self.noise = D.Normal(0.0, eps)\n            self.noise.loc = self.noise.loc.cuda()"),
    ("eps", "self.noise = D.Normal(0.0, eps)\n            setattr(self, 'noise', None)"),
    ("eps", "self.noise = D.Normal(0.0, eps)\n            self.noise: object = make_noise()"),
    ("eps", "self.noise = D.transforms.AffineTransform(0.0, eps)"),  # no distribution
    ("eps", "self.noise = Sampler(eps)"),
])
def test_other_parameters_leave_it_unknown(params, body):
    assert _draw(_CLASS.format(params=params, body=body)) is None


def test_any_assignment_not_on_the_host_decides():
    assert _draw("""
        import torch
        from torch.distributions import Normal
        class Noise(torch.nn.Module):
            def __init__(self, eps):
                super().__init__()
                self.noise = Normal(0.0, eps)
            def to_device(self, dev):
                self.noise = Normal(torch.zeros(1, device=dev), torch.ones(1, device=dev))
            def forward(self, x):
                return self.noise.sample(x.shape)
    """) is None


def test_a_local_distribution_and_an_inline_one():
    assert _draw("""
        import torch
        prior = torch.distributions.Normal(torch.tensor([0.0]), torch.tensor([1.0]))
        z = prior.rsample((4,))
    """) == ("torch.distributions.Normal",)
    assert _draw("""
        import torch
        def step(x, std):
            return torch.distributions.Normal(0.0, std).sample(x.shape)
    """) is None  # a function's argument may be a tensor on the device
