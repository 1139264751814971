"""The learner release: what a learner needs, no solution, and it grades with its own grader."""

from __future__ import annotations

import json
import keyword
import os
import posixpath
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from repo import REPO, SOLUTIONS, stubs

from grader.checks import registry
from grader.host.tools.stubs import strip_solutions

LEARNER_MARK = re.compile(r"^pytestmark = .*\bpytest\.mark\.learner\b", re.MULTILINE)  # alone or in a list


def says_anything(line: str) -> bool:
    """Two names other than keywords, or a name and a number: `break`, `return x` or a lone
    bracket give nothing away."""
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", line)) - set(keyword.kwlist)
    return len(names) + any(c.isdigit() for c in line) >= 2


def solution_lines() -> set[str]:
    """Every line between solution markers in solutions/ that says anything."""
    lines, inside = set(), False
    for path in SOLUTIONS.glob("*.py"):
        for line in path.read_text().splitlines():
            if "### BEGIN SOLUTION" in line:
                inside = True
            elif "### END SOLUTION" in line:
                inside = False
            elif inside and says_anything(line):
                lines.add(line.strip())
    return lines


def files_under(directory: Path) -> list[Path]:
    return sorted(path for path in directory.rglob("*") if path.is_file())


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("release") / "learner"
    built = subprocess.run(
        [sys.executable, "-m", "grader.host.tools.release", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return out


@pytest.fixture(scope="module")
def release_venv(tmp_path_factory) -> Path:
    """A new virtualenv that sees this one's packages (torch, ...) through a .pth file, but not its
    grader: this checkout's editable install is a finder that only a site directory would run."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = subprocess.run(
        [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "shared-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def make(release: Path, venv: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`make` in the release, as a learner runs it, with the Makefile's installs kept local: every
    dependency is importable already, so pip neither downloads nor builds in isolation
    (PIP_NO_BUILD_ISOLATION=0 turns isolation off)."""
    pip_offline = {
        "PIP_NO_INDEX": "1",
        "PIP_NO_DEPS": "1",
        "PIP_NO_BUILD_ISOLATION": "0",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    return subprocess.run(
        ["make", *args, f"VENV={venv}"],
        cwd=release,
        env={**os.environ, **pip_offline, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_no_solution_file_or_line_is_released(release):
    hidden = solution_lines()
    assert len(hidden) > 20  # the helper itself finds the solutions
    files = files_under(release)
    assert not [path for path in files if "solutions" in path.relative_to(release).parts]
    for path in files:
        leaked = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip() in hidden]
        assert leaked == [], f"{path.relative_to(release)} holds solution lines: {leaked[:3]}"


def test_the_release_holds_what_a_learner_needs_and_no_instructor_file(release):
    from grader.host.tools.release import TEST_SUPPORT

    released = {str(path.relative_to(release)) for path in files_under(release)}
    for name in (
        "README.md",
        "pyproject.toml",
        "Makefile",
        ".gitignore",
        "grader/__init__.py",
        "grader/host/cli.py",
        "grader/checks/model/attention.py",
        "tests/conftest.py",
        "tests/support/reference_session.py",
    ):
        assert name in released
    assert sorted(path.name for path in (release / "exercises").iterdir()) == sorted(
        path.name for path in SOLUTIONS.glob("*.py")
    )
    for path in SOLUTIONS.glob("*.py"):  # the stubs, as grader.host.tools.stubs makes them (tested in test_stubs)
        assert (release / "exercises" / path.name).read_text() == strip_solutions(path.read_text())
    # One workflow, feedback on every push; never the course's own CI.
    assert [name for name in released if name.startswith(".github/")] == [".github/workflows/grade.yml"]
    assert not any(name.startswith(("bench/", ".ci/", "solutions/")) for name in released)
    learner_tests = {
        str(path.relative_to(REPO))
        for path in (REPO / "tests").glob("*/test_*.py")
        if LEARNER_MARK.search(path.read_text())
    }
    assert learner_tests and {name for name in released if name.startswith("tests/")} == {
        *TEST_SUPPORT,
        *learner_tests,
    }
    readme = (release / "README.md").read_text()
    assert (
        "## For instructors" not in readme and "## The exercises, in order" in readme and "<!-- include" not in readme
    )
    # The learner's pages of docs/ ship, less their instructor text; the instructors' and maintainers' do not.
    from grader.host.tools.release import INSTRUCTOR_DOCS

    pages = {name for name in released if name.startswith("docs/") and name.endswith(".md")}
    assert {"docs/how-grading-works.md", "docs/isolation.md"} <= pages and not pages & set(INSTRUCTOR_DOCS)
    for name in ["README.md", *sorted(pages)]:  # what the README and each page link to or show is there
        text = (release / name).read_text()
        assert "<!-- instructors" not in text, name
        for target in re.findall(r"\]\(([^)#:]+)[)#]", text):
            assert (release / posixpath.dirname(name) / target).is_file(), f"{name} links to {target}"


@pytest.mark.slow
def test_make_grade_there_runs_its_own_grader_and_everything_is_todo(reference, release, release_venv, tmp_path):
    # A `solutions` package that records being imported, first on every process's path.
    sentinel = tmp_path / "solutions-imported"
    (tmp_path / "decoy" / "solutions").mkdir(parents=True)
    (tmp_path / "decoy" / "solutions" / "__init__.py").write_text(f"open({str(sentinel)!r}, 'w').close()\n")
    report_path = tmp_path / "report.json"
    graded = make(
        release,
        release_venv,
        "grade",
        f"ARGS=--reference random --json {report_path}",
        env={"PYTHONPATH": str(tmp_path / "decoy")},
    )
    output = graded.stdout[-2000:] + graded.stderr[-2000:]
    assert graded.returncode == 0 and "Error" not in graded.stderr and report_path.is_file(), output
    assert graded.stderr.splitlines()[-1].endswith("checks pass; grade exits 1 until all do (make grade exits 0)"), (
        output
    )
    report = json.loads(report_path.read_text())
    assert [check["id"] for check in report["checks"]] == [check.id for check in registry()]
    assert {check["status"] for check in report["checks"]} == {"todo"} and report["score"] == 0
    assert Path(report["package"]) == release / "exercises"
    assert not sentinel.exists(), "something in the release imported solutions"
    imported = subprocess.run(
        [release_venv / "bin" / "python", "-c", "import grader; print(grader.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert Path(imported.stdout.strip()).is_relative_to(release), imported.stdout + imported.stderr


@pytest.mark.slow
def test_the_release_tests_pass_there_without_solutions(release, release_venv):
    tested = make(release, release_venv, "test", "PYTEST_ARGS=-q -p no:cacheprovider")
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", tested.stdout) and "failed" not in tested.stdout


def test_the_guard_finds_a_solution_line_anywhere(tmp_path):
    from grader.host.tools.release import hidden_lines, leaked_lines

    hidden = hidden_lines(SOLUTIONS)
    assert "return self.W_E[tokens]" in hidden and "### BEGIN SOLUTION" not in hidden
    assert not {")", "break", "return resid_post"} & hidden  # in solution regions, but they say nothing
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "notes.txt").write_text("a note\n        return self.W_E[tokens]\n")
    (tmp_path / "clean.py").write_text((stubs() / "embedding.py").read_text())
    assert leaked_lines(tmp_path, hidden) == ["deep/er/notes.txt: return self.W_E[tokens]"]


@pytest.mark.parametrize(
    "declaration, shipped",
    [
        ("pytestmark = pytest.mark.learner", True),
        ("pytestmark = [pytest.mark.slow, pytest.mark.learner]", True),
        ("pytestmark = pytest.mark.slow", False),
        ("# pytestmark = pytest.mark.learner", False),
        ("LEARNER = 'pytestmark = pytest.mark.learner'", False),
    ],
)
def test_only_modules_marked_learner_ship(tmp_path, declaration, shipped):
    from grader.host.tools.release import is_learner_test

    (tmp_path / "test_x.py").write_text(f"import pytest\n\n{declaration}\n\n\ndef test_x():\n    assert True\n")
    assert is_learner_test(tmp_path / "test_x.py") is shipped


def test_an_existing_outdir_is_refused_and_left_alone(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    refused = subprocess.run(
        [sys.executable, "-m", "grader.host.tools.release", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "already exists" in refused.stderr
    assert [path.name for path in tmp_path.iterdir()] == ["mine.txt"] and (
        tmp_path / "mine.txt"
    ).read_text() == "keep me"


def test_the_learner_workflow_ships_and_the_courses_ci_does_not(tmp_path):
    from grader.host.tools.release import learner_files

    files = [
        ".github/workflows/ci.yml",
        ".github/workflows/grade.yml",
        "grader/host/cli.py",
        "bench/batch_speed.py",
        "solutions/mlp.py",
        ".ci/run",
    ]
    assert learner_files(tmp_path, files) == [".github/workflows/grade.yml", "grader/host/cli.py"]


def test_the_learner_readme_places_every_readme_section(tmp_path):
    from grader.host.tools.release import ReleaseError, learner_readme, linked_files

    readme = "# Course\n\nIntro.\n\n## Quickstart\n\nRun it.\n\n## For instructors and maintainers\n\nSecret.\n"
    template = "# For learners\n\n<!-- include: Quickstart -->\n"
    assert learner_readme(template, readme) == "# For learners\n\n## Quickstart\n\nRun it.\n"
    with pytest.raises(ReleaseError, match="'Setup' is neither included"):
        learner_readme(template, readme + "\n## Setup\n\nNew.\n")
    with pytest.raises(ReleaseError, match="includes the section 'Quick start'"):
        learner_readme(template.replace("Quickstart", "Quick start"), readme)
    assert linked_files("![a](docs/a.png) [b](other.md#part) [c](https://x.org/c.png) [d](#d)\n") == {
        "docs/a.png",
        "other.md",
    }


def test_the_release_ships_the_docs_pages_the_learner_readme_links_to_and_places_every_page():
    from grader.host.tools.release import ReleaseError, learner_docs

    readme = "See [how](docs/how.md#top) and ![a figure](docs/figure.png).\n"
    pages = {
        "docs/how.md": "[Back](../README.md). [Safe](safe.md).\n<!-- instructors -->\n[Setup](instructors.md)\n"
        "<!-- /instructors -->\n",
        "docs/safe.md": "Contained.\n<!-- instructors -->\nTeach.\n<!-- /instructors -->\n",
        "docs/instructors.md": "Secret.\n",
        "docs/speed.md": "Measured.\n",
    }
    shipped, others = learner_docs(readme, pages)
    assert shipped == {"docs/how.md": "[Back](../README.md). [Safe](safe.md).\n", "docs/safe.md": "Contained.\n"}
    assert others == {"docs/figure.png"}
    with pytest.raises(ReleaseError, match="links to docs/instructors.md, a page for instructors"):
        learner_docs(readme + "[Teach](docs/instructors.md)\n", pages)
    with pytest.raises(ReleaseError, match="docs/new.md is neither linked from the learner README"):
        learner_docs(readme, {**pages, "docs/new.md": "New.\n"})


# --- the learner README names only what the release ships ----------------------------------------

# Paths the learner's own runs create (make's virtualenv, the notebook magic, the workflow's
# artifact) and placeholders: named by the README, never shipped.
CREATED_OR_PLACEHOLDER = (".venv/", "notebook_exercises/", "grade-results/", "path/to/", "DIR/")
PATH_SUFFIXES = (".py", ".yml", ".md", ".toml")


def inline_names(markdown: str) -> tuple[list[str], list[str], list[str]]:
    """The inline code spans, those that open a table cell, and the link or image targets of a
    Markdown text (tables included)."""
    from markdown_it import MarkdownIt

    spans, cells, targets = [], [], []
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    for previous, token in zip([None, *tokens], tokens, strict=False):
        for i, child in enumerate(token.children or []):
            if child.type == "code_inline":
                spans.append(child.content)
                if i == 0 and previous is not None and previous.type in ("td_open", "th_open"):
                    cells.append(child.content)
            elif child.type in ("link_open", "image"):
                targets.append(str(child.attrs.get("href") or child.attrs.get("src")))
    return spans, cells, targets


def looks_like_path(word: str) -> bool:
    """A repository-relative path: not a URL, an absolute path, a variable, an option or an expression."""
    if "://" in word or word.startswith(("/", "~", "$", "-", "%", "#")) or any(c in word for c in "=<>(|…*"):
        return False
    return "/" in word or word.endswith(PATH_SUFFIXES) or word == "Makefile"


def named_paths(spans: list[str], targets: list[str]) -> set[str]:
    words = [word.strip("\"'`,") for span in spans for word in span.split()] + [t.partition("#")[0] for t in targets]
    return {word for word in words if looks_like_path(word) and not word.startswith(CREATED_OR_PLACEHOLDER)}


def shell_words(span: str) -> list[str]:
    """The words of a command as a shell splits them (`ARGS="a --b"` is one), or by spaces."""
    try:
        return shlex.split(span) or [""]
    except ValueError:  # not a command: an unbalanced quote
        return span.split() or [""]


def named_commands(spans: list[str], cells: list[str]) -> tuple[set[str], set[str]]:
    """The `make` targets and the `grade` options the spans name: `make grade ARGS="--json x"` names
    both; a table cell that opens with an option (the options table) names a `grade` option."""
    targets, options = set(), set()
    for words in map(shell_words, spans):
        if words[:1] == ["make"]:
            targets |= {word for word in words[1:] if "=" not in word and not word.startswith("-")}
    graded = [span for span in spans if any(word == "grade" or word.endswith("/grade") for word in span.split())]
    for span in graded + [cell for cell in cells if cell.startswith("--")]:
        options |= {option.partition("=")[0] for option in re.findall(r"(?<![\w-])--[a-z][\w-]*", span)}
    return targets, options


def shipped(release: Path, path: str) -> bool:
    """Whether path is in the release, from its root or, for a bare name such as `attention.py`
    or `drivers/`, inside one of its directories (exercises/, grader/)."""
    path = path.rstrip("/")
    return (release / path).exists() or any(release.rglob(path))


def make_targets(release: Path) -> set[str]:
    """The targets of the release's Makefile that a learner would type (no pattern or file rules)."""
    return set(re.findall(r"^([A-Za-z][\w-]*):(?!=)", (release / "Makefile").read_text(), re.MULTILINE))


def grade_options(release: Path, venv: Path) -> set[str]:
    """The options of the release's own `grade --help`."""
    code = "import sys; from grader.host.cli import main; sys.exit(main(['--help']))"
    helped = subprocess.run(
        [venv / "bin" / "python", "-c", code], cwd=release, capture_output=True, text=True, timeout=120
    )
    assert helped.returncode == 0, helped.stderr
    return set(re.findall(r"(?<![\w-])--[a-z][\w-]*", helped.stdout))


def readme_errors(release: Path, venv: Path) -> list[str]:
    """What the release's README and its pages of docs/ name that the release does not have, one line
    each. Code spans name paths from the repository's root; links are relative to their page."""
    spans, cells, targets = [], [], []
    for page in ["README.md", *sorted(str(p.relative_to(release)) for p in (release / "docs").glob("*.md"))]:
        page_spans, page_cells, page_targets = inline_names((release / page).read_text())
        spans, cells = spans + page_spans, cells + page_cells
        targets += [
            posixpath.normpath(posixpath.join(posixpath.dirname(page), t))
            for t in page_targets
            if "://" not in t and not t.startswith("#")
        ]
    named_targets, named_options = named_commands(spans, cells)
    missing = sorted(path for path in named_paths(spans, targets) if not shipped(release, path))
    errors = [f"names {path}, which the release does not ship" for path in missing]
    errors += [f"names make {t}, not a target of its Makefile" for t in sorted(named_targets - make_targets(release))]
    unknown = sorted(named_options - grade_options(release, venv))
    return errors + [f"names grade {option}, not an option of grade --help" for option in unknown]


@pytest.mark.slow
def test_the_learner_readme_names_only_what_the_release_ships(release, release_venv):
    assert readme_errors(release, release_venv) == []
    assert ".github/workflows/grade.yml" in (release / "README.md").read_text()  # the workflow it ships, by name


@pytest.mark.slow
def test_the_readme_check_flags_what_a_release_lacks(release, release_venv, tmp_path):
    copy = tmp_path / "learner"
    subprocess.run(["cp", "-a", str(release), str(copy)], check=True)
    (copy / "README.md").write_text(
        "Run `make bench` or `grade --frobnicate`; see `tests/sandbox/test_sandbox.py`,\n"
        "[the CI](.github/workflows/ci.yml) and `.venv/bin/python bench/grade_speed.py`.\n\n"
        "| option | meaning |\n|---|---|\n| `--bogus N` | none |\n"
    )
    assert readme_errors(copy, release_venv) == [
        "names .github/workflows/ci.yml, which the release does not ship",
        "names bench/grade_speed.py, which the release does not ship",
        "names tests/sandbox/test_sandbox.py, which the release does not ship",
        "names make bench, not a target of its Makefile",
        "names grade --bogus, not an option of grade --help",
        "names grade --frobnicate, not an option of grade --help",
    ]


def test_the_learner_make_test_installs_only_the_learner_test_extra(release):
    planned = subprocess.run(
        ["make", "-n", "test", "VENV=.venv-planned"], cwd=release, capture_output=True, text=True, timeout=60
    )
    assert planned.returncode == 0, planned.stderr
    assert 'pip install -e ".[play,learner-test]"' in planned.stdout and "[dev]" not in planned.stdout
    assert "learner-test" in (release / "README.md").read_text()  # and its README says so


def test_the_learner_readme_leaves_out_instructor_text():
    from grader.host.tools.release import ReleaseError, learner_readme

    readme = (
        "# Course\n\n## Feedback\n\nBoth.\n\n<!-- instructors -->\nRun `bench/x.py`.\n<!-- /instructors -->\n\n"
        "By grade.yml.\n\n| a | b |\n|---|---|\n| x | y |\n| `--solutions` | z <!-- instructors --> |\n"
    )
    template = "# For learners\n\n<!-- include: Feedback -->\n"
    expected = "# For learners\n\n## Feedback\n\nBoth.\n\nBy grade.yml.\n\n| a | b |\n|---|---|\n| x | y |\n"
    assert learner_readme(template, readme) == expected
    with pytest.raises(ReleaseError, match="has no partner"):
        learner_readme(template, readme.replace("<!-- instructors -->\nRun", "Run"))
