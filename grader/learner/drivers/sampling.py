"""Drivers of the sampling checks: the learner's sampler on the grader's stand-in model and tokenizer.

Beams travel as rows (see `beam_rows`); in `filter`'s answer, group 1 holds the finished beams. What the
learner's Beams methods return is checked before the grader's code reads it, so that a wrong kind of value is
named at the method that returned it ("Beams.filter returned a list as tokens; return tensors") rather than
where the grader's code, or the given beam_search, trips over it.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from grader.learner.drivers import beam_rows, text_tensor
from grader.learner.drivers.stand_ins import TableModel, Tokenizer
from grader.shared.formats import tensor_text


def plain(arg: torch.Tensor):
    """A 0-d tensor as the Python number the learner's signature asks for."""
    return arg.item() if arg.ndim == 0 else arg


def learner_method(ctx, cls_name: str, method: str | None = None):
    """The learner's `cls_name.method` (the check's method by default), remembered as the place to point at."""
    function = getattr(ctx.package.attribute("sampling", cls_name), method or ctx.target.method)
    ctx.point_at(function)
    return function


def call(ctx, args) -> torch.Tensor:
    """One call of a static method of TransformerSampler."""
    return torch.as_tensor(learner_method(ctx, "TransformerSampler")(*map(plain, args)))


@torch.inference_mode()  # as TransformerSampler.sample calls it; autograd's bookkeeping skipped, ~10% a draw
def draw(ctx, args) -> torch.Tensor:
    """How often each token comes out of `draws` calls of a sampling method: counts (d_vocab,)."""
    method = learner_method(ctx, "TransformerSampler")
    logits, options = args[0], [plain(arg) for arg in args[1:]]
    d_vocab = logits.shape[-1]
    counts = [0] * d_vocab
    for _ in range(int(ctx.tensor("draws"))):
        token = int(method(logits.clone(), *options))
        if not 0 <= token < d_vocab:
            raise ValueError(f"{ctx.target.method} returned token {token}, outside the vocabulary (0 to {d_vocab - 1})")
        counts[token] += 1
    return torch.tensor(counts, dtype=torch.float64)


def stand_ins(ctx) -> tuple[TableModel, Tokenizer]:
    return TableModel(ctx.tensor("table")), Tokenizer(ctx.tensor("tokenizer"))


def sample(ctx, args) -> torch.Tensor:
    """TransformerSampler.sample, greedy, on the table model."""
    learner_method(ctx, "TransformerSampler", "sample")
    return greedy_text(ctx, ctx.package.attribute("sampling", "TransformerSampler")(*stand_ins(ctx)))


def greedy_text(ctx, sampler, **settings) -> torch.Tensor:
    """What `sampler.sample` writes from the case's prompt, end-of-text and all: greedily, unless `settings` (the
    keyword arguments of sample_next_token) say otherwise."""
    prompt, max_tokens = tensor_text(ctx.tensor("prompt")), int(ctx.tensor("max_tokens_generated"))
    text = sampler.sample(prompt, max_tokens, **({"temperature": 0.0} | settings))
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


def returned(value) -> str:
    """What a learner's function returned, as a message names it: "None", "a list"."""
    return "None" if value is None else f"a {type(value).__name__}"


BEAMS_FIELDS = (("logprob_sums", 1, "(beams,)"), ("tokens", 2, "(beams, positions)"))


def beams_problem(value) -> str | None:
    """Why `value` is not Beams as the grader reads them (tensors of log-prob sums and of token ids), or None."""
    if value is None:
        return "returned None where Beams are expected: is its `return` missing?"
    if not all(hasattr(value, field) for field, _, _ in BEAMS_FIELDS):
        return f"returned {returned(value)} where Beams are expected"
    for field, ndim, axes in BEAMS_FIELDS:
        held = getattr(value, field)
        if not isinstance(held, torch.Tensor):
            return f"returned {returned(held)} as {field}; return tensors"
        if held.ndim != ndim:
            return f"returned {field} of shape {tuple(held.shape)}; expected {axes}"
    if len(value.logprob_sums) != len(value.tokens):
        return f"returned {len(value.logprob_sums)} log-prob sums for {len(value.tokens)} beams of tokens"
    return None


def pair_problem(value) -> str | None:
    """Why `value` is not filter's pair of Beams (continuing, finished), or None."""
    if not (isinstance(value, tuple | list) and len(value) == 2):
        return f"returned {returned(value)}, not a pair of Beams (continuing, finished)"
    return next(filter(None, map(beams_problem, value)), None)


RETURNS = {"generate": beams_problem, "filter": pair_problem}  # the learner's Beams methods, and what they return


class WrongReturn(Exception):
    """A learner's Beams method returned what it does not return (`checked`); raised again by `placed_at_method`."""


