"""Correct code in other styles than the solution's passes."""

from __future__ import annotations

import pytest
from repo import by_id, tiered, write_variant

MASK_CHECKS = ["attention.causal_mask", "attention"]
MASK_FILL = "attn_scores.masked_fill(future, self.IGNORE)"
MASK_BODY = "future = torch.triu(all_ones, diagonal=past_kv_pos_offset + 1)\n        return " + MASK_FILL
MASK_BY_INDEX = """keys = torch.arange(key_pos, device=attn_scores.device)
        queries = torch.arange(query_pos, device=attn_scores.device)
        return attn_scores.masked_fill(keys[None, :] > queries[:, None] + past_kv_pos_offset, self.IGNORE)"""
MASK_BY_WHERE = "torch.where(future, self.IGNORE, attn_scores)"
SOFTMAX = "attn_pattern = attn_scores_masked.softmax(dim=-1)"
SHIFTED = """exps = (attn_scores_masked - attn_scores_masked.amax(dim=-1, keepdim=True)).exp()
        attn_pattern = exps / exps.sum(dim=-1, keepdim=True)"""
DIVIDE = """residual_std = (residual_var + self.cfg.layer_norm_eps).sqrt()
        normalized = (residual - residual_mean) / residual_std"""
RSQRT = """centred = residual - residual_mean
        normalized = centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + self.cfg.layer_norm_eps)"""
ATTENTION_BODY_START = "        q = einops.einsum("
ATTENTION_MATMUL = """        x = normalized_resid_pre.unsqueeze(1)  # (batch, 1, posn, d_model)
        q = x @ self.W_Q + self.b_Q.unsqueeze(1)  # (batch, n_heads, posn, d_head)
        k = x @ self.W_K + self.b_K.unsqueeze(1)
        v = x @ self.W_V + self.b_V.unsqueeze(1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.cfg.d_head)
        pattern = self.apply_causal_mask(scores).softmax(dim=-1)
        z = pattern @ v
        return (z @ self.W_O).sum(dim=1) + self.b_O
"""
ATTENTION_SDPA = """        x = normalized_resid_pre.unsqueeze(1)
        projections = ((self.W_Q, self.b_Q), (self.W_K, self.b_K), (self.W_V, self.b_V))
        q, k, v = (x @ W + b.unsqueeze(1) for W, b in projections)
        z = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return (z @ self.W_O).sum(dim=1) + self.b_O
"""

BLOCK_BODY = """resid_mid = resid_pre + self.attn(self.ln1(resid_pre))
        resid_post = resid_mid + self.mlp(self.ln2(resid_mid))
        return resid_post"""
BLOCK_LOOP = """residual = resid_pre
        for norm, sublayer in ((self.ln1, self.attn), (self.ln2, self.mlp)):
            residual = residual + sublayer(norm(residual))
        return residual"""
BLOCK_FORWARD = """resid_mid = torch.add(self.attn.forward(self.ln1.forward(resid_pre)), resid_pre)
        return resid_mid.double().add(self.mlp.forward(self.ln2.forward(resid_mid)).double()).float()"""


def replace_attention_body(new_body: str) -> list[tuple[str, str]]:
    source = (__import__("repo").SOLUTIONS / "attention.py").read_text()
    start = source.index(ATTENTION_BODY_START)
    end = source.index("        ### END SOLUTION", start)
    return [(source[start:end], new_body), ("import einops\n", "import math\n\nimport einops\n")]


