"""The driver of targets that take the number of cached positions before their input (past_kv_pos_offset, as the
KV cache needs: PosEmbed, apply_causal_mask). The offset travels as a 0-d tensor, the second argument of the cases
that have one, and is passed as the int the signature asks for."""

from __future__ import annotations

import inspect

import torch

NO_OFFSET = (
    "{target} takes the number of cached positions before its input as its second argument "
    "(past_kv_pos_offset, default 0), as the KV cache needs"
)


def with_offset(ctx, args, capture=None) -> torch.Tensor:
    """target(first), or target(first, offset) for a case whose input follows cached positions; called, and recorded
    where the check captures, as the default driver calls a target."""
    first, *offset = args
    if not offset:
        return ctx.call(first, capture=capture)
    past_kv_pos_offset = int(offset[0])
    try:
        inspect.signature(ctx.target_function()).bind(first, past_kv_pos_offset)
    except TypeError:  # the signature without the offset: a message, not the traceback of a call
        raise TypeError(NO_OFFSET.format(target=f"{ctx.target.name}.{ctx.target.method}")) from None
    return ctx.call(first, past_kv_pos_offset, capture=capture)
