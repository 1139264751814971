"""Part 5: induction heads. The learner's functions take tensors (attention patterns, activations, weights), and
the cases hand them those of the small trained model with induction heads (grader/builder/induction_model.py:
previous-token head 0.1, induction heads 1.0-1.3), always, offline too; and GPT-2 small's own (induction heads
5.1, 5.5, 6.9, 7.2, 7.10, previous-token head 4.11) when the reference is GPT-2: on the random reference all
heads look alike, so those cases are left out and each check's notes say so.

The expected answers come from transformer_lens (run_with_cache's patterns and hook_z, run_with_hooks,
`apply_ln_to_stack`, `all_composition_scores("K")`) through the reference, or from a plain formula written here (for
the checks that take a head apart, in `_induction_circuits`). Every model's input is a batch of [BOS, A, A] tokens, A
of SEQ_LEN random tokens (`repeated_batch`, in `_induction_models`).

The cases, by name ("small." on the small model, "gpt2." on GPT-2), and what their expected tensors hold:
- repeated_tokens: tiny_vocab, small_vocab, gpt2_vocab: a valid answer of the call's three answers stacked
  (seed, the same seed, another seed), (3, batch, 1 + 2 * seq_len) float64 ids; its largest id is d_vocab - 1.
- per_token_loss: toy_logits, (2, 7) random logits over 11 tokens; small.repeated: the small model's own logits
  on its [BOS, A, A] batch; expected (batch, posn - 1), the loss of each next token.
- previous_token_scores, induction_scores: small.previous_token_scores, gpt2.previous_token_scores,
  small.induction_scores, gpt2.induction_scores: (n_layers, n_heads) scores of the batch's mean patterns,
  which are the cases' input, (n_layers, n_heads, posn, posn).
- heads_above: small.induction_heads, small.previous_token_heads, gpt2.induction_heads, ties, none: (found, 2)
  rows (layer, head) of the heads above the threshold.
- ablate_head: small.blocks.1.head2.zero, small.blocks.1.head2.mean, small.blocks.0.head1.mean: hook_z
  (batch, posn, n_heads, d_head) with that head ablated.
- ablation_cost: small.blocks.L.headH.zero and .mean for the previous-token head and every layer-1 head,
  gpt2.blocks.L.headH.zero for 5.5 and 4.11: the 0-d rise of the mean loss on the repeated half (the notes list them).
- direct_logit_attribution: small.repeated, small.random: (batch, posn - 1, n_layers, n_heads), each head's
  direct effect on the logit of the next token.
- k_composition: small.L0Hi.L1Hj for every pair, gpt2.L4H11.L5H5 and gpt2.L4H11.L6H9: the 0-d K-composition
  score of the pair.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case, Check, Run, Target, Tolerance, driven
from grader.checks.induction._circuits import (
    ablate_head_cases,
    ablation_cost_cases,
    direct_logit_attribution_cases,
    k_composition_cases,
)
from grader.checks.induction._models import SEQ_LEN, models, next_token_loss, repeated_batch, repeated_patterns
from grader.shared.compare import CaseComparison, validate

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

GPT2_INDUCTION_HEADS = ((5, 1), (5, 5), (6, 9), (7, 2), (7, 10))
THRESHOLD = {"small": 0.5, "gpt2": 0.4}  # heads_above's: GPT-2's induction heads share their attention more
FROM_THE_MODEL = "transformer_lens, on the model the case names (small: the induction model)"


# --- the patterns' stripes, and which model each case ran on ------------------------------------------------------


def stripe(posn: int, below: int, queries: range) -> Tensor:
    """A (posn, posn) mask of ones where query q attends to key q - below, for q in `queries`."""
    import torch

    mask = torch.zeros(posn, posn)
    for query in queries:
        mask[query, query - below] = 1.0
    return mask


def mean_on(patterns: Tensor, mask: Tensor) -> Tensor:
    """Each head's mean attention over the (query, key) entries the mask holds: (layer, head)."""
    return (patterns * mask).sum(dim=(-2, -1)) / mask.sum()


