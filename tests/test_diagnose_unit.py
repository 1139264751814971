"""grader.diagnose on small hand-made arrays: closeness, axis order, the first divergent step, the
matching mistake and the expected shape of a named tensor."""

from __future__ import annotations

import numpy as np

from grader.diagnose import (
    Candidate,
    Divergence,
    close,
    expected_shape,
    first_divergence,
    join_steps,
    matching_mistake,
    same_up_to_axis_order,
)
from grader.types import Tolerance

TIGHT = Tolerance(atol=1e-4, rtol=1e-4)
INF = np.inf
A = np.arange(24, dtype=np.float64).reshape(2, 3, 4)  # (batch, posn, d_head): every axis a different length


def test_close_within_tolerance_and_not_beyond():
    assert close(A + 5e-5, A, Tolerance(atol=1e-4, rtol=0.0))
    assert not close(A + 2e-4, A, Tolerance(atol=1e-4, rtol=0.0))
    assert close(A * 1.001, A, Tolerance(atol=0.0, rtol=0.002))


def test_close_needs_the_same_shape_and_a_float_dtype():
    assert not close(A[:1], A, TIGHT)
    assert not close(A.astype(np.int64), A, TIGHT)


def test_close_matches_a_masked_reference_value_with_any_masked_value():
    expected = np.array([1.0, -INF, -INF])
    assert close(np.array([1.0, -1e9, -INF]), expected, TIGHT)
    assert not close(np.array([1.0, 0.0, -INF]), expected, TIGHT)  # a future key left visible
    assert not close(np.array([1.0, np.nan, -INF]), expected, TIGHT)


def test_same_up_to_axis_order_finds_a_transposed_tensor():
    assert same_up_to_axis_order(A.transpose(0, 2, 1), A, TIGHT)  # (batch, d_head, posn)
    assert same_up_to_axis_order(A.transpose(2, 0, 1), A, TIGHT)
    assert same_up_to_axis_order(A, A, TIGHT)


def test_same_up_to_axis_order_is_not_a_reshape():
    assert not same_up_to_axis_order(A.reshape(2, 4, 3), A, TIGHT)  # the right shape, the values in another order
    assert not same_up_to_axis_order(A.reshape(6, 4), A, TIGHT)
    assert not same_up_to_axis_order(A.transpose(0, 2, 1) + 1, A, TIGHT)


def test_same_up_to_axis_order_tries_every_order_of_equal_lengths():
    square = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert same_up_to_axis_order(square.T, square, TIGHT)
    assert not same_up_to_axis_order(np.array([[1.0, 2.0], [4.0, 3.0]]), square, TIGHT)


# GPT-2's steps of a toy computation, in order.
Q, K, SCORES = np.full((2, 3), 1.0), np.full((3, 2), 2.0), np.full((2, 2), 3.0)
STEPS = [("q", Q), ("k", K), ("attn_scores", SCORES)]


def test_first_divergence_names_the_steps_that_match_the_first_that_does_not_and_its_line():
    candidates = [  # matched by value, in any order and axis order, whatever their names
        Candidate(K.T, "keys", "attention.py", 3),
        Candidate(Q, "q", "attention.py", 2),
        Candidate(SCORES + 1, "attn_scores", "attention.py", 4),
    ]
    divergence = first_divergence(STEPS, candidates, TIGHT)
    assert divergence == Divergence(
        "q, k match GPT-2; attn_scores is the first step that does not (attention.py:4)", "attention.py", 4
    )


def test_first_divergence_after_one_step_uses_the_singular():
    candidates = [Candidate(Q, "q", "a.py", 1), Candidate(K.T + 5, "keys", "a.py", 2)]
    divergence = first_divergence(STEPS, candidates, TIGHT, reference="the random reference")
    assert divergence.text == "q matches the random reference; k is the first step that does not (a.py:2)"


