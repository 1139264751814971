"""The comparisons of Part 2's sampling checks (`kv_cache.py` uses `close` and `same_text` too), in
NumPy: they run in the grader's process. One token id (`same_token`), logits within a tolerance (`close`), the counts
of a sampling method's draws against the exact distribution (`frequencies`; `draws_again` says where a first round
leaves a case undecided), a generated text's bytes (`same_text`).

Distributions, without flakiness: a sampling method is called on fixed logits, DRAWS times a round, and its
counts are compared with the exact truncated, renormalised distribution. A token of probability 0 must never come
out. Every other token's frequency must lie within eps of its probability, where by Hoeffding's inequality and a
union bound over the n tokens of the support, P(some |frequency - p| > eps) <= 2 n exp(-2 N eps^2) for N draws; eps
is set so this is FALSE_FAILURE_PER_CASE. Each known mistake moves some probability by more than 2 eps(2 DRAWS) or
puts mass where there is none (the tests check this). A case whose first round is within `settled_within` of the
distribution everywhere passes there; any other gets a second round (decided in the grader's process,
`runner.rounds`) and is judged on both rounds' 2 DRAWS draws. A correct sampler fails only where its 2 DRAWS draws
stray beyond eps, and a known mistake passes only where its first round strays by more than eps(DRAWS) towards the
right answer or its 2 DRAWS draws by more than eps(2 DRAWS): with 6 such cases a correct sampler fails a run with
probability below 1e-7, and a known mistake is missed with probability below 2e-8. Most correct samplers stop after
one round. The learner's process also seeds torch before each case (one seed a round): a given sampler gets the same
verdict every run.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from grader.checks import Tolerance
from grader.shared.compare import CaseComparison, non_finite

DRAWS = 2000  # a round; a case the first round leaves undecided gets a second (draws_again)
ROUNDS = 2
FALSE_FAILURE_PER_CASE = 1e-8


def _shapes(actual: np.ndarray, expected: np.ndarray) -> dict:
    return {"actual_shape": list(actual.shape), "expected_shape": list(expected.shape)}


def same_token(actual, expected, tolerance: Tolerance) -> CaseComparison:
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.size != 1 or not np.issubdtype(actual.dtype, np.integer):
        return CaseComparison(
            False,
            f"returned {actual.size} values of dtype {actual.dtype}, not one token id (an int)",
            **_shapes(actual, expected),
        )
    ok = int(actual) == int(expected)
    return CaseComparison(
        ok,
        "" if ok else f"returned token {int(actual)}, expected {int(expected)}",
        **_shapes(actual.reshape(()), expected),
    )


def close(actual, expected, tolerance: Tolerance) -> CaseComparison:
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        return CaseComparison(
            False, f"output shape {actual.shape}, expected {expected.shape}", **_shapes(actual, expected)
        )
    said = non_finite(actual, ~np.isfinite(actual) & np.isfinite(expected))
    if said:  # no difference to give: NaN or inf where the answer is a number
        return CaseComparison(False, said, **_shapes(actual, expected))
    with np.errstate(invalid="ignore"):  # inf - inf: equal infinities differ by nothing
        diff = np.where(actual == expected, 0.0, np.abs(actual - expected))
        good = (diff <= tolerance.atol + tolerance.rtol * np.abs(expected)) & (diff < np.inf)
    max_abs_diff = float(diff.max()) if diff.size else 0.0
    if good.all():
        return CaseComparison(True, "", max_abs_diff, 1.0, **_shapes(actual, expected))
    index = tuple(int(i) for i in np.argwhere(~good)[0])
    message = f"at index {index}: {actual[index]:.4g}, expected {expected[index]:.4g}"
    return CaseComparison(False, message, max_abs_diff, float(good.mean()), **_shapes(actual, expected))


def frequency_bound(support: int, draws: float) -> float:
    """eps with 2 * support * exp(-2 draws eps^2) = FALSE_FAILURE_PER_CASE (Hoeffding, union bound)."""
    return math.sqrt(math.log(2 * support / FALSE_FAILURE_PER_CASE) / (2 * draws))


def counts_problem(counts: np.ndarray) -> str | None:
    """Why these cannot be the counts of one or both rounds of draws, or None. The draw driver counts in the
    learner's process, whose code may have replaced it: NaN or zero counts would otherwise compare as no deviation."""
    if not (np.isfinite(counts) & (counts >= 0) & (counts == np.round(counts))).all():
        return "the counts are not whole numbers of draws"
    if counts.sum() not in (DRAWS, ROUNDS * DRAWS):
        return f"the counts add up to {counts.sum():.0f} draws, not {DRAWS} (or {ROUNDS * DRAWS} over two rounds)"
    return None


def settled_within(support: int) -> float:
    """How close a first round's frequencies must all be to their probabilities for the case to pass without a
    second: a distribution more than 2 eps(2 DRAWS) from the right one (a known mistake) comes this close after DRAWS
    draws only where they stray by more than eps(DRAWS), with probability below FALSE_FAILURE_PER_CASE."""
    return 2 * frequency_bound(support, ROUNDS * DRAWS) - frequency_bound(support, DRAWS)


