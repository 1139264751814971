"""A second round for the cases a check's first round of random draws leaves undecided (`Run.draws_again`).

The grader decides, from the first round's counts and the expected distribution, which cases need more draws: the
expected answer never enters the learner's process. The second round runs the same cases with another seed, and each
case's counts become the sum of its two rounds'. Whatever the second round sends back is read as the first's was:
its own ending or error is the check's, and counts that cannot be added to the first round's are a failing output.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from grader.checks import Check
from grader.host.refcache import ReferenceData
from grader.host.runner.replies import Outcome
from grader.shared import wire

SECOND_ROUND = 1  # the request's `round`: the seed of the learner's random draws


def undecided(check: Check, outcome: Outcome, cases: list[wire.CaseSpec], reference: ReferenceData) -> list:
    """The cases whose first-round counts leave them undecided; none where the check draws no second round or the
    first round did not run to its end (that failure decides the check)."""
    if check.run.draws_again is None or not outcome.completed:
        return []
    expected = reference.expected(check.id)
    # A reply that ran holds every case's output (wire.read_reply, replies.read_outputs).
    return [case for case in cases if check.run.draws_again(outcome.outputs[output(case)], expected[case.name])]


def summed(first: Outcome, second: Outcome, again: list[wire.CaseSpec]) -> Outcome:
    """The check's outcome over both rounds: the first's, each case drawn again holding the sum of its two rounds'
    counts; or the second round's own ending where it did not run to its end."""
    seconds, printed = first.seconds + second.seconds, first.printed + second.printed
    if not second.completed:
        return replace(second, seconds=seconds, printed=printed)
    outputs = dict(first.outputs)
    for case in again:
        counts, more = first.outputs[output(case)], second.outputs[output(case)]
        if more.shape != counts.shape or more.dtype.kind not in "biuf":
            problem = f"gave {described(more)} as counts in its second round of draws, {described(counts)} in its first"
            reply = replace(first.reply, bad_output=wire.BadOutput(case.name, problem))
            return replace(first, reply=reply, seconds=seconds, printed=printed)
        with np.errstate(all="ignore"):  # whatever the learner's process sent: the comparison judges the sum
            outputs[output(case)] = counts.astype(np.float64) + more.astype(np.float64)
    return replace(first, outputs=outputs, seconds=seconds, printed=printed)


def output(case: wire.CaseSpec) -> str:
    return wire.OUTPUT.format(case=case.name)


def described(values: np.ndarray) -> str:
    return f"{values.dtype} values of shape {values.shape}"
