"""TransformerSampler.beam_search (given, not written by the learner): its results against an exhaustive search, for
one beam (greedy), a case where beams beat greedy, finished beams, and a bigram ban; best first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Tolerance
from grader.checks.sampling._beam_search import expected_beam_search, log_softmax_row
from grader.checks.sampling._beams import BEAM_ALPHABET, LOGPROB_TOLERANCE, beam_extra, beam_table, compared_beams, show
from grader.checks.sampling._common import sampler
from grader.checks.sampling._oracle import greedy_walk
from grader.shared.compare import CaseComparison

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def same_beams_in_order(actual, expected, tolerance: Tolerance) -> CaseComparison:
    return compared_beams(
        actual,
        expected,
        tolerance,
        list,
        lambda got, want: f"the result is {show(got)}; expected {show(want)}, best first",
    )


def notes_table() -> Tensor:
    """Greedy is not the most likely sequence: after "a", b (0.6) then at best 0.3 (0.18 in all);
    c (0.38) then a (0.5) gives 0.19."""
    import torch

    table = beam_table(7)
    for position, token, probabilities in (
        (0, 0, [0.01, 0.6, 0.38, 0.01]),
        (1, 1, [0.3, 0.28, 0.27, 0.15]),
        (1, 2, [0.5, 0.46, 0.02, 0.02]),
    ):
        table[position, token] = torch.tensor(probabilities).log()
    return table


BEAM_SEARCHES = {  # name: (table, num_return_sequences, num_beams, max_new_tokens, no_repeat_ngram_size)
    "one_beam_is_greedy": (lambda: beam_table(8), 1, 1, 5, 0),
    "beats_greedy": (notes_table, 2, 2, 2, 0),
    "finished_beams": (lambda: beam_table(9, eos_bias=1.0), 2, 3, 4, 0),
    "no_repeat_bigram": (lambda: beam_table(10), 2, 2, 5, 2),
}


def beam_search_cases(ref: Reference) -> list[Case]:
    import torch

    from grader.learner.drivers import beam_rows

    eos, prompt = len(BEAM_ALPHABET), "a"
    cases = []
    for name, (make_table, n_return, num_beams, max_new, ngram) in BEAM_SEARCHES.items():
        table = make_table()
        if num_beams == 1:  # one beam is greedy search: the expected answer is the greedy walk
            walk = greedy_walk(table, [0], max_new, eos)
            results = [
                (sum(log_softmax_row(table, tuple(walk[:i]))[walk[i]] for i in range(1, len(walk))), tuple(walk))
            ]
        else:
            results = expected_beam_search(table, (0,), n_return, num_beams, max_new, ngram, eos)
        expected = beam_rows([([lp for lp, _ in results], [list(seq) for _, seq in results])])
        args = [torch.tensor(value) for value in (n_return, num_beams, max_new, ngram)]
        cases.append(Case(name, args, expected, extra=beam_extra(table, prompt=prompt)))
    return cases


PAGE = "12-beam-search.md"
CHECK = Check(
    "beam.search",
    2,
    sampler("beam_search", "beam_search"),
    "beam search",
    beam_search_cases,
    comparison=same_beams_in_order,
    tolerance=LOGPROB_TOLERANCE,
    expected_from="the exhaustive search",
    uses=("beam.generate", "beam.filter"),  # beam_search is given: what it does, they do
)
