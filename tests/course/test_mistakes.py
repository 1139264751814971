"""Each classic mistake fails at its own check, says what differs, and is named by the diagnosis."""

from __future__ import annotations

import pytest
from repo import by_id, tiered, write_variant

SCALED = "attn_scores / self.cfg.d_head**0.5"
GELU_BODY = (
    "inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))\n"
    "    return 0.5 * x * (1.0 + torch.tanh(inner))"
)
BLOCK_BODY = (
    "resid_mid = resid_pre + self.attn(self.ln1(resid_pre))\n"
    "        resid_post = resid_mid + self.mlp(self.ln2(resid_mid))"
)
DIFFERS = "differs from the random reference"
EPS_INSIDE = "(residual_var + self.cfg.layer_norm_eps).sqrt()"
MASK = "return attn_scores.masked_fill(future, self.IGNORE)"
FUTURE = "torch.triu(all_ones, diagonal=past_kv_pos_offset + 1)"
MASK_CALL = f"self.apply_causal_mask({SCALED})"


def inline_mask(masked: str) -> str:
    """attention's forward masking its scaled scores itself, where `masked` (of `future`, all ones) is what it hides."""
    future = "attn_scores.new_ones(attn_scores.shape[-2:], dtype=torch.bool)"
    return f"({SCALED}).masked_fill({masked.replace('future', future)}, float('-inf'))"


# Masks built from the values, as learners have published them: they also hide allowed scores that are exactly 0.
VALUE_MASK = "return torch.where(torch.triu(attn_scores, 1) != attn_scores, attn_scores, self.IGNORE)"
VALUE_MASKED = {"attention.py": [(MASK, VALUE_MASK)]}
# The same inside attention's forward (attention's own: in apply_causal_mask, attention is graded on the grader's mask).
VALUE_MASKED_INLINE = {
    "attention.py": [
        (
            f"attn_scores_masked = {MASK_CALL}",
            f"scaled = {SCALED}\n        "
            "attn_scores_masked = torch.where(torch.triu(scaled, 1) != scaled, scaled, self.IGNORE)",
        )
    ]
}
TRIL_MASK = "return attn_scores.masked_fill(attn_scores.tril() == 0, self.IGNORE)"
ON_INTEGERS, ZEROS = "differs from the random reference on integer_scores", "allowed scores equal to 0 were masked"
ON_LARGE, OVERFLOWS = (
    "differs from the random reference on blocks.11.large_scores",
    "the softmax overflows on large scores",
)
SOFTMAX = "attn_pattern = attn_scores_masked.softmax(dim=-1)"
EXP_OVER_SUM = "exps = attn_scores_masked.exp()\n        attn_pattern = exps / exps.sum(dim=-1, keepdim=True)"
TANH_BY_EXP = "(torch.exp(2 * inner) - 1) / (torch.exp(2 * inner) + 1)"
POSITIONS = (
    "positions = self.W_pos[past_kv_pos_offset : past_kv_pos_offset + seq_len]\n"
    '        return einops.repeat(positions, "posn d_model -> batch posn d_model", batch=batch)'
)
W_O_EINSUM = """        attn_out = einops.einsum(
            z, self.W_O, "batch posn_Q n_heads d_head, n_heads d_head d_model -> batch posn_Q d_model"
        )
"""
# z merged into one (batch, posn, n_heads * d_head) vector before one matmul with W_O, its heads in the wrong order.
MERGED_BY_REARRANGE = """        merged = einops.rearrange(z, "b posn n_heads d_head -> b posn (d_head n_heads)")
        attn_out = merged @ self.W_O.reshape(-1, self.cfg.d_model)
"""
MERGED_BY_TRANSPOSE = """        z_flat = z.transpose(-1, -2).reshape(z.shape[0], z.shape[1], -1)
        attn_out = z_flat @ self.W_O.flatten(0, 1)
"""
# The same sum as one einsum, W_O's (n_heads d_head) rows read as (d_head n_heads).
MERGED_BY_EINSUM = """        W_O = self.W_O.reshape(self.cfg.d_head, self.cfg.n_heads, self.cfg.d_model)
        attn_out = einops.einsum(z, W_O, "batch posn n_heads d_head, d_head n_heads d_model -> batch posn d_model")
"""

