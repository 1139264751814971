"""Drivers: code run in the learner's process when a check needs more than one call of one function.

A driver is named in a check's `Target(driver="module:function")`, gets `(ctx, args)` (see
`grader.learner.CaseContext`) and returns one tensor per case. This module holds the formats both
processes use for what is not a tensor: text as UTF-8 bytes in a uint8 tensor, and beams as rows
[group, log-prob sum, token ids padded with PADDING].
"""

from __future__ import annotations

COUNT_KEYS = (
    "embed",
    "pos_embed",
    "blocks",
    "ln_final",
    "unembed",
    "total",
    "tied",
)  # interp.parameter_counts, in order
END_OF_TEXT = "<|endoftext|>"  # GPT-2's end-of-text token, also the stand-in tokenizer's
# The interp checks' inputs that decide, once per check, whether it runs on the learner's Transformer: a few token
# ids (a batch of two, a few positions) and GPT-2's logits on them, which the learner's must give (drivers.interp).
PROBE_TOKENS, PROBE_LOGITS, PROBE_SHAPE = "probe_tokens", "probe_logits", (2, 8)
PADDING = -1


def text_tensor(text: str):
    import torch

    return torch.tensor(list(text.encode("utf-8")), dtype=torch.uint8)


def tensor_text(data) -> str:
    """The text in a uint8 tensor or array, zero bytes at its end (padding) left out."""
    return bytes(data.tolist()).rstrip(b"\0").decode("utf-8")


def beam_rows(groups):
    """Rows [group, log-prob sum, token ids padded with PADDING] for each group of (log-prob sums, token id lists)."""
    import torch

    rows = [
        [group, float(logprob), *ids]
        for group, (logprobs, token_lists) in enumerate(groups)
        for logprob, ids in zip(logprobs, token_lists, strict=False)
    ]
    width = max((len(row) for row in rows), default=2)
    return torch.tensor([row + [PADDING] * (width - len(row)) for row in rows], dtype=torch.float64).reshape(
        len(rows), width
    )
