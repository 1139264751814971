"""Beam search from first principles, for Part 2's beam checks: every candidate enumerated, its log-probability
summed from the table model, the best kept; and what a few known mistakes give instead."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


def log_softmax_row(table: Tensor, prefix: tuple[int, ...]) -> list[float]:
    """The table model's next-token log-probabilities after `prefix`, in float64."""
    return table[len(prefix) - 1, prefix[-1]].double().log_softmax(dim=-1).tolist()


def banned(prefix: tuple[int, ...], ngram: int) -> set[int]:
    """Tokens that would complete an n-gram already in `prefix`."""
    if not ngram:
        return set()
    tail = prefix[len(prefix) - ngram + 1 :]
    return {prefix[i + ngram - 1] for i in range(len(prefix) - ngram + 1) if prefix[i : i + ngram - 1] == tail}


def extensions(
    table: Tensor, beams: list[tuple[float, tuple[int, ...]]], ngram: int, also_banned: frozenset[int] = frozenset()
) -> list[tuple[float, tuple[int, ...]]]:
    """Every allowed one-token extension of every beam, with its log-prob sum (`also_banned`: banned everywhere)."""
    return [
        (logprob + step, prefix + (token,))
        for logprob, prefix in beams
        for token, step in enumerate(log_softmax_row(table, prefix))
        if token not in banned(prefix, ngram) | also_banned
    ]


def best(candidates: list, k: int) -> list:
    return sorted(candidates, key=lambda candidate: -candidate[0])[:k]


def expected_beam_search(
    table: Tensor, prompt: tuple[int, ...], n_return: int, num_beams: int, max_new: int, ngram: int, eos: int
) -> list[tuple[float, tuple[int, ...]]]:
    """Beam search over every candidate: the num_beams best extensions of the kept beams at each step."""
    beams: list[tuple[float, tuple[int, ...]]] = [(0.0, prompt)]
    finished: list[tuple[float, tuple[int, ...]]] = []
    for _ in range(max_new):
        kept = best(extensions(table, beams, ngram), num_beams)
        finished += [beam for beam in kept if beam[1][-1] == eos]
        beams = [beam for beam in kept if beam[1][-1] != eos]
        if len(finished) >= n_return:
            return best(finished, n_return)
    return best(finished + beams, n_return)


def generated_rows(
    table: Tensor, beams: list[tuple[float, tuple[int, ...]]], k: int, ngram: int, bans: list[set[int]] | None = None
) -> Tensor:
    """Each beam's k best allowed extensions, as beam rows; `bans`: each beam's banned tokens, where a known mistake
    bans others than its own n-gram completions."""
    bans = bans or [set()] * len(beams)
    extended = [
        candidate
        for beam, more in zip(beams, bans, strict=True)
        for candidate in best(extensions(table, [beam], ngram, frozenset(more)), k)
    ]
    from grader.learner.drivers import beam_rows

    return beam_rows([([logprob for logprob, _ in extended], [list(tokens) for _, tokens in extended])])


def banned_across_beams(beams: list[tuple[float, tuple[int, ...]]], ngram: int) -> list[set[int]]:
    """A known mistake's bans: what any beam bans, banned in every beam."""
    everywhere = set().union(*(banned(prefix, ngram) for _, prefix in beams))
    return [everywhere] * len(beams)


def banned_as_arena_broadcasts(beams: list[tuple[float, tuple[int, ...]]], ngram: int) -> list[set[int]]:
    """A known mistake's bans (ARENA's broadcast index): where a beam's n-gram starting at i repeats its tail, the
    beam bans the last token of every beam's n-gram starting at i."""
    prefixes = [prefix for _, prefix in beams]
    bans = []
    for prefix in prefixes:
        tail = prefix[len(prefix) - ngram + 1 :]
        repeats = [i for i in range(len(prefix) - ngram + 1) if prefix[i : i + ngram - 1] == tail]
        bans.append({other[i + ngram - 1] for i in repeats for other in prefixes})
    return bans


def kept_then_normalised(
    table: Tensor, beams: list[tuple[float, tuple[int, ...]]], k: int, ngram: int, normalise: bool = True
) -> Tensor:
    """generate's rows where each beam's k best allowed logits are log-softmaxed among themselves, or (`normalise`
    False) added as they are: two known mistakes."""
    extended = []
    for logprob, prefix in beams:
        logits = table[len(prefix) - 1, prefix[-1]].double()
        allowed = [token for token in range(len(logits)) if token not in banned(prefix, ngram)]
        kept = sorted(allowed, key=lambda token: -float(logits[token]))[:k]
        steps = (logits[kept].log_softmax(dim=-1) if normalise else logits[kept]).tolist()
        extended += [(logprob + step, prefix + (token,)) for token, step in zip(kept, steps, strict=True)]
    from grader.learner.drivers import beam_rows

    return beam_rows([([lp for lp, _ in extended], [list(tokens) for _, tokens in extended])])
