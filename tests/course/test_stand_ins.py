"""One mistake, one penalty across parts: a check whose subject composes parts (the whole model, the cached model,
Part 6's model, the MLP with its gelu_new, the attention with its mask) is graded again with the grader's own part in
place of each of the learner's that fails its own check, and says so in one line. The dependency step on hand-built
results: tests/unit/test_stand_ins_unit.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
from repo import REPO, SOLUTIONS, by_id, write_variant
from test_mistakes import MISTAKES

N_MINUS_1 = MISTAKES["variance with N-1"][1]
NO_LN_FINAL = MISTAKES["ln_final left out"][1]
RELU = MISTAKES["ReLU as gelu_new"][1]
COMPOSITES = ("transformer", "kv_cache", "concat.transformer")
ON_OURS = "graded with the grader's LayerNorm in place of yours, which fails layernorm"


@pytest.fixture(scope="module")
def n_minus_1(grade, tmp_path_factory):
    """LayerNorm's variance divided by N-1, graded at layernorm and the checks that compose it."""
    return grade(write_variant(tmp_path_factory.mktemp("n_minus_1"), N_MINUS_1), "layernorm", "block", *COMPOSITES)


def test_a_variance_with_n_minus_1_costs_layernorm_only(n_minus_1):
    results = by_id(n_minus_1)
    assert {check_id: result.status for check_id, result in results.items()} == {
        check_id: "fail" if check_id == "layernorm" else "pass" for check_id in results
    }
    assert n_minus_1.score == n_minus_1.max_score - results["layernorm"].max_score
    assert "N-1" in results["layernorm"].hint


@pytest.mark.parametrize("check_id", COMPOSITES)
def test_each_composite_says_in_one_line_which_part_was_the_graders(check_id, n_minus_1):
    result = by_id(n_minus_1)[check_id]
    assert (result.notes[0], result.stood_in) == (ON_OURS, ["layernorm"]), result.notes
    assert not any("fix layernorm" in note for note in result.notes)  # the part is named once, in that line


def test_the_block_passed_on_its_own_and_is_not_graded_again(n_minus_1):
    block = by_id(n_minus_1)["block"]
    assert block.stood_in == [] and block.notes == [
        "passes, though your LayerNorm fails its own check: fix layernorm too"
    ]


def test_a_composites_own_mistake_still_fails_with_the_graders_part_in_place(grade, tmp_path):
    package = write_variant(tmp_path, N_MINUS_1 | NO_LN_FINAL)
    transformer = by_id(grade(package, "layernorm", "transformer"))["transformer"]
    assert transformer.status == "fail" and "ln_final" in transformer.hint, (transformer.message, transformer.hint)
    assert transformer.notes[0] == ON_OURS and transformer.stood_in == ["layernorm"]
    assert not transformer.message.startswith("your "), transformer.message  # its own mistake, not the part's
    assert transformer.file == "transformer.py", (transformer.file, transformer.line)


def test_a_slip_in_gelu_new_costs_gelu_new_only(grade, tmp_path):
    """Closed from issue 56: mlp's where once pointed at its right call of a failing gelu_new."""
    results = by_id(grade(write_variant(tmp_path, RELU), "gelu_new", "mlp", "transformer"))
    assert [results[c].status for c in ("gelu_new", "mlp", "transformer")] == ["fail", "pass", "pass"]
    for check_id in ("mlp", "transformer"):
        assert results[check_id].notes[0] == "graded with the grader's gelu_new in place of yours, which fails gelu_new"


@pytest.mark.slow  # the whole course
def test_the_whole_course_graded_with_a_variance_with_n_minus_1_loses_layernorms_points_only(grade, tmp_path):
    report = grade(write_variant(tmp_path, N_MINUS_1))
    failing = {result.id for result in report.checks if result.status != "pass"}
    assert failing == {"layernorm"}, {r.id: r.message for r in report.checks if r.id in failing}
    assert report.score == report.max_score - 2


# --- the learner's process: each binding replaced, and put back ------------------------------------------------------

BINDINGS = """
import sys
from pathlib import Path
from grader.learner.package import LearnerPackage
from grader.learner.part_stand_ins import OWN, standing_in

package = LearnerPackage(Path(sys.argv[1]))
block, attention = package.module("block"), package.module("attention")
learners_norm, learners_mask = block.LayerNorm, attention.Attention.apply_causal_mask
parts = ["normalization.LayerNorm", "attention.Attention.apply_causal_mask", "mlp.gelu_new"]
with standing_in(package, parts):
    transformer = package.module("transformer")  # imported inside: it binds the grader's
    print(block.LayerNorm is transformer.LayerNorm is package.module("normalization").LayerNorm is OWN[parts[0]])
    print(package.module("kv_cache").CachedAttention.apply_causal_mask is OWN[parts[1]])
    print(package.module("mlp").gelu_new is OWN[parts[2]])
print(block.LayerNorm is transformer.LayerNorm is package.module("normalization").LayerNorm is learners_norm)
print(attention.Attention.apply_causal_mask is learners_mask, package.module("mlp").gelu_new.__module__)
"""


def test_the_graders_parts_replace_every_binding_and_the_learners_are_put_back(tmp_path):
    """Put back, as the worker that runs checks unforked (macOS, Windows) keeps the learner's modules imported."""
    ran = subprocess.run(
        [sys.executable, "-c", BINDINGS, str(SOLUTIONS)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert ran.stdout.splitlines() == ["True", "True", "True", "True", "True learner_package.mlp"], ran.stderr


def test_the_graders_parts_hold_no_line_of_the_solutions():
    """grader/ ships to learners: its parts are built from torch's functions, never from the solutions' lines."""
    from grader.host.tools.release import hidden_lines

    source = (REPO / "grader" / "learner" / "part_stand_ins.py").read_text().splitlines()
    assert not {line.strip() for line in source} & hidden_lines(SOLUTIONS)


def test_a_mask_that_hides_the_diagonal_costs_the_mask_alone(grade, tmp_path):
    """Closed from issue 56: the cached model once named its own offset one short (NaN logits) at a right line of
    kv_cache.py, for a mask of attention.py that hid the diagonal."""
    edits = {"attention.py": [("diagonal=past_kv_pos_offset + 1)", "diagonal=past_kv_pos_offset)")]}
    results = by_id(grade(write_variant(tmp_path, edits), "attention.causal_mask", "attention", "kv_cache"))
    mask = results["attention.causal_mask"]
    assert mask.status == "fail" and "on the diagonal are masked" in mask.message, mask.message
    on_ours = (
        "graded with the grader's Attention.apply_causal_mask in place of yours, which fails attention.causal_mask"
    )
    for check_id in ("attention", "kv_cache"):
        assert (results[check_id].status, results[check_id].notes[0]) == ("pass", on_ours), results[check_id].message
