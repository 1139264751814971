"""TransformerSampler.apply_temperature: a vocabulary's logits divided by a temperature below 1 and one above, compared
up to one constant added to every logit (which the softmax ignores: `(logits / t).log_softmax(-1)` is right too)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case, Tolerance
from grader.checks.sampling._common import LOGITS_TOLERANCE, exact, generator
from grader.checks.sampling._compare import close
from grader.shared.compare import CaseComparison

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

TEMPERATURE_MULTIPLIED = "the logits were multiplied by the temperature: divide them by it"
TEMPERATURE_UNDONE = (
    "the temperature changed nothing: probabilities divided by it and renormalised come back unchanged; "
    "divide the logits by it"
)
PROBABILITIES_UNDONE = (
    "probabilities were returned, and dividing them by the temperature before renormalising undid it: "
    "return the logits divided by it"
)
PROBABILITIES_RETURNED = (
    "probabilities were returned, not logits: return logits / temperature (sample_next_token draws from their softmax)"
)


def logits_close(actual, expected, tolerance: Tolerance) -> CaseComparison:
    """`close`, where logits that differ from the expected ones by one constant are the same logits: they give the
    same distribution. A failure is told of the values as returned."""
    compared = close(actual, expected, tolerance)
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if compared.ok or actual.shape != expected.shape or not np.isfinite(actual).all():
        return compared
    shifted = close(actual - np.mean(actual - expected), expected, tolerance)
    return shifted if shifted.ok else compared


def temperature_mistakes(logits: Tensor, t: float) -> dict[str, Tensor]:
    """What each known mistake outputs: the temperature multiplied in, or applied to probabilities (which the
    renormalisation undoes), or probabilities returned for logits."""
    probabilities = logits.double().softmax(dim=-1)
    return {
        TEMPERATURE_MULTIPLIED: logits * t,
        TEMPERATURE_UNDONE: probabilities.log().float(),
        PROBABILITIES_UNDONE: probabilities.float(),
        PROBABILITIES_RETURNED: (logits.double() / t).softmax(dim=-1).float(),
    }


def temperature_cases(ref: Reference) -> list[Case]:
    import torch

    logits = 3 * torch.randn(ref.d_vocab, generator=generator(2))
    return [
        Case(f"temperature_{t}", [logits, torch.tensor(t)], logits / t, mistakes=temperature_mistakes(logits, t))
        for t in (0.5, 2.0)
    ]


PAGE = "11-sampling.md"
CHECK = exact(
    "sampling.temperature", "apply_temperature", "temperature", temperature_cases, logits_close, LOGITS_TOLERANCE
)
