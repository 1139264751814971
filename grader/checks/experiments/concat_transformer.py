"""concat.transformer: ConcatTransformer.forward, the logits of the whole model from the concatenated stream,
against transformer_lens's on the same model with each half padded with zeros, at two values of d_token."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Check, Tolerance
from grader.checks.experiments._concat import FROM_PADDED, concat, concat_cases, residual_mistakes

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

NO_LN_FINAL = "ln_final is not applied before the unembedding"
ONE_BLOCK = "only one block is applied: loop over every block in self.blocks"


def transformer_answer(model: Reference, tokens_name: str, learner: dict[str, Tensor]) -> tuple[Tensor, dict]:
    """transformer_lens's logits; a slip of residual's, run through transformer_lens's blocks as the stream they read;
    and forward's own slips."""
    tokens, acts = model.tokens[tokens_name], model.activations(tokens_name)
    resid_pre, last = acts["blocks.0.hook_resid_pre"], model.n_layers - 1
    mistakes = {
        slip: model.logits_with_hook(tokens, "blocks.0.hook_resid_pre", lambda _, stream=stream: stream)
        for slip, stream in residual_mistakes(learner, tokens).items()
    }
    mistakes[NO_LN_FINAL] = model.call("unembed", acts[f"blocks.{last}.hook_resid_post"])
    mistakes[ONE_BLOCK] = model.call("unembed", model.call("ln_final", model.call("blocks.0", resid_pre)))
    return acts["unembed.hook_out"], mistakes


def transformer_cases(ref: Reference):
    return concat_cases(ref, transformer_answer)


PAGE = "21-positions.md"
CHECK = Check(
    "concat.transformer",
    2,
    concat("forward"),
    "the whole model from [token | position]",
    transformer_cases,
    tolerance=Tolerance(atol=1e-3, rtol=1e-4),
    expected_from=FROM_PADDED,
    uses=("concat.residual", "block", "layernorm", "unembed"),
)
