"""Part 6: positions concatenated, not added (ConcatTransformer in positions.py).

The solutions pass, the stubs are todo, each slip written into the solution fails at its own check with its own
hint (a width that does not add up to d_model is named from the shape it gives a parameter, since that module never
loads), code written in another style passes, and the expected stream, transformer_lens's sum of zero-padded halves,
is the concatenation of the halves the learner's module is loaded with.
"""

from __future__ import annotations

import numpy as np
import pytest
from repo import SOLUTIONS, by_id, stubs, tiered, write_variant

from grader.shared import wire

CONCAT_CHECKS = ("concat.residual", "concat.transformer")
CONCATENATED = "return torch.cat([self.embed(tokens), self.pos_embed(tokens)], dim=-1)"
POSITION_HALF = "self.pos_embed = PosEmbed(dataclasses.replace(cfg, d_model=cfg.d_model - d_token))"
TOKEN_HALF = "self.embed = Embed(dataclasses.replace(cfg, d_model=d_token))"
LOOP = "for block in self.blocks:"
# mistake: (check, edits of positions.py, what the hint must say)
MISTAKES = {
    "halves swapped": (
        "concat.residual",
        [(CONCATENATED, "return torch.cat([self.pos_embed(tokens), self.embed(tokens)], dim=-1)")],
        "halves are in the other order",
    ),
    "positions by token id": (
        "concat.residual",
        [(CONCATENATED, "return torch.cat([self.embed(tokens), self.pos_embed.W_pos[tokens]], dim=-1)")],
        "looked up by token id",
    ),
    "PosEmbed at d_model": (
        "concat.residual",
        [(POSITION_HALF, "self.pos_embed = PosEmbed(cfg)")],
        "d_token + d_model wide",
    ),
    "Embed at d_model": (
        "concat.residual",
        [(TOKEN_HALF, "self.embed = Embed(cfg)")],
        "build it at d_token",
    ),
    # residual's slip seen through the whole model: named, and located in residual (the where invariant holds it)
    "halves swapped, whole model": (
        "concat.transformer",
        [(CONCATENATED, "return torch.cat([self.pos_embed(tokens), self.embed(tokens)], dim=-1)")],
        "halves are in the other order",
    ),
    "no ln_final": (
        "concat.transformer",
        [("return self.unembed(self.ln_final(residual))", "return self.unembed(residual)")],
        "ln_final is not applied",
    ),
    "one block": ("concat.transformer", [(LOOP, "for block in self.blocks[:1]:")], "only one block is applied"),
}
QUICK = ["halves swapped", "positions by token id", "PosEmbed at d_model", "no ln_final"]
# The same class written other ways, each of which must pass: the configs copied and changed, the stream filled by
# slices of a zero tensor; einops.pack, and the blocks folded with functools.reduce.
OTHER_STYLES = {
    "copied configs, slices": [
        ("import dataclasses\n", "import copy\nimport dataclasses\n"),
        (
            TOKEN_HALF,
            "token_cfg, position_cfg = copy.copy(cfg), copy.copy(cfg)\n"
            "        token_cfg.d_model, position_cfg.d_model = d_token, cfg.d_model - d_token\n"
            "        self.embed = Embed(token_cfg)",
        ),
        (POSITION_HALF, "self.pos_embed = PosEmbed(position_cfg)"),
        (
            CONCATENATED,
            "token_half, position_half = self.embed(tokens), self.pos_embed(tokens)\n"
            "        stream = token_half.new_zeros(*tokens.shape, self.cfg.d_model)\n"
            "        stream[..., : token_half.shape[-1]] = token_half\n"
            "        stream[..., token_half.shape[-1] :] = position_half\n"
            "        return stream",
        ),
    ],
    "einops.pack, reduce": [
        ("import dataclasses\n", "import dataclasses\nimport functools\n\nimport einops\n"),
        (CONCATENATED, 'return einops.pack([self.embed(tokens), self.pos_embed(tokens)], "batch posn *")[0]'),
        (
            f"residual = self.residual(tokens)\n        {LOOP}\n            residual = block(residual)\n",
            "residual = functools.reduce(lambda stream, block: block(stream), self.blocks, self.residual(tokens))\n",
        ),
    ],
}


def test_solutions_pass_every_concat_check(grade):
    report = grade(SOLUTIONS, "concat")
    assert [c.id for c in report.checks] == list(CONCAT_CHECKS)
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(CONCAT_CHECKS, "pass"), [
        c.message for c in report.checks
    ]


def test_stubs_are_todo(grade):
    assert {c.id: c.status for c in grade(stubs(), "concat").checks} == dict.fromkeys(CONCAT_CHECKS, "todo")


@pytest.mark.parametrize("mistake", tiered(MISTAKES, QUICK))
def test_mistake_fails_at_its_check_with_its_hint(grade, tmp_path, mistake):
    check_id, edits, said = MISTAKES[mistake]
    result = by_id(grade(write_variant(tmp_path, {"positions.py": edits}), check_id))[check_id]
    assert result.status == "fail", result.message
    assert said in (result.hint or ""), (result.message, result.hint)


def test_a_width_slip_names_the_parameter_and_the_small_models_shape(grade, tmp_path):
    _, edits, _ = MISTAKES["PosEmbed at d_model"]
    result = by_id(grade(write_variant(tmp_path, {"positions.py": edits}), "concat.residual"))["concat.residual"]
    assert result.message == "parameter pos_embed.W_pos has shape (64, 64), the small model's has (64, 16)"
    assert result.next_step.startswith("most likely: pos_embed.W_pos is (n_ctx, d_model)")


@pytest.mark.parametrize("style", OTHER_STYLES)
def test_another_style_passes(grade, tmp_path, style):
    report = grade(write_variant(tmp_path, {"positions.py": OTHER_STYLES[style]}), "concat")
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(CONCAT_CHECKS, "pass"), [
        c.message for c in report.checks
    ]


def test_the_padded_models_stream_is_the_concatenation_of_the_halves(reference):
    """transformer_lens's [W_E | 0][tokens] + [0 | W_pos][positions], on every case, equals exactly the halves the
    learner's module is loaded with, concatenated: the expected answer is the exercise's, not a look-alike."""
    inputs, expected = reference.inputs("concat.residual"), reference.expected("concat.residual")
    cases = reference.cases("concat.residual")
    assert {int(inputs[wire.ARG.format(case=case.name, i=1)]) for case in cases} == {48, 16}
    for case in cases:
        tokens = inputs[wire.ARG.format(case=case.name, i=0)]
        W_E, W_pos = (
            inputs[wire.OVERRIDE.format(case=case.name, parameter=p)] for p in ("embed.W_E", "pos_embed.W_pos")
        )
        positions = np.broadcast_to(W_pos[: tokens.shape[-1]], (*tokens.shape, W_pos.shape[-1]))
        assert W_E.shape[-1] + W_pos.shape[-1] == case.config["d_model"], case.name
        np.testing.assert_array_equal(expected[case.name], np.concatenate([W_E[tokens], positions], axis=-1))
