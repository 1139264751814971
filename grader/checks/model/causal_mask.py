"""Attention.apply_causal_mask: square scores, exact zeros and ties, one position, and queries after cached keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Target
from grader.checks.model._common import LONG, OFFSET_DRIVER, ONE_POSITION, generator, magnitudes, offset_args
from grader.shared.compare import causal_mask

if TYPE_CHECKING:
    from grader.builder.interface import Reference

ZEROS_MASKED = "allowed scores equal to 0 were masked: build the mask from positions, not from the values"
MASK_AT_FIRST_KEY = (
    "the mask ignores the cached positions before the queries: query i sits at position past_kv_pos_offset + i "
    "and sees keys 0 to past_kv_pos_offset + i, so anchor the mask at the last key, not the first"
)


def causal_mask_cases(ref: Reference) -> list[Case]:
    import torch

    def case(name, scores, hint="", past_kv_pos_offset=0):
        # The mask anchored at the first key: right for square scores only.
        top_left = torch.triu(torch.ones(scores.shape[-2:], dtype=torch.bool), diagonal=1)
        mistakes = {
            ZEROS_MASKED: scores.masked_fill(top_left | (scores == 0), float("-inf")),
            MASK_AT_FIRST_KEY: scores.masked_fill(top_left, float("-inf")),
        }
        mistakes = {hint: mistakes[hint]} if hint in mistakes else {}
        masked, args = ref.causal_mask(scores, past_kv_pos_offset), offset_args(scores, past_kv_pos_offset)
        return Case(name, args, masked, weights="blocks.0.attn.", hint=hint, mistakes=mistakes)

    cases = [case(f"scores_{n}x{n}", torch.randn(2, ref.n_heads, n, n, generator=ref.generator)) for n in (7, 12)]
    # Integer-valued scores: exact zeros and ties where keys are allowed, which a mask built from the values hides.
    integers = torch.randint(-2, 3, (2, ref.n_heads, 9, 9), generator=generator(ref, 2)).float()
    cases.append(case("integer_scores", integers, ZEROS_MASKED))
    # Hundreds of positions, batch 1, the largest score beyond GPT-2's largest.
    scores = torch.randn(1, ref.n_heads, LONG, LONG, generator=generator(ref, 3))
    cases.append(case(f"long{LONG}.large", scores * (magnitudes(ref)[1] / scores.abs().max())))
    # One query and one key: the first sampling step from a bare prompt.
    cases.append(case("scores_1x1", torch.randn(1, ref.n_heads, 1, 1, generator=generator(ref, 4)), ONE_POSITION))
    # Queries after cached keys (the KV cache's chunks): fewer queries than keys, the last alone.
    for salt, (query_pos, key_pos) in enumerate(((3, 8), (1, 8)), start=5):
        scores = torch.randn(2, ref.n_heads, query_pos, key_pos, generator=generator(ref, salt))
        offset = key_pos - query_pos
        cases.append(case(f"scores_{query_pos}x{key_pos}.offset{offset}", scores, MASK_AT_FIRST_KEY, offset))
    return cases


PAGE = "05-attention.md"
CHECK = Check(
    "attention.causal_mask",
    1,
    Target("attention", "Attention", "apply_causal_mask", driver=OFFSET_DRIVER),
    "causal mask",
    causal_mask_cases,
    comparison=causal_mask,
)
