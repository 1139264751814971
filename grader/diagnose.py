"""Diagnosis: where the learner's computation first leaves GPT-2's, and which classic mistake it
most likely is. Works on NumPy arrays in the grader's process, like every comparison."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np

from .compare import MASKED_AT_MOST
from .types import Tolerance

# Names a learner is likely to give a step, when they are not the step's own label.
ALIASES = {
    "std": ("residual_std", "scale", "sigma"),
    "normalized": ("residual_normalized", "x_hat", "normalised"),
    "attn_scores": ("scores", "attn_scores_masked", "masked_scores"),
    "attn_pattern": ("pattern", "probs", "attn_probs", "attn_weights"),
    "output": ("out", "attn_out", "mlp_out", "logits", "return"),  # "return": the value a function returns
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


@dataclass(frozen=True)
class Candidate:
    """A tensor the learner's process recorded: its value, its name (a submodule's output goes by the
    module's path, as the steps do), and the line that produced it (no line for an argument, which
    the learner's code was given rather than computed)."""

    value: np.ndarray
    name: str = ""
    file: str = ""
    line: int | None = None

    @property
    def place(self) -> str:
        return f"{self.file}:{self.line}" if self.line else ""


@dataclass(frozen=True)
class Divergence:
    """Where the learner's computation first leaves the reference's: what to say, and the line."""

    text: str
    file: str = ""
    line: int | None = None


def first_divergence(
    steps: list[tuple[str, np.ndarray]], candidates: list[Candidate], tolerance: Tolerance, reference: str = "GPT-2"
) -> Divergence | None:
    """ "q, k, v match GPT-2; attn_scores is the first step that does not (attention.py:40)",
    matching the learner's tensors to GPT-2's intermediates by value, whatever their names.

    A step no tensor matches either differs (some tensor the learner's code produced stands for it
    and does not match: see `stand_in`) or is computed inline, so the learner's code never names
    it; the second is said as such. None when nothing was recorded or nothing differs."""
    if not candidates:
        return None
    matches = [[same_up_to_axis_order(c.value, expected, tolerance) for c in candidates] for _, expected in steps]
    unmatched = {i for i in range(len(candidates)) if not any(row[i] for row in matches)}
    labels = [label for label, _ in steps]
    matched, unnamed, after = [], [], 0  # a step's stand-in comes after the tensors that matched the steps before
    for index, (label, expected) in enumerate(steps):
        if any(matches[index]):
            matched.append(label)
            unnamed = []  # a later step matches: the inline ones before it were right
            after = max(after, matches[index].index(True) + 1)
            continue
        later = [candidates[i] for i in sorted(unmatched) if i >= after]
        culprit = stand_in(label, expected, labels[index + 1 :], later)
        if culprit is None:
            unnamed.append(label)
            continue
        return Divergence(
            divergence_text(matched, unnamed, label, reference, culprit.place), culprit.file, culprit.line
        )
    return None


def divergence_text(matched: list[str], unnamed: list[str], label: str, reference: str, place: str) -> str:
    said = [f"{join_steps(matched)} {'matches' if len(matched) == 1 else 'match'} {reference}"] if matched else []
    if unnamed:
        said.append(
            f"{join_steps(unnamed)} {'is' if len(unnamed) == 1 else 'are'} not among the tensors your code names"
        )
    if said:
        said.append(f"{label} is the first step that {'differs' if unnamed else 'does not'}")
    else:
        said.append(f"{label}, the first step, already differs from {reference}")
    return "; ".join(said) + (f" ({place})" if place else "")


def stand_in(label: str, expected: np.ndarray, later: list[str], unmatched: list[Candidate]) -> Candidate | None:
    """The learner's tensor that most likely stands for the step `label`, among those that match no
    step: the first of its shape (axes in any order) that the learner's code produced, one named for
    the step (or one of its aliases) first, and never one named for a later step (the return value
    is the output's). None when there is none: the step is computed inline."""
    shaped = [
        c
        for c in unmatched
        if c.line and c.value.ndim == expected.ndim and sorted(c.value.shape) == sorted(expected.shape)
    ]
    named = [c for c in shaped if names_step(c.name, label)]
    others = [c for c in shaped if not any(names_step(c.name, step) for step in [label, *later])]
    return next(iter(named or others), None)


def names_step(name: str, label: str) -> bool:
    return name == label or name in ALIASES.get(label, ())


def join_steps(labels: list[str]) -> str:
    """ "embed, pos_embed, blocks.0-blocks.4": runs of numbered blocks are shortened."""
    parts: list[str] = []
    for _, group in itertools.groupby(
        labels, key=lambda label: re.sub(r"\d+$", "", label) if re.search(r"\.\d+$", label) else label
    ):
        group = list(group)
        parts.append(f"{group[0]}-{group[-1]}" if len(group) > 2 else ", ".join(group))
    return ", ".join(parts)


def matching_mistake(
    actual: np.ndarray, mistakes: list[tuple[str, np.ndarray]], tolerance: Tolerance, comparison=None
) -> str | None:
    """The hint of the first known mistake whose output the learner's output equals, as the check's own
    comparison judges equal; without one (allclose), elementwise with NaN and inf where the mistake has them."""
    for hint, output in mistakes:
        if comparison is not None:
            if comparison(actual, output, tolerance).ok:
                return hint
            continue
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
