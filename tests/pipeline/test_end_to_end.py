"""The solutions score full marks, the stubs score nothing, through the `grade` command itself."""

from __future__ import annotations

import json

import jsonschema
import pytest
from repo import REPO, SOLUTIONS, run_grade, stubs

from grader.checks import registry


def test_solutions_score_full_marks(grade):
    report = grade(SOLUTIONS)
    assert [c.id for c in report.checks] == [c.id for c in registry()]
    assert {c.id: c.status for c in report.checks} == {c.id: "pass" for c in registry()}
    assert report.score == report.max_score == sum(c.points for c in registry())


SUBSET = ("layernorm", "attention", "sampling.greedy")  # attention with its mask


def rows(report) -> list[dict]:
    """What a report says of each check, but how long it took."""
    return [{**check.to_dict(), "seconds": None, "figures": check.figures} for check in report.checks]


def test_a_subset_graded_alone_is_what_the_full_grading_says_of_it(grade):
    """The `grade` fixture reads a selection of the solutions' or the stubs' checks from one full grading, since
    which other checks run changes nothing; here the selection is really graded on its own."""
    for package, status in ((SOLUTIONS, "pass"), (stubs(), "todo")):
        alone = grade.graded_alone(package, *SUBSET)
        assert [c.id for c in alone.checks] == [
            "layernorm",
            "attention.causal_mask",
            "attention",
            "sampling.greedy",
        ]
        assert {c.status for c in alone.checks} == {status}, package
        assert rows(alone) == rows(grade(package, *SUBSET)), package


def test_transformer_reports_parameter_counts_and_argmax(grade):
    (transformer,) = grade(SOLUTIONS, "transformer").checks
    counts = (
        "embed 38,597,376, pos_embed 786,432, blocks 85,054,464, ln_final 1,536, unembed 38,647,633, total 163,087,441"
    )
    untied = "(unembed counted apart; GPT-2 ties it to embed: 124,439,808 once)"  # GPT-2's famous count
    argmax = "same next-token argmax as the random reference everywhere: yes"  # offline: not GPT-2's
    assert transformer.notes == [f"parameters: {counts} {untied}", argmax]


def test_stubs_are_all_todo_and_exit_1(reference, tmp_path):
    """`grade` as a learner first types it: beside the stubs, no package named (./exercises)."""
    result = run_grade("--reference", "random", "--json", str(tmp_path / "r.json"), cwd=stubs().parent)
    assert result.returncode == 1, result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert {c["status"] for c in report["checks"]} == {"todo"}
    assert report["score"] == 0 and report["max_score"] == sum(c.points for c in registry())
    embed = next(c for c in report["checks"] if c["id"] == "embed")
    assert embed["message"].startswith("Embed.forward is not implemented yet (embedding.py:")
    assert "start here: exercises/embedding.py, Embed.forward" in result.stdout


@pytest.mark.slow
def test_an_assignment_grades_its_part_alone_at_full_points_and_says_so(reference, tmp_path):
    """The done-when of issue 57: `grade --solutions --assignment part1` grades Part 1's checks only, at full points."""
    result = run_grade(
        "--solutions", "--assignment", "part1", "--reference", "random", "--json", str(tmp_path / "r.json")
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    jsonschema.validate(report, json.loads((REPO / "grader" / "schemas" / "report.schema.json").read_text()))
    part1 = [check for check in registry() if check.part == "model"]
    assert [c["id"] for c in report["checks"]] == [check.id for check in part1]
    assert {c["status"] for c in report["checks"]} == {"pass"}
    assert report["score"] == report["max_score"] == sum(check.points for check in part1) == 17
    assert report["assignment"] == "part1" and "GPT-2 grader, assignment part1:" in result.stdout


@pytest.fixture(scope="module")
def solutions_offline(reference, tmp_path_factory):
    """One `grade --solutions embed attention --json`, the reference left to its default (auto) with no network:
    the two tests below read it apart (the schema of its report, and the fallback's banner)."""
    path = tmp_path_factory.mktemp("offline") / "r.json"
    return run_grade("--solutions", "embed", "attention", "--json", str(path)), path


def test_json_report_matches_its_schema(solutions_offline):
    result, path = solutions_offline
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(path.read_text())
    schema = json.loads((REPO / "grader" / "schemas" / "report.schema.json").read_text())
    jsonschema.validate(report, schema)
    assert report["reference"] == "random" and report["score"] == report["max_score"] == 5
    assert [c["id"] for c in report["checks"]] == ["embed", "attention.causal_mask", "attention"]


def test_subset_by_prefix_and_unknown_check(reference):
    listed = run_grade("--list")
    assert listed.returncode == 0 and "attention.causal_mask" in listed.stdout
    unknown = run_grade("--reference", "random", "attenton")
    assert unknown.returncode == 2 and "no check matches 'attenton'" in unknown.stderr


def test_auto_reference_falls_back_loudly_when_offline(solutions_offline):
    result, _ = solutions_offline
    assert result.returncode == 0, result.stdout + result.stderr
    assert "RANDOM model" in result.stdout.replace("\n", " ")


def test_unwritable_json_path_keeps_the_terminal_report(reference, tmp_path):
    result = run_grade(
        "--reference", "random", "--solutions", "embed", "--json", str(tmp_path / "missing-dir" / "r.json")
    )
    assert "embed" in result.stdout and "PASS" in result.stdout
    assert "could not write" in result.stderr
