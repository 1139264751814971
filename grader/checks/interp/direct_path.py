"""direct_path: the direct path's logits, W_E[tokens] unembedded with no block and no LayerNorm, compared with
GPT-2's embed and unembed modules on the prompt and on random tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.interp._common import interp, probed

if TYPE_CHECKING:
    from grader.builder.interface import Reference


def direct_path_cases(ref: Reference) -> list[Case]:
    cases = []
    for name in ("prompt", "random"):
        tokens = ref.tokens[name]
        embedded = ref.call("embed", tokens)
        right = ref.call("unembed", embedded)
        mistakes = {
            "the positional embedding is added: the direct path starts from W_E[tokens] alone": ref.call(
                "unembed", embedded + ref.call("pos_embed", tokens)
            ),
            "ln_final is applied: the direct path has no LayerNorm": ref.call(
                "unembed", ref.call("ln_final", embedded)
            ),
            "b_U is not added": right - ref.weight("unembed.b_U"),
        }
        cases.append(Case(name, [tokens], right, weights="", mistakes=mistakes))
    return cases


PAGE = "15-interp.md"
CHECK = Check(
    "interp.direct_path",
    1,
    interp("direct_path_logits", "on_model"),
    "the direct path's logits",
    probed(direct_path_cases),
    uses=("embed", "unembed"),
)
