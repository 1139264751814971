"""training.next_token_loss: the mean cross-entropy of each position's logits against the next token, on random
logits and on a model's that has learnt."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Run
from grader.checks.training._common import EXACT, training
from grader.checks.training._oracle import cross_entropy

if TYPE_CHECKING:
    from grader.builder.interface import Reference

HINTS = {  # what each classic mistake most likely is, as the failing check names it
    "no_shift": "no shift: the logits at position t predict token t + 1, so compare logits[:, :-1] with tokens[:, 1:]",
    "last_only": "only the last position is scored: average the loss over every position",
    "backwards": "shifted the wrong way: logits[:, 1:] against tokens[:, :-1] predicts the past",
    "summed": "the loss is summed: take the mean over the batch and the positions",
    "sign": "the sign is wrong: the loss is minus the log-probability",
}


def next_token_loss_cases(ref: Reference) -> list[Case]:
    import torch

    d_vocab = 11
    cases = []
    for name, (batch, posn) in (("random", (2, 6)), ("confident", (3, 5)), ("longer", (1, 9))):
        tokens = torch.randint(0, d_vocab, (batch, posn), generator=ref.generator)
        logits = 2 * torch.randn(batch, posn, d_vocab, generator=ref.generator, dtype=torch.float64)
        if name == "confident":  # a model that has learnt: each position's logits favour the next token
            logits[:, :-1].scatter_add_(
                -1, tokens[:, 1:, None], torch.full((batch, posn - 1, 1), 6.0, dtype=torch.float64)
            )
        logits = logits.float()
        right = cross_entropy(logits[:, :-1], tokens[:, 1:])
        mistakes = {
            HINTS["no_shift"]: cross_entropy(logits, tokens).mean(),
            HINTS["last_only"]: cross_entropy(logits[:, -2], tokens[:, -1]).mean(),
            HINTS["backwards"]: cross_entropy(logits[:, 1:], tokens[:, :-1]).mean(),
            HINTS["summed"]: right.sum(),
            HINTS["sign"]: -right.mean(),
        }
        # One step, the output: a wrong loss is located at the line of the learner's that computed it.
        loss = right.mean()
        cases.append(Case(name, [logits, tokens], loss, steps={"output": loss}, mistakes=mistakes))
    return cases


PAGE = "17-training-loop.md"
CHECK = Check(
    "training.next_token_loss",
    1,
    training("next_token_loss", None),
    "the next-token loss",
    next_token_loss_cases,
    **EXACT,
    run=Run(capture=("locals",)),
)
