"""The exercises as nbgrader notebooks, one per part, and the kernel side those notebooks call.

    python -m grader.host.notebooks OUTDIR    # write OUTDIR/<n>-<part>.ipynb from solutions/ and the checks
    python -m grader.host.notebooks grade SUBMITTED_DIR --csv grades.csv [--db URL] [CHECK ...]

Each notebook is an nbgrader source notebook, generated from the same sources as `exercises/`:
a short explanation per file with a link to its course page (docs/course/), the file itself as a solution
cell (nbgrader's `generate_assignment` turns its solution regions into stubs), and after it one autograded
test cell per check. The links go to the learner repository on GitHub when `--source` is a GitHub URL, else
they are the pages' paths in the repository (`pages_base`).

In the kernel, `%load_ext grader.host.notebooks` adds the `%%exercise FILE` cell magic: the cell is
written to `notebook_exercises/FILE` beside the notebook and run as that module of the package,
so what it defines can be tried at once. It also defines `grade_check(ID)` for the test cells:
it grades that package with the normal grader and raises unless the check passes, nbgrader's
way to give a test cell its points or none.

That verdict is the learner's feedback, not the grade to record: the test cell calls it from the
kernel the learner's cells ran in, where a cell can patch the grader or define its own
`grade_check`. `grade` records grades from outside any kernel: it reads each submitted notebook
(never running it), takes only its `%%exercise` cells into a package laid out like `exercises/`,
grades that package with the sandboxed grader (`grader.host.batch`'s machinery) and writes each
check's points into a CSV, one JSON result per learner as batch's and, with `--db`, into nbgrader's gradebook.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.shared.commands import tool_parser
from grader.shared.paths import REPO_ROOT

if TYPE_CHECKING:
    from grader.checks import Check
    from grader.host.batch import Submission
    from grader.host.results import Report

NOTEBOOK_PACKAGE = "notebook_exercises"  # the directory beside the notebook, and the module name
# The first cell. In a fresh Colab runtime the grader is not there yet: it is installed from the
# learner repository (--source), keeping Colab's own torch. Where the grader is installed already
# (Jupyter, nbgrader's autograde) the install is skipped.
PLACEHOLDER_SOURCE = "git+https://github.com/OWNER/REPOSITORY"
SETUP = (
    "import importlib.util\n"
    'if importlib.util.find_spec("grader") is None:  # a fresh Colab runtime\n'
    '    %pip install --quiet "gpt2-from-scratch-grader @ {source}"\n'
    "%load_ext grader.host.notebooks"
)
CONFIG_FILE = "nbgrader_config.py"
STARTUP_ALLOWANCE = 300  # seconds for the first cell's reference build, on a slow machine
# The course's nbgrader_config.py: Python that nbgrader runs in its own process as it starts.
CONFIG = """# Written by python -m grader.host.notebooks.
import os
import sysconfig

