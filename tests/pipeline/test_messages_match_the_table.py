"""Messages consistent with the table, on packages written wrong: the max abs diff is a magnitude, shown only
where values were compared and differ, and a function without `return` is named as such at its own line."""

from __future__ import annotations

import ast

import pytest
from repo import SOLUTIONS, by_id, write_variant
from test_mistakes import MISTAKES

from grader.checks import select

# check -> (its file, the class of the target or None, the function, its one `return` line, exact in the file)
RETURNS = {
    "embed": ("embedding.py", "Embed", "forward", "return self.W_E[tokens]"),
    "layernorm": ("normalization.py", "LayerNorm", "forward", "return normalized * self.w + self.b"),
    "attention.causal_mask": (
        "attention.py",
        "Attention",
        "apply_causal_mask",
        "return attn_scores.masked_fill(future, self.IGNORE)",
    ),
    "gelu_new": ("mlp.py", None, "gelu_new", "return 0.5 * x * (1.0 + torch.tanh(inner))"),
    "unembed": ("unembedding.py", "Unembed", "forward", "return logits + self.b_U"),
    "training.next_token_loss": (
        "training.py",
        None,
        "next_token_loss",
        "return -log_probs.gather(dim=-1, index=targets).mean()",
    ),
}


def def_line(source: str, owner: str | None, function: str) -> int:
    """The line of `def function` (in class `owner`), read from the source itself."""
    tree = ast.parse(source)
    scope = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == owner) if owner else tree
    defs = [node for node in scope.body if isinstance(node, ast.FunctionDef) and node.name == function]
    return defs[0].lineno


@pytest.mark.parametrize("check_id", RETURNS)
def test_a_function_without_return_is_told_so_at_its_def(grade, tmp_path, check_id):
    file, owner, function, returned = RETURNS[check_id]
    package = write_variant(tmp_path, {file: [(returned, returned.removeprefix("return "))]})
    result = by_id(grade(package, check_id))[check_id]
    (check,) = select([check_id])
    assert result.status == "fail", result.message
    assert result.message.startswith(f"{check.target.label} returned None: is its `return` missing? (on "), (
        result.message
    )
    assert (result.file, result.line) == (file, def_line((package / file).read_text(), owner, function))
    assert result.max_abs_diff is None


TAKES_NO_OFFSET = {
    "embedding.py": [
        ('tokens: Int[Tensor, "batch posn"], past_kv_pos_offset: int = 0\n', 'tokens: Int[Tensor, "batch posn"]\n'),
        ("self.W_pos[past_kv_pos_offset : past_kv_pos_offset + seq_len]", "self.W_pos[:seq_len]"),
    ]
}
NOT_A_DIFFERENCE = {  # variant -> (its check, its edits, the status): nothing compared differs in value
    "a PosEmbed that takes no offset": ("pos_embed", TAKES_NO_OFFSET, "error"),
    **{
        name: (MISTAKES[name][0], MISTAKES[name][1], "fail")
        for name in (
            "a mask that hides the diagonal (mask check)",
            "a mask anchored at the first key (the offset ignored)",
            "a block that modifies its input in place",
            "PosEmbed without the batch axis",
            "mask applied after the softmax",
        )
    },
}


@pytest.mark.parametrize("variant", NOT_A_DIFFERENCE)
def test_a_check_that_differs_in_no_value_shows_no_max_abs_diff(grade, tmp_path, variant):
    """0.00e+00 beside a FAIL or an ERROR said that nothing differs; a shape or the masked scores do."""
    check_id, edits, status = NOT_A_DIFFERENCE[variant]
    result = by_id(grade(write_variant(tmp_path, edits), check_id))[check_id]
    assert result.status == status, result.message
    assert result.max_abs_diff is None and result.shown_diff == ""


@pytest.mark.slow
def test_every_max_abs_diff_of_the_solutions_is_a_magnitude(grade):
    """The passing trainer showed -3.08e-01, its loss minus the bar: a bar is no difference at all."""
    graded = by_id(grade(SOLUTIONS))
    assert {check.status for check in graded.values()} == {"pass"}
    negative = {check.id: check.max_abs_diff for check in graded.values() if (check.max_abs_diff or 0) < 0}
    assert negative == {}
    assert graded["training.trainer"].max_abs_diff is None
