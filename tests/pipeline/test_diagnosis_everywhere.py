"""One diagnosis, everywhere: the message, where the computation leaves GPT-2's ("where: ...") and
the next step, which names the likely mistake ("next: most likely: ..."), reach every output format,
each read back with its own parser. And the table's max abs diff is the number the message gives.

The mistakes are test_mistakes.py's, test_sampling.py's, test_training.py's and test_interp.py's (the
sampling, training and interp checks name theirs by the same mechanism as the model's), each package
graded once for the module; every format is rendered from those Reports directly, as the CLI would.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from html.parser import HTMLParser

import jsonschema
import pytest
from junitparser import JUnitXml
from markdown_it import MarkdownIt
from repo import by_id, write_variant
from rich.console import Console
from test_classroom50 import RUNNER as CLASSROOM50_RUNNER
from test_interp import MISTAKES as INTERP_MISTAKES
from test_mistakes import MISTAKES
from test_render_formats import WORKSPACE, runner_command, schema
from test_sampling import MISTAKES as SAMPLING_MISTAKES
from test_training import MISTAKES as TRAINING_MISTAKES

from grader.host.platforms.classroom50 import writer as classroom50
from grader.host.platforms.github import writer as github
from grader.host.platforms.gradescope import writer as gradescope
from grader.host.render import html, junit, text
from grader.host.render import json as json_render
from grader.host.results import CheckResult, Report

# name: (check id, edits, the fragment its hint must contain); only the mistakes that have a hint.
HINTED = {name: (check, edits, hint) for name, (check, edits, _, hint) in MISTAKES.items() if hint}
HINTED |= {name: mistake for name, mistake in SAMPLING_MISTAKES.items() if mistake[0] != "kv_cache"}  # kv: no hint
HINTED |= {name: (check, {"training.py": edits}, hint) for name, (check, edits, hint) in TRAINING_MISTAKES.items()}
INTERP_EDITS = {"interp.py": [edit for edit, _ in INTERP_MISTAKES.values()]}
NUMBER = re.compile(r"max abs diff ([-+.\de]+|inf|nan)")


@pytest.fixture(scope="module")
def graded(grade, tmp_path_factory) -> dict[str, tuple[CheckResult, str]]:
    """name: (the check's result, its hint fragment). A grading costs seconds, so each package is graded once."""
    results = {}
    for name, (check_id, edits, fragment) in HINTED.items():
        report = grade(write_variant(tmp_path_factory.mktemp("variant"), edits), check_id)
        results[name] = by_id(report)[check_id], fragment
    # Each interp mistake touches one function only, so one package carries them all.
    interp = by_id(grade(write_variant(tmp_path_factory.mktemp("interp"), INTERP_EDITS), "interp"))
    results |= {check_id: (interp[check_id], fragment) for check_id, (_, fragment) in INTERP_MISTAKES.items()}
    return results


VARIANTS = [*HINTED, *INTERP_MISTAKES]


def alone(check: CheckResult) -> Report:
    """A report of this check only, so whatever a format shows belongs to it. Figures are dropped:
    they cost seconds to draw and test_html_report tests them."""
    return Report("random", str(WORKSPACE / "exercises"), [dataclasses.replace(check, figures={})], seed=0)


def expected_lines(check: CheckResult, fragment: str) -> list[str]:
    """The diagnosis as the learner should read it, built from the grading's own fields, in order."""
    assert check.status == "fail" and check.hint and fragment in check.hint, (check.status, check.message, check.hint)
    placed = [f"where: {check.file}:{check.line}"] if check.line else []  # found from the output alone: its line
    where = [f"where: {check.divergence}"] if check.divergence else placed
    return [check.message.splitlines()[0], *where, f"next: most likely: {check.hint}"]


def assert_in_order(shown: str, lines: list[str]) -> None:
    """Every line appears in `shown`, each after the one before."""
    position = 0
    for line in lines:
        found = shown.find(line, position)
        assert found >= 0, f"{line!r} is not in (after position {position}):\n{shown}"
        position = found + len(line)


# --- each format, read back as its reader reads it ------------------------------------------------


def inline_text(token) -> str:
    """What a reader sees of one inline Markdown token: its text, a <br> or soft break as a new line."""
    pieces = []
    for child in token.children:
        if child.type in ("text", "code_inline"):
            pieces.append(child.content)
        elif child.type in ("softbreak", "hardbreak") or (child.type == "html_inline" and child.content == "<br>"):
            pieces.append("\n")
    return "".join(pieces)


def markdown_text(markdown: str) -> str:
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    return "\n".join(inline_text(token) for token in tokens if token.type == "inline")


def shown_as_text(report: Report) -> str:
    console = Console(file=io.StringIO(), width=10_000, color_system=None)
    text.print_report(report, console)
    return console.file.getvalue()


def shown_as_junit(report: Report) -> str:
    (case,) = [case for suite in JUnitXml.fromstring(junit.render(report)) for case in suite]
    (failure,) = case.result
    return failure.text


def shown_in_summary(report: Report) -> str:
    return markdown_text(github.summary(report))


def shown_in_annotation(report: Report) -> str:
    lines = github.annotations(report, WORKSPACE)
    assert all("\n" not in line and "\r" not in line for line in lines)
    (error,) = [data for name, _, data in map(runner_command, lines) if name == "error"]
    return error


def shown_in_classroom50(report: Report) -> str:
    result = classroom50.result(report, CLASSROOM50_RUNNER, WORKSPACE)
    jsonschema.validate(result, schema("classroom50-result.schema.json"))
    # result.json holds the check's record (its message, mistake, file and line); the release notes say it all.
    assert result["tests"][0]["message"] == report.checks[0].message
    return markdown_text(classroom50.release_body(report))


def shown_in_classroom50_release(report: Report) -> str:
    return markdown_text(classroom50.release_body(report))


def shown_in_gradescope(report: Report) -> str:
    results = json.loads(gradescope.render(report))
    jsonschema.validate(results, schema("gradescope-results.schema.json"))
    return markdown_text(results["tests"][0]["output"])


class CellText(HTMLParser):
    """The text of every <td> of a page, in order, with <br> as a new line."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.cells: list[str] = []
        self.inside = False

    def handle_starttag(self, tag, attrs):
        if tag == "td":
            self.cells.append("")
            self.inside = True
        elif tag == "br" and self.inside:
            self.cells[-1] += "\n"

    def handle_endtag(self, tag):
        self.inside = self.inside and tag != "td"

    def handle_data(self, data):
        if self.inside:
            self.cells[-1] += data


def html_cells(report: Report) -> list[str]:
    parser = CellText()
    parser.feed(html.render(report))
    return parser.cells


def shown_in_html(report: Report) -> str:
    return html_cells(report)[4]  # check, status, points, max abs diff, message


FORMATS = {
    "text": shown_as_text,
    "junit": shown_as_junit,
    "github summary": shown_in_summary,
    "github annotation": shown_in_annotation,
    "classroom50": shown_in_classroom50,
    "classroom50 release notes": shown_in_classroom50_release,
    "gradescope": shown_in_gradescope,
    "html": shown_in_html,
}


# --- the named mistake in every format ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("form", FORMATS)
def test_the_named_mistake_reaches_every_format(graded, variant, form):
    check, fragment = graded[variant]
    assert_in_order(FORMATS[form](alone(check)), expected_lines(check, fragment))


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_named_mistake_is_in_the_json(graded, variant):
    check, fragment = graded[variant]
    data = json.loads(json_render.render(alone(check)))
    jsonschema.validate(data, schema("report.schema.json"))
    (written,) = data["checks"]
    assert fragment in written["mistake"] and written["next_step"] == f"most likely: {written['mistake']}"
    assert written["divergence"] == check.divergence and written["message"] == check.message


# --- a hand-built diagnosis: every line, in order, literal -----------------------------------------

# A divergence names the learner's own tensors, so it may hold Markdown, HTML or a table pipe.
HAND_BUILT = CheckResult(
    "attention",
    "model",
    "multi-head attention",
    "fail",
    3,
    "differs from GPT-2 on blocks.0.prompt: max abs diff 0.5",
    file="attention.py",
    line=12,
    hint="the scores are not scaled: divide q.k by sqrt(d_head)",
    divergence="q, k, v match GPT-2; **scores** | <b>x</b> [a](b) is the first step that does not",
    next_step="most likely: the scores are not scaled: divide q.k by sqrt(d_head)",
)
HAND_BUILT_LINES = [
    "differs from GPT-2 on blocks.0.prompt: max abs diff 0.5",
    "where: q, k, v match GPT-2; **scores** | <b>x</b> [a](b) is the first step that does not",
    "next: most likely: the scores are not scaled: divide q.k by sqrt(d_head)",
]


@pytest.mark.parametrize("form", FORMATS)
def test_every_format_shows_message_where_and_next_in_order(form):
    assert_in_order(FORMATS[form](alone(HAND_BUILT)), HAND_BUILT_LINES)


@pytest.mark.parametrize("form", ["junit", "github annotation"])
def test_plain_text_formats_give_the_diagnosis_one_line_each(form):
    """Where a reader shows text as it is, the three lines are exactly the lines shown."""
    assert FORMATS[form](alone(HAND_BUILT)).splitlines() == HAND_BUILT_LINES


def test_a_hint_without_a_next_step_is_still_named():
    """A report read back from an older JSON may carry the hint alone."""
    check = CheckResult("gelu_new", "model", "gelu_new", "fail", 1, "differs", hint="ReLU was used for gelu_new")
    assert check.diagnosis() == ["differs", "next: most likely: ReLU was used for gelu_new"]


# A named mistake found from the output alone (no step recorded): the learner's line it is placed at is its where.
PLACED_ONLY = CheckResult(
    "training.train_step",
    "training",
    "one SGD step",
    "fail",
    2,
    "differs from the grader's own computation on step 2",
    file="training.py",
    line=41,
    hint="zero_grad is missing: the gradients of every step accumulate",
    target="train_step",
)


@pytest.mark.parametrize("form", FORMATS)
def test_every_format_shows_where_a_named_mistake_without_steps_is_placed(form):
    assert_in_order(FORMATS[form](alone(PLACED_ONLY)), ["differs from", "where: training.py:41 (train_step)", "next:"])


def test_a_place_is_no_where_for_a_pass_or_an_unnamed_failure():
    unnamed = dataclasses.replace(PLACED_ONLY, hint=None)
    assert [line for line in unnamed.diagnosis() if line.startswith("where:")] == []
    assert dataclasses.replace(PLACED_ONLY, status="pass").where() == ""


def test_a_passing_check_says_nothing_but_its_notes():
    check = CheckResult("transformer", "model", "the whole model", "pass", 3, notes=["parameters: total 163,087,441"])
    assert check.diagnosis() == []
    assert shown_in_html(alone(check)) == "parameters: total 163,087,441"


# --- one number: the table's max abs diff is the message's ----------------------------------------


def table_diff(report: Report) -> str:
    """The max abs diff cell of the terminal table's only row."""
    (row,) = [line for line in shown_as_text(report).splitlines() if line.startswith(f"│ {report.checks[0].id} ")]
    return row.split("│")[5].strip()


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_table_gives_the_number_the_message_gives(graded, variant):
    check, _ = graded[variant]
    said = NUMBER.search(check.message)
    if said is None:
        pytest.skip(f"the message gives no max abs diff: {check.message}")  # non-finite values, a mask, a count
    # The message writes the case's number to 3 digits, each table as d.dde+xx: from one number, both.
    assert f"{check.max_abs_diff:.3g}" == said.group(1), (check.max_abs_diff, check.message)
    assert table_diff(alone(check)) == html_cells(alone(check))[3] == f"{check.max_abs_diff:.2e}"


@pytest.mark.slow
def test_a_check_whose_worst_case_is_not_its_failing_one_shows_the_failing_one(graded):
    """Unscaled scores fail the prompt case first but differ more on a later case (the README's
    example: the table said 1.37e-01 while the message said 0.123), so this test can tell the two apart."""
    check, _ = graded["no 1/sqrt(d_head) scaling"]
    said = float(NUMBER.search(check.message).group(1))
    assert float(table_diff(alone(check))) == pytest.approx(said, rel=1e-2)  # 3 digits against 2 decimals
