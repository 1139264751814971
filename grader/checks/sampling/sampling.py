"""Part 2: sampling (beam search is in `beam.py`, the bonus KV cache in `kv_cache.py`).

The learner's sampler runs on the grader's stand-ins (`grader/learner/drivers/stand_ins.py`: a model read
from a table, a character tokenizer), so a broken Transformer cannot fail these checks, and every
expected answer is computed from first principles (`_sampling_oracle`): an argmax, a division, a count, the
softmax of a few logits, a walk through the table. The comparisons run in the grader's process (`_sampling_compare`,
which also says how draws are judged without flakiness).

Known mistakes, as in every part: each case lists what each classic mistake outputs on it (only
the mistakes that answer there, and differently from the right answer), and an output that fails
is named by the mistake it fits, as the check's own comparison judges (`grader.host.verdict.diagnose`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case, Check, Run, Target, Tolerance
from grader.checks.sampling._compare import (
    DRAWS,
    ROUNDS,
    close,
    drawn_from,
    draws_again,
    frequencies,
    frequency_bound,
    same_text,
    same_token,
)
from grader.checks.sampling._oracle import (
    greedy_walk,
    index_returned,
    nucleus,
    penalised,
    renormalised,
    softmax,
    unrenormalised,
)
from grader.shared.formats import END_OF_TEXT

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

ALPHABET = " abcdefghijklmnopqrstuvwxyz."  # the generation check's tokens, end-of-text after them
LOGITS_TOLERANCE = Tolerance(atol=1e-5, rtol=1e-5)


def generator(seed: int):
    import torch

    return torch.Generator().manual_seed(seed)


def known(*mistakes: tuple[str, Tensor | None]) -> dict[str, Tensor]:
    """Case.mistakes from (hint, output) pairs, leaving out the mistakes that do not apply (None)."""
    return {hint: output for hint, output in mistakes if output is not None}


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

    from grader.learner.drivers import text_tensor

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
SOFTMAX_TWICE = (
    "the softmax was applied twice: Categorical(logits=...) applies it for you, so pass the logits themselves, "
    "or pass probs=softmax(logits)"
)
TOP_K_FROM_ALL = "tokens outside the k most likely were drawn: sample from the top k only"
K_PLUS_ONE = "k + 1 tokens were kept, one too many: keep the k most likely (logits.topk(k))"
SMALLEST_K = "the k least likely tokens were kept: keep the k most likely (topk's largest=True, or a descending sort)"
INDEX_NOT_MAPPED = "the index drawn among the kept tokens was returned, not its token id: map it back (ids[index])"
NOT_RENORMALISED = (
    "the kept tokens were drawn with their probabilities over the whole vocabulary, not renormalised: "
    "divide them by their sum (or sample from the kept logits)"
)
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


def told_apart(right: Tensor, wrong: Tensor | None) -> Tensor | None:
    """`wrong`, if both rounds' draws tell it from `right` as surely as the check needs: it puts mass where `right`
    has none, or moves some probability by more than twice the bound (see `_sampling_compare`); else None."""
    if wrong is None:
        return None
    eps = frequency_bound(int((right > 0).sum()), ROUNDS * DRAWS)
    far = bool(((wrong > 0) & (right == 0)).any()) or float((wrong - right).abs().max()) > 2 * eps
    return wrong if far else None


def _distribution_case(name: str, args: list, right: Tensor, *mistakes: tuple[str, Tensor | None]) -> Case:
    """A case of DRAWS draws a round; each known mistake listed only where the draws tell it from the right answer."""
    import torch

    told = known(*((hint, told_apart(right, wrong)) for hint, wrong in mistakes))
    return Case(name, args, right, extra={"draws": torch.tensor(DRAWS)}, mistakes=told)


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
            (SOFTMAX_TWICE, softmax(softmax(positive))),
        ),
        _distribution_case("mixed_logits", [mixed], softmax(mixed), (SOFTMAX_TWICE, softmax(softmax(mixed)))),
    ]


def top_k_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    for name, values, k in (("k_2", [1.0, 2.2, 0.3, 1.8, 1.1, 0.6], 2), ("k_4", [0.2, -1.0, 1.5, 0.7, 2.0, -0.3], 4)):
        logits = torch.tensor(values)
        probabilities = softmax(logits)
        order = sorted(range(len(values)), key=lambda token: -values[token])
        top = order[:k]
        cases.append(
            _distribution_case(
                name,
                [logits, torch.tensor(k)],
                renormalised(probabilities, top),
                (TOP_K_FROM_ALL, probabilities),
                (K_PLUS_ONE, renormalised(probabilities, order[: k + 1])),
                (SMALLEST_K, renormalised(probabilities, order[-k:])),
                (INDEX_NOT_MAPPED, index_returned(probabilities, top)),
                (NOT_RENORMALISED, unrenormalised(probabilities, top)),
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
        cases.append(
            _distribution_case(
                name,
                args,
                renormalised(exact, right),
                *mistakes,
                (INDEX_NOT_MAPPED, index_returned(exact, right)),
                (NOT_RENORMALISED, unrenormalised(exact, right)),
            )
        )
    return cases


def generation_cases(ref: Reference) -> list[Case]:
    """A table whose greedy path from "the cat" spells " sat on the mat." and then ends."""
    import torch

    from grader.learner.drivers import text_tensor

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


# --- the checks ---------------------------------------------------------------------------------

DRIVERS = "grader.learner.drivers.sampling"
EXACT = "the exact answer"


def sampler(method: str, driver: str) -> Target:
    return Target("sampling", "TransformerSampler", method, driver=f"{DRIVERS}:{driver}")


def exact(check_id: str, method: str, summary: str, cases, comparison, tolerance: Tolerance | None = None) -> Check:
    """One step of sampling, one point: the method called once per case, against the exact answer."""
    target = sampler(method, "call")
    return Check(check_id, 1, target, summary, cases, comparison, tolerance or Tolerance(), expected_from=EXACT)


def drawn(check_id: str, points: int, method: str, summary: str, cases, comparison=frequencies) -> Check:
    """A sampling method called DRAWS times per case, twice where one round does not decide: its counts against the
    exact distribution."""
    target = sampler(method, "draw")
    return Check(
        check_id,
        points,
        target,
        summary,
        cases,
        comparison,
        expected_from="the exact distribution",
        run=Run(draws_again=draws_again),
    )


PAGE = "11-sampling.md"
CHECKS = (
    exact("sampling.greedy", "greedy_search", "greedy decoding", greedy_cases, same_token),
    exact("sampling.temperature", "apply_temperature", "temperature", temperature_cases, close, LOGITS_TOLERANCE),
    exact(
        "sampling.frequency_penalty",
        "apply_frequency_penalty",
        "frequency penalty",
        frequency_penalty_cases,
        close,
        LOGITS_TOLERANCE,
    ),
    drawn("sampling.basic", 1, "sample_basic", "sampling from softmax(logits)", basic_cases),
    drawn("sampling.top_k", 1, "sample_top_k", "top-k sampling", top_k_cases, drawn_from("the top k")),
    drawn("sampling.top_p", 2, "sample_top_p", "top-p (nucleus) sampling", top_p_cases, drawn_from("the top-p set")),
    Check(
        "sampling.generate",
        2,
        sampler("sample", "sample"),
        "the generation loop",
        generation_cases,
        comparison=same_text,
        expected_from="the expected text",
        uses=("sampling.greedy",),  # the loop is graded greedily: sample_next_token calls greedy_search
    ),
)
