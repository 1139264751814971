"""Part 5: induction heads.

The solutions pass, the stubs are todo, each function written wrong in a known way fails at its own check with its
own hint (or, for repeated_tokens, the property it breaks), solutions written in another style pass, the heads the
reference's scores find on the small model are those its JSON records, and GPT-2's cases are there only when the
reference is GPT-2's own weights.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from repo import SOLUTIONS, by_id, stubs, tiered, write_variant

from grader.checks.induction._common import GPT2_INDUCTION_HEADS

INDUCTION_CHECKS = (
    "induction.repeated_tokens",
    "induction.per_token_loss",
    "induction.previous_token_scores",
    "induction.induction_scores",
    "induction.heads_above",
    "induction.ablate_head",
    "induction.ablation_cost",
    "induction.direct_logit_attribution",
    "induction.k_composition",
)
SEEDED = "first_half = torch.randint(0, d_vocab, (batch, seq_len), generator=seeded)"
JOINED = "torch.cat([bos_column, first_half, first_half], dim=1)"
CLEAN, ABLATED = (
    "per_token_loss(clean_logits, tokens)[:, seq_len:]",
    "per_token_loss(ablated_logits, tokens)[:, seq_len:]",
)
MATRIX_NORMS = "torch.linalg.matrix_norm(W_OV) * torch.linalg.matrix_norm(W_QK)"
# mistake: (check, edits of induction.py, what the hint (or for repeated_tokens the message) must say)
MISTAKES = {
    "no BOS": (
        "induction.repeated_tokens",
        [(JOINED, "torch.cat([first_half[:, :1], first_half, first_half], 1)")],
        "no BOS",
    ),
    "halves not repeated": (
        "induction.repeated_tokens",
        [(JOINED, "torch.cat([bos_column, first_half, first_half.roll(1, dims=1)], dim=1)")],
        "the halves are not repeated",
    ),
    "ids out of range": (
        "induction.repeated_tokens",
        [(SEEDED, SEEDED.replace("randint(0, d_vocab,", "randint(1, d_vocab + 1,"))],
        "ids out of range",
    ),
    "global random state": (
        "induction.repeated_tokens",
        [(SEEDED, SEEDED.replace(", generator=seeded", ""))],
        "the same seed gave other tokens",
    ),
    "own token": (
        "induction.per_token_loss",
        [('rearrange(tokens[:, 1:], "batch', 'rearrange(tokens[:, :-1], "batch')],
        "scored on its own token",
    ),
    "loss sign": ("induction.per_token_loss", [("return -log_probs.gather", "return log_probs.gather")], "the sign"),
    "probabilities": (
        "induction.per_token_loss",
        [("log_probs = logits.log_softmax(dim=-1)[:, :-1]", "log_probs = logits.softmax(dim=-1)[:, :-1]")],
        "probabilities, not log-probabilities",
    ),
    "the main diagonal": (
        "induction.previous_token_scores",
        [("patterns.diagonal(offset=-1,", "patterns.diagonal(offset=0,")],
        "the main diagonal",
    ),
    "the whole pattern": (
        "induction.previous_token_scores",
        [('reduce(below_diagonal, "layer head posn', 'reduce(patterns, "layer head query posn')],
        "the whole pattern is averaged",
    ),
    "induction off by one": (
        "induction.induction_scores",
        [("patterns.diagonal(offset=1 - seq_len,", "patterns.diagonal(offset=-seq_len,")],
        "off by one",
    ),
    "the whole stripe": (
        "induction.induction_scores",
        [("reduce(stripe[..., -seq_len:],", "reduce(stripe,")],
        "the whole stripe",
    ),
    "at the threshold": (
        "induction.heads_above",
        [("if scores[layer, head] > threshold]", "if scores[layer, head] >= threshold]")],
        "strictly above",
    ),
    "mean over positions": (
        "induction.ablate_head",
        [('"batch posn d_head -> posn d_head", "mean")', '"batch posn d_head -> batch 1 d_head", "mean")')],
        "the mean is over the positions",
    ),
    "every head": ("induction.ablate_head", [("ablated[:, :, head] = 0.0", "ablated[:] = 0.0")], "every head"),
    "cost off by one": (
        "induction.ablation_cost",
        [
            (CLEAN, CLEAN.replace("seq_len:]", "seq_len + 1 :]")),
            (ABLATED, ABLATED.replace("seq_len:]", "seq_len + 1 :]")),
        ],
        "off by one",
    ),
    "the first half": (
        "induction.ablation_cost",
        [(CLEAN, CLEAN.replace("seq_len:]", ":seq_len]")), (ABLATED, ABLATED.replace("seq_len:]", ":seq_len]"))],
        "the first half",
    ),
    "scale forgotten": (
        "induction.direct_logit_attribution",
        [("normalised = centred / scale * ln_w", "normalised = centred * ln_w")],
        "scale is forgotten",
    ),
    "logit of its own token": (
        "induction.direct_logit_attribution",
        [("W_U[:, tokens[:, 1:]]", "W_U[:, tokens[:, :-1]]")],
        "scored on its own token",
    ),
    "no centring": (
        "induction.direct_logit_attribution",
        [("centred = head_outputs - head_outputs.mean(dim=-1, keepdim=True)", "centred = head_outputs")],
        "no centring",
    ),
    "W_QK not transposed": (
        "induction.k_composition",
        [("d_model_in d_model_K, d_model_Q d_model_K ->", "d_model_in d_model_K, d_model_K d_model_Q ->")],
        "not transposed",
    ),
    "not normalised": (
        "induction.k_composition",
        [(f" / ({MATRIX_NORMS})", "")],
        "not normalised",
    ),
}
# One mistake per check in `make test`; `make test-all` grades them all.
QUICK = [
    "no BOS",
    "own token",
    "the main diagonal",
    "induction off by one",
    "at the threshold",
    "mean over positions",
    "cost off by one",
    "scale forgotten",
    "W_QK not transposed",
]
# The same functions written another way: global seeding and repeat, F.cross_entropy, masks and einsum instead of
# diagonals, gather, nonzero, @ and .norm(). Each must pass.
OTHER_STYLE = [
    (
        "seeded = torch.Generator().manual_seed(seed)\n    " + SEEDED,
        "torch.manual_seed(seed)\n    first_half = torch.randint(d_vocab, (batch, seq_len))",
    ),
    (JOINED, "torch.cat([torch.full_like(first_half[:, :1], bos), first_half.repeat(1, 2)], dim=-1)"),
    (
        "log_probs = logits.log_softmax(dim=-1)[:, :-1]",
        "return torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction='none')\n"
        "    log_probs = logits.log_softmax(dim=-1)[:, :-1]",
    ),
    (
        "below_diagonal = patterns.diagonal(offset=-1, dim1=-2, dim2=-1)",
        "posn = patterns.shape[-1]\n"
        "    mask = torch.diag(torch.ones(posn - 1), -1)\n"
        '    return einops.einsum(patterns, mask, "layer head q k, q k -> layer head") / (posn - 1)\n'
        "    below_diagonal = None",
    ),
    (
        "stripe = patterns.diagonal(offset=1 - seq_len, dim1=-2, dim2=-1)",
        "queries = torch.arange(seq_len + 1, 2 * seq_len + 1)\n"
        "    return patterns[:, :, queries, queries - seq_len + 1].mean(dim=-1)\n"
        "    stripe = None",
    ),
    (
        "n_layers, n_heads = scores.shape",
        "return [tuple(pair) for pair in (scores > threshold).nonzero().tolist()]",
    ),
    (
        'composed = einops.einsum(W_OV, W_QK, "d_model_in d_model_K, d_model_Q d_model_K -> d_model_in d_model_Q")',
        "return (W_OV @ W_QK.T).norm() / (W_OV.norm() * W_QK.norm())",
    ),
]


def test_solutions_pass_every_induction_check(grade):
    report = grade(SOLUTIONS, "induction")
    assert [c.id for c in report.checks] == list(INDUCTION_CHECKS)
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(INDUCTION_CHECKS, "pass"), [
        c.message for c in report.checks
    ]


def test_stubs_are_todo(grade):
    assert {c.id: c.status for c in grade(stubs(), "induction").checks} == dict.fromkeys(INDUCTION_CHECKS, "todo")


@pytest.mark.parametrize("mistake", tiered(MISTAKES, QUICK))
def test_mistake_fails_at_its_check_with_its_hint(grade, tmp_path, mistake):
    check_id, edits, said = MISTAKES[mistake]
    result = by_id(grade(write_variant(tmp_path, {"induction.py": edits}), check_id))[check_id]
    assert result.status == "fail", result.message
    assert said in (result.hint or "") + result.message, (result.message, result.hint)


def test_another_style_passes(grade, tmp_path):
    report = grade(write_variant(tmp_path, {"induction.py": OTHER_STYLE}), "induction")
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(INDUCTION_CHECKS, "pass"), [
        c.message for c in report.checks
    ]


# --- what the reference says ----------------------------------------------------------------------------------


def heads_found(scores: np.ndarray, threshold: float) -> list[list[int]]:
    return [[int(layer), int(head)] for layer, head in np.argwhere(scores > threshold)]


def test_the_small_models_heads_are_those_its_json_records(reference):
    """The Part 5 scores, on [BOS, A, A] rather than the model's own scoring batch, find the same heads."""
    from grader.builder.induction_model import SHIPPED, facts_path

    facts = json.loads(facts_path(SHIPPED).read_text())
    previous = reference.expected("induction.previous_token_scores")["small.previous_token_scores"]
    induction = reference.expected("induction.induction_scores")["small.induction_scores"]
    assert heads_found(previous, facts["thresholds"]["previous_token"]) == facts["heads"]["previous_token"]
    assert heads_found(induction, facts["thresholds"]["induction"]) == facts["heads"]["induction"]
    found = reference.expected("induction.heads_above")["small.induction_heads"]
    assert found.tolist() == facts["heads"]["induction"]


