"""`python -m grader.host.tools.class_report` on a class that batch graded: two correct learners, two with the same
LayerNorm mistake, one whose attention scores are not scaled and one who has not started. Its CSV, Markdown and HTML
(opened in headless Chromium with no network) count each check's passes and each named mistake with its learners, in
the grader's own words as the results hold them. A page of every check's heatmap fits Chromium's 1,280 px window."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from html import escape

import pytest
from repo import REPO, stubs, write_variant
from test_batch import run_batch, write_submission
from test_html_report import CHROMIUM, in_chromium

from grader.checks import registry, select
from grader.host.render.markdown import literal
from grader.host.tools.classview.page import render
from grader.host.tools.classview.reader import Learner
from grader.host.tools.classview.tally import tally

# attention: its causal mask too; transformer composes layernorm and attention, and is graded with the grader's own of
# a part that fails its own check: each failure is counted once, at its cause (issue 57).
CHECKS = [check.id for check in select(["embed", "layernorm", "attention", "transformer"])]
POINTS = {check.id: check.points for check in select(CHECKS)}
PAGES = {check.id: f"docs/course/{check.page}" for check in select(CHECKS)}
LAYERNORM = {"normalization.py": [("unbiased=False", "unbiased=True")]}
UNSCALED = {"attention.py": [("attn_scores / self.cfg.d_head**0.5", "attn_scores")]}
# learner -> (edits to the solutions, the checks that fail); `fin` has not started: the stubs, every check todo
CLASS = {
    "ada": ({}, ()),
    "ben": ({}, ()),
    "cam": (LAYERNORM, ("layernorm",)),
    "dot": (LAYERNORM, ("layernorm",)),
    "eli": (UNSCALED, ("attention",)),
}
LEARNERS = len(CLASS) + 1
PASSES = {check: sum(check not in fails for _, fails in CLASS.values()) for check in CHECKS}
SCORES = [sum(POINTS[c] for c in CHECKS if c not in fails) for _, fails in CLASS.values()] + [0]


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory, reference):
    """The class graded by batch on CHECKS, then its class report in every format; the mistakes as the results
    word them."""
    root = tmp_path_factory.mktemp("class")
    submissions = root / "submissions"
    submissions.mkdir()
    for name, (edits, _) in CLASS.items():
        write_submission(submissions, name, edits)
    (submissions / "fin").mkdir()
    write_variant(submissions / "fin", {}, base=stubs()).rename(submissions / "fin" / "exercises")
    batch = run_batch(
        str(submissions), *CHECKS, "--csv", str(root / "grades.csv"), "--reference", "random", "--jobs", "2"
    )
    assert batch.returncode == 0, batch.stderr[-3000:]
    out = {"csv": root / "class.csv", "html": root / "class.html", "markdown": root / "class.md"}
    options = [part for kind, path in out.items() for part in (f"--{kind}", str(path))]
    report = subprocess.run(
        [sys.executable, "-m", "grader.host.tools.class_report", str(root / "grades-results"), *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    assert report.stderr.startswith(f"class-report: {LEARNERS} learners graded;"), report.stderr  # nothing skipped

    def hint(learner: str, check: str) -> str:
        result = json.loads((root / "grades-results" / f"{learner}.json").read_text())
        return next(c["mistake"] for c in result["report"]["checks"] if c["id"] == check)

    unbiased, unscaled = hint("cam", "layernorm"), hint("eli", "attention")
    assert unbiased and unbiased == hint("dot", "layernorm") and unscaled  # the same mistake, named each time
    return {**out, "mistakes": [("layernorm", unbiased, ("cam", "dot")), ("attention", unscaled, ("eli",))]}


def test_the_csv_counts_each_checks_passes_and_each_named_mistake(graded_class):
    with open(graded_class["csv"], newline="") as handle:
        rows = list(csv.DictReader(handle))
    checks = [row for row in rows if row["kind"] == "check"]
    assert [row["check"] for row in checks] == CHECKS
    assert {row["check"]: int(row["pass"]) for row in checks} == PASSES
    assert {(row["todo"], row["graded"]) for row in checks} == {("1", str(LEARNERS))}
    mistakes = [
        (row["check"], row["mistake"], row["learners"], row["names"]) for row in rows if row["kind"] == "mistake"
    ]
    assert mistakes == [(check, words, str(len(who)), "; ".join(who)) for check, words, who in graded_class["mistakes"]]


def test_the_markdown_summary_says_the_learners_the_median_the_lowest_pass_rates_and_the_mistakes(graded_class):
    summary = graded_class["markdown"].read_text()
    assert f"{LEARNERS} learners graded; median score {statistics.median(SCORES):g} of {max(SCORES)}." in summary
    rate = PASSES["layernorm"] / LEARNERS
    assert f"| layernorm | {PASSES['layernorm']} of {LEARNERS} | {rate:.0%} |" in summary
    for check, words, who in graded_class["mistakes"]:
        assert f"| {literal(check)} | {literal(words)} | {len(who)} | {literal('; '.join(who))} |" in summary


def test_the_page_names_each_mistake_with_its_course_page(graded_class):
    page = graded_class["html"].read_text()
    for check, words, who in graded_class["mistakes"]:
        cells = f'<td class="count">{len(who)}</td><td>{"; ".join(who)}</td><td><code>{PAGES[check]}</code></td>'
        assert f"<td>{escape(words)}</td>{cells}" in page


def read_page(path, tmp_path) -> dict:
    """Console errors, requests that left the page, the text of each table's cells, and whether the page is wider
    than its window (Playwright's: 1,280 px), in headless Chromium."""
    cells = "rows => rows.slice(1).map(r => [...r.cells].map(c => c.textContent))"
    tables = ("checks", "mistakes", "heatmap", "stops", "stopped")

    def read(page) -> dict:
        assert page.evaluate("window.innerWidth") == 1280
        widths = {
            "overflow": page.evaluate("document.documentElement.scrollWidth > window.innerWidth"),
            "heatmap_width": page.evaluate("document.querySelector('table.heatmap').getBoundingClientRect().width"),
        }
        return widths | {table: page.eval_on_selector_all(f"table.{table} tr", cells) for table in tables}

    return in_chromium(path, tmp_path, read)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install -y chromium)")
