"""Unembed: GPT-2's logits from ln_final's output, and a b_U that is not zero (GPT-2's is)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Target
from grader.checks.model._common import ONE_POSITION, TOKEN_SETS, one_position

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def unembed_cases(ref: Reference) -> list[Case]:
    import torch

    last, forgot = ref.n_layers - 1, "b_U is not added to the logits"

    def normalized(tokens: str) -> Tensor:
        return ref.call("ln_final", ref.activations(tokens)[f"blocks.{last}.hook_resid_post"])

    def case(name: str, tokens: str, hint: str = "") -> Case:
        out, b_U = ref.activations(tokens)["unembed.hook_out"], ref.weight("unembed.b_U")
        return Case(name, [normalized(tokens)], out, weights="unembed.", hint=hint, mistakes={forgot: out - b_U})

    cases = [case(name, name) for name in TOKEN_SETS]
    # GPT-2's b_U is all zeros, so a forgotten bias would pass on the real weights alone.
    b_U = 0.5 * torch.randn(ref.d_vocab, generator=ref.generator)
    x = normalized("random")
    out = ref.call("unembed", x, overrides={"b_U": b_U})
    hint = "it differs only when b_U is not zero: add b_U"
    perturbed = Case(
        "perturbed_b_U", [x], out, weights="unembed.", overrides={"b_U": b_U}, hint=hint, mistakes={forgot: out - b_U}
    )
    return cases + [perturbed, case("one_position", one_position(ref), ONE_POSITION)]


PAGE = "08-unembed.md"
CHECK = Check("unembed", 1, Target("unembedding", "Unembed"), "unembedding", unembed_cases)
