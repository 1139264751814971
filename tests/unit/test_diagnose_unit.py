"""grader.host.diagnose on small hand-made arrays: closeness, axis order, the first divergent step, the
matching mistake and the expected shape of a named tensor."""

from __future__ import annotations

import numpy as np
import pytest

from grader.host.diagnose import (
    Candidate,
    Divergence,
    close,
    expected_shape,
    first_divergence,
    join_steps,
    matches_step,
    matching_mistake,
    raised_on,
    same_up_to_axis_order,
)
from grader.shared.types import Tolerance

pytestmark = pytest.mark.unit

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


MASKED = np.array([[1.0, -INF], [2.0, 3.0]])  # GPT-2's scores after its mask


def test_scores_match_a_masked_step_where_its_mask_keeps_them():
    """Named before the mask or after it, the learner's scores are GPT-2's; a kept score changed is not."""
    assert matches_step(np.array([[1.0, 7.0], [2.0, 3.0]]), MASKED, TIGHT)
    assert matches_step(np.array([[1.0, -1e9], [2.0, 3.0]]), MASKED, TIGHT)
    assert not matches_step(np.array([[1.0, 7.0], [-INF, 3.0]]), MASKED, TIGHT)
    assert not matches_step(np.array([[1, 7], [2, 3]]), MASKED, TIGHT)  # integers are never a float step


def test_a_tensor_matches_a_step_it_broadcasts_to_over_leading_axes():
    """(posn, d_model) or (1, posn, d_model) for (batch, posn, d_model): the same values wherever it is added."""
    rows = A[0]
    assert matches_step(rows, np.stack([rows, rows]), TIGHT)
    assert matches_step(rows[None], np.stack([rows, rows]), TIGHT)
    assert matches_step(rows[None, None], np.stack([rows, rows]), TIGHT)  # more leading axes of size 1
    assert not matches_step(rows, np.stack([rows, rows + 1]), TIGHT)
    assert not matches_step(A[0, 0], np.ones((2, 3, 3)), TIGHT)  # a trailing axis of another length
    assert not matches_step(np.ones(4), np.ones((2, 3, 4)) * 2, TIGHT)


BLOCK_STEPS = [("ln1", Q), ("attn", Q + 1), ("resid_mid", Q + 2)]


def test_a_line_of_another_file_is_never_blamed():
    """A sublayer's own tensors, computed in its file, never stand for a step of the module under check."""
    candidates = [Candidate(Q, "ln1", "block.py", 5), Candidate(Q + 9, "normalized", "normalization.py", 27)]
    assert first_divergence(BLOCK_STEPS, candidates, TIGHT, own_file="block.py") is None
    divergence = first_divergence(BLOCK_STEPS, candidates, TIGHT, own_file="normalization.py")
    assert (divergence.file, divergence.line) == ("normalization.py", 27)  # the same tensors, as that file's own


def test_a_tensor_named_for_a_step_that_holds_an_earlier_steps_value_is_said_to():
    """resid_mid = self.attn(...): the recorder keeps the attention's output (the call) before the name bound to it."""
    candidates = [
        Candidate(Q, "ln1", "block.py", 5),
        Candidate(Q + 1, "attn", "block.py", 5),
        Candidate(Q + 1, "resid_mid", "block.py", 5),
    ]
    divergence = first_divergence(BLOCK_STEPS, candidates, TIGHT, own_file="block.py")
    assert divergence == Divergence(
        "ln1, attn match GPT-2; resid_mid is the first step that does not: your resid_mid equals attn (block.py:5)",
        "block.py",
        5,
    )


SCALE = 8.0
ATTENTION = [("q", Q), ("unscaled_scores", SCORES * SCALE), ("attn_scores", SCORES), ("attn_pattern", SCORES / 3)]


# q.k named attn_scores (as the solution names it) then scaled inline where the pattern is computed: the scaled scores
# are inline, and the pattern's line, not the right q.k before it, is the first that differs. Masked but never scaled,
# named attn_scores_masked: that copy holds the unscaled scores, at its own line.
SCALED_LATER = {
    "scaled inline": (
        [
            Candidate(SCORES / 2, "return of apply_causal_mask", "attention.py", 9),  # the mask, after the softmax
            Candidate(SCORES / 2, "attn_pattern", "attention.py", 4),
        ],
        "attn_scores is not among the tensors your code names; attn_pattern is the first step that differs",
        "attn_pattern",
    ),
    "never scaled": (
        [
            Candidate(SCORES * SCALE, "attn_scores_masked", "attention.py", 4),
            Candidate(SCORES / 5, "attn_pattern", "attention.py", 5),
        ],
        "attn_scores is the first step that does not: your attn_scores_masked equals unscaled_scores",
        "attn_scores",
    ),
}


