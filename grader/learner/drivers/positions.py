"""The driver of Part 6's ConcatTransformer: the learner's class built at a case's d_token (its second argument, a 0-d
tensor), loaded with the case's weights, and the method under check called on the tokens."""

from __future__ import annotations

import functools

import torch


def concat(ctx, args) -> torch.Tensor:
    """ConcatTransformer(cfg, d_token).<method>(tokens); forward also names residual, where its slips are located."""
    tokens, d_token = args
    model = ctx.module(at_width(ctx.package.attribute(ctx.target.file, ctx.target.name), int(d_token)))
    method = getattr(model, ctx.target.method)
    ctx.point_at(method, also=(model.residual,) if ctx.target.method != "residual" else ())
    return method(tokens)


@functools.cache
def at_width(cls, d_token: int):
    """`cls(cfg, d_token)` as the constructor of a config alone that `ctx.module` takes: one per class and d_token, so
    the module built is remembered per d_token (CaseContext._memo keys on the constructor) and built again for
    another."""

    def build(cfg):
        return cls(cfg, d_token)

    return build
