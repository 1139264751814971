"""The notebooks: one per part, released by nbgrader without solutions, autograded by nbgrader."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import REPO, SOLUTIONS
from test_release import solution_lines

from grader.checks import PARTS, registry

ASSIGNMENT = "gpt2"


def nbgrader(course: Path, *commands: list[str]) -> None:
    """nbgrader commands run side by side in the course directory; each must succeed."""
    path = (
        f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # nbgrader runs alembic from this venv
    )
    running = [
        subprocess.Popen(
            [sys.executable, "-m", "nbgrader", *args],
            cwd=course,
            env={**os.environ, "PATH": path},
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


@pytest.fixture(scope="module")
def course(tmp_path_factory, reference) -> Path:
    root = tmp_path_factory.mktemp("course")
    (root / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.root = {str(root)!r}\nc.Execute.timeout = 600\n"
    )
    generated = subprocess.run(
        [sys.executable, "-m", "grader.notebooks", str(root / "source" / ASSIGNMENT)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert generated.returncode == 0, generated.stderr
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
    from grader.notebooks import run_exercise

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModuleNotFoundError) as raised:
        run_exercise(Path("notebook_exercises"), "block.py", "from .attention import Attention\n")
    assert (
        str(raised.value) == "No module named 'notebook_exercises.attention': run 1-model.ipynb's attention cell first"
    )
