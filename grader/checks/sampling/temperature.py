"""TransformerSampler.apply_temperature: a vocabulary's logits divided by a temperature below 1 and one above."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case
from grader.checks.sampling._common import LOGITS_TOLERANCE, exact, generator
from grader.checks.sampling._compare import close

if TYPE_CHECKING:
    from grader.builder.interface import Reference

TEMPERATURE_MULTIPLIED = "the logits were multiplied by the temperature: divide them by it"


def temperature_cases(ref: Reference) -> list[Case]:
    import torch

    logits = 3 * torch.randn(ref.d_vocab, generator=generator(2))
    return [
        Case(f"temperature_{t}", [logits, torch.tensor(t)], logits / t, mistakes={TEMPERATURE_MULTIPLIED: logits * t})
        for t in (0.5, 2.0)
    ]


PAGE = "11-sampling.md"
CHECK = exact("sampling.temperature", "apply_temperature", "temperature", temperature_cases, close, LOGITS_TOLERANCE)
