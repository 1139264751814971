"""TransformerSampler.sample_basic: the counts of its draws from logits all positive and from mixed ones, against
softmax(logits)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case
from grader.checks.sampling._common import distribution_case, drawn
from grader.checks.sampling._oracle import softmax

if TYPE_CHECKING:
    from grader.builder.interface import Reference

LOGITS_AS_PROBABILITIES = "the logits were used as probabilities: sample from softmax(logits)"
SOFTMAX_TWICE = (
    "the softmax was applied twice: Categorical(logits=...) applies it for you, so pass the logits themselves, "
    "or pass probs=softmax(logits)"
)


def basic_cases(ref: Reference) -> list[Case]:
    import torch

    positive = torch.tensor([4.0, 1.0, 2.0, 0.5, 1.5, 0.2])  # all positive, so the mistake can run
    mixed = torch.tensor([-1.0, 0.5, 2.0, -3.0, 1.0, -0.5])
    return [
        distribution_case(
            "positive_logits",
            [positive],
            softmax(positive),
            (LOGITS_AS_PROBABILITIES, positive.double() / positive.sum()),
            (SOFTMAX_TWICE, softmax(softmax(positive))),
        ),
        distribution_case("mixed_logits", [mixed], softmax(mixed), (SOFTMAX_TWICE, softmax(softmax(mixed)))),
    ]


PAGE = "11-sampling.md"
CHECK = drawn("sampling.basic", 1, "sample_basic", "sampling from softmax(logits)", basic_cases)
