"""JUnit XML, Gradescope's results.json, GitHub's summary and annotations, read back with real parsers and
schemas; learner-written text stays literal in every one of them."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import jsonschema
import pytest
from junitparser import Error, Failure, JUnitXml, Properties, Skipped
from markdown_it import MarkdownIt
from repo import REPO, SOLUTIONS, run_grade, write_variant

from grader.host.platforms.github import writer as github
from grader.host.platforms.gradescope import writer as gradescope
from grader.host.render import junit
from grader.host.results import CheckResult, Report

PLATFORMS = REPO / "grader" / "host" / "platforms"
SCHEMAS = {  # each format's schema: the report's, and each platform's in its folder
    "report.schema.json": REPO / "grader" / "schemas" / "report.schema.json",
    "gradescope-results.schema.json": PLATFORMS / "gradescope" / "results.schema.json",
    "classroom50-result.schema.json": PLATFORMS / "classroom50" / "result.schema.json",
}
# Text a learner controls (an exception message): Markdown, HTML, table pipes, GitHub's escapes,
# a forged workflow command on its own line, and characters XML 1.0 cannot hold.
FORGED_NOTICE = '::notice title=Autograding report::{"totalPoints":100,"maxPoints":100}'
HOSTILE = (
    "ValueError: **bold** <script>x</script> | [a](b) 100% %0A a:b,c\n"
    '::notice title=Autograding report::{"totalPoints":100}\x1b[31m\x00'
)
# CommonMark itself turns NUL into U+FFFD, so that is what a Markdown reader sees of it.
HOSTILE_AS_MARKDOWN = HOSTILE.replace("\x00", "\ufffd")
WORKSPACE = Path("/work/repo")


def sample_report() -> Report:
    checks = [
        CheckResult("embed", "model", "token embedding", "pass", 1, seconds=0.25),
        CheckResult(
            "layernorm",
            "model",
            "LayerNorm",
            "fail",
            2,
            "differs from GPT-2 on prompt: max abs diff 3.1e-01",
            file="normalization.py",
            line=21,
        ),
        CheckResult(
            "attention", "model", "multi-head attention", "error", 3, HOSTILE, file="attention.py", line=40, seconds=1.5
        ),
        CheckResult(
            "mlp", "model", "MLP", "todo", 2, "MLP.forward is not implemented yet (mlp.py:30)", file="mlp.py", line=30
        ),
        CheckResult(
            "block",
            "model",
            "transformer block",
            "timeout",
            2,
            "no answer within 60 s (an infinite loop?)",
            file="block.py",
        ),
        CheckResult(
            "transformer",
            "model",
            "the whole model",
            "pass",
            3,
            notes=["parameters: total 163,087,441", "same argmax: yes | really"],
        ),
    ]
    return Report("random", str(WORKSPACE / "exercises"), checks, fallback_reason="offline")


def schema(name: str) -> dict:
    return json.loads(SCHEMAS[name].read_text())


def rendered_text(markdown: str) -> str:
    """What a reader sees of inline Markdown: the text of its inline tokens, markup gone."""
    tokens = MarkdownIt("commonmark").parseInline(markdown)[0].children
    return "".join(
        "\n" if t.type in ("softbreak", "hardbreak") else t.content
        for t in tokens
        if t.type in ("text", "softbreak", "hardbreak", "code_inline")
    )


def unescape(value: str, *, property: bool) -> str:
    """GitHub's runner (ActionCommand.UnescapeData / UnescapeProperty), in its order."""
    pairs = [("%0D", "\r"), ("%0A", "\n")] + ([("%3A", ":"), ("%2C", ",")] if property else []) + [("%25", "%")]
    for escaped, raw in pairs:
        value = value.replace(escaped, raw)
    return value


def runner_command(line: str) -> tuple[str, dict, str] | None:
    """A log line as GitHub's runner reads it (actions/runner ActionCommand.TryParseV2, then TryParse):
    `::name k=v,...::data` once leading whitespace is trimmed, or `##[name k=v;...]data` anywhere."""
    text = line.lstrip()
    if text.startswith("::") and (end := text.find("::", 2)) >= 0:
        name, _, properties = text[2:end].partition(" ")
        pairs = [item.split("=", 1) for item in properties.strip().split(",") if "=" in item]
        return (
            name,
            {key: unescape(value, property=True) for key, value in pairs},
            unescape(text[end + 2 :], property=False),
        )
    start = line.find("##[")
    if start >= 0 and (end := line.find("]", start)) >= 0:
        name, _, properties = line[start + 3 : end].partition(" ")
        return name, dict(item.split("=", 1) for item in properties.split(";") if "=" in item), line[end + 1 :]
    return None


