"""Transformer: the whole model, the one check that integrates every module, from tokens to logits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Run, Target, Tolerance
from grader.checks.model._common import ONE_POSITION, TOKEN_SETS, one_position

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference


def transformer_mistakes(ref: Reference, acts: dict[str, Tensor]) -> dict[str, Tensor]:
    def head(resid):
        return ref.call("unembed", ref.call("ln_final", resid))

    def blocks(resid, layers):
        for layer in layers:
            resid = ref.call(f"blocks.{layer}", resid)
        return resid

    last = ref.n_layers - 1
    return {
        "ln_final is not applied before the unembedding": ref.call("unembed", acts[f"blocks.{last}.hook_resid_post"]),
        "the positional embedding is not added to the token embedding": head(
            blocks(acts["hook_embed"], range(ref.n_layers))
        ),
        "only one block is applied: loop over every block in self.blocks": head(
            ref.call("blocks.0", acts["blocks.0.hook_resid_pre"])
        ),
    }


def _transformer_case(ref: Reference, name: str, tokens: str, hint: str = "") -> Case:
    acts, last = ref.activations(tokens), ref.n_layers - 1
    # resid_pre, the blocks' input: a block that differs on it differs inside, where these steps do not reach.
    steps = {
        "embed": acts["hook_embed"],
        "pos_embed": acts["hook_pos_embed"],
        "resid_pre": acts["blocks.0.hook_resid_pre"],
    }
    steps |= {f"blocks.{layer}": acts[f"blocks.{layer}.hook_resid_post"] for layer in range(ref.n_layers)}
    steps |= {
        "ln_final": ref.call("ln_final", acts[f"blocks.{last}.hook_resid_post"]),
        "unembed": acts["unembed.hook_out"],
    }
    out, mistakes = acts["unembed.hook_out"], transformer_mistakes(ref, acts)
    return Case(name, [ref.tokens[tokens]], out, weights="", hint=hint, steps=steps, mistakes=mistakes)


def transformer_cases(ref: Reference) -> list[Case]:
    cases = [_transformer_case(ref, name, name) for name in TOKEN_SETS]
    return cases + [_transformer_case(ref, "one_position", one_position(ref), ONE_POSITION)]


def transformer_notes(outcome: dict) -> list[str]:
    """Parameter counts per part (the unembedding apart from the embedding, which GPT-2 ties) and whether the
    learner's model predicts the same tokens as the reference (GPT-2, or the random model offline)."""
    notes = []
    counts, expected = outcome.get("param_counts") or {}, outcome["reference_param_counts"]
    if counts:
        rows = [
            f"{part} {counts.get(part, 0):,}" + ("" if counts.get(part, 0) == n else f" (GPT-2: {n:,})")
            for part, n in expected.items()
        ]
        tied = counts.get("total", 0) - counts.get("unembed", 0)
        notes.append(f"parameters: {', '.join(rows)} (unembed counted apart; GPT-2 ties it to embed: {tied:,} once)")
    argmax = [
        bool((out.argmax(-1) == outcome["expected"][case].argmax(-1)).all())
        for case, out in outcome["outputs"].items()
        if out.shape == outcome["expected"][case].shape
    ]
    if argmax:
        notes.append(
            f"same next-token argmax as {outcome['reference']} everywhere: " + ("yes" if all(argmax) else "no")
        )
    return notes


PAGE = "09-transformer.md"
CHECK = Check(
    "transformer",
    3,
    Target("transformer", "Transformer"),
    "the whole model",
    transformer_cases,
    tolerance=Tolerance(atol=1e-3, rtol=1e-4),
    run=Run(watch_inputs=True, capture=("modules",)),
    notes=transformer_notes,
    uses=("embed", "pos_embed", "layernorm", "block", "unembed"),
)
