"""Part 1: the model. Each module is fed GPT-2's own input activation and compared with its output.

One mistake costs one module: the block is also given GPT-2's own sublayer outputs (replayed into the learner's
ln1, attn, ln2 and mlp when they are called with GPT-2's inputs, see `grader.learner.drivers.replay`), so it grades the
block's wiring alone, and the whole model is the one check that integrates every module.

Beside those, each check has a few stress inputs that real bugs need and GPT-2's activations on a short prompt
never reach: exact zeros and ties, magnitudes beyond GPT-2's largest, hundreds of positions, BOS alone (one
position, batch 1). Each says why in a comment, and the ones aimed at one mistake carry a hint and that mistake's
output.

Each case also carries GPT-2's intermediates (`steps`, to find where a learner's computation
first leaves GPT-2's) and what the classic mistakes output (`mistakes`, to name the one a learner
most likely made). The case functions run only when the reference cache is built, so torch is
imported inside them: grading itself compares NumPy arrays and never imports torch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from grader.checks import Case, Check, Target, Tolerance
from grader.shared.compare import causal_mask
from grader.shared.wire import replay_names

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.reference import Reference

TOKEN_SETS = ("prompt", "random")
LONG = 256  # positions of the long cases (batch 1); PosEmbed also gets the whole context

# GPT-2 small's largest magnitudes, which the random reference lacks: the first position's residual norm is in
# the thousands after the first blocks, and the largest attention scores reach the hundreds. The stress cases
# go BEYOND times past the larger of these and of what the reference itself produces.
GPT2_FIRST_POSITION_NORM, GPT2_LARGEST_SCORE, BEYOND = 3000.0, 100.0, 2.0

POSITIONS_FROM_ZERO = (
    "the positions start at 0, not at past_kv_pos_offset: these tokens follow that many cached ones, so the first "
    "is at position past_kv_pos_offset"
)
OFFSET_DRIVER = (
    "grader.learner.drivers.offset:with_offset"  # targets taking past_kv_pos_offset as their second argument
)
ZEROS_MASKED = "allowed scores equal to 0 were masked: build the mask from positions, not from the values"
SOFTMAX_OVERFLOWS = "the softmax overflows on large scores: subtract the max or use torch.softmax"
TANH_OVERFLOWS = "tanh overflows on large inputs: use torch.tanh rather than a ratio of exponentials"
MASK_AT_FIRST_KEY = (
    "the mask ignores the cached positions before the queries: query i sits at position past_kv_pos_offset + i "
    "and sees keys 0 to past_kv_pos_offset + i, so anchor the mask at the last key, not the first"
)
ONE_POSITION = (
    "it fails only on a one-position sequence (batch 1, as in the first sampling step from a bare prompt): "
    "nothing may assume more than one position or sequence (no squeeze)"
)
ATTENTION_STEPS = {
    "q": "hook_q",
    "k": "hook_k",
    "v": "hook_v",
    "attn_scores": "hook_attn_scores",
    "attn_pattern": "hook_pattern",
    "z": "hook_z",
}


def _layers(ref: Reference) -> tuple[int, int]:
    """The first and the last block: the last one sees GPT-2's largest activations."""
    return 0, ref.n_layers - 1


def _one_position(ref: Reference) -> str:
    """The token set of BOS alone, (1, 1): the first step of sampling from a bare prompt."""
    return ref.long_tokens(1)


def _generator(ref: Reference, salt: int):
    """A generator of its own per stress input, so adding one leaves every other random input as it was."""
    import torch

    return torch.Generator().manual_seed(1_000_003 * ref.seed + salt)


def _magnitudes(ref: Reference) -> tuple[float, float]:
    """(first-position residual norm, largest attention score) for the stress cases: beyond both GPT-2's and
    the reference's own."""
    token_sets = (*TOKEN_SETS, ref.long_tokens(LONG))
    norm = max(ref.largest_first_position_norm(token_sets), GPT2_FIRST_POSITION_NORM)
    return BEYOND * norm, BEYOND * max(ref.largest_attention_score(token_sets), GPT2_LARGEST_SCORE)


