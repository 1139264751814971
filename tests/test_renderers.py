"""The one renderer interface: `grader.render.RENDERERS` declares every format's options, `grade`
builds its parser and shows a report through them alone, and no renderer is imported before one is
chosen. No reference, no learner process."""

from __future__ import annotations

import importlib
import io
import json
import subprocess
import sys

import pytest
from conftest import REPO

from grader.cli import chosen_renderers, parser
from grader.render import RENDERERS
from grader.results import CheckResult, Report

REPORT = Report("random", "/tmp/package", [CheckResult("embed", "model", "token embedding", "pass", 1)])


def said_by(renderer_module: str, values: dict, report: Report = REPORT) -> list[str]:
    said: list[str] = []
    (renderer,) = [r for r in RENDERERS if r.module == renderer_module]
    renderer.emitter(values, said.append)(report)
    return said


def test_each_renderer_has_the_entry_point_its_options_call_for():
    for renderer in RENDERERS:
        module = importlib.import_module(f"grader.render.{renderer.module}")
        entry = "render" if renderer.options[0].file else "emitter"
        assert callable(getattr(module, entry, None)), (renderer.module, entry)
    assert [r.module for r in RENDERERS if r.always] == ["text"]


def test_grade_takes_every_renderers_options_and_chooses_by_them(tmp_path):
    flags = [option.flag for renderer in RENDERERS for option in renderer.options]
    assert {"--quiet", "--json", "--junit", "--gradescope", "--html", "--github"} <= set(flags)
    chosen = chosen_renderers(parser().parse_args(["--github", "--junit", str(tmp_path / "r.xml")]))
    assert [r.module for r in chosen] == ["text", "junit", "github"]
    assert [r.module for r in chosen_renderers(parser().parse_args([]))] == ["text"]


def test_grade_help_imports_no_renderer():
    code = (
        "import sys, contextlib, io\n"
        "from grader.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "heavy = ('grader.render.', 'rich', 'matplotlib')\n"
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
    (github,) = [r for r in RENDERERS if r.module == "github"]
    emit = github.emitter({"github": True}, said.append)
    emit(REPORT)
    assert said == ["--github does nothing outside GitHub Actions (GITHUB_ACTIONS is not 'true')"]
    assert capsys.readouterr().out == ""


def test_github_under_actions_fences_the_log_until_it_publishes(monkeypatch, tmp_path):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stdout", log)
    summary, output = tmp_path / "summary.md", tmp_path / "output"
    for name, value in {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary, "GITHUB_OUTPUT": output}.items():
        monkeypatch.setenv(name, str(value))
    said: list[str] = []
    (github,) = [r for r in RENDERERS if r.module == "github"]
    emit = github.emitter({"github": True}, said.append)
    (stop,) = log.getvalue().splitlines()
    assert stop.startswith("::stop-commands::")
    emit(REPORT)
    token = stop.removeprefix("::stop-commands::")
    assert log.getvalue().splitlines()[1] == f"::{token}::" and said == []
    assert "1/1 points" in summary.read_text() and "result<<" in output.read_text()


@pytest.mark.parametrize("module", [r.module for r in RENDERERS if not r.always])
def test_watch_refuses_every_renderer_but_the_terminals(module, tmp_path, capsys):
    (renderer,) = [r for r in RENDERERS if r.module == module]
    option = renderer.options[0]
    argv = ["--watch", option.flag, *([str(tmp_path / "out")] if option.file else [])]
    from grader.cli import main

    assert main([*argv, "--solutions"]) == 2
    assert "--watch reports in the terminal only" in capsys.readouterr().err
