"""grader.shared.compare on small hand-made arrays: every expected message and number is worked out here."""

from __future__ import annotations

import numpy as np
import pytest

from grader.shared.compare import MASKED_AT_MOST, allclose, causal_mask, first_index, modified_in_place, validate
from grader.shared.types import Tolerance

pytestmark = pytest.mark.unit

TIGHT = Tolerance(atol=1e-4, rtol=1e-4)
X = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
INF = np.inf


def test_first_index_is_the_first_true_in_row_major_order():
    mask = np.array([[False, False], [True, True]])
    assert first_index(mask) == (1, 0)
    assert all(type(i) is int for i in first_index(mask))


def test_validate_accepts_a_finite_float_output_of_the_right_shape():
    assert validate(X.astype(np.float32), X) is None


def test_validate_names_both_shapes():
    comparison = validate(np.zeros((3, 2)), X)
    assert not comparison.ok
    assert comparison.message == "output shape (3, 2), expected (2, 3)"
    assert (comparison.actual_shape, comparison.expected_shape) == ([3, 2], [2, 3])


def test_validate_rejects_an_integer_output():
    comparison = validate(np.zeros((2, 3), dtype=np.int64), X)
    assert not comparison.ok
    assert comparison.message == "output dtype int64, expected a floating dtype"


def test_validate_counts_non_finite_values_and_names_the_first():
    actual = np.array([[1.0, np.nan, 3.0], [INF, 5.0, -INF]])
    comparison = validate(actual, X)
    assert comparison.message == "output has 3 non-finite values, the first a NaN at index (0, 1)"
    actual[0, 1] = 2.0
    assert validate(actual, X).message == "output has 2 non-finite values, the first an inf at index (1, 0)"


def test_validate_allows_minus_inf_only_when_asked():
    actual = np.array([[1.0, -INF, 3.0], [4.0, 5.0, 6.0]])
    assert validate(actual, X, allow_minus_inf=True) is None
    assert not validate(actual, X).ok
    actual[1, 1] = INF  # +inf is never a masked score
    assert validate(actual, X, allow_minus_inf=True).message.startswith("output has 1 non-finite values")


def test_allclose_passes_within_atol_plus_rtol_times_expected():
    expected = np.array([0.0, 100.0])
    actual = np.array([0.5, 100.5])  # |diff| 0.5 each; limits 0.5 and 0.5 + 0.005
    comparison = allclose(actual, expected, Tolerance(atol=0.5, rtol=0.0))
    assert comparison.ok and comparison.message == ""
    assert comparison.max_abs_diff == 0.5 and comparison.within == 1.0
    assert not allclose(np.array([0.75, 100.0]), expected, Tolerance(atol=0.5, rtol=0.0)).ok
    assert allclose(np.array([0.0, 100.75]), expected, Tolerance(atol=0.0, rtol=0.01)).ok  # limit 1.0 at 100


def test_allclose_message_gives_the_largest_difference_and_the_share_within():
    actual = X.copy()
    actual[0, 1] = 2.5  # diff 0.5
    actual[1, 2] = 7.0  # diff 1.0, the largest
    comparison = allclose(actual, X, TIGHT)
    assert not comparison.ok
    assert comparison.max_abs_diff == 1.0
    assert comparison.within == pytest.approx(4 / 6)
    assert comparison.message == "max abs diff 1 at index (1, 2); 66.7% of values within tolerance"
    assert (comparison.actual_shape, comparison.expected_shape) == ([2, 3], [2, 3])


def test_allclose_compares_float32_with_float64():
    assert allclose(X.astype(np.float32), X, TIGHT).ok


def test_allclose_reports_a_shape_mismatch_before_values():
    comparison = allclose(X.T, X, TIGHT)
    assert not comparison.ok and comparison.message == "output shape (3, 2), expected (2, 3)"
    assert comparison.max_abs_diff is None


def test_allclose_of_empty_arrays_passes():
    comparison = allclose(np.zeros((0, 3)), np.zeros((0, 3)), TIGHT)
    assert comparison.ok and comparison.max_abs_diff == 0.0 and comparison.within == 1.0


# Scores of 3 queries by 3 keys, keys after the query masked: what GPT-2's mask gives.
SCORES = np.array([[1.0, -INF, -INF], [2.0, 3.0, -INF], [4.0, 5.0, 6.0]])


def masked_with(value: float) -> np.ndarray:
    return np.where(np.isfinite(SCORES), SCORES, value)


@pytest.mark.parametrize("fill", [-INF, -1e9, MASKED_AT_MOST])
def test_causal_mask_accepts_any_value_at_or_below_the_threshold(fill):
    comparison = causal_mask(masked_with(fill), SCORES, TIGHT)
    assert comparison.ok and comparison.message == "" and comparison.within == 1.0
    assert comparison.max_abs_diff == 0.0


def test_causal_mask_counts_future_keys_left_visible():
    comparison = causal_mask(masked_with(MASKED_AT_MOST + 1), SCORES, TIGHT)
    assert not comparison.ok
    assert comparison.message == "3 scores of future keys are not masked, the first at (query 0, key 1)"


def test_causal_mask_names_a_masked_diagonal():
    actual = masked_with(-INF)
    actual[1, 1] = -INF
    comparison = causal_mask(actual, SCORES, TIGHT)
    assert comparison.message == (
        "1 scores on the diagonal are masked, the first at (query 1, key 1); keep key <= query visible"
    )


def test_causal_mask_names_masked_past_keys():
    actual = masked_with(-INF)
    actual[2, 0] = actual[2, 1] = -1e9
    comparison = causal_mask(actual, SCORES, TIGHT)
    assert comparison.message == (
        "2 scores of past keys are masked, the first at (query 2, key 0); keep key <= query visible"
    )


def test_causal_mask_notices_changed_visible_scores():
    actual = masked_with(-INF) / 8  # scaled after masking: visible scores changed, masked ones still -inf
    comparison = causal_mask(actual, SCORES, TIGHT)
    assert not comparison.ok
    assert comparison.max_abs_diff == 6.0 - 6.0 / 8
    assert comparison.message == "visible scores were changed: max abs diff 5.25"


def test_causal_mask_validates_shape_first():
    assert causal_mask(SCORES[:2], SCORES, TIGHT).message == "output shape (2, 3), expected (3, 3)"


def test_modified_in_place():
    before = np.array([1.0, np.nan, 3.0])
    assert not modified_in_place(before, before.copy())  # a NaN in the same place is unchanged
    assert modified_in_place(before, np.array([1.0, np.nan, 4.0]))
    assert modified_in_place(before, before[:2])
    assert not modified_in_place(np.arange(3), np.arange(3))
    assert modified_in_place(np.arange(3), np.arange(1, 4))


def test_causal_mask_with_cached_keys_names_the_rule_with_the_offset():
    """2 queries over 4 keys: 2 keys are cached, so query i sees keys 0 to 2 + i."""
    expected = np.array([[1.0, 2.0, 3.0, -INF], [4.0, 5.0, 6.0, 7.0]])
    anchored_at_the_first_key = np.array([[1.0, -INF, -INF, -INF], [4.0, 5.0, -INF, -INF]])
    comparison = causal_mask(anchored_at_the_first_key, expected, TIGHT)
    assert comparison.message == (
        "4 scores of past keys are masked, the first at (query 0, key 1); keep key <= query + 2 visible"
    )
    diagonal_hidden = expected.copy()
    diagonal_hidden[0, 2] = -INF
    assert (
        "1 scores on the diagonal are masked, the first at (query 0, key 2)"
        in causal_mask(diagonal_hidden, expected, TIGHT).message
    )