c = get_config()  # noqa: F821 (nbgrader defines it)
# A test cell grades one check in a process of its own; the first may also build the reference cache, so cells get
# more time than nbgrader's default 30 s.
c.Execute.timeout = {timeout}
# nbgrader makes a new gradebook by running the command `alembic` (nbgrader.api.get_alembic_version), looked up on
# PATH: the one installed beside nbgrader first, even where its environment is not activated (.venv/bin/nbgrader).
os.environ["PATH"] = os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")])
"""
HOW_TO = (
    "Each exercise cell starts with `%%exercise FILE`: running it writes the cell to "
    f"`{NOTEBOOK_PACKAGE}/FILE` and runs it, so what it defines can be tried in a new cell. "
    "Fill in the bodies that raise `NotImplementedError`, run the cell, then run the test cells "
    "below it: each grades one check against GPT-2 and shows what is wrong. "
    "Work through the parts in order, in one directory: later parts use the modules of earlier ones."
)
KERNEL = {
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"},
}


# --- generating the source notebooks ------------------------------------------------------------


def notebook_name(part: str) -> str:
    """A part's notebook: "1-model.ipynb"; nbgrader's gradebook names it by the stem."""
    from grader.checks import PARTS

    return f"{PARTS.index(part) + 1}-{part}.ipynb"


def grade_cell_id(check_id: str) -> str:
    """The nbgrader grade id of a check's test cell (nbgrader's ids take no dots)."""
    return f"check-{check_id.replace('.', '-')}"


def nbgrader_cell(source: str, grade_id: str, *, solution: bool = False, points: int | None = None):
    """A code cell with nbgrader metadata: a solution cell, a locked cell, or a test cell with points."""
    import nbformat
    from nbgrader.nbgraderformat import SCHEMA_VERSION

    meta = {
        "grade_id": grade_id,
        "grade": points is not None,
        "solution": solution,
        "locked": not solution,
        "schema_version": SCHEMA_VERSION,
    }
    if points is not None:
        meta["points"] = points
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": meta})


def part_files(part: str, checks: list, solutions: Path) -> list[str]:
    """The files a part's notebook holds, in course order: the given ones (no solution region,
    such as config.py), then each file whose first check belongs to this part."""
    from grader.host.stubs import strip_solutions

    owner: dict[str, str] = {}
    for check in checks:
        owner.setdefault(check.target.file, check.part)
    given = [
        path.stem
        for path in sorted(solutions.glob("*.py"))
        if path.stem != "__init__" and path.stem not in owner and strip_solutions(path.read_text()) == path.read_text()
    ]
    return given + [file for file, first in owner.items() if first == part]


# A GitHub repository as pip installs from it: git+https://github.com/OWNER/NAME(.git)(@REF)(#...)
GITHUB_SOURCE = re.compile(r"(?:git\+)?https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?(?:@([^#\s]+))?(?:#\S*)?")


def pages_base(source: str) -> str:
    """What a notebook's links to the course's pages start with. When `--source` is a GitHub repository (the
    learner repository, which ships docs/course/), its files on GitHub: `https://github.com/OWNER/NAME/blob/REF/`,
    REF the source's `@ref` or HEAD (the default branch), a link that works wherever the notebook runs (Colab,
    Jupyter). Otherwise (another host, a path, the placeholder) "": a link is the page's path in the repository,
    `docs/course/02-embed.md`, which opens where the notebook sits at the repository's root."""
    found = GITHUB_SOURCE.fullmatch(source.strip())
    if source == PLACEHOLDER_SOURCE or found is None:
        return ""
    owner, name, ref = found.groups()
    return f"https://github.com/{owner}/{name}/blob/{ref or 'HEAD'}/"


def page_title(page: str) -> str:
    """A course page's title (its first heading), or its file name when it is not in this checkout."""
    path = REPO_ROOT / page
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    heading = next((line.lstrip("#").strip() for line in lines if line.startswith("# ")), "")
    return heading or Path(page).name


def page_links(pages: list[str], base: str) -> str:
    """Markdown links to course pages: "[Token embedding](https://github.com/.../docs/course/02-embed.md)"."""
    return ", ".join(f"[{page_title(page)}]({base}{page})" for page in pages)


def file_pages(graded: list) -> list[str]:
    """The course pages of a file's checks, in course order, each once (attention.py: 05-attention.md)."""
    from grader.host.course import page_of

    return [page for page in dict.fromkeys(page_of(check.id) for check in graded) if page]


def part_pages(graded: list) -> list[str]:
    """The pages that introduce a part: those covering no check just before its first exercise's page
    (Part 1: "The model, end to end"); the course's README is not one."""
    from grader.host.course import COURSE_DIR, pages

    checks_on = pages()
    names = list(checks_on)
    pages = [Path(page).name for page in file_pages(graded)]
    if not pages:
        return []
    start = end = min(names.index(name) for name in pages)
    while start > 0 and not checks_on[names[start - 1]] and names[start - 1] != "README.md":
        start -= 1
    return [f"{COURSE_DIR}/{name}" for name in names[start:end]]


