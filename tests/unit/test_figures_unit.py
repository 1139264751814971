"""What the HTML report's figures take from a check's evidence (grader.host.figures), on hand-built evidence
(tests/support/figure_evidence.py): no reference build, no learner process, no torch."""

from __future__ import annotations

import math

import figure_evidence
import numpy as np
import pytest
from figure_evidence import (
    ABLATION_COSTS,
    GPT2_PATTERN,
    INDUCTION_SCORES,
    PREVIOUS_TOKEN_SCORES,
    REFERENCE_LOGITS,
    SEQ_LEN,
    ablation_evidence,
    attention_evidence,
    predictions_evidence,
    repeated_losses,
    scores_evidence,
    token_loss_evidence,
)

from grader.host import figures
from grader.host.modes.show import prediction_lines
from grader.shared import wire

pytestmark = pytest.mark.unit


def test_the_attention_figure_holds_each_heads_pattern_yours_and_the_difference():
    yours = GPT2_PATTERN.copy()
    yours[0, 1, 2] = [0.0, 0.5, 0.5]  # head 1's last query splits between the last two keys
    drawn = figures.attention_patterns(attention_evidence(yours))["attention"]
    assert drawn["model"] == "GPT-2" and drawn["case"] == "prompt"
    assert drawn["tokens"] == ["The", " cat", " sat"]
    assert drawn["gpt2"] == GPT2_PATTERN[0].tolist() and drawn["yours"] == yours[0].tolist()
    assert drawn["difference"][0] == [[0.0] * 3] * 3
    assert drawn["difference"][1] == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.5, 0.5]]


def test_the_last_tensor_of_the_patterns_shape_is_yours_and_the_random_reference_is_named():
    scores, pattern = np.full_like(GPT2_PATTERN, 7.0), GPT2_PATTERN.copy()
    drawn = figures.attention_patterns(attention_evidence(scores, pattern, kind="random"))["attention"]
    assert drawn["yours"] == GPT2_PATTERN[0].tolist() and drawn["model"] == "the random reference"


@pytest.mark.parametrize(
    "yours",
    [
        np.zeros((1, 2, 3, 4), dtype=np.float32),  # another shape: not a pattern of the prompt's
        np.zeros((0,), dtype=np.float32),  # empty
        np.ones((1, 2, 3, 3), dtype=bool),  # booleans are no pattern
    ],
    ids=["wrong shape", "empty", "bool"],
)
def test_without_a_pattern_of_the_references_shape_only_the_references_is_drawn(yours):
    drawn = figures.attention_patterns(attention_evidence(yours))["attention"]
    assert drawn["gpt2"] == GPT2_PATTERN[0].tolist()
    assert drawn["yours"] is None and drawn["difference"] is None


def test_nan_infinity_and_integers_in_your_pattern_are_blank_or_exact():
    yours = GPT2_PATTERN.copy()
    yours[0, 0, 0, 0], yours[0, 0, 1, 0], yours[0, 0, 2, 0] = np.nan, np.inf, -3.4e38
    drawn = figures.attention_patterns(attention_evidence(yours))["attention"]
    assert all(math.isnan(v) for v in (drawn["yours"][0][0][0], drawn["yours"][0][1][0]))
    assert all(math.isnan(v) for v in (drawn["difference"][0][0][0], drawn["difference"][0][1][0]))
    assert drawn["difference"][0][2][0] == pytest.approx(3.4e38, rel=1e-6)  # float64: no overflow
    integers = figures.attention_patterns(attention_evidence(GPT2_PATTERN.astype(np.int64)))["attention"]
    assert integers["difference"][1] == [[0.0] * 3] * 3


# --- the next-token predictions on the prompt ------------------------------------------------------------------


def test_the_predictions_are_each_tokens_top_next_token_yours_beside_the_references():
    yours = REFERENCE_LOGITS.copy()
    yours[0, 2] = [0, 0, 0, 0, 9]  # " mat" after " sat", where the reference says " on"
    table = figures.next_token_predictions(predictions_evidence(yours))["predictions"]
    assert table == {
        "case": "prompt",
        "model": "GPT-2",
        "tokens": ["The", " cat", " sat"],
        "reference": [" cat", " sat", " on"],
        "yours": [" cat", " sat", " mat"],
    }


