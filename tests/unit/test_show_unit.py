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
    assert step_match(named, steps, Tolerance(atol=1e-4, rtol=1e-4)) == ("var", "max abs diff 1.30e-06", "differs")
    assert step_match(Step("residual_var", [1, 7, 1], variance), steps, Tolerance())[::2] == ("var", "equals")


def steps_before_the_last_of_attention():
    """The reference's output and masked scores, and what a passing attention names before each: its output before
    b_O is added (`attn_out`), its scores before they are scaled by 1/sqrt(d_head) and masked (`attn_scores`)."""
    import numpy as np

    generator = np.random.default_rng(0)
    output, b_O = generator.normal(size=(1, 7, 16)), generator.normal(size=16)
    unscaled = generator.normal(size=(1, 2, 7, 7))
    masked = np.where(np.triu(np.ones((7, 7), dtype=bool), k=1), -np.inf, unscaled / 8)
    steps = {"attn_scores": masked, "output": output}
    return steps, {"attn_out": output - b_O, "attn_scores": unscaled}


@pytest.mark.parametrize(("name", "said"), [
    ("attn_out", "; = the reference's output but for a bias (one vector added at every position)"),
    ("attn_scores", "; = the reference's attn_scores times 8 (a scale)"),
])  # fmt: skip
def test_a_passing_checks_step_before_a_bias_or_a_scale_is_said_to_be_that_step_but_for_it(name, said):
    from grader.checks import Tolerance
    from grader.host.modes.show import Step, step_difference

    steps, named = steps_before_the_last_of_attention()
    step = [Step(name, list(named[name].shape), named[name])]
    assert step_difference(step, steps, Tolerance(atol=1e-4, rtol=1e-4), explained=True) == said
    failing = step_difference(step, steps, Tolerance(atol=1e-4, rtol=1e-4), explained=False)
    assert failing.startswith(f"; not the reference's {name.replace('attn_out', 'output')}: max abs diff ")


def test_a_step_that_is_neither_is_said_to_differ_even_in_a_passing_check():
    import numpy as np

    from grader.checks import Tolerance
    from grader.host.modes.show import Step, step_difference

    steps, _ = steps_before_the_last_of_attention()
    other = np.random.default_rng(1).normal(size=(1, 7, 16))
    said = step_difference([Step("attn_out", [1, 7, 16], other)], steps, Tolerance(atol=1e-4, rtol=1e-4), True)
    assert said.startswith("; not the reference's output: max abs diff ")
