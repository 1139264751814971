"""GPT-2's Transformer built from torch's own functions, with transformer_lens's parameter names.

The interp and training checks run the learner's functions on it where the learner's own Transformer does not
import or fails its own check (`fault`), and a learner's file that imports one that does not import gets its parts
from here (`__all__`, served by `grader.learner.stand_ins`): one mistake costs the checks of its own file only.
Built from torch.nn.functional (layer_norm, scaled_dot_product_attention, gelu), not from an exercise's solution;
its state_dict has GPT-2's names and shapes, so the same weights load into it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.nn import functional as F

from grader.shared.formats import PROBE_SHAPE

# The parts of the course's files this module stands in for (`grader.learner.stand_ins`)
__all__ = [
    "Embed",
    "PosEmbed",
    "LayerNorm",
    "Attention",
    "gelu_new",
    "MLP",
    "TransformerBlock",
    "Unembed",
    "Transformer",
]

# Why a check ran on the stand-in (the reply's `stand_in`, a wire.StandIn): the learner's Transformer ...
DOES_NOT_IMPORT, FAILS = "does not import", "fails its own check"
RTOL, ATOL = 1e-4, 1e-3  # the transformer check's tolerance
# The spread of the probe weights of a tiny model: at GPT-2's initial 0.02 every head attends nearly uniformly and a
# mistake in the scores would not show; at 0.2 the scores of a tiny head spread by about 1.
PROBE_STD = 0.2


def weight(cfg, *shape: int) -> nn.Parameter:
    """N(0, init_range), as GPT-2's weights start (an in-place fill: skipped where GPT-2's weights replace it)."""
    return nn.Parameter(torch.empty(shape).normal_(std=cfg.init_range))


def constant(value: float, *shape: int, trains: bool = True) -> nn.Parameter:
    return nn.Parameter(torch.full(shape, value), requires_grad=trains)


class Embed(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.W_E = weight(cfg, cfg.d_vocab, cfg.d_model)

    def forward(self, tokens: Int[Tensor, "batch posn"]) -> Float[Tensor, "batch posn d_model"]:
        return F.embedding(tokens, self.W_E)


class PosEmbed(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.W_pos = weight(cfg, cfg.n_ctx, cfg.d_model)

    def forward(
        self, tokens: Int[Tensor, "batch posn"], past_kv_pos_offset: int = 0
    ) -> Float[Tensor, "batch posn d_model"]:
        positions = torch.arange(tokens.shape[-1], device=tokens.device) + past_kv_pos_offset
        return F.embedding(positions.expand_as(tokens), self.W_pos)


class LayerNorm(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.eps = cfg.layer_norm_eps
        self.w, self.b = constant(1.0, cfg.d_model), constant(0.0, cfg.d_model)

    def forward(self, x: Float[Tensor, "batch posn d_model"]) -> Float[Tensor, "batch posn d_model"]:
        return F.layer_norm(x, x.shape[-1:], self.w, self.b, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg  # read by a learner's subclass (kv_cache's CachedAttention)
        heads = (cfg.n_heads, cfg.d_model, cfg.d_head)
        self.W_Q, self.W_K, self.W_V = weight(cfg, *heads), weight(cfg, *heads), weight(cfg, *heads)
        self.W_O = weight(cfg, cfg.n_heads, cfg.d_head, cfg.d_model)
        self.b_Q, self.b_K, self.b_V = (constant(0.0, cfg.n_heads, cfg.d_head) for _ in range(3))
        self.b_O = constant(0.0, cfg.d_model)

    def forward(self, x: Float[Tensor, "batch posn d_model"]) -> Float[Tensor, "batch posn d_model"]:
        q, k, v = (
            torch.einsum("bpm,hmd->bhpd", x, W) + b[:, None]
            for W, b in ((self.W_Q, self.b_Q), (self.W_K, self.b_K), (self.W_V, self.b_V))
        )
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scaled by 1 / sqrt(d_head)
        return torch.einsum("bhpd,hdm->bpm", z, self.W_O) + self.b_O

    def apply_causal_mask(self, attn_scores: Tensor, past_kv_pos_offset: int = 0) -> Tensor:
        """-inf for each key after its query, the queries following `past_kv_pos_offset` cached keys."""
        queries, keys = attn_scores.shape[-2:]
        positions = torch.arange(max(queries + past_kv_pos_offset, keys), device=attn_scores.device)
        after = positions[None, :keys] > positions[past_kv_pos_offset : past_kv_pos_offset + queries, None]
        return attn_scores.masked_fill(after, float("-inf"))


def gelu_new(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.W_in, self.b_in = weight(cfg, cfg.d_model, cfg.d_mlp), constant(0.0, cfg.d_mlp)
        self.W_out, self.b_out = weight(cfg, cfg.d_mlp, cfg.d_model), constant(0.0, cfg.d_model)

    def forward(self, x: Float[Tensor, "batch posn d_model"]) -> Float[Tensor, "batch posn d_model"]:
        return gelu_new(x @ self.W_in + self.b_in) @ self.W_out + self.b_out


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = LayerNorm(cfg), Attention(cfg), LayerNorm(cfg), MLP(cfg)

    def forward(self, x: Float[Tensor, "batch posn d_model"]) -> Float[Tensor, "batch posn d_model"]:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Unembed(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.W_U = weight(cfg, cfg.d_model, cfg.d_vocab)
        self.b_U = constant(0.0, cfg.d_vocab, trains=False)  # as the exercise's own Unembed declares it

    def forward(self, x: Float[Tensor, "batch posn d_model"]) -> Float[Tensor, "batch posn d_vocab"]:
        return x @ self.W_U + self.b_U


class Transformer(nn.Module):
    """The whole model, its five parts named and ordered as the exercise's (interp.parameter_counts reads them)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed, self.pos_embed = Embed(cfg), PosEmbed(cfg)
        self.blocks = nn.ModuleList([TransformerBlock(cfg) for _ in range(cfg.n_layers)])
        self.ln_final, self.unembed = LayerNorm(cfg), Unembed(cfg)

    def forward(self, tokens: Int[Tensor, "batch posn"]) -> Float[Tensor, "batch posn d_vocab"]:
        x = self.embed(tokens) + self.pos_embed(tokens)
        for layer in self.blocks:
            x = layer(x)
        return self.unembed(self.ln_final(x))