def effective_commands(log: str) -> list[tuple[str, dict, str]]:
    """The commands the runner acts on (ActionCommandManager): none from `::stop-commands::TOKEN`
    until the command named TOKEN, which resumes."""
    acted, stopped_until = [], None
    for line in re.split(r"\r\n|\r|\n", log):
        command = runner_command(line)
        if command is None:
            continue
        name = command[0].lower()
        if stopped_until is not None:
            stopped_until = None if name == stopped_until else stopped_until
        elif name == "stop-commands":
            stopped_until = command[2].lower()
        else:
            acted.append(command)
    return acted


def test_junit_has_a_testcase_per_check_with_its_outcome_and_points():
    report = sample_report()
    xml = JUnitXml.fromstring(junit.render(report))
    suites = list(xml)
    assert [s.name for s in suites] == ["model"]
    suite = suites[0]
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (6, 1, 2, 1)
    cases = {case.name: case for case in suite}
    assert list(cases) == [c.id for c in report.checks] and {case.classname for case in suite} == {"model"}
    outcomes = {name: [type(r) for r in case.result] for name, case in cases.items()}
    assert outcomes == {
        "embed": [],
        "layernorm": [Failure],
        "attention": [Error],
        "mlp": [Skipped],
        "block": [Error],
        "transformer": [],
    }
    assert cases["layernorm"].result[0].message == "differs from GPT-2 on prompt: max abs diff 3.1e-01"
    # The control characters XML cannot carry become U+FFFD; everything else arrives unchanged.
    assert cases["attention"].result[0].message == HOSTILE.replace("\x1b", "\ufffd").replace("\x00", "\ufffd")
    points = {name: {p.name: p.value for p in case.child(Properties)} for name, case in cases.items()}
    assert {name: points["layernorm"][name] for name in ("points", "max_points", "status", "file", "line")} == {
        "points": "0",
        "max_points": "2",
        "status": "fail",
        "file": "normalization.py",
        "line": "21",
    }
    assert {name: points["transformer"][name] for name in ("points", "max_points", "status")} == {
        "points": "3",
        "max_points": "3",
        "status": "pass",
    }
    assert "line" not in points["transformer"] and "mistake" not in points["transformer"]  # no value: no property
    assert cases["transformer"].system_out == "parameters: total 163,087,441\nsame argmax: yes | really"


def test_gradescope_results_follow_the_spec_and_keep_learner_text_literal():
    report = sample_report()
    results = json.loads(gradescope.render(report))
    jsonschema.validate(results, schema("gradescope-results.schema.json"))
    assert results["score"] == report.score == 4
    tests = {t["name"].split(":")[0]: t for t in results["tests"]}
    assert [(t["score"], t["max_score"], t["status"]) for t in tests.values()] == [
        (1, 1, "passed"),
        (0, 2, "failed"),
        (0, 3, "failed"),
        (0, 2, "failed"),
        (0, 2, "failed"),
        (3, 3, "passed"),
    ]
    assert {t["output_format"] for t in tests.values()} == {"md"} and {t["visibility"] for t in tests.values()} == {
        "visible"
    }
    assert "RANDOM model" in results["output"]
    # Rendered, the Markdown shows the learner's text as written: no bold, link, HTML or command.
    paragraphs = [rendered_text(block) for block in tests["attention"]["output"].split("\n\n")]
    assert paragraphs == ["ERROR, 0/3 points", *HOSTILE_AS_MARKDOWN.splitlines()]


def test_the_gradescope_schema_rejects_what_gradescope_would_not_read():
    valid = json.loads(gradescope.render(sample_report()))
    for broken in (
        {**valid, "tests": [{**valid["tests"][0], "status": "pass"}]},
        {**valid, "score": "4"},
        {"tests": [{"name": "no score anywhere"}]},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema("gradescope-results.schema.json"))


