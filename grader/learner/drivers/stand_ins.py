"""A model and a tokenizer for driving a learner's sampler without the learner's own model."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from grader.shared.formats import END_OF_TEXT, tensor_text


class TableModel(nn.Module):
    """A language model read from a table: the logits at position p depend only on p and the token there.

    Every next-token distribution is known in advance, so every expected output can be computed
    exactly; and a sampler that fails here fails because of the sampler.
    """

    def __init__(self, table: Float[Tensor, "n_ctx d_vocab d_vocab"]):
        super().__init__()
        n_ctx, d_vocab, _ = table.shape
        self.cfg = SimpleNamespace(n_ctx=n_ctx, d_vocab=d_vocab)
        self.table = nn.Parameter(table, requires_grad=False)

    def forward(self, tokens: Int[Tensor, "batch posn"]) -> Float[Tensor, "batch posn d_vocab"]:
        # Said here, the learner's line that called the model is where the error is placed (not this file's).
        if not isinstance(tokens, Tensor):
            raise TypeError(f"the model takes a tensor of token ids, not a {type(tokens).__name__}")
        if tokens.is_floating_point():
            raise TypeError(f"the model takes integer token ids, not {tokens.dtype}")
        positions = torch.arange(tokens.shape[-1], device=tokens.device)
        return self.table[positions, tokens]


class Tokenizer:
    """What a sampler uses of transformers' GPT2TokenizerFast, over a `tokenizers.Tokenizer`.

    (transformers itself may not be imported in the learner's process.)
    """

    eos_token = END_OF_TEXT

    def __init__(self, serialized: Tensor):
        from tokenizers import Tokenizer as Backend

        self.backend = Backend.from_str(tensor_text(serialized))
        self.eos_token_id = self.bos_token_id = self.backend.token_to_id(END_OF_TEXT)

    def encode(self, text: str, return_tensors: str | None = None):
        ids = self.backend.encode(text).ids
        return torch.tensor([ids]) if return_tensors == "pt" else ids

    def __call__(self, text: str, return_tensors: str | None = None) -> dict:
        return {"input_ids": self.encode(text, return_tensors)}

    def decode(self, ids) -> str:
        ids = ids.reshape(-1).tolist() if isinstance(ids, Tensor) else [ids] if isinstance(ids, int) else list(ids)
        return self.backend.decode(ids, skip_special_tokens=False)

    def __len__(self) -> int:
        return self.backend.get_vocab_size()
