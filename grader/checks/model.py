"""Part 1: the model. Each module is fed GPT-2's own input activation and compared with its output.

Each case also carries GPT-2's intermediates (`steps`, to find where a learner's computation
first leaves GPT-2's) and what the classic mistakes output (`mistakes`, to name the one a learner
most likely made). The case functions run only when the reference cache is built, so torch is
imported inside them: grading itself compares NumPy arrays and never imports torch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..compare import causal_mask
from . import Case, Check, Target, Tolerance

if TYPE_CHECKING:
    from torch import Tensor

    from ..reference import Reference

TOKEN_SETS = ("prompt", "random")
ATTENTION_STEPS = {"q": "hook_q", "k": "hook_k", "v": "hook_v", "attn_scores": "hook_attn_scores", "attn_pattern": "hook_pattern", "z": "hook_z"}


def _layers(ref: Reference) -> tuple[int, int]:
    """The first and the last block: the last one sees GPT-2's largest activations."""
    return 0, ref.n_layers - 1


# --- what the classic mistakes compute, from the reference's own weights and intermediates ------


def layernorm_mistakes(x: Tensor, w: Tensor, b: Tensor, eps: float) -> dict[str, Tensor]:
    def layer_norm(unbiased=False, eps_inside=True, affine=True, dim=-1):
        mean, var = x.mean(dim=dim, keepdim=True), x.var(dim=dim, keepdim=True, unbiased=unbiased)
        normalized = (x - mean) / ((var + eps).sqrt() if eps_inside else var.sqrt() + eps)
        return normalized * w + b if affine else normalized

    return {
        "the variance divides by N-1: use the biased variance (unbiased=False)": layer_norm(unbiased=True),
        "eps is added outside the square root: use sqrt(var + eps)": layer_norm(eps_inside=False),
        "w and b are not applied: finish with normalized * w + b": layer_norm(affine=False),
        "mean and variance are taken over positions: reduce over the last axis, d_model": layer_norm(dim=-2),
    }


def attend(q: Tensor, k: Tensor, v: Tensor, W_O: Tensor, b_O: Tensor, scale: float, hidden: str = "future", mask_after_softmax: bool = False, softmax_dim: int = -1) -> Tensor:
    """Attention from q, k and v, with the switches the classic mistakes flip."""
    import einops
    import torch

    scores = einops.einsum(q, k, "batch posn_Q n_heads d_head, batch posn_K n_heads d_head -> batch n_heads posn_Q posn_K") / scale
    ones = torch.ones(scores.shape[-2:], dtype=torch.bool)
    masked = {"future": torch.triu(ones, 1), "future and diagonal": torch.triu(ones, 0), "past": torch.tril(ones, -1)}[hidden]
    if mask_after_softmax:
        pattern = scores.softmax(-1).masked_fill(masked, float("-inf"))
    else:
        pattern = scores.masked_fill(masked, float("-inf")).softmax(softmax_dim)
    z = einops.einsum(v, pattern, "batch posn_K n_heads d_head, batch n_heads posn_Q posn_K -> batch posn_Q n_heads d_head")
    return einops.einsum(z, W_O, "batch posn_Q n_heads d_head, n_heads d_head d_model -> batch posn_Q d_model") + b_O


def attention_mistakes(seen: dict[str, Tensor], weights: dict[str, Tensor]) -> dict[str, Tensor]:
    q, k, v = seen["hook_q"], seen["hook_k"], seen["hook_v"]
    W_O, b_O = weights["W_O"], weights["b_O"]
    d_head = q.shape[-1]
    sqrt = math.sqrt(d_head)
    return {
        "the scores are not scaled: divide q.k by sqrt(d_head)": attend(q, k, v, W_O, b_O, 1.0),
        "the scores are divided by d_head: divide by sqrt(d_head)": attend(q, k, v, W_O, b_O, float(d_head)),
        "the mask is applied after the softmax: mask the scores, then softmax": attend(q, k, v, W_O, b_O, sqrt, mask_after_softmax=True),
        "the mask hides the diagonal too: a position may attend to itself (triu with diagonal=1)": attend(q, k, v, W_O, b_O, sqrt, hidden="future and diagonal"),
        "the mask hides the past instead of the future: mask keys after the query (triu, not tril)": attend(q, k, v, W_O, b_O, sqrt, hidden="past"),
        "the softmax runs over the query axis: softmax over the last axis (keys)": attend(q, k, v, W_O, b_O, sqrt, softmax_dim=-2),
        "b_Q is not added to q": attend(q - weights["b_Q"], k, v, W_O, b_O, sqrt),
        "b_V is not added to v": attend(q, k, v - weights["b_V"], W_O, b_O, sqrt),
        "b_O is not added to the output": attend(q, k, v, W_O, b_O, sqrt) - b_O,
    }


