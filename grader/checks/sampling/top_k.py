"""TransformerSampler.sample_top_k: the counts of its draws, for two values of k, against the k most likely tokens'
probabilities renormalised."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case
from grader.checks.sampling._common import INDEX_NOT_MAPPED, NOT_RENORMALISED, distribution_case, drawn
from grader.checks.sampling._compare import drawn_from
from grader.checks.sampling._oracle import index_returned, renormalised, softmax, unrenormalised

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

TOP_K_FROM_ALL = "tokens outside the k most likely were drawn: sample from the top k only"
K_PLUS_ONE = "k + 1 tokens were kept, one too many: keep the k most likely (logits.topk(k))"
SMALLEST_K = "the k least likely tokens were kept: keep the k most likely (topk's largest=True, or a descending sort)"
INDEX_AS_THRESHOLD = (
    "a token id was the threshold: sort() returns (values, indices), and the k-th largest logit is in the values "
    "(logits.topk(k).values[-1])"
)


def top_k_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    # In k_2 the k-th largest logit's token id, taken for a logit, keeps 4 tokens: not the top k, nor none.
    for name, values, k in (("k_2", [1.05, 1.8, 0.3, 2.2, 1.1, 0.6], 2), ("k_4", [0.2, -1.0, 1.5, 0.7, 2.0, -0.3], 4)):
        logits = torch.tensor(values)
        probabilities = softmax(logits)
        order = sorted(range(len(values)), key=lambda token: -values[token])
        top = order[:k]
        cases.append(
            distribution_case(
                name,
                [logits, torch.tensor(k)],
                renormalised(probabilities, top),
                (TOP_K_FROM_ALL, probabilities),
                (K_PLUS_ONE, renormalised(probabilities, order[: k + 1])),
                (SMALLEST_K, renormalised(probabilities, order[-k:])),
                (INDEX_NOT_MAPPED, index_returned(probabilities, top)),
                (NOT_RENORMALISED, unrenormalised(probabilities, top)),
                (INDEX_AS_THRESHOLD, above_index(values, order[k - 1], probabilities)),
            )
        )
    return cases


def above_index(values: list[float], token: int, probabilities: Tensor) -> Tensor | None:
    """What a sampler draws that keeps the logits at least `token`'s id (sort()'s indices taken for its values);
    None where that keeps no token, and the sampler raises."""
    kept = [t for t, value in enumerate(values) if value >= token]
    return renormalised(probabilities, kept) if kept else None


PAGE = "11-sampling.md"
CHECK = drawn("sampling.top_k", 1, "sample_top_k", "top-k sampling", top_k_cases, drawn_from("the top k"))
