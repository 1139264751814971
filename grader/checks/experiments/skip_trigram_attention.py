"""skip_trigram.attention: the attention each destination token pays each source token when every token is in the
context once, the softmax over the sources of the scaled full QK circuit; on the two heads' full QK circuits (the
reference's, so a slip in full_qk_circuit does not carry over) and on a small hand-made one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.experiments._skip_trigrams import (
    FROM_THE_DEFINITION,
    HEADS,
    ROUNDING,
    attention_to_sources,
    full_circuits,
    one_thread,
    skip_trigrams,
)
from grader.checks.model._common import generator

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

OVER_DESTINATIONS = (
    "the softmax is over the destinations (dim 0): it is over the sources, the last axis, so that each "
    "destination's row sums to 1"
)
NOT_SCALED = "the scores are not divided by sqrt(d_head) before the softmax"
BY_D_HEAD = "the scores are divided by d_head: divide by sqrt(d_head)"
SMALL = "it fails only on the small hand-made case, where d_head is 4: use the d_head you are given"
SMALL_SALT = 600_011  # the hand-made scores' own draws


def attention_mistakes(full_qk: Tensor, d_head: int) -> dict[str, Tensor]:
    return {
        OVER_DESTINATIONS: (full_qk / d_head**0.5).softmax(dim=0),
        NOT_SCALED: full_qk.softmax(dim=-1),
        BY_D_HEAD: (full_qk / d_head).softmax(dim=-1),
    }


def attention_cases(ref: Reference) -> list[Case]:
    import torch

    model = ref.attn_only_model()
    d_head = model.config_fields()["d_head"]
    cases = []
    for head in HEADS:
        full_qk = full_circuits(model, head)["qk"]
        expected = attention_to_sources(full_qk, d_head)
        mistakes = attention_mistakes(full_qk, d_head)
        cases.append(Case(f"head{head}", [full_qk, torch.tensor(d_head)], expected, mistakes=mistakes))
    small = 3 * torch.randn(5, 5, generator=generator(ref, SMALL_SALT))
    expected, mistakes = attention_to_sources(small, 4), attention_mistakes(small, 4)
    return [*cases, Case("small", [small, torch.tensor(4)], expected, hint=SMALL, mistakes=mistakes)]


PAGE = "22-skip-trigrams.md"
CHECK = Check(
    "skip_trigram.attention",
    1,
    skip_trigrams("attention_to_sources", "with_ints"),
    "each destination's attention to each source",
    one_thread(attention_cases),
    tolerance=ROUNDING,
    expected_from=FROM_THE_DEFINITION,
)
