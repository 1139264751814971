"""The causal mask's driver: the offset of the queries (the number of cached positions before them) travels as a
0-d tensor and is passed to the learner's apply_causal_mask as the int its signature asks for."""

from __future__ import annotations

import inspect

import torch

NO_OFFSET = (
    "apply_causal_mask takes the number of cached positions as its second argument (past_kv_pos_offset, "
    "default 0): query i sits at position past_kv_pos_offset + i, as the KV cache needs"
)


def causal_mask(ctx, args) -> torch.Tensor:
    """apply_causal_mask(scores), or apply_causal_mask(scores, offset) for a case whose queries follow cached keys."""
    mask = ctx.target_function()
    scores, *offset = args
    if not offset:
        return mask(scores)
    past_kv_pos_offset = int(offset[0])
    try:
        inspect.signature(mask).bind(scores, past_kv_pos_offset)
    except TypeError:  # the signature without the offset: a message, not the traceback of a call
        raise TypeError(NO_OFFSET) from None
    return mask(scores, past_kv_pos_offset)
