"""Attention: GPT-2's heads in the first and last block, a head whose scores all tie at 0, and scores beyond
GPT-2's largest."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from grader.checks import Case, Check, Run, Target
from grader.checks.model._common import magnitudes, sublayer_case, sublayer_cases, sublayer_input
from grader.checks.model.causal_mask import ZEROS_MASKED

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

SOFTMAX_OVERFLOWS = "the softmax overflows on large scores: subtract the max or use torch.softmax"
HEADS_MERGED_WRONG = (
    "the heads are merged in the wrong order: merge z as (n_heads d_head), the order of W_O's rows, "
    "not (d_head n_heads)"
)
ATTENTION_STEPS = {
    "q": "hook_q",
    "k": "hook_k",
    "v": "hook_v",
    "attn_scores": "hook_attn_scores",
    "attn_pattern": "hook_pattern",
    "z": "hook_z",
}


def exp_over_sum(scores: Tensor, dim: int = -1) -> Tensor:
    """The softmax written by hand without subtracting the max: exp() is inf past 88.7 in float32."""
    exps = scores.exp()
    return exps / exps.sum(dim, keepdim=True)


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    W_O: Tensor,
    b_O: Tensor,
    scale: float,
    hidden: str = "future",
    filled_after_softmax: float | None = None,
    softmax_dim: int = -1,
    **written,
) -> Tensor:
    """Attention from q, k and v, with the switches the classic mistakes flip (`filled_after_softmax`: the
    mask applied to the pattern, with that value, instead of to the scores); `written` flips how the
    mask and the softmax are written: mask_zeros (a mask from the values), by_hand (exp / sum), heads_merged
    ("d_head n_heads": z flattened in that order before W_O, flattened as (n_heads d_head))."""
    import einops
    import torch

    scores = (
        einops.einsum(q, k, "batch posn_Q n_heads d_head, batch posn_K n_heads d_head -> batch n_heads posn_Q posn_K")
        / scale
    )
    ones = torch.ones(scores.shape[-2:], dtype=torch.bool)
    masked = {"future": torch.triu(ones, 1), "future and diagonal": torch.triu(ones, 0), "past": torch.tril(ones, -1)}[
        hidden
    ]
    if written.get("mask_zeros"):
        masked = masked | (scores == 0)  # e.g. where(triu(x, 1) != x, x, IGNORE)
    softmax = exp_over_sum if written.get("by_hand") else torch.softmax
    if filled_after_softmax is not None:
        pattern = softmax(scores, -1).masked_fill(masked, filled_after_softmax)
    else:
        pattern = softmax(scores.masked_fill(masked, float("-inf")), softmax_dim)
    mix = "batch posn_K n_heads d_head, batch n_heads posn_Q posn_K -> batch posn_Q n_heads d_head"
    z = einops.einsum(v, pattern, mix)
    if merged := written.get("heads_merged"):
        flat = einops.rearrange(z, f"batch posn n_heads d_head -> batch posn ({merged})")
        return flat @ W_O.reshape(-1, W_O.shape[-1]) + b_O
    return einops.einsum(z, W_O, "batch posn_Q n_heads d_head, n_heads d_head d_model -> batch posn_Q d_model") + b_O


def attention_mistakes(seen: dict[str, Tensor], weights: dict[str, Tensor]) -> dict[str, Tensor]:
    q, k, v = seen["hook_q"], seen["hook_k"], seen["hook_v"]
    W_O, b_O = weights["W_O"], weights["b_O"]
    d_head = q.shape[-1]
    sqrt = math.sqrt(d_head)
    return {
        "the scores are not scaled: divide q.k by sqrt(d_head)": attend(q, k, v, W_O, b_O, 1.0),
        "the scores are divided by d_head: divide by sqrt(d_head)": attend(q, k, v, W_O, b_O, float(d_head)),
        "the mask is applied after the softmax: mask the scores, then softmax": attend(
            q, k, v, W_O, b_O, sqrt, filled_after_softmax=float("-inf")
        ),
        # The pattern's future weights zeroed (tril, or * mask): each row then sums to less than 1.
        "the mask is applied after the softmax, so the weights left do not sum to 1: mask the scores, then softmax": (
            attend(q, k, v, W_O, b_O, sqrt, filled_after_softmax=0.0)
        ),
        "the mask hides the diagonal too: a position may attend to itself (triu with diagonal=1)": attend(
            q, k, v, W_O, b_O, sqrt, hidden="future and diagonal"
        ),
        "the mask hides the past instead of the future: mask keys after the query (triu, not tril)": attend(
            q, k, v, W_O, b_O, sqrt, hidden="past"
        ),
        "the softmax runs over the query axis: softmax over the last axis (keys)": attend(
            q, k, v, W_O, b_O, sqrt, softmax_dim=-2
        ),
        "b_Q is not added to q": attend(q - weights["b_Q"], k, v, W_O, b_O, sqrt),
        "b_V is not added to v": attend(q, k, v - weights["b_V"], W_O, b_O, sqrt),
        "b_O is not added to the output": attend(q, k, v, W_O, b_O, sqrt) - b_O,
        "b_O is added once per head: sum the heads' W_O outputs, then add b_O once": (
            attend(q, k, v, W_O, b_O, sqrt) + (q.shape[-2] - 1) * b_O
        ),
        HEADS_MERGED_WRONG: attend(q, k, v, W_O, b_O, sqrt, heads_merged="d_head n_heads"),
    }


def written_mistake(hint: str):
    """(seen, weights) -> {hint: output} for a mask or a softmax written wrong, as a sublayer case's mistakes."""

    def mistakes(seen: dict[str, Tensor], weights: dict[str, Tensor]) -> dict[str, Tensor]:
        switch = {ZEROS_MASKED: "mask_zeros", SOFTMAX_OVERFLOWS: "by_hand"}[hint]
        q, k, v = seen["hook_q"], seen["hook_k"], seen["hook_v"]
        return {hint: attend(q, k, v, weights["W_O"], weights["b_O"], math.sqrt(q.shape[-1]), **{switch: True})}

    return mistakes


