"""Part 2's bonus: a key-value cache, the one check of the part compared with GPT-2 itself.

The learner's cached model runs GPT-2's weights over the prompt a chunk at a time, and greedy
sampling with it must give GPT-2's own greedy text.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case, Check, Target, Tolerance
from grader.checks.sampling import DRIVERS, close, same_text
from grader.learner.drivers import text_tensor
from grader.shared.compare import CaseComparison

if TYPE_CHECKING:
    from grader.builder.reference import Reference

ARGMAX_MARGIN = 0.01  # a greedy step of GPT-2 is used only when its top two logits are this far apart
SLIPS = {  # reference.chunked_logits's slip: what the report names
    "positions from 0": "CachedTransformer.forward starts the new tokens' positions at 0: pass the cache's length "
    "to pos_embed (past_kv_pos_offset)",
    "mask from the first key": "CachedAttention.forward's mask ignores the cached keys: pass their number to "
    "apply_causal_mask, so that new query i sees keys 0 to past_posn + i",
}


def cached_model_output(actual, expected, tolerance: Tolerance) -> CaseComparison:
    """Text for the sampling case; logits otherwise, reporting the first position that differs."""
    expected = np.asarray(expected)
    if expected.dtype == np.uint8:
        return same_text(actual, expected, tolerance)
    result = close(actual, expected, tolerance)
    if not result.ok and result.actual_shape == result.expected_shape:
        actual = np.asarray(actual, dtype=np.float64)
        wrong = ~(np.abs(actual - expected) <= tolerance.atol + tolerance.rtol * np.abs(expected))  # NaN: wrong
        position = int(np.flatnonzero(wrong.any(axis=(0, 2)))[0])
        message = f"the logits first differ at position {position} (max abs diff {result.max_abs_diff:.3g})"
        return replace(result, message=message)
    return result


def greedy_continuation(ref: Reference, ids: list[int], max_new: int) -> list[int]:
    """GPT-2's greedy continuation, cut before a step whose top two logits are closer than
    ARGMAX_MARGIN (a float32 rounding could pick either)."""
    step = ref.incremental_logits()
    generated: list[int] = []
    top = step(ids).topk(2)
    for _ in range(max_new):
        if float(top.values[0] - top.values[1]) < ARGMAX_MARGIN:
            break
        generated.append(int(top.indices[0]))
        if len(generated) < max_new:
            top = step(generated[-1:]).topk(2)
    return generated


def kv_cache_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    for name, chunks in (("prompt", [4, 1, 2]), ("random", [6, 1, 5])):
        hint = (
            f"positions 0 to {chunks[0] - 1} run without the cache, the rest a chunk at a time with "
            "it: a chunk's positions start at the cache's length, and its queries see every cached key"
        )
        mistakes = {said: ref.chunked_logits(ref.tokens[name], chunks, slip) for slip, said in SLIPS.items()}
        cases.append(
            Case(
                name,
                [ref.tokens[name], torch.tensor(chunks)],
                ref.activations(name)["unembed.hook_out"],
                weights="",
                hint=hint,
                mistakes=mistakes,
            )
        )
    tokenizer = ref.tokenizer.backend_tokenizer
    prompt_ids = tokenizer.encode(ref.prompt).ids
    generated = greedy_continuation(ref, prompt_ids, 8)
    text = tokenizer.decode(prompt_ids + generated, skip_special_tokens=False)
    extra = {
        "prompt": text_tensor(ref.prompt),
        "tokenizer": text_tensor(tokenizer.to_str()),
        "max_tokens_generated": torch.tensor(len(generated)),
    }
    hint = "greedy sampling with the cache must give the text greedy sampling without it gives"
    cases.append(Case("sample", [], text_tensor(text), weights="", hint=hint, extra=extra))
    return cases


PAGE = "13-kv-cache.md"
CHECKS = (
    Check(
        "kv_cache",
        "sampling",
        2,
        Target("kv_cache", "CachedTransformer", "forward", driver=f"{DRIVERS}:cached_model"),
        "bonus: a key-value cache",
        kv_cache_cases,
        comparison=cached_model_output,
        tolerance=Tolerance(atol=1e-3, rtol=1e-4),
        # The cached classes override the forwards of Attention, TransformerBlock and Transformer, and keep the
        # rest: the mask, the embeddings, the LayerNorms, the MLP, the unembedding, and greedy_search to sample.
        uses=("embed", "pos_embed", "layernorm", "attention.causal_mask", "mlp", "unembed", "sampling.greedy"),
    ),
)
