"""Part 3: looking inside.

The solutions pass, the stubs are todo, each function written wrong in a known way fails at its
own check with its own hint (all graded together: each mistake touches one function only), and
the grader's own expected answers for folding and erasing hold up against their definitions.
"""

from __future__ import annotations

import numpy as np
import pytest
from repo import SOLUTIONS, by_id, stubs, write_variant
from safetensors.numpy import load_file

from grader.shared import wire

INTERP_CHECKS = (
    "interp.parameter_counts",
    "interp.logit_lens",
    "interp.qk_circuit",
    "interp.ov_circuit",
    "interp.fold_layernorm",
    "interp.direct_path",
    "interp.is_tied",
    "interp.erase_direction",
)
MISTAKES = {  # check: ((old, new) in interp.py, what the hint must say)
    "interp.parameter_counts": (
        (
            'counts["tied"] = counts["total"] - counts["unembed"]',
            'counts["tied"] = counts["total"] - model.unembed.W_U.numel()',
        ),
        "the tied count keeps b_U",
    ),
    "interp.logit_lens": (
        ("model.unembed(model.ln_final(stream))", "model.unembed(stream)"),
        "ln_final is not applied",
    ),
    "interp.qk_circuit": (
        ("attn.W_Q[head], attn.W_K[head]", "attn.W_K[head], attn.W_Q[head]"),
        "the transpose W_K W_Q^T",
    ),
    "interp.ov_circuit": (
        ('d_head d_model_out -> d_model_in d_model_out"', 'd_head d_model_out -> d_model_out d_model_in"'),
        "the transpose W_O^T W_V^T",
    ),
    "interp.fold_layernorm": (
        ('"d_model, d_model d_out -> d_out") + b', '"d_model, d_model d_out -> d_out")'),
        "forgets the linear map's own b",
    ),
    "interp.direct_path": (
        ("embedded = model.embed.W_E[tokens]", "embedded = model.embed(tokens) + model.pos_embed(tokens)"),
        "the positional embedding is added",
    ),
    "interp.is_tied": (
        ("torch.equal(model.unembed.W_U, model.embed.W_E.T)", "torch.allclose(model.unembed.W_U, model.embed.W_E.T)"),
        "not within a tolerance",
    ),
    "interp.erase_direction": (("einops.einsum(component.relu(), v", "einops.einsum(component, v"), "there is no ReLU"),
}


def test_solutions_pass_every_interp_check(grade):
    report = grade(SOLUTIONS, "interp")
    assert [c.id for c in report.checks] == list(INTERP_CHECKS)
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(INTERP_CHECKS, "pass"), [
        c.message for c in report.checks
    ]


def test_stubs_are_todo(grade):
    assert {c.status for c in grade(stubs(), "interp").checks} == {"todo"}


@pytest.fixture(scope="module")
def mistaken(grade, tmp_path_factory):
    package = write_variant(tmp_path_factory.mktemp("interp"), {"interp.py": [edit for edit, _ in MISTAKES.values()]})
    return by_id(grade(package, "interp"))


@pytest.mark.parametrize("check_id", list(MISTAKES))
def test_mistake_fails_at_its_check_with_its_hint(mistaken, check_id):
    result = mistaken[check_id]
    assert result.status == "fail", result.message
    assert MISTAKES[check_id][1] in (result.hint or ""), (result.message, result.hint)


def test_wrong_counts_are_named_by_part(grade, tmp_path):
    package = write_variant(
        tmp_path,
        {
            "interp.py": [
                (
                    "param.numel() for param in part.parameters())",
                    "param.numel() for param in part.parameters() if param.requires_grad)",
                )
            ]
        },
    )
    result = by_id(grade(package, "interp.parameter_counts"))["interp.parameter_counts"]
    assert result.status == "fail"
    assert "unembed 38,597,376 (GPT-2: 38,647,633)" in result.message
    assert "b_U is not counted" in result.hint


LENS_RETURN = "    return torch.stack([model.unembed(model.ln_final(stream)) for stream in streams])\n"
ONE_STREAMS_STATISTICS = {  # the lens's ln_final written out, with the last stream's statistics: what the hint says
    "mean and variance": (
        "    mean = streams[-1].mean(dim=-1, keepdim=True)\n"
        "    scale = (streams[-1].var(dim=-1, keepdim=True, unbiased=False) + model.cfg.layer_norm_eps).sqrt()\n"
        "    ln = model.ln_final\n"
        "    return torch.stack([model.unembed((s - mean) / scale * ln.w + ln.b) for s in streams])\n",
        "the last stream's mean and variance",
    ),
    "scale only": (
        "    scale = (streams[-1].var(dim=-1, keepdim=True, unbiased=False) + model.cfg.layer_norm_eps).sqrt()\n"
        "    ln = model.ln_final\n"
        "    centred = [s - s.mean(-1, keepdim=True) for s in streams]\n"
        "    return torch.stack([model.unembed(c / scale * ln.w + ln.b) for c in centred])\n",
        "the last stream's scale",
    ),
}