def test_a_position_whose_logits_hold_a_nan_has_no_top_token_and_integers_are_logits_too():
    yours = REFERENCE_LOGITS.copy()
    yours[0, 1, 3] = np.nan
    assert figures.next_token_predictions(predictions_evidence(yours))["predictions"]["yours"] == [" cat", None, " on"]
    integers = figures.next_token_predictions(predictions_evidence(REFERENCE_LOGITS.astype(np.int32)))
    assert integers["predictions"]["yours"] == [" cat", " sat", " on"]


@pytest.mark.parametrize(
    "yours",
    [None, np.zeros((1, 3, 4), dtype=np.float32), np.zeros((0,)), np.ones((1, 3, 5), dtype=np.complex64)],
    ids=["no output", "wrong shape", "empty", "complex"],
)
def test_without_logits_of_the_references_shape_yours_are_none(yours):
    table = figures.next_token_predictions(predictions_evidence(yours))["predictions"]
    assert table["reference"] == [" cat", " sat", " on"] and table["yours"] is None


def test_only_the_checks_that_predict_tokens_have_predictions():
    assert figures.next_token_predictions(predictions_evidence(REFERENCE_LOGITS, "mlp")) == {}
    assert "predictions" in figures.next_token_predictions(predictions_evidence(REFERENCE_LOGITS, "unembed"))


def test_grade_show_prints_the_same_table():
    """One table, two formats: `grade --show`'s lines are the figure's cells."""
    yours = REFERENCE_LOGITS.copy()
    yours[0, 2] = [0, 0, 0, 0, 9]
    yours[0, 0, 0] = np.nan
    lines = prediction_lines(predictions_evidence(yours))
    assert lines[0] == "  next-token predictions on the prompt (yours beside GPT-2's):"
    assert lines[1].split() == ["token", "yours", "next", "reference", "next"]
    assert [line.split() for line in lines[2:]] == [
        ["'The'", "NaN", "'", "cat'", "differs"],
        ["'", "cat'", "'", "sat'", "'", "sat'", "same"],
        ["'", "sat'", "'", "mat'", "'", "on'", "differs"],
    ]
    unreadable = prediction_lines(predictions_evidence(np.zeros((2,))))
    assert unreadable[-1] == "    (yours: no logits of the reference's shape on the prompt, so no predictions)"


def test_every_figure_of_a_check_comes_together():
    drawn = figures.all_figures(attention_evidence(GPT2_PATTERN))
    assert set(drawn) == {"attention"}
    assert set(figures.all_figures(predictions_evidence(REFERENCE_LOGITS))) == {"predictions"}


# --- the page draws what was extracted --------------------------------------------------------------------------


def test_the_page_draws_the_attention_grid_and_the_predictions_table_naming_the_model():
    from grader.host.render import html

    yours = REFERENCE_LOGITS.copy()
    yours[0, 2] = [0, 0, 0, 0, 9]
    attention = figures.attention_patterns(attention_evidence(GPT2_PATTERN[:, ::-1].copy(), kind="random"))
    predictions = figures.next_token_predictions(predictions_evidence(yours))
    page = "".join(html.SECTIONS[name](data, "GPT-2") for name, data in (attention | predictions).items())
    assert page.count("<img ") == 1
    assert 'alt="attention patterns by head: the random reference&#x27;s, yours and |yours - the random' in page
    assert "model shown: the random-weight stand-in for GPT-2 (offline)" in page
    assert "model shown: GPT-2 small, with its real weights" in page
    assert '<td>&#x27; sat&#x27;</td><td>&#x27; on&#x27;</td><td class="differs">&#x27; mat&#x27;</td>' in page
    assert page.count('class="same"') == 2


def test_without_your_pattern_the_grid_is_the_references_alone():
    from grader.host.render import html

    section = html.attention_section(figures.attention_patterns(attention_evidence())["attention"], "GPT-2")
    assert 'alt="attention patterns by head: GPT-2&#x27;s (yours has none of its shape)"' in section


