"""Token and position embeddings: integers in, residual-stream vectors out."""

import einops
from jaxtyping import Float, Int
from torch import Tensor, nn

from .config import Config, normal_weight


class Embed(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.W_E = normal_weight(cfg, cfg.d_vocab, cfg.d_model)

    def forward(self, tokens: Int[Tensor, "batch posn"]) -> Float[Tensor, "batch posn d_model"]:
        """Look up each token id's row of W_E.

        Shapes: tokens (batch, posn) -> (batch, posn, d_model).
        Trap: this is an index, not a matrix product; no loop is needed.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()


class PosEmbed(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.W_pos = normal_weight(cfg, cfg.n_ctx, cfg.d_model)

    def forward(
        self, tokens: Int[Tensor, "batch posn"], past_kv_pos_offset: int = 0
    ) -> Float[Tensor, "batch posn d_model"]:
        """Give position p the row W_pos[p], for every sequence in the batch. The tokens follow
        past_kv_pos_offset cached ones (the KV cache's), so their positions start there.

        Shapes: tokens (batch, posn) -> (batch, posn, d_model).
        Trap: only the shape of tokens matters; indexing W_pos by the token ids is wrong.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()
