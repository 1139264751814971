"""Generate the learner's `exercises/` from `solutions/` with nbgrader's ClearSolutions.

Each solution file is wrapped in a one-cell notebook marked as an nbgrader solution cell, so the
regions between `### BEGIN SOLUTION` and `### END SOLUTION` are replaced by nbgrader itself.

    python -m grader.host.tools.stubs            # rewrite exercises/ from solutions/
    python -m grader.host.tools.stubs --check    # exit 1 when exercises/ is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.shared.paths import REPO_ROOT

STUB = "# TODO: implement this (see the docstring above)\nraise NotImplementedError()"


def strip_solutions(source: str) -> str:
    """The source with every solution region replaced by the TODO stub."""
    import nbformat
    from nbgrader.preprocessors import ClearSolutions

    clear = ClearSolutions(code_stub={"python": STUB})
    if clear.begin_solution_delimeter not in source:
        return source  # nbgrader would replace a solution cell without regions wholesale
    cell = nbformat.v4.new_code_cell(
        source,
        metadata={
            "nbgrader": {"solution": True, "grade": False, "locked": False, "grade_id": "source", "schema_version": 3}
        },
    )
    notebook = nbformat.v4.new_notebook(
        cells=[cell], metadata={"kernelspec": {"language": "python", "name": "python3", "display_name": "Python 3"}}
    )
    stripped, _ = clear.preprocess(notebook, {})
    return stripped.cells[0].source


def expected_exercises(solutions: Path) -> dict[str, str]:
    """File name -> the text `exercises/` should hold for it."""
    return {path.name: strip_solutions(path.read_text()) for path in sorted(solutions.glob("*.py"))}


def out_of_sync(solutions: Path, exercises: Path) -> list[str]:
    """Names of exercise files that are missing, stale or extra."""
    wanted = expected_exercises(solutions)
    present = {path.name for path in exercises.glob("*.py")}
    stale = [name for name, text in wanted.items() if name not in present or (exercises / name).read_text() != text]
    return sorted(stale + list(present - set(wanted)))


def write_exercises(solutions: Path, exercises: Path) -> None:
    exercises.mkdir(parents=True, exist_ok=True)
    for name, text in expected_exercises(solutions).items():
        (exercises / name).write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.host.tools.stubs", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether exercises/ is in sync")
    parser.add_argument("--solutions", type=Path, default=REPO_ROOT / "solutions")
    parser.add_argument("--exercises", type=Path, default=REPO_ROOT / "exercises")
    args = parser.parse_args(argv)
    if args.check:
        stale = out_of_sync(args.solutions, args.exercises)
        for name in stale:
            print(f"exercises/{name} is out of sync with solutions/ (run: python -m grader.host.tools.stubs)")
        return 1 if stale else 0
    write_exercises(args.solutions, args.exercises)
    return 0


if __name__ == "__main__":
    sys.exit(main())
