"""Every channel names a failing check's course page (docs/course/): `grade --watch` once per check that starts
failing, the first report's start-here line for the check to start with, each part's notebook in its markdown
cells (a link per exercise file, on GitHub or by the page's path) and a failing `grade_check` in a notebook."""

from __future__ import annotations

import io
import re
from pathlib import Path

import nbformat
import pytest
from repo import REPO, SOLUTIONS, run_grade, stubs, write_variant
from rich.console import Console
from test_notebooks import ASSIGNMENT, course  # noqa: F401 (course: the generated and released notebooks, a fixture)
from test_watch_unit import FIRST, Attempts, printed_by, report_of, result

from grader.checks import registry, select
from grader.host.course import COURSE_DIR, page_of, pages
from grader.host.modes.watch import Watch, check_lines
from grader.host.platforms.nbgrader import notebooks, sources
from grader.host.render import text
from grader.host.results import CheckResult, Report

LINK = re.compile(r"\]\(([^)\s]+)\)")  # a Markdown link's target
GITHUB = "git+https://github.com/ada/gpt2-learner"


def pages_in(lines: list[str]) -> list[str]:
    return [line.strip().removeprefix("read: ") for line in lines if line.strip().startswith("read: ")]


# --- grade --watch ----------------------------------------------------------------------------------------


def test_watch_names_the_page_of_a_check_that_starts_failing_once_not_on_every_save(monkeypatch, tmp_path):
    """pass -> fail: a read: line under the check's; a save after which it still fails (a new reason or the
    same) says no page again; fail -> pass -> fail says it again, as a new failure."""
    passing = report_of(
        result("layernorm", "pass"), result("attention.causal_mask", "pass"), result("attention", "pass")
    )
    failing = report_of(result("layernorm", "fail", message="differs: max abs diff 0.5", hint="eps inside"))
    new_reason = report_of(result("layernorm", "fail", message="differs: output shape (2, 9)"))
    Attempts(monkeypatch, passing, failing, new_reason, new_reason, report_of(result("layernorm", "pass")), failing)
    session = Watch(tmp_path, select(["layernorm", "attention"]), "the reference", None, rebuild=None)
    session.report(session.grading(session.watched))

    first = printed_by(session, ["normalization.py"])
    assert first[1].split()[:2] == ["layernorm", "FAIL"] and first[2].strip() == "next: most likely: eps inside"
    assert first[3] == " " * 13 + "read: docs/course/04-layernorm.md"  # under the check's line, indented as next:
    assert pages_in(first) == ["docs/course/04-layernorm.md"]
    assert (REPO / pages_in(first)[0]).is_file()
    for _ in range(2):  # still failing, for a new reason and then for the same: the page was said
        assert pages_in(printed_by(session, ["normalization.py"])) == []
    assert pages_in(printed_by(session, ["normalization.py"])) == []  # it passes
    assert pages_in(printed_by(session, ["normalization.py"])) == ["docs/course/04-layernorm.md"]


def test_watch_names_one_page_for_the_checks_one_error_stops_and_none_for_a_check_failing_before(monkeypatch, tmp_path):
    raised = {"message": "NameError: name 'x' is not defined (attention.py:3)", "file": "attention.py", "line": 3}
    stopped = report_of(result("attention.causal_mask", "error", **raised), result("attention", "error", **raised))
    Attempts(monkeypatch, FIRST, stopped)  # FIRST: layernorm fails, the attention checks pass
    session = Watch(tmp_path, select(["layernorm", "attention"]), "the reference", None, rebuild=None)
    session.report(session.grading(session.watched))
    lines = printed_by(session, ["attention.py"])
    assert lines[1].split()[:4] == ["attention.*", "(2", "checks)", "ERROR"]
    assert lines[2].strip() == "read: docs/course/05-attention.md" and pages_in(lines) == [page_of("attention")]
    # A syntax error is one line (the README's promise): its fix is at the line it names, not on a page.
    syntax = {**raised, "message": "SyntaxError: invalid syntax (attention.py, line 3)"}
    broken = [result("attention.causal_mask", "error", **syntax), result("attention", "error", **syntax)]
    assert pages_in([line.plain for line in check_lines(broken, {r.id: result(r.id, "pass") for r in broken})]) == []
    # layernorm failed in the first run (whose full report named its page): a later line of it says none again
    again = check_lines([result("layernorm", "fail", message="x")], {"layernorm": FIRST["layernorm"]})
    assert pages_in([line.plain for line in again]) == []


