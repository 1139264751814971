"""Diagnosis: the shape trace, the first divergence from GPT-2 and the line that produced it, and the
reference's own fingerprints."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from repo import SOLUTIONS, by_id, run_grade, write_variant
from test_alternatives import ATTENTION_MATMUL, replace_attention_body

from grader.checks import registry
from grader.checks.model.attention import attend
from grader.host.diagnose import close
from grader.shared import wire

MATCHED = "q, k, v, unscaled_scores match the random reference"


def statement_at(package, file: str, line: int) -> str:
    """The statement of the learner's file that spans `line`, as one string."""
    import ast

    source = (package / file).read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.stmt) and not hasattr(node, "body") and node.lineno <= line <= node.end_lineno:
            return ast.get_source_segment(source, node)
    raise AssertionError(f"no statement at {file}:{line}")


def assert_points_at(result, package, file: str, text: str, code: str) -> None:
    """The divergence is `text` at the line of `file` the result points to, a statement holding `code`."""
    assert result.divergence == f"{text} ({file}:{result.line})" and result.file == file, result.divergence
    assert code in statement_at(package, file, result.line)


def trace_section(stdout: str, check_id: str) -> str:
    return stdout.split(f"trace of {check_id}:\n", 1)[1].split("trace of ", 1)[0]


def traced_shapes(stdout: str, check_id: str) -> dict[str, list[tuple]]:
    section = trace_section(stdout, check_id)
    shapes: dict[str, list[tuple]] = {}
    for tag, name, shape in re.findall(r"^\[([\w.]+)\]\s+(\w+): (\([\d, ]*\))", section, flags=re.M):
        shapes.setdefault(name, []).append((tag, shape))
    return shapes


@pytest.fixture(scope="module")
def solutions_traced(reference):
    """One `grade --trace` of the solutions' attention and whole model, which the two tests below read apart."""
    return run_grade("--reference", "random", "--solutions", "attention", "transformer", "--trace")


def test_trace_of_the_solution_attention(solutions_traced):
    result = solutions_traced
    assert result.returncode == 0, result.stdout + result.stderr
    shapes = traced_shapes(result.stdout, "attention")
    for name, shape in {
        "q": "(1, 7, 12, 64)",
        "k": "(1, 7, 12, 64)",
        "v": "(1, 7, 12, 64)",
        "attn_pattern": "(1, 12, 7, 7)",
        "z": "(1, 7, 12, 64)",
        "W_Q": "(12, 768, 64)",
    }.items():
        assert shapes[name] == [("blocks.0.attn", shape)], name
    assert {shape for _, shape in shapes["attn_scores"]} == {"(1, 12, 7, 7)"}
    section = trace_section(result.stdout, "attention")
    assert re.search(r"\] +q: \(1, 7, 12, 64\) +expected \(1, 7, 12, 64\)  = the reference's q$", section, flags=re.M)


def test_trace_says_which_steps_match_as_show_does(reference, tmp_path):
    """The variance divided by N - 1: the mean matches, the var (1e-6 off a 1e-3 step) and all after it do not."""
    package = write_variant(tmp_path, {"normalization.py": [("unbiased=False", "unbiased=True")]})
    traced = run_grade("--reference", "random", "--exercises", str(package), "layernorm", "--trace")
    section = trace_section(traced.stdout, "layernorm")
    said = {
        m.group(1): m.group(2)
        for m in re.finditer(r"\] +(\w+): .*?  (= the reference's \w+|<- not .*)$", section, re.M)
    }
    assert said["residual_mean"] == "= the reference's mean"
    assert said["residual_var"] == "<- not the reference's var" and said["normalized"].startswith("<- not")


def test_trace_tags_nested_modules_by_their_path(solutions_traced):
    """The whole model's trace: the block's own is only its wiring, its sublayers answering GPT-2's outputs."""
    result = solutions_traced
    assert result.returncode == 0, result.stdout + result.stderr
    shapes = traced_shapes(result.stdout, "transformer")
    assert ("blocks.0.ln1", "(1, 7, 768)") in shapes["normalized"] and ("blocks.0.ln2", "(1, 7, 768)") in shapes[
        "normalized"
    ]
    assert shapes["pre"][:2] == [("blocks.0.mlp", "(1, 7, 3072)"), ("blocks.1.mlp", "(1, 7, 3072)")]


def test_trace_of_a_failing_module_stops_where_it_failed(reference, tmp_path):
    package = write_variant(
        tmp_path,
        {
            "attention.py": [
                (
                    "        attn_scores = einops.einsum(",
                    "        raise ValueError('stuck after v')\n        attn_scores = einops.einsum(",
                )
            ]
        },
    )
    result = run_grade("--reference", "random", "--exercises", str(package), "attention", "--trace")
    shapes = traced_shapes(result.stdout, "attention")
    assert "v" in shapes and "z" not in shapes
    assert "attention (error): ValueError: stuck after v (attention.py:" in result.stdout.replace("\n", " ")