def _massive_first_position(resid: Tensor, norm: float) -> Tensor:
    """The stream with its first position scaled to `norm`, as GPT-2's BOS residual is."""
    resid = resid.clone()
    resid[:, 0] *= norm / resid[:, 0].norm(dim=-1, keepdim=True)
    return resid


# --- what the classic mistakes compute, from the reference's own weights and intermediates ------


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
    mask and the softmax are written: mask_zeros (a mask from the values), by_hand (exp / sum)."""
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
    }


def written_mistake(hint: str):
    """(seen, weights) -> {hint: output} for a mask or a softmax written wrong, as a sublayer case's mistakes."""

    def mistakes(seen: dict[str, Tensor], weights: dict[str, Tensor]) -> dict[str, Tensor]:
        switch = {ZEROS_MASKED: "mask_zeros", SOFTMAX_OVERFLOWS: "by_hand"}[hint]
        q, k, v = seen["hook_q"], seen["hook_k"], seen["hook_v"]
        return {hint: attend(q, k, v, weights["W_O"], weights["b_O"], math.sqrt(q.shape[-1]), **{switch: True})}

    return mistakes


def gelu_mistakes(x: Tensor) -> dict[str, Tensor]:
    import torch

    return {
        "this is ReLU: GPT-2 uses gelu_new, the tanh approximation of GELU": torch.relu(x),
        "this is the exact (erf) GELU: GPT-2 uses the tanh approximation": torch.nn.functional.gelu(x),
        "the constant inside tanh is 2/pi: it is sqrt(2/pi)": 0.5
        * x
        * (1 + torch.tanh(2 / math.pi * (x + 0.044715 * x**3))),
    }


def mlp_mistakes(pre: Tensor, weights: dict[str, Tensor], gelu_new) -> dict[str, Tensor]:
    def project(post):
        return post @ weights["W_out"] + weights["b_out"]

    activations = {
        hint.replace("this is", "the activation is"): project(post) for hint, post in gelu_mistakes(pre).items()
    }
    return activations | {
        "b_in is not added before the activation": project(gelu_new(pre - weights["b_in"])),
        "b_out is not added to the output": project(gelu_new(pre)) - weights["b_out"],
    }


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


# --- the cases ----------------------------------------------------------------------------------


def embed_cases(ref: Reference) -> list[Case]:
    # After the prompt and a batch of two: hundreds of positions in one sequence, the last token id (BOS) first.
    names = (*TOKEN_SETS, ref.long_tokens(LONG))
    cases = [Case(name, [ref.tokens[name]], ref.activations(name)["hook_embed"], weights="embed.") for name in names]
    one = _one_position(ref)
    out = ref.activations(one)["hook_embed"]
    return cases + [Case("one_position", [ref.tokens[one]], out, weights="embed.", hint=ONE_POSITION)]


def offset_args(first: Tensor, past_kv_pos_offset: int) -> list[Tensor]:
    """A case's arguments for the offset driver (grader.learner.drivers.offset): the offset, when there is one, as a 0-d
    tensor after the first."""
    import torch

    return [first, torch.tensor(past_kv_pos_offset)] if past_kv_pos_offset else [first]


