"""The notebooks: one per part, released by nbgrader without solutions, autograded by nbgrader, and their
grades recorded from outside any kernel."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import warnings
from pathlib import Path

import jsonschema
import nbformat
import pytest
from repo import EXERCISES, REPO, SOLUTIONS, run_grade, stubs
from test_release import solution_lines

from grader.checks import PARTS, registry

ASSIGNMENT = "gpt2"


SCRIPTS = Path(sysconfig.get_path("scripts"))  # this environment's commands: nbgrader, alembic


def path_without_alembic() -> str:
    """PATH less the directories that hold an `alembic`: as for an instructor whose environment is not activated."""
    return os.pathsep.join(
        folder for folder in os.environ.get("PATH", "").split(os.pathsep) if not (Path(folder) / "alembic").exists()
    )


def nbgrader(course: Path, *commands: list[str]) -> None:
    """nbgrader commands run side by side in the course directory, each of which must succeed. Run as the instructors'
    page has them, the environment not activated (`.venv/bin/nbgrader`, no alembic on PATH): the config finds it."""
    running = [
        subprocess.Popen(
            [str(SCRIPTS / "nbgrader"), *args],
            cwd=course,
            env={**os.environ, "PATH": path_without_alembic()},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in commands
    ]
    for process in running:
        _, stderr = process.communicate(timeout=900)
        assert process.returncode == 0, stderr[-3000:]


def parts_with_sources() -> dict[str, list]:
    """Notebook name -> the checks of each part whose solution files exist."""
    checks = registry()
    parts = {f"{n}-{part}.ipynb": [c for c in checks if c.part == part] for n, part in enumerate(PARTS, start=1)}
    return {
        name: graded
        for name, graded in parts.items()
        if all((SOLUTIONS / f"{c.target.file}.py").is_file() for c in graded)
    }


def nbgrader_cells(notebook, **flags) -> list:
    return [
        cell
        for cell in notebook.cells
        if all(cell.metadata.get("nbgrader", {}).get(key) == value for key, value in flags.items())
    ]


SOURCE = "git+https://example.org/course/gpt2-learner"
NOTEBOOKS = [sys.executable, "-m", "grader.host.platforms.nbgrader.notebooks"]  # the command


@pytest.fixture(scope="module")
def course(tmp_path_factory, reference) -> Path:
    root = tmp_path_factory.mktemp("course")
    generated = subprocess.run(
        [*NOTEBOOKS, str(root / "source" / ASSIGNMENT), "--source", SOURCE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert generated.returncode == 0, generated.stderr
    assert str(root / "nbgrader_config.py") in generated.stdout.splitlines()  # nbgrader runs by it from here on
    nbgrader(root, ["generate_assignment", ASSIGNMENT, "--force"])
    return root


@pytest.fixture(scope="module")
def scores(course) -> dict:
    """(student, notebook) -> (score, max score) after `nbgrader autograde` of two submissions:
    the source notebooks (the solutions filled in) and the released notebooks untouched. The two
    are graded side by side, each into its own copy of the gradebook."""
    from nbgrader.api import Gradebook

    students = {"filled": "source", "untouched": "release"}
    for student, folder in students.items():
        shutil.copytree(course / folder / ASSIGNMENT, course / "submitted" / student / ASSIGNMENT)
        shutil.copy(course / "gradebook.db", course / f"{student}.db")
    nbgrader(
        course,
        *(
            ["autograde", ASSIGNMENT, "--student", student, "--db", f"sqlite:///{course / f'{student}.db'}"]
            for student in students
        ),
    )
    scores = {}
    for student in students:
        with Gradebook(f"sqlite:///{course / f'{student}.db'}") as gradebook:
            for name in parts_with_sources():
                result = gradebook.find_submission_notebook(Path(name).stem, ASSIGNMENT, student)
                scores[(student, name)] = (result.score, result.max_score)
    return scores


@pytest.mark.slow
def test_one_notebook_per_part_with_a_test_cell_per_check(course):
    notebooks = sorted(path.name for path in (course / "source" / ASSIGNMENT).glob("*.ipynb"))
    assert "1-model.ipynb" in notebooks and notebooks == sorted(parts_with_sources())
    for name, checks in parts_with_sources().items():
        notebook = nbformat.read(course / "source" / ASSIGNMENT / name, as_version=4)
        nbformat.validate(notebook)
        tests = {
            cell.source: cell.metadata.nbgrader.points for cell in nbgrader_cells(notebook, grade=True, locked=True)
        }
        assert tests == {f'grade_check("{check.id}")': check.points for check in checks}
        exercises = [cell.source for cell in nbgrader_cells(notebook, solution=True, grade=False)]
        assert {source.splitlines()[0] for source in exercises} == {
            f"%%exercise {check.target.file}.py" for check in checks
        }
        assert all("### BEGIN SOLUTION" in source for source in exercises)


@pytest.mark.slow
def test_the_released_notebooks_hold_no_solution_text(course):
    hidden = solution_lines()
    for name in parts_with_sources():
        notebook = nbformat.read(course / "release" / ASSIGNMENT / name, as_version=4)
        for cell in notebook.cells:
            leaked = [line.strip() for line in cell.source.splitlines() if line.strip() in hidden]
            assert leaked == [], f"{name} still holds solution lines: {leaked[:3]}"
        exercises = nbgrader_cells(notebook, solution=True)
        assert exercises and all(
            "raise NotImplementedError()" in cell.source and "SOLUTION" not in cell.source for cell in exercises
        )


@pytest.mark.slow
def test_autograde_gives_the_filled_notebooks_full_marks_and_the_released_ones_none(course, scores):
    for name, checks in parts_with_sources().items():
        points = sum(check.points for check in checks)
        assert scores[("filled", name)] == (points, points)
        assert scores[("untouched", name)] == (0, points)
        # None for the right reason: each test cell of the untouched notebook says its check is todo.
        graded = nbformat.read(course / "autograded" / "untouched" / ASSIGNMENT / name, as_version=4)
        tests = {cell.source: cell for cell in nbgrader_cells(graded, grade=True)}
        for check in checks:
            errors = [output for output in tests[f'grade_check("{check.id}")'].outputs if output.output_type == "error"]
            assert [(error.ename, error.evalue.split(": ")[:2]) for error in errors] == [
                ("AssertionError", [check.id, "todo"])
            ]


def test_a_cell_run_before_the_one_it_imports_names_that_notebook(tmp_path, monkeypatch):
    """A later part imports an earlier one's module: the error says which notebook's cell to run."""
    from grader.host.platforms.nbgrader.notebooks import run_exercise

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModuleNotFoundError) as raised:
        run_exercise(Path("notebook_exercises"), "block.py", "from .attention import Attention\n")
    assert (
        str(raised.value) == "No module named 'notebook_exercises.attention': run 1-model.ipynb's attention cell first"
    )


def test_the_random_reference_notice_is_shown_by_the_first_test_cell_only(tmp_path, monkeypatch, capsys):
    from grader.checks import registry
    from grader.host.platforms.nbgrader import notebooks
    from grader.host.results import CheckResult, Report

    def graded(package, check_ids):
        results = [CheckResult(c.id, c.part, c.summary, "pass", c.points) for c in registry() if c.id in check_ids]
        return Report("random", str(package), results, fallback_reason="offline")

    monkeypatch.setattr(notebooks, "grade_in_own_process", graded)
    grader = notebooks.NotebookGrader(tmp_path)
    shown = []
    for check_id in ("embed", "pos_embed", "layernorm"):
        grader.grade_check(check_id)
        shown.append(capsys.readouterr().out)
    assert ["RANDOM model" in " ".join(out.split()) for out in shown] == [True, False, False]
    assert all("PASS" in out for out in shown)


# --- the grades recorded outside any kernel -------------------------------------------------------

RECORDED_CHECKS = ("attention.causal_mask", "kv_cache")  # one per notebook of parts 1 and 2: kv_cache imports part 1
# Cells a learner adds below the setup cell (no nbgrader metadata), each forging the kernel's verdict.
FORGERIES = {
    "patched": """import grader.host.platforms.nbgrader.notebooks
