"""TinyLM: the stand-in model of the training checks, built alike by the reference and the learner's process."""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn


class TinyLM(nn.Module):
    """Embeddings, one MLP sublayer with dropout, ln_final and an unembedding, with transformer_lens's
    names: a language model small enough to step by hand. Each forward records whether it ran in
    training mode and with gradients enabled, which is how evaluate's mode is seen."""

    def __init__(self, d_vocab: int = 11, d_model: int = 8, n_ctx: int = 8, dropout: float = 0.0, seed: int = 0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)

        def parameter(*shape: int, mean: float = 0.0) -> nn.Parameter:
            return nn.Parameter(mean + 0.5 * torch.randn(*shape, generator=generator))

        self.embed, self.pos_embed, self.mlp, self.ln_final, self.unembed = (nn.Module() for _ in range(5))
        self.embed.W_E, self.pos_embed.W_pos = parameter(d_vocab, d_model), parameter(n_ctx, d_model)
        self.mlp.W_in, self.mlp.b_in = parameter(d_model, 4 * d_model), parameter(4 * d_model)
        self.mlp.W_out, self.mlp.b_out = parameter(4 * d_model, d_model), parameter(d_model)
        self.ln_final.w, self.ln_final.b = parameter(d_model, mean=1.0), parameter(d_model)
        self.unembed.W_U, self.unembed.b_U = parameter(d_model, d_vocab), parameter(d_vocab)
        self.dropout = nn.Dropout(dropout)
        self.seen: list[tuple[bool, bool]] = []  # (training, grad enabled) of every forward

    def forward(self, tokens: Int[Tensor, "batch posn"]) -> Float[Tensor, "batch posn d_vocab"]:
        self.seen.append((self.training, torch.is_grad_enabled()))
        resid = self.embed.W_E[tokens] + self.pos_embed.W_pos[: tokens.shape[-1]]
        hidden = nn.functional.gelu(resid @ self.mlp.W_in + self.mlp.b_in)
        resid = resid + self.dropout(hidden) @ self.mlp.W_out + self.mlp.b_out
        normalized = nn.functional.layer_norm(resid, resid.shape[-1:], self.ln_final.w, self.ln_final.b)
        return normalized @ self.unembed.W_U + self.unembed.b_U


def flat_parameters(model: nn.Module) -> Tensor:
    return torch.cat([param.detach().flatten() for param in model.parameters()])
