"""Grade a class: every learner checkout in a directory, with this checkout's grader.

    python -m grader.host.tools.batch SUBMISSIONS_DIR --csv grades.csv [CHECK ...] [--assignment NAME] [--jobs N]

Each subdirectory of SUBMISSIONS_DIR is one submission, and only its `exercises/` is read: its
directories and regular files (within size and count limits; no links, pipes, sockets or devices)
are copied to a scratch directory of the submission's own and graded by `grade` from this
checkout, so a submission's own grader, tests and workflows play no part. Everything that grading
writes (the copy, the report, the temporary files of the grading process and of its checks) lives
in that scratch, which goes with the submission. The reference is prepared once, before any
submission; then the submissions are graded in parallel, each by a process group of its own with a
time limit. A submission that cannot be graded (no exercises/, a file that cannot be accepted, a
grading process that hangs or dies) gets a row with its error, and the batch goes on.

Outputs: the CSV gradebook (one row per submission: each check's status, the score, the maximum
and any error) and one JSON result per submission, written as soon as that submission is done.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from grader.checks import UnknownCheck
from grader.host.assignments import AssignmentError, add_option, chosen
from grader.host.cli import add_timeout_option
from grader.host.dependencies import UNFINISHED
from grader.host.results import ReadBack
from grader.host.tools.submission_copy import Refused, copy_exercises
from grader.shared.commands import tool_parser
from grader.shared.paths import REPO_ROOT


@dataclass(frozen=True)
class Options:
    check_ids: tuple[str, ...]
    reference: str  # the kind prepared by the batch: "gpt2" or "random"
    timeout: float  # per check
    submission_timeout: float
    flags: tuple[str, ...] = ()  # passed on to grade: --require-sandbox, --assignment NAME


@dataclass
class Submission:
    """One submission's outcome: the `grade --json` report, or why there is none."""

    name: str
    report: dict | None = None
    error: str = ""

    @property
    def statuses(self) -> dict[str, str]:
        return {check["id"]: check["status"] for check in (self.report or {}).get("checks", [])}

    @property
    def points(self) -> dict[str, int]:
        return {check["id"]: check["points"] for check in (self.report or {}).get("checks", [])}

    @property
    def score(self) -> int:
        return self.report["score"] if self.report else 0

    def to_dict(self, max_score: int) -> dict:
        return {
            "submission": self.name,
            "score": self.score,
            "max_score": max_score,
            "error": self.error or None,
            "report": self.report,
        }


def submissions_in(root: Path) -> list[Path]:
    return sorted(path for path in root.iterdir() if path.is_dir() and not path.name.startswith("."))


def missing_files(exercises: Path, checks: Sequence) -> list[str]:
    files = {f"{check.target.file}.py" for check in checks}
    return sorted(file for file in files if not (exercises / file).is_file())


def import_failures(exercises: Path, checks: list[dict]) -> list[str]:
    """A line for each file of the package that failed as it was imported: "block.py does not import: SyntaxError: ...",
    or "mlp.py does not finish importing (line 7 when stopped)" (its checks time out, `runner.preflight`).
    Every check that imports such a file errors at a line of it that runs at import (`runs_at_import`); an error that
    a function's body raised when a check called it is that check's own, and not one of these."""
    errors: dict[str, list[str]] = {}
    for check in checks:
        file, line = check.get("file") or "", check.get("line")
        if check.get("status") == "timeout" and UNFINISHED.fullmatch(check.get("message", "")):
            errors.setdefault(file, []).append(check["message"])
        if check.get("status") == "error" and isinstance(line, int) and runs_at_import(exercises, file, line):
            errors.setdefault(file, []).append(check.get("message", "").partition(f" ({file}:{line}")[0])
    # The shortest of those messages: a check whose parts fail too names them first (grader.host.dependencies).
    shortest = {file: min(said, key=len) for file, said in errors.items()}
    return [
        said if UNFINISHED.fullmatch(said) else f"{file} does not import: {said}" for file, said in shortest.items()
    ]


def runs_at_import(exercises: Path, file: str, line: int) -> bool:
    """Whether `line` of the package's `file` runs as it is imported: any line of a file that does not compile, else
    one outside every function's body (a class body, a decorator, a default run at import; a body when called)."""
    path = exercises / file
    if Path(file).name != file or not path.is_file():  # not one of the package's files
        return False
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # it never ran at all
        return True
    bodies = [
        ((node.body if isinstance(node, ast.Lambda) else node.body[0]).lineno, node.end_lineno)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    ]
    return not any(first <= line <= last for first, last in bodies)