def checked(ctx, name: str, value):
    """`value`, which the learner's Beams method `name` returned, if it is what that method returns; else
    WrongReturn, which says what it returned, pointing at the method."""
    problem = RETURNS[name](value)
    if problem:
        ctx.point_at(getattr(ctx.package.attribute("sampling", "Beams"), name))
        raise WrongReturn(f"Beams.{name} {problem}")
    return value


@contextlib.contextmanager
def placed_at_method():
    """A WrongReturn raised again as a TypeError from the driver, outside the learner's frames: the error is then
    placed at the method that returned the value, not at the line of the given loop that called it."""
    try:
        yield
    except WrongReturn as wrong:
        raise TypeError(str(wrong)) from None


def generate(ctx, args) -> torch.Tensor:
    """Beams.generate(k, no_repeat_ngram_size) (0 meaning None) on the table model."""
    logprob_sums, tokens, k, ngram = args
    learner_method(ctx, "Beams")
    extended = learner_beams(ctx, logprob_sums, tokens).generate(int(k), int(ngram) or None)
    with placed_at_method():
        return beams_of(checked(ctx, "generate", extended))


def filter_beams(ctx, args) -> torch.Tensor:
    """Beams.filter(k): the continuing beams (group 0), then the finished ones (group 1)."""
    logprob_sums, tokens, k = args
    learner_method(ctx, "Beams")
    kept = learner_beams(ctx, logprob_sums, tokens).filter(int(k))
    with placed_at_method():
        continuing, finished = checked(ctx, "filter", kept)
    return beams_of(continuing, finished)


@contextlib.contextmanager
def returns_checked(ctx, beams_class):
    """The learner's Beams methods, while the given beam_search calls them, each checked as it returns."""
    own = {name: beams_class.__dict__.get(name) for name in RETURNS}
    for name in RETURNS:
        setattr(beams_class, name, checking(ctx, name, getattr(beams_class, name)))
    try:
        yield
    finally:
        for name, method in own.items():
            if method is None:
                delattr(beams_class, name)
            else:
                setattr(beams_class, name, method)


def checking(ctx, name: str, method):
    @functools.wraps(method)
    def checked_method(self, *args, **kwargs):
        return checked(ctx, name, method(self, *args, **kwargs))

    return checked_method


def beam_search(ctx, args) -> torch.Tensor:
    """TransformerSampler.beam_search on the table model; each result's text turned back into token ids.

    beam_search is given, so a failure points at no line of it: at the learner's Beams method whose value was
    wrong where that is known here (`checked`), else only at the file, and the parts' own checks say the rest."""
    num_return_sequences, num_beams, max_new_tokens, ngram = (int(arg) for arg in args)
    model, tokenizer = stand_ins(ctx)
    sampler = ctx.package.attribute("sampling", "TransformerSampler")(model, tokenizer)
    with placed_at_method(), returns_checked(ctx, ctx.package.attribute("sampling", "Beams")):
        results = sampler.beam_search(
            tensor_text(ctx.tensor("prompt")), num_return_sequences, num_beams, max_new_tokens, ngram or None
        )
    texts = [checked_text(text, "TransformerSampler.beam_search") for _, text in results]
    return beam_rows([([logprob for logprob, _ in results], [tokenizer.encode(text) for text in texts])])


def defined(ctx, file: str, *names: str) -> list:
    """The learner's methods `names` ("Class.method") of `file` that exist: where a named mistake in one is located."""
    found = []
    for name in names:
        cls, method = name.split(".")
        try:
            found.append(getattr(ctx.package.attribute(file, cls), method))
        except (LookupError, AttributeError):
            continue
    return found


def cached_model(ctx, args) -> torch.Tensor:
    """The learner's CachedTransformer loaded with the reference weights.

    A logits case (args: tokens, chunk sizes) feeds the tokens chunk by chunk, each chunk with the
    cache of the ones before, and returns all the logits; the sampling case (no args: its inputs
    are named) returns the text CachedTransformerSampler samples with the case's temperature and frequency penalty.
    """
    try:
        model = ctx.module(ctx.package.attribute("kv_cache", "CachedTransformer"))
    except LookupError as missing:  # an optional bonus: a package without it has simply not done it yet
        raise NotImplementedError(str(missing)) from None
    ctx.point_at(
        type(model).forward, also=defined(ctx, "kv_cache", "CachedAttention.forward", "CachedTransformerSampler.sample")
    )
    if not args:
        sampler = ctx.package.attribute("kv_cache", "CachedTransformerSampler")(
            model, Tokenizer(ctx.tensor("tokenizer"))
        )
        settings = {name: float(ctx.tensor(name)) for name in ("temperature", "frequency_penalty")}
        return greedy_text(ctx, sampler, **settings, seed=0)
    tokens, chunk_sizes = args
    logits, kv_cache, start = [], None, 0
    for size in chunk_sizes.tolist():
        chunk_logits, kv_cache = model(tokens[:, start : start + size], kv_cache)
        logits.append(chunk_logits)
        start += size
    return torch.cat(logits, dim=1)
