"""The check's record: one definition (`CheckRecord`), and every format's per-check fields held to it, each read back
with its own parser: `grade --json` (and batch's result, which holds it), JUnit's properties, Gradescope's extra_data,
Classroom 50's tests, GitHub's summary table."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import jsonschema
from junitparser import JUnitXml, Properties
from markdown_it import MarkdownIt
from test_render_formats import schema

from grader.host.platforms.classroom50 import writer as classroom50
from grader.host.platforms.github import writer as github
from grader.host.platforms.gradescope import writer as gradescope
from grader.host.render import json as json_format
from grader.host.render import junit
from grader.host.results import RECORD_FIELDS, RECORD_VERSION, CheckResult, Report
from grader.host.tools.batch import Submission

WORKSPACE = Path("/work/repo")
RUNNER = {
    "CLASSROOM": "gpt2-course",
    "ASSIGNMENT": "part1",
    "OWNER": "ada",
    "SUBMISSION_TAG": "submit/1",
    "COMMIT_URL": "https://github.com/c/ada/commit/abc",
    "RELEASE_URL": "https://github.com/c/ada/releases/submit-1",
}


def report() -> Report:
    checks = [
        CheckResult("embed", "model", "token embedding", "pass", 1),
        CheckResult("layernorm", "model", "LayerNorm", "fail", 2, "differs", file="normalization.py", line=21),
        CheckResult(
            "attention", "model", "attention", "error", 3, "SyntaxError: invalid syntax", file="attention.py", line=12
        ),
        CheckResult("mlp", "model", "MLP", "timeout", 2, "no answer within 60 s", file="mlp.py"),
    ]
    checks[1].hint = "the variance divides by N-1"
    return Report("random", str(WORKSPACE / "exercises"), checks, assignment="part1")


def test_the_record_is_made_once_from_a_result_with_its_error_in_a_line_naming_the_place():
    records = {record.id: record for record in report().records()}
    assert tuple(asdict(records["layernorm"])) == RECORD_FIELDS
    layernorm = records["layernorm"]
    assert (layernorm.title, layernorm.points, layernorm.max_points, layernorm.mistake, layernorm.error) == (
        "LayerNorm",
        0,
        2,
        "the variance divides by N-1",
        None,
    )
    assert records["attention"].error == "SyntaxError: invalid syntax at attention.py:12"
    assert records["mlp"].error == "no answer within 60 s"
    assert records["embed"].points == 1 and records["embed"].assignment == "part1"


def test_grade_json_checks_are_the_records_and_read_back_into_the_same_results():
    graded = report()
    written = json.loads(json_format.render(graded))
    jsonschema.validate(written, schema("report.schema.json"))
    assert written["record_version"] == RECORD_VERSION
    for check, record in zip(written["checks"], graded.records(), strict=True):
        assert {name: check[name] for name in RECORD_FIELDS} == asdict(record)
    assert not {"score", "max_score", "hint", "summary", "check", "test-name"} & set(written["checks"][0])
    read = Report.from_dict(written)
    assert [asdict(check) for check in read.checks] == [asdict(check) for check in graded.checks]


def test_batch_writes_each_learners_records_as_grade_json_does():
    graded = json.loads(json_format.render(report()))
    result = Submission("ada", graded).to_dict(8)
    assert all(set(RECORD_FIELDS) <= set(check) for check in result["report"]["checks"])
    assert Submission("ada", graded).points == {"embed": 1, "layernorm": 0, "attention": 0, "mlp": 0}


def test_gradescopes_extra_data_is_each_checks_record():
    graded = report()
    results = json.loads(gradescope.render(graded))
    jsonschema.validate(results, schema("gradescope-results.schema.json"))
    assert results["extra_data"]["record_version"] == RECORD_VERSION
    assert [test["extra_data"] for test in results["tests"]] == [asdict(record) for record in graded.records()]


def test_junits_testcase_properties_are_the_records_fields_that_have_a_value():
    graded = report()
    cases = [case for suite in JUnitXml.fromstring(junit.render(graded)) for case in suite]
    for case, record in zip(cases, graded.records(), strict=True):
        properties = {p.name: p.value for p in case.child(Properties)}
        assert properties == {name: str(value) for name, value in asdict(record).items() if value is not None}


def test_classroom50s_tests_are_the_fields_its_runner_requires_then_the_record():
    graded = report()
    result = classroom50.result(graded, RUNNER, WORKSPACE)
    jsonschema.validate(result, schema("classroom50-result.schema.json"))
    required = schema("classroom50-result.schema.json")["properties"]["tests"]["items"]["required"]
    for test, record in zip(result["tests"], graded.records(), strict=True):
        assert set(test) == {*required, *RECORD_FIELDS, "record_version"}
        kept = {name: test[name] for name in RECORD_FIELDS if name != "file"}
        assert kept == {name: value for name, value in asdict(record).items() if name != "file"}
        assert (test["test-name"], test["score"], test["max-score"]) == (record.id, record.points, record.max_points)
    assert result["tests"][1]["file"] == "exercises/normalization.py"  # from the repository's root, as its links


def test_githubs_summary_columns_are_record_fields():
    tokens = MarkdownIt("commonmark").enable("table").parse(github.summary(report()))
    headers = [tokens[i + 1].content for i, token in enumerate(tokens) if token.type == "th_open"]
    assert headers and set(headers) <= set(RECORD_FIELDS)


def test_the_release_notes_show_the_graders_code_spans_as_code():
    graded = report()
    graded.fallback_reason = "no network; `grade --download` fetches GPT-2"
    tokens = MarkdownIt("commonmark").parse(classroom50.release_body(graded))
    inline = [child for token in tokens if token.children for child in token.children]
    assert "grade --download" in [child.content for child in inline if child.type == "code_inline"]
    assert not any("`" in child.content for child in inline if child.type == "text")
