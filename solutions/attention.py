"""Causal multi-head self-attention: the only place where positions exchange information."""

import einops
import torch
from jaxtyping import Float
from torch import Tensor, nn

from .config import Config, normal_weight


class Attention(nn.Module):
    IGNORE: Float[Tensor, ""]

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.W_Q = normal_weight(cfg, cfg.n_heads, cfg.d_model, cfg.d_head)
        self.W_K = normal_weight(cfg, cfg.n_heads, cfg.d_model, cfg.d_head)
        self.W_V = normal_weight(cfg, cfg.n_heads, cfg.d_model, cfg.d_head)
        self.W_O = normal_weight(cfg, cfg.n_heads, cfg.d_head, cfg.d_model)
        self.b_Q = nn.Parameter(torch.zeros((cfg.n_heads, cfg.d_head)))
        self.b_K = nn.Parameter(torch.zeros((cfg.n_heads, cfg.d_head)))
        self.b_V = nn.Parameter(torch.zeros((cfg.n_heads, cfg.d_head)))
        self.b_O = nn.Parameter(torch.zeros(cfg.d_model))
        self.register_buffer("IGNORE", torch.tensor(float("-inf"), dtype=torch.float32))

    def apply_causal_mask(
        self, attn_scores: Float[Tensor, "batch n_heads query_pos key_pos"], past_kv_pos_offset: int = 0
    ) -> Float[Tensor, "batch n_heads query_pos key_pos"]:
        """Set every score whose key position comes after its query position to IGNORE. The queries follow
        past_kv_pos_offset cached positions (the KV cache): query i sits at position past_kv_pos_offset + i.

        Shapes: (batch, n_heads, query_pos, key_pos) in and out, key_pos = past_kv_pos_offset + query_pos.
        Traps: keep the diagonal (a token may attend to itself); with an offset the mask is not square, so
        anchor it at the last key, not the first; build the mask on the scores' device.
        """
        ### BEGIN SOLUTION
        query_pos, key_pos = attn_scores.shape[-2:]
        all_ones = torch.ones(query_pos, key_pos, dtype=torch.bool, device=attn_scores.device)
        future = torch.triu(all_ones, diagonal=past_kv_pos_offset + 1)
        return attn_scores.masked_fill(future, self.IGNORE)
        ### END SOLUTION

    def forward(self, normalized_resid_pre: Float[Tensor, "batch posn d_model"]) -> Float[Tensor, "batch posn d_model"]:
        """q, k, v per head; scores q.k / sqrt(d_head); causal mask; softmax over keys; mix v; project with W_O.

        Shapes: (batch, posn, d_model) -> q, k, v (batch, posn, n_heads, d_head)
        -> scores and pattern (batch, n_heads, query_pos, key_pos) -> z (batch, posn, n_heads, d_head)
        -> (batch, posn, d_model).
        Traps: scale by sqrt(d_head), not d_head; mask before the softmax; softmax over the key axis;
        the heads are summed by W_O, then b_O is added once; heads merged before W_O go (n_heads d_head),
        the order of W_O's rows.
        """
        ### BEGIN SOLUTION
        per_head = "batch posn d_model, n_heads d_model d_head -> batch posn n_heads d_head"
        q = einops.einsum(normalized_resid_pre, self.W_Q, per_head) + self.b_Q
        k = einops.einsum(normalized_resid_pre, self.W_K, per_head) + self.b_K
        v = einops.einsum(normalized_resid_pre, self.W_V, per_head) + self.b_V
        attn_scores = einops.einsum(
            q, k, "batch posn_Q n_heads d_head, batch posn_K n_heads d_head -> batch n_heads posn_Q posn_K"
        )
        attn_scores_masked = self.apply_causal_mask(attn_scores / self.cfg.d_head**0.5)
        attn_pattern = attn_scores_masked.softmax(dim=-1)
        z = einops.einsum(
            v, attn_pattern, "batch posn_K n_heads d_head, batch n_heads posn_Q posn_K -> batch posn_Q n_heads d_head"
        )
        attn_out = einops.einsum(
            z, self.W_O, "batch posn_Q n_heads d_head, n_heads d_head d_model -> batch posn_Q d_model"
        )
        return attn_out + self.b_O
        ### END SOLUTION