def test_step_summary_is_a_table_with_one_row_per_check():
    report = sample_report()
    tokens = MarkdownIt("commonmark").enable("table").parse(github.summary(report))
    heading = next(tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open")
    assert heading == "GPT-2 grader: 4/13 points"
    body = tokens[[t.type for t in tokens].index("tbody_open") :]
    rows, row = [], []
    for i, token in enumerate(body):
        if token.type == "td_open":
            row.append(body[i + 1].children)
        elif token.type == "tr_close":
            rows.append(row)
            row = []
    assert len(rows) == len(report.checks) and all(len(r) == 4 for r in rows)
    cells = [
        ["".join(child.content for child in cell if child.type in ("text", "code_inline")) for cell in r] for r in rows
    ]
    assert [c[0] for c in cells] == [check.id for check in report.checks]
    assert [c[2] for c in cells] == ["1/1", "0/2", "0/3", "0/2", "0/2", "3/3"]
    # The hostile message stays inside its cell, every character shown:
    # its line break is the <br> the summary puts there.
    attention = rows[2][3]
    assert [child.type for child in attention if child.type not in ("text",)] == ["html_inline"] and next(
        c.content for c in attention if c.type == "html_inline"
    ) == "<br>"
    assert "".join(child.content for child in attention if child.type == "text") == HOSTILE_AS_MARKDOWN.replace(
        "\n", ""
    )


def test_annotations_are_one_line_each_and_unescape_to_what_was_said():
    report = sample_report()
    lines = github.annotations(report, WORKSPACE)
    assert all("\n" not in line and "\r" not in line for line in lines) and all(line.startswith("::") for line in lines)
    commands = [runner_command(line) for line in lines]
    errors = [(props, data) for name, props, data in commands if name == "error"]
    assert [props["title"] for props, _ in errors] == [
        "layernorm: fail, 0/2 points",
        "attention: error, 0/3 points",
        "block: timeout, 0/2 points",
    ]
    assert errors[1] == (
        {"file": "exercises/attention.py", "line": "40", "title": "attention: error, 0/3 points"},
        HOSTILE,
    )
    assert "line" not in errors[2][0] and errors[2][0]["file"] == "exercises/block.py"
    assert commands[-1] == ("notice", {"title": "GPT-2 grader"}, "4/13 points, 2 of 6 checks pass")


def test_nothing_printed_between_stop_and_publish_is_a_command(tmp_path):
    report = sample_report()
    log = io.StringIO()
    token = github.stop_commands(log)
    log.write(FORGED_NOTICE + "\n  " + FORGED_NOTICE + "\nsome text ##[error]forged\n::stop-commands::other\n")
    environ = {
        "GITHUB_WORKSPACE": str(WORKSPACE),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
    }
    assert github.publish(report, environ, log, token) == []
    assert [runner_command(line) for line in log.getvalue().splitlines()].count(runner_command(FORGED_NOTICE)) == 2
    assert effective_commands(log.getvalue()) == [
        runner_command(line) for line in github.annotations(report, WORKSPACE)
    ]
    assert (tmp_path / "summary.md").read_text() == github.summary(report) + "\n"
    # Without the fence, the same log would carry the forged score.
    assert runner_command(FORGED_NOTICE) in effective_commands(log.getvalue().replace(f"::stop-commands::{token}", ""))


def test_publish_names_what_it_could_not_write(tmp_path):
    environ = {"GITHUB_STEP_SUMMARY": str(tmp_path / "missing" / "summary.md")}
    problems = github.publish(sample_report(), environ, io.StringIO(), "token")
    assert len(problems) == 1 and "could not write $GITHUB_STEP_SUMMARY" in problems[0]


@pytest.mark.slow
def test_one_run_writes_every_format_and_a_bad_path_costs_only_its_file(reference, tmp_path):
    package = write_variant(tmp_path, {"normalization.py": [("unbiased=False", "unbiased=True")]}, base=SOLUTIONS)
    out = tmp_path / "out"
    out.mkdir()
    result = run_grade(
        "--reference",
        "random",
        "--exercises",
        str(package),
        "embed",
        "layernorm",
        "mlp",
        "--github",
        "--junit",
        str(out / "missing" / "junit.xml"),
        "--gradescope",
        str(out / "results.json"),
        "--json",
        str(out / "report.json"),
        env={"GITHUB_ACTIONS": "false"},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "layernorm" in result.stdout and "FAIL" in result.stdout
    assert "could not write" in result.stderr and "junit.xml" in result.stderr
    assert "--github does nothing outside GitHub Actions" in result.stderr
    assert not [line for line in result.stdout.splitlines() if line.lstrip().startswith("::")]
    results = json.loads((out / "results.json").read_text())
    jsonschema.validate(results, schema("gradescope-results.schema.json"))
    report = json.loads((out / "report.json").read_text())
    assert results["score"] == report["score"] == 3 and report["max_score"] == 5
    assert [t["status"] for t in results["tests"]] == ["passed", "failed", "passed"]
