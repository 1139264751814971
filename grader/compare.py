"""Comparing one output with the reference's: shape, dtype, finiteness, then values."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .checks import Tolerance

MASKED_AT_MOST = -1e4  # a masked score must be this low or lower; exp() of it is 0 in float32


@dataclass
class CaseComparison:
    ok: bool
    message: str = ""
    max_abs_diff: float | None = None
    within: float | None = None  # fraction of values within tolerance
    actual_shape: list[int] | None = None
    expected_shape: list[int] | None = None


def shape(tensor: torch.Tensor) -> list[int]:
    return list(tensor.shape)


def first_index(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in mask.nonzero()[0])


def validate(actual: torch.Tensor, expected: torch.Tensor, allow_minus_inf: bool = False) -> CaseComparison | None:
    """A failed comparison when the output cannot be compared value by value, else None."""
    shapes = {"actual_shape": shape(actual), "expected_shape": shape(expected)}
    if actual.shape != expected.shape:
        return CaseComparison(False, f"output shape {tuple(actual.shape)}, expected {tuple(expected.shape)}", **shapes)
    if not actual.is_floating_point():
        return CaseComparison(False, f"output dtype {actual.dtype}, expected a floating dtype", **shapes)
    bad = ~torch.isfinite(actual) & ~(allow_minus_inf & (actual == float("-inf")))
    if bad.any():
        index = first_index(bad)
        kind = "NaN" if torch.isnan(actual[index]) else "inf"
        return CaseComparison(False, f"output has {int(bad.sum())} non-finite values, the first a {kind} at index {index}", **shapes)
    return None


def allclose(actual: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance) -> CaseComparison:
    invalid = validate(actual, expected)
    if invalid:
        return invalid
    actual = actual.to(expected.dtype)
    diff = (actual - expected).abs()
    close = diff <= tolerance.atol + tolerance.rtol * expected.abs()
    max_abs_diff = float(diff.max()) if diff.numel() else 0.0
    within = float(close.float().mean()) if close.numel() else 1.0
    ok = bool(close.all())
    message = "" if ok else f"max abs diff {max_abs_diff:.3g} at index {first_index(diff == diff.max())}; {within:.1%} of values within tolerance"
    return CaseComparison(ok, message, max_abs_diff, within, shape(actual), shape(expected))


def causal_mask(actual: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance) -> CaseComparison:
    """Visible scores unchanged; masked ones -inf or any value <= MASKED_AT_MOST."""
    visible = torch.isfinite(expected)
    invalid = validate(actual, expected, allow_minus_inf=True)
    if invalid:
        return invalid
    leaked = ~visible & ~(actual <= MASKED_AT_MOST)
    hidden = visible & (actual <= MASKED_AT_MOST)
    changed = visible & ~hidden & ((actual - expected).abs() > tolerance.atol + tolerance.rtol * expected.abs())
    max_abs_diff = float((actual - expected)[visible].abs().max())
    shapes = {"actual_shape": shape(actual), "expected_shape": shape(expected)}
    if leaked.any():
        return CaseComparison(False, f"{int(leaked.sum())} scores of future keys are not masked, the first at (query {first_index(leaked)[-2]}, key {first_index(leaked)[-1]})", max_abs_diff, **shapes)
    if hidden.any():
        index = first_index(hidden)
        where = "on the diagonal" if index[-1] == index[-2] else "of past keys"
        return CaseComparison(False, f"{int(hidden.sum())} scores {where} are masked, the first at (query {index[-2]}, key {index[-1]}); keep key <= query visible", max_abs_diff, **shapes)
    if changed.any():
        return CaseComparison(False, f"visible scores were changed: max abs diff {max_abs_diff:.3g}", max_abs_diff, **shapes)
    return CaseComparison(True, "", max_abs_diff, 1.0, **shapes)


def modified_in_place(before: torch.Tensor, after: torch.Tensor) -> bool:
    return before.shape != after.shape or not torch.equal(before, after)
