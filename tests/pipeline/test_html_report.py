"""`grade --html`: one self-contained page, opened in headless Chromium (Debian's `chromium`)
through Playwright with no network: it loads without console errors and its images are drawn."""

from __future__ import annotations

import shutil

import figure_evidence
import pytest
from repo import SOLUTIONS, by_id, run_grade, write_variant

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install -y chromium)"
)


def in_chromium(path, tmp_path, read) -> dict:
    """Console errors and requests that left the page at `path`, opened in headless Chromium with no network, and
    what `read(page)` takes from it."""
    playwright = pytest.importorskip(
        "playwright.sync_api", reason="playwright (PyPI) drives Chromium over its DevTools protocol"
    )
    seen: dict = {"errors": [], "requests": []}
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS
        )
        try:
            page = browser.new_page()
            page.on("console", lambda message: message.type == "error" and seen["errors"].append(message.text))
            page.on("pageerror", lambda error: seen["errors"].append(str(error)))
            page.on(
                "request",
                lambda request: request.url.startswith(("http:", "https:")) and seen["requests"].append(request.url),
            )
            page.goto(path.as_uri(), wait_until="load")
            seen |= read(page)
        finally:
            browser.close()
    return seen


def open_page(path, tmp_path) -> dict:
    """The report's <img> elements, lens tables, predictions, model lines and ablation rows, and a screenshot."""

    def read(page) -> dict:
        seen = {
            "images": page.eval_on_selector_all(
                "img", "images => images.map(i => ({alt: i.alt, drawn: i.complete && i.naturalWidth > 0}))"
            ),
            "lens_columns": page.eval_on_selector_all("table.lens", "ts => ts.map(t => t.rows[0].cells.length)"),
            "overflow": page.evaluate("document.documentElement.scrollWidth > window.innerWidth"),
            "predictions": page.eval_on_selector_all(
                "table.predictions tr", "rows => rows.map(r => [...r.cells].map(c => [c.textContent, c.className]))"
            ),
            "models": page.eval_on_selector_all("p.model", "ps => ps.map(p => p.textContent)"),
            "ablation_rows": page.locator("table.ablation tr").count(),
        }
        page.screenshot(path=str(tmp_path / "screenshot.png"), full_page=True)
        return seen

    return in_chromium(path, tmp_path, read)


@pytest.fixture(scope="module")
def broken_attention_page(tmp_path_factory, reference):
    """The report of a package whose attention scales by d_head: every kind of figure of Part 1 and 3 appears."""
    directory = tmp_path_factory.mktemp("html")
    package = write_variant(
        directory, {"attention.py": [("attn_scores / self.cfg.d_head**0.5", "attn_scores / self.cfg.d_head")]}
    )
    page = directory / "report.html"
    result = run_grade(
        "--exercises",
        str(package),
        "--reference",
        "random",
        "attention",
        "transformer",
        "interp.logit_lens",
        "--html",
        str(page),
    )
    assert result.returncode == 1, result.stderr
    return page


@pytest.mark.slow
def test_page_loads_without_errors_and_draws_its_images(broken_attention_page, tmp_path):
    seen = open_page(broken_attention_page, tmp_path)
    assert seen["errors"] == [] and seen["requests"] == []
    assert sorted(image["alt"] for image in seen["images"]) == [
        "attention patterns by head: the random reference's, yours and |yours - the random reference's|",
        "difference heatmap: |yours - the random reference|",  # attention's output
        "difference heatmap: |yours - the random reference|",  # the transformer's logits
    ]
    assert all(image["drawn"] for image in seen["images"])
    # GPT-2's lens: a position and its token, then the stream before each of 12 blocks and after the last; the small
    # model's: before its 2 blocks and after. A row per position, so its repeated sequence fits the page's width.
    assert seen["lens_columns"] == [2 + 13, 2 + 3]
    assert not seen["overflow"]
    head, *rows = seen["predictions"]
    assert [text for text, _ in head] == ["token", "the random reference's next", "yours next"]
    assert len(rows) == 7 and any(cells[2][1] == "differs" for cells in rows)  # 7 prompt tokens, some differ
    stand_in = "model shown: the random-weight stand-in for GPT-2 (offline)"
    small = "model shown: the small trained induction model (2 layers"
    assert len(seen["models"]) == 6 and [said.startswith(small) for said in seen["models"]].count(True) == 1
    assert all(said.startswith(stand_in) for said in seen["models"] if not said.startswith(small))