from grader.checks import registry
from grader.host.results import CheckResult, Report


def forged(package, check_ids):
    passed = [CheckResult(c.id, c.part, c.summary, "pass", c.points) for c in registry() if c.id in check_ids]
    return Report("gpt2", str(package), passed)


grader.host.platforms.nbgrader.notebooks.grade_in_own_process = forged
""",
    "redefined": 'def grade_check(check_id):\n    print(check_id, "passes")\n',
}


def with_cell(notebook, source: str, after: str = "setup"):
    """The notebook with a learner's code cell added below the cell whose grade id is `after`."""
    ids = [cell.metadata.get("nbgrader", {}).get("grade_id") for cell in notebook.cells]
    notebook.cells.insert(ids.index(after) + 1, nbformat.v4.new_code_cell(source))
    return notebook


def test_the_recorded_package_holds_the_exercise_cells_and_nothing_else(tmp_path):
    """The package graded for the record is what the notebooks' `%%exercise` cells of graded files write:
    a learner's other cells, a rewritten given file and a cell naming a file outside the package stay out."""
    from grader.host.platforms.nbgrader.grades import write_package
    from grader.host.platforms.nbgrader.sources import source_notebooks

    notebooks, _ = source_notebooks(SOLUTIONS)
    first = next(iter(notebooks))
    with_cell(notebooks[first], FORGERIES["patched"])
    with_cell(notebooks[first], '%%exercise config.py\n"""rewritten"""\n')
    with_cell(notebooks[first], '%%exercise ../outside.py\n"""outside"""\n')
    submitted = tmp_path / ASSIGNMENT
    submitted.mkdir()
    for name, notebook in notebooks.items():
        nbformat.write(notebook, submitted / name)

    write_package(sorted(submitted.glob("*.ipynb")), tmp_path / "learner" / "exercises")
    graded = {f"{check.target.file}.py" for check in registry()}
    # write_package takes the files no cell writes from the repository's exercises/, whatever they hold by now.
    expected = {
        path.name: ((SOLUTIONS if path.name in graded else EXERCISES) / path.name).read_text()
        for path in EXERCISES.glob("*.py")
    }
    written = {path.relative_to(tmp_path / "learner").as_posix(): path.read_text() for path in tmp_path.rglob("*.py")}
    assert written == {f"exercises/{name}": text for name, text in expected.items()}
    # The control: those cells are in the notebook the package was taken from.
    cells = "".join(cell.source for cell in nbformat.read(submitted / first, as_version=4).cells)
    assert all(text in cells for text in ("grade_in_own_process = forged", '"""rewritten"""', '"""outside"""'))


