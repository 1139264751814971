"""Sampling from first principles, for Part 2's sampling checks and the beam search check's greedy path
(`search.py`): what a right (or a known wrong) sampler gives: the softmax in float64, the kept tokens renormalised
(or not, or as indices), the top-p set, the frequency penalty, a greedy walk through the table model. Torch is
imported by the builder's process only: these run in the case builders.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


def softmax(logits: Tensor) -> Tensor:
    return logits.double().softmax(dim=-1)


def renormalised(probabilities: Tensor, kept: list[int]) -> Tensor:
    import torch

    mask = torch.zeros_like(probabilities, dtype=torch.bool)
    mask[kept] = True
    kept_probabilities = probabilities * mask
    return kept_probabilities / kept_probabilities.sum()


def index_returned(probabilities: Tensor, kept: list[int]) -> Tensor:
    """What a sampler gives that returns the index drawn among the kept tokens (most likely first) as the token."""
    import torch

    result = torch.zeros_like(probabilities)
    result[: len(kept)] = renormalised(probabilities, kept)[kept]
    return result


def unrenormalised(probabilities: Tensor, kept: list[int]) -> Tensor:
    """The kept tokens (most likely first) drawn with their own probabilities by walking their cumulative sum,
    without renormalising: the mass of the others lands on the last kept token."""
    import torch

    result = torch.zeros_like(probabilities)
    result[kept] = probabilities[kept]
    result[kept[-1]] += 1 - result.sum()
    return result


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
