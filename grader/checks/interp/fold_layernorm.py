"""fold_layernorm: folding a LayerNorm's w and b into the linear map after it (the MLP's W_in in the first and the
last block, the first block's W_V), compared with the exact formula."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.interp._common import EXACT, interp

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def folded(W_folded: Tensor, b_folded: Tensor) -> Tensor:
    """fold_layernorm's answer as its driver sends it: W_folded with b_folded as a last row."""
    import torch

    return torch.cat([W_folded, b_folded[None]])


def fold_layernorm_cases(ref: Reference) -> list[Case]:
    import einops

    last = ref.n_layers - 1
    sites = [(f"blocks.{layer}.ln2", ref.parameters_of(f"blocks.{layer}.mlp"), "W_in", "b_in") for layer in (0, last)]
    attn = ref.parameters_of("blocks.0.attn")
    flat = {
        "W_V": einops.rearrange(attn["W_V"], "n_heads d_model d_head -> d_model (n_heads d_head)"),
        "b_V": attn["b_V"].flatten(),
    }
    sites.append(("blocks.0.ln1", flat, "W_V", "b_V"))
    cases = []
    for path, weights, w_name, b_name in sites:
        W, b = weights[w_name], weights[b_name]
        ln = ref.parameters_of(path)
        gamma, beta = ln["w"], ln["b"]

        mistakes = {
            "b_folded forgets ln.b: it is ln.b W + b": folded(gamma[:, None] * W, b),
            "b_folded forgets the linear map's own b: it is ln.b W + b": folded(gamma[:, None] * W, beta @ W),
            "w is not folded in: W_folded = diag(w) W": folded(W, beta @ W + b),
        }
        cases.append(
            Case(
                f"{path}.{w_name}",
                [W, b],
                folded(gamma[:, None] * W, beta @ W + b),
                weights=f"{path}.",
                mistakes=mistakes,
            )
        )
    return cases


PAGE = "15-interp.md"
CHECK = Check(
    "interp.fold_layernorm",
    2,
    interp("fold_layernorm", "fold"),
    "folding LayerNorm into the next map",
    fold_layernorm_cases,
    expected_from=EXACT,
)
