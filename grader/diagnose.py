"""Diagnosis: where the learner's computation first leaves GPT-2's, and which classic mistake it
most likely is. Works on NumPy arrays in the grader's process, like every comparison."""

from __future__ import annotations

import itertools
import re

import numpy as np

from .compare import MASKED_AT_MOST
from .types import Tolerance

# Names a learner is likely to give a step, when they are not the step's own label.
ALIASES = {
    "std": ("residual_std", "scale", "sigma"),
    "normalized": ("residual_normalized", "x_hat", "normalised"),
    "attn_scores": ("scores", "attn_scores_masked", "masked_scores"),
    "attn_pattern": ("pattern", "probs", "attn_probs", "attn_weights"),
    "output": ("out", "attn_out", "mlp_out", "logits"),
}


def close(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> bool:
    """Equal within tolerance, where a masked (-inf) reference value matches any masked value."""
    if actual.shape != expected.shape or not np.issubdtype(actual.dtype, np.floating):
        return False
    masked = expected == -np.inf
    if (masked & ~(actual <= MASKED_AT_MOST)).any():
        return False
    with np.errstate(invalid="ignore"):
        ok = np.abs(actual - expected) <= tolerance.atol + tolerance.rtol * np.abs(expected)
    return bool((ok | masked).all())


def same_up_to_axis_order(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> bool:
    """`close` after any reordering of axes: (batch, n_heads, posn, d_head) matches (batch, posn, n_heads, d_head)."""
    if actual.ndim != expected.ndim or sorted(actual.shape) != sorted(expected.shape):
        return False
    orders = (
        order
        for order in itertools.permutations(range(actual.ndim))
        if tuple(actual.shape[i] for i in order) == expected.shape
    )
    return any(close(actual.transpose(order), expected, tolerance) for order in orders)


def first_divergence(
    steps: list[tuple[str, np.ndarray]], candidates: list[np.ndarray], tolerance: Tolerance, reference: str = "GPT-2"
) -> str | None:
    """ "q, k, v match GPT-2; attn_scores is the first step that does not", matching the learner's
    tensors to GPT-2's intermediates by value, whatever their names. None when nothing was recorded."""
    if not candidates:
        return None
    matched = []
    for label, expected in steps:
        if not any(same_up_to_axis_order(candidate, expected, tolerance) for candidate in candidates):
            if not matched:
                return f"{label}, the first step, already differs from {reference}"
            verb = "matches" if len(matched) == 1 else "match"
            return f"{join_steps(matched)} {verb} {reference}; {label} is the first step that does not"
        matched.append(label)
    return None


def join_steps(labels: list[str]) -> str:
    """ "embed, pos_embed, blocks.0-blocks.4": runs of numbered blocks are shortened."""
    parts: list[str] = []
    for _, group in itertools.groupby(
        labels, key=lambda label: re.sub(r"\d+$", "", label) if re.search(r"\.\d+$", label) else label
    ):
        group = list(group)
        parts.append(f"{group[0]}-{group[-1]}" if len(group) > 2 else ", ".join(group))
    return ", ".join(parts)


def matching_mistake(actual: np.ndarray, mistakes: list[tuple[str, np.ndarray]], tolerance: Tolerance) -> str | None:
    """The hint of the first known mistake whose output the learner's output equals."""
    for hint, output in mistakes:
        if actual.shape != output.shape:
            continue
        finite = np.isfinite(output)
        same_gaps = np.array_equal(finite, np.isfinite(actual)) and np.array_equal(np.isnan(output), np.isnan(actual))
        if same_gaps and close(np.where(finite, actual, 0), np.where(finite, output, 0), tolerance):
            return hint
    return None


def expected_shape(name: str, shapes: dict[str, list[int]]) -> list[int] | None:
    """The shape GPT-2's step of this name has, if the name is one we recognise."""
    if name in shapes:
        return shapes[name]
    return next((shapes[label] for label, names in ALIASES.items() if name in names and label in shapes), None)
