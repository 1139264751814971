"""Each classic mistake fails at its own check, with a message that says what differs."""

from __future__ import annotations

import pytest

from conftest import by_id, write_variant

SCALED = "attn_scores / self.cfg.d_head**0.5"
MISTAKES = {
    "variance with N-1": ("layernorm", {"normalization.py": [("unbiased=False", "unbiased=True")]}, "differs from GPT-2"),
    "eps outside the square root": (
        "layernorm",
        {"normalization.py": [("(residual_var + self.cfg.layer_norm_eps).sqrt()", "residual_var.sqrt() + self.cfg.layer_norm_eps")]},
        "differs from GPT-2",
    ),
    "LayerNorm without w and b": ("layernorm", {"normalization.py": [("return normalized * self.w + self.b", "return normalized")]}, "differs from GPT-2"),
    "statistics over the wrong axis": (
        "layernorm",
        {"normalization.py": [("residual.mean(dim=-1, keepdim=True)", "residual.mean(dim=-2, keepdim=True)"), ("residual.var(dim=-1,", "residual.var(dim=-2,")]},
        "differs from GPT-2",
    ),
    "a misnamed parameter": (
        "attention",
        {"attention.py": [("self.W_Q = nn.Parameter", "self.W_q = nn.Parameter"), ("self.W_Q, self.W_K, self.W_V, self.W_O", "self.W_q, self.W_K, self.W_V, self.W_O"), ("normalized_resid_pre, self.W_Q,", "normalized_resid_pre, self.W_q,")]},
        "parameter W_q is not in GPT-2's weights (GPT-2 calls it W_Q)",
    ),
    "positions looked up by token id": (
        "pos_embed",
        {"embedding.py": [("positions = self.W_pos[:seq_len]\n        return einops.repeat(positions, \"posn d_model -> batch posn d_model\", batch=batch)", "return self.W_pos[tokens]")]},
        "not by token id",
    ),
    "no 1/sqrt(d_head) scaling": ("attention", {"attention.py": [(f"self.apply_causal_mask({SCALED})", "self.apply_causal_mask(attn_scores)")]}, "differs from GPT-2"),
    "mask applied after the softmax": (
        "attention",
        {"attention.py": [(f"attn_scores_masked = self.apply_causal_mask({SCALED})\n        attn_pattern = attn_scores_masked.softmax(dim=-1)", f"attn_pattern = self.apply_causal_mask(({SCALED}).softmax(dim=-1))")]},
        "non-finite",
    ),
    "a mask that hides the diagonal": ("attention.causal_mask", {"attention.py": [("torch.triu(all_ones, diagonal=1)", "torch.triu(all_ones, diagonal=0)")]}, "on the diagonal are masked"),
    "softmax over the query axis": ("attention", {"attention.py": [("attn_scores_masked.softmax(dim=-1)", "attn_scores_masked.softmax(dim=-2)")]}, "differs from GPT-2"),
    "forgotten b_V": ("attention", {"attention.py": [(") + self.b_V", ")")]}, "differs from GPT-2"),
    "forgotten b_O": ("attention", {"attention.py": [("return attn_out + self.b_O", "return attn_out")]}, "differs from GPT-2"),
    "forgotten b_in": ("mlp", {"mlp.py": [("+ self.b_in", "")]}, "differs from GPT-2"),
    "forgotten b_U": ("unembed", {"unembedding.py": [("return logits + self.b_U", "return logits")]}, "differs from GPT-2"),
    "ReLU instead of gelu_new in the MLP": ("mlp", {"mlp.py": [("        post = gelu_new(pre)\n", "        post = torch.relu(pre)\n")]}, "differs from GPT-2"),
    "ReLU as gelu_new": ("gelu_new", {"mlp.py": [("inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))\n    return 0.5 * x * (1.0 + torch.tanh(inner))", "return torch.relu(x)")]}, "differs from GPT-2"),
    "exact erf GELU as gelu_new": ("gelu_new", {"mlp.py": [("inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))\n    return 0.5 * x * (1.0 + torch.tanh(inner))", "return torch.nn.functional.gelu(x)")]}, "differs from GPT-2"),
    "a residual connection left out": ("block", {"block.py": [("resid_mid = resid_pre + self.attn(", "resid_mid = self.attn(")]}, "differs from GPT-2"),
    "ln1 used twice": ("block", {"block.py": [("self.mlp(self.ln2(resid_mid))", "self.mlp(self.ln1(resid_mid))")]}, "differs from GPT-2"),
    "LayerNorm after the residual add": (
        "block",
        {"block.py": [("resid_mid = resid_pre + self.attn(self.ln1(resid_pre))\n        resid_post = resid_mid + self.mlp(self.ln2(resid_mid))", "resid_mid = self.ln1(resid_pre + self.attn(resid_pre))\n        resid_post = self.ln2(resid_mid + self.mlp(resid_mid))")]},
        "differs from GPT-2",
    ),
    "ln_final left out": ("transformer", {"transformer.py": [("self.unembed(self.ln_final(residual))", "self.unembed(residual)")]}, "differs from GPT-2"),
    "positional embeddings left out": ("transformer", {"transformer.py": [("self.embed(tokens) + self.pos_embed(tokens)", "self.embed(tokens)")]}, "differs from GPT-2"),
    "a block that modifies its input in place": (
        "block",
        {"block.py": [("resid_mid = resid_pre + self.attn(self.ln1(resid_pre))\n        resid_post = resid_mid + self.mlp(self.ln2(resid_mid))\n        return resid_post", "resid_pre += self.attn(self.ln1(resid_pre))\n        resid_pre += self.mlp(self.ln2(resid_pre))\n        return resid_pre")]},
        "modified its input in place",
    ),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_mistake_fails_at_its_check(mistake, grade, tmp_path):
    check_id, edits, fragment = MISTAKES[mistake]
    result = by_id(grade(write_variant(tmp_path, edits), check_id))[check_id]
    assert result.status == "fail", (result.status, result.message)
    assert fragment in result.message
    assert result.score == 0
