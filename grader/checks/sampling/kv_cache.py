"""Part 2's bonus: a key-value cache, the one check of the part compared with GPT-2 itself.

The learner's cached model runs GPT-2's weights over the prompt a chunk at a time, and greedy
sampling with it must give GPT-2's own greedy text.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case, Check, Target, Tolerance
from grader.checks.sampling._common import DRIVERS
from grader.checks.sampling._compare import close, same_text
from grader.shared.compare import CaseComparison

if TYPE_CHECKING:
    from grader.builder.interface import Reference

ARGMAX_MARGIN = 0.01  # a greedy step of GPT-2 is used only when its top two logits are this far apart
TEMPERATURE = 1e-4  # a draw at it misses the greedy token by ARGMAX_MARGIN / TEMPERATURE = 100 nats: never
PENALTY = 1e9  # subtracted per occurrence, it puts every token already in the text below any other
NEW_IDS_ONLY = (
    "CachedTransformerSampler.sample passes sample_next_token only the tokens it feeds the model: the frequency "
    "penalty must count every id so far, the prompt's included"
)
SLIPS = {  # reference.chunked_logits's slip: what the report names
    "positions from 0": "CachedTransformer.forward starts the new tokens' positions at 0: pass the cache's length "
    "to pos_embed (past_kv_pos_offset)",
    "mask from the first key": "CachedAttention.forward's mask ignores the cached keys: pass their number to "
    "apply_causal_mask, so that new query i sees keys 0 to past_posn + i",
}

# Not a slip transformer_lens can compute (its softmax turns a row with every key masked into zeros, not NaN): query 0
# of the first chunk (no cache, so an offset of -1) sees no key, its pattern row is NaN, and the next layer's queries
# all read that position's key: with two layers or more, every logit is NaN.
ONE_SHORT = (
    "CachedAttention.forward's mask hides each new token from itself, so the first one sees no key at all (NaN): "
    "where apply_causal_mask passes its own check, the offset it is given is one short; pass the cache's length, "
    "past_posn, so that new query i sees keys 0 to past_posn + i"
)


def fed_only(fed: list[int], text: list[int]) -> list[int]:
    """NEW_IDS_ONLY's ban: the tokens the step feeds (the prompt, then the last token alone)."""
    return fed


def cached_model_output(actual, expected, tolerance: Tolerance) -> CaseComparison:
    """Text for the sampling case; logits otherwise, reporting the first position that differs."""
    expected = np.asarray(expected)
    if expected.dtype == np.uint8:
        return same_text(actual, expected, tolerance)
    result = close(actual, expected, tolerance)
    if result.ok or result.actual_shape != result.expected_shape or expected.ndim != 3:
        return result
    actual = np.asarray(actual, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        wrong = ~(np.abs(actual - expected) <= tolerance.atol + tolerance.rtol * np.abs(expected))  # NaN: wrong
    position = int(np.flatnonzero(wrong.any(axis=(0, 2)))[0])
    said = f"max abs diff {result.max_abs_diff:.3g}" if result.max_abs_diff is not None else result.message
    return replace(result, message=f"the logits first differ at position {position} ({said})")


def continuation(ref: Reference, ids: list[int], max_new: int, banned=None) -> list[int]:
    """GPT-2's greedy continuation of `ids`, the tokens `banned(fed, text)` names left out at each step (`fed`: the
    ids that step feeds the model, `text`: every id so far); cut before a step whose top two logits are closer than
    ARGMAX_MARGIN (a float32 rounding could pick either)."""
    step = ref.incremental_logits()
    fed, generated = ids, []
    while len(generated) < max_new:
        logits = step(fed)
        if banned:
            logits[sorted(set(banned(fed, ids + generated)))] = -float("inf")
        top = logits.topk(2)
        if float(top.values[0] - top.values[1]) < ARGMAX_MARGIN:
            break
        fed = [int(top.indices[0])]
        generated += fed
    return generated


def sampling_case(ref: Reference, name: str, ids: list[int], penalty: float, hint: str, mistakes=()) -> Case:
    """CachedTransformerSampler.sample from the prompt: greedy, or at a temperature so low that it is greedy
    (TEMPERATURE) with a frequency penalty so large that a token already in the text is never drawn again.
    `mistakes`: (what the report names, the tokens that slip bans at a step)."""
    import torch

    from grader.learner.drivers import text_tensor

    banned = (lambda fed, text: text) if penalty else None
    generated = continuation(ref, ids, 8, banned)

    def decode(continued: list[int]) -> str:
        return ref.tokenizer.backend_tokenizer.decode(ids + continued, skip_special_tokens=False)

    outputs = {said: decode(continuation(ref, ids, len(generated), slip)) for said, slip in mistakes}
    text = decode(generated)
    extra = {
        "prompt": text_tensor(ref.prompt),
        "tokenizer": text_tensor(ref.tokenizer.backend_tokenizer.to_str()),
        "max_tokens_generated": torch.tensor(len(generated)),
        "temperature": torch.tensor(TEMPERATURE if penalty else 0.0),
        "frequency_penalty": torch.tensor(penalty),
    }
    told = {said: text_tensor(output) for said, output in outputs.items() if output != text}
    return Case(name, [], text_tensor(text), weights="", hint=hint, extra=extra, mistakes=told)


def kv_cache_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    for name, chunks in (("prompt", [4, 1, 2]), ("random", [6, 1, 5])):
        hint = (
            f"positions 0 to {chunks[0] - 1} run without the cache, the rest a chunk at a time with "
            "it: a chunk's positions start at the cache's length, and its queries see every cached key"
        )
        logits = ref.activations(name)["unembed.hook_out"]
        mistakes = {said: ref.chunked_logits(ref.tokens[name], chunks, slip) for slip, said in SLIPS.items()}
        mistakes[ONE_SHORT] = torch.full_like(logits, float("nan"))
        cases.append(
            Case(
                name,
                [ref.tokens[name], torch.tensor(chunks)],
                logits,
                weights="",
                hint=hint,
                mistakes=mistakes,
            )
        )
    prompt_ids = ref.tokenizer.backend_tokenizer.encode(ref.prompt).ids
    greedy = "greedy sampling with the cache must give the text greedy sampling without it gives"
    penalised = (
        f"at temperature {TEMPERATURE} with a frequency penalty of {PENALTY:g}, sampling is greedy and never draws a "
        "token already in the text, the prompt's included"
    )
    cases.append(sampling_case(ref, "sample", prompt_ids, 0.0, greedy))
    cases.append(sampling_case(ref, "sample_penalised", prompt_ids, PENALTY, penalised, [(NEW_IDS_ONLY, fed_only)]))
    return cases


PAGE = "13-kv-cache.md"
CHECK = Check(
    "kv_cache",
    2,
    Target("kv_cache", "CachedTransformer", "forward", driver=f"{DRIVERS}:cached_model"),
    "bonus: a key-value cache",
    kv_cache_cases,
    comparison=cached_model_output,
    tolerance=Tolerance(atol=1e-3, rtol=1e-4),
    # The cached classes override the forwards of Attention, TransformerBlock and Transformer, and keep the
    # rest: the mask, the embeddings, the LayerNorms, the MLP, the unembedding, and sample_next_token's steps.
    uses=(
        *("embed", "pos_embed", "layernorm", "attention.causal_mask", "mlp", "unembed"),
        *("sampling.greedy", "sampling.temperature", "sampling.frequency_penalty", "sampling.basic"),
    ),
)
