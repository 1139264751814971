"""gelu_new: GPT-2's GELU (the tanh approximation) on a grid, on GPT-2's pre-activations, and far beyond them."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from grader.checks import Case, Check, Target, Tolerance

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

TANH_OVERFLOWS = "tanh overflows on large inputs: use torch.tanh rather than a ratio of exponentials"


def gelu_mistakes(x: Tensor) -> dict[str, Tensor]:
    import torch

    return {
        "this is ReLU: GPT-2 uses gelu_new, the tanh approximation of GELU": torch.relu(x),
        "this is the exact (erf) GELU: GPT-2 uses the tanh approximation": torch.nn.functional.gelu(x),
        "the constant inside tanh is 2/pi: it is sqrt(2/pi)": 0.5
        * x
        * (1 + torch.tanh(2 / math.pi * (x + 0.044715 * x**3))),
    }


def gelu_cases(ref: Reference) -> list[Case]:
    import torch

    grid = torch.linspace(-8.0, 8.0, 4001)
    acts = ref.activations("prompt")
    pre = acts["blocks.0.mlp.hook_pre"]
    cases = [
        Case("grid", [grid], ref.gelu_new(grid), mistakes=gelu_mistakes(grid)),
        Case("blocks.0.prompt", [pre], acts["blocks.0.mlp.hook_post"], mistakes=gelu_mistakes(pre)),
    ]
    # Exact zeros, and magnitudes far beyond GPT-2's pre-activations: a tanh by hand from exponentials overflows.
    wide = torch.cat([torch.zeros(3), torch.logspace(0, 4, 41), -torch.logspace(0, 4, 41)])
    by_exp = {TANH_OVERFLOWS: 0.5 * wide * (1 + _tanh_by_exp(math.sqrt(2 / math.pi) * (wide + 0.044715 * wide**3)))}
    return cases + [Case("wide", [wide], ref.gelu_new(wide), hint=TANH_OVERFLOWS, mistakes=by_exp)]


def _tanh_by_exp(y: Tensor) -> Tensor:
    """tanh written by hand: (e^2y - 1) / (e^2y + 1), which is inf / inf = NaN once 2y passes 88.7."""
    e = (2 * y).exp()
    return (e - 1) / (e + 1)


PAGE = "06-mlp.md"
CHECK = Check(
    "gelu_new",
    1,
    Target("mlp", "gelu_new", None),
    "GPT-2's GELU",
    gelu_cases,
    tolerance=Tolerance(atol=1e-5, rtol=1e-5),
)
