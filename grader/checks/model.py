"""Part 1: the model. Each module is fed GPT-2's own input activation and compared with its output.

The case functions run only when the reference cache is built, so torch is imported inside them:
grading itself compares NumPy arrays and never imports torch in the grader's process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..compare import causal_mask
from . import Case, Check, Target, Tolerance

if TYPE_CHECKING:
    from ..reference import Reference

TOKEN_SETS = ("prompt", "random")


def _layers(ref: Reference) -> tuple[int, int]:
    """The first and the last block: the last one sees GPT-2's largest activations."""
    return 0, ref.n_layers - 1


def embed_cases(ref: Reference) -> list[Case]:
    return [Case(name, [ref.tokens[name]], ref.activations(name)["hook_embed"], weights="embed.") for name in TOKEN_SETS]


def pos_embed_cases(ref: Reference) -> list[Case]:
    import torch

    # Token ids below n_ctx first: looking positions up by token id then gives wrong values
    # rather than an index error, so the mistake is reported as a difference.
    small_ids = torch.randint(0, ref.n_ctx, (2, 9), generator=ref.generator)
    hint = "the position table is indexed by position (0, 1, 2, ...), not by token id"
    cases = [Case("small_ids", [small_ids], ref.call("pos_embed", small_ids), weights="pos_embed.", hint=hint)]
    return cases + [Case(name, [ref.tokens[name]], ref.activations(name)["hook_pos_embed"], weights="pos_embed.") for name in TOKEN_SETS]


def layernorm_cases(ref: Reference) -> list[Case]:
    import torch

    first, last = _layers(ref)
    cases = []
    for name in TOKEN_SETS:
        acts = ref.activations(name)
        for path, hook in ((f"blocks.{first}.ln1", f"blocks.{first}.hook_resid_pre"), (f"blocks.{last}.ln2", f"blocks.{last}.hook_resid_mid"), ("ln_final", f"blocks.{last}.hook_resid_post")):
            cases.append(Case(f"{path}.{name}", [acts[hook]], ref.call(path, acts[hook]), weights=path + "."))
    # Variance comparable to eps: where eps sits (inside or outside the square root) now shows.
    quiet = 3e-3 * torch.randn(2, 5, ref.d_model, generator=ref.generator) + torch.randn(2, 5, 1, generator=ref.generator)
    hint = "it differs only where the variance is comparable to eps: add eps to the variance inside the square root"
    cases.append(Case("small_variance", [quiet], ref.call(f"blocks.{first}.ln1", quiet), weights=f"blocks.{first}.ln1.", hint=hint))
    return cases


def causal_mask_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    for posn in (7, 12):
        scores = torch.randn(2, ref.n_heads, posn, posn, generator=ref.generator)
        future = torch.triu(torch.ones(posn, posn, dtype=torch.bool), diagonal=1)
        cases.append(Case(f"scores_{posn}x{posn}", [scores], scores.masked_fill(future, float("-inf")), weights="blocks.0.attn."))
    return cases


def _sublayer_cases(ref: Reference, sublayer: str, norm: str, resid_hook: str, out_hook: str) -> list[Case]:
    cases = []
    for layer in _layers(ref):
        for name in TOKEN_SETS:
            acts = ref.activations(name)
            normalized = ref.call(f"blocks.{layer}.{norm}", acts[f"blocks.{layer}.{resid_hook}"])
            cases.append(Case(f"blocks.{layer}.{name}", [normalized], acts[f"blocks.{layer}.{out_hook}"], weights=f"blocks.{layer}.{sublayer}."))
    return cases


def attention_cases(ref: Reference) -> list[Case]:
    return _sublayer_cases(ref, "attn", "ln1", "hook_resid_pre", "hook_attn_out")


def mlp_cases(ref: Reference) -> list[Case]:
    return _sublayer_cases(ref, "mlp", "ln2", "hook_resid_mid", "hook_mlp_out")


