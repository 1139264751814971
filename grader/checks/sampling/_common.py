"""What more than one of Part 2's checks uses: a generator per seed, a case's known mistakes, the stand-ins' inputs
(the sampling, beam and generation checks), the draws' cases and the two mistakes top-k and top-p share, and the
targets: the sampler's methods, called once against the exact answer or drawn from many times."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Run, Target, Tolerance
from grader.checks.sampling._compare import DRAWS, ROUNDS, draws_again, frequencies, frequency_bound
from grader.shared.formats import END_OF_TEXT

if TYPE_CHECKING:
    from torch import Tensor

LOGITS_TOLERANCE = Tolerance(atol=1e-5, rtol=1e-5)


def generator(seed: int):
    import torch

    return torch.Generator().manual_seed(seed)


def known(*mistakes: tuple[str, Tensor | None]) -> dict[str, Tensor]:
    """Case.mistakes from (hint, output) pairs, leaving out the mistakes that do not apply (None)."""
    return {hint: output for hint, output in mistakes if output is not None}


# --- stand-ins ----------------------------------------------------------------------------------


def char_tokenizer(alphabet: str):
    """A `tokenizers` tokenizer with one token per character and end-of-text as the last token."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocabulary = {character: i for i, character in enumerate(alphabet)} | {END_OF_TEXT: len(alphabet)}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token=END_OF_TEXT))
    tokenizer.add_special_tokens([END_OF_TEXT])
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    return tokenizer


def stand_in_inputs(table: Tensor, tokenizer, **named) -> dict:
    import torch

    from grader.learner.drivers import text_tensor

    return {
        "table": table,
        "tokenizer": text_tensor(tokenizer.to_str()),
        **{name: torch.as_tensor(value) for name, value in named.items()},
    }


# --- the draws ----------------------------------------------------------------------------------

INDEX_NOT_MAPPED = "the index drawn among the kept tokens was returned, not its token id: map it back (ids[index])"
NOT_RENORMALISED = (
    "the kept tokens were drawn with their probabilities over the whole vocabulary, not renormalised: "
    "divide them by their sum (or sample from the kept logits)"
)


def told_apart(right: Tensor, wrong: Tensor | None) -> Tensor | None:
    """`wrong`, if both rounds' draws tell it from `right` as surely as the check needs: it puts mass where `right`
    has none, or moves some probability by more than twice the bound (see `_compare`); else None."""
    if wrong is None:
        return None
    eps = frequency_bound(int((right > 0).sum()), ROUNDS * DRAWS)
    far = bool(((wrong > 0) & (right == 0)).any()) or float((wrong - right).abs().max()) > 2 * eps
    return wrong if far else None


def distribution_case(name: str, args: list, right: Tensor, *mistakes: tuple[str, Tensor | None]) -> Case:
    """A case of DRAWS draws a round; each known mistake listed only where the draws tell it from the right answer."""
    import torch

    told = known(*((hint, told_apart(right, wrong)) for hint, wrong in mistakes))
    return Case(name, args, right, extra={"draws": torch.tensor(DRAWS)}, mistakes=told)


# --- the targets --------------------------------------------------------------------------------

DRIVERS = "grader.learner.drivers.sampling"
EXACT = "the exact answer"


def sampler(method: str, driver: str) -> Target:
    return Target("sampling", "TransformerSampler", method, driver=f"{DRIVERS}:{driver}")


def exact(check_id: str, method: str, summary: str, cases, comparison, tolerance: Tolerance | None = None) -> Check:
    """One step of sampling, one point: the method called once per case, against the exact answer."""
    target = sampler(method, "call")
    return Check(check_id, 1, target, summary, cases, comparison, tolerance or Tolerance(), expected_from=EXACT)


def drawn(check_id: str, points: int, method: str, summary: str, cases, comparison=frequencies) -> Check:
    """A sampling method called DRAWS times per case, twice where one round does not decide: its counts against the
    exact distribution."""
    target = sampler(method, "draw")
    return Check(
        check_id,
        points,
        target,
        summary,
        cases,
        comparison,
        expected_from="the exact distribution",
        run=Run(draws_again=draws_again),
    )
