"""Part 4: training. The learner's loss, optimiser, schedule, step and evaluation, then the learner's
own loop training a tiny Transformer on the standard library's documentation, offline.

Every expected answer is the grader's own, from first principles (`_training_oracle`): the cross-entropy written
out, the parameter groups from the parameters' names, the schedule's formula, an SGD step taken by hand
on the stand-in `TinyLM` (grader/learner/drivers/training.py) from the same seed. The outcome check asks
for a held-out loss, computed by the grader, below what the corpus's unigram frequencies give.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case, Check, Run, Target, Tolerance, driven
from grader.checks.training._oracle import (
    cross_entropy,
    decayed_by_name,
    first_gradient_norm,
    grader_steps,
    group_rows,
    schedule,
    unigram_loss,
)
from grader.shared.compare import CaseComparison, validate
from grader.shared.formats import PARAMETER_NAMES, TINY

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

OUTCOME = {"steps": 150, "batch_size": 16, "posn": TINY["n_ctx"], "d_vocab": 256, "held_out_batches": 8, "seed": 0}
HYPERPARAMETERS = {"max_lr": 1e-2, "min_lr": 1e-3, "warmup": 10, "weight_decay": 0.1, "clip": 1.0}
OUTCOME_TIMEOUT = 120.0  # seconds; the solutions train in under 1 (README, Part 4): room for slow loops
FIRST_PRINCIPLES = "the grader's own computation"
HINTS = {  # what each classic mistake most likely is, as the failing check names it
    "no_shift": "no shift: the logits at position t predict token t + 1, so compare logits[:, :-1] with tokens[:, 1:]",
    "last_only": "only the last position is scored: average the loss over every position",
    "backwards": "shifted the wrong way: logits[:, 1:] against tokens[:, :-1] predicts the past",
    "summed": "the loss is summed: take the mean over the batch and the positions",
    "sign": "the sign is wrong: the loss is minus the log-probability",
    "decay_all": "weight decay on every parameter: biases, LayerNorm's w and b and the embeddings get none",
    "decay_ndim": "decay chosen by p.ndim >= 2: b_Q, b_K, b_V are 2-D and W_E, W_pos are embeddings; decide by name",
    "decay_embeddings": "the embeddings W_E and W_pos are decayed: only the other W_ matrices are",
    "decay_none": "no weight decay at all: the W_ matrices get weight_decay",
    "warmup_off_by_one": "the warm-up is off by one: step 0 must already train, max_lr * (step + 1) / warmup",
    "cosine_to_zero": "the cosine decays to 0: it ends at min_lr",
    "cosine_from_zero": "the cosine starts at step 0: its progress is (step - warmup) / (total - warmup)",
    "no_floor": "no floor after total steps: from step total on the rate is min_lr",
    "unclipped": "the step used unclipped gradients: clip_grad_norm_ goes after backward(), before optimizer.step()",
    "no_zero_grad": "zero_grad is missing: the gradients of every step accumulate, so zero them before backward()",
    "zero_grad_late": "zero_grad comes after backward(): the step sees zero gradients",
    "clip_each": "each parameter is clipped alone: clip the norm of all the gradients together",
    "eval_unshifted": "no shift: the logits at position t predict token t + 1",
    "accuracy_unshifted": "the accuracy is not shifted: compare argmax(logits[:, :-1]) with tokens[:, 1:]",
    "eval_summed": "the loss is summed over batches: take their mean",
    "no_eval": "model.eval() is missing: dropout stays on while evaluating",
    "no_inference_mode": "torch.inference_mode() is missing: evaluation builds the autograd graph",
    "neither": "model.eval() and torch.inference_mode() are both missing",
    "outcome": "the model learnt little beyond token frequencies",  # the failing parts: Check.uses names them
    "first_group_only": "only the first parameter group follows lr_at: set the lr of every group in "
    "optimizer.param_groups",
    "lr_never_set": "the learning rate stays at max_lr: set every group's lr from lr_at before each step",
    "lr_after_step": "the learning rate is set after the step: set it from lr_at(step, ...) before optimizer.step()",
}
OUTCOME_CASE = "stdlib_docs"


# --- next_token_loss ----------------------------------------------------------------------------


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
        cases.append(Case(name, [logits, tokens], right.mean(), mistakes=mistakes))
    return cases


# --- make_optimizer -----------------------------------------------------------------------------


def make_optimizer_cases(ref: Reference) -> list[Case]:
    import torch

    shapes = ref.parameter_shapes()
    tiny = {name for name in shapes if not name.startswith("blocks.") or int(name.split(".")[1]) < TINY["n_layers"]}
    assert tiny == set(PARAMETER_NAMES), f"GPT-2's names differ: {sorted(tiny ^ set(PARAMETER_NAMES))}"
    lr, weight_decay = 3e-4, 0.1
    rules = {
        "decay_all": lambda _: True,
        "decay_ndim": lambda name: len(shapes[name]) >= 2,
        "decay_embeddings": lambda name: name.rsplit(".", 1)[-1].startswith("W_"),
        "decay_none": lambda _: False,
    }
    mistakes = {HINTS[key]: group_rows(rule, weight_decay, lr) for key, rule in rules.items()}
    args = [torch.tensor(lr), torch.tensor(weight_decay), torch.tensor(1000)]
    return [Case("tiny_transformer", args, group_rows(decayed_by_name, weight_decay, lr), mistakes=mistakes)]


def same_groups(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> CaseComparison:
    """Every parameter in one group with the right decay and lr; the message names the first few that are not."""
    invalid = validate(actual, expected)
    if invalid:
        return invalid
    close = np.isclose(actual, expected, rtol=1e-6, atol=1e-12)
    wrong = []
    for name, (count, decay, lr), ok in zip(PARAMETER_NAMES, actual, close.all(axis=1), strict=False):
        if ok:
            continue
        if count != 1:
            wrong.append(f"{name} is in {int(count)} groups")
        else:
            wrong.append(f"{name} has weight decay {decay:g} and lr {lr:g}")
    message = "; ".join(wrong[:4]) + (f" (and {len(wrong) - 4} more)" if len(wrong) > 4 else "")
    shapes = {"actual_shape": list(actual.shape), "expected_shape": list(expected.shape)}
    return CaseComparison(not wrong, message, float(np.abs(actual - expected).max()), float(close.mean()), **shapes)


# --- lr_at --------------------------------------------------------------------------------------


def lr_at_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    for name, (warmup, total, max_lr, min_lr) in (("gpt2_like", (10, 100, 6e-4, 6e-5)), ("short", (2, 6, 1e-2, 1e-3))):
        steps = sorted(
            {0, 1, warmup - 1, warmup, warmup + 1, (warmup + total) // 2, total - 1, total, total + 3, 2 * total}
        )
        shape = (warmup, total, max_lr, min_lr)
        mistakes = {
            HINTS["warmup_off_by_one"]: schedule(steps, *shape, warm=lambda step, warmup=warmup: step / warmup),
            HINTS["cosine_to_zero"]: schedule(steps, warmup, total, max_lr, 0.0),
            HINTS["cosine_from_zero"]: schedule(steps, *shape, progress=lambda step, total=total: step / total),
            HINTS["no_floor"]: schedule(steps, *shape, floor=False),
        }
        args = [torch.tensor(steps), torch.tensor(shape, dtype=torch.float64)]
        cases.append(Case(name, args, schedule(steps, *shape), mistakes=mistakes))
    return cases


# --- train_step ---------------------------------------------------------------------------------


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


# --- evaluate -----------------------------------------------------------------------------------


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


# --- the outcome: the learner's loop trains the learner's model ---------------------------------


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


def training(name: str, driver: str | None, method: str | None = None) -> Target:
    return driven("training", name, driver, method)


EXACT = {"tolerance": Tolerance(atol=1e-5, rtol=1e-5), "expected_from": FIRST_PRINCIPLES}
OPTIMIZER = ("torch._dynamo",)  # torch.optim's first optimizer imports it: about 2 s
PAGE = "17-training-loop.md"
CHECKS = (
    Check("training.next_token_loss", 1, training("next_token_loss", None), "the next-token loss",
          next_token_loss_cases, **EXACT),
    Check("training.make_optimizer", 1, training("make_optimizer", "groups"),
          "AdamW with decay on the matrices only", make_optimizer_cases, comparison=same_groups,
          expected_from=FIRST_PRINCIPLES, run=Run(warm_imports=OPTIMIZER)),
    Check("training.lr_at", 1, training("lr_at", "schedule"), "warm-up and cosine decay", lr_at_cases,
          tolerance=Tolerance(atol=1e-12, rtol=1e-9), expected_from=FIRST_PRINCIPLES),
    Check("training.train_step", 2, training("train_step", "steps"), "one optimisation step",
          train_step_cases, uses=("training.next_token_loss",), **EXACT, run=Run(warm_imports=OPTIMIZER)),
    Check("training.evaluate", 1, training("evaluate", "evaluation"), "evaluation: loss and accuracy",
          evaluate_cases, uses=("training.next_token_loss",), **EXACT),
    Check("training.trainer", 3, training("Trainer", "outcome", "fit"),
          "the loop trains a tiny Transformer", outcome_cases, comparison=below_threshold, notes=outcome_notes,
          tolerance=Tolerance(atol=0.0, rtol=1e-6), expected_from="the bar to clear",
          uses=("training.make_optimizer", "training.lr_at", "training.train_step"),
          run=Run(warm_imports=OPTIMIZER, min_timeout=OUTCOME_TIMEOUT)),
)  # fmt: skip
