"""The grader's own parts of the course beyond the model (`stand_in_transformer` holds the model's): a head's
circuits and a sampler, for a learner's file that imports interp.py or sampling.py where that file does not import
(`grader.learner.stand_ins`). Written from their definitions with torch's functions, not from an exercise's solution.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

# The parts of the course's files this module stands in for (`grader.learner.stand_ins`)
__all__ = ["qk_circuit", "ov_circuit", "TransformerSampler"]


def qk_circuit(attn, head: int) -> Tensor:
    """The head's bilinear form on (query, key) residual vectors, queries along the rows."""
    return torch.mm(attn.W_Q[head], attn.W_K[head].transpose(0, 1))


def ov_circuit(attn, head: int) -> Tensor:
    """What the head writes for what it reads, read along the rows."""
    return torch.mm(attn.W_V[head], attn.W_O[head])


class TransformerSampler:
    """sampling.py's sampler: a model's next token by temperature, frequency penalty, then top-k, top-p or the
    whole distribution; greedy at temperature 0."""

    def __init__(self, model, tokenizer):
        self.model, self.cfg, self.tokenizer = model, model.cfg, tokenizer

    @torch.inference_mode()
    def sample(self, prompt: str, max_tokens_generated: int = 100, **kwargs) -> str:
        ids = self.tokenizer.encode(prompt, return_tensors="pt")[0]
        for _token in range(max_tokens_generated):
            token = self.sample_next_token(ids, self.model(ids[-self.cfg.n_ctx :].unsqueeze(0))[0, -1], **kwargs)
            ids = torch.cat([ids, ids.new_tensor([token])])
            if token == self.tokenizer.eos_token_id:
                break
        return self.tokenizer.decode(ids)

    @staticmethod
    def sample_next_token(
        input_ids: Tensor,
        logits: Tensor,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 0.0,
        frequency_penalty: float = 0.0,
        seed: int | None = None,
    ) -> int:
        if seed is not None:
            torch.manual_seed(seed)
        if temperature == 0:
            return TransformerSampler.greedy_search(logits)
        logits = TransformerSampler.apply_frequency_penalty(input_ids, logits / temperature, frequency_penalty)
        if top_k:
            return TransformerSampler.sample_top_k(logits, top_k)
        if top_p:
            return TransformerSampler.sample_top_p(logits, top_p)
        return TransformerSampler.sample_basic(logits)

    @staticmethod
    def greedy_search(logits: Tensor) -> int:
        return int(torch.argmax(logits))

    @staticmethod
    def apply_temperature(logits: Tensor, temperature: float) -> Tensor:
        return torch.div(logits, temperature)

    @staticmethod
    def apply_frequency_penalty(input_ids: Tensor, logits: Tensor, freq_penalty: float) -> Tensor:
        return logits - freq_penalty * torch.bincount(input_ids, minlength=logits.shape[-1]).to(logits)

    @staticmethod
    def sample_basic(logits: Tensor) -> int:
        return int(torch.multinomial(F.softmax(logits, dim=-1), 1))

    @staticmethod
    def sample_top_k(logits: Tensor, k: int) -> int:
        kept = torch.topk(logits, k)
        return int(kept.indices[TransformerSampler.sample_basic(kept.values)])

    @staticmethod
    def sample_top_p(logits: Tensor, top_p: float, min_tokens_to_keep: int = 1) -> int:
        ordered = torch.sort(logits, descending=True)
        before = F.softmax(ordered.values, dim=-1).cumsum(-1) - F.softmax(ordered.values, dim=-1)
        kept = max(int((before < top_p).sum()), min_tokens_to_keep)
        return int(ordered.indices[TransformerSampler.sample_basic(ordered.values[:kept])])
