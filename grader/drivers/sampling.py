"""Drivers of the sampling checks: the learner's sampler on the grader's stand-in model and tokenizer.

Beams travel as rows (see `beam_rows`); in `filter`'s answer, group 1 holds the finished beams.
"""

from __future__ import annotations

import inspect

import torch

from . import beam_rows, tensor_text, text_tensor
from .stand_ins import TableModel, Tokenizer


def plain(arg: torch.Tensor):
    """A 0-d tensor as the Python number the learner's signature asks for."""
    return arg.item() if arg.ndim == 0 else arg


def learner_method(ctx, cls_name: str, method: str | None = None):
    """The learner's `cls_name.method` (the check's method by default), remembered as the place to point at."""
    function = getattr(ctx.package.attribute("sampling", cls_name), method or ctx.target["method"])
    ctx.point_at(inspect.unwrap(function))  # past torch.inference_mode
    return function


def call(ctx, args) -> torch.Tensor:
    """One call of a static method of TransformerSampler."""
    return torch.as_tensor(learner_method(ctx, "TransformerSampler")(*map(plain, args)))


def draw(ctx, args) -> torch.Tensor:
    """How often each token comes out of `draws` calls of a sampling method: counts (d_vocab,)."""
    method = learner_method(ctx, "TransformerSampler")
    logits, options = args[0], [plain(arg) for arg in args[1:]]
    d_vocab = logits.shape[-1]
    counts = [0] * d_vocab
    for _ in range(int(ctx.tensor("draws"))):
        token = int(method(logits.clone(), *options))
        if not 0 <= token < d_vocab:
            raise ValueError(
                f"{ctx.target['method']} returned token {token}, outside the vocabulary (0 to {d_vocab - 1})"
            )
        counts[token] += 1
    return torch.tensor(counts, dtype=torch.float64)


def stand_ins(ctx) -> tuple[TableModel, Tokenizer]:
    return TableModel(ctx.tensor("table")), Tokenizer(ctx.tensor("tokenizer"))


def sample(ctx, args) -> torch.Tensor:
    """TransformerSampler.sample, greedy, on the table model."""
    learner_method(ctx, "TransformerSampler", "sample")
    return greedy_text(ctx, ctx.package.attribute("sampling", "TransformerSampler")(*stand_ins(ctx)))


def greedy_text(ctx, sampler) -> torch.Tensor:
    """What `sampler.sample` writes greedily from the case's prompt, end-of-text and all."""
    text = sampler.sample(tensor_text(ctx.tensor("prompt")), int(ctx.tensor("max_tokens_generated")), temperature=0.0)
    return text_tensor(checked_text(text, f"{type(sampler).__name__}.sample"))


def checked_text(text, label: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{label} returned a {type(text).__name__}, not a str")
    return text


def learner_beams(ctx, logprob_sums: torch.Tensor, tokens: torch.Tensor):
    model, tokenizer = stand_ins(ctx)
    return ctx.package.attribute("sampling", "Beams")(
        model=model, tokenizer=tokenizer, logprob_sums=logprob_sums, tokens=tokens
    )


def beams_of(*beams_objects) -> torch.Tensor:
    return beam_rows([(beams.logprob_sums, beams.tokens.tolist()) for beams in beams_objects])


def generate(ctx, args) -> torch.Tensor:
    """Beams.generate(k, no_repeat_ngram_size) (0 meaning None) on the table model."""
    logprob_sums, tokens, k, ngram = args
    learner_method(ctx, "Beams")
    return beams_of(learner_beams(ctx, logprob_sums, tokens).generate(int(k), int(ngram) or None))


def filter_beams(ctx, args) -> torch.Tensor:
    """Beams.filter(k): the continuing beams (group 0), then the finished ones (group 1)."""
    logprob_sums, tokens, k = args
    learner_method(ctx, "Beams")
    continuing, finished = learner_beams(ctx, logprob_sums, tokens).filter(int(k))
    return beams_of(continuing, finished)


def beam_search(ctx, args) -> torch.Tensor:
    """TransformerSampler.beam_search on the table model; each result's text turned back into token ids."""
    num_return_sequences, num_beams, max_new_tokens, ngram = (int(arg) for arg in args)
    model, tokenizer = stand_ins(ctx)
    sampler = ctx.package.attribute("sampling", "TransformerSampler")(model, tokenizer)
    learner_method(ctx, "TransformerSampler", "beam_search")
    results = sampler.beam_search(
        tensor_text(ctx.tensor("prompt")), num_return_sequences, num_beams, max_new_tokens, ngram or None
    )
    texts = [checked_text(text, "TransformerSampler.beam_search") for _, text in results]
    return beam_rows([([logprob for logprob, _ in results], [tokenizer.encode(text) for text in texts])])


def cached_model(ctx, args) -> torch.Tensor:
    """The learner's CachedTransformer loaded with the reference weights.

    A logits case (args: tokens, chunk sizes) feeds the tokens chunk by chunk, each chunk with the
    cache of the ones before, and returns all the logits; the sampling case (no args: its inputs
    are named) returns the text CachedTransformerSampler samples greedily.
    """
    try:
        model = ctx.module(ctx.package.attribute("kv_cache", "CachedTransformer"))
    except LookupError as missing:  # an optional bonus: a package without it has simply not done it yet
        raise NotImplementedError(str(missing)) from None
    ctx.point_at(type(model).forward)
    if not args:
        return greedy_text(
            ctx,
            ctx.package.attribute("kv_cache", "CachedTransformerSampler")(model, Tokenizer(ctx.tensor("tokenizer"))),
        )
    tokens, chunk_sizes = args
    logits, kv_cache, start = [], None, 0
    for size in chunk_sizes.tolist():
        chunk_logits, kv_cache = model(tokens[:, start : start + size], kv_cache)
        logits.append(chunk_logits)
        start += size
    return torch.cat(logits, dim=1)
