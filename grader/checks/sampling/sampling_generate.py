"""TransformerSampler.sample, the generation loop, graded greedily on the table model: its text from a prompt until
end-of-text, and until max_tokens_generated."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.sampling._common import char_tokenizer, generator, known, sampler, stand_in_inputs
from grader.checks.sampling._compare import same_text
from grader.checks.sampling._oracle import greedy_walk
from grader.shared.formats import END_OF_TEXT

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

ALPHABET = " abcdefghijklmnopqrstuvwxyz."  # the generation check's tokens, end-of-text after them
NOT_FED_BACK = "the model saw the same input at every step: append each new token to the input of the next step"
PROMPT_ALONE = "the text is the prompt alone: append each new token to the input and decode all of it"
NO_STOP = "generation went on after end-of-text: stop once the new token is tokenizer.eos_token_id"
END_OF_TEXT_DROPPED = "end-of-text was left out of the text: append it like any other token, then stop"


def generation_cases(ref: Reference) -> list[Case]:
    """A table whose greedy path from "the cat" spells " sat on the mat." and then ends."""
    import torch

    from grader.learner.drivers import text_tensor

    tokenizer = char_tokenizer(ALPHABET)
    eos = tokenizer.token_to_id(END_OF_TEXT)
    prompt, continuation = "the cat", " sat on the mat."
    path = tokenizer.encode(prompt + continuation).ids + [eos]
    table = torch.randn(40, eos + 1, eos + 1, generator=generator(4))
    for position in range(len(prompt) - 1, len(path) - 1):
        table[position, path[position], path[position + 1]] += 8.0
    prompt_ids = tokenizer.encode(prompt).ids

    def text(ids: list[int]) -> Tensor:
        return text_tensor(tokenizer.decode(ids, skip_special_tokens=False))

    cases = []
    for name, max_new in (("until_end_of_text", 24), ("until_max_tokens", 6)):
        right = greedy_walk(table, prompt_ids, max_new, eos)
        endless = greedy_walk(table, prompt_ids, max_new, eos, stop=False)
        mistakes = known(
            (NOT_FED_BACK, text(greedy_walk(table, prompt_ids, max_new, eos, feed_back=False))),
            (PROMPT_ALONE, text(prompt_ids)),
            (NO_STOP, text(endless) if endless != right else None),
            (END_OF_TEXT_DROPPED, text(right[:-1]) if right[-1] == eos else None),
        )
        extra = stand_in_inputs(table, tokenizer, prompt=text_tensor(prompt), max_tokens_generated=max_new)
        cases.append(Case(name, [], text(right), extra=extra, mistakes=mistakes))
    return cases


PAGE = "11-sampling.md"
CHECK = Check(
    "sampling.generate",
    2,
    sampler("sample", "sample"),
    "the generation loop",
    generation_cases,
    comparison=same_text,
    expected_from="the expected text",
    uses=("sampling.greedy",),  # the loop is graded greedily: sample_next_token calls greedy_search
)
