"""skip_trigram.full_qk: a head's full QK circuit W_E (W_Q W_K^T) W_E^T on the attention-only model, each destination
token's score on each source token, from the learner's Attention at that model's Config and its qk_circuit; compared
with transformer_lens's FactoredMatrix QK times W_E on both sides, on the two heads that hold the planted families."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.experiments._skip_trigrams import (
    CIRCUITS,
    FROM_THE_MODEL,
    HEADS,
    full_circuits,
    one_thread,
    skip_trigrams,
)

if TYPE_CHECKING:
    from grader.builder.interface import Reference

TRANSPOSED = (
    "the full QK circuit is transposed, as W_K W_Q^T gives: rows index the destination (the query side), so "
    "W_E qk W_E^T with qk = W_Q W_K^T"
)
SCALED = "the scores are scaled here by 1/sqrt(d_head): the full QK circuit is the raw form, the softmax scales"


def full_qk_cases(ref: Reference) -> list[Case]:
    import torch

    model = ref.attn_only_model()
    W_E = model.weight("embed.W_E").clone()
    weights = {"config": model.config_fields(), "overrides": model.parameters_of("blocks.0.attn")}
    cases = []
    for head in HEADS:
        right = full_circuits(model, head)["qk"]
        mistakes = {TRANSPOSED: right.T, SCALED: right / model.config_fields()["d_head"] ** 0.5}
        cases.append(Case(f"head{head}", [W_E, torch.tensor(head)], right, mistakes=mistakes, **weights))
    return cases


PAGE = "22-skip-trigrams.md"
CHECK = Check(
    "skip_trigram.full_qk",
    1,
    skip_trigrams("full_qk_circuit", "full_qk"),
    "a head's full QK circuit, token to token",
    one_thread(full_qk_cases),
    tolerance=CIRCUITS,
    expected_from=FROM_THE_MODEL,
    uses=("interp.qk_circuit",),
)