def gelu_mistakes(x: Tensor) -> dict[str, Tensor]:
    import torch

    return {
        "this is ReLU: GPT-2 uses gelu_new, the tanh approximation of GELU": torch.relu(x),
        "this is the exact (erf) GELU: GPT-2 uses the tanh approximation": torch.nn.functional.gelu(x),
        "the constant inside tanh is 2/pi: it is sqrt(2/pi)": 0.5 * x * (1 + torch.tanh(2 / math.pi * (x + 0.044715 * x**3))),
    }


def mlp_mistakes(pre: Tensor, weights: dict[str, Tensor], gelu_new) -> dict[str, Tensor]:
    def project(post):
        return post @ weights["W_out"] + weights["b_out"]

    activations = {hint.replace("this is", "the activation is"): project(post) for hint, post in gelu_mistakes(pre).items()}
    return activations | {"b_in is not added before the activation": project(gelu_new(pre - weights["b_in"])), "b_out is not added to the output": project(gelu_new(pre)) - weights["b_out"]}


def block_mistakes(ref: Reference, layer: int, resid_pre: Tensor) -> dict[str, Tensor]:
    def sub(name, x):
        return ref.call(f"blocks.{layer}.{name}", x)

    no_attn_residual = sub("attn", sub("ln1", resid_pre))
    mid = resid_pre + sub("attn", sub("ln1", resid_pre))
    post_ln_mid = sub("ln1", resid_pre + sub("attn", resid_pre))
    return {
        "the attention residual is missing: resid_mid = resid_pre + attn(ln1(resid_pre))": no_attn_residual + sub("mlp", sub("ln2", no_attn_residual)),
        "the MLP residual is missing: resid_post = resid_mid + mlp(ln2(resid_mid))": sub("mlp", sub("ln2", mid)),
        "ln1 is used before the MLP too: the MLP reads ln2(resid_mid)": mid + sub("mlp", sub("ln1", mid)),
        "LayerNorm comes after the residual add: normalise what each sublayer reads, not the stream": sub("ln2", post_ln_mid + sub("mlp", post_ln_mid)),
    }


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
        "the positional embedding is not added to the token embedding": head(blocks(acts["hook_embed"], range(ref.n_layers))),
        "only one block is applied: loop over every block in self.blocks": head(ref.call("blocks.0", acts["blocks.0.hook_resid_pre"])),
    }


# --- the cases ----------------------------------------------------------------------------------


def embed_cases(ref: Reference) -> list[Case]:
    return [Case(name, [ref.tokens[name]], ref.activations(name)["hook_embed"], weights="embed.") for name in TOKEN_SETS]


def pos_embed_cases(ref: Reference) -> list[Case]:
    import torch

    # Token ids below n_ctx first: looking positions up by token id then gives wrong values
    # rather than an index error, so the mistake is reported as a difference.
    small_ids = torch.randint(0, ref.n_ctx, (2, 9), generator=ref.generator)
    by_id = {"positions are looked up by token id: index W_pos by position (0, 1, 2, ...)": ref.parameters_of("pos_embed")["W_pos"][small_ids]}
    cases = [Case("small_ids", [small_ids], ref.call("pos_embed", small_ids), weights="pos_embed.", mistakes=by_id)]
    return cases + [Case(name, [ref.tokens[name]], ref.activations(name)["hook_pos_embed"], weights="pos_embed.") for name in TOKEN_SETS]


