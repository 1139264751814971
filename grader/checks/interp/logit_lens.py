"""logit_lens: the learner's logit lens, compared with transformer_lens's `accumulated_resid(apply_ln=True)`, on
GPT-2's prompt and on the small induction model's [BOS, A, A]; each block is replayed, so the lens is graded alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Tolerance
from grader.checks.induction._models import repeated_batch
from grader.checks.interp._common import interp, probed
from grader.checks.model.block import replay_extras
from grader.shared.formats import SMALL_LENS

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

SMALL_ONLY = (
    "it fails only on the small induction model (2 layers, d_model 64, 512 tokens): read every size from model.cfg "
    "or the model's own modules (model.blocks), never GPT-2's numbers"
)


ONE_STREAMS_STATISTICS = (
    "every stream was normalised with the last stream's mean and variance: apply ln_final to each stream, "
    "which takes that stream's own"
)
ONE_STREAMS_SCALE = (
    "every stream was divided by the last stream's scale (the cached ln_final scale): apply ln_final to each stream, "
    "which recomputes its variance"
)


def logit_lens_cases(ref: Reference) -> list[Case]:
    """GPT-2's lens on the prompt; then the small induction model's on [BOS, A, A], where even offline the lens shows
    structure (the repeated half's tokens predicted from layer 1 on). GPT-2's case comes first: the first case decides
    whether the check runs on the learner's Transformer, by the probe, which holds GPT-2's logits."""
    small = ref.induction_model()
    small.tokens.setdefault(SMALL_LENS, repeated_batch(small, "small")[:1])
    own_weights = {"overrides": small.parameters_of(""), "config": small.config_fields(), "hint": SMALL_ONLY}
    return [lens_case(ref, "prompt", weights=""), lens_case(small, SMALL_LENS, **own_weights)]


def lens_case(model: Reference, tokens_name: str, **fields) -> Case:
    """The logit lens of `model` on one of its token sets, named after it, with the classic mistake."""
    import torch

    tokens = model.tokens[tokens_name]
    acts = model.activations(tokens_name)
    streams = [acts[f"blocks.{layer}.hook_resid_pre"] for layer in range(model.n_layers)] + [
        acts[f"blocks.{model.n_layers - 1}.hook_resid_post"]
    ]
    no_ln = torch.stack([model.call("unembed", stream) for stream in streams])
    # ln_final with the last stream's statistics for every stream: its mean and scale, or (transformer_lens's cached
    # scale, recompute_ln=False) each stream's own mean and the last stream's scale.
    final_mean, final_scale = streams[-1].mean(dim=-1, keepdim=True), acts["ln_final.hook_scale"]
    w, b = model.weight("ln_final.w"), model.weight("ln_final.b")

    def read_with(means) -> Tensor:
        return torch.stack(
            [model.call("unembed", w * (s - m) / final_scale + b) for s, m in zip(streams, means, strict=True)]
        )

    own_means = [stream.mean(dim=-1, keepdim=True) for stream in streams]
    mistakes = {
        "ln_final is not applied: unembed ln_final(stream), as the model's own readout does": no_ln,
        ONE_STREAMS_STATISTICS: read_with([final_mean] * len(streams)),
        ONE_STREAMS_SCALE: read_with(own_means),
    }
    # Each block answers the model's output for its input, so the lens is graded on its own (one mistake, one penalty).
    blocks = {f"blocks.{layer}": (streams[layer], streams[layer + 1]) for layer in range(model.n_layers)}
    extra = replay_extras(blocks)
    return Case(tokens_name, [tokens], model.logit_lens(tokens), extra=extra, mistakes=mistakes, **fields)


PAGE = "15-interp.md"
CHECK = Check(
    "interp.logit_lens",
    2,
    interp("logit_lens", "on_model"),
    "the logit lens",
    probed(logit_lens_cases),
    tolerance=Tolerance(atol=1e-3, rtol=1e-4),
    uses=("embed", "pos_embed", "layernorm", "block", "unembed"),
)
