"""The MLP: widen to d_mlp, apply GELU, project back. Each position on its own."""

import math

import einops
import torch
from jaxtyping import Float
from torch import Tensor, nn

from .config import Config, normal_weight


def gelu_new(x: Float[Tensor, "..."]) -> Float[Tensor, "..."]:
    """GPT-2's GELU, the tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

    Shapes: any shape in, the same shape out (elementwise).
    Trap: this is not the exact erf GELU; the constants matter.
    """
    # TODO: implement this (see the docstring above)
    raise NotImplementedError()


class MLP(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.W_in = normal_weight(cfg, cfg.d_model, cfg.d_mlp)
        self.W_out = normal_weight(cfg, cfg.d_mlp, cfg.d_model)
        self.b_in = nn.Parameter(torch.zeros(cfg.d_mlp))
        self.b_out = nn.Parameter(torch.zeros(cfg.d_model))

    def forward(self, normalized_resid_mid: Float[Tensor, "batch posn d_model"]) -> Float[Tensor, "batch posn d_model"]:
        """pre = x W_in + b_in; post = gelu_new(pre); out = post W_out + b_out.

        Shapes: (batch, posn, d_model) -> pre, post (batch, posn, d_mlp) -> (batch, posn, d_model).
        Trap: both biases count; the nonlinearity is gelu_new, not ReLU.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()
