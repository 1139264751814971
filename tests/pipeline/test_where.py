"""Where is honest: a diagnosis points at the line of the learner's code that produced the first
value that differs (the assignment, or the `return`), not at the `def`; a step the learner computes
inline is "not among the tensors your code names", which is not the same as "differs"; and a todo
names the function that raised NotImplementedError, at its own line.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from repo import by_id, stubs, tiered, write_variant
from test_alternatives import ATTENTION_MATMUL, replace_attention_body
from test_mistakes import MERGED_BY_REARRANGE, MERGED_BY_TRANSPOSE, POSITIONS, SCALED, W_O_EINSUM
from test_sampling import raise_line

from grader.checks import Tolerance
from grader.checks.model.attention import HEADS_MERGED_WRONG
from grader.host.diagnose import Candidate, first_divergence
from grader.host.platforms.github import writer as github

STEPS_BY_NAME = """        residual_mean = residual.mean(dim=-1, keepdim=True)
        residual_var = residual.var(dim=-1, keepdim=True, unbiased=False)
        residual_std = (residual_var + self.cfg.layer_norm_eps).sqrt()
        normalized = (residual - residual_mean) / residual_std
        return normalized * self.w + self.b
"""
MEAN, VAR = "residual.mean(dim=-1, keepdim=True)", "residual.var(dim=-1, keepdim=True, unbiased=False)"
EPS = "self.cfg.layer_norm_eps"
# Every step in the one return expression, right and with eps outside the square root.
INLINE = f"        return (residual - {MEAN}) / ({VAR} + {EPS}).sqrt() * self.w + self.b\n"
INLINE_EPS_OUTSIDE = f"        return (residual - {MEAN}) / ({VAR}.sqrt() + {EPS}) * self.w + self.b\n"
# The standardised vector named, the statistics inline.
NORMALIZED_EPS_OUTSIDE = (
    f"        normalized = (residual - {MEAN}) / ({VAR}.sqrt() + {EPS})\n        return normalized * self.w + self.b\n"
)
EPS_HINT = "outside the square root"


def line_of(package, file: str, code: str) -> int:
    """The number of the one line of `file` that is `code`, stripped."""
    lines = [i for i, line in enumerate((package / file).read_text().splitlines(), 1) if line.strip() == code.strip()]
    assert len(lines) == 1, (code, lines)
    return lines[0]


def line_holding(package, file: str, fragment: str) -> int:
    """The number of the one line of `file` that holds `fragment`."""
    lines = [i for i, line in enumerate((package / file).read_text().splitlines(), 1) if fragment in line]
    assert len(lines) == 1, (fragment, lines)
    return lines[0]


def layernorm(grade, tmp_path, body: str):
    package = write_variant(tmp_path, {"normalization.py": [(STEPS_BY_NAME, body)]})
    return package, by_id(grade(package, "layernorm"))["layernorm"]


def said(result) -> str:
    return "\n".join(result.diagnosis())


def test_layernorm_computed_inline_passes(grade, tmp_path):
    _, result = layernorm(grade, tmp_path, INLINE)
    assert result.status == "pass", result.message


def test_an_inline_layernorm_written_wrong_points_at_its_return(grade, tmp_path):
    package, result = layernorm(grade, tmp_path, INLINE_EPS_OUTSIDE)
    line = line_of(package, "normalization.py", INLINE_EPS_OUTSIDE)
    assert result.status == "fail" and EPS_HINT in result.hint, said(result)
    assert "already differs" not in said(result)
    assert result.divergence == (
        "mean, var, std, normalized are not among the tensors your code names; "
        f"output is the first step that differs (normalization.py:{line})"
    )
    assert (result.file, result.line) == ("normalization.py", line)


def test_a_step_named_wrong_points_at_its_assignment(grade, tmp_path):
    package, result = layernorm(grade, tmp_path, NORMALIZED_EPS_OUTSIDE)
    line = line_of(package, "normalization.py", NORMALIZED_EPS_OUTSIDE.splitlines()[0])
    assert result.status == "fail" and EPS_HINT in result.hint, said(result)
    assert result.divergence == (
        "mean, var, std are not among the tensors your code names; "
        f"normalized is the first step that differs (normalization.py:{line})"
    )
    assert (result.file, result.line) == ("normalization.py", line)


def test_a_named_step_that_differs_is_said_to_differ_at_its_line(grade, tmp_path):
    wrong_std = "        residual_std = residual_var.sqrt() + self.cfg.layer_norm_eps\n"
    package, result = layernorm(grade, tmp_path, STEPS_BY_NAME.replace(STEPS_BY_NAME.splitlines(True)[2], wrong_std))
    line = line_of(package, "normalization.py", wrong_std)
    assert result.divergence == (
        f"mean, var match the random reference; std is the first step that does not (normalization.py:{line})"
    )
    assert result.line == line and EPS_HINT in result.hint


# The variance divided by N - 1: a 1/767 error in a step of about 1e-3, so 1e-6 off, under the output's atol.
UNBIASED_NAMED = STEPS_BY_NAME.replace("unbiased=False", "unbiased=True")
UNBIASED_EPS_INLINE = (
    f"        residual_mean = {MEAN}\n        residual_var = {VAR.replace('False', 'True')}\n"
    f"        normalized = (residual - residual_mean) / (residual_var + {EPS}).sqrt()\n"
    "        return normalized * self.w + self.b\n"
)
N_MINUS_1 = "the variance divides by N-1"


@pytest.mark.parametrize("body", [UNBIASED_NAMED, UNBIASED_EPS_INLINE], ids=["std named", "std inline"])
def test_a_small_step_is_compared_at_its_own_scale(grade, tmp_path, body):
    """The var step differs by 1e-6 absolute, 1/767 of itself: where names it, at its line, and nothing after it."""
    package, result = layernorm(grade, tmp_path, body)
    line = line_of(package, "normalization.py", body.splitlines()[1])
    assert result.status == "fail" and N_MINUS_1 in result.hint, said(result)
    assert result.divergence == (
        f"mean matches the random reference; var is the first step that does not (normalization.py:{line})"
    )
    assert (result.file, result.line) == ("normalization.py", line)


def test_an_argument_changed_in_place_is_pointed_at_its_line():
    """The learner's process reads the function's own source: the first in-place change of an argument, not a line
    after the name was rebound to a new tensor, nor a method that only looks in place."""
    from grader.learner.package import in_place_update

    def changes(x, y):
        y = y.clone()
        y += 1  # y is a new tensor here: no change of the caller's
        x.float()
        x[0] = 0
        x += 1

    def rebinds(x):
        x = x + 1
        x += 1
        return x

    def uses_a_method(x):
        x.add_(1)

    first = changes.__code__.co_firstlineno
    assert in_place_update(changes).line == first + 4 and in_place_update(changes).code == "x[0] = 0"
    assert in_place_update(rebinds) is None
    assert in_place_update(uses_a_method).code == "x.add_(1)"


# --- where never blames correct code ------------------------------------------------------------------

# eps outside the square root, the statistics named, the rest inline: nothing the code names is a std.
NAMED_STATISTICS_EPS_OUTSIDE = f"""        mean = {MEAN}
        var = {VAR}
        x = (residual - mean) / (var.sqrt() + {EPS})
        return x * self.w + self.b