def gelu_cases(ref: Reference) -> list[Case]:
    import torch

    grid = torch.linspace(-8.0, 8.0, 4001)
    pre = ref.activations("prompt")["blocks.0.mlp.hook_pre"]
    return [Case("grid", [grid], ref.gelu_new(grid)), Case("blocks.0.prompt", [pre], ref.activations("prompt")["blocks.0.mlp.hook_post"])]


def block_cases(ref: Reference) -> list[Case]:
    return [
        Case(f"blocks.{layer}.{name}", [ref.activations(name)[f"blocks.{layer}.hook_resid_pre"]], ref.activations(name)[f"blocks.{layer}.hook_resid_post"], weights=f"blocks.{layer}.")
        for layer in _layers(ref)
        for name in TOKEN_SETS
    ]


def unembed_cases(ref: Reference) -> list[Case]:
    import torch

    last = ref.n_layers - 1
    cases = []
    for name in TOKEN_SETS:
        acts = ref.activations(name)
        normalized = ref.call("ln_final", acts[f"blocks.{last}.hook_resid_post"])
        cases.append(Case(name, [normalized], acts["unembed.hook_out"], weights="unembed."))
    # GPT-2's b_U is all zeros, so a forgotten bias would pass on the real weights alone.
    b_U = 0.5 * torch.randn(ref.d_vocab, generator=ref.generator)
    cases.append(Case("perturbed_b_U", [normalized], ref.call("unembed", normalized, overrides={"b_U": b_U}), weights="unembed.", overrides={"b_U": b_U}, hint="it differs only when b_U is not zero: add b_U"))
    return cases


def transformer_cases(ref: Reference) -> list[Case]:
    return [Case(name, [ref.tokens[name]], ref.activations(name)["unembed.hook_out"], weights="") for name in TOKEN_SETS]


def transformer_notes(outcome: dict) -> list[str]:
    """Parameter counts per part and whether the learner's model predicts the same tokens."""
    notes = []
    counts, expected = outcome.get("param_counts") or {}, outcome["reference_param_counts"]
    if counts:
        rows = [f"{part} {counts.get(part, 0):,}" + ("" if counts.get(part, 0) == n else f" (GPT-2: {n:,})") for part, n in expected.items()]
        notes.append("parameters: " + ", ".join(rows))
    argmax = [bool((out.argmax(-1) == outcome["expected"][case].argmax(-1)).all()) for case, out in outcome["outputs"].items() if out.shape == outcome["expected"][case].shape]
    if argmax:
        notes.append("same next-token argmax as GPT-2 everywhere: " + ("yes" if all(argmax) else "no"))
    return notes


CHECKS = (
    Check("embed", "model", 1, Target("embedding", "Embed"), "token embedding lookup", embed_cases),
    Check("pos_embed", "model", 1, Target("embedding", "PosEmbed"), "positional embedding", pos_embed_cases),
    Check("layernorm", "model", 2, Target("normalization", "LayerNorm"), "LayerNorm", layernorm_cases),
    Check("attention.causal_mask", "model", 1, Target("attention", "Attention", "apply_causal_mask"), "causal mask", causal_mask_cases, comparison=causal_mask),
    Check("attention", "model", 3, Target("attention", "Attention"), "multi-head attention", attention_cases),
    Check("gelu_new", "model", 1, Target("mlp", "gelu_new", None), "GPT-2's GELU", gelu_cases, tolerance=Tolerance(atol=1e-5, rtol=1e-5)),
    Check("mlp", "model", 2, Target("mlp", "MLP"), "MLP", mlp_cases),
    Check("block", "model", 2, Target("block", "TransformerBlock"), "transformer block", block_cases, watch_inputs=True),
    Check("unembed", "model", 1, Target("unembedding", "Unembed"), "unembedding", unembed_cases),
    Check("transformer", "model", 3, Target("transformer", "Transformer"), "the whole model", transformer_cases, tolerance=Tolerance(atol=1e-3, rtol=1e-4), watch_inputs=True, notes=transformer_notes),
)
