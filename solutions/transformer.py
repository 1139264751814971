"""The whole of GPT-2 small: token ids in, logits out."""

from jaxtyping import Float, Int
from torch import Tensor, nn

from .block import TransformerBlock
from .config import Config
from .embedding import Embed, PosEmbed
from .normalization import LayerNorm
from .unembedding import Unembed


class Transformer(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.embed = Embed(cfg)
        self.pos_embed = PosEmbed(cfg)
        self.blocks = nn.ModuleList([TransformerBlock(cfg) for _ in range(cfg.n_layers)])
        self.ln_final = LayerNorm(cfg)
        self.unembed = Unembed(cfg)

    def forward(self, tokens: Int[Tensor, "batch posn"]) -> Float[Tensor, "batch posn d_vocab"]:
        """Embed tokens and positions, run every block in order, apply ln_final, unembed.

        Shapes: (batch, posn) -> residual (batch, posn, d_model) -> (batch, posn, d_vocab).
        Traps: add the positional embedding; apply the final LayerNorm before the unembedding.
        """
        ### BEGIN SOLUTION
        residual = self.embed(tokens) + self.pos_embed(tokens)
        for block in self.blocks:
            residual = block(residual)
        return self.unembed(self.ln_final(residual))
        ### END SOLUTION