def test_watch_names_each_page_that_a_saved_shared_file_makes_fail(tmp_path):
    before = {check_id: result(check_id, "pass") for check_id in ("embed", "layernorm", "block")}
    now = [result("embed", "fail", message="a"), result("layernorm", "error", message="b"), result("block", "pass")]
    shown = pages_in([line.plain for line in check_lines(now, before)])
    assert shown == [page_of("embed"), page_of("layernorm")] and all((REPO / page).is_file() for page in shown)


# --- the first report ------------------------------------------------------------------------------------


def todo_report() -> Report:
    checks = [
        CheckResult(c.id, c.part, c.summary, "todo", c.points, "not implemented yet", file=f"{c.target.file}.py")
        for c in registry()
    ]
    for check, declared in zip(checks, registry(), strict=True):
        check.target = declared.target.label
    return Report("random", "exercises", checks)


def test_the_start_here_line_names_the_page_of_the_check_to_start_with():
    line = text.start_here(todo_report())
    assert (
        line == "start here: exercises/embedding.py, Embed.forward; then `grade embed`; read: docs/course/02-embed.md"
    )
    page = line.rsplit("read: ", 1)[1]
    assert page == page_of(registry()[0].id) and (REPO / page).is_file()
    console = Console(file=io.StringIO(), width=200, color_system=None)
    text.print_report(todo_report(), console)
    assert line in console.file.getvalue().splitlines()


def test_the_next_to_write_line_names_the_next_checks_page():
    report = todo_report()
    for check in report.checks[:2]:  # embed and pos_embed pass: layernorm is next
        check.status = "pass"
    assert text.start_here(report).endswith("then `grade layernorm`; read: docs/course/04-layernorm.md")


def test_the_stubs_first_report_names_the_first_page(reference):
    ran = run_grade("--reference", "random", "--exercises", str(stubs()), "embed", env={"COLUMNS": "200"})
    assert ran.returncode == 1, ran.stderr
    (line,) = [line for line in ran.stdout.splitlines() if line.startswith("start here: ")]
    assert line.endswith("embedding.py, Embed.forward; then `grade embed`; read: docs/course/02-embed.md"), line


# --- the notebooks ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "base"),
    [
        (GITHUB, "https://github.com/ada/gpt2-learner/blob/HEAD/"),
        ("git+https://github.com/ada/gpt2-learner.git", "https://github.com/ada/gpt2-learner/blob/HEAD/"),
        ("git+https://github.com/ada/gpt2-learner.git@v2#egg=x", "https://github.com/ada/gpt2-learner/blob/v2/"),
        ("https://github.com/ada/gpt2-learner", "https://github.com/ada/gpt2-learner/blob/HEAD/"),
        ("git+https://example.org/course/gpt2-learner", ""),
        ("git+https://github.com/ada", ""),
        (sources.PLACEHOLDER_SOURCE, ""),  # OWNER/REPOSITORY is no repository: the paths, not a broken link
    ],
)
def test_the_pages_are_linked_on_github_only_for_a_github_source(source, base):
    assert sources.pages_base(source) == base


def links_of(notebook) -> list[str]:
    return [link for cell in notebook.cells if cell.cell_type == "markdown" for link in LINK.findall(cell.source)]


def file_cells(notebook) -> dict[str, str]:
    """The markdown cell of each file, by file name ("## `attention.py`")."""
    cells = {}
    for cell in notebook.cells:
        heading = re.match(r"## `(\w+)\.py`", cell.source) if cell.cell_type == "markdown" else None
        if heading:
            cells[heading[1]] = cell.source
    return cells


def expected_pages(part: str) -> dict[str, set[str]]:
    """The pages a part's notebook must link, by file: each of its checks' page, in that file's cell."""
    pages: dict[str, set[str]] = {}
    for check in registry():
        if check.part == part:
            pages.setdefault(check.target.file, set()).add(page_of(check.id))
    return pages


def check_part_links(name: str, notebook, base: str) -> None:
    part = name.removesuffix(".ipynb").split("-", 1)[1]
    links = links_of(notebook)
    assert links and all(link.startswith(base + COURSE_DIR + "/") for link in links), (name, links)
    assert all((REPO / link.removeprefix(base)).is_file() for link in links), (name, links)  # each page is there
    cells = file_cells(notebook)
    for file, file_pages in expected_pages(part).items():
        assert {link.removeprefix(base) for link in LINK.findall(cells[file])} == file_pages, (name, file)
    every = {page_of(check.id) for check in registry() if check.part == part}
    assert every <= {link.removeprefix(base) for link in LINK.findall(notebook.cells[0].source)}, name