def seeded(cfg, seed: int = 0) -> Transformer:
    """A stand-in initialised from its own seed, whatever the learner's code drew before (torch's state kept)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Transformer(cfg)


# --- is the learner's Transformer the one to grade on? -------------------------------------------------------------


def fault(ctx, sound: Callable[[type], bool]) -> str | None:
    """Why the learner's Transformer is not the one to grade on (DOES_NOT_IMPORT, FAILS), or None where it is.
    `sound(cls)` builds the learner's class as the check uses it and says whether it agrees with the stand-in. One
    not written yet (NotImplementedError) stays the learner's, so that the check's todo points at what to write."""
    try:
        cls = ctx.package.attribute("transformer", "Transformer")
    except Exception:  # a syntax error, an import that fails, no Transformer at all
        return DOES_NOT_IMPORT
    try:
        return None if sound(cls) else FAILS
    except NotImplementedError:
        return None
    except Exception:  # its weights do not load, or it raises: its own check fails
        return FAILS


def probe_tokens(cfg, device="cpu") -> Tensor:
    return torch.randint(0, cfg.d_vocab, PROBE_SHAPE, generator=torch.Generator().manual_seed(0)).to(device)


def agrees(model: nn.Module, stand_in: Transformer, tokens: Tensor) -> bool:
    """Whether the learner's model gives the stand-in's logits on `tokens`, both holding the same weights."""
    return gives(model, tokens, stand_in(tokens))


def gives(model: nn.Module, tokens: Tensor, logits: Tensor) -> bool:
    """Whether the learner's model gives these logits on `tokens`, within the transformer check's tolerance."""
    actual = model(tokens)
    return (
        isinstance(actual, Tensor)
        and actual.shape == logits.shape
        and bool(torch.allclose(actual.to(logits), logits, rtol=RTOL, atol=ATOL))
    )


def agrees_on_probe_weights(model: nn.Module, cfg) -> bool:
    """Whether the learner's model, given random weights large enough for every part to matter, gives the stand-in's
    logits with the same weights; the learner's own initial weights are put back after."""
    stand_in = seeded(cfg)
    own, probe = dict(model.named_parameters()), dict(stand_in.named_parameters())
    if {name: param.shape for name, param in own.items()} != {name: param.shape for name, param in probe.items()}:
        return False  # a name or a shape that GPT-2's weights would not load into
    generator = torch.Generator().manual_seed(0)
    initial = {name: param.detach().clone() for name, param in own.items()}
    with torch.no_grad():
        for name, param in probe.items():
            mean = 1.0 if name.rsplit(".", 1)[-1] == "w" else 0.0  # a LayerNorm's scale
            param.copy_(mean + PROBE_STD * torch.randn(param.shape, generator=generator))
            own[name].copy_(param)
    try:
        return agrees(model, stand_in, probe_tokens(cfg))
    finally:
        with torch.no_grad():
            for name, value in initial.items():
                own[name].copy_(value)