def test_recording_a_learner_new_to_the_gradebook_warns_of_nothing(tmp_path, monkeypatch):
    """nbgrader's own way to add a submission, under SQLAlchemy 2, warned three times (SAWarning: ... not in session,
    add operation ... will not proceed) as the grades of a learner new to the gradebook were written. Written as
    nbgrader has it: every part's test cells get the learner's points."""
    from nbgrader.api import Gradebook

    from grader.host.platforms.nbgrader.grades import write_gradebook
    from grader.host.platforms.nbgrader.sources import grade_cell_id, notebook_name
    from grader.host.tools.batch import Submission

    monkeypatch.setenv("PATH", f"{SCRIPTS}{os.pathsep}{os.environ.get('PATH', '')}")  # nbgrader makes it with alembic
    database, checks = f"sqlite:///{tmp_path / 'gradebook.db'}", registry()
    notebooks = {check.id: Path(notebook_name(check.part)).stem for check in checks}
    with Gradebook(database) as gradebook:  # what `nbgrader generate_assignment` records of the assignment
        gradebook.add_assignment(ASSIGNMENT)
        for notebook in dict.fromkeys(notebooks.values()):
            gradebook.add_notebook(notebook, ASSIGNMENT)
        for check in checks:
            gradebook.add_grade_cell(
                grade_cell_id(check.id), notebooks[check.id], ASSIGNMENT, max_score=check.points, cell_type="code"
            )
    passed = [check for check in checks if check.part == "model"]
    report = {"checks": [{"id": check.id, "status": "pass", "points": check.points} for check in passed]}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write_gradebook(database, ASSIGNMENT, [Submission("ada", report)], checks)
    assert [f"{warning.category.__name__}: {warning.message}" for warning in caught] == []
    with Gradebook(database) as gradebook:
        scores = {
            check.id: gradebook.find_grade(grade_cell_id(check.id), notebooks[check.id], ASSIGNMENT, "ada").score
            for check in checks
        }
    assert scores == {check.id: check.points if check in passed else 0 for check in checks}