def _layernorm_case(ref: Reference, name: str, path: str, x: Tensor, hint: str = "") -> Case:
    out, seen = ref.call_with_hooks(path, x, hooks=("hook_scale", "hook_normalized"))
    weights = ref.parameters_of(path)
    steps = {"std": seen["hook_scale"], "normalized": seen["hook_normalized"], "output": out}
    return Case(name, [x], out, weights=path + ".", hint=hint, steps=steps, mistakes=layernorm_mistakes(x, weights["w"], weights["b"], ref.layer_norm_eps))


def layernorm_cases(ref: Reference) -> list[Case]:
    import torch

    first, last = _layers(ref)
    sites = ((f"blocks.{first}.ln1", f"blocks.{first}.hook_resid_pre"), (f"blocks.{last}.ln2", f"blocks.{last}.hook_resid_mid"), ("ln_final", f"blocks.{last}.hook_resid_post"))
    cases = [_layernorm_case(ref, f"{path}.{name}", path, ref.activations(name)[hook]) for name in TOKEN_SETS for path, hook in sites]
    # Variance comparable to eps: where eps sits (inside or outside the square root) now shows.
    quiet = 3e-3 * torch.randn(2, 5, ref.d_model, generator=ref.generator) + torch.randn(2, 5, 1, generator=ref.generator)
    hint = "it differs only where the variance is comparable to eps: add eps to the variance inside the square root"
    return cases + [_layernorm_case(ref, "small_variance", f"blocks.{first}.ln1", quiet, hint)]


def causal_mask_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    for posn in (7, 12):
        scores = torch.randn(2, ref.n_heads, posn, posn, generator=ref.generator)
        future = torch.triu(torch.ones(posn, posn, dtype=torch.bool), diagonal=1)
        cases.append(Case(f"scores_{posn}x{posn}", [scores], scores.masked_fill(future, float("-inf")), weights="blocks.0.attn."))
    return cases


def _sublayer_cases(ref: Reference, sublayer: str, norm: str, resid_hook: str, step_hooks: dict[str, str], mistakes) -> list[Case]:
    """Attention or the MLP of the first and last block, fed its LayerNorm's output on GPT-2's stream."""
    cases = []
    for layer in _layers(ref):
        weights = ref.parameters_of(f"blocks.{layer}.{sublayer}")
        for name in TOKEN_SETS:
            normalized = ref.call(f"blocks.{layer}.{norm}", ref.activations(name)[f"blocks.{layer}.{resid_hook}"])
            out, seen = ref.call_with_hooks(f"blocks.{layer}.{sublayer}", normalized, hooks=tuple(step_hooks.values()))
            steps = {label: seen[hook] for label, hook in step_hooks.items()} | {"output": out}
            cases.append(Case(f"blocks.{layer}.{name}", [normalized], out, weights=f"blocks.{layer}.{sublayer}.", steps=steps, mistakes=mistakes(seen, weights)))
    return cases


def attention_cases(ref: Reference) -> list[Case]:
    return _sublayer_cases(ref, "attn", "ln1", "hook_resid_pre", ATTENTION_STEPS, attention_mistakes)


def mlp_cases(ref: Reference) -> list[Case]:
    return _sublayer_cases(ref, "mlp", "ln2", "hook_resid_mid", {"pre": "hook_pre", "post": "hook_post"}, lambda seen, weights: mlp_mistakes(seen["hook_pre"], weights, ref.gelu_new))


def gelu_cases(ref: Reference) -> list[Case]:
    import torch

    grid = torch.linspace(-8.0, 8.0, 4001)
    acts = ref.activations("prompt")
    pre = acts["blocks.0.mlp.hook_pre"]
    return [Case("grid", [grid], ref.gelu_new(grid), mistakes=gelu_mistakes(grid)), Case("blocks.0.prompt", [pre], acts["blocks.0.mlp.hook_post"], mistakes=gelu_mistakes(pre))]