@pytest.mark.parametrize("variant", list(ONE_STREAMS_STATISTICS))
def test_a_lens_normalising_with_one_streams_statistics_is_named(grade, tmp_path, variant):
    code, said = ONE_STREAMS_STATISTICS[variant]
    package = write_variant(tmp_path, {"interp.py": [(LENS_RETURN, code)]})
    result = by_id(grade(package, "interp.logit_lens"))["interp.logit_lens"]
    assert result.status == "fail" and said in (result.hint or ""), (result.message, result.hint)


HARD_CODED_BLOCKS = (
    "    for block in model.blocks:\n",
    "    for layer in range(12):\n        block = model.blocks[layer]\n",
)


def test_the_logit_lens_runs_on_the_small_induction_model_too(grade, tmp_path):
    """Its second case is the small trained model, at its own Config: a lens that assumes GPT-2's 12 blocks stops
    there, at its own line."""
    package = write_variant(tmp_path, {"interp.py": [HARD_CODED_BLOCKS]})
    result = by_id(grade(package, "interp.logit_lens"))["interp.logit_lens"]
    assert result.status == "error" and "IndexError" in result.message, result.message
    assert (result.file, result.line) == ("interp.py", 39)


def test_the_small_models_lens_predicts_the_repeat_by_its_last_layer(reference):
    """What its picture shows offline: on [BOS, A, A], the small model's final logits put the token that followed
    in the first half on top through most of the second half; the stream before block 0 (the token itself) does not."""
    from grader.checks.induction._models import SEQ_LEN
    from grader.shared.formats import SMALL_LENS

    tokens = reference.meta["small_model"]["lens_tokens"]
    lens = reference.expected("interp.logit_lens")[SMALL_LENS]
    assert lens.shape == (3, 1, 1 + 2 * SEQ_LEN, 512)
    second_half = range(SEQ_LEN + 1, 2 * SEQ_LEN)  # each position's next token is the first half's next one
    hits = [int(lens[-1, 0, p].argmax()) == tokens[p + 1] for p in second_half]
    embedded = [int(lens[0, 0, p].argmax()) == tokens[p + 1] for p in second_half]
    assert sum(hits) >= 0.8 * len(hits) and sum(embedded) <= 0.2 * len(embedded)


def test_quoted_count_is_gpt2s(reference):
    from grader.shared.formats import COUNT_KEYS

    counts = dict(zip(COUNT_KEYS, reference.expected("interp.parameter_counts")["gpt2"], strict=False))
    assert counts["tied"] == 124_439_808 and counts["total"] == 163_087_441


def test_folded_map_on_normalised_input_equals_the_original(reference):
    """The expected folding, checked against its definition with GPT-2's LayerNorm weights."""
    weights = load_file(str(reference.weights_path))
    inputs, expected = reference.inputs("interp.fold_layernorm"), reference.expected("interp.fold_layernorm")
    x_hat = np.random.default_rng(0).standard_normal((5, 768)).astype(np.float32)
    for case in reference.cases("interp.fold_layernorm"):
        name, prefix = case.name, case.weights
        W, b = inputs[wire.ARG.format(case=name, i=0)], inputs[wire.ARG.format(case=name, i=1)]
        original = (x_hat * weights[prefix + "w"] + weights[prefix + "b"]) @ W + b
        W_folded, b_folded = expected[name][:-1], expected[name][-1]
        np.testing.assert_allclose(x_hat @ W_folded + b_folded, original, rtol=1e-4, atol=1e-4)


def test_erased_outputs_have_no_positive_component(reference):
    inputs, expected = reference.inputs("interp.erase_direction"), reference.expected("interp.erase_direction")
    for case in reference.cases("interp.erase_direction"):
        x, v, out = (
            inputs[wire.ARG.format(case=case.name, i=0)],
            inputs[wire.ARG.format(case=case.name, i=1)],
            expected[case.name],
        )
        before, after = x @ v, out @ v
        np.testing.assert_allclose(after, np.minimum(before, 0), atol=1e-4)
        np.testing.assert_allclose(
            out - after[..., None] * v, x - before[..., None] * v, atol=1e-4
        )  # the rest of x is untouched
        assert (before > 0).any() and (before < 0).any()