def part_notebook(number: int, part: str, checks: list, solutions: Path, source: str):
    """The nbgrader source notebook of one part: its markdown cells link the course's pages (`pages_base`)."""
    import nbformat

    from grader.host.stubs import strip_solutions

    base = pages_base(source)
    introduction = (
        (importlib.import_module(f"grader.checks.{part}").__doc__ or "").strip().split("\n\n")[0]
    )  # the rest is for the grader's authors
    in_part = [check for check in checks if check.part == part]
    overview = part_pages(in_part)
    course = (
        f"\n\nThe course's pages explain each exercise; read them as you go. This part: "
        f"{page_links(overview + file_pages(in_part), base)}."
        if in_part
        else ""
    )
    cells = [
        nbformat.v4.new_markdown_cell(
            f"# GPT-2 from scratch, part {number}: {part}\n\n{introduction}{course}\n\n{HOW_TO}"
        ),
        nbgrader_cell(SETUP.format(source=source), "setup"),
    ]
    for file in part_files(part, checks, solutions):
        text = (solutions / f"{file}.py").read_text()
        graded = [check for check in in_part if check.target.file == file]
        listing = "".join(
            f"\n- `{check.id}` ({check.points} point{'s' * (check.points != 1)}): {check.summary}" for check in graded
        )
        pages = file_pages(graded)
        cells.append(
            nbformat.v4.new_markdown_cell(
                f"## `{file}.py`\n\n{ast.get_docstring(ast.parse(text)) or ''}"
                + (f"\n\nRead first: {page_links(pages, base)}" if pages else "")
                + (f"\n\nChecks:{listing}" if listing else "")
            )
        )
        exercise = strip_solutions(text) != text
        cells.append(
            nbgrader_cell(
                f"%%exercise {file}.py\n{text}", f"{'exercise' if exercise else 'given'}-{file}", solution=exercise
            )
        )
        cells += [
            nbgrader_cell(f'grade_check("{check.id}")', grade_cell_id(check.id), points=check.points)
            for check in graded
        ]
    return nbformat.v4.new_notebook(cells=cells, metadata=KERNEL)


def source_notebooks(solutions: Path, source: str = PLACEHOLDER_SOURCE) -> tuple[dict[str, Any], list[str]]:
    """File name -> notebook for each part whose files are all in solutions/; and why others are not."""
    from grader.checks import PARTS, registry

    checks = list(registry())
    notebooks, skipped = {}, []
    for number, part in enumerate(PARTS, start=1):
        missing = sorted(
            {
                f"{c.target.file}.py"
                for c in checks
                if c.part == part and not (solutions / f"{c.target.file}.py").is_file()
            }
        )
        if missing:
            skipped.append(f"no notebook for part {part}: {', '.join(missing)} not in {solutions}")
            continue
        notebooks[notebook_name(part)] = part_notebook(number, part, checks, solutions, source)
    return notebooks, skipped


def write_notebooks(outdir: Path, solutions: Path, source: str = PLACEHOLDER_SOURCE) -> tuple[list[Path], list[str]]:
    """Write each part's notebook into outdir, validated as nbformat and as nbgrader metadata."""
    import nbformat
    from nbgrader import nbgraderformat

    notebooks, skipped = source_notebooks(solutions, source)
    outdir.mkdir(parents=True, exist_ok=True)
    for name, notebook in notebooks.items():
        nbformat.validate(notebook)
        with open(outdir / name, "w") as handle:
            nbgraderformat.write(notebook, handle)
    return [outdir / name for name in notebooks], skipped