def repeated_half(posn: int) -> range:
    """The queries of the repeated half of [BOS, A, A]: positions SEQ_LEN + 1 to 2 SEQ_LEN."""
    return range(posn - SEQ_LEN, posn)


def which_models(facts: dict) -> list[str]:
    """How many cases ran on each model, for a passing check's notes."""
    names = case_names(facts)
    small, gpt2 = (sum(name.startswith(f"{model}.") for name in names) for model in ("small", "gpt2"))
    where = f"{small} case{'s' * (small != 1)} on the small induction model"
    if gpt2:
        return [f"{where}, {gpt2} on GPT-2's own heads"]
    return [f"{where}; GPT-2's heads left out: the reference is the random model, whose heads all look alike"]


def case_names(facts: dict) -> list[str]:
    return [name for name in facts["expected"] if "/" not in name]  # a step's or a mistake's key holds a "/"


# --- repeated_tokens --------------------------------------------------------------------------------------------

REPEATED_CALLS = {  # case: (batch, seq_len, d_vocab, bos, seed); a vocabulary of 5 shows ids out of range
    "tiny_vocab": (4, 20, 5, 4, 0),
    "small_vocab": (8, SEQ_LEN, 512, 16, 3),
    "gpt2_vocab": (2, 31, 50257, 50256, 12),
}


def one_answer(batch: int, seq_len: int, d_vocab: int, bos: int, seed: int) -> Tensor:
    """A valid answer whose largest id is d_vocab - 1, so that the comparison reads d_vocab from it."""
    import torch

    first = torch.randint(0, d_vocab, (batch, seq_len), generator=torch.Generator().manual_seed(seed))
    first[0, 0] = d_vocab - 1
    return torch.cat([torch.full((batch, 1), bos), first, first], dim=1).double()


def repeated_tokens_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    for name, (batch, seq_len, d_vocab, bos, seed) in REPEATED_CALLS.items():
        seed += ref.seed
        answers = [one_answer(batch, seq_len, d_vocab, bos, seed + offset) for offset in (0, 0, 1)]
        cases.append(Case(name, [torch.tensor([batch, seq_len, d_vocab, bos, seed])], torch.stack(answers)))
    return cases


