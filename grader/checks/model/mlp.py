"""MLP: GPT-2's MLP in the first and last block, fed ln2 of GPT-2's stream."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Run, Target
from grader.checks.model._common import sublayer_cases
from grader.checks.model.gelu_new import gelu_mistakes

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def mlp_mistakes(pre: Tensor, weights: dict[str, Tensor], gelu_new) -> dict[str, Tensor]:
    def project(post):
        return post @ weights["W_out"] + weights["b_out"]

    activations = {
        hint.replace("this is", "the activation is"): project(post) for hint, post in gelu_mistakes(pre).items()
    }
    return activations | {
        "b_in is not added before the activation": project(gelu_new(pre - weights["b_in"])),
        "b_out is not added to the output": project(gelu_new(pre)) - weights["b_out"],
    }


def mlp_cases(ref: Reference) -> list[Case]:
    return sublayer_cases(
        ref,
        "mlp",
        "ln2",
        "hook_resid_mid",
        {"pre": "hook_pre", "post": "hook_post"},
        lambda seen, weights: mlp_mistakes(seen["hook_pre"], weights, ref.gelu_new),
    )


PAGE = "06-mlp.md"
CHECK = Check("mlp", 2, Target("mlp", "MLP"), "MLP", mlp_cases, run=Run(capture=("locals",)), uses=("gelu_new",))
