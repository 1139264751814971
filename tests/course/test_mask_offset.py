"""The offsets of the KV cache (the cached positions before the input), as transformer_lens's
`apply_causal_mask(attn_scores, past_kv_pos_offset)` and `PosEmbed.forward(tokens, past_kv_pos_offset)` take
them: the mask check asks for it on non-square scores, the positional embedding's on tokens after cached ones,
and the cached model masks its chunks and places their positions with them."""

from __future__ import annotations

import numpy as np
import pytest
from repo import SOLUTIONS, by_id, write_variant
from safetensors import safe_open
from test_mistakes import FUTURE

from grader.learner.drivers.offset import NO_OFFSET
from grader.shared import wire

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
    scores, passed = inputs[wire.ARG.format(case=case, i=0)], inputs[wire.ARG.format(case=case, i=1)]
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
    assert result.message.startswith(f"TypeError: {NO_OFFSET.format(target='Attention.apply_causal_mask')}")
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


POS_SIGNATURE = '(\n        self, tokens: Int[Tensor, "batch posn"], past_kv_pos_offset: int = 0\n    ) ->'
POS_OLD_SIGNATURE = {
    "embedding.py": [
        (POS_SIGNATURE, '(self, tokens: Int[Tensor, "batch posn"]) ->'),
        ("self.W_pos[past_kv_pos_offset : past_kv_pos_offset + seq_len]", "self.W_pos[:seq_len]"),
    ]
}
POS_OFFSET_CASES = {"random.offset5": 5, "one_token.offset_last": 1023}


@pytest.mark.parametrize(("case", "offset"), POS_OFFSET_CASES.items())
def test_the_position_offset_cases_pass_the_offset_and_expect_the_rows_after_it(reference, case, offset):
    inputs = reference.inputs("pos_embed")
    tokens, passed = inputs[wire.ARG.format(case=case, i=0)], inputs[wire.ARG.format(case=case, i=1)]
    assert int(passed) == offset
    with safe_open(str(reference.weights_path), "np") as weights:
        W_pos = weights.get_tensor("pos_embed.W_pos")
    rows = W_pos[offset : offset + tokens.shape[1]]
    assert rows.shape[0] == tokens.shape[1]  # the offset leaves room for every token
    assert np.array_equal(reference.expected("pos_embed")[case], np.broadcast_to(rows, (*tokens.shape, rows.shape[1])))


def test_a_pos_embed_without_the_offset_parameter_gets_one_line_naming_it(grade, tmp_path):
    result = by_id(grade(write_variant(tmp_path, POS_OLD_SIGNATURE), "pos_embed"))["pos_embed"]
    assert result.status == "error", (result.status, result.message)
    assert result.message.startswith(f"TypeError: {NO_OFFSET.format(target='PosEmbed.forward')}"), result.message
    assert "on random.offset5: " in result.message and "\n" not in result.message


def test_a_cached_model_that_places_its_chunks_from_zero_fails(grade, tmp_path):
    """CachedTransformer reuses PosEmbed: without the cache's length every chunk's positions start at 0."""
    edits = {"kv_cache.py": [("self.pos_embed(tokens, past_posn)", "self.pos_embed(tokens)")]}
    result = by_id(grade(write_variant(tmp_path, edits), "kv_cache"))["kv_cache"]
    assert result.status == "fail", (result.status, result.message)
