"""The class view's inputs: each result file this grader writes for a class, read into one `Learner` per learner.

A file is recognised by its content, never its name: batch's (and the notebooks') per-learner result, a bare
`grade --json` report, Gradescope's results.json, Classroom 50's result.json and collected scores.json, and the CSV
gradebook. A learner can write anything into their own result, so every file is read within a size limit and
validated field by field (pydantic, strict: no number from a string, no NaN, no unknown status), and every text kept
is cleaned of control characters, made one line and cut to a bounded length. What is not what it should be is
skipped with a one-line reason naming the field that is wrong, not its value: the whole file, or the one entry or row
of a file that holds many learners.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from grader.host.course import COURSE_DIR
from grader.host.results import STATUSES, CheckStatus
from grader.host.tools.batch import POINTS_COLUMN
from grader.shared.wire import clean_text, malformed

MAX_FILE_BYTES = 64 * 2**20  # a collected scores.json of a large class; a forged file larger is refused unread
TEXT_LIMIT = 500  # characters of one name, check id or mistake
COURSE_PAGE = re.compile(rf"{COURSE_DIR}/[A-Za-z0-9_.-]+\.md")  # the only page an input may name: no link elsewhere
RESULT_SCHEMA, SCORES_SCHEMA = "classroom50/result/v1", "classroom50/scores/v1"
GRADEBOOK_FIRST = ("submission", "student")  # batch's, the notebooks'
GRADEBOOK_LAST = ["score", "max_score", "error"]


def one_line(text: str) -> str:
    """A text of a result as the class view keeps it: printable, one line, at most TEXT_LIMIT characters."""
    return clean_text(text, TEXT_LIMIT).replace("\n", " ")


Line = Annotated[str, AfterValidator(one_line)]
Number = Annotated[float, Field(allow_inf_nan=False)]
Model = TypeVar("Model", bound=BaseModel)


class Unreadable(ValueError):
    """Why a file, or one record of it, is skipped: a few words."""


class NeedsAssignment(ValueError):
    """A scores.json holds several assignments and no --assignment picks one: the message names them."""


@dataclass
class Learner:
    """One learner's results, whatever file they came from."""

    name: str
    statuses: dict[str, CheckStatus]  # by check id
    mistakes: dict[str, str]  # by check id: the named classic mistake, in the grader's words
    score: float
    max_score: float
    source: str  # the file read
    pages: dict[str, str] = field(default_factory=dict)  # by check id: the course page the file names
    ungraded: str = ""  # why there are no statuses (the grading's error), for a learner who could not be graded
    errors: dict[str, str] = field(default_factory=dict)  # by check id: why a check errored or timed out, one line
    flag: str = ""  # why the recorded grade is in doubt (a notebook whose kernel showed another score), one line

    @property
    def graded(self) -> bool:
        return bool(self.statuses)


Verdict = tuple[str, CheckStatus, str | None, str | None]  # check id, status, named mistake, course page


def learner(name: str, verdicts: Iterable[Verdict], score: float, max_score: float, source: Path) -> Learner:
    verdicts = list(verdicts)
    return Learner(
        name,
        {check: status for check, status, _, _ in verdicts},
        {check: mistake for check, _, mistake, _ in verdicts if mistake},
        score,
        max_score,
        str(source),
        {check: page for check, _, _, page in verdicts if page and COURSE_PAGE.fullmatch(page)},
    )


# --- the JSON formats, as far as the class view reads them (other keys are ignored) -----------------------------


class Strict(BaseModel):
    model_config = ConfigDict(strict=True)


class GradedCheck(Strict):  # one check of `grade --json`
    id: Line
    status: CheckStatus
    mistake: Line | None = None
    page: Line | None = None


class GradeReport(Strict):
    score: Number
    max_score: Number
    checks: list[GradedCheck]


class BatchResult(Strict):  # grades-results/NAME.json
    submission: Line
    score: Number
    max_score: Number
    error: Line | None = None
    report: GradeReport | None


class GradescopeData(Strict):  # a test's extra_data
    id: Line
    status: CheckStatus
    mistake: Line | None = None
    page: Line | None = None


class GradescopeTest(Strict):
    name: Line
    status: Literal["passed", "failed"]
    max_score: Number = 0
    extra_data: GradescopeData | None = None


class GradescopeResults(Strict):
    score: Number
    tests: list[GradescopeTest]


class ClassroomTest(Strict):
    test_name: Line = Field(alias="test-name")
    status: CheckStatus
    mistake: Line | None = None
    page: Line | None = None