def block_cases(ref: Reference) -> list[Case]:
    cases = []
    for layer in _layers(ref):
        for name in TOKEN_SETS:
            acts = ref.activations(name)
            resid_pre, resid_mid = acts[f"blocks.{layer}.hook_resid_pre"], acts[f"blocks.{layer}.hook_resid_mid"]
            steps = {
                "ln1": ref.call(f"blocks.{layer}.ln1", resid_pre),
                "attn": acts[f"blocks.{layer}.hook_attn_out"],
                "resid_mid": resid_mid,
                "ln2": ref.call(f"blocks.{layer}.ln2", resid_mid),
                "mlp": acts[f"blocks.{layer}.hook_mlp_out"],
                "resid_post": acts[f"blocks.{layer}.hook_resid_post"],
            }
            cases.append(Case(f"blocks.{layer}.{name}", [resid_pre], steps["resid_post"], weights=f"blocks.{layer}.", steps=steps, mistakes=block_mistakes(ref, layer, resid_pre)))
    return cases


def unembed_cases(ref: Reference) -> list[Case]:
    import torch

    last = ref.n_layers - 1
    forgot = "b_U is not added to the logits"
    cases = []
    for name in TOKEN_SETS:
        acts = ref.activations(name)
        normalized = ref.call("ln_final", acts[f"blocks.{last}.hook_resid_post"])
        out = acts["unembed.hook_out"]
        cases.append(Case(name, [normalized], out, weights="unembed.", mistakes={forgot: out - ref.parameters_of("unembed")["b_U"]}))
    # GPT-2's b_U is all zeros, so a forgotten bias would pass on the real weights alone.
    b_U = 0.5 * torch.randn(ref.d_vocab, generator=ref.generator)
    out = ref.call("unembed", normalized, overrides={"b_U": b_U})
    cases.append(Case("perturbed_b_U", [normalized], out, weights="unembed.", overrides={"b_U": b_U}, hint="it differs only when b_U is not zero: add b_U", mistakes={forgot: out - b_U}))
    return cases


def transformer_cases(ref: Reference) -> list[Case]:
    cases = []
    for name in TOKEN_SETS:
        acts = ref.activations(name)
        last = ref.n_layers - 1
        steps = {"embed": acts["hook_embed"], "pos_embed": acts["hook_pos_embed"]}
        steps |= {f"blocks.{layer}": acts[f"blocks.{layer}.hook_resid_post"] for layer in range(ref.n_layers)}
        steps |= {"ln_final": ref.call("ln_final", acts[f"blocks.{last}.hook_resid_post"]), "unembed": acts["unembed.hook_out"]}
        cases.append(Case(name, [ref.tokens[name]], acts["unembed.hook_out"], weights="", steps=steps, mistakes=transformer_mistakes(ref, acts)))
    return cases


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


LOCALS, MODULES = ("locals",), ("modules",)
CHECKS = (
    Check("embed", "model", 1, Target("embedding", "Embed"), "token embedding lookup", embed_cases),
    Check("pos_embed", "model", 1, Target("embedding", "PosEmbed"), "positional embedding", pos_embed_cases),
    Check("layernorm", "model", 2, Target("normalization", "LayerNorm"), "LayerNorm", layernorm_cases, capture=LOCALS),
    Check("attention.causal_mask", "model", 1, Target("attention", "Attention", "apply_causal_mask"), "causal mask", causal_mask_cases, comparison=causal_mask),
    Check("attention", "model", 3, Target("attention", "Attention"), "multi-head attention", attention_cases, capture=LOCALS),
    Check("gelu_new", "model", 1, Target("mlp", "gelu_new", None), "GPT-2's GELU", gelu_cases, tolerance=Tolerance(atol=1e-5, rtol=1e-5)),
    Check("mlp", "model", 2, Target("mlp", "MLP"), "MLP", mlp_cases, capture=LOCALS),
    Check("block", "model", 2, Target("block", "TransformerBlock"), "transformer block", block_cases, watch_inputs=True, capture=LOCALS + MODULES),
    Check("unembed", "model", 1, Target("unembedding", "Unembed"), "unembedding", unembed_cases),
    Check("transformer", "model", 3, Target("transformer", "Transformer"), "the whole model", transformer_cases, tolerance=Tolerance(atol=1e-3, rtol=1e-4), watch_inputs=True, capture=MODULES, notes=transformer_notes),
)