"""
# Right on most inputs, wrong where the mean is large beside the spread: E[x^2] - E[x]^2 loses its digits there.
VARIANCE_BY_MOMENTS = STEPS_BY_NAME.replace(VAR, "(residual**2).mean(dim=-1, keepdim=True) - residual_mean**2")
ASSERTS_A_VARIANCE = STEPS_BY_NAME.replace(
    "        residual_std", "        assert (residual_var > 0).all()\n        residual_std"
)
ADD_EPS = "inside the square root"
MASKED_THEN_SOFTMAX = (
    f"        attn_scores_masked = self.apply_causal_mask({SCALED})\n"
    "        attn_pattern = attn_scores_masked.softmax(dim=-1)\n"
)
SCALED_SCORES = "        attn_scores = attn_scores / self.cfg.d_head**0.5\n"
MASK_AFTER_SOFTMAX = {
    "masked with -inf": SCALED_SCORES + "        attn_pattern = self.apply_causal_mask(attn_scores.softmax(dim=-1))\n",
    "zeroed by tril": SCALED_SCORES + "        attn_pattern = attn_scores.softmax(dim=-1).tril()\n",
}
# (posn, d_model): it broadcasts when added to the token embedding, so the whole model is right with it.
BROADCAST_POSITIONS = {
    "embedding.py": [(POSITIONS, "return self.W_pos[past_kv_pos_offset : past_kv_pos_offset + seq_len]")]
}


def test_a_block_without_the_attention_residual_points_at_its_resid_mid(grade, tmp_path):
    """Not at the line of the LayerNorm the wrong stream then reaches: the annotation lands on block.py too."""
    package = write_variant(tmp_path, {"block.py": [("resid_mid = resid_pre + self.attn(", "resid_mid = self.attn(")]})
    report = grade(package, "block")
    result = by_id(report)["block"]
    line = line_of(package, "block.py", "resid_mid = self.attn(self.ln1(resid_pre))")
    assert result.divergence == (
        "ln1, attn match the random reference; resid_mid is the first step that does not: "
        f"your resid_mid equals attn (block.py:{line})"
    )
    assert (result.file, result.line) == ("block.py", line)
    (error,) = [command for command in github.annotations(report, tmp_path) if command.startswith("::error")]
    assert error.startswith(f"::error file=pkg/block.py,line={line},")


# The statistics taken without keepdim, (batch, posn): named var, they are GPT-2's var, of shape (batch, posn, 1).
WITHOUT_KEEPDIM = """        mean = residual.mean(-1)
        var = residual.var(-1, unbiased=False)
        x = (residual - mean[..., None]) / (var.sqrt()[..., None] + self.cfg.layer_norm_eps)
        return x * self.w + self.b
