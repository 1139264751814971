"""parameter_counts: the learner's count of GPT-2's parameters by part, compared exactly with the reference's
state_dict; the message names each part that differs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case, Check, Tolerance
from grader.checks.interp._common import EXACT_ONLY, interp, probed
from grader.shared.compare import CaseComparison, validate
from grader.shared.formats import COUNT_KEYS
from grader.shared.types import counts_by_part

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def as_counts(counts: dict[str, int]) -> Tensor:
    import torch

    return torch.tensor([float(counts[key]) for key in COUNT_KEYS], dtype=torch.float64)


def parameter_counts_cases(ref: Reference) -> list[Case]:
    counts = counts_by_part((name, math.prod(shape)) for name, shape in ref.parameter_shapes().items())
    d_vocab = ref.d_vocab
    right = counts | {"tied": counts["total"] - counts["unembed"]}
    no_b_U = right | {"unembed": right["unembed"] - d_vocab, "total": right["total"] - d_vocab}
    mistakes = {
        "b_U is not counted: count every parameter, trainable or not": as_counts(no_b_U),
        TIED_KEEPS_B_U: as_counts(right | {"tied": right["tied"] + d_vocab}),
    }
    return [Case("gpt2", [], as_counts(right), weights="", mistakes=mistakes)]


TIED_KEEPS_B_U = (
    "the tied count keeps b_U: GPT-2 has no unembedding bias, so the quoted count leaves out the whole unembedding"
)


# --- comparing counts ---------------------------------------------------------------------------


def same_counts(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> CaseComparison:
    """Every count exact; the message names each part that differs."""
    invalid = validate(actual, expected)
    if invalid:
        return invalid
    shapes = {"actual_shape": list(actual.shape), "expected_shape": list(expected.shape)}
    wrong = [
        f"{key} {int(a):,} (GPT-2: {int(e):,})"
        for key, a, e in zip(COUNT_KEYS, actual, expected, strict=False)
        if a != e
    ]
    return CaseComparison(not wrong, "; ".join(wrong), float(np.abs(actual - expected).max()), **shapes)


PAGE = "15-interp.md"
CHECK = Check(
    "interp.parameter_counts",
    1,
    interp("parameter_counts", "counts"),
    "parameter counts",
    probed(parameter_counts_cases),
    comparison=same_counts,
    tolerance=EXACT_ONLY,
)
