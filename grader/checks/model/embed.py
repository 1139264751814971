"""Embed: GPT-2's token embedding, looked up for each token set."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Target
from grader.checks.model._common import LONG, ONE_POSITION, TOKEN_SETS, one_position

if TYPE_CHECKING:
    from grader.builder.interface import Reference


def embed_cases(ref: Reference) -> list[Case]:
    # After the prompt and a batch of two: hundreds of positions in one sequence, the last token id (BOS) first.
    names = (*TOKEN_SETS, ref.long_tokens(LONG))
    cases = [Case(name, [ref.tokens[name]], ref.activations(name)["hook_embed"], weights="embed.") for name in names]
    one = one_position(ref)
    out = ref.activations(one)["hook_embed"]
    return cases + [Case("one_position", [ref.tokens[one]], out, weights="embed.", hint=ONE_POSITION)]


PAGE = "02-embed.md"
CHECK = Check(
    "embed",
    1,
    Target("embedding", "Embed"),
    "token embedding lookup",
    embed_cases,
)
