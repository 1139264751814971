"""is_tied: whether W_U is exactly W_E^T, on GPT-2's own weights and with W_U[0, 0] moved far or by less than a
tolerance notices; the answer is the exact test."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.interp._common import EXACT, EXACT_ONLY, interp, probed

if TYPE_CHECKING:
    from grader.builder.interface import Reference

TIED_WITHIN_A_TOLERANCE = (
    "W_U differs from W_E^T in one entry and is_tied says True: "
    "compare every entry exactly (torch.equal), not within a tolerance"
)


def is_tied_cases(ref: Reference) -> list[Case]:
    """GPT-2's own weights, then W_U[0, 0] moved far, and moved by less than allclose notices
    (1e-6 relative: above float32's resolution, below allclose's rtol of 1e-5)."""
    import torch

    W_E_T, W_U = ref.weight("embed.W_E").T, ref.weight("unembed.W_U")
    tied_elsewhere = torch.equal(W_U[1:], W_E_T[1:]) and torch.equal(W_U[0, 1:], W_E_T[0, 1:])
    cases = []
    for name, nudge in (("gpt2", 0.0), ("untied", 0.5), ("nearly_tied", 1e-6)):
        moved = W_U[0, 0].clone()  # what the driver does to the learner's W_U[0, 0]
        moved *= 1 + nudge
        tied = tied_elsewhere and torch.equal(moved, W_E_T[0, 0])
        hint = "" if tied else TIED_WITHIN_A_TOLERANCE
        mistakes = {hint: torch.tensor([1.0], dtype=torch.float64)} if hint else {}
        cases.append(
            Case(
                name,
                [torch.tensor(nudge)],
                torch.tensor([float(tied)], dtype=torch.float64),
                weights="",
                mistakes=mistakes,
            )
        )
    return cases


PAGE = "15-interp.md"
CHECK = Check(
    "interp.is_tied",
    1,
    interp("is_tied", "tied"),
    "tied embeddings",
    probed(is_tied_cases),
    tolerance=EXACT_ONLY,
    expected_from=EXACT,
)