class ClassroomSubmission(Strict):  # a result.json as scores.json holds it
    score: Number
    max_score: Number = Field(alias="max-score")
    tests: list[ClassroomTest]


class ClassroomResult(ClassroomSubmission):
    owner: Line


class ClassroomEntry(Strict):
    owner: Line
    submissions: list[ClassroomSubmission]  # newest first


class ClassroomAssignment(Strict):
    type: Literal["individual", "group", "team"]
    entries: list[Any]  # each validated alone: one forged entry costs that entry only


class ClassroomScores(Strict):
    assignments: dict[Line, ClassroomAssignment]


def validated(model: type[Model], data: object, what: str) -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise Unreadable(malformed(what, error)) from None


# --- one reader per kind of file ---------------------------------------------------------------------------------


@dataclass
class Reading:
    """The file being read, what the command asked for, and where a skipped record is said."""

    path: Path
    assignment: str | None
    warn: Callable[[str], None]

    def skip(self, where: str, why: Unreadable) -> None:
        self.warn(f"skipped {self.path}, {where}: {why}")


def from_report(name: str, report: GradeReport, path: Path) -> Learner:
    verdicts = ((check.id, check.status, check.mistake, check.page) for check in report.checks)
    return learner(name, verdicts, report.score, report.max_score, path)


def read_batch_result(data: object, reading: Reading) -> list[Learner]:
    result = validated(BatchResult, data, "a batch result")
    if result.report is None:
        why = result.error or "no report"
        return [Learner(result.submission, {}, {}, result.score, result.max_score, str(reading.path), ungraded=why)]
    graded = from_report(result.submission, result.report, reading.path)
    graded.score, graded.max_score = result.score, result.max_score
    return [graded]


def read_report(data: object, reading: Reading) -> list[Learner]:
    return [
        from_report(one_line(reading.path.stem), validated(GradeReport, data, "a grade --json report"), reading.path)
    ]


def read_gradescope(data: object, reading: Reading) -> list[Learner]:
    """Learner: the folder the file is in. A test without extra_data (an older file): its id before the first ': '."""
    results = validated(GradescopeResults, data, "a Gradescope results.json")
    verdicts = [
        (test.extra_data.id, test.extra_data.status, test.extra_data.mistake, test.extra_data.page)
        if test.extra_data
        else (test.name.partition(": ")[0], "pass" if test.status == "passed" else "fail", None, None)
        for test in results.tests
    ]
    max_score = sum(test.max_score for test in results.tests)
    return [learner(one_line(reading.path.resolve().parent.name), verdicts, results.score, max_score, reading.path)]


def from_submission(owner: str, submission: ClassroomSubmission, path: Path) -> Learner:
    verdicts = ((test.test_name, test.status, test.mistake, test.page) for test in submission.tests)
    return learner(owner, verdicts, submission.score, submission.max_score, path)


def read_classroom_result(data: object, reading: Reading) -> list[Learner]:
    result = validated(ClassroomResult, data, "a Classroom 50 result.json")
    return [from_submission(result.owner, result, reading.path)]


def read_classroom_scores(data: object, reading: Reading) -> list[Learner]:
    """Each entry's newest submission, of the assignment asked for (or the only one)."""
    assignments = validated(ClassroomScores, data, "a Classroom 50 scores.json").assignments
    slug = chosen_assignment(list(assignments), reading.assignment)
    learners = []
    for number, raw in enumerate(assignments[slug].entries, 1):
        try:
            entry = validated(ClassroomEntry, raw, "the entry")
        except Unreadable as why:
            reading.skip(f"entry {number} of {slug}", why)
            continue
        if entry.submissions:
            learners.append(from_submission(entry.owner, entry.submissions[0], reading.path))
        else:
            learners.append(Learner(entry.owner, {}, {}, 0, 0, str(reading.path), ungraded="no submission"))
    return learners


def chosen_assignment(slugs: list[str], asked: str | None) -> str:
    held = ", ".join(slugs)
    if asked is not None and asked not in slugs:
        raise Unreadable(f"no assignment {asked} (it holds: {held or 'none'})")
    if asked is None and len(slugs) != 1:
        if not slugs:
            raise Unreadable("it holds no assignment")
        raise NeedsAssignment(f"several assignments, pick one with --assignment: {held}")
    return asked or slugs[0]


