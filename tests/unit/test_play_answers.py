"""The playground's answer parts computed in the grader's process (grader.host.play.answers), against the course's
definitions written out by hand."""

import numpy as np
import pytest

from grader.host.play.answers import induction_scores, previous_token_scores, top_tokens

pytestmark = pytest.mark.unit


def random_patterns(n: int, seed: int = 0) -> np.ndarray:
    """(2 layers, 3 heads, n, n) causal rows that sum to 1."""
    weights = np.tril(np.random.default_rng(seed).random((2, 3, n, n)))
    return weights / weights.sum(-1, keepdims=True)


def test_induction_scores_on_bos_a_a_are_the_course_s_stripe():
    seq_len = 5
    ids = [50256, 7, 3, 9, 4, 8, 7, 3, 9, 4, 8]
    patterns = random_patterns(len(ids))
    # solutions/induction.py: the diagonal seq_len - 1 below the main one, its last seq_len entries, averaged
    stripe = np.diagonal(patterns, offset=1 - seq_len, axis1=-2, axis2=-1)[..., -seq_len:].mean(-1)
    assert np.allclose(induction_scores(patterns, ids), stripe)


def test_induction_scores_are_zero_without_a_repeated_token():
    assert np.array_equal(induction_scores(random_patterns(4), [1, 2, 3, 4]), np.zeros((2, 3)))


def test_previous_token_scores_are_the_mean_of_the_first_diagonal_below():
    patterns = random_patterns(4)
    by_hand = (patterns[..., 1, 0] + patterns[..., 2, 1] + patterns[..., 3, 2]) / 3
    assert np.allclose(previous_token_scores(patterns), by_hand)


def test_top_tokens_are_the_likeliest_in_order_with_their_probabilities():
    logits = np.log(np.array([0.1, 0.6, 0.3], dtype=np.float32))
    top = top_tokens(logits, ["a", "b", "c"], k=2)
    assert [t["token"] for t in top] == ["b", "c"]
    assert [t["p"] for t in top] == pytest.approx([0.6, 0.3], rel=1e-6)
