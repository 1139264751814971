"""Diagnosis: where the learner's computation first leaves GPT-2's, and which classic mistake it
most likely is. Works on NumPy arrays in the grader's process, like every comparison."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

import numpy as np

from grader.shared import wire
from grader.shared.compare import MASKED_AT_MOST
from grader.shared.types import Tolerance

# Names a learner is likely to give a step, when they are not the step's own label.
ALIASES = {
    "mean": ("residual_mean", "mu"),
    "var": ("residual_var", "variance"),
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


def close_where_kept(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> bool:
    """`close` on the values the reference's mask keeps: a score it masks (-inf) may be anything, so the
    learner's scores match whether named before the mask or after it."""
    if actual.shape != expected.shape or not np.issubdtype(actual.dtype, np.floating):
        return False
    return close(np.where(expected == -np.inf, -np.inf, actual), expected, tolerance)


def same_up_to_axis_order(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance, equal=close) -> bool:
    """`equal` after any reordering of axes: (batch, n_heads, posn, d_head) matches (batch, posn, n_heads, d_head)."""
    if actual.ndim != expected.ndim or sorted(actual.shape) != sorted(expected.shape):
        return False
    orders = (
        order
        for order in itertools.permutations(range(actual.ndim))
        if tuple(actual.shape[i] for i in order) == expected.shape
    )
    return any(equal(actual.transpose(order), expected, tolerance) for order in orders)


