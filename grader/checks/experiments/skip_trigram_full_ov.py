"""skip_trigram.full_ov: a head's full OV circuit W_E (W_V W_O) W_U on the attention-only model, what attending to each
source token adds to each output's logit, from the learner's Attention at that model's Config and its ov_circuit;
compared with transformer_lens's FactoredMatrix OV times W_E and W_U, on the two heads that hold the planted
families."""

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

TRANSPOSED = "the full OV circuit is transposed: rows index the source token (what the head reads), columns the output"
W_E_T = "W_E^T is used as the unembedding: this model's W_U is not W_E^T (untied), so finish with W_U"
EVERY_HEAD = "every head is summed: take the ov_circuit of one head"


def full_ov_cases(ref: Reference) -> list[Case]:
    import torch

    model = ref.attn_only_model()
    W_E, W_U = model.weight("embed.W_E").clone(), model.weight("unembed.W_U").clone()
    weights = {"config": model.config_fields(), "overrides": model.parameters_of("blocks.0.attn")}
    every_head = sum(model.head_circuits(0, h)["ov"] for h in range(model.n_heads))
    cases = []
    for head in HEADS:
        right = full_circuits(model, head)["ov"]
        mistakes = {TRANSPOSED: right.T, W_E_T: W_E @ model.head_circuits(0, head)["ov"] @ W_E.T}
        mistakes[EVERY_HEAD] = W_E @ every_head @ W_U
        cases.append(Case(f"head{head}", [W_E, W_U, torch.tensor(head)], right, mistakes=mistakes, **weights))
    return cases


PAGE = "22-skip-trigrams.md"
CHECK = Check(
    "skip_trigram.full_ov",
    1,
    skip_trigrams("full_ov_circuit", "full_ov"),
    "a head's full OV circuit, token to token",
    one_thread(full_ov_cases),
    tolerance=CIRCUITS,
    expected_from=FROM_THE_MODEL,
    uses=("interp.ov_circuit",),
)