"""
NAMED_STATISTICS = {"keepdim": NAMED_STATISTICS_EPS_OUTSIDE, "without keepdim": WITHOUT_KEEPDIM}


@pytest.mark.parametrize("written", NAMED_STATISTICS)
def test_eps_outside_with_named_statistics_lands_on_the_line_that_divides(written, grade, tmp_path):
    """Never "var is not among the tensors your code names" for code that names var, whatever its shape."""
    body = NAMED_STATISTICS[written]
    package, result = layernorm(grade, tmp_path, body)
    line = line_of(package, "normalization.py", body.splitlines()[2])
    assert result.divergence == (
        "mean, var match the random reference; std is not among the tensors your code names; "
        f"normalized is the first step that differs (normalization.py:{line})"
    )
    assert EPS_HINT in result.hint


@pytest.mark.parametrize("written", MASK_AFTER_SOFTMAX)
def test_a_mask_after_the_softmax_is_located_at_the_pattern_and_named(written, grade, tmp_path):
    """The scores named before the mask are compared with GPT-2's where its mask keeps them: they match."""
    body = MASK_AFTER_SOFTMAX[written]
    package = write_variant(tmp_path, {"attention.py": [(MASKED_THEN_SOFTMAX, body)]})
    result = by_id(grade(package, "attention"))["attention"]
    line = line_of(package, "attention.py", body.splitlines()[1])
    nan_origin = "; a NaN first appears in your z" if "-inf" in written else ""  # -inf weights times v: inf - inf
    assert result.divergence == (
        f"q, k, v, unscaled_scores, attn_scores match the random reference; attn_pattern is the first step that does "
        f"not (attention.py:{line}){nan_origin}"
    )
    assert result.hint.startswith("the mask is applied after the softmax"), result.hint


# The mask after the softmax, the scaling written inline in that line: q.k named attn_scores before it is right.
SCALED_INLINE = {
    "masked with -inf": f"        attn_pattern = self.apply_causal_mask(({SCALED}).softmax(dim=-1))\n",
    "zeroed by tril": f"        attn_pattern = ({SCALED}).softmax(dim=-1).tril()\n",
}
MATMUL_SCALED_INLINE = ATTENTION_MATMUL.replace(" / math.sqrt(self.cfg.d_head)", "").replace(
    "self.apply_causal_mask(scores).softmax(dim=-1)",
    "self.apply_causal_mask((scores / math.sqrt(self.cfg.d_head)).softmax(dim=-1))",
)
INLINE_VARIANTS = {
    written: {"attention.py": [(MASKED_THEN_SOFTMAX, body)]} for written, body in SCALED_INLINE.items()
} | {"matmul, masked with -inf": {"attention.py": replace_attention_body(MATMUL_SCALED_INLINE)}}