ALTERNATIVES = {
    "functional layer_norm": (
        ["layernorm"],
        {
            "normalization.py": [
                (
                    "residual_mean = residual.mean(dim=-1, keepdim=True)",
                    "return torch.nn.functional.layer_norm("
                    "residual, (self.cfg.d_model,), self.w, self.b, self.cfg.layer_norm_eps)",
                )
            ]
        },
    ),
    "matmul attention": (["attention", "block"], {"attention.py": replace_attention_body(ATTENTION_MATMUL)}),
    "scaled_dot_product_attention": (
        ["attention", "transformer"],
        {"attention.py": replace_attention_body(ATTENTION_SDPA)},
    ),
    "positions by arange, expanded over the batch": (
        ["pos_embed", "kv_cache"],
        {
            "embedding.py": [
                (
                    "positions = self.W_pos[past_kv_pos_offset : past_kv_pos_offset + seq_len]\n"
                    '        return einops.repeat(positions, "posn d_model -> batch posn d_model", batch=batch)',
                    "positions = torch.arange(seq_len, device=tokens.device) + past_kv_pos_offset\n"
                    "        return self.W_pos[positions].expand(batch, -1, -1)",
                ),
                ("import einops\n", "import einops\nimport torch\n"),
            ]
        },
    ),
    "one-hot embedding": (
        ["embed"],
        {
            "embedding.py": [
                (
                    "return self.W_E[tokens]",
                    "return torch.nn.functional.one_hot(tokens, self.cfg.d_vocab).to(self.W_E.dtype) @ self.W_E",
                ),
                ("import einops\n", "import einops\nimport torch\n"),
            ]
        },
    ),
    "large finite negative mask": (
        ["attention.causal_mask", "attention"],
        {"attention.py": [("attn_scores.masked_fill(future, self.IGNORE)", "attn_scores.masked_fill(future, -1e5)")]},
    ),
    "in-place masked_fill_": (
        ["attention.causal_mask", "attention"],
        {
            "attention.py": [
                (
                    "return attn_scores.masked_fill(future, self.IGNORE)",
                    "attn_scores.masked_fill_(future, self.IGNORE)\n        return attn_scores",
                )
            ]
        },
    ),
    "a mask from position indices": (MASK_CHECKS, {"attention.py": [(MASK_BODY, MASK_BY_INDEX)]}),
    "torch.where with a positional mask": (MASK_CHECKS, {"attention.py": [(MASK_FILL, MASK_BY_WHERE)]}),
    "a softmax by hand with the max subtracted": (["attention", "block"], {"attention.py": [(SOFTMAX, SHIFTED)]}),
    "LayerNorm by rsqrt of the mean square": (["layernorm", "block"], {"normalization.py": [(DIVIDE, RSQRT)]}),
    # The block is graded with GPT-2's sublayer outputs replayed into it: any right wiring gets them.
    "a block that loops over its (norm, sublayer) pairs": (["block"], {"block.py": [(BLOCK_BODY, BLOCK_LOOP)]}),
    "a block that calls forward and adds in float64": (
        ["block"],
        {
            "block.py": [
                (BLOCK_BODY, BLOCK_FORWARD),
                ("from torch import Tensor, nn", "import torch\nfrom torch import Tensor, nn"),
            ]
        },
    ),
    "torch's tanh GELU": (
        ["gelu_new", "mlp"],
        {
            "mlp.py": [
                (
                    "inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))\n"
                    "    return 0.5 * x * (1.0 + torch.tanh(inner))",
                    'return torch.nn.functional.gelu(x, approximate="tanh")',
                )
            ]
        },
    ),
}


# `make test` grades one other style of each file; `make test-all` every style.
QUICK = (
    "functional layer_norm",
    "scaled_dot_product_attention",
    "positions by arange, expanded over the batch",
    "one-hot embedding",
    "torch's tanh GELU",
    "a block that loops over its (norm, sublayer) pairs",
)


@pytest.mark.parametrize("alternative", tiered(ALTERNATIVES, QUICK))
def test_alternative_passes(alternative, grade, tmp_path):
    check_ids, edits = ALTERNATIVES[alternative]
    results = by_id(grade(write_variant(tmp_path, edits), *check_ids))
    assert set(check_ids) <= set(results)
    assert {i: (r.status, r.message) for i, r in results.items()} == {i: ("pass", "") for i in results}