def draws_again(actual, expected) -> bool:
    """Whether a first round's counts leave the case undecided (Run.draws_again): they are counts of DRAWS draws,
    none of a token of probability 0 (either decides it now), and some frequency is farther than `settled_within`
    from its probability."""
    counts, probabilities = np.asarray(actual), np.asarray(expected, dtype=np.float64)
    if counts.dtype.kind not in "biuf" or counts.shape != probabilities.shape:
        return False
    counts = counts.astype(np.float64)
    if counts_problem(counts) or counts.sum() != DRAWS or ((probabilities == 0) & (counts > 0)).any():
        return False
    return bool(np.abs(counts / DRAWS - probabilities).max() > settled_within(int((probabilities > 0).sum())))


def frequencies(actual, expected, tolerance: Tolerance, kept: str = "the tokens that may be drawn") -> CaseComparison:
    """Counts of draws against exact probabilities; see the module's docstring for the bound. `kept` names the
    tokens of probability above 0 (the top k, ...), as a message that one came out from elsewhere says."""
    counts, probabilities = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    shapes = _shapes(counts, probabilities)
    if counts.shape != probabilities.shape:
        return CaseComparison(False, f"counts of shape {counts.shape}, expected {probabilities.shape}", **shapes)
    problem = counts_problem(counts)
    if problem:
        return CaseComparison(False, problem, **shapes)
    draws = counts.sum()
    observed = counts / draws
    deviation = np.abs(observed - probabilities)
    impossible = np.flatnonzero((probabilities == 0) & (counts > 0))
    if impossible.size:
        token = int(impossible[0])
        message = (
            f"token {token} was drawn {int(counts[token])} times, but its probability is 0: "
            f"{drawn_outside(counts, probabilities, kept)}"
        )
        return CaseComparison(False, message, float(deviation.max()), **shapes)
    eps = frequency_bound(int((probabilities > 0).sum()), draws)
    token = int(deviation.argmax())
    if deviation[token] > eps:
        message = (
            f"token {token} was drawn {observed[token]:.1%} of the time, expected "
            f"{probabilities[token]:.1%} (within {eps:.1%} over {int(draws)} draws)"
        )
        return CaseComparison(False, message, float(deviation[token]), **shapes)
    return CaseComparison(True, "", float(deviation[token]), 1.0, **shapes)


NEVER_MISSED = 20  # a token expected this many times in the draws comes out at least once (but for e^-20)


def drawn_outside(counts: np.ndarray, probabilities: np.ndarray, kept: str) -> str:
    """What tokens of probability 0 coming out most likely mean, from which tokens came out and which did not."""
    allowed, drawn = np.flatnonzero(probabilities > 0).tolist(), set(np.flatnonzero(counts > 0).tolist())
    facts = f"it is outside {kept} (token{'s' * (len(allowed) > 1)} {', '.join(map(str, allowed))})"
    never = [t for t in allowed if counts[t] == 0 and probabilities[t] * counts.sum() >= NEVER_MISSED]
    if never and drawn <= set(range(len(allowed))):
        return (
            f"{facts}, and only tokens below {len(allowed)} came out, as if the index drawn among those were "
            "returned: map it back to its token id"
        )
    if never:
        return f"{facts}, and token {never[0]}, in it, never came out: are the most likely tokens kept?"
    if len(drawn) == len(counts):
        return f"{facts}; every token came out: draw from those only"
    if len(drawn - set(allowed)) == 1:
        return f"{facts}; it came out beside every one of them: is one token too many kept?"
    return f"{facts}: draw from those only"


def drawn_from(kept: str):
    """The frequency comparison of a sampler that may draw `kept` only (its messages name them so)."""
    return functools.partial(frequencies, kept=kept)


SHOWN_TEXT = 200  # characters of a text a message quotes


def text_bytes(data: np.ndarray) -> bytes | None:
    """The bytes of a text tensor (see `grader.learner.drivers.text_tensor`), zero padding at its end left
    out; None when it is no such tensor."""
    if data.dtype != np.uint8 or data.ndim != 1:
        return None
    return data.tobytes().rstrip(b"\0")


def quoted(text: bytes) -> str:
    """The text as a message quotes it: any bytes, decoded as far as they are UTF-8, at most SHOWN_TEXT characters."""
    decoded = text.decode("utf-8", errors="replace")
    return repr(decoded[:SHOWN_TEXT]) + ("\u2026" if len(decoded) > SHOWN_TEXT else "")


def same_text(actual, expected, tolerance: Tolerance) -> CaseComparison:
    actual, expected = np.asarray(actual), np.asarray(expected)
    actual_text, expected_text = text_bytes(actual), text_bytes(expected)
    if actual_text is None:
        return CaseComparison(False, f"the text came back as {actual.dtype} values of shape {actual.shape}, not bytes")
    ok = actual_text == expected_text
    return CaseComparison(ok, "" if ok else f"the text is {quoted(actual_text)}, expected {quoted(expected_text)}")
