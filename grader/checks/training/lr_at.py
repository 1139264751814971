"""training.lr_at: the learning rate at each step, a linear warm-up then a cosine decay to min_lr, and min_lr
after the last step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Tolerance
from grader.checks.training._common import FIRST_PRINCIPLES, training
from grader.checks.training._oracle import schedule

if TYPE_CHECKING:
    from grader.builder.interface import Reference

HINTS = {  # what each classic mistake most likely is, as the failing check names it
    "warmup_off_by_one": "the warm-up is off by one: step 0 must already train, max_lr * (step + 1) / warmup",
    "cosine_to_zero": "the cosine decays to 0: it ends at min_lr",
    "cosine_from_zero": "the cosine starts at step 0: its progress is (step - warmup) / (total - warmup)",
    "no_floor": "no floor after total steps: from step total on the rate is min_lr",
}


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


PAGE = "17-training-loop.md"
CHECK = Check(
    "training.lr_at",
    1,
    training("lr_at", "schedule"),
    "warm-up and cosine decay",
    lr_at_cases,
    tolerance=Tolerance(atol=1e-12, rtol=1e-9),
    expected_from=FIRST_PRINCIPLES,
)
