"""PosEmbed: GPT-2's positions, from 0 or after cached tokens, repeated over the batch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Run, Target
from grader.checks.model._common import OFFSET_DRIVER, ONE_POSITION, TOKEN_SETS, generator, offset_args, one_position

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

POSITIONS_FROM_ZERO = (
    "the positions start at 0, not at past_kv_pos_offset: these tokens follow that many cached ones, so the first "
    "is at position past_kv_pos_offset"
)


FLATTENED = (
    "the positions run on across the flattened batch (range(tokens.numel())){}: each sequence starts again at "
    "past_kv_pos_offset, so take seq_len rows of W_pos and repeat them over the batch"
)


def batch_axis_mistakes(W_pos: Tensor, tokens: Tensor, past_kv_pos_offset: int = 0) -> dict[str, Tensor]:
    """The positions' rows without the batch axis, or with one of size 1: either broadcasts when added to the
    token embedding, so the learner's whole model runs and even matches GPT-2's, but PosEmbed itself is wrong. And
    rows numbered across the flattened batch, as they are or shaped (batch, posn, d_model), where W_pos has them."""
    rows = W_pos[past_kv_pos_offset : past_kv_pos_offset + tokens.shape[-1]]
    must = "PosEmbed must return (batch, posn, d_model): repeat the rows over the batch"
    mistakes = {
        f"the batch axis is missing: (posn, d_model) broadcasts when added, so your model runs, but {must}": rows,
        f"the batch axis has size 1: (1, posn, d_model) broadcasts when added, so your model runs, but {must}": rows[
            None
        ],
    }
    flat = W_pos[past_kv_pos_offset : past_kv_pos_offset + tokens.numel()]
    if tokens.shape[0] > 1 and len(flat) == tokens.numel():  # one sequence alone numbers its positions right
        mistakes[FLATTENED.format(" and the batch axis is gone")] = flat
        mistakes[FLATTENED.format("")] = flat.reshape(*tokens.shape, -1)
    return mistakes


def pos_embed_cases(ref: Reference) -> list[Case]:
    import torch

    W_pos = ref.parameters_of("pos_embed")["W_pos"]

    def case(name, tokens, mistakes=None, hint="", past_kv_pos_offset=0):
        mistakes = (mistakes or {}) | batch_axis_mistakes(W_pos, tokens, past_kv_pos_offset)
        out = ref.call("pos_embed", tokens, past_kv_pos_offset)
        args = offset_args(tokens, past_kv_pos_offset)
        # One step, the output: a wrong one is located at the line of the learner's that computed it.
        return Case(name, args, out, weights="pos_embed.", hint=hint, steps={"output": out}, mistakes=mistakes)

    # Token ids below n_ctx first: looking positions up by token id then gives wrong values
    # rather than an index error, so the mistake is reported as a difference.
    small_ids = torch.randint(0, ref.n_ctx, (2, 9), generator=ref.generator)
    by_id = {"positions are looked up by token id: index W_pos by position (0, 1, 2, ...)": W_pos[small_ids]}
    cases = [case("small_ids", small_ids, by_id), *(case(name, ref.tokens[name]) for name in TOKEN_SETS)]
    # The whole context: every row of W_pos, the last one (n_ctx - 1) included.
    full = torch.randint(0, ref.d_vocab, (1, ref.n_ctx), generator=generator(ref, 1))
    cases += [case("full_context", full), case("one_position", ref.tokens[one_position(ref)], hint=ONE_POSITION)]
    # Tokens after cached ones (the KV cache's chunks), the last at the context's last position.
    after_cache = {
        "random.offset5": (ref.tokens["random"], 5),
        "one_token.offset_last": (small_ids[:1, :1], ref.n_ctx - 1),
    }
    for name, (tokens, offset) in after_cache.items():
        from_zero = W_pos[: tokens.shape[-1]].expand(tokens.shape[0], -1, -1)
        cases.append(case(name, tokens, {POSITIONS_FROM_ZERO: from_zero}, POSITIONS_FROM_ZERO, offset))
    return cases


PAGE = "03-pos-embed.md"
CHECK = Check(
    "pos_embed",
    1,
    Target("embedding", "PosEmbed", driver=OFFSET_DRIVER),
    "positional embedding",
    pos_embed_cases,
    run=Run(capture=("locals",)),
)
