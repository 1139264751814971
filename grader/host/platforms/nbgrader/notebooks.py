"""The exercises as nbgrader notebooks, one per part, and the kernel side those notebooks call.

    python -m grader.host.platforms.nbgrader.notebooks OUTDIR  # OUTDIR/<n>-<part>.ipynb from solutions/ and the checks
    python -m grader.host.platforms.nbgrader.notebooks grade SUBMITTED_DIR --csv grades.csv [--db URL] [CHECK ...]

Each notebook is an nbgrader source notebook, generated from the same sources as `exercises/`:
a short explanation per file with a link to its course page (docs/course/), the file itself as a solution
cell (nbgrader's `generate_assignment` turns its solution regions into stubs), and after it one autograded
test cell per check. The links go to the learner repository on GitHub when `--source` is a GitHub URL, else
they are the pages' paths in the repository (`pages_base`).

In the kernel, `%load_ext grader.host.platforms.nbgrader.notebooks` adds the `%%exercise FILE` cell magic: the cell is
written to `notebook_exercises/FILE` beside the notebook and run as that module of the package,
so what it defines can be tried at once. It also defines `grade_check(ID)` for the test cells:
it grades that package with the normal grader and raises unless the check passes, nbgrader's
way to give a test cell its points or none.

That verdict is the learner's feedback, not the grade to record: the test cell calls it from the
kernel the learner's cells ran in, where a cell can patch the grader or define its own
`grade_check`. `grade` records grades from outside any kernel: it reads each submitted notebook
(never running it), takes only its `%%exercise` cells into a package laid out like `exercises/`,
grades that package with the sandboxed grader (`grader.host.tools.batch`'s machinery) and writes each
check's points into a CSV, one JSON result per learner as batch's and, with `--db`, into nbgrader's gradebook.

This module holds the command and the kernel's side; grader.host.platforms.nbgrader.sources writes the notebooks
and nbgrader's config, grader.host.platforms.nbgrader.grades records the grades.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.host.platforms.nbgrader.grades import grade_parser, record_grades
from grader.host.platforms.nbgrader.sources import (
    NOTEBOOK_PACKAGE,
    PLACEHOLDER_SOURCE,
    course_root,
    notebook_name,
    pages_base,
    repository_source,
    settings_needed,
    write_config,
    write_notebooks,
)
from grader.shared.commands import tool_parser
from grader.shared.paths import REPO_ROOT

if TYPE_CHECKING:
    from grader.checks import Check
    from grader.host.results import Report


# --- the kernel side ----------------------------------------------------------------------------


def load_ipython_extension(ipython) -> None:
    """`%load_ext grader.host.platforms.nbgrader.notebooks`: the `%%exercise FILE` cell magic, and `grade_check`
    for test cells."""
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


# --- the command ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["grade"]:
        return record_grades(grade_parser().parse_intermixed_args(argv[1:]))
    parser = tool_parser(
        "grader.host.platforms.nbgrader.notebooks",
        __doc__,
        "where to write the notebooks, e.g. COURSE/source/gpt2 for nbgrader",
    )
    parser.epilog = (
        "python -m grader.host.platforms.nbgrader.notebooks grade --help: record the grades of submitted notebooks"
    )
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
