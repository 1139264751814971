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
        ### BEGIN SOLUTION
        residual_mean = residual.mean(dim=-1, keepdim=True)
        residual_var = residual.var(dim=-1, keepdim=True, unbiased=False)
        residual_std = (residual_var + self.cfg.layer_norm_eps).sqrt()
        normalized = (residual - residual_mean) / residual_std
        return normalized * self.w + self.b
        ### END SOLUTION
