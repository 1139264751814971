"""training.make_optimizer: AdamW's parameter groups for the tiny Transformer, weight decay on the W_ matrices only
(not the embeddings), every parameter in one group."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case, Check, Run, Tolerance
from grader.checks.training._common import FIRST_PRINCIPLES, OPTIMIZER, training
from grader.checks.training._oracle import decayed_by_name, group_rows
from grader.shared.compare import CaseComparison, validate
from grader.shared.formats import PARAMETER_NAMES, TINY

if TYPE_CHECKING:
    from grader.builder.interface import Reference

HINTS = {  # what each classic mistake most likely is, as the failing check names it
    "decay_all": "weight decay on every parameter: biases, LayerNorm's w and b and the embeddings get none",
    "decay_ndim": "decay chosen by p.ndim >= 2: b_Q, b_K, b_V are 2-D and W_E, W_pos are embeddings; decide by name",
    "decay_embeddings": "the embeddings W_E and W_pos are decayed: only the other W_ matrices are",
    "decay_none": "no weight decay at all: the W_ matrices get weight_decay",
}


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


PAGE = "17-training-loop.md"
CHECK = Check(
    "training.make_optimizer",
    1,
    training("make_optimizer", "groups"),
    "AdamW with decay on the matrices only",
    make_optimizer_cases,
    comparison=same_groups,
    expected_from=FIRST_PRINCIPLES,
    run=Run(warm_imports=OPTIMIZER),
)
