"""The causal mask with an offset (the cached positions before the queries), as transformer_lens's
`apply_causal_mask(attn_scores, past_kv_pos_offset)`: the mask check asks for it on non-square scores,
and the KV cache's attention masks its chunks with it."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SOLUTIONS, by_id, write_variant
from test_mistakes import FUTURE

from grader import wire
from grader.drivers.mask import NO_OFFSET

MASK = "attention.causal_mask"
OFFSET_CASES = {"scores_3x8.offset5": 5, "scores_1x8.offset7": 7}
SIGNATURE = ', past_kv_pos_offset: int = 0\n    ) -> Float[Tensor, "batch n_heads query_pos key_pos"]:'
OLD_SIGNATURE = {
    "attention.py": [
        (SIGNATURE, '\n    ) -> Float[Tensor, "batch n_heads query_pos key_pos"]:'),
        (FUTURE, "torch.triu(all_ones, diagonal=1)"),
    ]
}


@pytest.mark.parametrize(("case", "offset"), OFFSET_CASES.items())
def test_the_offset_cases_have_fewer_queries_than_keys_and_pass_the_offset(reference, case, offset):
    inputs = reference.inputs(MASK)
    scores, passed = inputs[wire.arg_key(case, 0)], inputs[wire.arg_key(case, 1)]
    query_pos, key_pos = scores.shape[-2:]
    assert int(passed) == offset == key_pos - query_pos
    visible = np.isfinite(reference.expected(MASK)[case])
    queries, keys = np.indices((query_pos, key_pos))
    assert (visible == (keys <= offset + queries)).all()  # query i sees keys 0 to offset + i


def test_the_solutions_pass_the_mask_with_an_offset(grade):
    assert by_id(grade(SOLUTIONS, MASK))[MASK].status == "pass"


def test_a_mask_without_the_offset_parameter_gets_one_line_naming_it(grade, tmp_path):
    """The signature before the KV cache: the square cases pass, the offset cases say what is missing."""
    result = by_id(grade(write_variant(tmp_path, OLD_SIGNATURE), MASK))[MASK]
    assert result.status == "error", (result.status, result.message)
    assert result.message.startswith(f"TypeError: {NO_OFFSET}"), result.message
    assert "on scores_3x8.offset5: " in result.message
    assert "\n" not in result.message and "Traceback" not in result.message


def test_the_old_signature_still_passes_attention(grade, tmp_path):
    """Attention calls its mask without an offset, so only the mask's own offset cases see the old signature."""
    assert by_id(grade(write_variant(tmp_path, OLD_SIGNATURE), "attention"))["attention"].status == "pass"


def test_a_cache_that_masks_its_chunks_without_the_offset_fails(grade, tmp_path):
    """CachedAttention reuses apply_causal_mask: without the cache's length the chunks' queries miss cached keys."""
    edits = {"kv_cache.py": [("attn_scores / self.cfg.d_head**0.5, past_posn)", "attn_scores / self.cfg.d_head**0.5)")]}
    result = by_id(grade(write_variant(tmp_path, edits), "kv_cache"))["kv_cache"]
    assert result.status == "fail", (result.status, result.message)
