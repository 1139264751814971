"""Part 2: sampling and beam search, and the bonus KV cache.

The learner's sampler runs on the grader's stand-ins (`grader/drivers/stand_ins.py`: a model read
from a table, a character tokenizer), so a broken Transformer cannot fail these checks, and every
expected answer is computed here from first principles: an argmax, a division, a count, the
softmax of a few logits, a walk through the table, every beam candidate enumerated. Only the KV
cache is compared with GPT-2 itself.

Known mistakes, as in every part: each case lists what each classic mistake outputs on it (only
the mistakes that answer there, and differently from the right answer), and an output that fails
is named by the mistake it fits, as the check's own comparison judges (`grader.verdict.diagnose`).

Distributions, without flakiness: a sampling method is called DRAWS times on fixed logits and its
counts are compared with the exact truncated, renormalised distribution. A token of probability 0
must never come out. Every other token's frequency must lie within eps of its probability, where
by Hoeffding's inequality and a union bound over the n tokens of the support,
P(some |frequency - p| > eps) <= 2 n exp(-2 DRAWS eps^2); eps is set so this is
FALSE_FAILURE_PER_CASE. With 6 such cases a correct sampler fails a run with probability below
1e-7. Each known mistake moves some probability by more than 2 eps or puts mass where there is
none (the tests check this), so it is missed with probability below 1e-8 as well. The learner's
process also seeds torch before each case: a given sampler gets the same verdict every run.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from ..compare import CaseComparison
from ..drivers import END_OF_TEXT, PADDING, beam_rows, tensor_text, text_tensor
from . import Case, Check, Target, Tolerance

if TYPE_CHECKING:
    from torch import Tensor

    from ..reference import Reference

DRAWS = 4000
FALSE_FAILURE_PER_CASE = 1e-8
ALPHABET = " abcdefghijklmnopqrstuvwxyz."  # the generation check's tokens, end-of-text after them
BEAM_ALPHABET = "abc"
BEAM_VOCABULARY = [*BEAM_ALPHABET, END_OF_TEXT]
ARGMAX_MARGIN = 0.01  # a greedy step of GPT-2 is used only when its top two logits are this far apart
LOGPROB_TOLERANCE = Tolerance(atol=1e-4, rtol=0.0)


def generator(seed: int):
    import torch

    return torch.Generator().manual_seed(seed)


def known(*mistakes: tuple[str, Tensor | None]) -> dict[str, Tensor]:
    """Case.mistakes from (hint, output) pairs, leaving out the mistakes that do not apply (None)."""
    return {hint: output for hint, output in mistakes if output is not None}


# --- comparisons (NumPy: they run in the grader's process) --------------------------------------


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
    diff = np.abs(actual - expected)
    good = diff <= tolerance.atol + tolerance.rtol * np.abs(expected)  # NaN anywhere: not good
    max_abs_diff = float(np.nanmax(diff)) if diff.size and not np.isnan(diff).all() else None
    if good.all():
        return CaseComparison(True, "", max_abs_diff, 1.0, **_shapes(actual, expected))
    index = tuple(int(i) for i in np.argwhere(~good)[0])
    message = f"at index {index}: {actual[index]:.4g}, expected {expected[index]:.4g}"
    return CaseComparison(False, message, max_abs_diff, float(good.mean()), **_shapes(actual, expected))


def frequency_bound(support: int, draws: float) -> float:
    """eps with 2 * support * exp(-2 draws eps^2) = FALSE_FAILURE_PER_CASE (Hoeffding, union bound)."""
    return math.sqrt(math.log(2 * support / FALSE_FAILURE_PER_CASE) / (2 * draws))


def frequencies(actual, expected, tolerance: Tolerance) -> CaseComparison:
    """Counts of draws against exact probabilities; see the module's docstring for the bound."""
    counts, probabilities = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    shapes = _shapes(counts, probabilities)
    if counts.shape != probabilities.shape:
        return CaseComparison(False, f"counts of shape {counts.shape}, expected {probabilities.shape}", **shapes)
    draws = counts.sum()
    observed = counts / draws
    deviation = np.abs(observed - probabilities)
    impossible = np.flatnonzero((probabilities == 0) & (counts > 0))
    if impossible.size:
        token = int(impossible[0])
        return CaseComparison(
            False,
            f"token {token} was drawn {int(counts[token])} times, but its probability is 0",
            float(deviation.max()),
            **shapes,
        )
    eps = frequency_bound(int((probabilities > 0).sum()), draws)
    token = int(deviation.argmax())
    if deviation[token] > eps:
        message = (
            f"token {token} was drawn {observed[token]:.1%} of the time, expected "
            f"{probabilities[token]:.1%} (within {eps:.1%} over {int(draws)} draws)"
        )
        return CaseComparison(False, message, float(deviation[token]), **shapes)
    return CaseComparison(True, "", float(deviation[token]), 1.0, **shapes)