@pytest.mark.parametrize("written", SCALED_LATER)
def test_the_first_tensor_to_hold_a_step_is_that_step_whatever_its_name(written):
    after, said, step = SCALED_LATER[written]
    candidates = [Candidate(Q, "q", "attention.py", 2), Candidate(SCORES * SCALE, "attn_scores", "attention.py", 3)]
    divergence = first_divergence(ATTENTION, candidates + after, TIGHT)
    assert divergence == Divergence(f"q, unscaled_scores match GPT-2; {said} (attention.py:4)", "attention.py", 4)
    assert divergence.step == step


Z = np.arange(24, dtype=np.float64).reshape(1, 2, 3, 4)  # (batch, posn, n_heads, d_head)
MERGING = [("z", Z), ("output", np.ones((1, 2, 5)))]


def test_a_tensor_holding_a_steps_values_in_another_order_is_where_it_differs():
    """Heads merged as (d_head n_heads): the very values of the learner's z (GPT-2's up to rounding), not z reshaped;
    the merge's line, not the projection's."""
    z = Z + 1e-7
    merged = z.transpose(0, 1, 3, 2).reshape(1, 2, 12)
    candidates = [
        Candidate(z, "z", "attention.py", 2),
        Candidate(merged, "merged", "attention.py", 3),
        Candidate(np.zeros((1, 2, 5)), "attn_out", "attention.py", 4),
    ]
    divergence = first_divergence(MERGING, candidates, TIGHT)
    assert divergence == Divergence(
        "z matches GPT-2; output is the first step that does not: your merged holds z's values in another order "
        "(attention.py:3)",
        "attention.py",
        3,
    )
    assert (divergence.step, divergence.moved) == ("output", "z")
    candidates[1] = Candidate(z.reshape(1, 2, 12), "merged", "attention.py", 3)  # (n_heads d_head): z, reshaped
    assert first_divergence(MERGING, candidates, TIGHT).line == 4


def test_a_step_taken_without_keepdim_matches_and_stands_for_it():
    """A variance of shape (batch, posn) is the step (batch, posn, 1): matched when right, blamed when wrong."""
    var = np.linspace(1.0, 2.0, 6).reshape(2, 3, 1)
    steps = [("var", var), ("output", np.ones((2, 3, 4)))]
    assert matches_step(var[..., 0], var, TIGHT) and not matches_step(var[..., 0] * 2, var, TIGHT)
    right = [Candidate(var[..., 0], "var", "ln.py", 2), Candidate(np.zeros((2, 3, 4)), "return", "ln.py", 3)]
    assert first_divergence(steps, right, TIGHT).text == (
        "var matches GPT-2; output is the first step that does not (ln.py:3)"
    )
    wrong = [Candidate(var[..., 0] * 2, "var", "ln.py", 2), right[1]]
    assert first_divergence(steps, wrong, TIGHT).text == "var, the first step, already differs from GPT-2 (ln.py:2)"


def test_a_scalar_never_stands_for_a_one_value_step():
    """One position of one sequence: the variance is (1, 1, 1), and a scalar the code holds (an eps) is not it."""
    steps = [("var", np.full((1, 1, 1), 2.0)), ("output", np.ones((1, 1, 4)))]
    candidates = [Candidate(np.array(1e-5), "eps", "ln.py", 2), Candidate(np.zeros((1, 1, 4)), "return", "ln.py", 3)]
    assert not matches_step(np.array(2.0), steps[0][1], TIGHT)
    assert first_divergence(steps, candidates, TIGHT).text == (
        "var is not among the tensors your code names; output is the first step that differs (ln.py:3)"
    )


def test_a_step_matched_then_made_again_wrong_under_its_name_differs_where_its_values_were_made():
    """Scores matched before the mask, then masked wrong by a helper: the helper's line, not the caller's."""
    steps = [("q", Q), ("attn_scores", SCORES), ("attn_pattern", SCORES / 3)]
    candidates = [
        Candidate(Q, "q", "attention.py", 2),
        Candidate(SCORES, "scores", "attention.py", 3),
        Candidate(SCORES - 1, "return of mask", "attention.py", 9),
        Candidate(SCORES - 1, "attn_scores_masked", "attention.py", 4),
        Candidate(SCORES / 2, "attn_pattern", "attention.py", 5),
    ]
    assert first_divergence(steps, candidates, TIGHT) == Divergence(
        "q matches GPT-2; attn_scores is the first step that does not (attention.py:9)", "attention.py", 9
    )


