"""Comparing one output with the reference's: shape, dtype, finiteness, then values.

The parent compares NumPy arrays read back from the learner's process: it never imports torch,
so grading starts as fast as the learner's process does, and nothing the learner's code patches
in torch can reach a comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grader.shared.types import Tolerance

MASKED_AT_MOST = -1e4  # a masked score must be this low or lower; exp() of it is 0 in float32


@dataclass
class CaseComparison:
    ok: bool
    message: str = ""
    max_abs_diff: float | None = None
    within: float | None = None  # fraction of values within tolerance
    actual_shape: list[int] | None = None
    expected_shape: list[int] | None = None


def first_index(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def validate(actual: np.ndarray, expected: np.ndarray, allow_minus_inf: bool = False) -> CaseComparison | None:
    """A failed comparison when the output cannot be compared value by value, else None."""
    shapes = {"actual_shape": list(actual.shape), "expected_shape": list(expected.shape)}
    if actual.shape != expected.shape:
        return CaseComparison(False, f"output shape {tuple(actual.shape)}, expected {tuple(expected.shape)}", **shapes)
    if not np.issubdtype(actual.dtype, np.floating):
        return CaseComparison(False, f"output dtype {actual.dtype}, expected a floating dtype", **shapes)
    said = non_finite(actual, ~np.isfinite(actual) & ~(allow_minus_inf & (actual == -np.inf)))
    return CaseComparison(False, said, **shapes) if said else None


def non_finite(actual: np.ndarray, bad: np.ndarray) -> str | None:
    """ "output has 3 non-finite values, the first a NaN at index (0, 1)" for the values `bad` marks, else None."""
    if not bad.any():
        return None
    index = first_index(bad)
    value = float(actual[index])
    kind = "a NaN" if np.isnan(value) else "an inf" if value > 0 else "a -inf"
    return f"output has {int(bad.sum())} non-finite values, the first {kind} at index {index}"


def allclose(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> CaseComparison:
    invalid = validate(actual, expected)
    if invalid:
        return invalid
    diff = np.abs(actual.astype(expected.dtype) - expected)
    close = diff <= tolerance.atol + tolerance.rtol * np.abs(expected)
    max_abs_diff = float(diff.max()) if diff.size else 0.0
    within = float(close.mean()) if close.size else 1.0
    ok = bool(close.all())
    message = (
        ""
        if ok
        else f"max abs diff {max_abs_diff:.3g} at index {first_index(diff == diff.max())}; {within:.1%} "
        "of values within tolerance"
    )
    return CaseComparison(ok, message, max_abs_diff, within, list(actual.shape), list(expected.shape))


def causal_mask(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> CaseComparison:
    """Visible scores unchanged; masked ones -inf or any value <= MASKED_AT_MOST."""
    visible = np.isfinite(expected)
    invalid = validate(actual, expected, allow_minus_inf=True)
    if invalid:
        return invalid
    masked = actual <= MASKED_AT_MOST
    leaked, hidden = ~visible & ~masked, visible & masked
    with np.errstate(invalid="ignore"):
        diff = np.abs(actual - expected)
    changed = visible & ~hidden & (diff > tolerance.atol + tolerance.rtol * np.abs(expected))
    max_abs_diff = float(diff[visible & ~hidden].max(initial=0.0))
    shapes = {"actual_shape": list(actual.shape), "expected_shape": list(expected.shape)}
    if leaked.any():
        index = first_index(leaked)
        return CaseComparison(
            False,
            f"{int(leaked.sum())} scores of future keys are not masked, the first at (query {index[-2]}, "
            f"key {index[-1]})",
            max_abs_diff,
            **shapes,
        )
    if hidden.any():
        index = first_index(hidden)
        offset = expected.shape[-1] - expected.shape[-2]  # cached keys before the first query: query i sits there + i
        where = "on the diagonal" if index[-1] == index[-2] + offset else "of past keys"
        visible_rule = f"key <= query + {offset}" if offset else "key <= query"
        return CaseComparison(
            False,
            f"{int(hidden.sum())} scores {where} are masked, the first at (query {index[-2]}, key "
            f"{index[-1]}); keep {visible_rule} visible",
            max_abs_diff,
            **shapes,
        )
    if changed.any():
        return CaseComparison(
            False, f"visible scores were changed: max abs diff {max_abs_diff:.3g}", max_abs_diff, **shapes
        )
    return CaseComparison(True, "", max_abs_diff, 1.0, **shapes)


def modified_in_place(before: np.ndarray, after: np.ndarray) -> bool:
    return before.shape != after.shape or not np.array_equal(before, after, equal_nan=before.dtype.kind == "f")