def test_the_recorded_grades_are_also_one_json_result_per_learner_as_batch_writes_them(reference, tmp_path):
    """Beside the CSV, FILE-results/LEARNER.json, as batch writes them, so that a class view reads the notebooks'
    grades as it reads batch's: a learner whose notebooks are graded, and one whose notebook cannot be read."""
    from grader.host.platforms.nbgrader.notebooks import main
    from grader.host.platforms.nbgrader.sources import source_notebooks

    submitted = tmp_path / "submitted"
    notebooks, _ = source_notebooks(SOLUTIONS)
    (submitted / "solved" / ASSIGNMENT).mkdir(parents=True)
    for name, notebook in notebooks.items():
        nbformat.write(notebook, submitted / "solved" / ASSIGNMENT / name)
    (submitted / "unread" / ASSIGNMENT).mkdir(parents=True)
    (submitted / "unread" / ASSIGNMENT / "1-model.ipynb").write_text("not a notebook")
    command = ["grade", str(submitted), "embed", "--csv", str(tmp_path / "grades.csv"), "--reference", "random"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(command) == 0

    with open(tmp_path / "grades.csv", newline="") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    results = {path.name: json.loads(path.read_text()) for path in (tmp_path / "grades-results").iterdir()}
    assert sorted(results) == ["solved.json", "unread.json"] and sorted(rows) == ["solved", "unread"]
    for student, row in rows.items():
        result = results[f"{student}.json"]
        assert sorted(result) == ["error", "max_score", "report", "score", "submission"]  # batch's Submission.to_dict
        assert [result["submission"], str(result["score"]), str(result["max_score"]), result["error"] or ""] == [
            student,
            row["score"],
            row["max_score"],
            row["error"],
        ]
    solved = results["solved.json"]["report"]
    jsonschema.validate(solved, json.loads((REPO / "grader" / "schemas" / "report.schema.json").read_text()))
    assert [(check["id"], check["status"]) for check in solved["checks"]] == [("embed", "pass")]
    assert solved["package"] == str(submitted / "solved" / ASSIGNMENT)  # the notebooks, not the scratch package
    assert results["unread.json"]["report"] is None
    assert results["unread.json"]["error"].startswith("1-model.ipynb is not a notebook nbformat reads")


@pytest.fixture(scope="module")
def recorded(course, tmp_path_factory) -> dict:
    """`python -m grader.host.platforms.nbgrader.notebooks grade` over four learners' notebooks, into a CSV and a copy
    of the course's gradebook in which autograde's in-kernel verdict already gave the forging learners full
    marks: "solved" (the source notebooks), "stubbed" (the released ones untouched), and the released
    ones with a forging cell in the first notebook ("patched", "redefined")."""
    from nbgrader.api import Gradebook

    root = tmp_path_factory.mktemp("recorded")
    submitted = root / "submitted"
    for student, folder in {"solved": "source", "stubbed": "release", **dict.fromkeys(FORGERIES, "release")}.items():
        shutil.copytree(course / folder / ASSIGNMENT, submitted / student / ASSIGNMENT)
    for student, source in FORGERIES.items():
        path = submitted / student / ASSIGNMENT / "1-model.ipynb"
        nbformat.write(with_cell(nbformat.read(path, as_version=4), source), path)
    database = f"sqlite:///{root / 'gradebook.db'}"
    shutil.copy(course / "gradebook.db", root / "gradebook.db")
    with Gradebook(database) as gradebook:  # what autograde records for a forging notebook (the control below)
        for student in FORGERIES:
            gradebook.update_or_create_student(student)
            with gradebook.db.no_autoflush:  # as write_gradebook adds a submission: no SAWarning
                gradebook.update_or_create_submission(ASSIGNMENT, student)
            for check in registry():
                grade = gradebook.find_grade(
                    f"check-{check.id.replace('.', '-')}",
                    f"{list(PARTS).index(check.part) + 1}-{check.part}",
                    ASSIGNMENT,
                    student,
                )
                grade.auto_score = check.points
        gradebook.db.commit()
    command = [*NOTEBOOKS, "grade", str(submitted), *RECORDED_CHECKS]
    command += ["--csv", str(root / "grades.csv"), "--db", database, "--reference", "random", "--jobs", "2"]
    ran = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "Warning" not in ran.stderr  # two of the learners are new to the gradebook (see write_gradebook)
    with open(root / "grades.csv", newline="") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    return {"root": root, "rows": rows, "database": database, "submitted": submitted}


@pytest.mark.slow
def test_the_recorded_grade_is_what_the_exercise_cells_earn_whatever_the_other_cells_forge(recorded, tmp_path):
    """The CSV's numbers are those of grading the package directly: solutions/ for the solved notebooks,
    the stubs for the others, a forging cell or not."""
    direct = {}
    for name, package in {"solutions": SOLUTIONS, "exercises": stubs()}.items():
        ran = run_grade(
            *RECORDED_CHECKS, "--exercises", str(package), "--reference", "random", "--json", str(tmp_path / name)
        )
        assert ran.returncode in (0, 1), ran.stderr
        direct[name] = json.loads((tmp_path / name).read_text())
    points = {check.id: check.points for check in registry() if check.id in RECORDED_CHECKS}
    assert direct["solutions"]["score"] == sum(points.values()) and direct["exercises"]["score"] == 0
    rows = recorded["rows"]
    assert sorted(rows) == ["patched", "redefined", "solved", "stubbed"]
    for student, row in rows.items():
        report = direct["solutions" if student == "solved" else "exercises"]
        assert row == {
            "student": student,
            **{check["id"]: check["status"] for check in report["checks"]},
            **{f"{check['id']} points": str(check["points"]) for check in report["checks"]},
            "flag": "",  # no executed notebooks beside submitted/: nothing to hold the recorded grade against
            "score": str(report["score"]),
            "max_score": str(report["max_score"]),
            "error": "",
        }


@pytest.mark.slow
def test_the_gradebook_holds_the_recorded_grades_in_place_of_the_forged_ones(recorded):
    from nbgrader.api import Gradebook

    earned = {"solved": True, "stubbed": False, "patched": False, "redefined": False}
    with Gradebook(recorded["database"]) as gradebook:
        for student, passed in earned.items():
            for check in registry():
                grade = gradebook.find_grade(
                    f"check-{check.id.replace('.', '-')}",
                    f"{list(PARTS).index(check.part) + 1}-{check.part}",
                    ASSIGNMENT,
                    student,
                )
                if check.id in RECORDED_CHECKS:
                    assert grade.auto_score == (check.points if passed else 0), (student, check.id)
                else:  # not graded by this run: left as it was
                    assert grade.auto_score == (check.points if student in FORGERIES else None), (student, check.id)


@pytest.mark.slow
@pytest.mark.parametrize("student", sorted(FORGERIES))
def test_the_control_in_the_kernel_the_forging_cell_wins_every_test_cell(recorded, student, tmp_path):
    """Run in a kernel, as autograde runs it, the forging notebook scores every test cell in full
    (nbgrader's own rule: a test cell without an error gets its points), its stubs notwithstanding."""
    from nbclient import NotebookClient
    from nbgrader.utils import determine_grade

    notebook = nbformat.read(recorded["submitted"] / student / ASSIGNMENT / "1-model.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}).execute()
    tests = nbgrader_cells(notebook, grade=True)
    assert len(tests) == sum(check.part == "model" for check in registry())
    assert [determine_grade(cell) for cell in tests] == [(cell.metadata.nbgrader.points,) * 2 for cell in tests]
    stubs = nbgrader_cells(notebook, solution=True)
    assert stubs and all("raise NotImplementedError()" in cell.source for cell in stubs)


@pytest.mark.slow
def test_the_setup_cell_installs_from_the_source_given(course):
    import nbformat

    setup = nbformat.read(course / "source" / ASSIGNMENT / "1-model.ipynb", as_version=4).cells[1].source
    assert f'"gpt2-from-scratch-grader @ {SOURCE}"' in setup


def run_config(text: str, monkeypatch) -> tuple[float, str | None]:
    """The cells' time limit a config sets, and the `alembic` that nbgrader, run with it, finds on PATH when started
    with none there."""
    monkeypatch.setenv("PATH", path_without_alembic())
    assert shutil.which("alembic") is None  # the control: without the config, nbgrader's new gradebook fails
    settings = {}
    exec(text, {"get_config": lambda: type("Config", (), {"Execute": type("E", (), {})})()}, settings)
    return settings["c"].Execute.timeout, shutil.which("alembic")


def test_the_generated_config_gives_a_cell_time_for_the_slowest_check_and_a_reference_build(tmp_path, monkeypatch):
    from grader.checks import registry
    from grader.host.limits import DEFAULT_TIMEOUT
    from grader.host.platforms.nbgrader.sources import course_root, write_config

    (tmp_path / "course" / "source" / "gpt2").mkdir(parents=True)
    config, written = write_config(course_root(tmp_path / "course" / "source" / "gpt2"))
    assert written and config == tmp_path / "course" / "nbgrader_config.py"
    timeout, alembic = run_config(config.read_text(), monkeypatch)
    assert timeout >= max(check.run.min_timeout or DEFAULT_TIMEOUT for check in registry()) + 300
    assert alembic == str(SCRIPTS / "alembic")  # the one installed with nbgrader, whose migrations import it
    config.write_text("c = get_config()  # the instructor's own\n")
    assert write_config(tmp_path / "course") == (config, False) and "own" in config.read_text()


def test_an_instructor_s_own_config_is_told_the_settings_it_needs(tmp_path, monkeypatch):
    """What the command prints for a config it keeps: run as a config, those lines do what the generated one does."""
    from grader.host.platforms.nbgrader.notebooks import main
    from grader.host.platforms.nbgrader.sources import cell_time_limit

    (tmp_path / "course" / "nbgrader_config.py").parent.mkdir()
    (tmp_path / "course" / "nbgrader_config.py").write_text("c = get_config()  # the instructor's own\n")
    with contextlib.redirect_stdout(io.StringIO()) as printed, contextlib.redirect_stderr(io.StringIO()):
        assert main([str(tmp_path / "course" / "source" / ASSIGNMENT), "--source", SOURCE]) == 0
    said = printed.getvalue().split(" exists and is kept; it needs these settings (a longer timeout will do):\n")
    assert len(said) == 2 and said[0].endswith(str(tmp_path / "course" / "nbgrader_config.py"))
    assert run_config(textwrap.dedent(said[1]), monkeypatch) == (cell_time_limit(), str(SCRIPTS / "alembic"))


@pytest.mark.parametrize(
    ("origin", "source"),
    [
        ("https://github.com/ada/gpt2-learner.git", "git+https://github.com/ada/gpt2-learner"),
        ("git@github.com:ada/gpt2-learner.git", "git+https://github.com/ada/gpt2-learner"),
        ("/srv/git/gpt2-learner", None),
        (None, None),
    ],
)
def test_the_default_source_is_the_checkout_s_origin(origin, source, tmp_path):
    from grader.host.platforms.nbgrader.sources import repository_source

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    if origin:
        subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", origin], check=True)
    assert repository_source(tmp_path) == source


# --- a recorded grade the notebook's kernel disagrees with is flagged -------------------------------------------


def executed_notebook(tmp_path: Path, cells: list) -> Path:
    """autograded/LEARNER/gpt2/ holding one executed notebook made of `cells`."""
    folder = tmp_path / "autograded" / "ada" / ASSIGNMENT
    folder.mkdir(parents=True)
    # As the kernel left it, valid or not: nbformat.write would refuse the strange cells of a hostile notebook.
    notebook = {**nbformat.v4.new_notebook(), "cells": cells}
    (folder / "1-model.ipynb").write_text(json.dumps(notebook))
    return folder


def graded_cell(check_id: str, *outputs) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(f'grade_check("{check_id}")', outputs=list(outputs))
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": f"check-{check_id.replace('.', '-')}", "locked": True}
    return cell


def test_the_kernel_s_score_is_read_strictly_from_the_test_cells_outputs(tmp_path):
    """A test cell earns its check's points in the kernel unless an error or stderr is among its outputs (nbgrader's
    rule); a test cell seen twice, a cell no check grades and a check's grade id on a cell without outputs are not
    counted; a notebook whose cells are not a kernel's (outputs that are no list) is not read at all."""
    from grader.checks import select
    from grader.host.platforms.nbgrader.grades import kernel_flag, kernel_points
    from grader.host.tools.batch import Submission

    error = nbformat.v4.new_output("error", ename="AssertionError", evalue="embed: todo", traceback=[])
    stderr = nbformat.v4.new_output("stream", name="stderr", text="warned")
    stdout = nbformat.v4.new_output("stream", name="stdout", text="embed passes")
    cells = [
        graded_cell("embed", stdout),
        graded_cell("pos_embed", error),
        graded_cell("layernorm", stderr),
        graded_cell("attention"),
        graded_cell("gelu_new", stdout),
        graded_cell("gelu_new", stdout),
        graded_cell("no_such_check", stdout),
        nbformat.v4.new_markdown_cell("a learner's note"),
        nbformat.v4.new_markdown_cell("no outputs", metadata={"nbgrader": {"grade_id": "check-mlp"}}),
    ]
    folder = executed_notebook(tmp_path / "valid", cells)
    points = {check.id: check.points for check in select(["model"])}
    shown = kernel_points(sorted(folder.glob("*.ipynb")), select(["model"]))
    assert shown == {"embed": points["embed"], "pos_embed": 0, "layernorm": 0, "attention": points["attention"]}

    strange = graded_cell("embed")
    strange["outputs"] = {"output_type": "stream", "name": "stdout", "text": "passes"}  # not a list of outputs
    folder = executed_notebook(tmp_path / "strange", [strange])
    flag = kernel_flag(folder, Submission("ada", {"checks": []}), select(["embed"]))
    assert flag.startswith("the executed notebooks could not be read: 1-model.ipynb is not a notebook nbformat reads")


def test_a_flag_says_what_the_kernel_showed_and_what_was_recorded(tmp_path):
    from grader.checks import select
    from grader.host.platforms.nbgrader.grades import MAX_NOTEBOOK_BYTES, kernel_flag
    from grader.host.tools.batch import Submission

    checks = select(["embed", "pos_embed", "layernorm"])  # 1, 1 and 2 points
    folder = executed_notebook(tmp_path, [graded_cell(check.id) for check in checks])
    recorded = {"checks": [{"id": "embed", "status": "pass", "points": 1}]}
    assert kernel_flag(folder, Submission("ada", recorded), checks) == (
        "the notebook showed 4/4 when run; the grader recorded 1/4"
    )
    everything = {"checks": [{"id": c.id, "status": "pass", "points": c.points} for c in checks]}
    assert kernel_flag(folder, Submission("ada", everything), checks) == ""
    assert kernel_flag(tmp_path / "no-such-folder", Submission("ada", recorded), checks) == ""
    with open(folder / "1-model.ipynb", "ab") as handle:  # the kernel's notebook is the learner's data: bounded
        handle.truncate(MAX_NOTEBOOK_BYTES + 1)
    assert kernel_flag(folder, Submission("ada", recorded), checks) == (
        "the executed notebooks could not be read: 1-model.ipynb is not a regular file under 50 MB"
    )


FLAGGED_CHECKS = ("attention.causal_mask", "layernorm")  # 1 and 2 points: 1-model.ipynb's


@pytest.mark.slow
def test_a_learner_whose_cell_redefines_the_grading_function_is_flagged(course, tmp_path):
    """The issue's case, with nbgrader's own autograde: a learner's cell redefines grade_check, so every test cell of
    1-model.ipynb passes in the kernel while the grader records the stubs' 0. The gradebook CSV says so in `flag`,
    just before `score`; a learner whose kernel agrees with the record (the stubs, failing in both) is not flagged."""
    submitted = tmp_path / "submitted"
    learners = {"redefined": FORGERIES["redefined"], "stubbed": None}
    for student, forgery in learners.items():
        notebook = nbformat.read(course / "release" / ASSIGNMENT / "1-model.ipynb", as_version=4)
        (submitted / student / ASSIGNMENT).mkdir(parents=True)
        nbformat.write(
            with_cell(notebook, forgery) if forgery else notebook, submitted / student / ASSIGNMENT / "1-model.ipynb"
        )
        shutil.copytree(submitted / student, course / "submitted" / student)
        shutil.copy(course / "gradebook.db", course / f"{student}.db")
    nbgrader(
        course,
        *(
            [
                "autograde",
                ASSIGNMENT,
                "--student",
                student,
                "--notebook",
                "1-model",
                "--db",
                f"sqlite:///{course / f'{student}.db'}",
            ]
            for student in learners
        ),
    )
    command = [*NOTEBOOKS, "grade", str(submitted), *FLAGGED_CHECKS]
    command += ["--csv", str(tmp_path / "grades.csv"), "--autograded", str(course / "autograded")]
    ran = subprocess.run(
        command + ["--reference", "random", "--jobs", "2"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    with open(tmp_path / "grades.csv", newline="") as handle:
        header, *rows = list(csv.reader(handle))
    assert header[header.index("score") - 1] == "flag"
    flags = {row[0]: row[header.index("flag")] for row in rows}
    scores = {row[0]: row[header.index("score")] for row in rows}
    assert scores == {"redefined": "0", "stubbed": "0"}
    assert flags == {"redefined": "the notebook showed 3/3 when run; the grader recorded 0/3", "stubbed": ""}
