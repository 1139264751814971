"""Part 2: beam search, on the same stand-ins as sampling (`grader/learner/drivers/stand_ins.py`).

Every expected answer is computed from first principles (`_beam_search`): each beam candidate enumerated, its
log-probability summed from the table model, the best kept. Known mistakes are listed per case, as in every part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case, Check, Target, Tolerance
from grader.checks.sampling._beam_search import (
    banned_across_beams,
    banned_as_arena_broadcasts,
    best,
    expected_beam_search,
    generated_rows,
    kept_then_normalised,
    log_softmax_row,
)
from grader.checks.sampling.sampling import (
    DRIVERS,
    char_tokenizer,
    generator,
    greedy_walk,
    known,
    sampler,
    stand_in_inputs,
)
from grader.shared.compare import CaseComparison
from grader.shared.formats import END_OF_TEXT, PADDING

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

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


def by_tokens(beams: list[Beam]) -> list[Beam]:
    return sorted(beams, key=lambda beam: (beam[0], beam[2]))


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


def same_beams_any_order(actual, expected, tolerance: Tolerance) -> CaseComparison:
    return compared_beams(
        actual, expected, tolerance, by_tokens, lambda got, want: f"the beams are {show(got)}; expected {show(want)}"
    )


def same_beams_in_order(actual, expected, tolerance: Tolerance) -> CaseComparison:
    return compared_beams(
        actual,
        expected,
        tolerance,
        list,
        lambda got, want: f"the result is {show(got)}; expected {show(want)}, best first",
    )


def filtered_beams(actual, expected, tolerance: Tolerance) -> CaseComparison:
    """Continuing beams (group 0) then finished ones (group 1), each best first."""
    return compared_beams(
        actual, expected, tolerance, list, lambda got, want: f"{show_groups(got)}; expected {show_groups(want)}"
    )


def show_groups(beams: list[Beam]) -> str:
    continuing, finished = [b for b in beams if b[0] == 0], [b for b in beams if b[0] == 1]
    return f"continuing {show(continuing)}, finished {show(finished)}"


# --- the cases ----------------------------------------------------------------------------------

NGRAM_REPEATED = (
    "a beam repeats an n-gram: "
    "with no_repeat_ngram_size set, ban the tokens that would complete an n-gram already in the beam"
)
FINISHED_DROPPED = "finished beams (ending in end-of-text) were dropped: return them as the second Beams"
FINISHED_AS_CONTINUING = "a beam ending in end-of-text was returned as continuing: it has finished"
NOT_SORTED = "the right beams, but not sorted by log-prob sum, best first: rank them before splitting"
LOGITS_ADDED = "logits were added up, not log-probabilities: take log_softmax over the vocabulary first"
NORMALISED_OVER_KEPT = (
    "the log-probabilities are normalised over the k kept tokens: take log_softmax over the whole vocabulary, "
    "then the top k"
)
RANKED_APART = (
    "the finished and the continuing beams were ranked apart, k of each: rank every beam together, keep the k "
    "best, then split them"
)
BANNED_ACROSS_BEAMS = (
    "a token one beam may not repeat was banned in every beam: "
    "ban each beam's n-gram completions in that beam's row only (banned[beam, token])"
)

BANNED_BROADCAST = (
    "a beam with a repeated n-gram banned the next token of every beam's n-gram at that place: set one entry per "
    "beam, banned[beam, token] (indexing rows range(batch) with a (batch, 1) column of tokens, as ARENA's "
    "get_topk_non_repeating does, broadcasts to every pair of beams)"
)


def beam_table(seed: int, eos_bias: float = 0.0) -> Tensor:
    import torch

    table = 1.5 * torch.randn(10, len(BEAM_VOCABULARY), len(BEAM_VOCABULARY), generator=generator(seed))
    table[..., -1] += eos_bias
    return table


def _beam_extra(table: Tensor, prompt: str | None = None) -> dict:
    from grader.learner.drivers import text_tensor

    extra = stand_in_inputs(table, char_tokenizer(BEAM_ALPHABET))
    return extra | ({"prompt": text_tensor(prompt)} if prompt else {})


def unless_equal(wrong: Tensor, *others: Tensor) -> Tensor | None:
    """`wrong`, or None where it equals one of `others` (the right answer, a mistake listed before it)."""
    return None if any(wrong.shape == other.shape and bool((wrong == other).all()) for other in others) else wrong


def beam_generate_cases(ref: Reference) -> list[Case]:
    import torch

    a, b, c = 0, 1, 2
    table = beam_table(5)
    table[2, a, b] += 3.0  # make the banned continuations likely, so that banning them shows
    table[2, c, c] += 3.0
    table[4, b, c] += 3.0
    table[2, c, a] += 3.0  # likely after the second beam's c: a is what a broadcast ban takes from it
    inputs = {
        "two_beams": ([-0.5, -1.2], [[a, b, c], [a, c, c]], 2, 0),
        "no_repeat_bigram": ([-0.5, -1.2], [[a, b, a], [a, c, c]], 2, 2),
        "no_repeat_trigram": ([-0.3], [[a, b, c, a, b]], 3, 3),
    }
    cases = []
    for name, (logprob_sums, tokens, k, ngram) in inputs.items():
        beams = list(zip(logprob_sums, (tuple(t) for t in tokens), strict=False))
        right, unbanned = generated_rows(table, beams, k, ngram), generated_rows(table, beams, k, 0)
        across = generated_rows(table, beams, k, ngram, banned_across_beams(beams, ngram))
        broadcast = generated_rows(table, beams, k, ngram, banned_as_arena_broadcasts(beams, ngram))
        args = [torch.tensor(logprob_sums), torch.tensor(tokens), torch.tensor(k), torch.tensor(ngram)]
        mistakes = known(
            (NGRAM_REPEATED, unless_equal(unbanned, right)),
            (BANNED_ACROSS_BEAMS, unless_equal(across, right, unbanned)),
            (BANNED_BROADCAST, unless_equal(broadcast, right, unbanned, across)),
            (NORMALISED_OVER_KEPT, unless_equal(kept_then_normalised(table, beams, k, ngram), right)),
            (LOGITS_ADDED, unless_equal(kept_then_normalised(table, beams, k, ngram, normalise=False), right)),
        )
        cases.append(Case(name, args, right, extra=_beam_extra(table), mistakes=mistakes))
    return cases


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
        cases.append(Case(name, args, split_beams(kept, eos), extra=_beam_extra(beam_table(6)), mistakes=mistakes))
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
        cases.append(Case(name, args, expected, extra=_beam_extra(table, prompt=prompt)))
    return cases


# --- the checks ---------------------------------------------------------------------------------


def beams(method: str, driver: str) -> Target:
    return Target("sampling", "Beams", method, driver=f"{DRIVERS}:{driver}")


PAGE = "12-beam-search.md"
CHECKS = (
    Check(
        "beam.generate",
        2,
        beams("generate", "generate"),
        "extending beams",
        beam_generate_cases,
        comparison=same_beams_any_order,
        tolerance=LOGPROB_TOLERANCE,
        expected_from="the exact beams",
    ),
    Check(
        "beam.filter",
        1,
        beams("filter", "filter_beams"),
        "keeping the best beams",
        beam_filter_cases,
        comparison=filtered_beams,
        tolerance=LOGPROB_TOLERANCE,
        expected_from="the exact beams",
    ),
    Check(
        "beam.search",
        2,
        sampler("beam_search", "beam_search"),
        "beam search",
        beam_search_cases,
        comparison=same_beams_in_order,
        tolerance=LOGPROB_TOLERANCE,
        expected_from="the exhaustive search",
        uses=("beam.generate", "beam.filter"),  # beam_search is given: what it does, they do
    ),
)
