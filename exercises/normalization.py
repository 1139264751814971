"""LayerNorm: standardise each position's vector, then scale and shift it."""

import torch
from jaxtyping import Float
from torch import Tensor, nn

from .config import Config


class LayerNorm(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.w = nn.Parameter(torch.ones(cfg.d_model))
        self.b = nn.Parameter(torch.zeros(cfg.d_model))

    def forward(self, residual: Float[Tensor, "batch posn d_model"]) -> Float[Tensor, "batch posn d_model"]:
        """Normalise over d_model: (x - mean) / sqrt(var + eps), then * w + b.

        Shapes: (batch, posn, d_model) in and out; mean and std are (batch, posn, 1).
        Traps: the variance divides by N, not N - 1; eps goes inside the square root.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()