def pos_embed_cases(ref: Reference) -> list[Case]:
    import torch

    W_pos = ref.parameters_of("pos_embed")["W_pos"]

    def case(name, tokens, mistakes=None, hint="", past_kv_pos_offset=0):
        mistakes = (mistakes or {}) | batch_axis_mistakes(W_pos, tokens, past_kv_pos_offset)
        out = ref.call("pos_embed", tokens, past_kv_pos_offset)
        args = offset_args(tokens, past_kv_pos_offset)
        return Case(name, args, out, weights="pos_embed.", hint=hint, mistakes=mistakes)

    # Token ids below n_ctx first: looking positions up by token id then gives wrong values
    # rather than an index error, so the mistake is reported as a difference.
    small_ids = torch.randint(0, ref.n_ctx, (2, 9), generator=ref.generator)
    by_id = {"positions are looked up by token id: index W_pos by position (0, 1, 2, ...)": W_pos[small_ids]}
    cases = [case("small_ids", small_ids, by_id), *(case(name, ref.tokens[name]) for name in TOKEN_SETS)]
    # The whole context: every row of W_pos, the last one (n_ctx - 1) included.
    full = torch.randint(0, ref.d_vocab, (1, ref.n_ctx), generator=_generator(ref, 1))
    cases += [case("full_context", full), case("one_position", ref.tokens[_one_position(ref)], hint=ONE_POSITION)]
    # Tokens after cached ones (the KV cache's chunks), the last at the context's last position.
    after_cache = {
        "random.offset5": (ref.tokens["random"], 5),
        "one_token.offset_last": (small_ids[:1, :1], ref.n_ctx - 1),
    }
    for name, (tokens, offset) in after_cache.items():
        from_zero = W_pos[: tokens.shape[-1]].expand(tokens.shape[0], -1, -1)
        cases.append(case(name, tokens, {POSITIONS_FROM_ZERO: from_zero}, POSITIONS_FROM_ZERO, offset))
    return cases


