"""grade --hint's last level on hand-made arrays: the learner's step set beside the reference's, value by value."""

from __future__ import annotations

import numpy as np
import pytest

from grader.host.modes.hints import side_by_side

pytestmark = pytest.mark.unit


def test_a_statistic_taken_without_keepdim_is_set_beside_the_step_value_by_value():
    """(batch, posn) beside (batch, posn, 1): the same axes, so its numbers, not "the shapes differ"."""
    theirs = np.linspace(1.0, 2.0, 12).reshape(2, 6, 1)
    lines = side_by_side("var (yours: var at ln.py:3)", 2 * theirs[..., 0], theirs, "GPT-2")
    assert lines[1] == "    where they differ most, at [1, 5, 0:5]:", lines
    ratios = [float(x) for x in lines[-1].split(":", 1)[1].split()]
    assert lines[-1].strip().startswith("yours / theirs:") and ratios == [2.0], lines


def test_shapes_that_differ_beyond_unit_axes_are_said_to():
    lines = side_by_side("z", np.ones((2, 12)), np.ones((2, 3, 4)), "GPT-2")
    assert lines[-1] == "    the shapes differ: fix the shape first (grade --trace prints each tensor's)"
