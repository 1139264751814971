"""What more than one beam check uses: the beams' vocabulary and tolerance, the beams read from their rows and
compared (in NumPy: they run in the grader's process), the tables and inputs of the stand-ins, and the Beams target.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Target, Tolerance
from grader.checks.sampling._common import DRIVERS, char_tokenizer, generator, stand_in_inputs
from grader.shared.compare import CaseComparison
from grader.shared.formats import END_OF_TEXT, PADDING

if TYPE_CHECKING:
    from torch import Tensor

BEAM_ALPHABET = "abc"
BEAM_VOCABULARY = [*BEAM_ALPHABET, END_OF_TEXT]
LOGPROB_TOLERANCE = Tolerance(atol=1e-4, rtol=0.0)


# --- comparisons (NumPy: they run in the grader's process) --------------------------------------


Beam = tuple[int, float, tuple[int, ...]]  # group, log-prob sum, token ids
SHOWN_BEAMS = 8  # of a list of beams a message shows
UNREADABLE = "the beams are not rows of [group, log-prob sum, whole-number token ids]"
SLACK = 64  # beams may hold this many times the values expected: a wrong number of beams, or longer ones


def parse_beams(rows) -> list[Beam] | None:
    """The beams of `grader.learner.drivers.beam_rows`'s rows; None when they are not such rows (the driver runs
    in the learner's process). A log-prob sum may be anything, -inf for a banned token included."""
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    if rows.ndim != 2 or rows.shape[1] < 2:
        return None
    ids = np.delete(rows, 1, axis=1)
    if not (np.isfinite(ids) & (ids == np.round(ids))).all():
        return None
    return [(int(row[0]), float(row[1]), tuple(int(t) for t in row[2:] if t != PADDING)) for row in rows]


def token_text(token: int) -> str:
    return BEAM_VOCABULARY[token] if 0 <= token < len(BEAM_VOCABULARY) else f"<{token}>"


def show(beams: list[Beam]) -> str:
    shown = [
        f"{''.join(token_text(t) for t in tokens)!r} ({logprob:.3f})" for _, logprob, tokens in beams[:SHOWN_BEAMS]
    ]
    more = [f"{len(beams) - SHOWN_BEAMS} more"] if len(beams) > SHOWN_BEAMS else []
    return ", ".join(shown + more) or "none"


def matching(actual: list[Beam], expected: list[Beam], tolerance: Tolerance) -> bool:
    return len(actual) == len(expected) and all(
        a[0] == e[0] and a[2] == e[2] and abs(a[1] - e[1]) <= tolerance.atol
        for a, e in zip(actual, expected, strict=False)
    )


def compared_beams(actual, expected, tolerance: Tolerance, order, describe) -> CaseComparison:
    """The beams, each list put in `order`, equal within tolerance; else `describe(got, want)`."""
    if np.size(actual) > SLACK * max(np.size(expected), 1):
        return CaseComparison(False, f"the beams hold {np.size(actual)} values, where {np.size(expected)} are expected")
    got, want = parse_beams(actual), parse_beams(expected)
    if got is None or want is None:
        return CaseComparison(False, UNREADABLE)
    got, want = order(got), order(want)
    ok = matching(got, want, tolerance)
    return CaseComparison(ok, "" if ok else describe(got, want))


# --- the cases ----------------------------------------------------------------------------------


def beam_table(seed: int, eos_bias: float = 0.0) -> Tensor:
    import torch

    table = 1.5 * torch.randn(10, len(BEAM_VOCABULARY), len(BEAM_VOCABULARY), generator=generator(seed))
    table[..., -1] += eos_bias
    return table


def beam_extra(table: Tensor, prompt: str | None = None) -> dict:
    from grader.learner.drivers import text_tensor

    extra = stand_in_inputs(table, char_tokenizer(BEAM_ALPHABET))
    return extra | ({"prompt": text_tensor(prompt)} if prompt else {})


def unless_equal(wrong: Tensor, *others: Tensor) -> Tensor | None:
    """`wrong`, or None where it equals one of `others` (the right answer, a mistake listed before it)."""
    return None if any(wrong.shape == other.shape and bool((wrong == other).all()) for other in others) else wrong


# --- the checks ---------------------------------------------------------------------------------


def beams(method: str, driver: str) -> Target:
    return Target("sampling", "Beams", method, driver=f"{DRIVERS}:{driver}")
