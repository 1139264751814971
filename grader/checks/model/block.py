"""TransformerBlock: its wiring alone, with GPT-2's sublayer outputs replayed into the learner's sublayers."""

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
from grader.shared.wire import replay_names

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def block_mistakes(ref: Reference, layer: int, resid_pre: Tensor) -> dict[str, Tensor]:
    def sub(name, x):
        return ref.call(f"blocks.{layer}.{name}", x)

    no_attn_residual = sub("attn", sub("ln1", resid_pre))
    mid = resid_pre + sub("attn", sub("ln1", resid_pre))
    post_ln_mid = sub("ln1", resid_pre + sub("attn", resid_pre))
    return {
        "the attention residual is missing: resid_mid = resid_pre + attn(ln1(resid_pre))": no_attn_residual
        + sub("mlp", sub("ln2", no_attn_residual)),
        "the MLP residual is missing: resid_post = resid_mid + mlp(ln2(resid_mid))": sub("mlp", sub("ln2", mid)),
        "ln1 is used before the MLP too: the MLP reads ln2(resid_mid)": mid + sub("mlp", sub("ln1", mid)),
        "the MLP reads ln2(resid_pre), the block's input: it reads ln2(resid_mid), the stream after attention": mid
        + sub("mlp", sub("ln2", resid_pre)),
        "LayerNorm comes after the residual add: normalise what each sublayer reads, not the stream": sub(
            "ln2", post_ln_mid + sub("mlp", post_ln_mid)
        ),
    }


def _block_case(
    ref: Reference, name: str, layer: int, resid_pre: Tensor, named_mistakes: bool = True, hint: str = ""
) -> Case:
    """GPT-2's block at `layer` on `resid_pre`, with GPT-2's sublayer outputs to replay into the learner's."""

    def sub(part, x):
        return ref.call(f"blocks.{layer}.{part}", x)

    steps = {"ln1": sub("ln1", resid_pre)}
    steps["attn"] = sub("attn", steps["ln1"])
    steps["resid_mid"] = resid_pre + steps["attn"]
    steps["ln2"] = sub("ln2", steps["resid_mid"])
    steps["mlp"] = sub("mlp", steps["ln2"])
    steps["resid_post"] = steps["resid_mid"] + steps["mlp"]
    mistakes = block_mistakes(ref, layer, resid_pre) if named_mistakes else {}
    out = ref.call(f"blocks.{layer}", resid_pre)
    replay = replay_extras(
        {"ln1": (resid_pre, steps["ln1"]), "attn": (steps["ln1"], steps["attn"])}
        | {"ln2": (steps["resid_mid"], steps["ln2"]), "mlp": (steps["ln2"], steps["mlp"])}
    )
    return Case(
        name, [resid_pre], out, weights=f"blocks.{layer}.", hint=hint, extra=replay, steps=steps, mistakes=mistakes
    )


def replay_extras(sublayers: dict[str, tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
    """What each sublayer gets from GPT-2's block and returns, for the learner's block to be given the same:
    the block check then grades the block's own wiring (see `grader.learner.drivers.replay`). The block's output is
    not among them."""
    return {
        name: value for path, pair in sublayers.items() for name, value in zip(replay_names(path), pair, strict=True)
    }


def block_cases(ref: Reference) -> list[Case]:
    def resid_pre(name, layer):
        return ref.activations(name)[f"blocks.{layer}.hook_resid_pre"]

    sites = [(layer, name) for layer in layers(ref) for name in TOKEN_SETS]
    cases = [_block_case(ref, f"blocks.{layer}.{name}", layer, resid_pre(name, layer)) for layer, name in sites]
    # Hundreds of positions, batch 1, the first with a residual norm beyond GPT-2's largest (its BOS position's).
    last, long, (norm, _) = ref.n_layers - 1, ref.long_tokens(LONG), magnitudes(ref)
    massive = massive_first_position(resid_pre(long, last), norm)
    cases.append(_block_case(ref, f"blocks.{last}.{long}.massive_bos", last, massive, named_mistakes=False))
    return cases + [_block_case(ref, "blocks.0.one_position", 0, resid_pre(one_position(ref), 0), hint=ONE_POSITION)]


PAGE = "07-block.md"
CHECK = Check(
    "block",
    2,
    Target("block", "TransformerBlock"),
    "transformer block",
    block_cases,
    run=Run(watch_inputs=True, capture=("locals", "modules")),
    uses=("layernorm", "attention", "mlp"),
)
