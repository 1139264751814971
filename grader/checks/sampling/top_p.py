"""TransformerSampler.sample_top_p: the counts of its draws against the top-p set's probabilities renormalised, where
the token crossing top_p is kept and where min_tokens_to_keep keeps more."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case
from grader.checks.sampling._common import INDEX_NOT_MAPPED, NOT_RENORMALISED, distribution_case, drawn
from grader.checks.sampling._compare import drawn_from
from grader.checks.sampling._oracle import index_returned, nucleus, renormalised, softmax, unrenormalised

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

CROSSING_DROPPED = (
    "the token that takes the cumulative probability past top_p was dropped: "
    "keep it (keep the smallest set whose probability reaches top_p)"
)
MINIMUM_IGNORED = "fewer than min_tokens_to_keep tokens were kept: keep at least that many"
TOP_P_FROM_ALL = "tokens outside the top-p set were drawn: sample only from the kept tokens"
IDS_AS_CUMULATIVE = (
    "the sorted token ids were compared with top_p, not the cumulative probabilities: compare "
    "the cumulative sum of the sorted probabilities"
)


def top_p_cases(ref: Reference) -> list[Case]:
    import torch

    # Cumulative sums, most likely first: 0.30, 0.52, 0.68, 0.80, 0.91, ... never near a threshold. At 0.75 four
    # tokens are kept, three where the crossing one is dropped, and two where the sorted ids (of which only id 0 is
    # below top_p) are counted for the cumulative sums; the four leave mass enough outside them for a sampler that
    # does not renormalise to be told apart.
    probabilities = torch.tensor([0.09, 0.30, 0.12, 0.22, 0.16, 0.11], dtype=torch.float64)
    logits = probabilities.log().float()
    exact = softmax(logits)
    cases = []
    for name, top_p, minimum in (("crossing_0.75", 0.75, 1), ("min_tokens_3", 0.2, 3)):
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
                (IDS_AS_CUMULATIVE, ids_counted(exact, top_p, minimum)),
            )
        )
    return cases


def ids_counted(probabilities: Tensor, top_p: float, minimum: int) -> Tensor:
    """What a sampler draws that counts the sorted ids below top_p where the cumulative sums are meant (one: id 0),
    keeping one more than that count, and at least `minimum`."""
    order = sorted(range(len(probabilities)), key=lambda token: -float(probabilities[token]))
    below = sum(token < top_p for token in order)
    return renormalised(probabilities, order[: max(below + 1, minimum)])


PAGE = "11-sampling.md"
CHECK = drawn("sampling.top_p", 2, "sample_top_p", "top-p (nucleus) sampling", top_p_cases, drawn_from("the top-p set"))
