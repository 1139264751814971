"""`python -m grader.host.platforms.nbgrader.notebooks grade`: the submitted notebooks' grades, recorded from outside
any kernel (grader.host.platforms.nbgrader.notebooks says why). Each learner's `%%exercise` cells are read, never run,
into a package laid out like `exercises/`; grader.host.tools.batch's machinery grades it, and the points go into a
CSV, one JSON result per learner and, with `--db`, nbgrader's gradebook. The CSV flags a learner whose notebooks, as
autograde ran them in their kernel, showed another score: the evidence of a forged verdict.
"""

from __future__ import annotations

import argparse
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from grader.host.platforms.nbgrader.sources import grade_cell_id, notebook_name
from grader.shared.commands import tool_parser
from grader.shared.paths import REPO_ROOT

if TYPE_CHECKING:
    from grader.host.tools.batch import Submission

MAX_NOTEBOOK_BYTES = 50 * 2**20  # a generated notebook is tens of KB; with outputs and figures, a few MB


def graded_files() -> set[str]:
    """The files a check grades: the only ones a submitted notebook's cells are taken into."""
    from grader.checks import registry

    return {f"{check.target.file}.py" for check in registry()}


def exercise_cell(source: str) -> tuple[str, str] | None:
    """(FILE, body) of a cell that starts `%%exercise FILE`, split as IPython splits a cell magic
    (blank leading lines dropped); None for any other cell."""
    lines = source.splitlines(keepends=True)
    while lines and lines[0].isspace():
        lines.pop(0)
    magic, _, line = (lines or [""])[0].rstrip().partition(" ")
    return (line.strip(), "".join(lines[1:])) if magic == "%%exercise" else None


def read_submitted(path: Path):
    """A submitted notebook, read as hostile input: a regular file of a notebook's size that
    nbformat reads; ValueError saying why not."""
    import nbformat

    info = path.lstat()
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"{path.name} is not a regular file under {MAX_NOTEBOOK_BYTES // 2**20} MB")
    try:
        return nbformat.read(path, as_version=4)
    except Exception as error:  # nbformat raises anything from TypeError to jsonschema's errors on a bad file
        said = (str(error).splitlines() or [type(error).__name__])[0][:200]  # jsonschema's quote the whole file
        raise ValueError(f"{path.name} is not a notebook nbformat reads: {said}") from None


def exercise_sources(notebooks: list[Path]) -> dict[str, str]:
    """File name -> what running the notebooks' cells in order leaves in notebook_exercises/ for each
    graded file: the body of its last `%%exercise FILE` cell. No other cell's code is kept, so a cell
    that patches the grader or defines its own `grade_check` is never part of what is graded."""
    files, sources = graded_files(), {}
    for path in notebooks:
        for cell in read_submitted(path).get("cells", []):
            code = cell.get("source") if isinstance(cell, dict) and cell.get("cell_type") == "code" else None
            found = exercise_cell(code) if isinstance(code, str) else None
            if found and found[0] in files:
                sources[found[0]] = found[1]
    return sources


def write_package(notebooks: list[Path], package: Path) -> None:
    """The package a learner's notebooks amount to: the course's exercises/ (the given files, and the
    stub of any file no cell wrote) with each exercise cell written over its file."""
    sources = exercise_sources(notebooks)
    package.mkdir(parents=True)
    for path in (REPO_ROOT / "exercises").glob("*.py"):
        shutil.copyfile(path, package / path.name)
    for name, source in sources.items():
        (package / name).write_text(source)  # UnicodeEncodeError (lone surrogates) is a ValueError


def failed_in_kernel(outputs: object) -> bool | None:
    """nbgrader's rule for a test cell run in the kernel: an error, or anything written to stderr, loses its points.
    None where the outputs are not a list of output dicts (not what a kernel writes)."""
    if not isinstance(outputs, list) or not all(isinstance(output, dict) for output in outputs):
        return None
    return any(
        output.get("output_type") == "error"
        or (output.get("output_type") == "stream" and output.get("name") == "stderr")
        for output in outputs
    )


def field(node: object, key: str) -> object:
    """node[key] where node is a dict (a notebook's JSON, as the learner's kernel left it); None otherwise."""
    return node.get(key) if isinstance(node, dict) else None


