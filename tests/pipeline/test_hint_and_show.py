"""`grade --hint` and `grade --show` as a learner runs them, on the random reference.

--hint goes one level deeper each run (the idea, where, the numbers), remembers the level in `.grade-hints.json`
beside the package, resets a corrupt file with a note, says so when every check passes, and never prints a line
of the solutions. --show prints the module on the reference's weights: the parameter total is the reference's, and
the whole model's prediction table holds the argmax of the reference's logits; a failing module still prints.
"""

from __future__ import annotations

import ast
import json
import re

import pytest
from repo import REPO, SOLUTIONS, run_grade, write_variant

from grader.host.modes.hints import STATE_FILE
from grader.host.tools.release import hidden_lines

RANDOM = ("--reference", "random")
UNSCALED = {
    "attention.py": [
        ("self.apply_causal_mask(attn_scores / self.cfg.d_head**0.5)", "self.apply_causal_mask(attn_scores)")
    ]
}
NO_LN_FINAL = {"transformer.py": [("return self.unembed(self.ln_final(residual))", "return self.unembed(residual)")]}
QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")  # a token as --show prints it: Python's repr


@pytest.fixture(scope="module")
def hidden():
    return hidden_lines(SOLUTIONS)


def assert_no_solution_line(printed: str, hidden: set[str]) -> None:
    """No line printed holds a line the stubs hide, whole or inside it (stricter than the release's guard)."""
    leaks = [(line, secret) for line in printed.splitlines() for secret in hidden if secret in line]
    assert not leaks, leaks


def hint(package, *checks: str):
    return run_grade(*RANDOM, "--exercises", str(package), *checks, "--hint")


def levels_in(package) -> dict:
    return json.loads((package.parent / STATE_FILE).read_text())["levels"]


def test_hint_goes_one_level_deeper_each_run_and_remembers_it(reference, tmp_path, hidden):
    package = write_variant(tmp_path, UNSCALED)
    said = {}
    for level in (1, 2, 3):
        result = hint(package, "attention", "block")
        assert result.returncode == 1, result.stderr
        assert result.stdout.startswith(f"hint {level} of 3 for attention (fail)"), result.stdout
        assert levels_in(package) == {"attention": level}
        assert_no_solution_line(result.stdout + result.stderr, hidden)
        said[level] = result.stdout
    assert "read: docs/course/05-attention.md" in said[1] and "grade attention --hint again" in said[1]
    assert "attn_scores is the first step that does not" in said[2]
    assert "most likely: the scores are not scaled" in said[2]
    # the walk: q, k, v and q.k matched, then attn_scores shape by shape, yours 8 times the reference's
    assert re.search(r"^\s+q\s+\(1, 7, 12, 64\)\s+yours: q \(1, 7, 12, 64\), same values$", said[3], re.MULTILINE)
    assert "attn_scores (yours: attn_scores_masked at attention.py:" in said[3]
    ratios = re.search(r"yours / theirs:(.*)$", said[3], re.MULTILINE).group(1).split()
    assert ratios and all(float(r) == pytest.approx(8.0, rel=1e-3) for r in ratios), said[3]


MASKED_AFTER_THE_SOFTMAX = {
    "attention.py": [
        (
            "attn_scores_masked = self.apply_causal_mask(attn_scores / self.cfg.d_head**0.5)\n"
            "        attn_pattern = attn_scores_masked.softmax(dim=-1)",
            "attn_pattern = (attn_scores / self.cfg.d_head**0.5).softmax(dim=-1).tril()",
        )
    ]
}


def test_the_last_hint_walks_to_the_step_the_where_names(reference, tmp_path):
    """The mask after the softmax, the scaling inline: where and next name the pattern, and so does the walk; never
    the unscaled q.k named attn_scores, whose 8s beside the reference's would read as a forgotten scaling."""
    package = write_variant(tmp_path, MASKED_AFTER_THE_SOFTMAX)
    (package.parent / STATE_FILE).write_text(json.dumps({"levels": {"attention": 2}}))
    said = hint(package, "attention").stdout
    line = next(i for i, code in enumerate((package / "attention.py").read_text().splitlines(), 1) if ".tril()" in code)
    assert said.startswith("hint 3 of 3 for attention (fail)"), said
    assert re.search(
        r"^\s+unscaled_scores\s+\(1, 12, 7, 7\)\s+yours: attn_scores \(1, 12, 7, 7\), same values$", said, re.M
    )
    assert re.search(r"^\s+attn_scores\s+\(1, 12, 7, 7\)\s+not among your named tensors$", said, re.M), said
    assert f"attn_pattern (yours: attn_pattern at attention.py:{line})" in said, said
    assert "attn_scores (yours:" not in said


def test_asked_again_hint_grades_up_to_the_hinted_check_first(reference, tmp_path):
    """The next hint waits for the checks up to the one hinted, not for every check: an earlier one failing now comes
    first, and one passing now lets the rest be graded."""
    package = write_variant(tmp_path, {"normalization.py": [("unbiased=False", "unbiased=True")]})
    (package.parent / STATE_FILE).write_text(json.dumps({"levels": {"layernorm": 1}}))
    again = hint(package)  # every check selected
    assert again.stdout.startswith("hint 2 of 3 for layernorm (fail)"), again.stdout + again.stderr
    assert "grade: --hint: grading up to layernorm first" in again.stderr
    (package / "normalization.py").write_text((SOLUTIONS / "normalization.py").read_text())
    embedding = (package / "embedding.py").read_text()
    (package / "embedding.py").write_text(embedding.replace("return self.W_E[tokens]", "return self.W_E[tokens] * 2"))
    earlier = hint(package)
    assert earlier.stdout.startswith("hint 1 of 3 for embed (fail)"), earlier.stdout + earlier.stderr
    (package / "embedding.py").write_text(embedding)
    passing = hint(package, "embed", "pos_embed", "layernorm", "gelu_new", "mlp")  # embed's level is remembered
    assert "grading up to embed first" in passing.stderr
    assert passing.stdout.strip() == "every selected check passes (5 of 5): no hint to give", passing.stdout


