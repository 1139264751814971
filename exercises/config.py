"""The hyperparameters of GPT-2 small (given, nothing to implement)."""

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Config:
    d_model: int = 768
    debug: bool = False
    layer_norm_eps: float = 1e-5
    d_vocab: int = 50257
    init_range: float = 0.02
    n_ctx: int = 1024
    d_head: int = 64
    d_mlp: int = 3072
    n_heads: int = 12
    n_layers: int = 12


def normal_weight(cfg: Config, *shape: int) -> nn.Parameter:
    """A weight of this shape drawn from N(0, init_range), as GPT-2's weights are initialised."""
    weight = nn.Parameter(torch.empty(shape))
    nn.init.normal_(weight, std=cfg.init_range)
    return weight