@pytest.mark.parametrize(("source", "base"), [(GITHUB, "https://github.com/ada/gpt2-learner/blob/HEAD/"), (None, "")])
def test_each_parts_notebook_links_the_pages_of_its_checks_from_each_files_cell(source, base):
    generated, skipped = sources.source_notebooks(SOLUTIONS, *([source] if source else []))
    assert generated and not skipped
    for name, notebook in generated.items():
        check_part_links(name, notebook, base)
    model = generated["1-model.ipynb"]
    assert (
        f"[Part 1: the model, end to end]({base}docs/course/01-the-model.md)" in model.cells[0].source
    )  # its overview
    assert f"Read first: [Token embedding: `Embed`]({base}docs/course/02-embed.md), " in file_cells(model)["embedding"]
    assert not LINK.findall(file_cells(model)["config"])  # a given file has no check, so no page


def test_the_generator_says_how_it_links_the_pages(tmp_path):
    for n, (source, said) in enumerate(
        (
            (GITHUB, "linked on GitHub, at https://github.com/ada/gpt2-learner/blob/HEAD/docs/course/"),
            ("git+https://example.org/x/y", "linked by their paths in the repository (docs/course/...)"),
        )
    ):
        errors = io.StringIO()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("sys.stderr", errors)
            assert notebooks.main([str(tmp_path / str(n)), "--source", source]) == 0
        assert said in errors.getvalue()


@pytest.mark.slow
def test_the_released_notebooks_keep_their_links_and_each_resolves(course):  # noqa: F811 (the imported fixture)
    """nbgrader's release leaves the markdown cells as generated: test_notebooks' source is no GitHub URL, so the
    links are the pages' paths, each a file of this repository."""
    released = sorted((course / "release" / ASSIGNMENT).glob("*.ipynb"))
    assert released
    for path in released:
        check_part_links(path.name, nbformat.read(path, as_version=4), "")


# --- grade_check in a notebook ---------------------------------------------------------------------------


def test_a_failing_grade_check_names_its_page_and_a_passing_or_todo_one_none(tmp_path, monkeypatch, capsys):
    said = {"embed": ("pass", ""), "layernorm": ("fail", "differs: max abs diff 0.5")}  # any other: todo

    def graded(package, check_ids):
        results = []
        for c in registry():
            if c.id in check_ids:
                status, message = said.get(c.id, ("todo", "not implemented yet"))
                results.append(CheckResult(c.id, c.part, c.summary, status, c.points, message))
        return Report("random", str(package), results)

    monkeypatch.setattr(notebooks, "grade_in_own_process", graded)
    grader = notebooks.NotebookGrader(tmp_path)
    with pytest.raises(AssertionError) as raised:
        grader.grade_check("layernorm")
    shown = capsys.readouterr().out
    assert "read: docs/course/04-layernorm.md" in shown
    assert str(raised.value) == (
        "layernorm: fail: differs: max abs diff 0.5 "
        "(read: docs/course/04-layernorm.md, linked above the exercise's cell)"
    )
    grader.grade_check("embed")
    with pytest.raises(AssertionError) as raised:
        grader.grade_check("gelu_new")  # todo: no failure's page; the report's next-to-write line names it
    assert "docs/course" not in str(raised.value)
    assert "`grade gelu_new`; read: docs/course/06-mlp.md" in " ".join(capsys.readouterr().out.split())


def test_a_real_failing_grade_check_names_its_page(reference, tmp_path, capsys):
    package = write_variant(tmp_path, {"normalization.py": [("self.cfg.layer_norm_eps", "1e-2")]})
    with pytest.raises(AssertionError) as raised:
        notebooks.NotebookGrader(package).grade_check("layernorm")
    shown = " ".join(capsys.readouterr().out.split())
    assert "read: docs/course/04-layernorm.md" in shown and (REPO / "docs/course/04-layernorm.md").is_file()
    assert str(raised.value).startswith("layernorm: fail: ")
    assert str(raised.value).endswith("(read: docs/course/04-layernorm.md, linked above the exercise's cell)")


def test_every_page_that_covers_a_check_is_linked_by_some_notebook():
    generated, _ = sources.source_notebooks(SOLUTIONS)
    linked = {link for notebook in generated.values() for link in links_of(notebook)}
    assert {f"{COURSE_DIR}/{name}" for name, ids in pages().items() if ids} <= linked
    assert Path(COURSE_DIR, "README.md").as_posix() not in linked