@pytest.mark.parametrize("written", tiered(INLINE_VARIANTS, ["masked with -inf"]))
def test_a_step_computed_inline_is_said_so_at_the_line_that_computes_it(written, grade, tmp_path):
    """Not at the right q.k named before it, which the scaled scores (computed inline) come from: the pattern's line,
    which the named mistake (the mask after the softmax) also names."""
    package = write_variant(tmp_path, INLINE_VARIANTS[written])
    result = by_id(grade(package, "attention"))["attention"]
    line = line_holding(package, "attention.py", "softmax(dim=-1)")
    names = "q, k, v, unscaled_scores match the random reference; attn_scores is not among the tensors your code names"
    nan_origin = "; a NaN first appears in your z" if "-inf" in written else ""  # -inf weights times v: inf - inf
    assert (
        result.divergence == f"{names}; attn_pattern is the first step that differs (attention.py:{line}){nan_origin}"
    )
    assert (result.file, result.line) == ("attention.py", line)
    assert result.hint.startswith("the mask is applied after the softmax"), result.hint


HEADS_MERGED = {"rearrange": MERGED_BY_REARRANGE, "transpose and reshape": MERGED_BY_TRANSPOSE}


@pytest.mark.parametrize("written", tiered(HEADS_MERGED, ["rearrange"]))
def test_heads_merged_in_the_wrong_order_are_named_at_the_merge(written, grade, tmp_path):
    """Not at the matmul with W_O after it (right for a z merged right): the merge holds z's values, misordered."""
    body = HEADS_MERGED[written]
    package = write_variant(tmp_path, {"attention.py": [(W_O_EINSUM, body)]})
    result = by_id(grade(package, "attention"))["attention"]
    line, name = line_of(package, "attention.py", body.splitlines()[0]), body.split()[0]
    assert result.divergence == (
        "q, k, v, unscaled_scores, attn_scores, attn_pattern, z match the random reference; output is the first step "
        f"that does not: your {name} holds z's values in another order (attention.py:{line})"
    )
    assert result.hint == HEADS_MERGED_WRONG and result.next_step == f"most likely: {HEADS_MERGED_WRONG}"


def test_a_broadcast_pos_embed_is_never_blamed_by_the_whole_model(grade, tmp_path):
    edits = BROADCAST_POSITIONS | {
        "transformer.py": [("self.unembed(self.ln_final(residual))", "self.unembed(residual)")]
    }
    package = write_variant(tmp_path, edits)
    result = by_id(grade(package, "transformer"))["transformer"]
    line = line_of(package, "transformer.py", "return self.unembed(residual)")
    assert result.divergence == (
        "embed, pos_embed, resid_pre, blocks.0-blocks.11 match the random reference; ln_final is not among the "
        f"tensors your code names; unembed is the first step that differs (transformer.py:{line})"
    )


def test_a_block_that_differs_on_the_right_input_is_not_located_by_the_whole_model(grade, tmp_path):
    """The difference is inside the learner's block, which the whole model's steps do not reach: no line of
    transformer.py (right) or of block.py (a sublayer's call, which need not be the wrong line) is named."""
    edits = BROADCAST_POSITIONS | {"block.py": [("resid_post = resid_mid + self.mlp(", "resid_post = self.mlp(")]}
    result = by_id(grade(write_variant(tmp_path, edits), "transformer"))["transformer"]
    assert result.divergence == (
        "embed, pos_embed, resid_pre match the random reference; blocks.0 is the first step that does not, "
        "though it was given the right input: cannot locate the difference inside your blocks.0"
    )