def test_the_page_loads_offline_and_its_tables_count_the_class(graded_class, tmp_path):
    seen = read_page(graded_class["html"], tmp_path)
    assert seen["errors"] == [] and seen["requests"] == []
    assert {row[0]: int(row[2]) for row in seen["checks"]} == PASSES  # check, bar, pass, ...
    seen_mistakes = [(check, words, int(count), who) for check, words, count, who, _ in seen["mistakes"]]
    assert seen_mistakes == [(check, words, len(who), "; ".join(who)) for check, words, who in graded_class["mistakes"]]
    assert len(seen["heatmap"]) == LEARNERS and seen["heatmap"][-1][2:] == ["todo"] * len(CHECKS)  # fin: the lowest
    assert seen["stops"] == [[CHECKS[0], "1"]]  # fin stops at the first check


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install -y chromium)")
def test_the_heatmap_of_every_check_scrolls_in_its_own_box_and_the_page_fits_1280_px(tmp_path):
    """52 checks are wider than the window: the heatmap's box scrolls, the page does not."""
    checks = [check.id for check in registry()]
    statuses = ("pass", "fail", "todo", "error", "timeout")
    learners = [
        Learner(
            f"learner-with-a-long-name-{n}", {c: statuses[(n + i) % 5] for i, c in enumerate(checks)}, {}, n, 52, ""
        )
        for n in range(9)
    ]
    path = tmp_path / "class.html"
    path.write_text(render(tally(learners)))
    seen = read_page(path, tmp_path)
    assert len(seen["heatmap"]) == 9 and len(seen["heatmap"][0]) == 2 + len(checks) == 54
    assert seen["heatmap_width"] > 1280 and seen["overflow"] is False
