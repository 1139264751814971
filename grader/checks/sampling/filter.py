"""Beams.filter: the k best beams, split into those continuing and those finished (ending in end-of-text), each best
first, where the best are not in order of index and some finished ones rank high."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Tolerance
from grader.checks.sampling._beam_search import best
from grader.checks.sampling._beams import (
    LOGPROB_TOLERANCE,
    Beam,
    beam_extra,
    beam_table,
    beams,
    compared_beams,
    show,
    unless_equal,
)
from grader.checks.sampling._common import known
from grader.shared.compare import CaseComparison

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

FINISHED_DROPPED = "finished beams (ending in end-of-text) were dropped: return them as the second Beams"
FINISHED_AS_CONTINUING = "a beam ending in end-of-text was returned as continuing: it has finished"
NOT_SORTED = "the right beams, but not sorted by log-prob sum, best first: rank them before splitting"
RANKED_APART = (
    "the finished and the continuing beams were ranked apart, k of each: rank every beam together, keep the k "
    "best, then split them"
)


def filtered_beams(actual, expected, tolerance: Tolerance) -> CaseComparison:
    """Continuing beams (group 0) then finished ones (group 1), each best first."""
    return compared_beams(
        actual, expected, tolerance, list, lambda got, want: f"{show_groups(got)}; expected {show_groups(want)}"
    )


def show_groups(beams: list[Beam]) -> str:
    continuing, finished = [b for b in beams if b[0] == 0], [b for b in beams if b[0] == 1]
    return f"continuing {show(continuing)}, finished {show(finished)}"


def beam_filter_cases(ref: Reference) -> list[Case]:
    import torch

    from grader.learner.drivers import beam_rows

    a, b, c, eos = 0, 1, 2, 3
    # The best beams are not in order of index, and some that end in end-of-text rank high.
    inputs = {
        "one_finished": (
            [-0.9, -2.5, -0.4, -3.0, -0.6, -1.1],
            [[a, b, c], [a, c, a], [a, a, b], [a, b, eos], [a, c, eos], [a, b, b]],
            3,
        ),
        "finished_in_and_out": (
            [-1.5, -0.2, -0.8, -0.5, -2.0, -0.7],
            [[a, eos, eos], [a, b, eos], [a, c, c], [a, a, a], [a, c, eos], [a, b, a]],
            4,
        ),
        "none_finished": ([-1.0, -0.3, -2.0, -0.5], [[a, b], [a, c], [a, eos], [a, a]], 2),
    }
    cases = []
    for name, (logprob_sums, tokens, k) in inputs.items():
        every = list(zip(logprob_sums, (tuple(t) for t in tokens), strict=False))
        kept = best(every, k)
        by_index = sorted(kept, key=lambda beam: logprob_sums.index(beam[0]))
        apart = best([b for b in every if b[1][-1] != eos], k) + best([b for b in every if b[1][-1] == eos], k)
        mistakes = known(
            (FINISHED_DROPPED, split_beams(kept, eos, keep_finished=False) if finished_among(kept, eos) else None),
            (FINISHED_AS_CONTINUING, beam_rows([unzipped(kept)]) if finished_among(kept, eos) else None),
            (NOT_SORTED, split_beams(by_index, eos) if by_index != kept else None),
            (RANKED_APART, unless_equal(split_beams(apart, eos), split_beams(kept, eos))),
        )
        args = [torch.tensor(logprob_sums), torch.tensor(tokens), torch.tensor(k)]
        cases.append(Case(name, args, split_beams(kept, eos), extra=beam_extra(beam_table(6)), mistakes=mistakes))
    return cases


def unzipped(beams: list[tuple[float, tuple[int, ...]]]) -> tuple[list[float], list[list[int]]]:
    return [logprob for logprob, _ in beams], [list(tokens) for _, tokens in beams]


def finished_among(beams: list[tuple[float, tuple[int, ...]]], eos: int) -> bool:
    return any(tokens[-1] == eos for _, tokens in beams)


def split_beams(beams: list[tuple[float, tuple[int, ...]]], eos: int, keep_finished: bool = True) -> Tensor:
    """filter's answer as beam rows: the continuing beams (group 0), then the finished ones (group 1)."""
    from grader.learner.drivers import beam_rows

    continuing, finished = [b for b in beams if b[1][-1] != eos], [b for b in beams if b[1][-1] == eos]
    return beam_rows([unzipped(continuing), unzipped(finished if keep_finished else [])])


PAGE = "12-beam-search.md"
CHECK = Check(
    "beam.filter",
    1,
    beams("filter", "filter_beams"),
    "keeping the best beams",
    beam_filter_cases,
    comparison=filtered_beams,
    tolerance=LOGPROB_TOLERANCE,
    expected_from="the exact beams",
)
