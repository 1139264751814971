"""Bonus: a key-value cache. Each token's keys and values are computed once and kept, so a new
token costs one position of work instead of a pass over the whole sequence."""

import einops
import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from .attention import Attention
from .block import TransformerBlock
from .config import Config
from .sampling import TransformerSampler
from .transformer import Transformer

KeysValues = tuple[Float[Tensor, "batch posn n_heads d_head"], Float[Tensor, "batch posn n_heads d_head"]]
KeyValueCache = list[KeysValues]  # one (keys, values) pair per layer


class CachedAttention(Attention):
    def forward(
        self, normalized_resid_pre: Float[Tensor, "batch new_posn d_model"], past: KeysValues | None = None
    ) -> tuple[Float[Tensor, "batch new_posn d_model"], KeysValues]:
        """Attention of the new positions to the cached keys and values and to their own.

        Shapes: new positions (batch, new_posn, d_model), past keys and values (batch, past_posn,
        n_heads, d_head) -> output (batch, new_posn, d_model) and the keys and values of all
        past_posn + new_posn positions.
        Trap: new query i sits at position past_posn + i and sees every key up to it: pass past_posn to
        apply_causal_mask (the mask of attention.py), which otherwise anchors the mask at the first key.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()


class CachedTransformerBlock(TransformerBlock):
    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.attn = CachedAttention(cfg)

    def forward(
        self, resid_pre: Float[Tensor, "batch new_posn d_model"], past: KeysValues | None = None
    ) -> tuple[Float[Tensor, "batch new_posn d_model"], KeysValues]:
        """Given: the block of block.py, its attention reading and extending the cache."""
        attn_out, keys_values = self.attn(self.ln1(resid_pre), past)
        resid_mid = resid_pre + attn_out
        return resid_mid + self.mlp(self.ln2(resid_mid)), keys_values


class CachedTransformer(Transformer):
    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.blocks = nn.ModuleList([CachedTransformerBlock(cfg) for _ in range(cfg.n_layers)])

    def forward(
        self, tokens: Int[Tensor, "batch new_posn"], kv_cache: KeyValueCache | None = None
    ) -> tuple[Float[Tensor, "batch new_posn d_vocab"], KeyValueCache]:
        """The model of transformer.py on the new tokens only, given the cache of the tokens before them.

        Shapes: tokens (batch, new_posn) -> logits (batch, new_posn, d_vocab) and a cache with one
        (keys, values) pair per layer, each (batch, past_posn + new_posn, n_heads, d_head).
        Trap: the new tokens' positions start at the cache's length, not at 0 (PosEmbed's past_kv_pos_offset).
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()


class CachedTransformerSampler(TransformerSampler):
    @torch.inference_mode()
    def sample(self, prompt: str, max_tokens_generated: int = 100, **kwargs) -> str:
        """TransformerSampler.sample with a CachedTransformer: the prompt goes in once, then each new token alone.

        Shapes: the prompt (1, posn), then one token (1, 1) per step, with the cache returned by the
        step before; the logits are (1, new_posn, d_vocab).
        Trap: sample_next_token still gets every id so far (the frequency penalty counts them).
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()
