"""One transformer block: attention and the MLP, each reading the stream and adding back."""

from jaxtyping import Float
from torch import Tensor, nn

from .attention import Attention
from .config import Config
from .mlp import MLP
from .normalization import LayerNorm


class TransformerBlock(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.ln1 = LayerNorm(cfg)
        self.attn = Attention(cfg)
        self.ln2 = LayerNorm(cfg)
        self.mlp = MLP(cfg)

    def forward(self, resid_pre: Float[Tensor, "batch posn d_model"]) -> Float[Tensor, "batch posn d_model"]:
        """resid_mid = resid_pre + attn(ln1(resid_pre)); resid_post = resid_mid + mlp(ln2(resid_mid)).

        Shapes: (batch, posn, d_model) in and out.
        Traps: normalise what each sublayer reads, never the stream itself; ln1 for attention,
        ln2 for the MLP; do not modify resid_pre in place (no +=).
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()
