"""induction.ablate_head: zero- and mean-ablating one head on hook_z, of the small model on its [BOS, A, A] batch.

Cases small.blocks.1.head2.zero, small.blocks.1.head2.mean, small.blocks.0.head1.mean: hook_z
(batch, posn, n_heads, d_head) with that head ablated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.induction._circuits import ablated
from grader.checks.induction._common import FROM_THE_MODEL, induction
from grader.checks.induction._models import repeated_batch

if TYPE_CHECKING:
    from grader.builder.interface import Reference


ABLATED_Z = (("zero", 1, 2), ("mean", 1, 2), ("mean", 0, 1))  # (how, layer, head)


def ablate_head_cases(ref: Reference) -> list[Case]:
    import torch

    from grader.learner.drivers import text_tensor

    small = ref.induction_model()
    repeated = repeated_batch(small, "small")
    names = tuple(f"blocks.{layer}.attn.hook_z" for layer in range(small.n_layers))
    _, activation_cache = small.run_with_cache(repeated, names)
    cases = []
    for how, layer, head in ABLATED_Z:
        z = activation_cache[names[layer]].detach().clone()
        mistakes = {"every head is ablated: change z[:, :, head] only": ablated(z, head, how, heads=slice(None))}
        if how == "mean":
            mistakes |= {
                "the mean is over the positions: take it over the batch, per position": ablated(z, head, how, (1,)),
                "the mean is over d_head: take it over the batch, per position and component": ablated(
                    z, head, how, (0, 3)
                ),
            }
        args = [z, torch.tensor(head), text_tensor(how)]
        cases.append(Case(f"small.blocks.{layer}.head{head}.{how}", args, ablated(z, head, how), mistakes=mistakes))
    return cases


PAGE = "19-induction.md"
CHECK = Check(
    "induction.ablate_head",
    1,
    induction("ablate_head"),
    "zero- and mean-ablating a head on hook_z",
    ablate_head_cases,
    expected_from=FROM_THE_MODEL,
)
