"""TransformerSampler.greedy_search: the most likely token of a whole vocabulary's logits, of logits all negative,
and of logits whose peak is the last token."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case
from grader.checks.sampling._common import exact, generator
from grader.checks.sampling._compare import same_token

if TYPE_CHECKING:
    from grader.builder.interface import Reference


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


PAGE = "11-sampling.md"
CHECK = exact("sampling.greedy", "greedy_search", "greedy decoding", greedy_cases, same_token)