def kernel_points(notebooks: list[Path], checks: list) -> dict[str, int]:
    """Check id -> the points its test cell showed when autograde ran the notebook in the learner's kernel, for each
    check whose test cell the executed notebooks hold once. The notebooks are the learner's data (their cells ran
    there): read as read_submitted reads them, a test cell known by its grade id alone, its points the check's."""
    by_cell = {grade_cell_id(check.id): check for check in checks}
    seen: dict[str, list[bool | None]] = {}
    for path in notebooks:
        for cell in read_submitted(path).get("cells", []):
            grade_id = field(field(field(cell, "metadata"), "nbgrader"), "grade_id")
            if isinstance(grade_id, str) and grade_id in by_cell:
                seen.setdefault(grade_id, []).append(failed_in_kernel(cell.get("outputs")))
    return {
        by_cell[grade_id].id: 0 if failed[0] else by_cell[grade_id].points
        for grade_id, failed in seen.items()
        if len(failed) == 1 and failed[0] is not None  # a test cell twice, or outputs no kernel writes: not known
    }


def kernel_flag(executed: Path, result: Submission, checks: list) -> str:
    """One line where the executed notebooks showed another score than the grader recorded, on the checks whose test
    cells they hold ("the notebook showed 73/73 when run; the grader recorded 0/73"); empty where they agree, or where
    the learner has no executed notebooks (autograde not run)."""
    notebooks = sorted(executed.glob("*.ipynb")) if executed.is_dir() else []
    if not notebooks:
        return ""
    try:
        shown = kernel_points(notebooks, checks)
    except (OSError, ValueError) as error:
        return f"the executed notebooks could not be read: {error}"
    points = {check.id: check.points for check in checks if check.id in shown}
    recorded = sum(result.points.get(check_id, 0) for check_id in points)
    if sum(shown.values()) == recorded:
        return ""
    total = sum(points.values())
    return f"the notebook showed {sum(shown.values())}/{total} when run; the grader recorded {recorded}/{total}"


def grade_packages(learners: list[Path], checks: list, args: argparse.Namespace, on_done) -> list[Submission]:
    """Each `learner/exercises/` graded as grader.host.tools.batch grades a checkout: by `grade` in a process group
    of its own, the sandbox required wherever this machine has one; on_done(result) as each is graded."""
    from grader.host.refcache import ensure_reference
    from grader.host.tools.batch import Options, grade_all, submission_time_limit
    from grader.shared.sandbox import status

    def say(message: str, fraction: float | None = None) -> None:
        print(message, file=sys.stderr)

    reference = ensure_reference(args.reference, say)
    if reference.fallback_reason:
        say(f"notebooks: grading against the random reference: {reference.fallback_reason}")
    confinement = status()
    if not confinement.on:
        say(f"notebooks: grading without the sandbox, so learner code can read the answers: {confinement.describe()}")
    sandbox_flags = ("--require-sandbox",) if confinement.on else ()
    time_limit = submission_time_limit(checks, args.timeout)
    options = Options(tuple(args.checks), reference.kind, args.timeout, time_limit, sandbox_flags)
    return grade_all(learners, checks, options, args.jobs, on_done)


def has_assignment(url: str, assignment: str) -> bool:
    """Whether nbgrader's gradebook knows the assignment (`nbgrader generate_assignment` adds it)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(url) as gradebook:
        try:
            gradebook.find_assignment(assignment)
        except MissingEntry:
            return False
    return True


def write_gradebook(url: str, assignment: str, results: list[Submission], checks: list) -> None:
    """Each check's points as the automatic score of its test cell in nbgrader's gradebook, in place
    of what autograde found in the kernel (a manual score still overrides it, as nbgrader has it). A
    learner whose grading failed gets 0: a grading that a learner's code stops must not leave
    autograde's score standing."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(url) as gradebook:
        for result in results:
            gradebook.update_or_create_student(result.name)
            # nbgrader builds a new submission (its notebooks, their grades) before it adds it to the session, reading
            # the assignment's notebooks meanwhile: under SQLAlchemy 2 (no backref cascade) each read autoflushed and
            # warned that the half-built objects were not in the session yet. Unflushed, they go in whole at the add.
            with gradebook.db.no_autoflush:
                gradebook.update_or_create_submission(assignment, result.name)
            points = result.points
            for check in checks:
                notebook = Path(notebook_name(check.part)).stem
                try:
                    grade = gradebook.find_grade(grade_cell_id(check.id), notebook, assignment, result.name)
                except MissingEntry:
                    continue  # that part has no notebook in this assignment
                grade.auto_score, grade.needs_manual_grade = points.get(check.id, 0), False
        gradebook.db.commit()


