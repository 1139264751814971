"""The playground's drivers (`grader.host.play`): the learner's whole model on the typed text, and the learner's
sampler continuing it, in a check's process, confined as a check is.

`inside` returns the logits and leaves, as the case's captures (in `formats.PLAY_INSIDE`'s order), each layer's
attention pattern, the logit lens's top token and probability at each stream and position, and where the grader's
Transformer stood in for the learner's; `generate` returns the continuation's text and leaves its time per token, with
and without the learner's KV cache. The parts the learner has not written are the grader's already (the request's
`stand_ins`); a Transformer not written yet is the grader's whole model here.

A check's process stopped at its time leaves the stacks faulthandler writes shortly before (`formats.PLAY_STACKS` in
its scratch): the grader reads the file and line of the learner's loop there.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from grader.learner.drivers import stand_in_parts, stand_in_transformer, text_tensor
from grader.learner.drivers.stand_ins import Tokenizer
from grader.learner.package import learner_frame
from grader.shared.formats import PLAY_STACKS, PLAY_STACKS_AT, tensor_text

EMPTY = torch.zeros(0)


@contextlib.contextmanager
def stacks_before_timeout(ctx):
    """The stacks written to the scratch shortly before the check's time is up: where a loop of the learner's is."""
    # A forked check's temporary directory is its scratch (learner.server.use_scratch_for_temporary_files).
    with open(Path(tempfile.gettempdir()) / PLAY_STACKS, "w") as stacks:
        faulthandler.dump_traceback_later(settings(ctx)["timeout"] * PLAY_STACKS_AT, file=stacks)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()


def model(ctx) -> tuple[torch.nn.Module, str]:
    """The learner's Transformer loaded with GPT-2's weights, or the grader's where the learner's is not written yet
    (its constructor or forward raises NotImplementedError on one token); and which."""
    tokens = torch.zeros(1, 1, dtype=torch.long, device=ctx.device)
    try:
        learners = ctx.module(ctx.package.attribute("transformer", "Transformer"))
        learners(tokens)
        return learners, ""
    except NotImplementedError as error:
        place = learner_frame(error, ctx.package.path)
        if place is not None and place.file != "transformer.py":  # a part's: the grader's part stands in for it
            raise
        return ctx.stand_in(stand_in_transformer.Transformer), "not written yet"


class Patterns:
    """Each attention module's pattern, read from its forward's locals as it returns: the last tensor there of shape
    (batch, n_heads, query, key) whose rows are distributions (what the course names attn_pattern, by value, whatever
    the learner named it)."""

    def __init__(self, attentions: list, n_heads: int):
        self.layers = {id(module): layer for layer, module in enumerate(attentions)}
        self.n_heads, self.found = n_heads, {}

    def __enter__(self):
        sys.settrace(self._call)
        return self

    def __exit__(self, *exc):
        sys.settrace(None)

    def _call(self, frame, event, _arg):
        if event == "call" and id(frame.f_locals.get("self")) in self.layers and frame.f_code.co_name == "forward":
            return self._local
        return None

    def _local(self, frame, event, _arg):
        if event == "return":
            layer = self.layers[id(frame.f_locals["self"])]
            found = [value for value in frame.f_locals.values() if self._is_pattern(value)]
            if isinstance(frame.f_locals["self"], stand_in_transformer.Attention):  # no pattern in its locals
                found = [stand_in_pattern(frame.f_locals["self"], frame.f_locals["q"], frame.f_locals["k"])]
            if found:
                self.found[layer] = found[-1][0].detach().float().cpu()
        return self._local

    def _is_pattern(self, value) -> bool:
        if not isinstance(value, torch.Tensor) or value.ndim != 4 or value.shape[1] != self.n_heads:
            return False
        if value.shape[-1] != value.shape[-2] or not value.is_floating_point():
            return False
        rows = value.detach().float()
        return bool((rows >= 0).all() and torch.allclose(rows.sum(-1), torch.ones(()), atol=1e-3))

    def stacked(self, n_layers: int) -> torch.Tensor:
        """(n_layers, n_heads, query, key), or empty where a layer's pattern was not found."""
        if len(self.found) != n_layers:
            return EMPTY
        return torch.stack([self.found[layer] for layer in range(n_layers)])


