"""The unembedding: one logit per vocabulary entry at every position."""

import einops
import torch
from jaxtyping import Float
from torch import Tensor, nn

from .config import Config, normal_weight


class Unembed(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.W_U = normal_weight(cfg, cfg.d_model, cfg.d_vocab)
        self.b_U = nn.Parameter(torch.zeros(cfg.d_vocab), requires_grad=False)

    def forward(
        self, normalized_resid_final: Float[Tensor, "batch posn d_model"]
    ) -> Float[Tensor, "batch posn d_vocab"]:
        """logits = x W_U + b_U.

        Shapes: (batch, posn, d_model) -> (batch, posn, d_vocab).
        Trap: GPT-2's b_U is all zeros, but add it anyway: the grader also tries other values.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()