def test_k_composition_is_transformer_lens_all_composition_scores(reference):
    from grader.builder.induction_model import load

    scores = load().all_composition_scores("K").detach().numpy()
    expected = reference.expected("induction.k_composition")
    for layer0_head in range(4):
        for layer1_head in range(4):
            got = expected[f"small.L0H{layer0_head}.L1H{layer1_head}"]
            np.testing.assert_allclose(got, scores[0, layer0_head, 1, layer1_head], rtol=1e-6)


def test_the_previous_token_head_is_the_costliest_to_ablate(reference):
    """What the notes show: the small model needs its previous-token head on the repeated half."""
    costs = {
        name: float(cost) for name, cost in reference.expected("induction.ablation_cost").items() if "/" not in name
    }
    assert max(costs, key=costs.get).startswith("small.blocks.0.head1.")
    assert all(cost > 0 for name, cost in costs.items() if name.startswith("small.blocks.0.head1."))


def test_the_random_reference_leaves_gpt2s_cases_out_and_says_so(grade, reference):
    names = [case.name for check in INDUCTION_CHECKS for case in reference.cases(check)]
    assert names and not [name for name in names if name.startswith("gpt2.")]
    notes = by_id(grade(SOLUTIONS, "induction"))["induction.induction_scores"].notes
    assert any("GPT-2's heads left out" in note for note in notes), notes


@pytest.mark.slow
def test_gpt2s_induction_heads_are_found_on_gpt2(monkeypatch, session, tmp_path):
    """On the real GPT-2 the cases include its heads, and its known induction heads are among those scoring highest.
    The session's Hugging Face cache is empty on purpose: this looks in the one the tests started with."""
    from grader.host.refcache import ensure_reference, gpt2_in_hf_cache

    monkeypatch.setenv(
        "HF_HUB_CACHE", session.saved.get("HF_HUB_CACHE") or os.path.expanduser("~/.cache/huggingface/hub")
    )
    if not gpt2_in_hf_cache():
        pytest.skip("the real GPT-2 is not in the Hugging Face cache: the cases on GPT-2's heads are built only on it")
    data = ensure_reference("gpt2", lambda *_: None, root=tmp_path)
    scores = data.expected("induction.induction_scores")["gpt2.induction_scores"]
    top = {tuple(int(i) for i in np.unravel_index(index, scores.shape)) for index in np.argsort(scores, axis=None)[-5:]}
    assert top & set(GPT2_INDUCTION_HEADS), top
    assert {"gpt2.blocks.5.head5.zero", "gpt2.blocks.4.head11.zero"} <= set(data.expected("induction.ablation_cost"))