MODEL_STEPS = [("embed", Q), ("blocks.0", Q + 1), ("blocks.1", Q + 2)]


def test_a_submodule_that_differs_on_the_right_input_is_not_located():
    candidates = [Candidate(Q, "embed", "model.py", 3), Candidate(Q + 5, "blocks.0", "model.py", 4, given=Q)]
    divergence = first_divergence(MODEL_STEPS, candidates, TIGHT, own_file="model.py")
    assert divergence == Divergence(
        "embed matches GPT-2; blocks.0 is the first step that does not, though it was given the right input: "
        "cannot locate the difference inside your blocks.0"
    )


def test_a_submodule_given_the_wrong_input_is_at_the_line_that_called_it():
    candidates = [Candidate(Q, "embed", "model.py", 3), Candidate(Q + 5, "blocks.0", "model.py", 4, given=Q * 2)]
    divergence = first_divergence(MODEL_STEPS, candidates, TIGHT, own_file="model.py")
    assert divergence == Divergence(
        "embed matches GPT-2; blocks.0 is the first step that does not (model.py:4)", "model.py", 4
    )


def test_token_ids_are_the_right_input_of_the_first_submodule():
    tokens = np.array([[3, 1, 4]])
    candidates = [Candidate(Q + 5, "embed", "model.py", 3, given=tokens)]
    assert "cannot locate the difference inside your embed" in first_divergence(MODEL_STEPS, candidates, TIGHT).text


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


def test_matching_mistake_never_names_a_mistake_that_changes_nothing_on_this_input():
    """eps outside the square root is GPT-2's answer where the variance is large: an output that fails there
    and is near both is not that mistake's doing."""
    right, absolute = X * 2, Tolerance(atol=1e-4, rtol=0.0)
    mistakes = [("changes nothing here", right + 5e-5), ("plus one", right + 1)]
    failing = right + 1.2e-4  # beyond the tolerance of the answer, within it of the first mistake
    assert matching_mistake(failing, mistakes, absolute) == "changes nothing here"  # without the answer
    assert matching_mistake(failing, mistakes, absolute, expected=right) is None
    assert matching_mistake(right + 1, mistakes, absolute, expected=right) == "plus one"


def test_of_two_mistakes_alike_here_the_one_the_other_cases_hold_is_named():
    """eps outside the root and eps left out agree where the variance is large; a variance of 0 tells them apart."""
    here = [("eps outside", X + 1), ("no eps", X + 1)]
    flat = {"eps outside": np.zeros(3), "no eps": np.full(3, np.nan)}
    assert matching_mistake(X + 1, here, TIGHT, elsewhere=[(np.full(3, np.nan), flat)]) == "no eps"
    assert matching_mistake(X + 1, here, TIGHT, elsewhere=[(np.zeros(3), flat)]) == "eps outside"
    neither = matching_mistake(X + 1, here, TIGHT, elsewhere=[(np.ones(3), flat)])
    assert neither == "eps outside"  # no case tells them apart: the first, as without other cases


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


def test_a_step_is_compared_at_its_own_scale():
    """A variance of about 1e-3 read with N - 1 for N is 1.3e-6 off: within the output's atol, not within the step's."""
    from grader.host.diagnose import at_its_scale, matches_step

    tolerance = Tolerance(atol=1e-4, rtol=1e-4)
    variance = np.full((2, 5, 1), 1e-3)
    assert not matches_step(variance * 768 / 767, variance, tolerance)
    assert matches_step(variance * (1 + 1e-6), variance, tolerance)  # float32's rounding stays a match
    assert at_its_scale(np.full(3, 10.0), tolerance) == tolerance  # a large step keeps the output's tolerance
    assert at_its_scale(np.array([-np.inf, 0.5, -0.5]), tolerance).atol == 0.5e-4  # masked scores left out


HINTS = {"prompt": "", "large_mean": "it fails only where the mean is large: E[x^2] - E[x]^2 loses its digits"}


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ('assert x.mean(-1).abs().max() < 1e-6, "not standardised"', " on large_mean"),
        ("raise ValueError(f'{x.shape}')", " on large_mean"),
        ("x = residual.squeeze()", f" on large_mean: {HINTS['large_mean']}"),  # torch raised, in a call of theirs
    ],
)
def test_the_learners_own_exception_is_never_given_a_cases_hint(code, said):
    from grader.shared.wire import Place

    where = Place("normalization.py", 26, code)
    assert raised_on(HINTS, {"prompt"}, where) == said
    assert raised_on(HINTS, {"large_mean"}, where) == ""  # raised on an ordinary case: no case is said
