"""What more than one model check uses: the token sets, the stress magnitudes, the one-position case's token set
and hint, the offset driver's arguments, and the cases of the two sublayers (attention and the MLP)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

TOKEN_SETS = ("prompt", "random")
LONG = 256  # positions of the long cases (batch 1); PosEmbed also gets the whole context

# GPT-2 small's largest magnitudes, which the random reference lacks: the first position's residual norm is in
# the thousands after the first blocks, and the largest attention scores reach the hundreds. The stress cases
# go BEYOND times past the larger of these and of what the reference itself produces.
GPT2_FIRST_POSITION_NORM, GPT2_LARGEST_SCORE, BEYOND = 3000.0, 100.0, 2.0

OFFSET_DRIVER = (
    "grader.learner.drivers.offset:with_offset"  # targets taking past_kv_pos_offset as their second argument
)
ONE_POSITION = (
    "it fails only on a one-position sequence (batch 1, as in the first sampling step from a bare prompt): "
    "nothing may assume more than one position or sequence (no squeeze)"
)


def layers(ref: Reference) -> tuple[int, int]:
    """The first and the last block: the last one sees GPT-2's largest activations."""
    return 0, ref.n_layers - 1


def one_position(ref: Reference) -> str:
    """The token set of BOS alone, (1, 1): the first step of sampling from a bare prompt."""
    return ref.long_tokens(1)


def generator(ref: Reference, salt: int):
    """A generator of its own per stress input, so adding one leaves every other random input as it was."""
    import torch

    return torch.Generator().manual_seed(1_000_003 * ref.seed + salt)


def magnitudes(ref: Reference) -> tuple[float, float]:
    """(first-position residual norm, largest attention score) for the stress cases: beyond both GPT-2's and
    the reference's own."""
    token_sets = (*TOKEN_SETS, ref.long_tokens(LONG))
    norm = max(largest_first_position_norm(ref, token_sets), GPT2_FIRST_POSITION_NORM)
    return BEYOND * norm, BEYOND * max(largest_attention_score(ref, token_sets), GPT2_LARGEST_SCORE)


def largest_first_position_norm(ref: Reference, token_sets: tuple[str, ...]) -> float:
    """The largest norm of the first position's residual stream, over every block and these token sets."""
    hooks = [f"blocks.{layer}.hook_resid_{site}" for layer in range(ref.n_layers) for site in ("pre", "mid", "post")]
    return max(float(ref.activations(name)[hook][:, 0].norm(dim=-1).max()) for name in token_sets for hook in hooks)


def largest_attention_score(ref: Reference, token_sets: tuple[str, ...]) -> float:
    """The largest |score| of a visible key (scaled, before the softmax), over every head and these token sets."""
    hooks = [f"blocks.{layer}.attn.hook_attn_scores" for layer in range(ref.n_layers)]
    scores = (ref.activations(name)[hook] for name in token_sets for hook in hooks)
    return max(float(s[s.isfinite()].abs().max()) for s in scores)


def massive_first_position(resid: Tensor, norm: float) -> Tensor:
    """The stream with its first position scaled to `norm`, as GPT-2's BOS residual is."""
    resid = resid.clone()
    resid[:, 0] *= norm / resid[:, 0].norm(dim=-1, keepdim=True)
    return resid


def offset_args(first: Tensor, past_kv_pos_offset: int) -> list[Tensor]:
    """A case's arguments for the offset driver (grader.learner.drivers.offset): the offset, when there is one, as a 0-d
    tensor after the first."""
    import torch

    return [first, torch.tensor(past_kv_pos_offset)] if past_kv_pos_offset else [first]


# --- the sublayers: attention and the MLP --------------------------------------------------------


def sublayer_input(ref: Reference, tokens: str, layer: int, norm: str, resid_hook: str) -> Tensor:
    """What the sublayer reads in GPT-2: its LayerNorm applied to the stream there."""
    return ref.call(f"blocks.{layer}.{norm}", ref.activations(tokens)[f"blocks.{layer}.{resid_hook}"])


def sublayer_case(
    ref: Reference, name: str, path: str, x: Tensor, step_hooks: dict[str, str], mistakes=None, overrides=None, hint=""
) -> Case:
    """One call of attention or the MLP at `path`, its steps, and what the `mistakes` (seen, weights) output."""
    overrides = overrides or {}
    out, seen = ref.call_with_hooks(path, x, hooks=tuple(step_hooks.values()), overrides=overrides)
    steps = {label: seen[hook] for label, hook in step_hooks.items()} | {"output": out}
    named = mistakes(seen, ref.parameters_of(path) | overrides) if mistakes else {}
    return Case(name, [x], out, weights=path + ".", overrides=overrides, hint=hint, steps=steps, mistakes=named)


def sublayer_cases(
    ref: Reference, sublayer: str, norm: str, resid_hook: str, step_hooks: dict[str, str], mistakes
) -> list[Case]:
    """Attention or the MLP of the first and last block, fed its LayerNorm's output on GPT-2's stream, then
    a long sequence (batch 1) in the last block and BOS alone in the first."""
    cases = []
    for layer in layers(ref):
        for name in TOKEN_SETS:
            x = sublayer_input(ref, name, layer, norm, resid_hook)
            path = f"blocks.{layer}.{sublayer}"
            cases.append(sublayer_case(ref, f"blocks.{layer}.{name}", path, x, step_hooks, mistakes))
    last, long = ref.n_layers - 1, ref.long_tokens(LONG)
    x = sublayer_input(ref, long, last, norm, resid_hook)
    cases.append(sublayer_case(ref, f"blocks.{last}.{long}", f"blocks.{last}.{sublayer}", x, step_hooks))
    one = sublayer_input(ref, one_position(ref), 0, norm, resid_hook)
    path = f"blocks.0.{sublayer}"
    return cases + [sublayer_case(ref, "blocks.0.one_position", path, one, step_hooks, hint=ONE_POSITION)]
