"""Which parts a failing composite is graded again with the grader's own of, and the note it then gives: the
dependency step on hand-built results over the real checks (no reference, no learner process). Graded end to end:
tests/course/test_stand_ins.py."""

from __future__ import annotations

import dataclasses
from typing import get_args

import pytest

from grader.checks import registry
from grader.host.dependencies import replaced, stand_in_part, stood_in_note, to_stand_in, with_failing_parts
from grader.host.results import CheckResult
from grader.shared.wire import StandInPart

pytestmark = pytest.mark.unit

GRAPH = {check.id: check for check in registry()}


def results(**statuses: str) -> dict[str, CheckResult]:
    """Every check of Part 1 and the cached model, passing unless named."""
    ids = [check_id for check_id, check in GRAPH.items() if check.part == "model"] + ["kv_cache"]
    return {i: CheckResult(i, "model", "", statuses.get(i, "pass"), 1, "differs", next_step="own") for i in ids}


def test_a_failing_composite_stands_in_for_each_failing_part_the_grader_has_its_own_of():
    judged = results(layernorm="fail", transformer="fail", kv_cache="fail")
    assert to_stand_in(judged["transformer"], judged, GRAPH) == ["layernorm"]
    assert to_stand_in(judged["kv_cache"], judged, GRAPH) == ["layernorm"]


def test_a_passing_check_or_one_without_failing_parts_is_not_graded_again():
    judged = results(layernorm="fail", transformer="fail", attention="fail")
    assert to_stand_in(judged["block"], judged, GRAPH) == []  # it passes
    assert to_stand_in(judged["layernorm"], judged, GRAPH) == []  # no part of its own fails
    assert to_stand_in(judged["attention"], judged, GRAPH) == []  # the mask passes


def test_a_part_whose_file_did_not_import_is_not_stood_in_for_again():
    """mlp.py hangs at import: the cached model already ran on the grader's MLP, so its failure is its own."""
    judged = results(gelu_new="timeout", mlp="timeout", kv_cache="fail")
    judged["kv_cache"] = dataclasses.replace(judged["kv_cache"], stood_in=["gelu_new", "mlp"])
    assert to_stand_in(judged["kv_cache"], judged, GRAPH) == []


def test_a_todo_part_is_no_failure_to_stand_in_for():
    judged = results(layernorm="todo", transformer="fail")
    assert to_stand_in(judged["transformer"], judged, GRAPH) == []


def test_the_mask_is_not_replaced_where_the_whole_attention_is():
    judged = results(**{"attention.causal_mask": "fail", "attention": "fail", "transformer": "fail"})
    parts = to_stand_in(judged["transformer"], judged, GRAPH)
    assert parts == ["attention.causal_mask", "attention"]
    assert replaced(parts, GRAPH) == ["attention"]
    assert [stand_in_part(GRAPH[part]) for part in parts] == [
        "attention.Attention.apply_causal_mask",
        "attention.Attention",
    ]


def test_the_note_names_the_grader_s_parts_and_the_checks_they_fail():
    assert (
        stood_in_note(["layernorm"], GRAPH)
        == "graded with the grader's LayerNorm in place of yours, which fails layernorm"
    )
    assert stood_in_note(["gelu_new", "layernorm"], GRAPH) == (
        "graded with the grader's gelu_new and LayerNorm in place of yours, which fail gelu_new and layernorm"
    )


def test_a_part_stood_in_for_is_not_named_again_and_one_without_a_stand_in_still_is():
    judged = results(layernorm="fail", kv_cache="fail")
    judged["sampling.greedy"] = CheckResult("sampling.greedy", "sampling", "", "fail", 1, "differs")
    judged["kv_cache"].stood_in = ["layernorm"]
    kv_cache = {r.id: r for r in with_failing_parts(list(judged.values()), among=judged)}["kv_cache"]
    assert kv_cache.message.startswith(
        "your TransformerSampler.greedy_search fails its own check: fix sampling.greedy first; "
    )
    assert "LayerNorm" not in kv_cache.message


def test_every_part_the_grader_stands_in_for_is_a_checks_target():
    targets = {stand_in_part(check) for check in GRAPH.values()}
    assert set(get_args(StandInPart)) <= targets, set(get_args(StandInPart)) - targets
