"""The terminal report a learner meets: the first (all todo) report is short and says where to start;
what their code printed appears with its check; a random reference is never called GPT-2."""

from __future__ import annotations

import io
import json
import re

import pytest
from repo import run_grade, stubs
from rich.console import Console

from grader.checks import registry
from grader.host.render import html, text
from grader.host.results import CheckResult, Report

TABLE_BOTTOM = re.compile(r"^\s*└")  # rich's heavy-headed table ends on this corner


def rendered(report: Report, **options) -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    text.print_report(report, console, **options)
    return console.file.getvalue()


def todo(check_id: str, file: str, target: str) -> CheckResult:
    return CheckResult(
        check_id, "model", "", "todo", 1, "not implemented yet", file=file, target=target, next_step="implement it"
    )


@pytest.mark.slow
def test_the_stubs_first_report_is_short_and_names_where_to_start(reference):
    result = run_grade("--reference", "random", "--exercises", str(stubs()))
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    below = lines[max(i for i, line in enumerate(lines) if TABLE_BOTTOM.match(line)) + 1 :]
    assert 0 < len(below) <= 12, below
    assert "start here: " in result.stdout and "embedding.py, Embed.forward; then `grade embed`" in result.stdout
    assert not [line for line in below if line.startswith("todo:")]  # each part's row says todo already
    assert "is not implemented yet" not in result.stdout  # one line for every todo, not a paragraph each
    checks = len(registry())
    assert result.stderr.splitlines()[-1] == (
        f"grade: 0 of {checks} checks pass; grade exits 1 until all do (make grade exits 0)"
    )
    assert len(result.stdout.splitlines()) < 20, result.stdout
    assert [line.split()[1] for line in lines if "checks)" in line] == list(dict.fromkeys(c.part for c in registry()))


def test_a_file_with_many_todo_checks_is_counted_and_the_first_is_named():
    checks = [todo("pos", "embedding.py", "PosEmbed.forward"), *(todo(f"s{i}", "sampling.py", "S.f") for i in range(3))]
    checks.insert(0, CheckResult("embed", "model", "", "pass", 1, file="embedding.py"))
    shown = rendered(Report("random", "pkg", checks))
    assert "todo: embedding.py (pos), sampling.py (3 checks)" in shown
    assert "next to write: pkg/embedding.py, PosEmbed.forward; then `grade pos`" in shown


def test_printed_lines_are_capped_labelled_and_quiet_hides_them():
    check = CheckResult("embed", "model", "", "fail", 1, "differs", printed=[f"line {i}" for i in range(14)])
    shown = rendered(Report("random", "pkg", [check])).splitlines()
    start = shown.index("embed printed:")
    assert shown[start + 1 : start + 11] == [f"  | line {i}" for i in range(10)]
    assert shown[start + 11] == "  ... 4 more lines"
    assert "line 0" not in rendered(Report("random", "pkg", [check]), show_printed=False)


def test_a_printed_line_never_wraps_onto_a_line_of_its_own():
    check = CheckResult("embed", "model", "", "pass", 1, printed=["x " * 60 + "::error::forged"])
    shown = rendered(Report("random", "pkg", [check]))
    assert not any(line.lstrip().startswith("::") for line in shown.splitlines())


def test_a_random_reference_is_named_so_in_figures_and_the_banner():
    lens = {"tokens": ["a", "b"], "gpt2": [["x", "y"]], "yours": None}
    check = CheckResult("interp.logit_lens", "interp", "", "pass", 1, figures={"logit_lens": lens})
    random_page = html.render(Report("random", "pkg", [check], fallback_reason="offline"))
    assert html.RANDOM_LENS_NOTE in random_page and "grade --download" in random_page
    assert html.RANDOM_LENS_NOTE not in html.render(Report("gpt2", "pkg", [check]))
    terminal = rendered(Report("random", "pkg", [check], fallback_reason="offline"))
    assert "grade --download" in terminal and terminal.count("RANDOM model") == 1


def test_failure_messages_name_the_random_reference(grade, tmp_path):
    from repo import write_variant

    package = write_variant(tmp_path, {"normalization.py": [("self.cfg.layer_norm_eps", "1e-2")]})
    (result,) = grade(package, "layernorm").checks
    said = " ".join(result.diagnosis())
    assert result.status == "fail" and "differs from the random reference on" in said and "GPT-2" not in said


def test_download_offline_fails_in_one_line():
    result = run_grade("--download", env={"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith(
        "grade: could not download GPT-2: "
    )


def test_a_cold_build_outside_a_terminal_prints_plain_lines(monkeypatch, capsys):
    """Each step once, no bar: a CI log gets one line per step, not a redrawn bar."""
    import argparse

    from grader.host import cli, refcache

    def building(requested, progress, seed=0, pause=None, checks=None):
        for fraction in (0.1, 0.2, 0.3):
            progress("computing the expected outputs", fraction)
        progress("saved the reference cache")
        return "entry"

    monkeypatch.setattr(refcache, "ensure_reference", building)
    errors = Console(file=io.StringIO(), force_terminal=False)
    assert cli.prepare_reference(argparse.Namespace(reference="random", seed=0), errors) == "entry"
    assert capsys.readouterr().err.splitlines() == [
        "grade: computing the expected outputs",
        "grade: saved the reference cache",
    ]
    assert errors.file.getvalue() == ""


def test_printed_lines_are_in_the_json_report(reference, tmp_path):
    from repo import write_variant

    package = write_variant(
        tmp_path,
        {
            "embedding.py": [
                (
                    "        return self.W_E[tokens]",
                    "        print('hello from embed')\n        return self.W_E[tokens]",
                )
            ]
        },
    )
    result = run_grade(
        "--reference", "random", "--exercises", str(package), "embed", "--json", str(tmp_path / "r.json")
    )
    assert result.returncode == 0, result.stderr
    (check,) = json.loads((tmp_path / "r.json").read_text())["checks"]
    assert "hello from embed" in check["printed"]


def test_start_here_names_the_method_that_is_still_to_write(grade):
    """ConcatTransformer's checks grade residual and forward, but its __init__, which chooses the widths, is a stub
    too and raises first: that is where to start."""
    (result,) = grade(stubs(), "concat.residual").checks
    assert (result.status, result.target) == ("todo", "ConcatTransformer.__init__")
    assert "start here: pkg/positions.py, ConcatTransformer.__init__; then `grade concat.residual`" in rendered(
        Report("random", "pkg", [result])
    )
