"""induction.direct_logit_attribution: each head's direct effect on the logit of the next token.

Cases small.repeated, small.random: (batch, posn - 1, n_layers, n_heads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.induction._common import FROM_THE_MODEL, induction
from grader.checks.induction._models import repeated_batch

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def dla(normalised: Tensor, ln_w: Tensor, W_U: Tensor, tokens: Tensor, targets: Tensor | None = None) -> Tensor:
    """Each head's ln_final-normalised output times w, read along W_U's column of each position's target (by default
    the next token): (batch, posn - 1, layer, head)."""
    import einops

    targets = tokens[:, 1:] if targets is None else targets
    weighted = normalised[:, :-1] * ln_w
    return einops.einsum(weighted, W_U[:, targets], "b p l h d, d b p -> b p l h")


def direct_logit_attribution_cases(ref: Reference) -> list[Case]:
    import torch

    small = ref.induction_model()
    ln_w, W_U = small.weight("ln_final.w").clone(), small.weight("unembed.W_U").clone()
    random = torch.randint(0, small.d_vocab, (4, 30), generator=small.generator)
    cases = []
    for name, tokens in (("small.repeated", repeated_batch(small, "small")), ("small.random", random)):
        heads = small.head_results(tokens)
        results, normalised, scale = heads["results"], heads["normalised"], heads["scale"][..., None, None]
        mistakes = {
            "ln_final's scale is forgotten: divide each head's centred output by ln_scale": dla(
                normalised * scale, ln_w, W_U, tokens
            ),
            "each position is scored on its own token: position p predicts tokens[:, p + 1]": dla(
                normalised, ln_w, W_U, tokens, tokens[:, :-1]
            ),
            "no centring: ln_final subtracts the mean over d_model first, from each head's output too": dla(
                results / scale, ln_w, W_U, tokens
            ),
        }
        args = [results, heads["scale"], ln_w, W_U, tokens]
        cases.append(Case(name, args, dla(normalised, ln_w, W_U, tokens), mistakes=mistakes))
    return cases


PAGE = "19-induction.md"
CHECK = Check(
    "induction.direct_logit_attribution",
    2,
    induction("direct_logit_attribution", None),
    "each head's direct effect on the next token's logit",
    direct_logit_attribution_cases,
    expected_from=FROM_THE_MODEL,
)
