"""grader.host.dependencies.with_failing_parts over a small graph of checks declared here (a model of a mask, an
attention that uses it, a gelu, an MLP that uses it, a block that uses both and a model that uses the block): which
failing parts a check names, in what words, and what it leaves alone. The real registry's cases are in
test_dependency_notes_unit.py."""

from __future__ import annotations

import copy

import pytest

from grader.checks import Check, Target
from grader.host.dependencies import used_by, with_failing_parts
from grader.host.results import CheckResult

pytestmark = pytest.mark.unit
MODEL_PAGE = "01-the-model.md"  # in part 1


def check(check_id: str, target: Target, *uses: str) -> Check:
    return Check(check_id, 1, target, "", lambda reference: [], uses=uses, page=MODEL_PAGE)


GRAPH = [  # in course order
    check("mask", Target("attention", "Attention", "apply_causal_mask")),
    check("attn", Target("attention", "Attention"), "mask"),
    check("gelu", Target("mlp", "gelu_new", None)),
    check("mlp", Target("mlp", "MLP"), "gelu"),
    check("block", Target("block", "TransformerBlock"), "attn", "mlp"),
    check("model", Target("transformer", "Transformer"), "block"),
]
BY_ID = {c.id: c for c in GRAPH}


def result(check_id: str, status: str = "pass", message: str = "", **fields) -> CheckResult:
    return CheckResult(check_id, "model", "", status, 1, message, next_step=fields.pop("next_step", "own"), **fields)


def run(*results: CheckResult) -> dict[str, CheckResult]:
    return {r.id: r for r in with_failing_parts(list(results), GRAPH)}


def test_the_parts_a_check_uses_are_found_through_the_parts_it_uses():
    assert used_by("model", BY_ID) == {"block", "attn", "mask", "mlp", "gelu"}
    assert used_by("attn", BY_ID) == {"mask"}
    assert used_by("mask", BY_ID) == set()
    assert used_by("not a check", BY_ID) == set()


def test_a_failing_check_names_its_failing_part_first_and_is_told_to_fix_it():
    said = run(result("mask", "fail", "mask differs"), result("attn", "fail", "attn differs"))["attn"]
    assert said.message == "your Attention.apply_causal_mask fails its own check: fix mask first; attn differs"
    assert said.next_step == "fix mask first (grade mask), then grade attn again"


def test_only_the_part_where_the_failures_start_is_named():
    """The mask fails, so attention does, so the block does: the whole model names the mask, not the block."""
    results = [result("mask", "fail", "m"), result("attn", "fail", "a"), result("gelu"), result("mlp")]
    said = run(*results, result("block", "fail", "b"), result("model", "fail", "differs"))
    assert said["model"].message == "your Attention.apply_causal_mask fails its own check: fix mask first; differs"
    assert said["block"].message == "your Attention.apply_causal_mask fails its own check: fix mask first; b"


def test_two_first_failures_are_named_in_course_order():
    said = run(
        result("gelu", "fail", "g"),  # given out of course order
        result("mask", "error", "m"),
        result("attn", "fail", "a"),
        result("mlp", "fail", "p"),
        result("block", "fail", "differs"),
    )["block"]
    assert said.message == (
        "your Attention.apply_causal_mask fails its own check and your gelu_new fails its own check: "
        "fix mask and gelu first; differs"
    )
    assert said.next_step == "fix mask and gelu first (grade mask gelu), then grade block again"


def test_a_part_not_written_yet_is_said_so():
    said = run(result("gelu", "todo", "not implemented"), result("mlp", "fail", "differs"))["mlp"]
    assert said.message == "your gelu_new is not implemented yet: fix gelu first; differs"


def test_a_passing_check_with_a_failing_part_keeps_its_verdict_and_gets_a_note():
    said = run(result("gelu", "fail", "g"), result("mlp", "pass"))["mlp"]
    assert (said.status, said.message, said.next_step) == ("pass", "", "own")
    assert said.notes == ["passes, though your gelu_new fails its own check: fix gelu too"]


def test_a_named_mistake_stays_the_next_step():
    said = run(result("gelu", "fail", "g"), result("mlp", "fail", "differs", hint="the tanh is missing"))["mlp"]
    assert said.message == "your gelu_new fails its own check: fix gelu first; differs"
    assert said.next_step == "own"


def test_a_check_that_is_only_todo_says_nothing_of_its_parts():
    todo = result("mlp", "todo", "not implemented")
    assert run(result("gelu", "fail", "g"), todo)["mlp"] == todo


def test_a_part_not_graded_in_this_run_is_not_named():
    """A subset was graded: the part's verdict is not known, so nothing is said of it."""
    alone = result("attn", "fail", "differs")
    assert run(alone)["attn"] == alone


def test_checks_whose_parts_pass_are_returned_as_they_were_in_their_order_and_nothing_is_changed_in_place():
    results = [result("model", "fail", "differs"), result("block"), result("mask", "fail", "m"), result("attn")]
    before = copy.deepcopy(results)
    returned = with_failing_parts(results, GRAPH)
    assert results == before
    assert [r.id for r in returned] == ["model", "block", "mask", "attn"]
    assert returned[2] == before[2]  # the mask uses nothing
    assert returned[0].message == "your Attention.apply_causal_mask fails its own check: fix mask first; differs"
    assert returned[1].notes == ["passes, though your Attention.apply_causal_mask fails its own check: fix mask too"]


def test_an_error_at_the_checks_own_line_comes_first_and_the_part_in_a_note():
    own = {"file": "block.py", "line": 7}
    said = run(result("gelu", "fail", "g"), result("block", "error", "NameError: x (block.py:7)", **own))["block"]
    assert (said.message, said.next_step) == ("NameError: x (block.py:7)", "own")
    assert said.notes == ["your gelu_new fails its own check: fix gelu too"]