# --- Part 5: the score grids, the loss along a repeated sequence, the ablation table --------------------------


def test_the_score_grids_hold_every_heads_score_and_the_heads_each_finds():
    yours = INDUCTION_SCORES.copy()
    yours[1, 2] = 0.42  # head 1.2 no longer found
    drawn = figures.head_scores(scores_evidence(yours))["head_scores"]
    assert drawn["score"] == "induction"
    [grid] = drawn["grids"]
    assert grid["model"] == "the small trained induction model" and grid["case"] == "small.induction_scores"
    assert grid["threshold"] == 0.5
    assert grid["reference"] == INDUCTION_SCORES.tolist() and grid["yours"] == yours.tolist()
    assert grid["found_reference"] == [[1, 0], [1, 1], [1, 2], [1, 3]]
    assert grid["found_yours"] == [[1, 0], [1, 1], [1, 3]]
    previous = figures.head_scores(scores_evidence(PREVIOUS_TOKEN_SCORES, "previous_token"))["head_scores"]
    assert previous["score"] == "previous-token" and previous["grids"][0]["found_yours"] == [[0, 1]]


def test_a_score_equal_to_the_threshold_or_nan_is_no_head_found():
    yours = np.full((2, 4), 0.5)
    yours[0, 0], yours[1, 1], yours[1, 2] = np.nan, np.inf, 0.51
    grid = figures.head_scores(scores_evidence(yours))["head_scores"]["grids"][0]
    assert grid["found_yours"] == [[1, 2]]  # inf is no number on the scale: left blank, and not found
    assert math.isnan(grid["yours"][0][0]) and math.isnan(grid["yours"][1][1])


def test_gpt2s_cases_name_gpt2_and_its_threshold():
    """A case named gpt2. ran on GPT-2's own heads (the reference, when it is GPT-2), found above 0.4."""
    case = wire.CaseSpec("gpt2.induction_scores", 1, None, [])
    scores = np.zeros((12, 12))
    scores[5, 1], scores[5, 5], scores[4, 11] = 0.45, 0.38, 0.9
    evidence = figure_evidence.evidence("induction.induction_scores", [case], {case.name: scores}, {})
    [grid] = figures.head_scores(evidence)["head_scores"]["grids"]
    assert (grid["model"], grid["threshold"]) == ("GPT-2", 0.4)
    assert grid["found_reference"] == [[4, 11], [5, 1]] and grid["yours"] is None


def test_the_figures_thresholds_are_the_checks():
    from grader.checks.induction._common import THRESHOLD

    assert figures.THRESHOLDS == THRESHOLD


def test_the_loss_along_the_repeated_sequence_is_the_batch_mean_with_where_the_repeat_starts():
    losses = repeated_losses()
    yours = losses.copy()
    yours[0, 3] = np.nan
    drawn = figures.token_loss(token_loss_evidence(yours))["token_loss"]
    assert drawn["repeat_starts"] == SEQ_LEN and drawn["case"] == "small.repeated"
    assert drawn["model"] == "the small trained induction model"
    assert drawn["reference"] == pytest.approx(losses.mean(axis=0).tolist())
    assert math.isnan(drawn["yours"][3]) and drawn["yours"][4] == pytest.approx(losses[:, 4].mean())
    assert min(drawn["reference"][SEQ_LEN + 1 :]) > 0 and max(drawn["reference"][SEQ_LEN + 1 :]) < 1  # it falls


def test_the_ablation_table_has_a_row_per_case_its_head_read_from_the_name():
    yours = dict(ABLATION_COSTS)
    yours["small.blocks.0.head1.zero"] = np.array(-2.85)  # the sign: clean minus ablated
    rows = figures.ablation_costs(ablation_evidence(yours))["ablation"]["rows"]
    assert len(rows) == len(ABLATION_COSTS) == 6
    assert rows[0] == {
        "case": "small.blocks.0.head1.zero",
        "head": "0.1",
        "how": "zero",
        "model": "the small trained induction model",
        "reference": 2.85,
        "yours": -2.85,
    }
    assert [(row["head"], row["how"]) for row in rows[1:3]] == [("0.1", "mean"), ("1.0", "zero")]