def same_text(actual, expected, tolerance: Tolerance) -> CaseComparison:
    actual_text, expected_text = tensor_text(np.asarray(actual)), tensor_text(np.asarray(expected))
    ok = actual_text == expected_text
    return CaseComparison(ok, "" if ok else f"the text is {actual_text!r}, expected {expected_text!r}")


Beam = tuple[int, float, tuple[int, ...]]  # group, log-prob sum, token ids


def parse_beams(rows) -> list[Beam]:
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    return [(int(row[0]), float(row[1]), tuple(int(t) for t in row[2:] if t != PADDING)) for row in rows]


def show(beams: list[Beam]) -> str:
    return (
        ", ".join(f"{''.join(BEAM_VOCABULARY[t] for t in tokens)!r} ({logprob:.3f})" for _, logprob, tokens in beams)
        or "none"
    )


def matching(actual: list[Beam], expected: list[Beam], tolerance: Tolerance) -> bool:
    return len(actual) == len(expected) and all(
        a[0] == e[0] and a[2] == e[2] and abs(a[1] - e[1]) <= tolerance.atol
        for a, e in zip(actual, expected, strict=False)
    )


def by_tokens(beams: list[Beam]) -> list[Beam]:
    return sorted(beams, key=lambda beam: (beam[0], beam[2]))


def same_beams_any_order(actual, expected, tolerance: Tolerance) -> CaseComparison:
    got, want = by_tokens(parse_beams(actual)), by_tokens(parse_beams(expected))
    ok = matching(got, want, tolerance)
    return CaseComparison(ok, "" if ok else f"the beams are {show(got)}; expected {show(want)}")


def same_beams_in_order(actual, expected, tolerance: Tolerance) -> CaseComparison:
    got, want = parse_beams(actual), parse_beams(expected)
    ok = matching(got, want, tolerance)
    return CaseComparison(ok, "" if ok else f"the result is {show(got)}; expected {show(want)}, best first")


def filtered_beams(actual, expected, tolerance: Tolerance) -> CaseComparison:
    """Continuing beams (group 0) then finished ones (group 1), each best first."""
    got, want = parse_beams(actual), parse_beams(expected)
    ok = matching(got, want, tolerance)
    return CaseComparison(ok, "" if ok else f"{show_groups(got)}; expected {show_groups(want)}")


def show_groups(beams: list[Beam]) -> str:
    continuing, finished = [b for b in beams if b[0] == 0], [b for b in beams if b[0] == 1]
    return f"continuing {show(continuing)}, finished {show(finished)}"


def cached_model_output(actual, expected, tolerance: Tolerance) -> CaseComparison:
    """Text for the sampling case; logits otherwise, reporting the first position that differs."""
    expected = np.asarray(expected)
    if expected.dtype == np.uint8:
        return same_text(actual, expected, tolerance)
    result = close(actual, expected, tolerance)
    if not result.ok and result.actual_shape == result.expected_shape:
        actual = np.asarray(actual, dtype=np.float64)
        wrong = np.abs(actual - expected) > tolerance.atol + tolerance.rtol * np.abs(expected)
        position = int(np.flatnonzero(wrong.any(axis=(0, 2)))[0])
        result.message = f"the logits first differ at position {position} (max abs diff {result.max_abs_diff:.3g})"
    return result


