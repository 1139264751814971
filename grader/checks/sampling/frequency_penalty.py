"""TransformerSampler.apply_frequency_penalty: each token's logit lowered by the penalty times its count in the
input ids, for a token repeated alone, mixed repeats, and the last id of the vocabulary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case
from grader.checks.sampling._common import LOGITS_TOLERANCE, exact, generator, known
from grader.checks.sampling._compare import close
from grader.checks.sampling._oracle import penalised

if TYPE_CHECKING:
    from grader.builder.interface import Reference

PENALISED_ONCE = (
    "each token in input_ids was penalised once, however often it occurs: subtract freq_penalty times its count"
)
COUNTS_BROADCAST = (
    "every logit was penalised by the count of token 0: "
    "the counts need one entry per vocabulary id (torch.bincount(..., minlength=d_vocab))"
)


def frequency_penalty_cases(ref: Reference) -> list[Case]:
    import torch

    logits = 2 * torch.randn(ref.d_vocab, generator=generator(3))
    last = ref.d_vocab - 1
    # Only token 0 first: counts without minlength then have length 1 and broadcast, so the
    # mistake gives wrong values (elsewhere it raises a shape error).
    inputs = {
        "repeats_of_token_0": ([0, 0, 0, 0], 0.5),
        "mixed_repeats": ([5, 17, 5, 300, 5, 17, 9000], 0.7),
        "last_vocabulary_id": ([last, 3, 3, last, 3], 1.5),
    }
    cases = []
    for name, (ids, penalty) in inputs.items():
        input_ids = torch.tensor(ids)
        broadcast = logits - penalty * len(ids) if set(ids) == {0} else None
        mistakes = known(
            (PENALISED_ONCE, penalised(logits, input_ids, penalty, presence_only=True)), (COUNTS_BROADCAST, broadcast)
        )
        args = [input_ids, logits, torch.tensor(penalty)]
        cases.append(Case(name, args, penalised(logits, input_ids, penalty), mistakes=mistakes))
    return cases


PAGE = "11-sampling.md"
CHECK = exact(
    "sampling.frequency_penalty",
    "apply_frequency_penalty",
    "frequency penalty",
    frequency_penalty_cases,
    close,
    LOGITS_TOLERANCE,
)