def read_json(data: object, reading: Reading) -> list[Learner]:
    """By the keys each format has and the others lack."""
    if not isinstance(data, dict):
        raise Unreadable("JSON, but no object: not a result")
    if data.get("schema") == SCORES_SCHEMA:
        return read_classroom_scores(data, reading)
    if data.get("schema") == RESULT_SCHEMA:
        return read_classroom_result(data, reading)
    if "submission" in data:
        return read_batch_result(data, reading)
    if "checks" in data:
        return read_report(data, reading)
    if "tests" in data:
        return read_gradescope(data, reading)
    raise Unreadable("JSON, but none of the results this command reads")


def read_gradebook(text: str, reading: Reading) -> list[Learner]:
    """batch's CSV: statuses only, no mistakes. A row that is wrong is skipped alone."""
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as error:
        raise Unreadable(f"neither JSON nor a readable CSV ({error})") from None
    header = rows[0] if rows else []
    if header[:1] not in ([first] for first in GRADEBOOK_FIRST) or header[-3:] != GRADEBOOK_LAST:
        raise Unreadable("neither a JSON result nor a gradebook CSV")
    checks = [column for column in header[1:-3] if POINTS_COLUMN.format(check=column) in header]
    learners = []
    for number, row in enumerate(rows[1:], 2):
        if not row:  # a blank line
            continue
        try:
            if len(row) != len(header):
                raise Unreadable(f"{len(row)} cells where the header has {len(header)}")
            learners.append(gradebook_row(dict(zip(header, row, strict=True)), header[0], checks, reading.path))
        except Unreadable as why:
            reading.skip(f"row {number}", why)
    return learners


def gradebook_row(cells: dict[str, str], first: str, checks: list[str], path: Path) -> Learner:
    name = one_line(cells[first])
    if not name:
        raise Unreadable(f"no {first}")
    unknown = [check for check in checks if cells[check] not in ("", *STATUSES)]
    if unknown:
        raise Unreadable(f"{one_line(unknown[0])}: not a status")
    verdicts = [(one_line(check), cells[check], None, None) for check in checks if cells[check]]
    graded = learner(name, verdicts, number(cells["score"]), number(cells["max_score"]), path)
    graded.ungraded = "" if verdicts else one_line(cells["error"]) or "no statuses"
    return graded


def number(cell: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise Unreadable("a score is not a number") from None
    if not math.isfinite(value):
        raise Unreadable("a score is not a finite number")
    return value


def text_of(path: Path) -> str:
    """The file's text: a regular file of at most MAX_FILE_BYTES, UTF-8 (with or without a byte-order mark)."""
    try:
        if not path.is_file():
            raise Unreadable("not a regular file" if path.exists() else "no such file")
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise Unreadable(error.strerror or "cannot be read") from None
    if len(raw) > MAX_FILE_BYTES:
        raise Unreadable(f"over {MAX_FILE_BYTES:,} bytes")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise Unreadable("not UTF-8 text") from None


def read_file(path: Path, assignment: str | None, warn: Callable[[str], None]) -> list[Learner]:
    """The learners of one file; none, said in a line, when it cannot be read. Raises NeedsAssignment."""
    reading = Reading(path, assignment, warn)
    try:
        text = text_of(path)
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):  # not JSON (or nested past Python's parser): a gradebook, or nothing
            return read_gradebook(text, reading)
        return read_json(data, reading)
    except Unreadable as why:
        warn(f"skipped {path}: {why}")
        return []


def files_in(paths: Iterable[Path]) -> list[Path]:
    """Each path, or a directory's *.json and *.csv and its subfolders' results.json and result.json (Gradescope's
    export, a folder of Classroom results), sorted: in this order a later file's learner replaces an earlier's."""
    patterns = ("*.json", "*.csv", "*/results.json", "*/result.json")
    found = []
    for path in paths:
        if path.is_dir():
            found += sorted(file for pattern in patterns for file in path.glob(pattern) if file.is_file())
        else:
            found.append(path)  # read_file says why, when it is no file
    return found


def read_results(
    paths: Iterable[Path], assignment: str | None, warn: Callable[[str], None], shown: Callable[[str], str]
) -> list[Learner]:
    """Every learner of every file, once: a learner seen again is replaced by the later file's, and `warn` says so,
    naming the learner as `shown` does. Raises NeedsAssignment."""
    learners: dict[str, Learner] = {}
    for path in files_in(paths):
        for read in read_file(path, assignment, warn):
            if read.name in learners:
                warn(f"{shown(read.name)}: {read.source} replaces {learners[read.name].source}")
            learners[read.name] = read
    return list(learners.values())