def test_first_divergence_of_a_scaling_bug_is_the_scores(grade, tmp_path):
    package = write_variant(
        tmp_path,
        {
            "attention.py": [
                ("self.apply_causal_mask(attn_scores / self.cfg.d_head**0.5)", "self.apply_causal_mask(attn_scores)")
            ]
        },
    )
    result = by_id(grade(package, "attention"))["attention"]
    text = f"{MATCHED}; attn_scores is the first step that does not: your attn_scores_masked equals unscaled_scores"
    assert_points_at(result, package, "attention.py", text, "attn_scores_masked = self.apply_causal_mask(attn_scores)")


def test_divergence_matches_by_value_whatever_the_layout(grade, tmp_path):
    """Head-major q, k, v (matmul style) still match GPT-2's steps; the bug is found after them."""
    body = ATTENTION_MATMUL.replace(" / math.sqrt(self.cfg.d_head)", "")
    package = write_variant(tmp_path, {"attention.py": replace_attention_body(body)})
    result = by_id(grade(package, "attention"))["attention"]
    # q.k named scores is right; the scores are scaled (not) where the pattern is computed, inline.
    text = (
        f"{MATCHED}; attn_scores is not among the tensors your code names; attn_pattern is the first step that differs"
    )
    assert_points_at(result, package, "attention.py", text, "pattern = self.apply_causal_mask(scores)")
    assert "not scaled" in result.hint


def test_a_block_bug_is_localised_to_its_block(grade, tmp_path):
    skip_attention_in_block_5 = (
        "            residual = block(residual) if block is not self.blocks[5] "
        "else residual + block.mlp(block.ln2(residual))"
    )
    package = write_variant(
        tmp_path, {"transformer.py": [("            residual = block(residual)", skip_attention_in_block_5)]}
    )
    result = by_id(grade(package, "transformer"))["transformer"]
    assert result.status == "fail"
    text = (
        "embed, pos_embed, resid_pre, blocks.0-blocks.4 match the random reference; "
        "blocks.5 is the first step that does not"
    )
    assert_points_at(result, package, "transformer.py", text, "block is not self.blocks[5]")


def test_an_output_hard_coded_to_the_prompt_fails(grade, tmp_path):
    package = write_variant(tmp_path, {"embedding.py": [("return self.W_E[tokens]", "return self.W_E[tokens[:1]]")]})
    result = by_id(grade(package, "embed"))["embed"]
    assert (
        result.status == "fail"
        and "differs from the random reference on random: output shape (1, 12, 768), expected (2, 12, 768)"
        in result.message
    )


def test_next_step_points_at_the_learners_line(grade, tmp_path):
    package = write_variant(
        tmp_path, {"mlp.py": [("        post = gelu_new(pre)\n", "        post = gelu_new(pre) + undefined_name\n")]}
    )
    results = by_id(grade(package, "embed", "mlp"))
    assert re.fullmatch(r"fix the exception at mlp\.py:\d+", results["mlp"].next_step)
    assert results["embed"].next_step == ""


def test_every_known_mistake_is_detectable(reference):
    """Each fingerprint differs from GPT-2's own output on some case, or it could never be seen.

    (On a case where a mistake changes nothing, such as eps outside the square root at GPT-2's
    scale, a learner's output cannot both fail and match it, so no wrong hint can follow.)
    """
    # Exact GELU differs from gelu_new by under 5e-4: below the MLP check's tolerance on the random
    # model's small pre-activations. The gelu_new check (tolerance 1e-5) is where it shows.
    hidden_by_tolerance = {("mlp", "the activation is the exact (erf) GELU: GPT-2 uses the tanh approximation")}
    for check in registry():
        expected = reference.expected(check.id)
        detectable: dict[str, bool] = {}
        for case in reference.cases(check.id):
            for i, hint in enumerate(case.mistakes):
                mistake, correct = expected[wire.MISTAKE.format(case=case.name, i=i)], expected[case.name]
                detectable[hint] = detectable.get(hint, False) or not close(
                    np.nan_to_num(mistake), correct, check.tolerance
                )
        assert [h for h, ok in detectable.items() if not ok and (check.id, h) not in hidden_by_tolerance] == [], (
            check.id
        )


def test_the_grader_attention_equals_gpt2s_when_no_switch_is_flipped(reference):
    from safetensors.numpy import load_file

    weights = load_file(str(reference.weights_path))
    expected = reference.expected("attention")
    (attention,) = [check for check in registry() if check.id == "attention"]
    for case in reference.cases("attention"):
        name, layer = case.name, case.weights
        q, k, v = (torch.tensor(expected[wire.STEP.format(case=name, label=step)]) for step in ("q", "k", "v"))
        W_O, b_O = torch.from_numpy(weights[f"{layer}W_O"]), torch.from_numpy(weights[f"{layer}b_O"])
        ours = attend(q, k, v, W_O, b_O, scale=float(q.shape[-1]) ** 0.5).numpy()
        assert close(ours, expected[name], attention.tolerance), name


def test_solutions_get_no_diagnosis(grade):
    assert all(r.hint is None and r.divergence is None and r.next_step == "" for r in grade(SOLUTIONS).checks)
