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
        ### BEGIN SOLUTION
        per_head = "batch posn d_model, n_heads d_model d_head -> batch posn n_heads d_head"
        projections = ((self.W_Q, self.b_Q), (self.W_K, self.b_K), (self.W_V, self.b_V))
        q, k, v = (einops.einsum(normalized_resid_pre, W, per_head) + b for W, b in projections)
        past_posn = 0
        if past is not None:
            past_posn = past[0].shape[1]
            k, v = torch.cat([past[0], k], dim=1), torch.cat([past[1], v], dim=1)
        attn_scores = einops.einsum(
            q, k, "batch posn_Q n_heads d_head, batch posn_K n_heads d_head -> batch n_heads posn_Q posn_K"
        )
        attn_pattern = self.apply_causal_mask(attn_scores / self.cfg.d_head**0.5, past_posn).softmax(dim=-1)
        z = einops.einsum(
            v, attn_pattern, "batch posn_K n_heads d_head, batch n_heads posn_Q posn_K -> batch posn_Q n_heads d_head"
        )
        attn_out = einops.einsum(
            z, self.W_O, "batch posn_Q n_heads d_head, n_heads d_head d_model -> batch posn_Q d_model"
        )
        return attn_out + self.b_O, (k, v)
        ### END SOLUTION


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
        ### BEGIN SOLUTION
        past_posn = 0 if kv_cache is None else kv_cache[0][0].shape[1]
        residual = self.embed(tokens) + self.pos_embed(tokens, past_posn)
        new_cache = []
        for layer, block in enumerate(self.blocks):
            residual, keys_values = block(residual, None if kv_cache is None else kv_cache[layer])
            new_cache.append(keys_values)
        return self.unembed(self.ln_final(residual)), new_cache
        ### END SOLUTION


class CachedTransformerSampler(TransformerSampler):
    @torch.inference_mode()
    def sample(self, prompt: str, max_tokens_generated: int = 100, **kwargs) -> str:
        """TransformerSampler.sample with a CachedTransformer: the prompt goes in once, then each new token alone.

        Shapes: the prompt (1, posn), then one token (1, 1) per step, with the cache returned by the
        step before; the logits are (1, new_posn, d_vocab).
        Trap: sample_next_token still gets every id so far (the frequency penalty counts them).
        """
        ### BEGIN SOLUTION
        input_ids = self.tokenizer.encode(prompt, return_tensors="pt")[0]
        new_tokens, kv_cache = input_ids, None
        for _ in range(max_tokens_generated):
            logits, kv_cache = self.model(new_tokens[None], kv_cache)
            next_token = self.sample_next_token(input_ids, logits[0, -1], **kwargs)
            new_tokens = torch.tensor([next_token])
            input_ids = torch.cat([input_ids, new_tokens])
            if next_token == self.tokenizer.eos_token_id:
                break
        return self.tokenizer.decode(input_ids)
        ### END SOLUTION