# name: (check, edits, fragment of the message, fragment of the hint or None when no hint is expected)
MISTAKES = {
    "variance with N-1": ("layernorm", {"normalization.py": [("unbiased=False", "unbiased=True")]}, DIFFERS, "N-1"),
    "eps outside the square root": (
        "layernorm",
        {
            "normalization.py": [
                ("(residual_var + self.cfg.layer_norm_eps).sqrt()", "residual_var.sqrt() + self.cfg.layer_norm_eps")
            ]
        },
        DIFFERS,
        "outside the square root",
    ),
    "LayerNorm without w and b": (
        "layernorm",
        {"normalization.py": [("return normalized * self.w + self.b", "return normalized")]},
        DIFFERS,
        "w and b are not applied",
    ),
    "statistics over the wrong axis": (
        "layernorm",
        {
            "normalization.py": [
                ("residual.mean(dim=-1, keepdim=True)", "residual.mean(dim=-2, keepdim=True)"),
                ("residual.var(dim=-1,", "residual.var(dim=-2,"),
            ]
        },
        DIFFERS,
        "over positions",
    ),
    "a misnamed parameter": (
        "attention",
        {
            "attention.py": [
                ("self.W_Q = normal_weight", "self.W_q = normal_weight"),
                ("normalized_resid_pre, self.W_Q,", "normalized_resid_pre, self.W_q,"),
            ]
        },
        "parameter W_q is not in the random reference's weights (the random reference calls it W_Q)",
        None,
    ),
    "positions looked up by token id": (
        "pos_embed",
        {"embedding.py": [(POSITIONS, "return self.W_pos[tokens]")]},
        "differs from the random reference on small_ids",
        "by token id",
    ),
    # The most common mistake in published ARENA code: it broadcasts when added, so the learner's model runs.
    "PosEmbed without the batch axis": (
        "pos_embed",
        {"embedding.py": [(POSITIONS, "return self.W_pos[:seq_len]")]},
        "output shape (9, 768), expected (2, 9, 768)",
        "the batch axis is missing: (posn, d_model) broadcasts when added, so your model runs, "
        "but PosEmbed must return (batch, posn, d_model)",
    ),
    "PosEmbed with a batch axis of size 1": (
        "pos_embed",
        {"embedding.py": [(POSITIONS, "return self.W_pos[:seq_len].unsqueeze(0)")]},
        "output shape (1, 9, 768), expected (2, 9, 768)",
        "the batch axis has size 1",
    ),
    "PosEmbed numbering the flattened batch": (
        "pos_embed",
        {"embedding.py": [(POSITIONS, "return self.W_pos[past_kv_pos_offset : past_kv_pos_offset + tokens.numel()]")]},
        "output shape (18, 768), expected (2, 9, 768)",
        "the positions run on across the flattened batch (range(tokens.numel())) and the batch axis is gone",
    ),
    "PosEmbed numbering the flattened batch, shaped": (
        "pos_embed",
        {"embedding.py": [(POSITIONS, "return self.W_pos[: batch * seq_len].reshape(batch, seq_len, -1)")]},
        "differs from the random reference on",
        "the positions run on across the flattened batch (range(tokens.numel())): each sequence starts again",
    ),
    "PosEmbed's positions from 0 after cached tokens": (
        "pos_embed",
        {"embedding.py": [("self.W_pos[past_kv_pos_offset : past_kv_pos_offset + seq_len]", "self.W_pos[:seq_len]")]},
        "differs from the random reference on random.offset5",
        "the positions start at 0, not at past_kv_pos_offset",
    ),
    "no 1/sqrt(d_head) scaling": (
        "attention",
        {"attention.py": [(f"self.apply_causal_mask({SCALED})", "self.apply_causal_mask(attn_scores)")]},
        DIFFERS,
        "not scaled",
    ),
    "scaling by d_head": (
        "attention",
        {"attention.py": [(SCALED, "attn_scores / self.cfg.d_head")]},
        DIFFERS,
        "divided by d_head",
    ),
    "mask applied after the softmax": (
        "attention",
        {
            "attention.py": [
                (
                    f"attn_scores_masked = self.apply_causal_mask({SCALED})\n"
                    "        attn_pattern = attn_scores_masked.softmax(dim=-1)",
                    f"attn_pattern = self.apply_causal_mask(({SCALED}).softmax(dim=-1))",
                )
            ]
        },
        "non-finite",
        "after the softmax",
    ),
    "a mask that hides the diagonal (mask check)": (
        "attention.causal_mask",
        {"attention.py": [(FUTURE, "torch.triu(all_ones, diagonal=0)")]},
        "on the diagonal are masked",
        None,
    ),
    # The classic KV-cache mistake: triu(diagonal=1) on non-square scores masks as if the queries started at 0.
    "a mask anchored at the first key (the offset ignored)": (
        "attention.causal_mask",
        {"attention.py": [(FUTURE, "torch.triu(all_ones, diagonal=1)")]},
        "on scores_3x8.offset5: ",
        "the mask ignores the cached positions before the queries",
    ),
    # A mask written wrong inside forward: attention's own. Written wrong in apply_causal_mask, the mask's own check
    # fails, and attention is graded on the grader's mask (tests/course/test_stand_ins.py).
    "a mask that hides the diagonal": (
        "attention",
        {"attention.py": [(MASK_CALL, inline_mask("torch.triu(future, diagonal=0)"))]},
        "non-finite",
        "hides the diagonal",
    ),
    "an anti-causal mask": (
        "attention",
        {"attention.py": [(MASK_CALL, inline_mask("torch.tril(future, diagonal=-1)"))]},
        DIFFERS,
        "hides the past",
    ),
    "softmax over the query axis": (
        "attention",
        {"attention.py": [("attn_scores_masked.softmax(dim=-1)", "attn_scores_masked.softmax(dim=-2)")]},
        DIFFERS,
        "over the query axis",
    ),
    "forgotten b_Q": ("attention", {"attention.py": [(") + self.b_Q", ")")]}, DIFFERS, "b_Q"),
    "forgotten b_V": ("attention", {"attention.py": [(") + self.b_V", ")")]}, DIFFERS, "b_V"),
    "forgotten b_O": (
        "attention",
        {"attention.py": [("return attn_out + self.b_O", "return attn_out")]},
        DIFFERS,
        "b_O",
    ),
    "b_O added once per head": (
        "attention",
        {
            "attention.py": [
                (
                    'd_model -> batch posn_Q d_model"\n        )\n        return attn_out + self.b_O',
                    'd_model -> batch posn_Q n_heads d_model"\n        )\n'
                    "        return (attn_out + self.b_O).sum(dim=-2)",
                )
            ]
        },
        DIFFERS,
        "b_O is added once per head",
    ),
    "heads merged as (d_head n_heads) by rearrange": (
        "attention",
        {"attention.py": [(W_O_EINSUM, MERGED_BY_REARRANGE)]},
        DIFFERS,
        "the heads are merged in the wrong order",
    ),
    "heads merged as (d_head n_heads) by transpose and reshape": (
        "attention",
        {"attention.py": [(W_O_EINSUM, MERGED_BY_TRANSPOSE)]},
        DIFFERS,
        "the heads are merged in the wrong order",
    ),
    "heads merged as (d_head n_heads) by an einsum": (
        "attention",
        {"attention.py": [(W_O_EINSUM, MERGED_BY_EINSUM)]},
        DIFFERS,
        "the heads are merged in the wrong order",
    ),
    "forgotten b_in": ("mlp", {"mlp.py": [("+ self.b_in", "")]}, DIFFERS, "b_in"),
    "forgotten b_out": ("mlp", {"mlp.py": [("+ self.b_out", "")]}, DIFFERS, "b_out"),
    "forgotten b_U": ("unembed", {"unembedding.py": [("return logits + self.b_U", "return logits")]}, DIFFERS, "b_U"),
    "ReLU instead of gelu_new in the MLP": (
        "mlp",
        {"mlp.py": [("        post = gelu_new(pre)\n", "        post = torch.relu(pre)\n")]},
        DIFFERS,
        "ReLU",
    ),
    "ReLU as gelu_new": ("gelu_new", {"mlp.py": [(GELU_BODY, "return torch.relu(x)")]}, DIFFERS, "ReLU"),
    "exact erf GELU as gelu_new": (
        "gelu_new",
        {"mlp.py": [(GELU_BODY, "return torch.nn.functional.gelu(x)")]},
        DIFFERS,
        "exact (erf) GELU",
    ),
    "a wrong gelu_new constant": (
        "gelu_new",
        {"mlp.py": [("math.sqrt(2.0 / math.pi)", "(2.0 / math.pi)")]},
        DIFFERS,
        "2/pi",
    ),
    "the attention residual left out": (
        "block",
        {"block.py": [("resid_mid = resid_pre + self.attn(", "resid_mid = self.attn(")]},
        DIFFERS,
        "attention residual is missing",
    ),
    "the MLP residual left out": (
        "block",
        {"block.py": [("resid_post = resid_mid + self.mlp(", "resid_post = self.mlp(")]},
        DIFFERS,
        "MLP residual is missing",
    ),
    "ln1 used twice": (
        "block",
        {"block.py": [("self.mlp(self.ln2(resid_mid))", "self.mlp(self.ln1(resid_mid))")]},
        DIFFERS,
        "ln1 is used before the MLP",
    ),
    "ln2 reading the block's input": (
        "block",
        {"block.py": [("self.mlp(self.ln2(resid_mid))", "self.mlp(self.ln2(resid_pre))")]},
        DIFFERS,
        "the MLP reads ln2(resid_pre), the block's input",
    ),
    "LayerNorm after the residual add": (
        "block",
        {
            "block.py": [
                (
                    BLOCK_BODY,
                    "resid_mid = self.ln1(resid_pre + self.attn(resid_pre))\n"
                    "        resid_post = self.ln2(resid_mid + self.mlp(resid_mid))",
                )
            ]
        },
        DIFFERS,
        "after the residual add",
    ),
    "ln_final left out": (
        "transformer",
        {"transformer.py": [("self.unembed(self.ln_final(residual))", "self.unembed(residual)")]},
        DIFFERS,
        "ln_final",
    ),
    "positional embeddings left out": (
        "transformer",
        {"transformer.py": [("self.embed(tokens) + self.pos_embed(tokens)", "self.embed(tokens)")]},
        DIFFERS,
        "positional embedding",
    ),
    "a single block instead of the stack": (
        "transformer",
        {
            "transformer.py": [
                (
                    "        for block in self.blocks:\n            residual = block(residual)",
                    "        residual = self.blocks[0](residual)",
                )
            ]
        },
        DIFFERS,
        "only one block",
    ),
    "LayerNorm without eps": (
        "layernorm",
        {"normalization.py": [(EPS_INSIDE, "residual_var.sqrt()")]},
        DIFFERS,
        "eps is not",
    ),
    "a mask built from the values (mask check)": ("attention.causal_mask", VALUE_MASKED, ON_INTEGERS, ZEROS),
    "a mask built from the values": ("attention", VALUE_MASKED_INLINE, "non-finite", ZEROS),
    "a mask of the nonzero lower triangle": (
        "attention.causal_mask",
        {"attention.py": [(MASK, TRIL_MASK)]},
        ON_INTEGERS,
        ZEROS,
    ),
    "a softmax by hand without the max": (
        "attention",
        {"attention.py": [(SOFTMAX, EXP_OVER_SUM)]},
        ON_LARGE,
        OVERFLOWS,
    ),
    "a tanh by hand in gelu_new": (
        "gelu_new",
        {"mlp.py": [("torch.tanh(inner)", TANH_BY_EXP)]},
        "on wide",
        "tanh overflows",
    ),
    "a block that modifies its input in place": (
        "block",
        {
            "block.py": [
                (
                    BLOCK_BODY + "\n        return resid_post",
                    "resid_pre += self.attn(self.ln1(resid_pre))\n"
                    "        resid_pre += self.mlp(self.ln2(resid_pre))\n"
                    "        return resid_pre",
                )
            ]
        },
        "modified its input in place",
        "an argument is changed in place",
    ),
}