def broadcasts_to(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> bool:
    """Whether `actual`, short of leading axes or with them of size 1 ((posn, d_model) for (batch, posn,
    d_model)), equals `expected` once broadcast: it gives the same values wherever it is added."""
    core = actual.shape[next((i for i, n in enumerate(actual.shape) if n != 1), actual.ndim) :]
    if not core or len(core) >= expected.ndim or expected.shape[-len(core) :] != core:
        return False
    return close(np.broadcast_to(actual.reshape(core), expected.shape), expected, tolerance)


def at_its_scale(expected: np.ndarray, tolerance: Tolerance) -> Tolerance:
    """The output's tolerance for one step of the reference's, shrunk with the step's size where it is under 1: a
    variance of 1e-3 read N-1 for N is 1e-6 off, within the output's 1e-4 but 1/767 of the step itself; a std of
    0.14 with eps outside its root is 2e-4 of itself off, which the output's rtol would pass, and the output not."""
    kept = np.abs(expected[np.isfinite(expected)]) if np.issubdtype(expected.dtype, np.floating) else np.array([])
    scale = min(1.0, float(np.sqrt(np.mean(np.square(kept, dtype=np.float64))))) if kept.size else 1.0
    return Tolerance(atol=tolerance.atol * scale, rtol=tolerance.rtol * scale)


def without_unit_axes(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The axes that hold more than one value; all of them where there is one value only (a scalar is no statistic)."""
    return tuple(n for n in shape if n != 1) if np.prod(shape) > 1 else shape


def same_but_unit_axes(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> bool:
    """`close_where_kept` once axes of size 1 are set aside: a variance taken without keepdim, (batch, posn), is the
    step (batch, posn, 1)."""
    if actual.shape == expected.shape or without_unit_axes(actual.shape) != without_unit_axes(expected.shape):
        return False
    return close_where_kept(actual.reshape(expected.shape), expected, tolerance)


def matches_step(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> bool:
    """The learner's tensor is this step of the reference's, at the step's own scale (`at_its_scale`): in any
    axis order, before or after the mask, broadcast over leading axes, or without its axes of size 1."""
    tolerance = at_its_scale(expected, tolerance)
    return (
        same_up_to_axis_order(actual, expected, tolerance, close_where_kept)
        or broadcasts_to(actual, expected, tolerance)
        or same_but_unit_axes(actual, expected, tolerance)
    )


@dataclass(frozen=True)
class Candidate:
    """A tensor the learner's process recorded: its value, its name (a submodule's output goes by the
    module's path below the module under check, as the steps do), and the line that produced it (no line
    for an argument, which the learner's code was given rather than computed). A submodule's output also
    keeps the input the learner's code gave that submodule (`given`)."""

    value: np.ndarray
    name: str = ""
    file: str = ""
    line: int | None = None
    given: np.ndarray | None = None

    @property
    def place(self) -> str:
        return f"{self.file}:{self.line}" if self.line else ""


@dataclass(frozen=True)
class Divergence:
    """Where the learner's computation first leaves the reference's: what to say, and the line."""

    text: str
    file: str = ""
    line: int | None = None
    step: str = field(default="", compare=False)  # the label of the step it says first differs
    moved: str = field(default="", compare=False)  # the step whose values the learner's tensor there rearranges


def first_divergence(
    steps: list[tuple[str, np.ndarray]],
    candidates: list[Candidate],
    tolerance: Tolerance,
    reference: str = "GPT-2",
    own_file: str = "",
) -> Divergence | None:
    """ "q, k, v match GPT-2; attn_scores is the first step that does not (attention.py:40)",
    matching the learner's tensors to GPT-2's intermediates by value, whatever their names.

    A step no tensor matches either differs (some tensor the learner's code produced stands for it
    and does not match: see `stand_in`) or is computed inline, so the learner's code never names
    it; the second is said as such. Only a line of `own_file` (the file of the module under check) is
    blamed: a submodule's output is at the line that called it. None when nothing was recorded or
    nothing differs."""
    if not candidates:
        return None
    matches = [[matches_step(c.value, expected, tolerance) for c in candidates] for _, expected in steps]
    unmatched = {i for i in range(len(candidates)) if not any(row[i] for row in matches)}
    labels = [label for label, _ in steps]
    blamable = [bool(c.line) and own_file in ("", c.file) for c in candidates]
    firsts = [row.index(True) if any(row) else None for row in matches]
    matched, unnamed, after, moved = [], [], 0, ""  # a step's stand-in comes after what matched the steps before
    for index, (label, expected) in enumerate(steps):
        said = divergence_text(matched, unnamed, label, reference)
        if firsts[index] is not None:
            # Matched, unless the learner's own tensor for it, made later, differs (scores masked wrong).
            until = min((i for i in firsts[index + 1 :] if i is not None), default=len(candidates))
            remade = [candidates[i] for i in sorted(unmatched) if firsts[index] < i < until and blamable[i]]
            culprit = next((c for c in shaped_like(expected, remade) if names_step(c.name, label)), None)
            if culprit is None:
                matched.append(label)
                unnamed = []  # a later step matches: the inline ones before it were right
                after = max(after, firsts[index] + 1)
                continue
            # Remade from the right values: where it was remade (a helper's `return`), not the caller's name.
            culprit = computed_at(culprit, [c for c, own in zip(candidates, blamable, strict=True) if own])
        elif holder := holding_earlier_step(label, index, candidates, matches, labels, blamable):
            culprit, said = holder[0], f"{said}: your {shown(holder[0].name)} equals {holder[1]}"
        else:
            later = [candidates[i] for i in sorted(unmatched) if i >= after and blamable[i]]
            last = labels.index(matched[-1]) if matched else None
            culprit = rearranging(steps[last][1], candidates[firsts[last]], later, tolerance) if matched else None
            if culprit is not None:
                moved = matched[-1]
                said = f"{said}: your {shown(culprit.name)} holds {moved}'s values in another order"
            else:
                culprit = stand_in(label, expected, labels[index + 1 :], later)
        if culprit is None:
            unnamed.append(label)
            continue
        before = steps[index - 1][1] if index else None
        if names_step(culprit.name, label) and given_right_input(culprit.given, before, tolerance):
            return Divergence(
                f"{said}, though it was given the right input: cannot locate the difference inside your {label}",
                step=label,
            )
        return Divergence(said + at(culprit), culprit.file, culprit.line, label, moved)
    return None


def divergence_text(matched: list[str], unnamed: list[str], label: str, reference: str) -> str:
    said = [f"{join_steps(matched)} {'matches' if len(matched) == 1 else 'match'} {reference}"] if matched else []
    if unnamed:
        said.append(
            f"{join_steps(unnamed)} {'is' if len(unnamed) == 1 else 'are'} not among the tensors your code names"
        )
    if said:
        said.append(f"{label} is the first step that {'differs' if unnamed else 'does not'}")
    else:
        said.append(f"{label}, the first step, already differs from {reference}")
    return "; ".join(said)


def holding_earlier_step(
    label: str, index: int, candidates: list[Candidate], matches: list[list[bool]], labels: list[str], blamable
) -> tuple[Candidate, str] | None:
    """The learner's tensor named for the step `label` that holds an earlier step's value (a residual not
    added: resid_mid equals attn), with that step's label. Not the first tensor to hold that value: that one is the
    learner's own computation of the earlier step, named for a later one (q.k named attn_scores, scaled later)."""
    return next(
        (
            (candidate, labels[step])
            for i, candidate in enumerate(candidates)
            for step in range(index)
            if blamable[i] and matches[step][i] and matches[step].index(True) != i and names_step(candidate.name, label)
        ),
        None,
    )


def shown(name: str) -> str:
    return "return value" if name == "return" else name


def at(candidate: Candidate) -> str:
    return f" ({candidate.place})" if candidate.place else ""


def given_right_input(given: np.ndarray | None, before: np.ndarray | None, tolerance: Tolerance) -> bool:
    """Whether a submodule was given what the reference's was: the step before's value, or token ids (an
    integer input, which nothing in a model computes). A submodule that differs on the right input differs
    inside, where the steps do not reach."""
    if given is None:
        return False
    if not np.issubdtype(given.dtype, np.floating):
        return True
    return before is not None and matches_step(given, before, tolerance)


def stand_in(label: str, expected: np.ndarray, later: list[str], unmatched: list[Candidate]) -> Candidate | None:
    """The learner's tensor that most likely stands for the step `label`, among those that match no
    step: the first of its shape (axes in any order) that the learner's code produced, one named for
    the step (or one of its aliases) first, and never one named for a later step, under any name its values go by
    (the return value is the output's; a helper's return that the caller names attn_pattern is the pattern). None
    when there is none: the step is computed inline (in the line that computes the step after it)."""
    shaped = [c for c in shaped_like(expected, unmatched) if c.line]
    named = [c for c in shaped if names_step(c.name, label)]
    others = [
        c
        for c in shaped
        if not any(names_step(d.name, step) for d in shaped if same_tensor(c, d) for step in [label, *later])
    ]
    return next(iter(named or others), None)


def shaped_like(expected: np.ndarray, candidates: list[Candidate]) -> list[Candidate]:
    """The candidates of the step's shape, its axes in any order, axes of size 1 aside (a variance without keepdim)."""
    shape = sorted(without_unit_axes(expected.shape))
    return [c for c in candidates if sorted(without_unit_axes(c.value.shape)) == shape]


def same_tensor(a: Candidate, b: Candidate) -> bool:
    """The very same values, as recorded twice: a helper's `return`, then the caller's name for it."""
    return a.value.shape == b.value.shape and np.array_equal(a.value, b.value)


def computed_at(culprit: Candidate, own: list[Candidate]) -> Candidate:
    """The first record of the culprit's very values: the line that computed them (a helper's `return`),
    rather than the caller's line that only named them."""
    return next((c for c in own if same_tensor(c, culprit)), culprit)


def rearranging(step: np.ndarray, twin: Candidate, later: list[Candidate], tolerance: Tolerance) -> Candidate | None:
    """The learner's tensor that holds the very values of `twin` (theirs for the step) in another order than the
    step's own, reshaped: heads merged as (d_head n_heads), where W_O's rows run (n_heads d_head). Merged in the
    step's own order it is the step; `later` are the tensors that match no step, made after those that matched."""
    values = np.sort(twin.value, axis=None)
    return next(
        (
            c
            for c in later
            if c.value.size == step.size
            and np.issubdtype(c.value.dtype, np.floating)
            and not matches_step(c.value.reshape(step.shape), step, tolerance)
            and np.array_equal(np.sort(c.value, axis=None), values)
        ),
        None,
    )


def equal_step(value: np.ndarray, steps: dict[str, np.ndarray], tolerance: Tolerance) -> str | None:
    """The reference's step a tensor equals, by value at the step's own scale, whatever its name; None if none."""
    return next((label for label, step in steps.items() if matches_step(value, step, tolerance)), None)


def named_step(name: str, steps: dict[str, np.ndarray]) -> str | None:
    """The reference's step a tensor's name names (its label or an alias: residual_var is var); None if none."""
    return next((label for label in steps if names_step(name, label)), None)


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
    actual: np.ndarray,
    mistakes: list[tuple[str, np.ndarray]],
    tolerance: Tolerance,
    comparison=None,
    expected: np.ndarray | None = None,
    elsewhere: list[tuple[np.ndarray, dict[str, np.ndarray]]] | tuple = (),
) -> str | None:
    """The hint of the first known mistake whose output the learner's output equals, as the check's own
    comparison judges equal; without one (allclose), or where the mistake's output holds NaN or inf (which no
    comparison passes), elementwise with NaN and inf where the mistake has them.
    A mistake whose output equals `expected` (the right answer) here is never named: on this input it
    changes nothing, so a failing output cannot be its doing. Where two agree here (eps left out, or outside the
    root), the first the output equals on the other cases too (`elsewhere`: (output, {hint: mistake's})) is named."""
    hints = [hint for hint, output in mistakes if equals_mistake(actual, output, tolerance, comparison, expected)]
    everywhere = (
        h for h in hints if all(h not in by or equals_mistake(o, by[h], tolerance, comparison) for o, by in elsewhere)
    )
    return next(everywhere, next(iter(hints), None))


def equals_mistake(actual, output, tolerance: Tolerance, comparison=None, expected=None) -> bool:
    if comparison is not None:
        return comparison(actual, output, tolerance).ok or (
            not_finite(output) and same_values(actual, output, tolerance)
        )
    if expected is not None and same_values(output, expected, tolerance):
        return False
    return same_values(actual, output, tolerance)


def not_finite(values: np.ndarray) -> bool:
    """Whether floating values hold a NaN or an inf."""
    return values.dtype.kind == "f" and not np.isfinite(values).all()


def where_said(
    divergence: Divergence | None, actual: np.ndarray, candidates: list[Candidate], own_file: str = ""
) -> str | None:
    """The where a report gives: the divergence's text, then, of an output holding NaN or inf, the learner's first
    tensor to hold one (`non_finite_origin`)."""
    origin = non_finite_origin(candidates, own_file) if not_finite(actual) else None
    return "; ".join(text for text in (divergence and divergence.text, origin) if text) or None


def non_finite_origin(candidates: list[Candidate], own_file: str = "") -> str | None:
    """ "a NaN first appears in your attn_pattern": the first tensor the learner's code computed (at a line of
    `own_file`) that holds a NaN or an inf, -inf aside (a masked score); None when none does. Its line is not given:
    a right step can make the first NaN (a softmax over a row that a wrong mask hid entirely)."""
    for candidate in candidates:
        value = candidate.value
        if candidate.line and own_file in ("", candidate.file) and value.dtype.kind == "f":
            kind = "a NaN" if np.isnan(value).any() else "an inf" if (value == np.inf).any() else None
            if kind:
                return f"{kind} first appears in your {shown(candidate.name)}"
    return None


def same_values(actual: np.ndarray, output: np.ndarray, tolerance: Tolerance) -> bool:
    """`close`, with NaN and inf required in the same places."""
    if actual.shape != output.shape:
        return False
    finite = np.isfinite(output)
    same_gaps = np.array_equal(finite, np.isfinite(actual)) and np.array_equal(np.isnan(output), np.isnan(actual))
    return same_gaps and close(np.where(finite, actual, 0), np.where(finite, output, 0), tolerance)


def raised_on(hints: dict[str, str], answered, where: wire.Place | None) -> str:
    """ " on one_position: <its hint>" when the learner's code raised on a case built to expose one mistake (`hints`,
    each case's); the case alone when their own `assert` or `raise` did: it is reported as itself, no mistake named."""
    case = next((name for name in hints if name not in answered), None)
    own = where is not None and where.code.split("(")[0].split(" ")[0] in ("assert", "raise")
    return "" if not (case and hints[case]) else f" on {case}" if own else f" on {case}: {hints[case]}"


def expected_shape(name: str, shapes: dict[str, list[int]]) -> list[int] | None:
    """The shape GPT-2's step of this name has, if the name is one we recognise."""
    if name in shapes:
        return shapes[name]
    return next((shapes[label] for label, names in ALIASES.items() if name in names and label in shapes), None)
