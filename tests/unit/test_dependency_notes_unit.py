"""A dependency note never precedes a check's own error, and no message tells the learner to make pass a
check that passes: the dependency step on hand-built results over the real checks (no reference, no learner
process). A package with a syntax error in transformer.py, graded, is in test_dependency_notes.py."""

from __future__ import annotations

import re

import numpy as np
import pytest

from grader.checks import registry
from grader.checks.training.trainer import below_threshold
from grader.host.dependencies import with_failing_parts
from grader.host.results import CheckResult
from grader.shared.types import Tolerance

pytestmark = pytest.mark.unit

SYNTAX = "SyntaxError: invalid syntax (transformer.py, line 23) (transformer.py:23: def forward(self (, tokens):)"
MODEL_PARTS = ("embed", "pos_embed", "layernorm", "block", "unembed")


def result(check_id: str, status: str = "pass", message: str = "", **fields) -> CheckResult:
    return CheckResult(check_id, "model", "", status, 1, message, next_step=fields.pop("next_step", "own"), **fields)


def said(results: list[CheckResult], check_id: str) -> CheckResult:
    return {check.id: check for check in with_failing_parts(results)}[check_id]


def test_a_part_stopped_by_the_checks_own_syntax_error_is_not_named():
    """A package that does not import stops the parts too: their failure is the check's own error."""
    syntax = {"message": SYNTAX, "file": "transformer.py", "line": 23}
    results = [*(result(part, "error", **syntax) for part in MODEL_PARTS), result("transformer", "error", **syntax)]
    transformer = said(results, "transformer")
    assert (transformer.message, transformer.notes, transformer.next_step) == (SYNTAX, [], "own")


def test_a_syntax_error_in_the_file_of_the_check_and_its_part_is_the_checks_own():
    syntax = {"message": "SyntaxError: invalid syntax (attention.py, line 5)", "file": "attention.py", "line": 5}
    results = [result("attention.causal_mask", "error", **syntax), result("attention", "error", **syntax)]
    assert said(results, "attention").message == syntax["message"]


def test_a_part_whose_own_code_raised_is_named_first_though_it_shares_the_checks_file():
    """The mask's squeeze() raised inside attention.py: Attention.forward only called it."""
    raised = {
        "message": "ValueError: not enough values to unpack (attention.py:38)",
        "file": "attention.py",
        "line": 38,
    }
    results = [result("attention.causal_mask", "error", **raised), result("attention", "error", **raised)]
    assert said(results, "attention").message == (
        f"your Attention.apply_causal_mask fails its own check: fix attention.causal_mask first; {raised['message']}"
    )


def test_an_error_in_the_checks_own_file_comes_first_and_a_failing_part_follows_in_a_note():
    """Transformer.forward raised at its own line, and PosEmbed fails too: the learner reads their own error first."""
    own = "RuntimeError: The size of tensor a (9) must match (transformer.py:31: x = embedded + positions)"
    results = [
        result("pos_embed", "fail", "differs from GPT-2 on small_ids: output shape (9, 768), expected (2, 9, 768)"),
        result("transformer", "error", own, file="transformer.py", line=31),
    ]
    transformer = said(results, "transformer")
    assert transformer.message == own and transformer.next_step == "own"
    assert transformer.notes == ["your PosEmbed fails its own check: fix pos_embed too"]


def test_an_error_raised_in_a_parts_file_still_names_the_part_first():
    """The whole model raised inside the learner's block: the block is where to look."""
    raised = "RuntimeError: shapes cannot be multiplied (block.py:27: resid_mid = self.attn(x))"
    results = [
        result("block", "error", raised, file="block.py", line=27),
        result("transformer", "error", raised, file="block.py", line=27),
    ]
    transformer = said(results, "transformer")
    assert transformer.message == f"your TransformerBlock fails its own check: fix block first; {raised}"


TRAINING = ("training.next_token_loss", "training.make_optimizer", "training.lr_at", "training.train_step")
RATES = [1e-2] * 8  # the first parameter group's lr at each step, then the last group's: on the schedule
SHORT_RUN = np.array([4.1, 12.0, 5.5, 5.0, 4.6, 4.2, *RATES])  # held-out loss, seconds, the training losses, RATES
BAR = np.array([3.652, 5.55, 0.0, 0.0, 0.0, 0.0, *RATES])


def failing_trainer(**statuses: str) -> CheckResult:
    comparison = below_threshold(SHORT_RUN, BAR, Tolerance())
    assert not comparison.ok
    trainer = result("training.trainer", "fail", f"differs from the bar to clear on stdlib_docs: {comparison.message}")
    return said([*(result(check_id, statuses.get(check_id, "pass")) for check_id in TRAINING), trainer], trainer.id)


def named_to_make_pass(check: CheckResult) -> set[str]:
    """The checks a message tells the learner to fix or to make pass."""
    ids = {c.id for c in registry()}
    text = " ".join([check.message, check.next_step, *check.notes])
    asked = re.findall(r"(?:fix|make) ([\w. ]+?) (?:first|too|pass)", text)
    return {word for phrase in asked for word in re.split(r",? and |, ", phrase) if word in ids}


def test_a_trainer_that_learnt_little_names_no_passing_check():
    trainer = failing_trainer()
    assert "the model learnt little beyond token frequencies" in trainer.message
    assert named_to_make_pass(trainer) == set()
    assert not re.search(r"\d s\b", trainer.message)  # nothing that varies run to run, as watch compares reasons


def test_a_trainer_that_learnt_little_names_the_failing_step():
    trainer = failing_trainer(**{"training.train_step": "fail"})
    assert trainer.message.startswith("your train_step fails its own check: fix training.train_step first; ")
    assert named_to_make_pass(trainer) == {"training.train_step"}


def test_the_trainers_bar_is_no_difference_from_an_expected_tensor():
    """A passing trainer showed -3.08e-01: the loss minus the bar, signed. A bar has no max abs diff."""
    passing = below_threshold(np.array([3.3, 12.0, *SHORT_RUN[2:]]), BAR, Tolerance())
    assert passing.ok and passing.max_abs_diff is None
    assert below_threshold(SHORT_RUN, BAR, Tolerance()).max_abs_diff is None


def test_a_parameter_group_off_the_schedule_fails_whatever_the_loss():
    """Only the first group's lr set: the loss clears the bar, the last group's lr says where it went wrong."""
    last_group_stuck = np.array([3.3, 12.0, *SHORT_RUN[2:6], *RATES[:4], 1e-2, 2e-2, 2e-2, 2e-2])
    comparison = below_threshold(last_group_stuck, BAR, Tolerance(atol=0.0, rtol=1e-6))
    assert not comparison.ok
    assert comparison.message == "the last parameter group's lr at step 1 is 0.02, lr_at gives 0.01"