def test_first_divergence_at_the_first_step():
    divergence = first_divergence(STEPS, [Candidate(Q + 5, "q", "a.py", 1)], TIGHT)
    assert divergence == Divergence("q, the first step, already differs from GPT-2 (a.py:1)", "a.py", 1)


def test_a_step_no_tensor_stands_for_is_said_to_be_unnamed():
    candidates = [Candidate(Q, "q", "a.py", 1), Candidate(SCORES + 1, "scores", "a.py", 3)]  # no tensor of k's shape
    assert first_divergence(STEPS, candidates, TIGHT).text == (
        "q matches GPT-2; k is not among the tensors your code names;"
        " attn_scores is the first step that differs (a.py:3)"
    )


def test_first_divergence_is_none_when_every_step_matches_or_nothing_can_be_blamed():
    assert first_divergence(STEPS, [Candidate(Q), Candidate(K), Candidate(SCORES)], TIGHT) is None
    assert first_divergence(STEPS, [], TIGHT) is None
    assert first_divergence(STEPS, [Candidate(Q + 5, "x")], TIGHT) is None  # an argument: no line of the learner's


def test_join_steps_shortens_runs_of_numbered_blocks():
    labels = ["embed", "pos_embed", *(f"blocks.{i}" for i in range(4)), "ln_final"]
    assert join_steps(labels) == "embed, pos_embed, blocks.0-blocks.3, ln_final"


def test_join_steps_keeps_two_blocks_and_separate_runs():
    assert join_steps(["blocks.0", "blocks.1"]) == "blocks.0, blocks.1"
    labels = ["blocks.0", "blocks.1", "blocks.2", "ln", "blocks.3"]
    assert join_steps(labels) == "blocks.0-blocks.2, ln, blocks.3"
    assert join_steps([]) == ""


X = np.array([[1.0, 2.0], [3.0, 4.0]])
MISTAKES = [("multiplied by 3", X * 3), ("plus one", X + 1), ("transposed", X.T)]


def test_matching_mistake_names_the_first_mistake_the_output_equals():
    assert matching_mistake(X + 1, MISTAKES, TIGHT) == "plus one"
    assert matching_mistake(X.T + 1e-6, MISTAKES, TIGHT) == "transposed"
    assert matching_mistake(X * 2, MISTAKES, TIGHT) is None


def test_matching_mistake_skips_mistakes_of_another_shape():
    assert matching_mistake(np.ones(3), [("wrong shape", np.ones((3, 1))), ("flat", np.ones(3))], TIGHT) == "flat"


def test_matching_mistake_needs_the_same_non_finite_values_in_the_same_places():
    unmasked = np.array([[1.0, 5.0], [3.0, 4.0]])
    mistakes = [("mask not applied", unmasked), ("masked with nan", np.array([[1.0, np.nan], [3.0, 4.0]]))]
    assert matching_mistake(unmasked.copy(), mistakes, TIGHT) == "mask not applied"
    assert matching_mistake(np.array([[1.0, np.nan], [3.0, 4.0]]), mistakes, TIGHT) == "masked with nan"
    assert matching_mistake(np.array([[1.0, INF], [3.0, 4.0]]), mistakes, TIGHT) is None


SHAPES = {"attn_scores": [1, 12, 5, 5], "attn_pattern": [1, 12, 5, 5], "output": [1, 5, 768]}


def test_expected_shape_by_the_step_label_or_a_usual_alias():
    assert expected_shape("attn_scores", SHAPES) == [1, 12, 5, 5]
    assert expected_shape("probs", SHAPES) == [1, 12, 5, 5]
    assert expected_shape("out", SHAPES) == [1, 5, 768]


def test_expected_shape_is_none_for_an_unknown_name_or_a_step_not_recorded():
    assert expected_shape("tmp", SHAPES) is None
    assert expected_shape("x_hat", SHAPES) is None  # an alias of "normalized", which this check does not record