# `make test` grades one mistake of each check (and a misnamed parameter, which fails before any value is compared);
# `make test-all` every one.
QUICK = (
    "variance with N-1",
    "a misnamed parameter",
    "PosEmbed without the batch axis",
    "no 1/sqrt(d_head) scaling",
    "a mask anchored at the first key (the offset ignored)",
    "forgotten b_in",
    "exact erf GELU as gelu_new",
    "forgotten b_U",
    "the attention residual left out",
    "a single block instead of the stack",
)


@pytest.mark.parametrize("mistake", tiered(MISTAKES, QUICK))
def test_mistake_fails_at_its_check_and_is_named(mistake, grade, tmp_path):
    check_id, edits, fragment, hint = MISTAKES[mistake]
    result = by_id(grade(write_variant(tmp_path, edits), check_id))[check_id]
    assert result.status == "fail", (result.status, result.message)
    assert result.score == 0
    assert fragment in result.message
    if hint is None:
        assert result.hint is None
    else:
        assert result.hint and hint in result.hint, result.hint
        assert result.next_step == f"most likely: {result.hint}"


def test_positions_looked_up_by_token_id_are_located_at_their_line(grade, tmp_path):
    """PosEmbed's locals are recorded: the lookup by token id is named, at the line that returns it."""
    package = write_variant(tmp_path, {"embedding.py": [(POSITIONS, "return self.W_pos[tokens]")]})
    result = by_id(grade(package, "pos_embed"))["pos_embed"]
    line = (package / "embedding.py").read_text().splitlines().index("        return self.W_pos[tokens]") + 1
    assert result.status == "fail" and "by token id" in (result.hint or ""), result.diagnosis()
    assert result.divergence == (
        f"output, the first step, already differs from the random reference (embedding.py:{line})"
    )
    assert (result.file, result.line) == ("embedding.py", line)


def test_a_forgotten_b_K_changes_nothing(grade, tmp_path):
    """q . b_K is the same for every key of a query, and softmax ignores a constant shift."""
    result = by_id(grade(write_variant(tmp_path, {"attention.py": [(") + self.b_K", ")")]}), "attention"))["attention"]
    assert result.status == "pass"