# --- first principles: what a right (or a known wrong) sampler gives ----------------------------


def softmax(logits: Tensor) -> Tensor:
    return logits.double().softmax(dim=-1)


def renormalised(probabilities: Tensor, kept: list[int]) -> Tensor:
    import torch

    mask = torch.zeros_like(probabilities, dtype=torch.bool)
    mask[kept] = True
    kept_probabilities = probabilities * mask
    return kept_probabilities / kept_probabilities.sum()


def nucleus(
    probabilities: Tensor, top_p: float, min_tokens_to_keep: int, keep_crossing: bool = True, apply_minimum: bool = True
) -> list[int]:
    """The most likely tokens, in order, until their sum reaches top_p (the crossing token included)."""
    order = sorted(range(len(probabilities)), key=lambda token: -float(probabilities[token]))
    kept, total = [], 0.0
    for token in order:
        if total >= top_p or (not keep_crossing and total + float(probabilities[token]) >= top_p):
            break
        kept.append(token)
        total += float(probabilities[token])
    return order[: max(len(kept), min_tokens_to_keep)] if apply_minimum else kept


def penalised(logits: Tensor, input_ids: Tensor, penalty: float, presence_only: bool = False) -> Tensor:
    result = logits.clone()
    for token, count in Counter(input_ids.tolist()).items():
        result[token] -= penalty * (1 if presence_only else count)
    return result


def log_softmax_row(table: Tensor, prefix: tuple[int, ...]) -> list[float]:
    """The table model's next-token log-probabilities after `prefix`, in float64."""
    return table[len(prefix) - 1, prefix[-1]].double().log_softmax(dim=-1).tolist()


def greedy_walk(
    table: Tensor, prompt: list[int], max_new: int, eos: int, feed_back: bool = True, stop: bool = True
) -> list[int]:
    """Greedy generation on the table model; the switches are what two known mistakes do."""
    ids, context = list(prompt), list(prompt)
    for _ in range(max_new):
        next_id = int(table[len(context) - 1, context[-1]].argmax())
        ids.append(next_id)
        if feed_back:
            context.append(next_id)
        if stop and next_id == eos:
            break
    return ids


def banned(prefix: tuple[int, ...], ngram: int) -> set[int]:
    """Tokens that would complete an n-gram already in `prefix`."""
    if not ngram:
        return set()
    tail = prefix[len(prefix) - ngram + 1 :]
    return {prefix[i + ngram - 1] for i in range(len(prefix) - ngram + 1) if prefix[i : i + ngram - 1] == tail}


