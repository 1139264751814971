"""induction.k_composition: the K-composition score of an earlier head into a later one.

Cases small.L0Hi.L1Hj for every pair, gpt2.L4H11.L5H5 and gpt2.L4H11.L6H9: the 0-d K-composition score of the pair.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.induction._circuits import GPT2_PREVIOUS_TOKEN_HEAD
from grader.checks.induction._common import FROM_THE_MODEL, induction, which_models
from grader.checks.induction._models import models

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def frobenius(matrix: Tensor) -> Tensor:
    return matrix.pow(2).sum().sqrt()


def k_composition_cases(ref: Reference) -> list[Case]:
    pairs = {"small": [((0, h0), (1, h1)) for h0 in range(4) for h1 in range(4)]}
    pairs["gpt2"] = [(GPT2_PREVIOUS_TOKEN_HEAD, (5, 5)), (GPT2_PREVIOUS_TOKEN_HEAD, (6, 9))]
    cases = []
    for name, model in models(ref):
        for (l0, h0), (l1, h1) in pairs[name]:
            W_OV, W_QK = model.head_circuits(l0, h0)["ov"], model.head_circuits(l1, h1)["qk"]
            norms = frobenius(W_OV) * frobenius(W_QK)
            mistakes = {
                "W_QK is not transposed (that is Q-composition): the earlier head writes into the keys, W_OV W_QK^T": (
                    frobenius(W_OV @ W_QK) / norms
                ),
                "not normalised: divide by ||W_OV||_F ||W_QK||_F": frobenius(W_OV @ W_QK.T),
            }
            expected = model.k_composition_score((l0, h0), (l1, h1))
            cases.append(Case(f"{name}.L{l0}H{h0}.L{l1}H{h1}", [W_OV, W_QK], expected, mistakes=mistakes))
    return cases


PAGE = "19-induction.md"
CHECK = Check(
    "induction.k_composition",
    1,
    induction("k_composition_score", None),
    "K-composition of an earlier head into a later one",
    k_composition_cases,
    notes=which_models,
    expected_from=FROM_THE_MODEL,
)
