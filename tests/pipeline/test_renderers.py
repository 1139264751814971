"""The one renderer interface: `grader.host.render.RENDERERS` declares every format's options, `grade`
builds its parser and shows a report through them alone, and no renderer is imported before one is
chosen. No reference, no learner process."""

from __future__ import annotations

import importlib
import io
import json
import re
import subprocess
import sys
from dataclasses import replace
from html import unescape
from pathlib import Path

import jsonschema
import pytest
from junitparser import JUnitXml
from repo import REPO, SOLUTIONS, by_id
from rich.console import Console
from test_classroom50 import RUNNER as CLASSROOM50_RUNNER

from grader.host.cli import chosen_renderers, parser
from grader.host.platforms import RENDERERS
from grader.host.platforms.classroom50 import writer as classroom50
from grader.host.platforms.github import writer as github
from grader.host.platforms.gradescope import writer as gradescope
from grader.host.render import html, junit, text
from grader.host.render import json as json_renderer
from grader.host.results import CheckResult, Report

REPORT = Report("random", "/tmp/package", [CheckResult("embed", "model", "token embedding", "pass", 1)])


def said_by(renderer_module: str, values: dict, report: Report = REPORT) -> list[str]:
    said: list[str] = []
    (renderer,) = [r for r in RENDERERS if r.name == renderer_module]
    renderer.emitter(values, said.append)(report)
    return said


def test_each_renderer_has_the_entry_point_its_options_call_for():
    for renderer in RENDERERS:
        module = importlib.import_module(renderer.module)
        entry = "render" if renderer.options[0].value == "FILE" else "emitter"
        assert callable(getattr(module, entry, None)), (renderer.name, entry)
    assert [r.name for r in RENDERERS if r.always] == ["text"]


def test_grade_takes_every_renderers_options_and_chooses_by_them(tmp_path):
    flags = [option.flag for renderer in RENDERERS for option in renderer.options]
    assert {"--quiet", "--json", "--junit", "--gradescope", "--html", "--github"} <= set(flags)
    chosen = chosen_renderers(parser().parse_args(["--github", "--junit", str(tmp_path / "r.xml")]))
    assert [r.name for r in chosen] == ["text", "junit", "github"]
    assert [r.name for r in chosen_renderers(parser().parse_args([]))] == ["text"]


