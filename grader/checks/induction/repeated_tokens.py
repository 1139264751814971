"""induction.repeated_tokens: the learner's [BOS, A, A] random tokens, which pass by their properties, not by one draw.

Cases tiny_vocab, small_vocab, gpt2_vocab: a valid answer of the call's three answers stacked (seed, the same seed,
another seed), (3, batch, 1 + 2 * seq_len) float64 ids; its largest id is d_vocab - 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case, Check, Tolerance
from grader.checks.induction._common import EXACT, induction
from grader.checks.induction._models import SEQ_LEN
from grader.shared.compare import CaseComparison, validate

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

REPEATED_CALLS = {  # case: (batch, seq_len, d_vocab, bos, seed); a vocabulary of 5 shows ids out of range
    "tiny_vocab": (4, 20, 5, 4, 0),
    "small_vocab": (8, SEQ_LEN, 512, 16, 3),
    "gpt2_vocab": (2, 31, 50257, 50256, 12),
}


def one_answer(batch: int, seq_len: int, d_vocab: int, bos: int, seed: int) -> Tensor:
    """A valid answer whose largest id is d_vocab - 1, so that the comparison reads d_vocab from it."""
    import torch

    first = torch.randint(0, d_vocab, (batch, seq_len), generator=torch.Generator().manual_seed(seed))
    first[0, 0] = d_vocab - 1
    return torch.cat([torch.full((batch, 1), bos), first, first], dim=1).double()


def repeated_tokens_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    for name, (batch, seq_len, d_vocab, bos, seed) in REPEATED_CALLS.items():
        seed += ref.seed
        answers = [one_answer(batch, seq_len, d_vocab, bos, seed + offset) for offset in (0, 0, 1)]
        cases.append(Case(name, [torch.tensor([batch, seq_len, d_vocab, bos, seed])], torch.stack(answers)))
    return cases


def repeated_properties(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> CaseComparison:
    """Any correct draw passes: the shape, integer ids, the BOS column, the second half equal to the first, ids in
    range, rows that differ, the same seed giving the same tokens and another seed other ones. The message names
    the first property that fails."""
    invalid = validate(actual, expected)
    if invalid:
        return invalid
    bos, d_vocab, seq_len = expected[0, 0, 0], expected.max() + 1, (expected.shape[-1] - 1) // 2
    first, second = actual[..., 1 : 1 + seq_len], actual[..., 1 + seq_len :]
    rows = actual[0].reshape(actual.shape[1], -1)
    failures = {
        "the ids are not whole numbers": (actual != np.round(actual)).any(),
        f"no BOS: every sequence begins with bos ({int(bos)})": (actual[..., 0] != bos).any(),
        "the halves are not repeated: tokens[:, 1 + seq_len:] must equal tokens[:, 1:1 + seq_len]": (
            first != second
        ).any(),
        f"ids out of range: draw them in [0, d_vocab) = [0, {int(d_vocab)})": (
            (actual < 0) | (actual >= d_vocab)
        ).any(),
        "every sequence of the batch is the same: draw each row's tokens": len({row.tobytes() for row in rows})
        < len(rows),
        "the same seed gave other tokens: seed a generator with `seed`": (actual[0] != actual[1]).any(),
        "another seed gave the same tokens: seed a generator with `seed`": (actual[0] == actual[2]).all(),
    }
    failed = [message for message, fails in failures.items() if fails]
    shapes = {"actual_shape": list(actual.shape), "expected_shape": list(expected.shape)}
    return CaseComparison(not failed, failed[0] if failed else "", None, None, **shapes)


PAGE = "19-induction.md"
CHECK = Check(
    "induction.repeated_tokens",
    1,
    induction("repeated_tokens", "repeated"),
    "[BOS, A, A] random tokens",
    repeated_tokens_cases,
    comparison=repeated_properties,
    tolerance=EXACT,
    expected_from="what a repeated sequence is",
)