def repository_source(root: Path = REPO_ROOT) -> str | None:
    """This checkout's `origin` as pip installs from git (`git+https://host/owner/name`), or None without one."""
    try:
        url = subprocess.run(
            ["git", "remote", "get-url", "origin"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    scp = re.fullmatch(r"[\w.-]+@([\w.-]+):(.+)", url)  # git@github.com:owner/name.git
    if scp:
        url = f"https://{scp[1]}/{scp[2]}"
    return f"git+{url.removesuffix('.git')}" if url.startswith("https://") else None


def cell_time_limit() -> int:
    """Seconds a test cell may take: its check's own limit, and the rest of a grading around it."""
    from grader.checks import registry
    from grader.host.batch import submission_time_limit
    from grader.host.runner import DEFAULT_TIMEOUT

    return int(max(submission_time_limit([check], DEFAULT_TIMEOUT) for check in registry()) + STARTUP_ALLOWANCE)


def config_text() -> str:
    return CONFIG.format(timeout=cell_time_limit())


def write_config(course: Path) -> tuple[Path, bool]:
    """nbgrader_config.py at the course's root with the cells' time limit and alembic on PATH; an instructor's own
    is kept. Returns the file and whether it was written."""
    path = course / CONFIG_FILE
    if path.exists():
        return path, False
    path.write_text(config_text())
    return path, True


def settings_needed() -> str:
    """The generated config's statements, indented: what an instructor's own config needs of them."""
    return "\n".join(f"    {line}" for line in config_text().splitlines() if line and not line.startswith("#"))


def course_root(outdir: Path) -> Path:
    """COURSE of COURSE/source/ASSIGNMENT, nbgrader's layout; else the notebooks' own directory."""
    return outdir.parent.parent if outdir.parent.name == "source" else outdir


# --- the kernel side ----------------------------------------------------------------------------


def load_ipython_extension(ipython) -> None:
    """`%load_ext grader.host.notebooks`: the `%%exercise FILE` cell magic, and `grade_check` for the test cells."""
    package = Path(NOTEBOOK_PACKAGE)

    def exercise(line: str, cell: str) -> None:
        ipython.push(run_exercise(package, line.strip(), cell))

    ipython.register_magic_function(exercise, "cell", "exercise")
    ipython.push({"grade_check": NotebookGrader(package).grade_check})


def run_exercise(package: Path, filename: str, source: str) -> dict[str, Any]:
    """Write a cell as `package/filename`, run it as that module; its public names."""
    package.mkdir(exist_ok=True)
    (package / "__init__.py").touch()
    path = package / filename
    path.write_text(source)
    module = fresh_module(package, path)
    return {name: value for name, value in vars(module).items() if not name.startswith("_")}


def fresh_module(package: Path, path: Path) -> types.ModuleType:
    """`path` run from its source as a new module of the package, so a re-run cell is never
    served from a stale import or bytecode cache; relative imports find its siblings."""
    location = [str(package.resolve())]
    if getattr(sys.modules.get(NOTEBOOK_PACKAGE), "__path__", None) != location:
        parent = types.ModuleType(NOTEBOOK_PACKAGE)
        parent.__path__ = location
        sys.modules[NOTEBOOK_PACKAGE] = parent
    module = types.ModuleType(f"{NOTEBOOK_PACKAGE}.{path.stem}")
    module.__file__, module.__package__ = str(path.resolve()), NOTEBOOK_PACKAGE
    sys.modules[module.__name__] = module  # registered first: dataclasses look their module up
    try:
        exec(compile(path.read_text(), module.__file__, "exec"), vars(module))
    except ModuleNotFoundError as error:
        prefix = f"{NOTEBOOK_PACKAGE}."
        if not (error.name or "").startswith(prefix):
            raise
        missing = error.name.removeprefix(prefix)  # a sibling whose cell has not run in this kernel yet
        raise ModuleNotFoundError(f"{error}: run {cell_of(missing)} first", name=error.name) from None
    return module


def cell_of(file: str) -> str:
    """Which notebook's cell writes a file: "1-model.ipynb's attention cell" (the part of its first check)."""
    from grader.checks import registry

    part = next((check.part for check in registry() if check.target.file == file), None)
    if part is None:
        return f"the cell that starts with %%exercise {file}.py"
    return f"{notebook_name(part)}'s {file} cell"


def package_digest(package: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(package.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def grade_in_own_process(package: Path, check_ids: list[str]) -> Report:
    """`grade --json` in a process of its own: what the learner's cells did to this kernel (patched
    the grader, replaced a function) cannot reach the verdict."""
    import json
    import subprocess

    from grader.host.results import Report

    with tempfile.TemporaryDirectory(prefix="gpt2-notebook-") as scratch:
        report_path = Path(scratch) / "report.json"
        command = [sys.executable, "-m", "grader", *check_ids, "--exercises", str(package), "--json", str(report_path)]
        finished = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
        if not report_path.is_file():
            raise RuntimeError(
                f"the grader stopped without a report: {(finished.stderr.strip().splitlines() or [''])[-1]}"
            )
        return Report.from_dict(json.loads(report_path.read_text()))


class NotebookGrader:
    """Grades the notebook's package with the normal grader, one check per test cell.

    The checks of one file are graded together, and that report serves the test cells below the
    file's exercise cell for as long as no file of the package changes: one grading per exercise.
    """

    def __init__(self, package: Path):
        self.package = package
        self.last: tuple[tuple[str, str], Report] | None = None  # ((file, package digest), report)
        self.noticed = False  # the random reference's notice is shown by the first test cell only

    def report_for(self, check: Check) -> Report:
        from grader.checks import registry

        key = (check.target.file, package_digest(self.package))
        if self.last is None or self.last[0] != key:
            same_file = [other.id for other in registry() if other.target.file == check.target.file]
            self.last = (key, grade_in_own_process(self.package.resolve(), same_file))
        return self.last[1]

    def grade_check(self, check_id: str) -> None:
        """Show one check's report; raise unless it passes (how a test cell loses its points)."""
        from grader.checks import select
        from grader.host.render.text import print_report
        from grader.host.results import Report

        check = next(check for check in select([check_id]) if check.id == check_id)  # the id, not ids it prefixes
        graded = self.report_for(check)
        result = next(result for result in graded.checks if result.id == check_id)
        print_report(
            Report(graded.reference, graded.package, [result], graded.fallback_reason), banner=not self.noticed
        )
        self.noticed = self.noticed or bool(graded.fallback_reason)
        if result.status != "pass":
            said = f"{check_id}: {result.status}" + (f": {result.message}" if result.message else "")
            page = result.page_to_read  # also on the report's `read:` line above; linked in the exercise's cell
            raise AssertionError(said + (f" (read: {page}, linked above the exercise's cell)" if page else ""))


# --- recording the grades, outside any kernel ------------------------------------------------------

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


def grade_packages(learners: list[Path], checks: list, args: argparse.Namespace, on_done) -> list[Submission]:
    """Each `learner/exercises/` graded as grader.host.batch grades a checkout: by `grade` in a process group
    of its own, the sandbox required wherever this machine has one; on_done(result) as each is graded."""
    from grader.host.batch import Options, grade_all, submission_time_limit
    from grader.host.refcache import ensure_reference
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
    from grader.host.batch import Submission

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
    from grader.host.batch import grading_options_problem, result_writer, results_directory, submissions_in
    from grader.host.batch import write_gradebook as write_csv
    from grader.host.refcache import ReferenceUnavailable

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
    write_csv(args.csv, results, checks, first="student")
    if args.db:
        write_gradebook(args.db, args.assignment, results, checks)
    recorded = ", ".join(str(path) for path in (args.csv, results_directory(args), args.db) if path)
    print(f"graded {len(results)} notebook submissions: {recorded}")
    return 0


def grade_parser() -> argparse.ArgumentParser:
    from grader.host.batch import add_grading_options

    p = tool_parser("grader.host.notebooks grade", record_grades.__doc__ or "")
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
    add_grading_options(p, "learners", "the grades to write")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["grade"]:
        return record_grades(grade_parser().parse_intermixed_args(argv[1:]))
    parser = tool_parser(
        "grader.host.notebooks", __doc__, "where to write the notebooks, e.g. COURSE/source/gpt2 for nbgrader"
    )
    parser.epilog = "python -m grader.host.notebooks grade --help: record the grades of submitted notebooks"
    parser.add_argument(
        "--solutions",
        type=Path,
        default=REPO_ROOT / "solutions",
        help="the solutions package (default: solutions/ of this repository)",
    )
    parser.add_argument(
        "--source",
        metavar="URL",
        help="where the setup cell installs the grader from in Colab (default: this checkout's origin, as git+https)",
    )
    args = parser.parse_args(argv)
    if not args.solutions.is_dir():
        print(f"notebooks: {args.solutions} is not a directory", file=sys.stderr)
        return 2
    source = args.source or repository_source()
    if source is None:
        source = PLACEHOLDER_SOURCE
        print(
            f"notebooks: this checkout has no https or ssh origin: the setup cell installs from {source}; "
            "pass --source URL (e.g. git+https://github.com/you/gpt2-learner) for Colab",
            file=sys.stderr,
        )
    base = pages_base(source)
    print(
        f"notebooks: the course's pages are linked on GitHub, at {base}docs/course/"
        if base
        else "notebooks: the course's pages are linked by their paths in the repository (docs/course/...): "
        "pass --source git+https://github.com/OWNER/NAME to link them on GitHub",
        file=sys.stderr,
    )
    written, skipped = write_notebooks(args.outdir, args.solutions, source)
    for reason in skipped:
        print(reason, file=sys.stderr)
    for path in written:
        print(path)
    config, new = write_config(course_root(args.outdir))
    kept = f"notebooks: {config} exists and is kept; it needs these settings (a longer timeout will do):"
    print(config if new else f"{kept}\n{settings_needed()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
