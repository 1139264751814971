"""`grade --watch`: every save regrades the checks of the saved file, on a learner's worker kept warm; a saved file
that does not compile regrades the checks of the files that import it too (`stale`), which no longer import.

Saves are seen through watchfiles (the Rust notify crate: inotify, FSEvents, ReadDirectoryChangesW).
The worker is a fork server that never imports the learner's package (`grader.learner`): each
check's fork imports it afresh from the files, so a save is graded as saved, with nothing to
reload. Without forks (macOS, Windows) the grader starts a fresh worker for every run.
"""

from __future__ import annotations

import ast
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import watchfiles
from rich.console import Console
from rich.text import Text

from grader.checks import Check, file_stem, registry
from grader.host.dependencies import UNCOMPILED
from grader.host.pipeline import GradingRun, Rebuild, ReferenceTampered
from grader.host.refcache import ReferenceData
from grader.host.render import text
from grader.host.results import STATUSES, CheckResult, Report
from grader.host.runner import LearnerProcesses
from grader.shared import wire

STEP_MS = 50  # an editor's save is a burst of events (write, rename, chmod): this long without one ends it
READY_MS = 200  # the watcher yields once, empty, this long after it is in place


class SavedPython(watchfiles.DefaultFilter):
    """Python files of the package; DefaultFilter leaves out __pycache__ and editors' swap and backup
    files. Judged on the path inside the package, so a package kept under, say, .venv is watched too."""

    def __init__(self, package: Path):
        super().__init__()
        self.package = package

    def __call__(self, change: watchfiles.Change, path: str) -> bool:
        inside = Path(path).relative_to(self.package)
        return inside.suffix == ".py" and super().__call__(change, str(inside))


def saved_files(changes: set[tuple[watchfiles.Change, str]], package: Path) -> list[str]:
    """The saved files, inside the package: "normalization.py", "helpers/util.py"; a name with
    control characters is printed without them."""
    return sorted({wire.clean_text(Path(path).relative_to(package).as_posix()) for _, path in changes})


def regraded(saved: Sequence[str], watched: Sequence[Check]) -> list[Check]:
    """The watched checks of the saved files. A file no check grades (config.py, __init__.py, a
    helper of the learner's) may be imported by any of them: saving it regrades every watched check."""
    graded_files = {check.target.file for check in registry()}
    stems = {file_stem(name) for name in saved}
    if any("/" in name for name in saved) or not stems <= graded_files:
        return list(watched)
    return [check for check in watched if check.target.file in stems]


def stale(saved: Sequence[str], watched: Sequence[Check], package: Path, latest: Mapping[str, CheckResult]) -> set[str]:
    """The watched checks a save leaves wrong beyond its own file's: those of every file that imports a saved file
    that does not compile (they would pass on code that no longer imports), and those whose latest result is an
    error at a line of a saved file (it may be mended). They are regraded, so the first become errors at its line."""
    broken = {file_stem(name) for name in saved if not compiles(package / name)}
    files = importers(package, broken)
    last = [latest[check.id] for check in watched if check.id in latest]
    errors_there = {result.id for result in last if result.error_place and result.file in saved}
    return {check.id for check in watched if check.target.file in files} | errors_there


def compiles(path: Path) -> bool:
    try:
        compile(path.read_bytes(), str(path), "exec")
    except (SyntaxError, ValueError, OSError):  # ValueError: a null byte; OSError: deleted since the save
        return False
    return True


def importers(package: Path, files: set[str]) -> set[str]:
    """The package's files (stems) that import one of `files`, directly or through another, by relative imports."""
    imports = {path.stem: imported_files(path) for path in package.glob("*.py")}
    found: set[str] = set()
    waiting = list(files)
    while waiting:
        imported = waiting.pop()
        for importer in (name for name, names in imports.items() if imported in names and name not in found):
            found.add(importer)
            waiting.append(importer)
    return found


