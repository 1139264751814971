"""What the two concat checks share: the model at each d_token, its token sets, the cases' frame and the slips both
checks name.

The model is the small induction model's blocks, ln_final and unembedding, with a token half (the first d_token
columns of its W_E) and a position half (the other columns of its W_pos). transformer_lens runs it as the same model
with W_E padded with zeros to [W_E | 0] and W_pos to [0 | W_pos]: their sum is exactly the concatenation, since
[a | 0] + [0 | b] = [a | b] and adding a zero rounds nothing. The learner's ConcatTransformer is built at the small
model's Config and d_token and loaded with the halves (a case's `config` and `overrides`). Torch is imported by the
builder's process only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, driven
from grader.checks.model._common import ONE_POSITION, generator

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import Tensor

    from grader.builder.interface import Reference

D_TOKENS = (48, 16)  # of the small model's d_model 64: a wide token half, then a narrow one
TOKENS_SALT = 600_011  # the token sets' generators are their own: no other check's ids
FROM_PADDED = "transformer_lens, on the small model with each half padded with zeros to d_model"

SWAPPED = (
    "ConcatTransformer.residual's halves are in the other order: the token half comes first, then the position half "
    "(the weights read the stream in that order)"
)
BY_TOKEN_ID = (
    "ConcatTransformer.residual's position half is looked up by token id: each position gets its own row, whatever "
    "its token (self.pos_embed(tokens) reads only the shape of tokens)"
)
# A slip of widths never runs: the learner's module does not load, and what a case holds of it is the shape it gives
# a parameter (grader.host.weights_diagnosis.weights_mismatch).
POSITION_WIDTH = (
    "pos_embed.W_pos is (n_ctx, d_model): PosEmbed was built at cfg.d_model, so the stream would be d_token + d_model "
    "wide; build it at cfg.d_model - d_token, so that the two halves add up to d_model"
)
TOKEN_WIDTH = (
    "embed.W_E is (d_vocab, d_model): Embed was built at cfg.d_model, so the stream would be wider than d_model; "
    "build it at d_token, so that the two halves add up to d_model"
)


def concat(method: str):
    """ConcatTransformer's `method` of exercises/positions.py, through the driver that builds it at a case's d_token."""
    return driven("positions", "ConcatTransformer", "concat", method=method)


def halves(ref: Reference, d_token: int) -> tuple[Reference, dict[str, Tensor]]:
    """transformer_lens's model at d_token, each half padded with zeros, and the learner's parameters: the halves
    themselves, and every other parameter the small model's."""
    import torch

    small = ref.induction_model()
    own = small.parameters_of("")
    token_half = own["embed.W_E"][:, :d_token].contiguous()
    position_half = own["pos_embed.W_pos"][:, d_token:].contiguous()
    padded = own | {
        "embed.W_E": torch.cat([token_half, torch.zeros(small.d_vocab, small.d_model - d_token)], dim=-1),
        "pos_embed.W_pos": torch.cat([torch.zeros(small.n_ctx, d_token), position_half], dim=-1),
    }
    learner = own | {"embed.W_E": token_half, "pos_embed.W_pos": position_half}
    return small.with_parameters(padded, f"concat-{d_token}"), learner


def token_sets(model: Reference) -> dict[str, tuple[Tensor, str]]:
    """Name -> (tokens, hint). Ids all below n_ctx first: rows of the position half taken by token id then give
    values, not an IndexError, so that slip is named; then ids from the whole vocabulary, the whole context, and one
    position."""
    import torch

    def draw(high: int, shape: tuple[int, int], salt: int) -> Tensor:
        return torch.randint(0, high, shape, generator=generator(model, TOKENS_SALT + salt))

    return {
        "small_ids": (draw(model.n_ctx, (2, 9), 0), ""),
        "random": (draw(model.d_vocab, (2, 12), 1), ""),
        "full_context": (draw(model.d_vocab, (1, model.n_ctx), 2), ""),
        "one_position": (torch.tensor([[model.bos]]), ONE_POSITION),
    }


def width_mistakes(model: Reference) -> dict[str, Tensor]:
    """The width slips, each as the parameter it misshapes (d_model wide instead of d_token or d_model - d_token)."""
    import torch

    return {
        POSITION_WIDTH: torch.zeros(model.n_ctx, model.d_model),
        TOKEN_WIDTH: torch.zeros(model.d_vocab, model.d_model),
    }


def residual_mistakes(learner: dict[str, Tensor], tokens: Tensor) -> dict[str, Tensor]:
    """The stream each residual slip gives: the halves swapped, or the position half's rows taken by token id
    (only where every id is a row of it)."""
    import torch

    token_rows, position_half = learner["embed.W_E"][tokens], learner["pos_embed.W_pos"]
    position_rows = position_half[: tokens.shape[-1]].expand(tokens.shape[0], -1, -1)
    mistakes = {SWAPPED: torch.cat([position_rows, token_rows], dim=-1)}
    if int(tokens.max()) < len(position_half):
        mistakes[BY_TOKEN_ID] = torch.cat([token_rows, position_half[tokens]], dim=-1)
    return mistakes


def concat_cases(ref: Reference, answer: Callable[[Reference, str, dict[str, Tensor]], tuple]) -> list[Case]:
    """The cases of each d_token in turn, on every token set: `answer(model, tokens_name, learner)` gives a case's
    expected answer and its named mistakes. The learner's module is built once per d_token, at the first case of
    its d_token, which alone carries the width slips: a module that does not load fails there."""
    import torch

    cases = []
    for d_token in D_TOKENS:
        model, learner = halves(ref, d_token)
        for index, (name, (tokens, hint)) in enumerate(token_sets(model).items()):
            model.tokens[name] = tokens
            expected, mistakes = answer(model, name, learner)
            if index == 0:
                mistakes |= width_mistakes(model)
            fields = {"overrides": learner, "config": model.config_fields(), "hint": hint, "mistakes": mistakes}
            cases.append(Case(f"d_token{d_token}.{name}", [tokens, torch.tensor(d_token)], expected, **fields))
    return cases