def test_a_variance_by_moments_is_named_and_not_told_to_move_eps(grade, tmp_path):
    """E[x^2] - E[x]^2 with eps in the right place: the case of a large mean names it, at the variance's line."""
    package, result = layernorm(grade, tmp_path, VARIANCE_BY_MOMENTS)
    assert result.status == "fail" and "on large_mean" in result.message, result.message
    assert "E[x^2] - E[x]^2 loses its digits" in result.message and ADD_EPS not in result.message, result.message
    lines = (package / "normalization.py").read_text().splitlines()
    assert result.line == next(i for i, line in enumerate(lines, 1) if "(residual**2).mean" in line), result.line


def test_right_eps_with_an_assert_that_fails_is_not_told_to_move_eps(grade, tmp_path):
    _, result = layernorm(grade, tmp_path, ASSERTS_A_VARIANCE)
    assert result.status == "error" and "AssertionError" in result.message and "on constant_vectors" in result.message
    assert ADD_EPS not in result.message, result.message


# Outside implementations, right but for an assert of their own that the graded inputs break: (body, its message,
# what the report adds after the line).
OWN_ASSERTS = {
    # Its output standardised to 1e-6: not where the mean is large beside the spread (float32 cancels digits there).
    "standardised output": (
        """        x = residual - residual.mean(-1, keepdim=True)
        x = x / (x.var(-1, keepdim=True, unbiased=False) + self.cfg.layer_norm_eps).sqrt()
        assert x.mean(-1).abs().max() < 1e-6, "not standardised"
        return x * self.w + self.b
""",
        "not standardised",
        " on large_mean",
    ),
    "one sequence at a time": (
        """        batch, posn, d_model = residual.shape
        assert batch == 1, f"one sequence at a time, got {batch}"
        x = residual - residual.mean(-1, keepdim=True)
        return x / (x.var(-1, keepdim=True, unbiased=False) + self.cfg.layer_norm_eps).sqrt() * self.w + self.b
""",
        "one sequence at a time, got 2",
        "",
    ),
}


@pytest.mark.parametrize("written", tiered(OWN_ASSERTS, ["standardised output"]))
def test_the_learners_own_assert_is_reported_as_itself(written, grade, tmp_path):
    """Its type, its message, its line, the case it fired on: no mistake named, even on a case built for one."""
    body, message, case = OWN_ASSERTS[written]
    package, result = layernorm(grade, tmp_path, body)
    line = line_holding(package, "normalization.py", "assert ")
    code = (package / "normalization.py").read_text().splitlines()[line - 1].strip()
    assert result.status == "error"
    assert result.message == f"AssertionError: {message} (normalization.py:{line}: {code}){case}", result.message
    assert result.hint is None and result.next_step == f"fix the exception at normalization.py:{line}"


def test_a_wrong_statistic_without_keepdim_is_blamed_at_its_line(grade, tmp_path):
    body = WITHOUT_KEEPDIM.replace("unbiased=False", "unbiased=True")
    package, result = layernorm(grade, tmp_path, body)
    line = line_of(package, "normalization.py", body.splitlines()[1])
    assert result.divergence == (
        f"mean matches the random reference; var is the first step that does not (normalization.py:{line})"
    )


# --- the comparison itself, on made-up tensors --------------------------------------------------

TOLERANCE = Tolerance()


def test_an_argument_never_stands_for_a_step():
    """The input has the output's shape, but the learner's code was given it, not computed it."""
    x, right, wrong = np.ones((1, 2, 3)), np.full((1, 2, 3), 2.0), np.full((1, 2, 3), 5.0)
    steps = [("normalized", right), ("output", right + 1)]
    candidates = [Candidate(x, "residual"), Candidate(wrong, "return", "f.py", 9)]
    divergence = first_divergence(steps, candidates, TOLERANCE, "GPT-2")
    assert (
        divergence.text
        == "normalized is not among the tensors your code names; output is the first step that differs (f.py:9)"
    )
    assert (divergence.file, divergence.line) == ("f.py", 9)
    assert first_divergence(steps, [Candidate(x, "residual")], TOLERANCE) is None  # nothing produced: nothing to say


