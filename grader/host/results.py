"""The result model: what every renderer reads, and nothing else."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal, get_args

from grader.host.course import page_of

# A check's status: the one vocabulary of every report, decided by `grader.host.verdict` alone.
CheckStatus = Literal["pass", "fail", "todo", "error", "timeout"]
STATUSES: tuple[CheckStatus, ...] = get_args(CheckStatus)
FAILING: tuple[CheckStatus, ...] = ("fail", "error", "timeout")  # the statuses whose report names the course page
STOPPED: tuple[CheckStatus, ...] = ("error", "timeout")  # the statuses of a check that stopped, each with a reason
REFERENCE_NAMES = {"gpt2": "GPT-2", "random": "the random reference"}  # by Report.reference, as messages say


def reference_name(kind: str) -> str:
    """What messages and figures call the model graded against: a random model is never "GPT-2"."""
    return REFERENCE_NAMES.get(kind, kind)


@dataclass
class CheckResult:
    id: str
    part: str
    summary: str
    status: CheckStatus
    max_score: int
    message: str = ""
    max_abs_diff: float | None = None
    expected_shape: list[int] | None = None
    actual_shape: list[int] | None = None
    notes: list[str] = field(default_factory=list)
    file: str | None = None
    line: int | None = None
    seconds: float = 0.0
    hint: str | None = None  # the classic mistake the output matches
    divergence: str | None = None  # the first of GPT-2's intermediate steps the learner's code misses
    next_step: str = ""
    trace: list[dict] = field(default_factory=list)  # {tag, name, shape, expected_shape}, with --trace
    target: str = ""  # what the learner writes for this check, e.g. "Embed.forward"; for a todo, what raised it
    printed: list[str] = field(default_factory=list)  # what the learner's code printed during the check, cleaned
    figures: dict = field(default_factory=dict)  # plain lists for the HTML report (grader.host.figures); not in to_dict
    page: str | None = None  # the course page that covers this check (docs/course/...): filled from the id
    stood_in: list[str] = field(default_factory=list)  # the failing parts (check ids) graded with the grader's own

    def __post_init__(self):
        if self.page is None:  # the one place a result gets its page: its check module's PAGE, by check id
            self.page = page_of(self.id)

    @property
    def page_to_read(self) -> str | None:
        """The course page a failing check points to, as every format links it; none while it passes or is todo."""
        return self.page if self.status in FAILING else None

    @property
    def score(self) -> int:
        return self.max_score if self.status == "pass" else 0

    def diagnosis(self) -> list[str]:
        """What the grader says of this check, in the one order and wording every format shows: the
        message, where the computation first leaves the reference, then what to do next (which names
        the likely mistake). A report built by hand may carry a hint without a next step: still named."""
        next_step = self.next_step or (f"most likely: {self.hint}" if self.hint else "")
        said = (self.message, self.where(), next_step and f"next: {next_step}")
        return [line for line in said if line]

    def where(self) -> str:
        """The "where:" line: the first step that differs; else, for a named mistake found from the output alone (no
        step recorded), the learner's line it was placed at, so that every format shows a place to look."""
        if self.divergence:
            return f"where: {self.divergence}"
        if self.status == "fail" and self.hint and self.file and self.line:
            return f"where: {self.file}:{self.line}" + (f" ({self.target})" if self.target else "")
        return ""

    @property
    def shown_diff(self) -> str:
        """The max abs diff as every table shows it; empty where nothing was compared."""
        return "" if self.max_abs_diff is None else f"{self.max_abs_diff:.2e}"

    @property
    def error_place(self) -> tuple[str | None, int] | None:
        """Where the check's error came from, when it names a line of the learner's."""
        return (self.file, self.line) if self.status == "error" and self.line is not None else None

    def record(self, assignment: str | None) -> CheckRecord:
        """The check as every output writes it: the one place a result's fields get the record's names."""
        return CheckRecord(
            id=self.id,
            title=self.summary,
            part=self.part,
            assignment=assignment,
            status=self.status,
            points=self.score,
            max_points=self.max_score,
            mistake=self.hint,
            message=self.message,
            file=self.file,
            line=self.line,
            page=self.page,
            error=self.error_reason,
        )

    @property
    def error_reason(self) -> str | None:
        """Why the check errored or timed out, in one line with the learner's line it came from; None otherwise."""
        if self.status not in ("error", "timeout"):
            return None
        said = (self.message.splitlines() or [self.status])[0]
        place = f"{self.file}:{self.line}"
        return f"{said} at {place}" if self.line is not None and place not in said else said

    def to_dict(self, assignment: str | None = None) -> dict:
        """`grade --json`'s check: the record, then what only this format carries."""
        recorded = {*RECORD_FIELDS, *RENAMED.values(), "figures"}
        extra = {key: value for key, value in asdict(self).items() if key not in recorded}
        return {**asdict(self.record(assignment)), **extra, "max_abs_diff": finite_or_none(self.max_abs_diff)}

    @classmethod
    def from_dict(cls, check: dict) -> CheckResult:
        """The check `to_dict` wrote."""
        known = {f.name for f in fields(cls)}
        renamed = {RENAMED[key]: check[key] for key in RENAMED if key in check}
        return cls(**{key: value for key, value in check.items() if key in known}, **renamed)