def spreadsheet_safe(cell: object) -> object:
    """A text cell a spreadsheet shows as text: one starting with =, +, -, @ (or a tab or carriage
    return) would be read as a formula, so it gets a leading apostrophe."""
    if isinstance(cell, str) and cell[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + cell
    return cell


def kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def add_grading_options(p, graded: str, csv_help: str) -> None:
    """The arguments batch and the notebooks' grades share, after their directory: the checks, the CSV and the JSON
    results to write, the reference, the jobs and each check's time limit."""
    p.add_argument("checks", nargs="*", metavar="CHECK", help="check ids or prefixes to grade (default: all)")
    p.add_argument("--csv", type=Path, required=True, metavar="FILE", help=csv_help)
    results_help = f"where to write the {graded}' JSON results, one each (default: next to the CSV, FILE-results/)"
    p.add_argument("--results", type=Path, metavar="DIR", help=results_help)
    p.add_argument(
        "--reference", choices=("auto", "gpt2", "random"), default="auto", help="as for grade (default: auto)"
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help=f"{graded} graded at once (default: the number of cores)",
    )
    add_timeout_option(p)


def submission_time_limit(checks: Sequence, timeout: float) -> float:
    """Seconds one submission's grading may take: every check's limit, plus two minutes for the rest."""
    return sum(max(timeout, check.run.min_timeout or 0) for check in checks) + 120


def own_mount_namespace() -> list[str]:
    """As root on Linux, the prefix that runs a grading in a mount namespace of its own (util-linux's
    unshare, private propagation): the tmpfs each check's scratch is mounted on ends with the grading,
    even one killed at its time limit, instead of staying mounted, and in memory, on the machine."""
    if sys.platform != "linux" or os.geteuid() != 0 or not shutil.which("unshare"):
        return []
    return ["unshare", "--mount", "--propagation", "private", "--"]


def run_in_own_group(command: list[str], seconds: float, env: dict) -> tuple[int, str]:
    """Exit code and stderr of command, run in a new process group. Past `seconds` the whole group
    (the learner's processes with it) is killed and TimeoutError raised."""
    process = subprocess.Popen(
        [*own_mount_namespace(), *command],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, stderr = process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        kill_group(process)
        process.communicate()
        raise TimeoutError(f"grading took longer than {seconds:g} s; stopped") from None
    kill_group(process)  # anything the learner's code left running
    return process.returncode, stderr


def grade_submission(submission: Path, checks: Sequence, options: Options) -> Submission:
    """Grade a copy of the submission's exercises/ with this checkout's `grade`, in its own process group."""
    exercises = submission / "exercises"
    if exercises.is_symlink():
        return Submission(submission.name, error="symbolic links are not accepted: exercises")
    if not (exercises / "__init__.py").is_file():
        return Submission(submission.name, error="no exercises/ package (exercises/__init__.py is missing)")
    with tempfile.TemporaryDirectory(prefix="gpt2-batch-", ignore_cleanup_errors=True) as scratch:
        package, report_path = Path(scratch) / "exercises", Path(scratch) / "report.json"
        try:
            copy_exercises(exercises, package)
        except Refused as refusal:
            return Submission(submission.name, error=str(refusal))
        except OSError as error:
            return Submission(submission.name, error=f"could not copy exercises/: {error}")
        command = [sys.executable, "-m", "grader", *options.check_ids, "--exercises", str(package)]
        command += ["--reference", options.reference, "--timeout", str(options.timeout), "--json", str(report_path)]
        command += options.flags
        # One torch thread each: the parallelism is the jobs', and threads that lose their core spin.
        # The grading's temporary files in the submission's scratch: gone with it, even when the grading is killed.
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": scratch}
        try:
            code, stderr = run_in_own_group(command, options.submission_timeout, env)
        except TimeoutError as error:
            return Submission(submission.name, error=str(error))
        try:
            report = json.loads(report_path.read_text())
        except (OSError, ValueError):
            last = (stderr.strip().splitlines() or [""])[-1]
            said = f"the grading process stopped without a report (exit code {code}) {last}"
            return Submission(submission.name, error=said.strip())
    report["package"] = str(exercises)  # not the scratch copy, gone by now
    missing = missing_files(exercises, checks)
    problems = ([f"missing {', '.join(missing)}"] if missing else []) + import_failures(exercises, report["checks"])
    return Submission(submission.name, report, "; ".join(problems))


def results_directory(args: argparse.Namespace) -> Path:
    """Where the JSON results go: --results, else FILE-results/ beside the CSV FILE.csv."""
    return args.results or args.csv.with_name(f"{args.csv.stem}-results")


def result_writer(directory: Path, max_score: int) -> Callable[[Submission], None]:
    """grade_all's on_done: each result written to `directory` as NAME.json as soon as it is known, and a line
    on stderr, so that a batch stopped halfway keeps what it graded."""
    directory.mkdir(parents=True, exist_ok=True)

    def done(result: Submission) -> None:
        (directory / f"{result.name}.json").write_text(json.dumps(result.to_dict(max_score), indent=2) + "\n")
        said = f" ({result.error})" if result.error else ""
        print(f"{result.name}: {result.score}/{max_score}{said}", file=sys.stderr)

    return done


def grade_all(submissions: list[Path], checks: Sequence, options: Options, jobs: int, on_done) -> list[Submission]:
    """Every submission graded, `jobs` at a time; on_done(result) as each finishes."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(grade_submission, path, checks, options) for path in submissions]
        for future in as_completed(futures):
            on_done(future.result())
    return sorted((future.result() for future in futures), key=lambda result: result.name)


POINTS_COLUMN = "{check} points"


def write_gradebook(
    path: Path, results: list[Submission], checks: Sequence, first: str = "submission", flags: dict | None = None
) -> None:
    """The CSV: one row per submission; each check's status and its points beside it, then the score, the
    maximum and any error (the notebooks' grades too, with `first="student"`, and with `flags` a `flag` column before
    the score: why a recorded grade is in doubt, by submission)."""
    max_score = sum(check.points for check in checks)
    per_check = [column for check in checks for column in (check.id, POINTS_COLUMN.format(check=check.id))]
    flagged = ["flag"] if flags is not None else []
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([first, *per_check, *flagged, "score", "max_score", "error"])
        for result in results:
            statuses, points = result.statuses, result.points
            cells = [cell for check in checks for cell in (statuses.get(check.id, ""), points.get(check.id, 0))]
            flag = [flags.get(result.name, "")] if flags is not None else []
            row = [result.name, *cells, *flag, result.score, max_score, result.error]
            writer.writerow([spreadsheet_safe(cell) for cell in row])


# A learner's result (grades-results/NAME.json): its `grade --json` report's records, the batch's score.
RESULT_READ_BACK = ReadBack(
    "a batch result",
    claims=lambda data: "submission" in data and "schema" not in data,
    fields={
        "name": ("submission",),
        "score": ("score",),
        "max_score": ("max_score",),
        "ungraded": ("error",),
        "records": ("report", "checks"),
    },
)


def parser() -> argparse.ArgumentParser:
    p = tool_parser("grader.host.tools.batch", __doc__)
    p.add_argument("submissions", type=Path, metavar="SUBMISSIONS_DIR", help="one learner checkout per subdirectory")
    add_grading_options(p, "submissions", "the gradebook to write")
    add_option(p, "grade")
    p.add_argument(
        "--require-sandbox", action="store_true", help="refuse to grade where the sandbox is not available (as grade)"
    )
    p.add_argument(
        "--submission-timeout",
        type=float,
        metavar="SECONDS",
        help="time allowed per submission (default: the per-check time for every check, plus two minutes)",
    )
    return p


def grading_options_problem(submitted: Path, args: argparse.Namespace, assignment: str | None = None) -> str | None:
    """What is wrong with the options batch and the notebooks' grades share (add_grading_options), and the course's
    `assignment` (batch's --assignment; the notebooks' --assignment is nbgrader's), in a line."""
    if not submitted.is_dir():
        return f"{submitted} is not a directory"
    if not args.csv.parent.is_dir():
        return f"cannot write {args.csv}: {args.csv.parent} is not a directory"
    if args.jobs < 1:
        return "--jobs must be at least 1"
    try:
        chosen(args.checks, assignment)
    except (UnknownCheck, AssignmentError) as error:
        return str(error)
    return None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_intermixed_args(argv)  # CHECK ... may follow the options: make batch ARGS="embed"
    from grader.host.refcache import ReferenceUnavailable, ensure_reference

    def usage(message: str) -> int:
        print(f"batch: {message}", file=sys.stderr)
        return 2

    problem = grading_options_problem(args.submissions, args, args.assignment)
    if problem:
        return usage(problem)
    checks = chosen(args.checks, args.assignment)  # with the assignment's points, as grade gives them
    from grader.shared.sandbox import status

    if args.require_sandbox and not status().on:
        return usage(f"--require-sandbox, and there is none: {status().describe()}")
    submissions = submissions_in(args.submissions)
    if not submissions:
        return usage(f"{args.submissions} has no submission directories")
    try:
        reference = ensure_reference(args.reference, lambda message, fraction=None: print(message, file=sys.stderr))
    except ReferenceUnavailable as error:
        return usage(f"{error} (--reference random grades offline)")
    if reference.fallback_reason:
        print(f"batch: grading against the random reference: {reference.fallback_reason}", file=sys.stderr)

    results_dir = results_directory(args)
    max_score = sum(check.points for check in checks)
    submission_timeout = args.submission_timeout or submission_time_limit(checks, args.timeout)
    flags = ("--require-sandbox",) * args.require_sandbox + (
        ("--assignment", args.assignment) if args.assignment else ()
    )
    options = Options(tuple(args.checks), reference.kind, args.timeout, submission_timeout, flags)
    results = grade_all(submissions, checks, options, args.jobs, result_writer(results_dir, max_score))
    write_gradebook(args.csv, results, checks)
    print(f"graded {len(results)} submissions: {args.csv}, results in {results_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
