"""grade --show's axis names, worked out by hand from GPT-2 small's sizes (no torch, no reference)."""

from __future__ import annotations

import pytest

from grader.host.modes.show import Sizes

pytestmark = pytest.mark.unit

GPT2_SMALL = Sizes(dict(d_model=768, n_heads=12, d_head=64, d_mlp=3072, d_vocab=50257, n_ctx=1024))


@pytest.mark.parametrize(
    ("shape", "batch", "posn", "said"),
    [
        ([1, 7, 768], 1, 7, "batch, posn, d_model"),
        ([1, 7, 1], 1, 7, "batch, posn, 1"),  # LayerNorm's mean: a kept axis, not a second batch
        ([1, 12, 7, 7], 1, 7, "batch, n_heads, query_pos, key_pos"),
        ([2, 12, 3072], 2, 12, "batch, posn, d_mlp"),  # posn before n_heads where the sizes agree
        ([5, 5], None, None, "5, 5"),
    ],
)
def test_each_axis_is_named_by_its_size(shape, batch, posn, said):
    assert GPT2_SMALL.axes(shape, batch, posn) == said


def test_a_step_named_by_an_alias_is_said_to_differ_from_the_reference_step_it_names():
    """--show of a variance divided by N - 1: `residual_var` is the reference's var, 1e-6 off, at var's own scale."""
    import numpy as np

    from grader.checks import Tolerance
    from grader.host.modes.show import Step, step_match

    variance = np.full((1, 7, 1), 1e-3)
    steps = {"mean": np.zeros((1, 7, 1)), "var": variance}
    named = Step("residual_var", [1, 7, 1], variance * 768 / 767)
    assert step_match(named, steps, Tolerance(atol=1e-4, rtol=1e-4)) == ("var", "max abs diff 1.30e-06", False)
    assert step_match(Step("residual_var", [1, 7, 1], variance), steps, Tolerance())[::2] == ("var", True)