def batch_axis_mistakes(W_pos: Tensor, tokens: Tensor, past_kv_pos_offset: int = 0) -> dict[str, Tensor]:
    """The positions' rows without the batch axis, or with one of size 1: either broadcasts when added to the
    token embedding, so the learner's whole model runs and even matches GPT-2's, but PosEmbed itself is wrong."""
    rows = W_pos[past_kv_pos_offset : past_kv_pos_offset + tokens.shape[-1]]
    must = "PosEmbed must return (batch, posn, d_model): repeat the rows over the batch"
    return {
        f"the batch axis is missing: (posn, d_model) broadcasts when added, so your model runs, but {must}": rows,
        f"the batch axis has size 1: (1, posn, d_model) broadcasts when added, so your model runs, but {must}": rows[
            None
        ],
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

    first, last = _layers(ref)
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
    long, (norm, _) = ref.long_tokens(LONG), _magnitudes(ref)
    massive = _massive_first_position(ref.activations(long)[f"blocks.{last}.hook_resid_mid"], norm)
    path = f"blocks.{last}.ln2"
    cases.append(_layernorm_case(ref, f"{path}.{long}.massive_bos", path, massive, named_mistakes=False))
    one = ref.activations(_one_position(ref))[f"blocks.{first}.hook_resid_pre"]
    return cases + [_layernorm_case(ref, f"blocks.{first}.ln1.one_position", f"blocks.{first}.ln1", one, ONE_POSITION)]


def causal_mask_cases(ref: Reference) -> list[Case]:
    import torch

    def case(name, scores, hint="", past_kv_pos_offset=0):
        # The mask anchored at the first key: right for square scores only.
        top_left = torch.triu(torch.ones(scores.shape[-2:], dtype=torch.bool), diagonal=1)
        mistakes = {
            ZEROS_MASKED: scores.masked_fill(top_left | (scores == 0), float("-inf")),
            MASK_AT_FIRST_KEY: scores.masked_fill(top_left, float("-inf")),
        }
        mistakes = {hint: mistakes[hint]} if hint in mistakes else {}
        masked, args = ref.causal_mask(scores, past_kv_pos_offset), offset_args(scores, past_kv_pos_offset)
        return Case(name, args, masked, weights="blocks.0.attn.", hint=hint, mistakes=mistakes)

    cases = [case(f"scores_{n}x{n}", torch.randn(2, ref.n_heads, n, n, generator=ref.generator)) for n in (7, 12)]
    # Integer-valued scores: exact zeros and ties where keys are allowed, which a mask built from the values hides.
    integers = torch.randint(-2, 3, (2, ref.n_heads, 9, 9), generator=_generator(ref, 2)).float()
    cases.append(case("integer_scores", integers, ZEROS_MASKED))
    # Hundreds of positions, batch 1, the largest score beyond GPT-2's largest.
    scores = torch.randn(1, ref.n_heads, LONG, LONG, generator=_generator(ref, 3))
    cases.append(case(f"long{LONG}.large", scores * (_magnitudes(ref)[1] / scores.abs().max())))
    # One query and one key: the first sampling step from a bare prompt.
    cases.append(case("scores_1x1", torch.randn(1, ref.n_heads, 1, 1, generator=_generator(ref, 4)), ONE_POSITION))
    # Queries after cached keys (the KV cache's chunks): fewer queries than keys, the last alone.
    for salt, (query_pos, key_pos) in enumerate(((3, 8), (1, 8)), start=5):
        scores = torch.randn(2, ref.n_heads, query_pos, key_pos, generator=_generator(ref, salt))
        offset = key_pos - query_pos
        cases.append(case(f"scores_{query_pos}x{key_pos}.offset{offset}", scores, MASK_AT_FIRST_KEY, offset))
    return cases


def _sublayer_input(ref: Reference, tokens: str, layer: int, norm: str, resid_hook: str) -> Tensor:
    """What the sublayer reads in GPT-2: its LayerNorm applied to the stream there."""
    return ref.call(f"blocks.{layer}.{norm}", ref.activations(tokens)[f"blocks.{layer}.{resid_hook}"])


def _sublayer_case(
    ref: Reference, name: str, path: str, x: Tensor, step_hooks: dict[str, str], mistakes=None, overrides=None, hint=""
) -> Case:
    """One call of attention or the MLP at `path`, its steps, and what the `mistakes` (seen, weights) output."""
    overrides = overrides or {}
    out, seen = ref.call_with_hooks(path, x, hooks=tuple(step_hooks.values()), overrides=overrides)
    steps = {label: seen[hook] for label, hook in step_hooks.items()} | {"output": out}
    named = mistakes(seen, ref.parameters_of(path) | overrides) if mistakes else {}
    return Case(name, [x], out, weights=path + ".", overrides=overrides, hint=hint, steps=steps, mistakes=named)


def _sublayer_cases(
    ref: Reference, sublayer: str, norm: str, resid_hook: str, step_hooks: dict[str, str], mistakes
) -> list[Case]:
    """Attention or the MLP of the first and last block, fed its LayerNorm's output on GPT-2's stream, then
    a long sequence (batch 1) in the last block and BOS alone in the first."""
    cases = []
    for layer in _layers(ref):
        for name in TOKEN_SETS:
            x = _sublayer_input(ref, name, layer, norm, resid_hook)
            path = f"blocks.{layer}.{sublayer}"
            cases.append(_sublayer_case(ref, f"blocks.{layer}.{name}", path, x, step_hooks, mistakes))
    last, long = ref.n_layers - 1, ref.long_tokens(LONG)
    x = _sublayer_input(ref, long, last, norm, resid_hook)
    cases.append(_sublayer_case(ref, f"blocks.{last}.{long}", f"blocks.{last}.{sublayer}", x, step_hooks))
    one = _sublayer_input(ref, _one_position(ref), 0, norm, resid_hook)
    path = f"blocks.0.{sublayer}"
    return cases + [_sublayer_case(ref, "blocks.0.one_position", path, one, step_hooks, hint=ONE_POSITION)]


def attention_cases(ref: Reference) -> list[Case]:
    cases = _sublayer_cases(ref, "attn", "ln1", "hook_resid_pre", ATTENTION_STEPS, attention_mistakes)
    return cases + [_silent_head_case(ref), _large_scores_case(ref)]


def _silent_head_case(ref: Reference) -> Case:
    """Head 0 with W_Q = b_Q = 0: its scores are all exactly 0 (a tie), so it attends uniformly to the past.
    A mask built from the values hides every one of them and leaves rows with nothing to attend to (NaN)."""
    import torch

    weights = ref.parameters_of("blocks.0.attn")
    silent = {name: weights[name].clone().index_fill_(0, torch.tensor([0]), 0.0) for name in ("W_Q", "b_Q")}
    x = _sublayer_input(ref, "prompt", 0, "ln1", "hook_resid_pre")
    name, by_value = "blocks.0.silent_head", written_mistake(ZEROS_MASKED)
    return _sublayer_case(ref, name, "blocks.0.attn", x, ATTENTION_STEPS, by_value, silent, hint=ZEROS_MASKED)


def _large_scores_case(ref: Reference) -> Case:
    """The head with the largest score, its W_Q and b_Q scaled so that score is beyond GPT-2's largest: exp()
    overflows float32 past 88.7. One head, as in GPT-2, whose largest scores sit far above the others'."""
    import torch

    last = ref.n_layers - 1
    path, x = f"blocks.{last}.attn", _sublayer_input(ref, "random", last, "ln1", "hook_resid_pre")
    scores = ref.call_with_hooks(path, x, hooks=("hook_attn_scores",))[1]["hook_attn_scores"]
    largest = scores.nan_to_num(neginf=0.0).abs().amax(dim=(0, 2, 3))  # per head
    head = int(largest.argmax())
    factor = torch.ones(ref.n_heads).index_fill_(0, torch.tensor([head]), _magnitudes(ref)[1] / float(largest[head]))
    weights = ref.parameters_of(path)
    # q, and so every score of that head, is scaled by exactly `factor`.
    scaled = {"W_Q": factor[:, None, None] * weights["W_Q"], "b_Q": factor[:, None] * weights["b_Q"]}
    name, by_hand = f"blocks.{last}.large_scores", written_mistake(SOFTMAX_OVERFLOWS)
    return _sublayer_case(ref, name, path, x, ATTENTION_STEPS, by_hand, scaled, hint=SOFTMAX_OVERFLOWS)


def mlp_cases(ref: Reference) -> list[Case]:
    return _sublayer_cases(
        ref,
        "mlp",
        "ln2",
        "hook_resid_mid",
        {"pre": "hook_pre", "post": "hook_post"},
        lambda seen, weights: mlp_mistakes(seen["hook_pre"], weights, ref.gelu_new),
    )


def gelu_cases(ref: Reference) -> list[Case]:
    import torch

    grid = torch.linspace(-8.0, 8.0, 4001)
    acts = ref.activations("prompt")
    pre = acts["blocks.0.mlp.hook_pre"]
    cases = [
        Case("grid", [grid], ref.gelu_new(grid), mistakes=gelu_mistakes(grid)),
        Case("blocks.0.prompt", [pre], acts["blocks.0.mlp.hook_post"], mistakes=gelu_mistakes(pre)),
    ]
    # Exact zeros, and magnitudes far beyond GPT-2's pre-activations: a tanh by hand from exponentials overflows.
    wide = torch.cat([torch.zeros(3), torch.logspace(0, 4, 41), -torch.logspace(0, 4, 41)])
    by_exp = {TANH_OVERFLOWS: 0.5 * wide * (1 + _tanh_by_exp(math.sqrt(2 / math.pi) * (wide + 0.044715 * wide**3)))}
    return cases + [Case("wide", [wide], ref.gelu_new(wide), hint=TANH_OVERFLOWS, mistakes=by_exp)]


def _tanh_by_exp(y: Tensor) -> Tensor:
    """tanh written by hand: (e^2y - 1) / (e^2y + 1), which is inf / inf = NaN once 2y passes 88.7."""
    e = (2 * y).exp()
    return (e - 1) / (e + 1)


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

    sites = [(layer, name) for layer in _layers(ref) for name in TOKEN_SETS]
    cases = [_block_case(ref, f"blocks.{layer}.{name}", layer, resid_pre(name, layer)) for layer, name in sites]
    # Hundreds of positions, batch 1, the first with a residual norm beyond GPT-2's largest (its BOS position's).
    last, long, (norm, _) = ref.n_layers - 1, ref.long_tokens(LONG), _magnitudes(ref)
    massive = _massive_first_position(resid_pre(long, last), norm)
    cases.append(_block_case(ref, f"blocks.{last}.{long}.massive_bos", last, massive, named_mistakes=False))
    return cases + [_block_case(ref, "blocks.0.one_position", 0, resid_pre(_one_position(ref), 0), hint=ONE_POSITION)]


def unembed_cases(ref: Reference) -> list[Case]:
    import torch

    last, forgot = ref.n_layers - 1, "b_U is not added to the logits"

    def normalized(tokens: str) -> Tensor:
        return ref.call("ln_final", ref.activations(tokens)[f"blocks.{last}.hook_resid_post"])

    def case(name: str, tokens: str, hint: str = "") -> Case:
        out, b_U = ref.activations(tokens)["unembed.hook_out"], ref.weight("unembed.b_U")
        return Case(name, [normalized(tokens)], out, weights="unembed.", hint=hint, mistakes={forgot: out - b_U})

    cases = [case(name, name) for name in TOKEN_SETS]
    # GPT-2's b_U is all zeros, so a forgotten bias would pass on the real weights alone.
    b_U = 0.5 * torch.randn(ref.d_vocab, generator=ref.generator)
    x = normalized("random")
    out = ref.call("unembed", x, overrides={"b_U": b_U})
    hint = "it differs only when b_U is not zero: add b_U"
    perturbed = Case(
        "perturbed_b_U", [x], out, weights="unembed.", overrides={"b_U": b_U}, hint=hint, mistakes={forgot: out - b_U}
    )
    return cases + [perturbed, case("one_position", _one_position(ref), ONE_POSITION)]


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
    return cases + [_transformer_case(ref, "one_position", _one_position(ref), ONE_POSITION)]


def transformer_notes(outcome: dict) -> list[str]:
    """Parameter counts per part and whether the learner's model predicts the same tokens."""
    notes = []
    counts, expected = outcome.get("param_counts") or {}, outcome["reference_param_counts"]
    if counts:
        rows = [
            f"{part} {counts.get(part, 0):,}" + ("" if counts.get(part, 0) == n else f" (GPT-2: {n:,})")
            for part, n in expected.items()
        ]
        notes.append("parameters: " + ", ".join(rows))
    argmax = [
        bool((out.argmax(-1) == outcome["expected"][case].argmax(-1)).all())
        for case, out in outcome["outputs"].items()
        if out.shape == outcome["expected"][case].shape
    ]
    if argmax:
        notes.append("same next-token argmax as GPT-2 everywhere: " + ("yes" if all(argmax) else "no"))
    return notes


LOCALS, MODULES = ("locals",), ("modules",)
CHECKS = (
    Check("embed", "model", 1, Target("embedding", "Embed"), "token embedding lookup", embed_cases),
    Check(
        "pos_embed",
        "model",
        1,
        Target("embedding", "PosEmbed", driver=OFFSET_DRIVER),
        "positional embedding",
        pos_embed_cases,
    ),
    Check("layernorm", "model", 2, Target("normalization", "LayerNorm"), "LayerNorm", layernorm_cases, capture=LOCALS),
    Check(
        "attention.causal_mask",
        "model",
        1,
        Target("attention", "Attention", "apply_causal_mask", driver=OFFSET_DRIVER),
        "causal mask",
        causal_mask_cases,
        comparison=causal_mask,
    ),
    Check(
        "attention",
        "model",
        3,
        Target("attention", "Attention"),
        "multi-head attention",
        attention_cases,
        capture=LOCALS,
        uses=("attention.causal_mask",),
    ),
    Check(
        "gelu_new",
        "model",
        1,
        Target("mlp", "gelu_new", None),
        "GPT-2's GELU",
        gelu_cases,
        tolerance=Tolerance(atol=1e-5, rtol=1e-5),
    ),
    Check("mlp", "model", 2, Target("mlp", "MLP"), "MLP", mlp_cases, capture=LOCALS, uses=("gelu_new",)),
    Check(
        "block",
        "model",
        2,
        Target("block", "TransformerBlock"),
        "transformer block",
        block_cases,
        watch_inputs=True,
        capture=LOCALS + MODULES,
        uses=("layernorm", "attention", "mlp"),
    ),
    Check("unembed", "model", 1, Target("unembedding", "Unembed"), "unembedding", unembed_cases),
    Check(
        "transformer",
        "model",
        3,
        Target("transformer", "Transformer"),
        "the whole model",
        transformer_cases,
        tolerance=Tolerance(atol=1e-3, rtol=1e-4),
        watch_inputs=True,
        capture=MODULES,
        notes=transformer_notes,
        uses=("embed", "pos_embed", "layernorm", "block", "unembed"),
    ),
)
