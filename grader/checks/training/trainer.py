"""training.trainer, the outcome: the learner's loop trains the learner's model, a tiny Transformer, on the standard
library's documentation, offline. Every parameter group must follow lr_at's schedule, and the held-out loss, computed
by the grader, must beat what the corpus's unigram frequencies give."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case, Check, Run, Tolerance
from grader.checks.training._common import OPTIMIZER, training
from grader.checks.training._oracle import schedule, unigram_loss
from grader.shared.compare import CaseComparison, validate
from grader.shared.formats import TINY

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

OUTCOME = {"steps": 150, "batch_size": 16, "posn": TINY["n_ctx"], "d_vocab": 256, "held_out_batches": 8, "seed": 0}
HYPERPARAMETERS = {"max_lr": 1e-2, "min_lr": 1e-3, "warmup": 10, "weight_decay": 0.1, "clip": 1.0}
OUTCOME_TIMEOUT = 120.0  # seconds; the solutions train in under 1 (README, Part 4): room for slow loops
HINTS = {  # what each classic mistake most likely is, as the failing check names it
    "outcome": "the model learnt little beyond token frequencies",  # the failing parts: Check.uses names them
    "first_group_only": "only the first parameter group follows lr_at: set the lr of every group in "
    "optimizer.param_groups",
    "lr_never_set": "the learning rate stays at max_lr: set every group's lr from lr_at before each step",
    "lr_after_step": "the learning rate is set after the step: set it from lr_at(step, ...) before optimizer.step()",
}
OUTCOME_CASE = "stdlib_docs"


def outcome_cases(ref: Reference) -> list[Case]:
    """The bar (the unigram loss) and the schedule every parameter group must follow, step by step
    (`outcome_layout`); the classic slips of the loop's schedule as mistakes, whatever loss they reach."""
    import torch

    text = ref.corpus().capped(OUTCOME["d_vocab"])
    train = text.train_batches(OUTCOME["steps"], OUTCOME["batch_size"], OUTCOME["posn"], OUTCOME["seed"])
    held_out = text.held_out_batches(OUTCOME["held_out_batches"], OUTCOME["batch_size"], OUTCOME["posn"])
    hyper = torch.tensor([*HYPERPARAMETERS.values(), text.d_vocab], dtype=torch.float64)
    steps = OUTCOME["steps"]
    max_lr, min_lr, warmup = HYPERPARAMETERS["max_lr"], HYPERPARAMETERS["min_lr"], HYPERPARAMETERS["warmup"]
    rates = schedule(list(range(steps)), warmup, steps, max_lr, min_lr)
    initial = torch.full((steps,), max_lr, dtype=torch.float64)  # make_optimizer's lr, until the loop sets one
    late = torch.cat([initial[:1], rates[:-1]])

    def outcome(bar: float, first: Tensor, last: Tensor) -> Tensor:
        head = torch.tensor([bar, math.log(text.d_vocab)], dtype=torch.float64)
        return torch.cat([head, torch.zeros(steps, dtype=torch.float64), first, last])

    mistakes = {  # any held-out loss: these are named by their schedule alone
        HINTS["first_group_only"]: outcome(math.inf, rates, initial),
        HINTS["lr_never_set"]: outcome(math.inf, initial, initial),
        HINTS["lr_after_step"]: outcome(math.inf, late, late),
    }
    expected = outcome(unigram_loss(train, held_out, text.d_vocab), rates, rates)
    return [Case(OUTCOME_CASE, [hyper], expected, extra={"train": train, "held_out": held_out}, mistakes=mistakes)]


def outcome_layout(output: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The steps' losses, the first parameter group's lr at each step and the last group's, of an outcome laid out
    as [held-out loss, seconds, losses, first group's rates, last group's rates] (the driver's and the expected)."""
    steps = (len(output) - 2) // 3
    return output[2 : 2 + steps], output[2 + steps : 2 + 2 * steps], output[2 + 2 * steps :]


def schedule_problem(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> str | None:
    """Where the loop's learning rates first leave the expected schedule, in a line; None where they follow it."""
    for name, rates, wanted in zip(
        ("first", "last"), outcome_layout(actual)[1:], outcome_layout(expected)[1:], strict=True
    ):
        off = ~np.isclose(rates, wanted, rtol=tolerance.rtol, atol=0)
        if off.any():
            step = int(np.argmax(off))
            return (
                f"the {name} parameter group's lr at step {step} is {rates[step]:.4g}, lr_at gives {wanted[step]:.4g}"
            )
    return None


def below_threshold(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> CaseComparison:
    """Passes when every parameter group follows the schedule and the held-out loss (actual[0]) is below the
    threshold (expected[0]); actual[1] is seconds. A loss against a bar is no difference from an expected tensor: no
    max abs diff. The message says only what repeats run to run (the seconds are the check's own)."""
    invalid = validate(actual, expected)
    if invalid:
        return invalid
    shapes = {"actual_shape": list(actual.shape), "expected_shape": list(expected.shape)}
    off_schedule = schedule_problem(actual, expected, tolerance)
    if off_schedule:
        return CaseComparison(False, off_schedule, None, **shapes)
    loss, threshold, untrained = actual[0], expected[0], expected[1]
    losses = outcome_layout(actual)[0]
    curve = f"training loss {losses[0]:.2f} at the first step, {losses[-10:].mean():.2f} over the last ten"
    bar = f"the unigram frequencies give {threshold:.3f} and an untrained model about {untrained:.2f}"
    message = f"held-out loss {loss:.3f}, {bar}; {curve}: {HINTS['outcome']}"
    return CaseComparison(bool(loss < threshold), message, None, **shapes)


def outcome_notes(reply: dict) -> list[str]:
    """The curve of a passing run, for every report (the HTML one included)."""
    actual, threshold = reply["outputs"][OUTCOME_CASE], reply["expected"][OUTCOME_CASE][0]
    losses = outcome_layout(actual)[0]
    marks = "▁▂▃▄▅▆▇█"
    low, high = losses.min(), losses.max()
    spark = "".join(
        marks[int((value - low) / (high - low + 1e-9) * (len(marks) - 1))]
        for value in losses[:: max(1, len(losses) // 40)]
    )
    return [
        # The seconds are the check's own (CheckResult.seconds): notes say only what repeats run to run.
        f"held-out loss {actual[0]:.3f} (to beat: {threshold:.3f}, the unigram frequencies) after {len(losses)} steps",
        f"training loss {losses[0]:.2f} {spark} {losses[-1]:.2f}",
    ]


PAGE = "17-training-loop.md"
CHECK = Check(
    "training.trainer",
    3,
    training("Trainer", "outcome", "fit"),
    "the loop trains a tiny Transformer",
    outcome_cases,
    comparison=below_threshold,
    notes=outcome_notes,
    tolerance=Tolerance(atol=0.0, rtol=1e-6),
    expected_from="the bar to clear",
    uses=("training.make_optimizer", "training.lr_at", "training.train_step"),
    run=Run(warm_imports=OPTIMIZER, min_timeout=OUTCOME_TIMEOUT),
)
