"""TransformerSampler.sample_top_p: the counts of its draws against the top-p set's probabilities renormalised, where
the token crossing top_p is kept and where min_tokens_to_keep keeps more."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case
from grader.checks.sampling._common import INDEX_NOT_MAPPED, NOT_RENORMALISED, distribution_case, drawn
from grader.checks.sampling._compare import drawn_from
from grader.checks.sampling._oracle import index_returned, nucleus, renormalised, softmax, unrenormalised

if TYPE_CHECKING:
    from grader.builder.interface import Reference

CROSSING_DROPPED = (
    "the token that takes the cumulative probability past top_p was dropped: "
    "keep it (keep the smallest set whose probability reaches top_p)"
)
MINIMUM_IGNORED = "fewer than min_tokens_to_keep tokens were kept: keep at least that many"
TOP_P_FROM_ALL = "tokens outside the top-p set were drawn: sample only from the kept tokens"


def top_p_cases(ref: Reference) -> list[Case]:
    import torch

    # Cumulative sums, most likely first: 0.35, 0.60, 0.80, 0.90, ... never near a threshold.
    probabilities = torch.tensor([0.04, 0.35, 0.10, 0.25, 0.20, 0.06], dtype=torch.float64)
    logits = probabilities.log().float()
    exact = softmax(logits)
    cases = []
    for name, top_p, minimum in (("crossing_0.7", 0.7, 1), ("min_tokens_3", 0.2, 3)):
        right = nucleus(exact, top_p, minimum)
        dropped, unbounded = (
            nucleus(exact, top_p, minimum, keep_crossing=False),
            nucleus(exact, top_p, minimum, apply_minimum=False),
        )
        rows = [renormalised(exact, kept) if kept != right else None for kept in (dropped, unbounded)]
        mistakes = zip((CROSSING_DROPPED, MINIMUM_IGNORED, TOP_P_FROM_ALL), [*rows, exact], strict=True)
        args = [logits, torch.tensor(top_p), torch.tensor(minimum)]
        cases.append(
            distribution_case(
                name,
                args,
                renormalised(exact, right),
                *mistakes,
                (INDEX_NOT_MAPPED, index_returned(exact, right)),
                (NOT_RENORMALISED, unrenormalised(exact, right)),
            )
        )
    return cases


PAGE = "11-sampling.md"
CHECK = drawn("sampling.top_p", 2, "sample_top_p", "top-p (nucleus) sampling", top_p_cases, drawn_from("the top-p set"))
