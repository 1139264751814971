"""induction.ablation_cost: what ablating a head costs, the 0-d rise of the mean loss on the repeated half.

Cases small.blocks.L.headH.zero and .mean for the previous-token head and every layer-1 head, gpt2.blocks.L.headH.zero
for 5.5 and 4.11 (the notes list them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.induction._circuits import GPT2_PREVIOUS_TOKEN_HEAD, ablated
from grader.checks.induction._common import FROM_THE_MODEL, case_names, induction, which_models
from grader.checks.induction._models import SEQ_LEN, models, next_token_loss, repeated_batch

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def ablation_cost_notes(facts: dict) -> list[str]:
    """What ablating each head costs, from the expected answers: the heads that matter stand out."""
    costs: dict[str, list[str]] = {}
    for name in case_names(facts):  # e.g. small.blocks.1.head0.zero
        model, _, layer, head, how = name.split(".")
        costs.setdefault(f"{model} {layer}.{head.removeprefix('head')}", []).append(
            f"{how} {float(facts['expected'][name]):+.2f}"
        )
    listed = "; ".join(f"{head} {', '.join(hows)}" for head, hows in costs.items())
    return [f"ablating a head raises the loss on the repeated half by (nats): {listed}", *which_models(facts)]


def mean_loss_rise(clean: Tensor, ablated_logits: Tensor, tokens: Tensor, predictions: slice) -> Tensor:
    """The mean over `predictions` (positions of next_token_loss) of the ablated loss minus the clean one."""
    return (next_token_loss(ablated_logits, tokens) - next_token_loss(clean, tokens))[:, predictions].mean()


def ablation_cost_cases(ref: Reference) -> list[Case]:
    import torch

    ablations = {
        "small": [(how, 0, 1) for how in ("zero", "mean")]
        + [(how, 1, head) for head in range(4) for how in ("zero", "mean")]
    }
    # GPT-2's logits are 8 MB a sequence: one sequence, zero ablation (a mean over one sequence changes nothing).
    ablations["gpt2"] = [("zero", 5, 5), ("zero", *GPT2_PREVIOUS_TOKEN_HEAD)]
    cases = []
    for name, model in models(ref):
        tokens = repeated_batch(model, name)[: 1 if name == "gpt2" else None]
        clean = model.logits(tokens)
        for how, layer, head in ablations[name]:
            edit = lambda z, head=head, how=how: ablated(z, head, how)  # noqa: E731
            logits = model.logits_with_hook(tokens, f"blocks.{layer}.attn.hook_z", edit)
            mistakes = {
                "the first half: the repeated half's tokens are predicted at positions seq_len to 2 seq_len - 1": (
                    mean_loss_rise(clean, logits, tokens, slice(0, SEQ_LEN))
                ),
                "off by one: per_token_loss[:, p] is the loss of token p + 1, so take per_token_loss[:, seq_len:]": (
                    mean_loss_rise(clean, logits, tokens, slice(SEQ_LEN + 1, None))
                ),
                "the sign is wrong: the cost is the ablated loss minus the clean loss": -mean_loss_rise(
                    clean, logits, tokens, slice(SEQ_LEN, None)
                ),
            }
            expected = mean_loss_rise(clean, logits, tokens, slice(SEQ_LEN, None))
            args = [clean, logits, tokens, torch.tensor(SEQ_LEN)]
            cases.append(Case(f"{name}.blocks.{layer}.head{head}.{how}", args, expected, mistakes=mistakes))
    return cases


PAGE = "19-induction.md"
CHECK = Check(
    "induction.ablation_cost",
    1,
    induction("ablation_cost"),
    "what ablating a head costs on the repeated half",
    ablation_cost_cases,
    notes=ablation_cost_notes,
    expected_from=FROM_THE_MODEL,
    uses=("induction.per_token_loss",),
)
