"""induction.per_token_loss: the loss of each next token, (batch, posn - 1), against the grader's cross-entropy.

Cases toy_logits, (2, 7) random logits over 11 tokens; small.repeated, the small model's own logits on its
[BOS, A, A] batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.induction._common import induction
from grader.checks.induction._models import next_token_loss, repeated_batch

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def per_token_loss_mistakes(logits: Tensor, tokens: Tensor) -> dict[str, Tensor]:
    predicting = logits[:, :-1]
    own = predicting.log_softmax(-1).gather(-1, tokens[:, :-1, None])[..., 0]
    next_probability = predicting.softmax(-1).gather(-1, tokens[:, 1:, None])[..., 0]
    return {
        "each position is scored on its own token: logits[:, p] predicts tokens[:, p + 1]": -own,
        "the sign is wrong: the loss is minus the log-probability": -next_token_loss(logits, tokens),
        "probabilities, not log-probabilities: take log_softmax": -next_probability,
    }


def per_token_loss_cases(ref: Reference) -> list[Case]:
    import torch

    tokens = torch.randint(0, 11, (2, 7), generator=ref.generator)
    inputs = {"toy_logits": (3 * torch.randn(2, 7, 11, generator=ref.generator), tokens)}
    small = ref.induction_model()
    repeated = repeated_batch(small, "small")
    inputs["small.repeated"] = (small.logits(repeated), repeated)
    return [
        Case(name, [logits, tokens], next_token_loss(logits, tokens), mistakes=per_token_loss_mistakes(logits, tokens))
        for name, (logits, tokens) in inputs.items()
    ]


PAGE = "19-induction.md"
CHECK = Check(
    "induction.per_token_loss",
    1,
    induction("per_token_loss", None),
    "the loss of each next token",
    per_token_loss_cases,
    expected_from="the grader's cross-entropy (small: the induction model's logits)",
)