def test_grade_help_imports_no_renderer():
    code = (
        "import sys, contextlib, io\n"
        "from grader.host.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "heavy = ('grader.host.render.', 'rich', 'matplotlib')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    ran = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"


def test_a_file_renderer_writes_its_file_and_a_bad_path_costs_one_line(tmp_path):
    assert said_by("json", {"json": tmp_path / "report.json"}) == []
    assert json.loads((tmp_path / "report.json").read_text())["score"] == 1
    said = said_by("json", {"json": tmp_path / "missing" / "report.json"})
    assert len(said) == 1 and said[0].startswith(f"could not write {tmp_path / 'missing' / 'report.json'}")


def test_the_terminal_renderer_prints_the_report_and_quiet_leaves_out_what_was_printed(capsys):
    printing = Report("random", "/tmp/package", [CheckResult("embed", "model", "", "pass", 1, printed=["hi there"])])
    assert said_by("text", {"quiet": False}, printing) == []
    shown = capsys.readouterr().out
    assert "embed" in shown and "hi there" in shown
    said_by("text", {"quiet": True}, printing)
    assert "hi there" not in capsys.readouterr().out


def test_github_outside_actions_says_so_once_and_writes_nothing(monkeypatch, capsys):
    monkeypatch.setenv("GITHUB_ACTIONS", "false")
    said: list[str] = []
    (github,) = [r for r in RENDERERS if r.name == "github"]
    emit = github.emitter({"github": True}, said.append)
    emit(REPORT)
    assert said == ["--github does nothing outside GitHub Actions (GITHUB_ACTIONS is not 'true')"]
    assert capsys.readouterr().out == ""


def test_github_under_actions_fences_the_log_until_it_publishes(monkeypatch, tmp_path):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stdout", log)
    summary, output = tmp_path / "summary.md", tmp_path / "output"
    output.write_text("")
    for name, value in {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary, "GITHUB_OUTPUT": output}.items():
        monkeypatch.setenv(name, str(value))
    said: list[str] = []
    (github,) = [r for r in RENDERERS if r.name == "github"]
    emit = github.emitter({"github": True}, said.append)
    (stop,) = log.getvalue().splitlines()
    assert stop.startswith("::stop-commands::")
    emit(REPORT)
    token = stop.removeprefix("::stop-commands::")
    assert log.getvalue().splitlines()[1] == f"::{token}::" and said == []
    assert "1/1 points" in summary.read_text() and output.read_text() == ""  # its outputs are Classroom 50's


@pytest.mark.parametrize("module", [r.name for r in RENDERERS if not r.always])
def test_watch_refuses_every_renderer_but_the_terminals(module, tmp_path, capsys):
    (renderer,) = [r for r in RENDERERS if r.name == module]
    option = renderer.options[0]
    argv = ["--watch", option.flag, *([str(tmp_path / "out")] if option.value else [])]
    from grader.host.cli import main

    assert main([*argv, "--solutions"]) == 2
    assert "--watch reports in the terminal only" in capsys.readouterr().err


# --- which assignment was graded, in every format ------------------------------------------------------------------

ASSIGNED = replace(REPORT, assignment="part1")


def text_title(report: Report) -> list[str]:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    text.print_report(report, console)
    title = console.file.getvalue().partition("┏")[0]  # above the table: its title, however it wraps
    return [" ".join(title.split())]


def json_field(report: Report) -> list[str]:
    data = json.loads(json_renderer.render(report))
    jsonschema.validate(data, json.loads((REPO / "grader" / "schemas" / "report.schema.json").read_text()))
    return [data["assignment"] or ""]


def junit_names(report: Report) -> list[str]:
    suites = JUnitXml.fromstring(junit.render(report))
    return [suites.name, *({p.name: p.value for p in suite.properties()}.get("assignment", "") for suite in suites)]


def gradescope_output(report: Report) -> list[str]:
    results = json.loads(gradescope.render(report))
    return [results.get("output", ""), results.get("extra_data", {}).get("assignment", "")]


def html_titles(report: Report) -> list[str]:
    page = html.render(report)
    return [unescape(re.search(f"<{tag}>(.*?)</{tag}>", page).group(1)) for tag in ("title", "h1")]


def classroom50_places(report: Report) -> list[str]:
    result = classroom50.result(report, CLASSROOM50_RUNNER, Path("/work"))
    heading = classroom50.release_body(report).splitlines()[0]
    return [result["tests"][0]["assignment"] or "", heading, classroom50.outputs(report).splitlines()[1]]


def github_places(report: Report) -> list[str]:
    return [github.summary(report).splitlines()[0], github.annotations(report, Path("/work"))[-1]]


# Where each format says which assignment it reports on: every one of RENDERERS has its places.
ASSIGNMENT_SAID = {
    "text": text_title,
    "json": json_field,
    "junit": junit_names,
    "gradescope": gradescope_output,
    "html": html_titles,
    "classroom50": classroom50_places,
    "github": github_places,
}


def test_every_renderer_is_asked_where_it_says_the_assignment():
    assert set(ASSIGNMENT_SAID) == {renderer.name for renderer in RENDERERS}


@pytest.mark.parametrize("module", ASSIGNMENT_SAID)
def test_every_format_says_which_assignment_it_reports_on_and_none_without_one(module):
    assigned, unassigned = ASSIGNMENT_SAID[module](ASSIGNED), ASSIGNMENT_SAID[module](REPORT)
    assert assigned and all("part1" in place for place in assigned), assigned
    assert not any("part1" in place or "assignment" in place for place in unassigned), unassigned


SYNTAX = {"message": "SyntaxError: invalid syntax (attention.py, line 3)", "file": "attention.py", "line": 3}
STOPPED = Report(
    "random",
    "/tmp/package",
    [
        CheckResult("layernorm", "model", "", "pass", 2, max_abs_diff=2.5e-7),
        CheckResult("attention.causal_mask", "model", "", "error", 1, **SYNTAX),
        CheckResult("attention", "model", "", "error", 3, **SYNTAX),
        CheckResult("mlp", "model", "", "fail", 2, "differs from GPT-2 on blocks.0.prompt: output shape (9, 768)"),
    ],
)


def terminal_rows(report: Report) -> tuple[list[list[str]], list[str]]:
    """The table's rows, cell by cell, and every line shown."""
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(text.render(report))
    lines = console.file.getvalue().splitlines()
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines if line.startswith("│")], lines


def test_the_table_shows_one_row_for_the_checks_one_error_stops_and_every_other_format_each_check():
    rows, lines = terminal_rows(STOPPED)
    assert [row[:3] for row in rows] == [
        ["layernorm", "PASS", "2/2"],
        ["attention.* (2 checks)", "ERROR", "0/4"],
        ["mlp", "FAIL", "0/2"],
    ]
    assert sum("SyntaxError" in line for line in lines) == 1  # one paragraph below the table too
    assert any(line.startswith("attention.* (2 checks) (error): SyntaxError") for line in lines)
    assert "score 2/8 (1 pass, 1 fail, 2 error)" in " ".join(lines)
    written = json.loads(json_renderer.render(STOPPED))
    assert [check["id"] for check in written["checks"]] == ["layernorm", "attention.causal_mask", "attention", "mlp"]


def test_the_max_abs_diff_cell_is_empty_where_nothing_was_compared_in_every_table():
    rows, _ = terminal_rows(STOPPED)
    assert [row[4] for row in rows] == ["2.50e-07", "", ""]
    cells = re.findall(r"<tr><td>[^<]*</td><td[^>]*>[A-Z]+</td><td>[^<]*</td><td>([^<]*)</td>", html.render(STOPPED))
    assert cells == ["2.50e-07", "", "", ""]


def test_the_trainers_loss_curve_is_a_picture_in_the_page(grade):
    """The trainer's figure is its output's per-step losses (the output: held-out loss, seconds, then each step's
    loss) with the held-out loss and the bar beside them; the page draws it."""
    report = grade(SOLUTIONS, "training.trainer")
    trainer = by_id(report)["training.trainer"]
    curve = trainer.figures["loss_curve"]
    assert len(curve["losses"]) == 150 and all(loss > 0 for loss in curve["losses"])
    held_out, bar = curve["levels"]["your held-out loss"], curve["levels"]["to beat (unigram frequencies)"]
    assert held_out < bar and f"held-out loss {held_out:.3f} (to beat: {bar:.3f}" in " ".join(trainer.notes)
    assert 'alt="training loss curve"' in html.render(report)