def attention_cases(ref: Reference) -> list[Case]:
    cases = sublayer_cases(ref, "attn", "ln1", "hook_resid_pre", ATTENTION_STEPS, attention_mistakes)
    return [with_unscaled_scores(case) for case in [*cases, _silent_head_case(ref), _large_scores_case(ref)]]


def with_unscaled_scores(case: Case) -> Case:
    """The case with q.k before its scaling as a step of its own, before the scores: code that names it (as the
    solution's attn_scores) and scales it inline later is right there, and "where" never blames that line."""
    steps = {}
    for label, value in case.steps.items():
        if label == "attn_scores":
            steps["unscaled_scores"] = value * math.sqrt(case.steps["q"].shape[-1])
        steps[label] = value
    return replace(case, steps=steps)


def _silent_head_case(ref: Reference) -> Case:
    """Head 0 with W_Q = b_Q = 0: its scores are all exactly 0 (a tie), so it attends uniformly to the past.
    A mask built from the values hides every one of them and leaves rows with nothing to attend to (NaN)."""
    import torch

    weights = ref.parameters_of("blocks.0.attn")
    silent = {name: weights[name].clone().index_fill_(0, torch.tensor([0]), 0.0) for name in ("W_Q", "b_Q")}
    x = sublayer_input(ref, "prompt", 0, "ln1", "hook_resid_pre")
    name, by_value = "blocks.0.silent_head", written_mistake(ZEROS_MASKED)
    return sublayer_case(ref, name, "blocks.0.attn", x, ATTENTION_STEPS, by_value, silent, hint=ZEROS_MASKED)


def _large_scores_case(ref: Reference) -> Case:
    """The head with the largest score, its W_Q and b_Q scaled so that score is beyond GPT-2's largest: exp()
    overflows float32 past 88.7. One head, as in GPT-2, whose largest scores sit far above the others'."""
    import torch

    last = ref.n_layers - 1
    path, x = f"blocks.{last}.attn", sublayer_input(ref, "random", last, "ln1", "hook_resid_pre")
    scores = ref.call_with_hooks(path, x, hooks=("hook_attn_scores",))[1]["hook_attn_scores"]
    largest = scores.nan_to_num(neginf=0.0).abs().amax(dim=(0, 2, 3))  # per head
    head = int(largest.argmax())
    factor = torch.ones(ref.n_heads).index_fill_(0, torch.tensor([head]), magnitudes(ref)[1] / float(largest[head]))
    weights = ref.parameters_of(path)
    # q, and so every score of that head, is scaled by exactly `factor`.
    scaled = {"W_Q": factor[:, None, None] * weights["W_Q"], "b_Q": factor[:, None] * weights["b_Q"]}
    name, by_hand = f"blocks.{last}.large_scores", written_mistake(SOFTMAX_OVERFLOWS)
    return sublayer_case(ref, name, path, x, ATTENTION_STEPS, by_hand, scaled, hint=SOFTMAX_OVERFLOWS)


PAGE = "05-attention.md"
CHECK = Check(
    "attention",
    3,
    Target("attention", "Attention"),
    "multi-head attention",
    attention_cases,
    run=Run(capture=("locals",)),
    uses=("attention.causal_mask",),
)
