"""induction.heads_above: the (layer, head) rows of the heads whose score is strictly above a threshold.

Cases small.induction_heads, small.previous_token_heads, gpt2.induction_heads, ties, none: (found, 2) rows
(layer, head) of the heads above the threshold.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.induction._common import (
    EXACT,
    FROM_THE_MODEL,
    THRESHOLD,
    induction,
    mean_on,
    repeated_half,
    stripe,
    which_models,
)
from grader.checks.induction._models import SEQ_LEN, models, repeated_patterns

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def head_rows(scores: Tensor, threshold: float, above=float.__gt__, swap: bool = False) -> Tensor:
    """The (layer, head) rows of the heads `above` the threshold, in order; (head, layer) with swap."""
    import torch

    rows = [
        (head, layer) if swap else (layer, head)
        for layer, head in itertools.product(*map(range, scores.shape))
        if above(float(scores[layer, head]), threshold)
    ]
    return torch.tensor(rows, dtype=torch.float64).reshape(-1, 2)


def heads_above_cases(ref: Reference) -> list[Case]:
    import torch

    tables = {}
    for name, model in models(ref):
        patterns = repeated_patterns(model, name)
        posn = patterns.shape[-1]
        tables[f"{name}.induction_heads"] = (mean_on(patterns, stripe(posn, SEQ_LEN - 1, repeated_half(posn))), name)
        if name == "small":
            tables["small.previous_token_heads"] = (mean_on(patterns, stripe(posn, 1, range(1, posn))), name)
    ties = torch.tensor([[0.1, 0.5, 0.7], [0.5, 0.2, 0.9]])  # two scores equal to the threshold: not above it
    tables["ties"], tables["none"] = (ties, "small"), (ties / 10, "small")
    cases = []
    for case_name, (scores, model_name) in tables.items():
        threshold = THRESHOLD[model_name]
        mistakes = {
            "a score equal to the threshold is counted: keep the heads strictly above it": head_rows(
                scores, threshold, float.__ge__
            ),
            "the pairs are (head, layer): return (layer, head)": head_rows(scores, threshold, swap=True),
        }
        expected = head_rows(scores, threshold)
        cases.append(Case(case_name, [scores, torch.tensor(threshold)], expected, mistakes=mistakes))
    return cases


PAGE = "19-induction.md"
CHECK = Check(
    "induction.heads_above",
    1,
    induction("heads_above", "heads"),
    "the heads above a threshold",
    heads_above_cases,
    tolerance=EXACT,
    notes=which_models,
    expected_from=FROM_THE_MODEL,
)
