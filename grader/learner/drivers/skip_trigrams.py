"""Drivers of the skip_trigram checks. The full circuits are the learner's functions on the learner's own Attention,
built at the attention-only model's Config with its weights (the case's `config` and `overrides`), with W_E and W_U
as tensors; the other functions take tensors and ints (each int travels as a 0-d tensor and is passed as an int).
What is not a float tensor comes back as one, float64 (ids and counts are exact in it): skip_trigram_table's four
tensors packed as rows [source, its k destinations, its k outputs, its k x k scores row by row], (n, 1 + 2k + k^2);
the counts as they are; the bugs as 0. or 1."""

from __future__ import annotations

import torch

from grader.learner.package import PACKAGE_NAME

TABLE_PARTS = ("sources", "destinations", "outputs", "scores")


def learner_function(ctx, *calls: str):
    """The learner's function named by the check, remembered as the place to point at, with the interp functions
    it calls (`calls`), where a named mistake may be too."""
    function = ctx.target_function()
    called = [ctx.package.part("interp", name) for name in calls]
    ctx.point_at(function, also=[call for call in called if call.__module__.startswith(PACKAGE_NAME)])
    return function


def attention(ctx):
    """The learner's Attention at the case's Config, loaded with the case's weights; the grader's, where attention.py
    does not import (the functions graded are the learner's skip_trigrams)."""
    return ctx.module(ctx.package.part("attention", "Attention"))


def full_ov(ctx, args) -> torch.Tensor:
    """full_ov_circuit(W_E, attn, W_U, head)."""
    W_E, W_U, head = args
    return learner_function(ctx, "ov_circuit")(W_E, attention(ctx), W_U, int(head))


def full_qk(ctx, args) -> torch.Tensor:
    """full_qk_circuit(W_E, attn, head)."""
    W_E, head = args
    return learner_function(ctx, "qk_circuit")(W_E, attention(ctx), int(head))


def plain(value):
    """A case's argument as the learner's function takes it: a 0-d tensor as an int, any other as it is."""
    return int(value) if value.ndim == 0 else value


def with_ints(ctx, args) -> torch.Tensor:
    """function(*args), its 0-d tensors passed as ints: attention_to_sources."""
    return learner_function(ctx)(*(plain(arg) for arg in args))


def table(ctx, args) -> torch.Tensor:
    """skip_trigram_table(attention, full_ov, candidates, n_sources, k), packed as float64 rows."""
    answer = learner_function(ctx)(*(plain(arg) for arg in args))
    if not (isinstance(answer, tuple) and len(answer) == 4 and all(isinstance(t, torch.Tensor) for t in answer)):
        raise TypeError(f"skip_trigram_table must return a tuple of four tensors ({', '.join(TABLE_PARTS)})")
    sources, destinations, outputs, scores = answer
    n, k = len(sources), int(args[-1])
    for name, part, shape in zip(TABLE_PARTS[1:], answer[1:], [(n, k), (n, k), (n, k, k)], strict=True):
        if tuple(part.shape) != shape:
            raise ValueError(f"skip_trigram_table's {name} have shape {tuple(part.shape)}, expected {shape}")
    parts = [sources.reshape(n, 1), destinations, outputs, scores.reshape(n, k * k)]
    return torch.cat([part.to(torch.float64) for part in parts], dim=1)


def counts(ctx, args) -> torch.Tensor:
    """count_skip_trigrams(windows, triples, n_ctx) as float64."""
    answer = learner_function(ctx)(*(plain(arg) for arg in args))
    return torch.as_tensor(answer).to(torch.float64)


def bugs(ctx, args) -> torch.Tensor:
    """skip_trigram_bugs(counts, min_real) as float64, 1. for a bug."""
    answer = learner_function(ctx)(*(plain(arg) for arg in args))
    if not isinstance(answer, torch.Tensor) or answer.dtype != torch.bool:
        raise TypeError(f"skip_trigram_bugs must return a tensor of bools, not {describe(answer)}")
    return answer.to(torch.float64)


def describe(value) -> str:
    return f"a {value.dtype} tensor" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"
