"""grade --show's axis names, worked out by hand from GPT-2 small's sizes (no torch, no reference)."""

from __future__ import annotations

import pytest

from grader.host.show import Sizes

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
