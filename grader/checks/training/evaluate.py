"""training.evaluate: the mean held-out loss and next-token accuracy over batches, in eval mode and without
autograd."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.training._common import EXACT, training
from grader.checks.training._oracle import cross_entropy

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

HINTS = {  # what each classic mistake most likely is, as the failing check names it
    "eval_unshifted": "no shift: the logits at position t predict token t + 1",
    "accuracy_unshifted": "the accuracy is not shifted: compare argmax(logits[:, :-1]) with tokens[:, 1:]",
    "eval_summed": "the loss is summed over batches: take their mean",
    "no_eval": "model.eval() is missing: dropout stays on while evaluating",
    "no_inference_mode": "torch.inference_mode() is missing: evaluation builds the autograd graph",
    "neither": "model.eval() and torch.inference_mode() are both missing",
}


def evaluate_cases(ref: Reference) -> list[Case]:
    import torch

    from grader.learner.drivers.tiny_lm import TinyLM

    model = TinyLM(dropout=0.5).eval()
    batches = torch.randint(0, model.embed.W_E.shape[0], (3, 4, 7), generator=ref.generator)
    with torch.no_grad():
        logits = [model(batch) for batch in batches]

    def loss_and_accuracy(shift: int) -> Tensor:
        end = logits[0].shape[1] - shift
        loss = torch.stack(
            [cross_entropy(x[:, :end], b[:, shift:]).mean() for x, b in zip(logits, batches, strict=False)]
        ).mean()
        hits = torch.stack(
            [(x[:, :end].argmax(-1) == b[:, shift:]).double().mean() for x, b in zip(logits, batches, strict=False)]
        ).mean()
        return torch.stack([loss.double(), hits])

    right = loss_and_accuracy(shift=1)
    unshifted = loss_and_accuracy(shift=0)
    values_mistakes = {
        HINTS["eval_unshifted"]: unshifted,
        HINTS["accuracy_unshifted"]: torch.stack([right[0], unshifted[1]]),
        HINTS["eval_summed"]: torch.stack([right[0] * len(batches), right[1]]),
    }
    # [fraction of forwards in training mode, fraction with gradients enabled]
    modes = {"no_eval": [1.0, 0.0], "no_inference_mode": [0.0, 1.0], "neither": [1.0, 1.0]}
    mode_mistakes = {HINTS[key]: torch.tensor(fractions, dtype=torch.float64) for key, fractions in modes.items()}
    return [
        Case("mode", [batches, torch.tensor(1)], torch.zeros(2, dtype=torch.float64), mistakes=mode_mistakes),
        Case("loss_and_accuracy", [batches, torch.tensor(0)], right, mistakes=values_mistakes),
    ]


PAGE = "17-training-loop.md"
CHECK = Check(
    "training.evaluate",
    1,
    training("evaluate", "evaluation"),
    "evaluation: loss and accuracy",
    evaluate_cases,
    uses=("training.next_token_loss",),
    **EXACT,
)
