"""Making the model talk: greedy decoding, temperature, frequency penalty, top-k, top-p and beam search.

The tokenizer is transformers' GPT2TokenizerFast, or anything with the same `encode(text,
return_tensors="pt")`, `decode(ids)` and `eos_token_id`.
"""

from dataclasses import dataclass
from typing import Any

import einops
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn
from torch.distributions import Categorical


class TransformerSampler:
    def __init__(self, model: nn.Module, tokenizer: Any):
        self.model = model
        self.cfg = model.cfg
        self.tokenizer = tokenizer

    @torch.inference_mode()
    def sample(self, prompt: str, max_tokens_generated: int = 100, **kwargs) -> str:
        """Generate up to max_tokens_generated tokens after prompt, one at a time; return all of it as text.

        Shapes: the prompt's ids (posn,); the model takes (1, posn) and returns (1, posn, d_vocab);
        the next token is drawn from the last position's logits with sample_next_token(..., **kwargs).
        Traps: append each new token to the input of the next step; stop right after end-of-text
        (tokenizer.eos_token_id), which stays in the text.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()

    @staticmethod
    def sample_next_token(
        input_ids: Int[Tensor, "posn"],
        logits: Float[Tensor, "d_vocab"],
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 0.0,
        frequency_penalty: float = 0.0,
        seed: int | None = None,
    ) -> int:
        """Given: temperature 0 is greedy; otherwise temperature, then the penalty, then one way of sampling."""
        assert input_ids.ndim == 1, "input_ids is one sequence of token ids"
        assert temperature >= 0 and top_k >= 0 and 0.0 <= top_p <= 1.0
        assert not (top_k and top_p), "use top_k or top_p, not both"
        if seed is not None:
            torch.manual_seed(seed)
        if temperature == 0:
            return TransformerSampler.greedy_search(logits)
        if temperature != 1.0:
            logits = TransformerSampler.apply_temperature(logits, temperature)
        if frequency_penalty != 0.0:
            logits = TransformerSampler.apply_frequency_penalty(input_ids, logits, frequency_penalty)
        if top_k > 0:
            return TransformerSampler.sample_top_k(logits, top_k)
        if top_p > 0.0:
            return TransformerSampler.sample_top_p(logits, top_p)
        return TransformerSampler.sample_basic(logits)

    @staticmethod
    def greedy_search(logits: Float[Tensor, "d_vocab"]) -> int:
        """The id of the most likely next token.

        Shapes: (d_vocab,) -> a Python int.
        Trap: greedy choices one at a time need not give the most likely sequence (see beam search).
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()

    @staticmethod
    def apply_temperature(logits: Float[Tensor, "d_vocab"], temperature: float) -> Float[Tensor, "d_vocab"]:
        """Scale the logits for temperature: below 1 sharpens the distribution, above 1 flattens it.

        Shapes: (d_vocab,) in and out.
        Trap: divide by the temperature; multiplying does the opposite.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()

    @staticmethod
    def apply_frequency_penalty(
        input_ids: Int[Tensor, "posn"], logits: Float[Tensor, "d_vocab"], freq_penalty: float
    ) -> Float[Tensor, "d_vocab"]:
        """Lower each token's logit by freq_penalty times the number of times it occurs in input_ids.

        Shapes: input_ids (posn,), logits (d_vocab,) -> (d_vocab,).
        Traps: a token seen three times is penalised three times; the counts need one entry per
        vocabulary id (torch.bincount's minlength).
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()

    @staticmethod
    def sample_basic(logits: Float[Tensor, "d_vocab"]) -> int:
        """Draw one token from the distribution softmax(logits).

        Shapes: (d_vocab,) -> a Python int.
        Trap: logits are not probabilities; Categorical(logits=...) applies the softmax for you.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()

    @staticmethod
    def sample_top_k(logits: Float[Tensor, "d_vocab"], k: int) -> int:
        """Draw one token from the k most likely ones only, their probabilities renormalised.

        Shapes: (d_vocab,) -> top k logits and ids (k,) -> a Python int, an id in the whole vocabulary.
        Trap: map the index drawn among the k back to its vocabulary id.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()

    @staticmethod
    def sample_top_p(logits: Float[Tensor, "d_vocab"], top_p: float, min_tokens_to_keep: int = 1) -> int:
        """Draw one token from the smallest set of most likely tokens whose probabilities add up to at
        least top_p (but never fewer than min_tokens_to_keep), their probabilities renormalised.

        Shapes: (d_vocab,) -> sorted probabilities and their cumulative sum (d_vocab,) -> a Python int.
        Traps: keep the token that takes the sum past top_p; then apply min_tokens_to_keep.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()

    @torch.inference_mode()
    def beam_search(
        self,
        prompt: str,
        num_return_sequences: int,
        num_beams: int,
        max_new_tokens: int,
        no_repeat_ngram_size: int | None = None,
    ) -> list[tuple[float, str]]:
        """Given: keep the num_beams best beams at every step and collect those that end in end-of-text.

        It stops once num_return_sequences beams have finished (then it returns the best finished
        ones) or after max_new_tokens (the best of the finished and the unfinished ones); best first.
        """
        assert num_return_sequences <= num_beams
        tokens = self.tokenizer.encode(prompt, return_tensors="pt")
        beams = Beams(self.model, self.tokenizer, torch.zeros(1), tokens)
        finished: list[tuple[float, str]] = []
        for _ in range(max_new_tokens):
            beams, newly_finished = beams.generate(num_beams, no_repeat_ngram_size).filter(num_beams)
            finished += newly_finished.logprobs_and_completions
            if len(finished) >= num_return_sequences:
                return best_first(finished)[:num_return_sequences]
        return best_first(finished + beams.logprobs_and_completions)[:num_return_sequences]


def best_first(results: list[tuple[float, str]]) -> list[tuple[float, str]]:
    return sorted(results, key=lambda result: result[0], reverse=True)


@dataclass
class Beams:
    """Candidate continuations: each one's tokens and the sum of its tokens' log-probabilities."""

    model: nn.Module
    tokenizer: Any
    logprob_sums: Float[Tensor, "batch"]
    tokens: Int[Tensor, "batch posn"]

    def new_beams(self, logprob_sums: Float[Tensor, "batch"], tokens: Int[Tensor, "batch posn"]) -> "Beams":
        return Beams(self.model, self.tokenizer, logprob_sums, tokens)

    def __getitem__(self, index) -> "Beams":
        return self.new_beams(self.logprob_sums[index], self.tokens[index])

    def __len__(self) -> int:
        return len(self.logprob_sums)

    @property
    def logprobs_and_completions(self) -> list[tuple[float, str]]:
        return [
            (float(logprob_sum), self.tokenizer.decode(tokens))
            for logprob_sum, tokens in zip(self.logprob_sums, self.tokens, strict=False)
        ]

    def banned_next_tokens(self, no_repeat_ngram_size: int, d_vocab: int) -> Bool[Tensor, "batch d_vocab"]:
        """True where a next token would complete an n-gram (n = no_repeat_ngram_size) already in the beam.

        Shapes: tokens (batch, posn) -> (batch, d_vocab).
        Trap: compare the beam's last n - 1 tokens with the first n - 1 of every earlier n-gram.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()

    def generate(self, k: int, no_repeat_ngram_size: int | None = None) -> "Beams":
        """Extend every beam by each of its k most likely next tokens (none that repeats an n-gram).

        Shapes: tokens (batch, posn) -> next-token log-probs (batch, d_vocab) -> top k (batch, k)
        -> beams (batch * k,) with tokens (batch * k, posn + 1).
        Traps: add log-probabilities (log_softmax), not logits or probabilities; with
        no_repeat_ngram_size set, a banned token's log-prob is -inf before the top k.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()

    def filter(self, k: int) -> tuple["Beams", "Beams"]:
        """The k beams with the highest log-prob sums, best first, split into (continuing, finished).

        Shapes: beams (batch,) -> two Beams of k beams between them.
        Traps: rank all beams before splitting; a beam has finished when its last token is
        end-of-text, and the finished ones are returned, not dropped.
        """
        # TODO: implement this (see the docstring above)
        raise NotImplementedError()
