"""concat.residual: ConcatTransformer.residual, the stream [token embedding | position embedding] the first block
reads, against transformer_lens's on the same model with each half padded with zeros, at two values of d_token."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Check
from grader.checks.experiments._concat import FROM_PADDED, concat, concat_cases, residual_mistakes

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def residual_answer(model: Reference, tokens_name: str, learner: dict[str, Tensor]) -> tuple[Tensor, dict]:
    """transformer_lens's hook_resid_pre of the first block: its own sum hook_embed + hook_pos_embed of the padded
    halves, the stream its blocks read, which is the concatenation exactly (no value of ours goes into it)."""
    tokens = model.tokens[tokens_name]
    return model.activations(tokens_name)["blocks.0.hook_resid_pre"], residual_mistakes(learner, tokens)


def residual_cases(ref: Reference):
    return concat_cases(ref, residual_answer)


PAGE = "21-positions.md"
CHECK = Check(
    "concat.residual",
    1,
    concat("residual"),
    "[token | position] residual stream",
    residual_cases,
    expected_from=FROM_PADDED,
    uses=("embed", "pos_embed"),
)