def test_a_corrupt_state_file_is_reset_with_a_note(reference, tmp_path):
    package = write_variant(tmp_path, UNSCALED)
    (package.parent / STATE_FILE).write_text('{"levels": {"attention": "lots"')
    result = hint(package, "attention")
    assert result.stdout.startswith("hint 1 of 3 for attention"), result.stdout
    notes = [line for line in result.stderr.splitlines() if STATE_FILE in line]
    assert len(notes) == 1 and "reset" in notes[0], result.stderr
    assert levels_in(package) == {"attention": 1}


def test_a_passing_selection_says_so_and_gives_no_hint(reference, tmp_path):
    package = write_variant(tmp_path, {})  # the solutions, copied: a state file would land beside them
    result = hint(package, "attention", "layernorm")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "every selected check passes (3 of 3): no hint to give"
    assert not (package.parent / STATE_FILE).exists()


def prediction_rows(printed: str, check: str) -> list[tuple[str, str, str]]:
    """(token, yours, the reference's) of each row of a check's prediction table."""
    section = printed.split(f"\n{check} (", 1)[1].split("next-token predictions on the prompt", 1)[1]
    rows = []
    for line in section.splitlines()[2:]:
        cells = [ast.literal_eval(cell) for cell in QUOTED.findall(line)]
        if len(cells) != 3:
            break
        rows.append(tuple(cells))
    return rows


def test_show_prints_the_solutions_model_on_the_reference(reference):
    result = run_grade(*RANDOM, "--solutions", "attention", "transformer", "--show")
    printed = result.stdout
    assert result.returncode == 0, result.stderr
    assert "a seeded RANDOM model of GPT-2's shape, not GPT-2" in printed  # said once, offline
    total = reference.meta["param_counts"]["total"]
    assert f"total: {total:,} numbers in 198 parameters (the reference's: {total:,})" in printed
    assert re.search(r"^\s+W_Q\s+\(12, 768, 64\)\s+requires_grad=True\s+589,824$", printed, re.MULTILINE)
    assert re.search(r"^\s+q\s+\(1, 7, 12, 64\)\s+# batch, posn, n_heads, d_head; = the reference's q", printed, re.M)
    before_b_O = "# batch, posn, d_model; = the reference's output but for a bias (one vector added at every position)"
    assert re.search(rf"^\s+attn_out\s+\(1, 7, 768\)\s+{re.escape(before_b_O)}$", printed, re.M)  # not "not the ..."
    assert "blocks.1-blocks.11: the same 16 parameters as blocks.0" in printed
    assert "missing keys (yours has, the reference's weights do not): none" in printed
    rows = prediction_rows(printed, "transformer")
    vocabulary = reference.vocabulary()
    expected = reference.expected("transformer")["prompt"][0].argmax(-1)
    assert [row[0] for row in rows] == [vocabulary[t] for t in reference.meta["prompt_tokens"]]
    assert [row[2] for row in rows] == [vocabulary[int(t)] for t in expected]
    assert [row[1] for row in rows] == [row[2] for row in rows]


def test_show_prints_a_failing_model_too(reference, tmp_path):
    package = write_variant(tmp_path, NO_LN_FINAL)
    result = run_grade(*RANDOM, "--exercises", str(package), "transformer", "--show")
    assert result.returncode == 1, result.stderr
    diff = re.search(r"max abs diff against the random reference: (\S+)", result.stdout)
    assert diff and float(diff.group(1)) > 0.1, result.stdout
    assert re.search(
        r"^\s+unembed\s+\(1, 7, 50257\)\s+# .*; not the reference's unembed: max abs diff", result.stdout, re.M
    )
    rows = prediction_rows(result.stdout, "transformer")
    assert len(rows) == len(reference.meta["prompt_tokens"]) and any(row[1] != row[2] for row in rows)


def test_the_idea_reads_the_course_page_as_text_not_markdown():
    """--hint's first level quotes a page: its emphasis, code marks and links are shown as a terminal shows them."""
    from grader.host.modes.hints import WIDTH, first_paragraph

    lines = first_paragraph(REPO / "docs" / "course" / "05-attention.md")
    assert any(line.strip().startswith("1 Queries, keys, values.") for line in lines), lines
    assert not [line for line in lines if "**" in line or "`" in line or len(line) > WIDTH]


def test_trace_gives_what_a_module_returns_and_next_does_not_ask_for_the_trace_it_printed(reference, tmp_path):
    """Embed returns W_E[tokens] unnamed: the trace still gives its shape, and a failing Embed's `next:` points at
    the trace printed, not at running --trace again."""
    package = write_variant(tmp_path, {"embedding.py": [("return self.W_E[tokens]", "return self.W_E[tokens] * 1.01")]})
    traced = run_grade(*RANDOM, "--exercises", str(package), "embed", "--trace")
    assert traced.returncode == 1, traced.stderr
    assert re.search(r"^\[embed\] +return: \(1, 7, 768\) +expected \(1, 7, 768\)", traced.stdout, re.M), traced.stdout
    said = " ".join(traced.stdout.split())
    assert "the trace gives every tensor's shape" in said and "--trace prints" not in said
    untraced = run_grade(*RANDOM, "--exercises", str(package), "embed")
    assert "grade embed --trace prints every tensor's shape" in " ".join(untraced.stdout.split())
