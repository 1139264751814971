"""Positions concatenated, not added: the token embedding and the position embedding in separate subspaces of the
residual stream, at the same d_model, so that everything after the embeddings is the Transformer's own."""

import dataclasses

import torch
from jaxtyping import Float, Int
from torch import Tensor

from .config import Config
from .embedding import Embed, PosEmbed
from .transformer import Transformer


class ConcatTransformer(Transformer):
    def __init__(self, cfg: Config, d_token: int):
        """The Transformer with narrower embeddings: your Embed at d_token wide and your PosEmbed at the rest of
        d_model, built from cfg with its d_model replaced (dataclasses.replace). The blocks, ln_final and the
        unembedding stay the Transformer's, at cfg.d_model.

        Shapes: embed.W_E (d_vocab, d_token), pos_embed.W_pos (n_ctx, d_model - d_token).
        Trap: the two widths must add up to d_model: a PosEmbed built at cfg.d_model makes the stream d_token + d_model
        wide.
        """
        super().__init__(cfg)
        ### BEGIN SOLUTION
        self.embed = Embed(dataclasses.replace(cfg, d_model=d_token))
        self.pos_embed = PosEmbed(dataclasses.replace(cfg, d_model=cfg.d_model - d_token))
        ### END SOLUTION

    def residual(self, tokens: Int[Tensor, "batch posn"]) -> Float[Tensor, "batch posn d_model"]:
        """The residual stream the first block reads: each token's embedding and its position's embedding side by
        side, concatenated along d_model rather than added.

        Shapes: tokens (batch, posn) -> embed (batch, posn, d_token) and pos_embed (batch, posn, d_model - d_token)
        -> (batch, posn, d_model).
        Traps: the position half is looked up by position, never by token id (self.pos_embed reads only the shape of
        tokens); the token half comes first and the position half after it, the order the weights are read in.
        """
        ### BEGIN SOLUTION
        return torch.cat([self.embed(tokens), self.pos_embed(tokens)], dim=-1)
        ### END SOLUTION

    def forward(self, tokens: Int[Tensor, "batch posn"]) -> Float[Tensor, "batch posn d_vocab"]:
        """The Transformer's forward pass from the concatenated stream: residual, every block in order, ln_final,
        unembed.

        Shapes: (batch, posn) -> residual (batch, posn, d_model) -> (batch, posn, d_vocab).
        """
        ### BEGIN SOLUTION
        residual = self.residual(tokens)
        for block in self.blocks:
            residual = block(residual)
        return self.unembed(self.ln_final(residual))
        ### END SOLUTION
