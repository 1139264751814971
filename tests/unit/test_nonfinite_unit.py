"""NaN, inf and empty outputs on small hand-made arrays: each comparison says which value is not finite and where,
a named mistake whose output holds NaN matches NaN at the same places, and the where names the learner's first
tensor to hold one. Every expected message is worked out here."""

from __future__ import annotations

import numpy as np
import pytest

from grader.checks.sampling._compare import close
from grader.checks.sampling.kv_cache import ONE_SHORT, cached_model_output
from grader.host.diagnose import Candidate, Divergence, matching_mistake, non_finite_origin, where_said
from grader.shared.compare import allclose, validate
from grader.shared.types import Tolerance

pytestmark = pytest.mark.unit

TOLERANCE = Tolerance(atol=1e-3, rtol=1e-4)
NAN, INF = np.nan, np.inf
LOGITS = np.arange(24, dtype=np.float32).reshape(1, 4, 6)  # (batch, posn, d_vocab)


@pytest.mark.parametrize(
    ("value", "said"), [(NAN, "a NaN"), (INF, "an inf"), (-INF, "a -inf")], ids=["NaN", "inf", "-inf"]
)
def test_validate_names_the_first_non_finite_value(value, said):
    actual = np.array([[1.0, 2.0, value], [value, 5.0, 6.0]])
    assert (
        validate(actual, np.ones((2, 3))).message == f"output has 2 non-finite values, the first {said} at index (0, 2)"
    )


def test_an_empty_output_is_a_shape_that_differs():
    assert allclose(np.zeros((0, 0)), np.ones((2, 3)), TOLERANCE).message == "output shape (0, 0), expected (2, 3)"


@pytest.mark.parametrize("value", [NAN, INF, -INF], ids=["NaN", "inf", "-inf"])
def test_the_sampling_comparison_says_a_non_finite_value_and_gives_no_difference(value):
    actual = np.array([1.0, value, value])
    compared = close(actual, np.array([1.0, 2.0, 3.0]), TOLERANCE)
    assert not compared.ok and compared.max_abs_diff is None
    assert (
        compared.message.startswith("output has 2 non-finite values, the first ")
        and "at index (1,)" in compared.message
    )


def test_the_sampling_comparison_matches_infinities_and_never_passes_a_number_for_one():
    expected = np.array([-INF, 0.5])
    assert close(np.array([-INF, 0.5]), expected, TOLERANCE).ok
    compared = close(np.array([-1e30, 0.5]), expected, TOLERANCE)  # within inf * rtol of -inf: still wrong
    assert not compared.ok and compared.message == "at index (0,): -1e+30, expected -inf"


@pytest.mark.parametrize("fill", [NAN, INF], ids=["NaN", "inf"])
def test_non_finite_cached_logits_name_the_first_position_and_the_value(fill):
    actual = LOGITS.copy()
    actual[0, 2:] = fill
    compared = cached_model_output(actual, LOGITS, TOLERANCE)
    kind = "a NaN" if np.isnan(fill) else "an inf"
    assert compared.message == (
        f"the logits first differ at position 2 (output has 12 non-finite values, the first {kind} at index (0, 2, 0))"
    )
    assert compared.max_abs_diff is None


def test_all_nan_logits_are_the_cache_mask_one_short_and_nothing_else_is():
    mistakes = [("the positions restart", LOGITS + 1), (ONE_SHORT, np.full_like(LOGITS, NAN))]
    assert matching_mistake(np.full_like(LOGITS, NAN), mistakes, TOLERANCE, cached_model_output, LOGITS) == ONE_SHORT
    assert matching_mistake(LOGITS + 1, mistakes, TOLERANCE, cached_model_output, LOGITS) == "the positions restart"
    one_nan = LOGITS.copy()
    one_nan[0, 0, 0] = NAN
    assert matching_mistake(one_nan, mistakes, TOLERANCE, cached_model_output, LOGITS) is None
    assert matching_mistake(np.full_like(LOGITS, INF), mistakes, TOLERANCE, cached_model_output, LOGITS) is None


def test_a_mistake_with_nan_in_its_first_row_matches_nan_there_only():
    """The mask that hides the diagonal: the first query sees no key, its row is NaN, the rest are numbers."""
    mistake = LOGITS.copy()
    mistake[0, 0] = NAN
    named = [("the mask hides the diagonal too", mistake)]
    assert matching_mistake(mistake.copy(), named, TOLERANCE, None, LOGITS) == "the mask hides the diagonal too"
    elsewhere = LOGITS.copy()
    elsewhere[0, 1] = NAN
    assert matching_mistake(elsewhere, named, TOLERANCE, None, LOGITS) is None


PATTERN_NAN = np.array([[NAN, NAN], [0.5, 0.5]])
SCORES_MASKED = np.array([[-INF, -INF], [1.0, -INF]])


def test_the_origin_is_the_first_computed_tensor_holding_nan_or_inf_not_a_masked_score():
    candidates = [
        Candidate(np.full((2, 2), NAN), "x"),  # an argument: no line, the learner's code did not compute it
        Candidate(SCORES_MASKED, "attn_scores_masked", "attention.py", 40),
        Candidate(PATTERN_NAN, "attn_pattern", "attention.py", 41),
        Candidate(np.full((2, 2), INF), "z", "attention.py", 42),
    ]
    assert non_finite_origin(candidates, "attention.py") == "a NaN first appears in your attn_pattern"
    assert non_finite_origin(candidates[3:], "attention.py") == "an inf first appears in your z"
    assert non_finite_origin(candidates[:2], "attention.py") is None
    assert non_finite_origin(candidates, "block.py") is None  # a sublayer's lines are its own check's


def test_the_where_adds_the_origin_only_to_a_non_finite_output():
    candidates = [Candidate(PATTERN_NAN, "attn_pattern", "attention.py", 41)]
    divergence = Divergence("attn_scores is the first step that does not (attention.py:40)", "attention.py", 40)
    said = where_said(divergence, np.full(3, NAN), candidates, "attention.py")
    assert (
        said
        == "attn_scores is the first step that does not (attention.py:40); a NaN first appears in your attn_pattern"
    )
    assert where_said(divergence, np.zeros(3), candidates, "attention.py") == divergence.text
    assert where_said(None, np.full(3, NAN), candidates) == "a NaN first appears in your attn_pattern"
    assert where_said(None, np.full(3, NAN), []) is None
