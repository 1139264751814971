"""What more than one induction check uses: the target helper, the tolerance and the expected answers' source, GPT-2's
induction heads and heads_above's thresholds, the patterns' stripes (previous_token_scores, induction_scores,
heads_above), and which model each case ran on (the notes of the checks with GPT-2 cases)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Target, Tolerance, driven
from grader.checks.induction._models import SEQ_LEN

if TYPE_CHECKING:
    from torch import Tensor

GPT2_INDUCTION_HEADS = ((5, 1), (5, 5), (6, 9), (7, 2), (7, 10))
THRESHOLD = {"small": 0.5, "gpt2": 0.4}  # heads_above's: GPT-2's induction heads share their attention more
FROM_THE_MODEL = "transformer_lens, on the model the case names (small: the induction model)"
EXACT = Tolerance(atol=0.0, rtol=0.0)


def induction(name: str, driver: str | None = "scalars") -> Target:
    return driven("induction", name, driver)


# --- the patterns' stripes, and which model each case ran on ------------------------------------------------------


def stripe(posn: int, below: int, queries: range) -> Tensor:
    """A (posn, posn) mask of ones where query q attends to key q - below, for q in `queries`."""
    import torch

    mask = torch.zeros(posn, posn)
    for query in queries:
        mask[query, query - below] = 1.0
    return mask


def mean_on(patterns: Tensor, mask: Tensor) -> Tensor:
    """Each head's mean attention over the (query, key) entries the mask holds: (layer, head)."""
    return (patterns * mask).sum(dim=(-2, -1)) / mask.sum()


def repeated_half(posn: int) -> range:
    """The queries of the repeated half of [BOS, A, A]: positions SEQ_LEN + 1 to 2 SEQ_LEN."""
    return range(posn - SEQ_LEN, posn)


# The checks that have GPT-2 cases when the reference is GPT-2's own weights: their notes say which model each case
# ran on.
def which_models(facts: dict) -> list[str]:
    """How many cases ran on each model, for a passing check's notes."""
    names = case_names(facts)
    small, gpt2 = (sum(name.startswith(f"{model}.") for name in names) for model in ("small", "gpt2"))
    where = f"{small} case{'s' * (small != 1)} on the small induction model"
    if gpt2:
        return [f"{where}, {gpt2} on GPT-2's own heads"]
    return [f"{where}; GPT-2's heads left out: the reference is the random model, whose heads all look alike"]


def case_names(facts: dict) -> list[str]:
    return [name for name in facts["expected"] if "/" not in name]  # a step's or a mistake's key holds a "/"
