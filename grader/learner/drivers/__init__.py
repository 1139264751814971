"""Drivers: code run in the learner's process when a check needs more than one call of one function.

A driver is named in a check's `Target(driver="module:function")`, gets `(ctx, args)` (see
`grader.learner.CaseContext`) and returns one tensor per case. The formats both processes use for what is not a
tensor are `grader.shared.formats`'; the two below make them as tensors, for the drivers and for the checks' cases
(which import them where they build a case, in the reference builder's process, never in the grader's).
"""

from __future__ import annotations

from grader.shared.formats import PADDING


def text_tensor(text: str):
    import torch

    return torch.tensor(list(text.encode("utf-8")), dtype=torch.uint8)


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
