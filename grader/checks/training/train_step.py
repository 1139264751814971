"""training.train_step: SGD steps on the stand-in `TinyLM`, against the same steps taken by hand: the gradients
zeroed before backward(), their global norm clipped, then the step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Run
from grader.checks.training._common import EXACT, OPTIMIZER, training
from grader.checks.training._oracle import first_gradient_norm, grader_steps

if TYPE_CHECKING:
    from grader.builder.interface import Reference

HINTS = {  # what each classic mistake most likely is, as the failing check names it
    "unclipped": "the step used unclipped gradients: clip_grad_norm_ goes after backward(), before optimizer.step()",
    "no_zero_grad": "zero_grad is missing: the gradients of every step accumulate, so zero them before backward()",
    "zero_grad_late": "zero_grad comes after backward(): the step sees zero gradients",
    "clip_each": "each parameter is clipped alone: clip the norm of all the gradients together",
}


def train_step_cases(ref: Reference) -> list[Case]:
    import torch

    from grader.learner.drivers.tiny_lm import TinyLM

    d_vocab, lr = TinyLM().embed.W_E.shape[0], 0.5
    batches = torch.randint(0, d_vocab, (3, 4, 6), generator=ref.generator)
    clip = 0.5 * first_gradient_norm(batches[0])  # so that clipping acts, at least on the first step
    variants = {
        "unclipped": {"clip_at": "none"},
        "no_zero_grad": {"zero": "never"},
        "zero_grad_late": {"zero": "after_backward"},
        "clip_each": {"clip_at": "each"},
    }
    mistakes = {HINTS[key]: grader_steps(batches, clip, lr, **variant) for key, variant in variants.items()}
    args = [batches, torch.tensor(clip), torch.tensor(lr)]
    return [Case("tiny_lm_sgd", args, grader_steps(batches, clip, lr), mistakes=mistakes)]


PAGE = "17-training-loop.md"
CHECK = Check(
    "training.train_step",
    2,
    training("train_step", "steps"),
    "one optimisation step",
    train_step_cases,
    uses=("training.next_token_loss",),
    **EXACT,
    run=Run(warm_imports=OPTIMIZER),
)