def imported_files(path: Path) -> set[str]:
    """The package's files that `path` imports (`from .embedding import Embed`, `from . import embedding`)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, OSError):
        return set()
    relative = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1]
    return {
        name
        for node in relative
        for name in ([node.module.split(".")[0]] if node.module else [alias.name for alias in node.names])
    }


STILL = {"fail": "still fails", "error": "still an error", "timeout": "still times out", "todo": "still to do"}


def starts_failing(before: Mapping[str, CheckResult] | None, now: CheckResult) -> bool:
    """Whether a check fails now and did not in the last run (it passed, was todo, or had not run): the moment
    its course page is named. One that still fails was told its page by the first report or an earlier save."""
    if now.page_to_read is None or before is None:
        return False
    last = before.get(now.id)
    return last is None or last.page_to_read is None


def check_lines(
    results: Sequence[CheckResult], before: Mapping[str, CheckResult] | None = None, width: int = 0
) -> list[Text]:
    """One line per regraded check, with its message unless it passes, and for a failing one the line
    that says what to do. Checks stopped by one identical error share one line (a syntax error stops
    every check of its file, and is that one line), as in the terminal's table. With the last run's results
    (`before`), a check that starts failing gets a `read:` line with its course page, once: not again while it still
    fails. The labels are padded to `width` at least (the lines of one save, printed as each check's result comes)."""
    groups = [(text.group_label([result.id for result in group]), group) for group in text.shared_errors(results)]
    width = max([width, *(len(label) for label, _ in groups)])
    lines = []
    for label, group in groups:
        result = group[0]
        lines.append(
            Text.assemble(
                f"  {label:<{width}}  ",
                (f"{result.status.upper():<8}", text.STYLES[result.status]),
                text.points(group),
                f"  {result.message}" if result.status != "pass" else "",
            )
        )
        next_step = [line for line in result.diagnosis() if line.startswith("next: ")]
        if result.status == "fail" and next_step:
            lines.append(Text(" " * (width + 4) + next_step[0]))
        pages = dict.fromkeys(member.page_to_read for member in group if starts_failing(before, member))
        if pages and not result.message.startswith(UNCOMPILED):  # a syntax error is one line: its fix is at its line
            # the course page of each check that starts failing, as the full report's `read:` line
            lines.append(Text(" " * (width + 4) + f"read: {', '.join(page for page in pages if page)}"))
    return lines


def change(before: CheckResult, now: CheckResult) -> str | None:
    """How a check moved since the last run: "fail -> pass", or for one that still does not pass, its
    new reason ("still fails, now: ..."); None when it did not."""
    if before.status != now.status:
        return f"{before.status} -> {now.status}"
    if now.status != "pass" and before.message != now.message:
        return f"{STILL[now.status]}, now: {now.message}"
    return None


def changes_line(before: dict[str, CheckResult], results: Sequence[CheckResult]) -> Text:
    """What changed since the last run: "attention: fail -> pass; newly failing: block (pass -> error)";
    the checks stopped by one error, in one phrase."""
    moves: dict[tuple, list[CheckResult]] = {}
    for result in results:
        moved = change(before[result.id], result)
        if moved:
            moves.setdefault((moved, text.error_key(result)), []).append(result)
    if not moves:
        return Text("  since the last run: no change", style="dim")
    phrases = []
    for (moved, _), group in moves.items():
        label = text.group_label([result.id for result in group])
        newly_failing = before[group[0].id].status == "pass"
        phrases.append(f"newly failing: {label} ({moved})" if newly_failing else f"{label}: {moved}")
    regressed = any(before[result.id].status == "pass" != result.status for result in results)
    moved_any = any(before[result.id].status != result.status for result in results)
    style = "bold red" if regressed else "bold green" if moved_any else "bold yellow"
    return Text("  since the last run: " + "; ".join(phrases), style=style)


def score_line(results: Sequence[CheckResult]) -> Text:
    """The points of every watched check, each as of its latest run."""
    counts = ", ".join(f"{n} {status}" for status in STATUSES if (n := sum(r.status == status for r in results)))
    score, most = sum(r.score for r in results), sum(r.max_score for r in results)
    return Text(f"  watched checks: {score}/{most} points ({counts})", style="dim")


class Watch:
    """One watch session: the learner's workers (the caller's), kept between runs, and the latest result of
    each watched check."""

    def __init__(
        self,
        package: Path,
        watched: Sequence[Check],
        reference: ReferenceData,
        processes: LearnerProcesses,
        rebuild: Rebuild,
    ):
        self.package, self.watched, self.rebuild, self.reference = package, list(watched), rebuild, reference
        self.processes = processes
        self.latest: dict[str, CheckResult] = {}

    def grading(self, checks: Sequence[Check]) -> GradingRun:
        """`checks` graded on the warm worker as the run is iterated; where the reference does not verify, it is
        rebuilt, and the same checks graded again on a worker for the new one."""
        return GradingRun(self.package, checks, self.reference, processes=self.processes, rebuild=self._rebuilt)

    def _rebuilt(self, tampered: ReferenceData, error: ReferenceTampered) -> ReferenceData:
        self.reference = self.rebuild(tampered, error)  # the entry built again, the workers paused meanwhile
        return self.reference

    def report(self, run: GradingRun) -> Report:
        """The run's report once it ends, each of its results now the latest of its check."""
        report = run.finished().report
        self.latest.update((result.id, result) for result in report.checks)
        return report

    def regrade(self, saved: Sequence[str], console: Console, show_printed: bool) -> None:
        """The compact report of one save: what was saved, a line per regraded check as soon as its result is
        known (checks that may share one error with others, one line for them all, after the last), what changed."""
        own, other = regraded(saved, self.watched), stale(saved, self.watched, self.package, self.latest)
        checks = [check for check in self.watched if check in own or check.id in other]
        stamp = time.strftime("%H:%M:%S")
        if not checks:
            console.print(Text(f"{stamp} {', '.join(saved)} saved: no watched check grades it", style="dim"))
            return
        console.print(Text(f"{stamp} {', '.join(saved)} saved: {' '.join(c.id for c in checks)}", style="bold"))
        before = {check.id: self.latest[check.id] for check in checks}
        width = max(len(check.id) for check in checks)
        shown: set[str] = set()

        run = self.grading(checks)
        for result in run:  # each as soon as it is final; a syntax error stops every check of its file: one line, later
            if result.error_place is None:
                for line in [*text.trace(result), *check_lines([result], before, width)]:
                    console.print(line)
                shown.add(result.id)
        results = self.report(run).checks
        rest = [result for result in results if result.id not in shown]
        for line in [
            *(line for result in rest for line in text.trace(result)),
            *(check_lines(rest, before, width) if rest else []),
            *(line for result in results for line in (text.printed(result) if show_printed else [])),
            changes_line(before, results),
            score_line([self.latest[check.id] for check in self.watched]),
        ]:
            console.print(line)


def watch(
    package: Path,
    watched: Sequence[Check],
    reference: ReferenceData,
    processes: LearnerProcesses,
    console: Console,
    show_printed: bool,
    rebuild: Rebuild,
) -> int:
    """The first report in full, then a compact one per save. It runs until Ctrl-C, whose
    KeyboardInterrupt (raised by watchfiles too, while it waits) is the caller's to handle; 2 when
    the package cannot be watched."""
    saves = watchfiles.watch(
        package,
        watch_filter=SavedPython(package),
        step=STEP_MS,
        rust_timeout=READY_MS,
        yield_on_timeout=True,
    )
    try:
        next(saves)  # the watcher is in place: a save made during the first run is regraded after it
    except OSError as error:  # the system's limit of watches, say
        print(f"grade: cannot watch {package}: {error}", file=sys.stderr)
        return 2
    session = Watch(package, watched, reference, processes, rebuild)
    try:
        with console.status(f"running {len(watched)} checks on {package}"):
            first = session.report(session.grading(watched))
        text.print_report(first, console, show_printed)
        shown = text.shown_path(str(package), "")
        console.print(Text(f"watching {shown} for saves: each regrades its file's checks (Ctrl-C ends)", style="bold"))
        for changes in saves:
            if changes:  # empty: the watcher's wake-up, READY_MS without a save
                session.regrade(saved_files(changes, package), console, show_printed)
        return 0  # the watcher ended by itself
    finally:
        saves.close()