def extensions(
    table: Tensor, beams: list[tuple[float, tuple[int, ...]]], ngram: int
) -> list[tuple[float, tuple[int, ...]]]:
    """Every allowed one-token extension of every beam, with its log-prob sum."""
    return [
        (logprob + step, prefix + (token,))
        for logprob, prefix in beams
        for token, step in enumerate(log_softmax_row(table, prefix))
        if token not in banned(prefix, ngram)
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


# --- stand-ins ----------------------------------------------------------------------------------


def char_tokenizer(alphabet: str):
    """A `tokenizers` tokenizer with one token per character and end-of-text as the last token."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocabulary = {character: i for i, character in enumerate(alphabet)} | {END_OF_TEXT: len(alphabet)}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token=END_OF_TEXT))
    tokenizer.add_special_tokens([END_OF_TEXT])
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    return tokenizer


def stand_in_inputs(table: Tensor, tokenizer, **named) -> dict:
    import torch

    return {
        "table": table,
        "tokenizer": text_tensor(tokenizer.to_str()),
        **{name: torch.as_tensor(value) for name, value in named.items()},
    }


# --- the cases ----------------------------------------------------------------------------------

TEMPERATURE_MULTIPLIED = "the logits were multiplied by the temperature: divide them by it"
PENALISED_ONCE = (
    "each token in input_ids was penalised once, however often it occurs: subtract freq_penalty times its count"
)
COUNTS_BROADCAST = (
    "every logit was penalised by the count of token 0: "
    "the counts need one entry per vocabulary id (torch.bincount(..., minlength=d_vocab))"
)
LOGITS_AS_PROBABILITIES = "the logits were used as probabilities: sample from softmax(logits)"
TOP_K_FROM_ALL = "tokens outside the k most likely were drawn: sample from the top k only"
CROSSING_DROPPED = (
    "the token that takes the cumulative probability past top_p was dropped: "
    "keep it (keep the smallest set whose probability reaches top_p)"
)
MINIMUM_IGNORED = "fewer than min_tokens_to_keep tokens were kept: keep at least that many"
TOP_P_FROM_ALL = "tokens outside the top-p set were drawn: sample only from the kept tokens"
NOT_FED_BACK = "the model saw the same input at every step: append each new token to the input of the next step"
PROMPT_ALONE = "the text is the prompt alone: append each new token to the input and decode all of it"
NO_STOP = "generation went on after end-of-text: stop once the new token is tokenizer.eos_token_id"
END_OF_TEXT_DROPPED = "end-of-text was left out of the text: append it like any other token, then stop"
NGRAM_REPEATED = (
    "a beam repeats an n-gram: "
    "with no_repeat_ngram_size set, ban the tokens that would complete an n-gram already in the beam"
)
FINISHED_DROPPED = "finished beams (ending in end-of-text) were dropped: return them as the second Beams"
FINISHED_AS_CONTINUING = "a beam ending in end-of-text was returned as continuing: it has finished"
NOT_SORTED = "the right beams, but not sorted by log-prob sum, best first: rank them before splitting"


def greedy_cases(ref: Reference) -> list[Case]:
    import torch

    g = generator(1)
    peak_last = torch.randn(10, generator=g)
    peak_last[-1] = peak_last.max() + 1.0
    logits = {
        "vocabulary": 2 * torch.randn(ref.d_vocab, generator=g),
        "all_negative": -1 - 5 * torch.rand(10, generator=g),
        "peak_last": peak_last,
    }
    return [Case(name, [values], torch.tensor(int(np.argmax(values.numpy())))) for name, values in logits.items()]


def temperature_cases(ref: Reference) -> list[Case]:
    import torch

    logits = 3 * torch.randn(ref.d_vocab, generator=generator(2))
    return [
        Case(f"temperature_{t}", [logits, torch.tensor(t)], logits / t, mistakes={TEMPERATURE_MULTIPLIED: logits * t})
        for t in (0.5, 2.0)
    ]


def frequency_penalty_cases(ref: Reference) -> list[Case]:
    import torch

    logits = 2 * torch.randn(ref.d_vocab, generator=generator(3))
    last = ref.d_vocab - 1
    # Only token 0 first: counts without minlength then have length 1 and broadcast, so the
    # mistake gives wrong values (elsewhere it raises a shape error).
    inputs = {
        "repeats_of_token_0": ([0, 0, 0, 0], 0.5),
        "mixed_repeats": ([5, 17, 5, 300, 5, 17, 9000], 0.7),
        "last_vocabulary_id": ([last, 3, 3, last, 3], 1.5),
    }
    cases = []
    for name, (ids, penalty) in inputs.items():
        input_ids = torch.tensor(ids)
        broadcast = logits - penalty * len(ids) if set(ids) == {0} else None
        mistakes = known(
            (PENALISED_ONCE, penalised(logits, input_ids, penalty, presence_only=True)), (COUNTS_BROADCAST, broadcast)
        )
        args = [input_ids, logits, torch.tensor(penalty)]
        cases.append(Case(name, args, penalised(logits, input_ids, penalty), mistakes=mistakes))
    return cases


def _distribution_case(name: str, args: list, right: Tensor, *mistakes: tuple[str, Tensor | None]) -> Case:
    import torch

    return Case(name, args, right, extra={"draws": torch.tensor(DRAWS)}, mistakes=known(*mistakes))


def basic_cases(ref: Reference) -> list[Case]:
    import torch

    positive = torch.tensor([4.0, 1.0, 2.0, 0.5, 1.5, 0.2])  # all positive, so the mistake can run
    mixed = torch.tensor([-1.0, 0.5, 2.0, -3.0, 1.0, -0.5])
    return [
        _distribution_case(
            "positive_logits",
            [positive],
            softmax(positive),
            (LOGITS_AS_PROBABILITIES, positive.double() / positive.sum()),
        ),
        _distribution_case("mixed_logits", [mixed], softmax(mixed)),
    ]


def top_k_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    for name, values, k in (("k_2", [1.0, 2.2, 0.3, 1.8, 1.1, 0.6], 2), ("k_4", [0.2, -1.0, 1.5, 0.7, 2.0, -0.3], 4)):
        logits = torch.tensor(values)
        probabilities = softmax(logits)
        top = sorted(range(len(values)), key=lambda token: -values[token])[:k]
        cases.append(
            _distribution_case(
                name, [logits, torch.tensor(k)], renormalised(probabilities, top), (TOP_K_FROM_ALL, probabilities)
            )
        )
    return cases


def top_p_cases(ref: Reference) -> list[Case]:
    import torch

    # Cumulative sums, most likely first: 0.35, 0.60, 0.80, 0.90, ... never near a threshold.
    probabilities = torch.tensor([0.04, 0.35, 0.10, 0.25, 0.20, 0.06], dtype=torch.float64)
    logits = probabilities.log().float()
    exact = softmax(logits)
    cases = []
    for name, top_p, minimum in (("crossing_0.7", 0.7, 1), ("min_tokens_3", 0.2, 3)):
        right = nucleus(exact, top_p, minimum)
        dropped, unbounded = (
            nucleus(exact, top_p, minimum, keep_crossing=False),
            nucleus(exact, top_p, minimum, apply_minimum=False),
        )
        rows = [renormalised(exact, kept) if kept != right else None for kept in (dropped, unbounded)]
        mistakes = zip((CROSSING_DROPPED, MINIMUM_IGNORED, TOP_P_FROM_ALL), [*rows, exact], strict=True)
        args = [logits, torch.tensor(top_p), torch.tensor(minimum)]
        cases.append(_distribution_case(name, args, renormalised(exact, right), *mistakes))
    return cases


def generation_cases(ref: Reference) -> list[Case]:
    """A table whose greedy path from "the cat" spells " sat on the mat." and then ends."""
    import torch

    tokenizer = char_tokenizer(ALPHABET)
    eos = tokenizer.token_to_id(END_OF_TEXT)
    prompt, continuation = "the cat", " sat on the mat."
    path = tokenizer.encode(prompt + continuation).ids + [eos]
    table = torch.randn(40, eos + 1, eos + 1, generator=generator(4))
    for position in range(len(prompt) - 1, len(path) - 1):
        table[position, path[position], path[position + 1]] += 8.0
    prompt_ids = tokenizer.encode(prompt).ids

    def text(ids: list[int]) -> Tensor:
        return text_tensor(tokenizer.decode(ids, skip_special_tokens=False))

    cases = []
    for name, max_new in (("until_end_of_text", 24), ("until_max_tokens", 6)):
        right = greedy_walk(table, prompt_ids, max_new, eos)
        endless = greedy_walk(table, prompt_ids, max_new, eos, stop=False)
        mistakes = known(
            (NOT_FED_BACK, text(greedy_walk(table, prompt_ids, max_new, eos, feed_back=False))),
            (PROMPT_ALONE, text(prompt_ids)),
            (NO_STOP, text(endless) if endless != right else None),
            (END_OF_TEXT_DROPPED, text(right[:-1]) if right[-1] == eos else None),
        )
        extra = stand_in_inputs(table, tokenizer, prompt=text_tensor(prompt), max_tokens_generated=max_new)
        cases.append(Case(name, [], text(right), extra=extra, mistakes=mistakes))
    return cases


def beam_table(seed: int, eos_bias: float = 0.0) -> Tensor:
    import torch

    table = 1.5 * torch.randn(10, len(BEAM_VOCABULARY), len(BEAM_VOCABULARY), generator=generator(seed))
    table[..., -1] += eos_bias
    return table


def _beam_extra(table: Tensor, prompt: str | None = None) -> dict:
    extra = stand_in_inputs(table, char_tokenizer(BEAM_ALPHABET))
    return extra | ({"prompt": text_tensor(prompt)} if prompt else {})


def generated_rows(table: Tensor, beams: list[tuple[float, tuple[int, ...]]], k: int, ngram: int) -> Tensor:
    """Each beam's k best allowed extensions, as beam rows."""
    extended = [candidate for beam in beams for candidate in best(extensions(table, [beam], ngram), k)]
    return beam_rows([([logprob for logprob, _ in extended], [list(tokens) for _, tokens in extended])])


def beam_generate_cases(ref: Reference) -> list[Case]:
    import torch

    a, b, c = 0, 1, 2
    table = beam_table(5)
    table[2, a, b] += 3.0  # make the banned continuations likely, so that banning them shows
    table[2, c, c] += 3.0
    table[4, b, c] += 3.0
    inputs = {
        "two_beams": ([-0.5, -1.2], [[a, b, c], [a, c, c]], 2, 0),
        "no_repeat_bigram": ([-0.5, -1.2], [[a, b, a], [a, c, c]], 2, 2),
        "no_repeat_trigram": ([-0.3], [[a, b, c, a, b]], 3, 3),
    }
    cases = []
    for name, (logprob_sums, tokens, k, ngram) in inputs.items():
        beams = list(zip(logprob_sums, (tuple(t) for t in tokens), strict=False))
        right, unbanned = generated_rows(table, beams, k, ngram), generated_rows(table, beams, k, 0)
        args = [torch.tensor(logprob_sums), torch.tensor(tokens), torch.tensor(k), torch.tensor(ngram)]
        mistakes = known((NGRAM_REPEATED, unbanned if ngram else None))
        cases.append(Case(name, args, right, extra=_beam_extra(table), mistakes=mistakes))
    return cases


def beam_filter_cases(ref: Reference) -> list[Case]:
    import torch

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
        kept = best(list(zip(logprob_sums, (tuple(t) for t in tokens), strict=False)), k)
        by_index = sorted(kept, key=lambda beam: logprob_sums.index(beam[0]))
        mistakes = known(
            (FINISHED_DROPPED, split_beams(kept, eos, keep_finished=False) if finished_among(kept, eos) else None),
            (FINISHED_AS_CONTINUING, beam_rows([unzipped(kept)]) if finished_among(kept, eos) else None),
            (NOT_SORTED, split_beams(by_index, eos) if by_index != kept else None),
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


def greedy_continuation(ref: Reference, ids: list[int], max_new: int) -> list[int]:
    """GPT-2's greedy continuation, cut before a step whose top two logits are closer than
    ARGMAX_MARGIN (a float32 rounding could pick either)."""
    import torch

    generated: list[int] = []
    for _ in range(max_new):
        top = ref.logits(torch.tensor([ids + generated]))[0, -1].topk(2)
        if float(top.values[0] - top.values[1]) < ARGMAX_MARGIN:
            break
        generated.append(int(top.indices[0]))
    return generated


def kv_cache_cases(ref: Reference) -> list[Case]:
    import torch

    from ..reference import PROMPT

    cases = []
    for name, chunks in (("prompt", [4, 1, 2]), ("random", [6, 1, 5])):
        hint = (
            f"positions 0 to {chunks[0] - 1} run without the cache, the rest a chunk at a time with "
            "it: a chunk's positions start at the cache's length, and its queries see every cached key"
        )
        cases.append(
            Case(
                name,
                [ref.tokens[name], torch.tensor(chunks)],
                ref.activations(name)["unembed.hook_out"],
                weights="",
                hint=hint,
            )
        )
    tokenizer = ref.tokenizer.backend_tokenizer
    prompt_ids = tokenizer.encode(PROMPT).ids
    generated = greedy_continuation(ref, prompt_ids, 8)
    text = tokenizer.decode(prompt_ids + generated, skip_special_tokens=False)
    extra = {
        "prompt": text_tensor(PROMPT),
        "tokenizer": text_tensor(tokenizer.to_str()),
        "max_tokens_generated": torch.tensor(len(generated)),
    }
    hint = "greedy sampling with the cache must give the text greedy sampling without it gives"
    cases.append(Case("sample", [], text_tensor(text), weights="", hint=hint, extra=extra))
    return cases


# --- the checks ---------------------------------------------------------------------------------

DRIVERS = "grader.drivers.sampling"
EXACT = "the exact answer"
DISTRIBUTION = "the exact distribution"


def sampler(method: str, driver: str) -> Target:
    return Target("sampling", "TransformerSampler", method, driver=f"{DRIVERS}:{driver}")


def beams(method: str, driver: str) -> Target:
    return Target("sampling", "Beams", method, driver=f"{DRIVERS}:{driver}")


CHECKS = (
    Check(
        "sampling.greedy",
        "sampling",
        1,
        sampler("greedy_search", "call"),
        "greedy decoding",
        greedy_cases,
        comparison=same_token,
        expected_from=EXACT,
    ),
    Check(
        "sampling.temperature",
        "sampling",
        1,
        sampler("apply_temperature", "call"),
        "temperature",
        temperature_cases,
        comparison=close,
        tolerance=Tolerance(atol=1e-5, rtol=1e-5),
        expected_from=EXACT,
    ),
    Check(
        "sampling.frequency_penalty",
        "sampling",
        1,
        sampler("apply_frequency_penalty", "call"),
        "frequency penalty",
        frequency_penalty_cases,
        comparison=close,
        tolerance=Tolerance(atol=1e-5, rtol=1e-5),
        expected_from=EXACT,
    ),
    Check(
        "sampling.basic",
        "sampling",
        1,
        sampler("sample_basic", "draw"),
        "sampling from softmax(logits)",
        basic_cases,
        comparison=frequencies,
        expected_from=DISTRIBUTION,
    ),
    Check(
        "sampling.top_k",
        "sampling",
        1,
        sampler("sample_top_k", "draw"),
        "top-k sampling",
        top_k_cases,
        comparison=frequencies,
        expected_from=DISTRIBUTION,
    ),
    Check(
        "sampling.top_p",
        "sampling",
        2,
        sampler("sample_top_p", "draw"),
        "top-p (nucleus) sampling",
        top_p_cases,
        comparison=frequencies,
        expected_from=DISTRIBUTION,
    ),
    Check(
        "sampling.generate",
        "sampling",
        2,
        sampler("sample", "sample"),
        "the generation loop",
        generation_cases,
        comparison=same_text,
        expected_from="the expected text",
    ),
    Check(
        "beam.generate",
        "sampling",
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
        "sampling",
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
        "sampling",
        2,
        sampler("beam_search", "beam_search"),
        "beam search",
        beam_search_cases,
        comparison=same_beams_in_order,
        tolerance=LOGPROB_TOLERANCE,
        expected_from="the exhaustive search",
    ),
    Check(
        "kv_cache",
        "sampling",
        2,
        Target("kv_cache", "CachedTransformer", "forward", driver=f"{DRIVERS}:cached_model"),
        "bonus: a key-value cache",
        kv_cache_cases,
        comparison=cached_model_output,
        tolerance=Tolerance(atol=1e-3, rtol=1e-4),
    ),
)