@dataclass(frozen=True)
class CheckRecord:
    """One check as every output writes it and the class view reads it back: the one spelling of each field."""

    id: str
    title: str  # what the check grades, in a line
    part: str
    assignment: str | None  # the course's assignment graded (assignments.toml), None: the checks named
    status: CheckStatus
    points: int
    max_points: int
    mistake: str | None  # the named mistake the output matches
    message: str
    file: str | None  # the learner's file, relative to the package
    line: int | None
    page: str | None  # the course page that covers the check
    error: str | None  # why the check errored or timed out, one line; None when it did neither


RECORD_FIELDS = tuple(f.name for f in fields(CheckRecord))
RECORD_VERSION = 1  # the version of CheckRecord's fields, written beside the records in every format that keeps them
# CheckResult's fields that the record names otherwise (by the result's name): every other field keeps its name.
RENAMED = {"title": "summary", "max_points": "max_score", "mistake": "hint"}


@dataclass
class Report:
    reference: str  # "gpt2" or "random"
    package: str
    checks: list[CheckResult]
    fallback_reason: str | None = None
    seed: int = 0  # of the random inputs
    sandbox: str = ""  # "sandbox: on (...)" or "sandbox: off (why)"
    assignment: str | None = None  # the course's assignment graded (grade --assignment); None: the checks named

    def title(self, what: str = "") -> str:
        """Every format's title, naming the assignment graded: "GPT-2 grader, assignment part1: `what`"."""
        graded = f", assignment {self.assignment}" if self.assignment else ""
        return f"GPT-2 grader{graded}{': ' if what else ''}{what}"

    @property
    def score(self) -> int:
        return sum(c.score for c in self.checks)

    @property
    def max_score(self) -> int:
        return sum(c.max_score for c in self.checks)

    def records(self) -> list[CheckRecord]:
        return [check.record(self.assignment) for check in self.checks]

    @property
    def passed(self) -> bool:
        return all(c.status == "pass" for c in self.checks)

    @classmethod
    def from_dict(cls, data: dict) -> Report:
        """The report `to_dict` (or `grade --json`) wrote."""
        checks = [CheckResult.from_dict(check) for check in data["checks"]]
        return cls(
            data["reference"],
            data["package"],
            checks,
            data.get("fallback_reason"),
            data.get("seed", 0),
            data.get("sandbox", ""),
            data.get("assignment"),
        )

    def to_dict(self) -> dict:
        return {
            "reference": self.reference,
            "fallback_reason": self.fallback_reason,
            "seed": self.seed,
            "sandbox": self.sandbox,
            "assignment": self.assignment,
            "package": self.package,
            "score": self.score,
            "max_score": self.max_score,
            "record_version": RECORD_VERSION,
            "checks": [c.to_dict(self.assignment) for c in self.checks],
        }


class NeedsAssignment(Exception):
    """A file holds several assignments and none was asked for: the message names them."""


Where = tuple[str | int, ...]  # keys and list indexes, from the outside in


@dataclass(frozen=True)
class ReadBack:
    """How the class view (grader.host.tools.classview.reader) reads a format's records back, declared by the format's
    writer beside what it writes: which files are its, and where a learner's fields are in one of its entries."""

    what: str  # the format, as a skipped file's line names it: "a Gradescope results.json"
    claims: Callable[[object], bool]  # whether a file's data (parsed JSON, or a CSV's rows) is this format
    # Where each of a learner's fields is in an entry: name, score, max_score, records (the list of check records),
    # ungraded (why no records), flag (why the grade is in doubt). A field left out takes its default.
    fields: Mapping[str, Where]
    record_at: Where = ()  # where the record is inside each item of `records` (Gradescope's extra_data)
    # A file of many learners: each entry, labelled for a skipped line ("entry 2 of part1"); an entry may be an
    # exception, which skips it with its message. None: the whole file is one learner's.
    entries: Callable[[object, str | None], list[tuple[str, object]]] | None = None
    name_from: Callable[[Path], str] | None = None  # the learner's name from the file's path, where no field holds it
    no_records: str = "no statuses"  # why a learner with no records was not graded, where the entry says nothing


def finite_or_none(value: float | None) -> float | None:
    """JSON has no inf or NaN: such a number is written as null."""
    return value if value is None or math.isfinite(value) else None
