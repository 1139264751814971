"""Drivers of the interp checks: the learner's functions on the learner's own modules, loaded with
GPT-2's weights; on the grader's stand-in Transformer (`stand_in_transformer`) where the learner's does
not import or fails its own check. What is not a tensor travels as one: the counts in `COUNT_KEYS` order,
a bool as 0. or 1., fold_layernorm's (W, b) as W with b appended as a last row."""

from __future__ import annotations

import torch

from grader.learner.drivers.replay import replaying
from grader.learner.drivers.stand_in_transformer import Transformer as StandIn
from grader.learner.drivers.stand_in_transformer import fault, gives
from grader.shared.formats import COUNT_KEYS, PROBE_LOGITS, PROBE_TOKENS

MODULES = {"attn": ("attention", "Attention"), "ln": ("normalization", "LayerNorm")}


def learner_function(ctx):
    """The learner's interp function named by the check, remembered as the place to point at."""
    function = ctx.package.attribute(ctx.target.file, ctx.target.name)
    ctx.point_at(function)
    return function


def learner_module(ctx, kind: str):
    """The learner's attention or LayerNorm, loaded with this case's weights (the grader's where its file does not
    import: the function graded is the learner's interp)."""
    return ctx.module(ctx.package.part(*MODULES[kind]))


def model(ctx):
    """The learner's Transformer loaded with this case's weights; the stand-in, loaded alike, where the learner's
    does not import or does not give GPT-2's logits on the case's probe tokens (decided once per check)."""
    if not ctx.stand_in_decided:
        probe = ctx.tensor(PROBE_TOKENS), ctx.tensor(PROBE_LOGITS)
        ctx.update_reply(stand_in=fault(ctx, lambda cls: gives(ctx.module(cls), *probe)))
        ctx.stand_in_decided = True
    if ctx.reply.stand_in:
        return ctx.module(StandIn)
    return ctx.module(ctx.package.attribute("transformer", "Transformer"))


def counts(ctx, args) -> torch.Tensor:
    """parameter_counts(model) as a tensor in COUNT_KEYS order."""
    answer = learner_function(ctx)(model(ctx))
    if not isinstance(answer, dict):
        raise TypeError(f"parameter_counts returned a {type(answer).__name__}, not a dict")
    missing = [key for key in COUNT_KEYS if key not in answer]
    if missing:
        raise KeyError(f"parameter_counts has no {', '.join(missing)}: the keys are {', '.join(COUNT_KEYS)}")
    return torch.tensor([float(answer[key]) for key in COUNT_KEYS], dtype=torch.float64)


def on_model(ctx, args) -> torch.Tensor:
    """function(model, tokens): logit_lens, direct_path_logits; the blocks answer what a case ships for them."""
    graded = model(ctx)
    with replaying(ctx, graded):
        return learner_function(ctx)(graded, *args)


def head_circuit(ctx, args) -> torch.Tensor:
    """function(attn, head): qk_circuit, ov_circuit."""
    return learner_function(ctx)(learner_module(ctx, "attn"), int(args[0]))


def fold(ctx, args) -> torch.Tensor:
    """fold_layernorm(ln, W, b) as one tensor: W_folded with b_folded appended as a last row."""
    answer = learner_function(ctx)(learner_module(ctx, "ln"), *args)
    if not (isinstance(answer, tuple) and len(answer) == 2 and all(isinstance(part, torch.Tensor) for part in answer)):
        raise TypeError("fold_layernorm must return a tuple (W_folded, b_folded) of two tensors")
    W_folded, b_folded = answer
    return torch.cat([W_folded, b_folded.reshape(1, -1)])


def tied(ctx, args) -> torch.Tensor:
    """is_tied(model) with W_U[0, 0] scaled by 1 + args[0] for this call only (0: GPT-2's own weights)."""
    graded = model(ctx)
    nudge = float(args[0])
    W_U = graded.unembed.W_U
    saved = W_U[0, 0].item()
    W_U[0, 0] *= 1 + nudge
    try:
        answer = learner_function(ctx)(graded)
    finally:
        W_U[0, 0] = saved
    if not isinstance(answer, (bool, torch.Tensor)):
        raise TypeError(f"is_tied returned a {type(answer).__name__}, not a bool")
    return torch.tensor([float(bool(answer))], dtype=torch.float64)
