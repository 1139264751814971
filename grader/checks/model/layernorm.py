"""LayerNorm: GPT-2's ln1, ln2 and ln_final on its own streams, and where eps decides (small or no variance)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Run, Target
from grader.checks.model._common import (
    LONG,
    ONE_POSITION,
    TOKEN_SETS,
    layers,
    magnitudes,
    massive_first_position,
    one_position,
)

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def layernorm_mistakes(x: Tensor, w: Tensor, b: Tensor, eps: float) -> dict[str, Tensor]:
    def layer_norm(unbiased=False, eps_inside=True, affine=True, dim=-1, eps=eps):
        mean, var = x.mean(dim=dim, keepdim=True), x.var(dim=dim, keepdim=True, unbiased=unbiased)
        normalized = (x - mean) / ((var + eps).sqrt() if eps_inside else var.sqrt() + eps)
        return normalized * w + b if affine else normalized

    return {
        "the variance divides by N-1: use the biased variance (unbiased=False)": layer_norm(unbiased=True),
        "eps is added outside the square root: use sqrt(var + eps)": layer_norm(eps_inside=False),
        "eps is not added to the variance: use sqrt(var + eps)": layer_norm(eps=0.0),
        "w and b are not applied: finish with normalized * w + b": layer_norm(affine=False),
        "mean and variance are taken over positions: reduce over the last axis, d_model": layer_norm(dim=-2),
    }


def _layernorm_case(ref: Reference, name: str, path: str, x: Tensor, hint: str = "", named_mistakes=True) -> Case:
    out, seen = ref.call_with_hooks(path, x, hooks=("hook_scale", "hook_normalized"))
    weights = ref.parameters_of(path)
    # The statistics too, so that a learner's correct mean and variance are matched, never blamed for std.
    mean = x.mean(dim=-1, keepdim=True)
    steps = {"mean": mean, "var": (x - mean).pow(2).mean(dim=-1, keepdim=True), "std": seen["hook_scale"]}
    steps |= {"normalized": seen["hook_normalized"], "output": out}
    mistakes = layernorm_mistakes(x, weights["w"], weights["b"], ref.layer_norm_eps) if named_mistakes else {}
    return Case(name, [x], out, weights=path + ".", hint=hint, steps=steps, mistakes=mistakes)


def layernorm_cases(ref: Reference) -> list[Case]:
    import torch

    first, last = layers(ref)
    sites = (
        (f"blocks.{first}.ln1", f"blocks.{first}.hook_resid_pre"),
        (f"blocks.{last}.ln2", f"blocks.{last}.hook_resid_mid"),
        ("ln_final", f"blocks.{last}.hook_resid_post"),
    )
    cases = [
        _layernorm_case(ref, f"{path}.{name}", path, ref.activations(name)[hook])
        for name in TOKEN_SETS
        for path, hook in sites
    ]
    # A mean far from 0 beside a spread of 1: a variance computed as E[x^2] - E[x]^2 cancels its digits away here.
    offset = 100.0 + torch.randn(2, 5, ref.d_model, generator=ref.generator)
    hint = (
        "it fails only where the mean is large beside the spread: a variance computed as E[x^2] - E[x]^2 loses its "
        "digits there; take the mean of (x - mean)^2 (x.var(unbiased=False))"
    )
    cases.append(_layernorm_case(ref, "large_mean", f"blocks.{first}.ln1", offset, hint))
    # Variance comparable to eps: where eps sits (inside or outside the square root) now shows.
    quiet = 3e-3 * torch.randn(2, 5, ref.d_model, generator=ref.generator) + torch.randn(
        2, 5, 1, generator=ref.generator
    )
    # The hint says what is special here, not a fix: code with eps in the right place can fail here too (a
    # variance computed as E[x^2] - E[x]^2 loses its digits); the mistake it matches names the fix.
    hint = "it differs only where the variance is comparable to eps"
    cases.append(_layernorm_case(ref, "small_variance", f"blocks.{first}.ln1", quiet, hint))
    # Constant vectors (0 among them): the variance is exactly 0, and only eps keeps the division finite.
    flat = torch.tensor([[0.0, 1.0, -3.0], [2.0, 0.0, 0.5]])[..., None].expand(2, 3, ref.d_model).contiguous()
    hint = "it fails only where a vector is constant: its variance is 0, and only eps keeps the division finite"
    cases.append(_layernorm_case(ref, "constant_vectors", f"blocks.{first}.ln1", flat, hint))
    # Hundreds of positions, the first with a residual norm beyond GPT-2's largest (its BOS position's).
    long, (norm, _) = ref.long_tokens(LONG), magnitudes(ref)
    massive = massive_first_position(ref.activations(long)[f"blocks.{last}.hook_resid_mid"], norm)
    path = f"blocks.{last}.ln2"
    cases.append(_layernorm_case(ref, f"{path}.{long}.massive_bos", path, massive, named_mistakes=False))
    one = ref.activations(one_position(ref))[f"blocks.{first}.hook_resid_pre"]
    return cases + [_layernorm_case(ref, f"blocks.{first}.ln1.one_position", f"blocks.{first}.ln1", one, ONE_POSITION)]


PAGE = "04-layernorm.md"
CHECK = Check(
    "layernorm",
    2,
    Target("normalization", "LayerNorm"),
    "LayerNorm",
    layernorm_cases,
    run=Run(capture=("locals",)),
)