@pytest.mark.parametrize(
    "yours",
    [None, np.zeros((4, 2)), np.zeros((0,)), np.ones((2, 4), dtype=bool), np.zeros((2, 4, 1))],
    ids=["no output", "transposed", "empty", "bool", "another rank"],
)
def test_without_your_numbers_of_the_expected_shape_only_the_expected_are_drawn(yours):
    grid = figures.head_scores(scores_evidence(yours))["head_scores"]["grids"][0]
    assert grid["yours"] is None and grid["found_yours"] is None and grid["found_reference"]
    assert figures.token_loss(token_loss_evidence(yours))["token_loss"]["yours"] is None
    assert all(row["yours"] is None for row in figures.ablation_costs(ablation_evidence(yours))["ablation"]["rows"])


def test_the_small_models_own_patterns_come_from_the_induction_scores_input():
    patterns = figure_evidence.mean_patterns()
    drawn = figures.model_patterns(scores_evidence(INDUCTION_SCORES, patterns=patterns))["model_patterns"]
    assert drawn["case"] == "small.induction_scores" and drawn["model"] == figures.INDUCTION_MODEL
    assert np.array_equal(np.array(drawn["patterns"]), patterns) and drawn["repeat_starts"] == SEQ_LEN + 1


@pytest.mark.parametrize("patterns", [np.zeros((3, 3)), np.zeros((9, 9, 4, 4))])
def test_no_patterns_figure_without_a_drawable_input_or_for_another_check(patterns):
    assert figures.model_patterns(scores_evidence(INDUCTION_SCORES, patterns=patterns)) == {}  # not 4-d; 81 heads
    assert figures.model_patterns(scores_evidence(INDUCTION_SCORES)) == {}  # no input watched
    every_head = figure_evidence.mean_patterns()
    assert figures.model_patterns(scores_evidence(PREVIOUS_TOKEN_SCORES, "previous_token", every_head)) == {}


def test_the_page_draws_the_part5_figures_naming_the_small_model():
    from grader.host.render import html

    yours = INDUCTION_SCORES.copy()
    yours[1, 2] = 0.42
    drawn = {}
    with_patterns = scores_evidence(yours, patterns=figure_evidence.mean_patterns())
    for evidence in (with_patterns, token_loss_evidence(repeated_losses()), ablation_evidence(ABLATION_COSTS)):
        drawn |= figures.all_figures(evidence)
    page = "".join(html.SECTIONS[name](data, "GPT-2") for name, data in drawn.items())
    assert page.count("<img ") == 3 and page.count('class="same"') == 6
    assert "attention patterns of every head on a repeated sequence: the small trained induction model" in page
    assert "induction scores by layer and head: the small trained induction model&#x27;s, yours beside them" in page
    assert "per-token loss on a repeated sequence: the small trained induction model&#x27;s, yours beside it" in page
    assert "heads found (layer.head) in the expected scores: 1.0, 1.1, 1.2, 1.3; in yours: 1.0, 1.1, 1.3" in page
    assert "<tr><td>0.1</td><td>zero</td><td>+2.8500</td>" in page
    assert page.count("model shown: the small trained induction model (2 layers of 4 heads") == 4


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int64])
def test_the_top_id_is_the_largest_number_and_never_a_nan(dtype):
    """argmax alone would put a NaN on top; a row without one is argmax's, a row of NaNs gives its first id."""
    logits = np.array([[[0, 5, 1], [7, 2, 9]], [[4, 4, 3], [-1, -2, -3]]], dtype=dtype)
    expected = [[1, 2], [0, 0]]
    if np.issubdtype(dtype, np.floating):
        logits[0, 1, 2], logits[1, 1] = np.nan, np.nan
        expected = [[1, 0], [0, 0]]
    assert figures.top_ids(logits).tolist() == expected
