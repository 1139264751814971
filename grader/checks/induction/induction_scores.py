"""induction.induction_scores: each head's mean attention, on the repeated half, to the token after the previous
occurrence of the current one (seq_len - 1 back).

Cases small.induction_scores and gpt2.induction_scores: (n_layers, n_heads) scores of the batch's mean patterns,
which are the cases' input, (n_layers, n_heads, posn, posn).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Run
from grader.checks.induction._common import FROM_THE_MODEL, induction, mean_on, repeated_half, stripe, which_models
from grader.checks.induction._models import SEQ_LEN, models, repeated_patterns

if TYPE_CHECKING:
    from grader.builder.interface import Reference


def induction_scores_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    for name, model in models(ref):
        patterns = repeated_patterns(model, name)
        posn = patterns.shape[-1]
        mistakes = {
            "off by one: seq_len back is the previous occurrence itself; the token after it is seq_len - 1 back": (
                mean_on(patterns, stripe(posn, SEQ_LEN, repeated_half(posn)))
            ),
            "the whole stripe is averaged: only its last seq_len entries are queries of the repeated half": mean_on(
                patterns, stripe(posn, SEQ_LEN - 1, range(SEQ_LEN - 1, posn))
            ),
        }
        expected = mean_on(patterns, stripe(posn, SEQ_LEN - 1, repeated_half(posn)))
        args = [patterns, torch.tensor(SEQ_LEN)]
        cases.append(Case(f"{name}.induction_scores", args, expected, mistakes=mistakes))
    return cases


PAGE = "19-induction.md"
CHECK = Check(
    "induction.induction_scores",
    2,
    induction("induction_scores"),
    "induction scores of every head",
    induction_scores_cases,
    # The report draws the small model's patterns, this check's input (figures.model_patterns).
    run=Run(watch_inputs=True),
    notes=which_models,
    expected_from=FROM_THE_MODEL,
)