def stand_in_pattern(attention, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The grader's own Attention's pattern, which its fused softmax never names: (batch, n_heads, query, key)."""
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    return attention.apply_causal_mask(scores).softmax(-1)


def lens(net, streams: list) -> tuple[torch.Tensor, torch.Tensor]:
    """The logit lens (the course's: ln_final, then the unembedding, on the stream before each block and after the
    last): each stream's and position's top probability and token id, (n_layers + 1, posn)."""
    probabilities = torch.stack([net.unembed(net.ln_final(stream))[0].float().softmax(-1) for stream in streams])
    top = probabilities.max(-1)
    return top.values, top.indices.float()


def inside(ctx, args) -> torch.Tensor:
    """The learner's model on the text: the logits, and its patterns, logit lens and stand-in as captures."""
    (tokens,) = args
    with stacks_before_timeout(ctx):
        net, stood_in = model(ctx)
        ctx.point_at(type(net).forward)
        blocks = list(getattr(net, "blocks", []))
        streams: list = []
        hooks = [block.register_forward_pre_hook(lambda _m, given: streams.append(given[0])) for block in blocks]
        hooks += [block.register_forward_hook(lambda _m, _given, out: streams.append(out)) for block in blocks[-1:]]
        attentions = [getattr(block, "attn", None) for block in blocks]
        try:
            with Patterns(attentions, ctx.package.config().n_heads) as patterns:
                logits = net(tokens)
        finally:
            for hook in hooks:
                hook.remove()
    if blocks and len(streams) == len(blocks) + 1:
        top_p, top_ids = lens(net, streams)
    else:
        top_p = top_ids = EMPTY
    said = json.dumps({"transformer": stood_in} if stood_in else {})
    ctx.captured = [patterns.stacked(len(blocks)), top_p, top_ids, text_tensor(said)]
    return logits


def settings(ctx) -> dict:
    """The sampler's keyword arguments, as the grader's process sent them."""
    return json.loads(tensor_text(ctx.tensor("settings")))


def timed(sampler, prompt: str, max_new_tokens: int, seed: int, kwargs: dict, tokenizer) -> tuple[str, float]:
    """The continuation and its milliseconds per token generated; the seed set once before, as GPT-2's is."""
    torch.manual_seed(seed)
    start = time.perf_counter()
    text = sampler.sample(prompt, max_new_tokens, **kwargs)
    generated = len(tokenizer.encode(text)) - len(tokenizer.encode(prompt))
    return text, 1000 * (time.perf_counter() - start) / max(generated, 1)


def sampler_of(ctx, file: str, name: str, net, tokenizer):
    """The learner's sampler class `name` of `file`, or None where it is not there."""
    try:
        return ctx.package.attribute(file, name)(net, tokenizer)
    except LookupError:
        return None


def generate(ctx, _args) -> torch.Tensor:
    """The learner's TransformerSampler (the grader's where it is not written yet) continuing the text, and the
    learner's CachedTransformerSampler where it is written, each timed: the text, and [ms per token, cached ms per
    token (NaN: no cache), whether the grader's sampler stood in] as the capture."""
    asked = settings(ctx)
    prompt, max_new, seed, kwargs = asked["text"], asked["max_new_tokens"], asked["seed"], asked["kwargs"]
    tokenizer = Tokenizer(ctx.tensor("tokenizer"))
    with stacks_before_timeout(ctx):
        net, _ = model(ctx)
        sampler = sampler_of(ctx, "sampling", "TransformerSampler", net, tokenizer)
        try:
            if sampler is None:
                raise NotImplementedError("no TransformerSampler")
            text, ms = timed(sampler, prompt, max_new, seed, kwargs, tokenizer)
            stood_in = 0.0
        except NotImplementedError:
            sampler = stand_in_parts.TransformerSampler(net, tokenizer)
            text, ms = timed(sampler, prompt, max_new, seed, kwargs, tokenizer)
            stood_in = 1.0
        cached_ms = cached(ctx, tokenizer, prompt, max_new, seed, kwargs)
    ctx.captured = [torch.tensor([ms, cached_ms, stood_in], dtype=torch.float64)]
    return text_tensor(text)


def cached(ctx, tokenizer, prompt: str, max_new: int, seed: int, kwargs: dict) -> float:
    """The learner's KV cache's ms per token on the same continuation; NaN where it is not written yet."""
    try:
        net = ctx.module(ctx.package.attribute("kv_cache", "CachedTransformer"))
        sampler = ctx.package.attribute("kv_cache", "CachedTransformerSampler")(net, tokenizer)
        return timed(sampler, prompt, max_new, seed, kwargs, tokenizer)[1]
    except (LookupError, NotImplementedError):
        return float("nan")