def repeated_properties(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> CaseComparison:
    """Any correct draw passes: the shape, integer ids, the BOS column, the second half equal to the first, ids in
    range, rows that differ, the same seed giving the same tokens and another seed other ones. The message names
    the first property that fails."""
    invalid = validate(actual, expected)
    if invalid:
        return invalid
    bos, d_vocab, seq_len = expected[0, 0, 0], expected.max() + 1, (expected.shape[-1] - 1) // 2
    first, second = actual[..., 1 : 1 + seq_len], actual[..., 1 + seq_len :]
    rows = actual[0].reshape(actual.shape[1], -1)
    failures = {
        "the ids are not whole numbers": (actual != np.round(actual)).any(),
        f"no BOS: every sequence begins with bos ({int(bos)})": (actual[..., 0] != bos).any(),
        "the halves are not repeated: tokens[:, 1 + seq_len:] must equal tokens[:, 1:1 + seq_len]": (
            first != second
        ).any(),
        f"ids out of range: draw them in [0, d_vocab) = [0, {int(d_vocab)})": (
            (actual < 0) | (actual >= d_vocab)
        ).any(),
        "every sequence of the batch is the same: draw each row's tokens": len({row.tobytes() for row in rows})
        < len(rows),
        "the same seed gave other tokens: seed a generator with `seed`": (actual[0] != actual[1]).any(),
        "another seed gave the same tokens: seed a generator with `seed`": (actual[0] == actual[2]).all(),
    }
    failed = [message for message, fails in failures.items() if fails]
    shapes = {"actual_shape": list(actual.shape), "expected_shape": list(expected.shape)}
    return CaseComparison(not failed, failed[0] if failed else "", None, None, **shapes)


# --- per_token_loss ----------------------------------------------------------------------------------------------


def per_token_loss_mistakes(logits: Tensor, tokens: Tensor) -> dict[str, Tensor]:
    predicting = logits[:, :-1]
    own = predicting.log_softmax(-1).gather(-1, tokens[:, :-1, None])[..., 0]
    next_probability = predicting.softmax(-1).gather(-1, tokens[:, 1:, None])[..., 0]
    return {
        "each position is scored on its own token: logits[:, p] predicts tokens[:, p + 1]": -own,
        "the sign is wrong: the loss is minus the log-probability": -next_token_loss(logits, tokens),
        "probabilities, not log-probabilities: take log_softmax": -next_probability,
    }


def per_token_loss_cases(ref: Reference) -> list[Case]:
    import torch

    tokens = torch.randint(0, 11, (2, 7), generator=ref.generator)
    inputs = {"toy_logits": (3 * torch.randn(2, 7, 11, generator=ref.generator), tokens)}
    small = ref.induction_model()
    repeated = repeated_batch(small, "small")
    inputs["small.repeated"] = (small.logits(repeated), repeated)
    return [
        Case(name, [logits, tokens], next_token_loss(logits, tokens), mistakes=per_token_loss_mistakes(logits, tokens))
        for name, (logits, tokens) in inputs.items()
    ]


# --- previous-token and induction scores ------------------------------------------------------------------------


def previous_token_scores_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    for name, model in models(ref):
        patterns = repeated_patterns(model, name)
        posn = patterns.shape[-1]
        mistakes = {
            "the main diagonal is the token attending to itself: the previous token is one below it": mean_on(
                patterns, torch.eye(posn)
            ),
            "the whole pattern is averaged: take the diagonal one below the main one": patterns.mean(dim=(-2, -1)),
        }
        expected = mean_on(patterns, stripe(posn, 1, range(1, posn)))
        cases.append(Case(f"{name}.previous_token_scores", [patterns], expected, mistakes=mistakes))
    return cases


def induction_scores_cases(ref: Reference) -> list[Case]:
    import torch

    cases = []
    for name, model in models(ref):
        patterns = repeated_patterns(model, name)
        posn = patterns.shape[-1]
        mistakes = {
            "off by one: seq_len back is the previous occurrence itself; the token after it is seq_len - 1 back": (
                mean_on(patterns, stripe(posn, SEQ_LEN, repeated_half(posn)))
            ),
            "the whole stripe is averaged: only its last seq_len entries are queries of the repeated half": mean_on(
                patterns, stripe(posn, SEQ_LEN - 1, range(SEQ_LEN - 1, posn))
            ),
        }
        expected = mean_on(patterns, stripe(posn, SEQ_LEN - 1, repeated_half(posn)))
        args = [patterns, torch.tensor(SEQ_LEN)]
        cases.append(Case(f"{name}.induction_scores", args, expected, mistakes=mistakes))
    return cases


# --- heads_above --------------------------------------------------------------------------------------------------


def head_rows(scores: Tensor, threshold: float, above=float.__gt__, swap: bool = False) -> Tensor:
    """The (layer, head) rows of the heads `above` the threshold, in order; (head, layer) with swap."""
    import torch

    rows = [
        (head, layer) if swap else (layer, head)
        for layer, head in itertools.product(*map(range, scores.shape))
        if above(float(scores[layer, head]), threshold)
    ]
    return torch.tensor(rows, dtype=torch.float64).reshape(-1, 2)


def heads_above_cases(ref: Reference) -> list[Case]:
    import torch

    tables = {}
    for name, model in models(ref):
        patterns = repeated_patterns(model, name)
        posn = patterns.shape[-1]
        tables[f"{name}.induction_heads"] = (mean_on(patterns, stripe(posn, SEQ_LEN - 1, repeated_half(posn))), name)
        if name == "small":
            tables["small.previous_token_heads"] = (mean_on(patterns, stripe(posn, 1, range(1, posn))), name)
    ties = torch.tensor([[0.1, 0.5, 0.7], [0.5, 0.2, 0.9]])  # two scores equal to the threshold: not above it
    tables["ties"], tables["none"] = (ties, "small"), (ties / 10, "small")
    cases = []
    for case_name, (scores, model_name) in tables.items():
        threshold = THRESHOLD[model_name]
        mistakes = {
            "a score equal to the threshold is counted: keep the heads strictly above it": head_rows(
                scores, threshold, float.__ge__
            ),
            "the pairs are (head, layer): return (layer, head)": head_rows(scores, threshold, swap=True),
        }
        expected = head_rows(scores, threshold)
        cases.append(Case(case_name, [scores, torch.tensor(threshold)], expected, mistakes=mistakes))
    return cases


def ablation_cost_notes(facts: dict) -> list[str]:
    """What ablating each head costs, from the expected answers: the heads that matter stand out."""
    costs: dict[str, list[str]] = {}
    for name in case_names(facts):  # e.g. small.blocks.1.head0.zero
        model, _, layer, head, how = name.split(".")
        costs.setdefault(f"{model} {layer}.{head.removeprefix('head')}", []).append(
            f"{how} {float(facts['expected'][name]):+.2f}"
        )
    listed = "; ".join(f"{head} {', '.join(hows)}" for head, hows in costs.items())
    return [f"ablating a head raises the loss on the repeated half by (nats): {listed}", *which_models(facts)]


# --- the checks ---------------------------------------------------------------------------------------------------


def induction(name: str, driver: str | None = "scalars") -> Target:
    return driven("induction", name, driver)


EXACT = Tolerance(atol=0.0, rtol=0.0)
PAGE = "19-induction.md"
CHECKS = (
    Check(
        "induction.repeated_tokens",
        1,
        induction("repeated_tokens", "repeated"),
        "[BOS, A, A] random tokens",
        repeated_tokens_cases,
        comparison=repeated_properties,
        tolerance=EXACT,
        expected_from="what a repeated sequence is",
    ),
    Check(
        "induction.per_token_loss",
        1,
        induction("per_token_loss", None),
        "the loss of each next token",
        per_token_loss_cases,
        expected_from="the grader's cross-entropy (small: the induction model's logits)",
    ),
    # These have GPT-2 cases when the reference is GPT-2's own weights; their notes say which model each case ran on.
    Check(
        "induction.previous_token_scores",
        1,
        induction("previous_token_scores", None),
        "previous-token scores of every head",
        previous_token_scores_cases,
        notes=which_models,
        expected_from=FROM_THE_MODEL,
    ),
    Check(
        "induction.induction_scores",
        2,
        induction("induction_scores"),
        "induction scores of every head",
        induction_scores_cases,
        run=Run(
            watch_inputs=True
        ),  # the report draws the small model's patterns, this check's input (figures.model_patterns)
        notes=which_models,
        expected_from=FROM_THE_MODEL,
    ),
    Check(
        "induction.heads_above",
        1,
        induction("heads_above", "heads"),
        "the heads above a threshold",
        heads_above_cases,
        tolerance=EXACT,
        notes=which_models,
        expected_from=FROM_THE_MODEL,
    ),
    Check(
        "induction.ablate_head",
        1,
        induction("ablate_head"),
        "zero- and mean-ablating a head on hook_z",
        ablate_head_cases,
        expected_from=FROM_THE_MODEL,
    ),
    Check(
        "induction.ablation_cost",
        1,
        induction("ablation_cost"),
        "what ablating a head costs on the repeated half",
        ablation_cost_cases,
        notes=ablation_cost_notes,
        expected_from=FROM_THE_MODEL,
        uses=("induction.per_token_loss",),
    ),
    Check(
        "induction.direct_logit_attribution",
        2,
        induction("direct_logit_attribution", None),
        "each head's direct effect on the next token's logit",
        direct_logit_attribution_cases,
        expected_from=FROM_THE_MODEL,
    ),
    Check(
        "induction.k_composition",
        1,
        induction("k_composition_score", None),
        "K-composition of an earlier head into a later one",
        k_composition_cases,
        notes=which_models,
        expected_from=FROM_THE_MODEL,
    ),
)
