"""induction.previous_token_scores: each head's mean attention to the previous token, on the batch's mean patterns.

Cases small.previous_token_scores and gpt2.previous_token_scores: (n_layers, n_heads) scores of the mean patterns,
which are the cases' input, (n_layers, n_heads, posn, posn).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.induction._common import FROM_THE_MODEL, induction, mean_on, stripe, which_models
from grader.checks.induction._models import models, repeated_patterns

if TYPE_CHECKING:
    from grader.builder.interface import Reference


def previous_token_scores_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    for name, model in models(ref):
        patterns = repeated_patterns(model, name)
        posn = patterns.shape[-1]
        mistakes = {
            "the main diagonal is the token attending to itself: the previous token is one below it": mean_on(
                patterns, torch.eye(posn)
            ),
            "the whole pattern is averaged: take the diagonal one below the main one": patterns.mean(dim=(-2, -1)),
        }
        expected = mean_on(patterns, stripe(posn, 1, range(1, posn)))
        cases.append(Case(f"{name}.previous_token_scores", [patterns], expected, mistakes=mistakes))
    return cases


PAGE = "19-induction.md"
CHECK = Check(
    "induction.previous_token_scores",
    1,
    induction("previous_token_scores", None),
    "previous-token scores of every head",
    previous_token_scores_cases,
    notes=which_models,
    expected_from=FROM_THE_MODEL,
)