def test_the_stand_in_comes_after_what_matched():
    """A scratch tensor of the step's shape computed before the steps that matched is not the step's."""
    a, b = np.zeros((2, 2)), np.ones((2, 2))
    steps = [("q", a), ("scores", b)]
    candidates = [
        Candidate(b + 5, "scratch", "f.py", 3),
        Candidate(a, "q", "f.py", 4),
        Candidate(b + 1, "s", "f.py", 5),
    ]
    divergence = first_divergence(steps, candidates, TOLERANCE, "GPT-2")
    assert divergence.text == "q matches GPT-2; scores is the first step that does not (f.py:5)"


# --- todo: the function that raised, at its line ---------------------------------------------------


def test_logit_lens_written_on_a_stub_layernorm_blames_the_layernorm(grade, tmp_path):
    """The blocks answer GPT-2's outputs (one mistake, one penalty), so ln_final is what the lens reaches."""
    package = write_variant(tmp_path, {})
    shutil.copy(stubs() / "normalization.py", package / "normalization.py")
    result = by_id(grade(package, "interp.logit_lens"))["interp.logit_lens"]
    line = raise_line(package / "normalization.py", "LayerNorm.forward")
    assert result.status == "todo"
    assert result.message == f"LayerNorm.forward is not implemented yet (normalization.py:{line})"
    assert result.next_step == f"implement LayerNorm.forward (normalization.py:{line})"


def test_logit_lens_written_on_a_stub_block_passes_on_gpt2s_blocks(grade, tmp_path):
    package = write_variant(tmp_path, {})
    shutil.copy(stubs() / "block.py", package / "block.py")
    results = by_id(grade(package, "block", "interp.logit_lens"))
    assert results["block"].status == "todo"
    assert results["interp.logit_lens"].status == "pass", results["interp.logit_lens"].message


def test_a_stub_logit_lens_on_a_written_model_blames_itself(grade, tmp_path):
    package = write_variant(tmp_path, {})
    shutil.copy(stubs() / "interp.py", package / "interp.py")
    result = by_id(grade(package, "interp.logit_lens"))["interp.logit_lens"]
    line = raise_line(package / "interp.py", "logit_lens")
    assert result.message == f"logit_lens is not implemented yet (interp.py:{line})"
    assert (result.file, result.line) == ("interp.py", line)


@pytest.mark.parametrize("check_id", ["sampling.generate", "interp.direct_path", "beam.filter"])
def test_a_check_run_by_a_driver_never_suggests_trace(check_id):
    """A driver runs the learner's code without the recorder, so --trace prints nothing for it."""
    from grader.checks import registry
    from grader.host.results import CheckResult
    from grader.host.verdict import next_step

    (check,) = [c for c in registry() if c.id == check_id]
    result = CheckResult(check.id, check.part, check.summary, "fail", 1, "differs", file="x.py", line=3)
    said = next_step(check, result, "GPT-2")
    assert "--trace" not in said and "x.py:3" in said


# --- the recorder: which line produced each tensor ---------------------------------------------------

TRACED = """import torch


def f(x):
    y = x * 2
    z = (
        y
        + 1
    )
    w = torch.stack([t * 3 for t in z])
    return w.sum(dim=0)
"""


def test_the_recorder_keeps_the_line_of_each_binding_and_return(tmp_path):
    """An argument has no line; a statement over several lines is at its first; a return at its own."""
    import importlib.util

    import torch

    from grader.learner.recorder import Recorder

    (tmp_path / "traced.py").write_text(TRACED)
    spec = importlib.util.spec_from_file_location("traced", tmp_path / "traced.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    recorder = Recorder(tmp_path, ["locals"], ["locals"], None, "", "f")
    with recorder:
        module.f(torch.ones(2, 2))
    lines = {(r.name, r.kind): (r.file, r.line) for r in recorder.records if r.tag == "f"}
    assert lines == {
        ("x", "locals"): ("traced.py", None),
        ("y", "locals"): ("traced.py", 5),
        ("z", "locals"): ("traced.py", 6),
        ("w", "locals"): ("traced.py", 10),
        ("return", "returns"): ("traced.py", 11),
    }
    assert len(recorder.kept) == len(recorder.records)  # a return travels back with the locals