@pytest.mark.slow
def test_part5s_pictures_load_and_are_drawn(tmp_path):
    """Part 5's figures, from hand-built evidence on the small trained model's numbers
    (tests/support/figure_evidence.py), in a page: the score grids and the loss along a repeated sequence drawn, the
    ablation table a row per head."""
    from grader.host import figures
    from grader.host.render import html
    from grader.host.results import CheckResult, Report

    yours = figure_evidence.INDUCTION_SCORES.copy()
    yours[1, 2] = 0.42
    evidences = {
        "induction.previous_token_scores": figure_evidence.scores_evidence(
            figure_evidence.PREVIOUS_TOKEN_SCORES, "previous_token"
        ),
        "induction.induction_scores": figure_evidence.scores_evidence(yours, patterns=figure_evidence.mean_patterns()),
        "induction.per_token_loss": figure_evidence.token_loss_evidence(None),
        "induction.ablation_cost": figure_evidence.ablation_evidence(figure_evidence.ABLATION_COSTS),
    }
    checks = [
        CheckResult(check, "induction", "a Part 5 check", "fail", 1, figures=figures.all_figures(evidence))
        for check, evidence in evidences.items()
    ]
    page = tmp_path / "part5.html"
    page.write_text(html.render(Report("gpt2", "pkg", checks)))
    seen = open_page(page, tmp_path)
    assert seen["errors"] == [] and seen["requests"] == []
    model = "the small trained induction model"
    assert [image["alt"] for image in seen["images"]] == [
        f"previous-token scores by layer and head: {model}'s, yours beside them",
        f"induction scores by layer and head: {model}'s, yours beside them",
        f"attention patterns of every head on a repeated sequence: {model}",
        f"per-token loss on a repeated sequence: {model}'s",
    ]
    assert all(image["drawn"] for image in seen["images"])
    assert seen["ablation_rows"] == 1 + 6  # the heading, then each head ablated each way
    assert len(seen["models"]) == 5 and all(
        said.startswith(f"model shown: {model} (2 layers") for said in seen["models"]
    )


@pytest.mark.slow
def test_the_check_detects_a_broken_page(tmp_path):
    """The same inspection on a page with a script error and a missing image reports both."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
        '<img alt="x" src="data:image/png;base64,AAAA"><script>undefined_function()</script></body></html>'
    )
    seen = open_page(page, tmp_path)
    assert any("undefined_function" in error for error in seen["errors"])
    assert seen["images"] == [{"alt": "x", "drawn": False}]


def test_figures_come_from_the_checks_records(grade, tmp_path):
    """A failing module gets a difference heatmap of its own shape; a passing one none."""
    package = write_variant(tmp_path, {"mlp.py": [("+ self.b_out", "")]})
    results = by_id(grade(package, "mlp", "embed"))
    difference = results["mlp"].figures["difference"]
    assert len(difference["values"]) == 7 and len(difference["values"][0]) == 768
    assert results["embed"].figures == {}


def test_the_figures_are_drawn_only_for_the_page_that_shows_them(reference):
    """A grading keeps no evidence and draws no figure unless asked (grade --html, --hint, --show); asked, the
    evidence it kept gives the page's figures: the trainer's loss curve here."""
    from grader.checks import select
    from grader.host.pipeline import GradingRun

    plain = GradingRun(SOLUTIONS, select(["training.trainer"]), reference).finished()
    assert plain.evidence == {} and plain.report.checks[0].figures == {}
    kept = GradingRun(SOLUTIONS, select(["training.trainer"]), reference, keep_evidence=True).finished()
    assert set(kept.evidence) == {"training.trainer"} and kept.report.checks[0].figures == {}
    assert "loss_curve" in kept.with_figures().checks[0].figures


ONE_WITNESS = {"skip_trigrams.py": [("~real & in_its_row & in_its_column", "~real & (in_its_row | in_its_column)")]}


def cells(source: dict, key: str) -> set[tuple[str, str]]:
    """The (destination, output) cells of a source's table where `key` holds."""
    return {
        (destination, output)
        for a, destination in enumerate(source["destinations"])
        for b, output in enumerate(source["outputs"])
        if source[key][a][b]
    }


def test_the_skip_trigram_tables_write_out_the_tokens_and_mark_the_bugs(grade, tmp_path):
    """The bugs check's figure: each head's table in words, the planted trigrams real, their crossings the
    reference's bugs, and where a package that takes one witness for two says otherwise."""
    result = by_id(grade(write_variant(tmp_path, ONE_WITNESS), "skip_trigram.bugs"))["skip_trigram.bugs"]
    assert result.status == "fail"
    tables = result.figures["skip_trigrams"]
    assert [head["case"] for head in tables["heads"]] == ["head1", "head3"]
    string = next(source for source in tables["heads"][0]["sources"] if source["source"] == " string")
    assert {(" from", " left"), (" with", " zero")} <= cells(string, "real")
    assert {(" with", " left"), (" from", " zero")} <= cells(string, "bugs")
    assert cells(string, "bugs") < cells(string, "yours")  # one witness finds every bug and more
    assert all(count >= 0 for row in string["counts"] for count in row)


@pytest.mark.slow
def test_the_skip_trigram_tables_are_drawn_in_the_page(tmp_path, reference):
    page = tmp_path / "report.html"
    package = write_variant(tmp_path, ONE_WITNESS)
    result = run_grade("--exercises", str(package), "--reference", "random", "skip_trigram.bugs", "--html", str(page))
    assert result.returncode == 1, result.stderr

    def read(page) -> dict:
        return {
            "tables": page.locator("table.trigrams").count(),
            "bugs": page.locator("table.trigrams td.bug").count(),
            "differs": page.locator("table.trigrams td.differs").count(),
            "corner": page.locator("table.trigrams th").first.text_content(),
        }

    seen = in_chromium(page, tmp_path, read)
    assert seen["errors"] == [] and seen["requests"] == []
    assert seen["tables"] == 2 * 8 and seen["bugs"] > 0 and seen["differs"] > 0
    assert seen["corner"] == "' string' ... d"
