"""Beams.generate: each beam's k best one-token extensions, their log-prob sums from the table model, with no n-gram
ban, a bigram ban and a trigram ban; compared in any order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Tolerance
from grader.checks.sampling._beam_search import (
    banned_across_beams,
    banned_as_arena_broadcasts,
    generated_rows,
    kept_then_normalised,
)
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
    from grader.builder.interface import Reference

NGRAM_REPEATED = (
    "a beam repeats an n-gram: "
    "with no_repeat_ngram_size set, ban the tokens that would complete an n-gram already in the beam"
)
LOGITS_ADDED = "logits were added up, not log-probabilities: take log_softmax over the vocabulary first"
NORMALISED_OVER_KEPT = (
    "the log-probabilities are normalised over the k kept tokens: take log_softmax over the whole vocabulary, "
    "then the top k"
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


def by_tokens(beams: list[Beam]) -> list[Beam]:
    return sorted(beams, key=lambda beam: (beam[0], beam[2]))


def same_beams_any_order(actual, expected, tolerance: Tolerance) -> CaseComparison:
    return compared_beams(
        actual, expected, tolerance, by_tokens, lambda got, want: f"the beams are {show(got)}; expected {show(want)}"
    )


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
        cases.append(Case(name, args, right, extra=beam_extra(table), mistakes=mistakes))
    return cases


PAGE = "12-beam-search.md"
CHECK = Check(
    "beam.generate",
    2,
    beams("generate", "generate"),
    "extending beams",
    beam_generate_cases,
    comparison=same_beams_any_order,
    tolerance=LOGPROB_TOLERANCE,
    expected_from="the exact beams",
)
