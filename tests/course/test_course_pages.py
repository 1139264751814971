"""The course's pages (docs/course/): every check on exactly one page, every hint the grader can give on that
page, the generated blocks up to date, every link resolving; and a failing check's report names its page."""

from __future__ import annotations

import io
import json
import posixpath
import re
import shutil
from pathlib import Path

import jsonschema
from markdown_it import MarkdownIt
from repo import REPO
from rich.console import Console

from grader.checks import registry
from grader.host import course
from grader.host.platforms.github import writer as github
from grader.host.render import html, text
from grader.host.render import json as json_renderer
from grader.host.results import CheckResult, Report

COURSE = REPO / course.COURSE_DIR


def page_text(name: str) -> str:
    return (COURSE / name).read_text(encoding="utf-8")


def shown_text(markdown: str) -> str:
    """What a reader of the rendered page sees: the text of every inline token, markup gone, one line each."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    return "\n".join(
        "".join(child.content for child in token.children or [] if child.type in ("text", "code_inline"))
        for token in tokens
        if token.type == "inline"
    )


def test_every_check_is_on_exactly_one_page_and_every_page_is_in_the_map():
    pages = course.pages()
    placed = [check_id for check_ids in pages.values() for check_id in check_ids]
    assert sorted(placed) == sorted(check.id for check in registry()), "each check on exactly one page"
    assert placed == [check.id for check in registry()], "the pages follow the course's order"
    assert sorted(path.name for path in COURSE.glob("*.md")) == sorted(pages) and next(iter(pages)) == "README.md"
    for check in registry():
        page = course.page_of(check.id)
        assert page is not None and (REPO / page).is_file(), check.id
    assert course.page_of("no.such.check") is None


def test_every_hint_of_a_check_is_on_its_page_as_written_and_as_shown(reference):
    for check in registry():
        page = page_text(Path(course.page_of(check.id)).name)
        shown = shown_text(page)
        block = page[page.index(course.START) : page.index(course.END)]
        assert f"`{check.id}`" in block, check.id
        for case in reference.cases(check.id):
            for hint in [*case.mistakes, *([case.hint] if case.hint else [])]:
                assert hint in block, f"{check.id}: {hint!r} is not in the generated block of its page"
                assert hint in shown, f"{check.id}: {hint!r} does not render as written"


def test_the_generated_blocks_are_up_to_date(reference):
    stale = course.stale(REPO, reference)
    assert stale == [], f"stale: {stale}; run python -m grader.host.course"


def test_a_stale_or_unmarked_page_is_found(reference, tmp_path):
    shutil.copytree(COURSE, tmp_path / course.COURSE_DIR)
    page = tmp_path / course.COURSE_DIR / "04-layernorm.md"
    page.write_text(page.read_text().replace(course.END, "- a hint no check gives\n" + course.END))
    assert course.stale(tmp_path, reference) == ["04-layernorm.md"]
    page.write_text("# LayerNorm\n\nno block\n")
    try:
        course.stale(tmp_path, reference)
    except course.StalePage as error:
        assert "04-layernorm.md has no" in str(error)
    else:
        raise AssertionError("a page without its markers is not reported")


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    tokens = MarkdownIt("commonmark").parse(markdown)
    titles = [tokens[i + 1].content for i, token in enumerate(tokens) if token.type == "heading_open"]
    return {re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for title in titles}


def test_every_link_of_the_course_resolves():
    for path in sorted(COURSE.glob("*.md")):
        for token in MarkdownIt("commonmark").enable("table").parse(path.read_text(encoding="utf-8")):
            for child in token.children or []:
                target = str(child.attrs.get("href") or child.attrs.get("src") or "")
                if not target or "://" in target:
                    continue
                file, _, anchor = target.partition("#")
                linked = Path(posixpath.normpath(posixpath.join(str(path.parent), file))) if file else path
                assert linked.is_file(), f"{path.name} links to {target}, which does not exist"
                if anchor and linked.suffix == ".md":
                    assert anchor in heading_anchors(linked.read_text(encoding="utf-8")), f"{path.name}: {target}"
    assert "docs/course/README.md" in (REPO / "README.md").read_text()  # the README leads to the course


# --- a failing check names its page, in every report that a person reads ------------------------------------------

SYNTAX = {"message": "SyntaxError: invalid syntax (attention.py, line 3)", "file": "attention.py", "line": 3}
REPORT = Report(
    "random",
    "/tmp/package",
    [
        CheckResult("embed", "model", "token embedding", "pass", 1),
        CheckResult("layernorm", "model", "LayerNorm", "fail", 2, "differs", hint="eps is outside"),
        CheckResult("attention.causal_mask", "model", "causal mask", "error", 1, **SYNTAX),
        CheckResult("attention", "model", "multi-head attention", "error", 3, **SYNTAX),
        CheckResult("mlp", "model", "MLP", "todo", 2, "MLP.forward is not implemented yet", file="mlp.py"),
        CheckResult("sampling.top_k", "sampling", "top-k sampling", "timeout", 1, "no answer within 60 s"),
    ],
)


def terminal(report: Report) -> list[str]:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    text.print_report(report, console)
    return console.file.getvalue().splitlines()


def test_every_result_gets_its_page_from_its_id_and_only_a_failing_one_points_to_it():
    pages = {check.id: check.page for check in REPORT.checks}
    assert pages == {check.id: course.page_of(check.id) for check in REPORT.checks}
    assert pages["layernorm"] == "docs/course/04-layernorm.md"
    shown = {check.id: check.page_to_read for check in REPORT.checks}
    assert shown["embed"] is None and shown["mlp"] is None  # passing, todo: nothing to read yet
    assert shown["sampling.top_k"] == "docs/course/11-sampling.md"
    assert CheckResult("made.up", "model", "", "fail", 1).page is None  # a hand-built id no page covers


def test_the_terminal_names_the_page_of_each_failing_check():
    lines = terminal(REPORT)
    read = [line.strip() for line in lines if line.strip().startswith("read: ")]
    assert read == [
        "read: docs/course/04-layernorm.md",
        "read: docs/course/05-attention.md",  # one error stops both attention checks: one page, once
        "read: docs/course/11-sampling.md",
    ]
    layernorm = next(i for i, line in enumerate(lines) if line.startswith("layernorm (fail): differs"))
    assert lines[layernorm + 1].strip() == "next: most likely: eps is outside"
    assert lines[layernorm + 2].strip() == "read: docs/course/04-layernorm.md"


def test_the_html_report_links_the_page_of_each_failing_check():
    page = html.render(REPORT)
    for name in ("04-layernorm.md", "05-attention.md", "11-sampling.md"):
        target = (COURSE / name).as_uri()
        assert f'read: <a href="{target}">docs/course/{name}</a>' in page
    assert "02-embed.md" not in page and "06-mlp.md" not in page


def test_githubs_step_summary_links_each_failing_checks_id_to_its_page_at_the_commit():
    environ = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "me/gpt2", "GITHUB_SHA": "abc123"}
    summary = github.summary(REPORT, pages=github.pages_url(environ))
    tokens = MarkdownIt("commonmark").enable("table").parse(summary)
    links = [
        child.attrs["href"]
        for token in tokens
        if token.type == "inline"
        for child in token.children or []
        if child.type == "link_open"
    ]
    at = "https://github.com/me/gpt2/blob/abc123/docs/course/"
    assert links == [
        at + "04-layernorm.md",
        at + "05-attention.md",
        at + "05-attention.md",
        at + "11-sampling.md",
    ]
    assert "`embed`" in summary and "[`embed`]" not in summary
    assert github.pages_url({}) == "" and "](docs/course/04-layernorm.md)" in github.summary(REPORT)


def test_the_json_report_carries_the_page_and_keeps_its_schema():
    written = json.loads(json_renderer.render(REPORT))
    schema = json.loads((REPO / "grader" / "schemas" / "report.schema.json").read_text())
    jsonschema.validate(written, schema)
    assert [check["page"] for check in written["checks"]][:2] == [
        "docs/course/02-embed.md",
        "docs/course/04-layernorm.md",
    ]
    assert Report.from_dict(written).checks[1].page == "docs/course/04-layernorm.md"
