"""Drivers of the induction checks. Their functions take ints, floats and strings beside tensors; each travels
as a tensor (a 0-d tensor for a number, UTF-8 bytes in a uint8 tensor for a string: `text_tensor`) and is passed
as the Python value the signature asks for. What is not a tensor comes back as one: repeated_tokens' three calls
stacked, heads_above's list of (layer, head) as rows."""

from __future__ import annotations

import torch

from grader.shared.formats import tensor_text

OTHER_SEED = 1  # repeated_tokens is called again with seed + OTHER_SEED, and must draw other tokens


def plain(value):
    """A case's argument as the learner's function takes it: a 0-d tensor as a number, a uint8 one as text."""
    if value.dtype == torch.uint8:
        return tensor_text(value)
    if value.ndim == 0:
        return value.item()
    return value


def scalars(ctx, args) -> torch.Tensor:
    """function(*args), its numbers and strings passed as Python values."""
    return ctx.target_function()(*(plain(arg) for arg in args))


def repeated(ctx, args) -> torch.Tensor:
    """repeated_tokens(batch, seq_len, d_vocab, bos, seed) called with seed, with seed again and with another
    seed, the three answers stacked as float64 (ids are exact in float64): (3, batch, 1 + 2 * seq_len)."""
    function = ctx.target_function()
    batch, seq_len, d_vocab, bos, seed = (int(value) for value in args[0])
    calls = [function(batch, seq_len, d_vocab, bos, seed + offset) for offset in (0, 0, OTHER_SEED)]
    for answer in calls:
        if type(answer) is not torch.Tensor or answer.is_floating_point() or answer.is_complex():
            raise TypeError(f"repeated_tokens must return a tensor of integer token ids, not {describe(answer)}")
    if len({tuple(answer.shape) for answer in calls}) > 1:
        raise ValueError(f"repeated_tokens returned shapes {[tuple(a.shape) for a in calls]} for the same arguments")
    return torch.stack([answer.cpu().to(torch.float64) for answer in calls])


def heads(ctx, args) -> torch.Tensor:
    """heads_above(scores, threshold) as float64 rows (layer, head), (found, 2)."""
    found = ctx.target_function()(*(plain(arg) for arg in args))
    if not isinstance(found, (list, tuple)):
        raise TypeError(f"heads_above must return a list of (layer, head) pairs, not {describe(found)}")
    rows = [tuple(pair) for pair in found]
    if any(len(row) != 2 for row in rows):
        raise TypeError("heads_above must return (layer, head) pairs: two numbers each")
    return torch.tensor([[float(layer), float(head)] for layer, head in rows], dtype=torch.float64).reshape(-1, 2)


def describe(value) -> str:
    return f"a {type(value).__name__}" if type(value) is not torch.Tensor else f"a {value.dtype} tensor"