def write_packages(learners: list[Path], assignment: str, scratch: Path) -> tuple[list[Path], list[Submission]]:
    """`scratch/LEARNER/exercises/` for each learner whose notebooks can be read; for the others, a row
    with the error."""
    from grader.host.tools.batch import Submission

    packaged, unread = [], []
    for learner in learners:
        notebooks = sorted((learner / assignment).glob("*.ipynb"))
        try:
            if not notebooks:
                raise ValueError(f"no notebooks in {assignment}/")
            write_package(notebooks, scratch / learner.name / "exercises")
            packaged.append(scratch / learner.name)
        except (OSError, ValueError) as error:
            unread.append(Submission(learner.name, error=str(error)))
    return packaged, unread


def record_grades(args: argparse.Namespace) -> int:
    """Grade the submitted notebooks from outside any kernel and record the grades."""
    from grader.checks import select
    from grader.host.refcache import ReferenceUnavailable
    from grader.host.tools.batch import grading_options_problem, result_writer, results_directory, submissions_in
    from grader.host.tools.batch import write_gradebook as write_csv

    def usage(message: str) -> int:
        print(f"notebooks grade: {message}", file=sys.stderr)
        return 2

    problem = grading_options_problem(args.submitted, args)
    if problem:
        return usage(problem)
    if args.db and not has_assignment(args.db, args.assignment):
        return usage(f"{args.db} has no assignment {args.assignment}: run nbgrader generate_assignment first")
    checks = select(args.checks)
    write_result = result_writer(results_directory(args), sum(check.points for check in checks))

    def done(result: Submission) -> None:
        if result.report:  # its package was a scratch copy, gone by now: the notebooks it was taken from
            result.report["package"] = str(args.submitted / result.name / args.assignment)
        write_result(result)

    with tempfile.TemporaryDirectory(prefix="gpt2-notebooks-") as scratch:
        packaged, unread = write_packages(submissions_in(args.submitted), args.assignment, Path(scratch))
        try:
            graded = grade_packages(packaged, checks, args, done)
        except ReferenceUnavailable as error:
            return usage(f"{error} (--reference random grades offline)")
    for result in unread:
        done(result)
    results = sorted(unread + graded, key=lambda result: result.name)
    autograded = args.autograded or args.submitted.parent / "autograded"  # nbgrader's course layout
    flags = {result.name: kernel_flag(autograded / result.name / args.assignment, result, checks) for result in results}
    write_csv(args.csv, results, checks, first="student", flags=flags)
    if args.db:
        write_gradebook(args.db, args.assignment, results, checks)
    recorded = ", ".join(str(path) for path in (args.csv, results_directory(args), args.db) if path)
    print(f"graded {len(results)} notebook submissions: {recorded}")
    return 0


def grade_parser() -> argparse.ArgumentParser:
    from grader.host.tools.batch import add_grading_options

    p = tool_parser("grader.host.platforms.nbgrader.notebooks grade", record_grades.__doc__ or "")
    p.add_argument(
        "submitted",
        type=Path,
        metavar="SUBMITTED_DIR",
        help="nbgrader's submitted/: one directory per learner, the assignment's notebooks in LEARNER/ASSIGNMENT/",
    )
    p.add_argument("--assignment", default="gpt2", help="the assignment's name in nbgrader (default: gpt2)")
    p.add_argument(
        "--db", metavar="URL", help="nbgrader's gradebook to record the grades in, e.g. sqlite:///gradebook.db"
    )
    p.add_argument(
        "--autograded",
        type=Path,
        metavar="DIR",
        help="nbgrader's autograded/, the notebooks as run in each learner's kernel: a score they showed that the "
        "grader does not record is flagged in the CSV (default: autograded/ beside SUBMITTED_DIR)",
    )
    add_grading_options(p, "learners", "the grades to write")
    return p
