"""The class view's one reader: a result file, recognised by its content (each format's `ReadBack`, beside its
writer), read back into a `Learner` per learner through the checks' records. A learner writes anything into their own:
read within a size limit, validated strictly (no number from a string, no NaN, no unknown status), texts cleaned, one
line, bounded; what is wrong is skipped in a line naming its field, never its value: the file, or the entry or row."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, AliasPath, BaseModel, ConfigDict, Field, ValidationError, create_model

from grader.host import platforms
from grader.host.course import COURSE_DIR
from grader.host.render import json as report_json
from grader.host.results import STOPPED, CheckStatus, ReadBack
from grader.host.tools import batch, gradebook
from grader.shared.wire import clean_text, malformed

MAX_FILE_BYTES = 64 * 2**20  # a collected scores.json of a large class; a forged file larger is refused unread
TEXT_LIMIT = 500  # characters of one name, check id or mistake
COURSE_PAGE = re.compile(rf"{COURSE_DIR}/[A-Za-z0-9_.-]+\.md")  # the only page an input may name: no link elsewhere
# The grader's own, then each platform's: each claims a file by the keys it has and the others lack.
JSON_FORMATS = (batch.RESULT_READ_BACK, report_json.READ_BACK, *platforms.read_backs())
NOT_CLAIMED = ("neither a JSON result nor a gradebook CSV", "JSON, but none of the results this command reads")


def one_line(text: str) -> str:
    """A text of a result as the class view keeps it: printable, one line, at most TEXT_LIMIT characters."""
    return clean_text(text, TEXT_LIMIT).replace("\n", " ")


Line = Annotated[str, AfterValidator(one_line)]
Number = Annotated[float, Field(allow_inf_nan=False)]
STRICT = ConfigDict(strict=True)
# The record's fields the class view keeps, then a learner's: each (type, default; ... where it must be there).
RECORD = {"id": (Line, ...), "status": (CheckStatus, ...), "mistake": (Line | None, None), "page": (Line | None, None)}
RECORD |= {"message": (Line, ""), "error": (Line | None, None), "max_points": (Number, 0)}
LEARNER = {"name": (Annotated[Line, Field(min_length=1)], ...), "score": (Number | None, None)}
LEARNER |= {"max_score": (Number | None, None), "ungraded": (Line | None, None), "flag": (Line, "")}


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


def placed(fields: dict, at: Callable[[str], tuple]) -> dict:
    """Each field read from its place: `at(name)`, the keys and indexes to it."""
    return {n: (kind, Field(given, validation_alias=AliasPath(*at(n)))) for n, (kind, given) in fields.items()}


def model(format: ReadBack) -> type[BaseModel]:
    """What one entry of `format` must be: the learner's fields it maps, at their places, each record at its own."""
    record = create_model("Record", __config__=STRICT, **placed(RECORD, lambda name: (*format.record_at, name)))
    mapped = {name: LEARNER.get(name, (list[record], [])) for name in format.fields}
    return create_model("Entry", __config__=STRICT, **placed(mapped, format.fields.__getitem__))


def learner(entry: BaseModel, format: ReadBack, path: Path) -> Learner:
    """A learner's fields that the format does not map take their defaults: the name from the file's path."""
    got = {"name": None, "score": None, "max_score": None, "records": [], "ungraded": None, "flag": ""}
    got |= {name: getattr(entry, name) for name in format.fields}
    records = got["records"]
    return Learner(
        got["name"] or one_line(format.name_from(path)),
        {r.id: r.status for r in records},
        {r.id: r.mistake for r in records if r.mistake},
        got["score"] or 0,
        sum(r.max_points for r in records) if got["max_score"] is None else got["max_score"],
        str(path),
        {r.id: r.page for r in records if r.page and COURSE_PAGE.fullmatch(r.page)},
        "" if records else got["ungraded"] or format.no_records,
        {r.id: r.error or r.message or r.status for r in records if r.status in STOPPED},
        got["flag"],
    )


def read_entries(data: object, format: ReadBack, path: Path, assignment: str | None, warn) -> list[Learner]:
    """The file's learners: the file's one, else each entry's, one entry that is not right skipped alone."""
    entry_model, learners = model(format), []
    for label, entry in format.entries(data, assignment) if format.entries else [("", data)]:
        try:
            if isinstance(entry, Exception):  # the format's own reason, "2 cells where the header has 6"
                raise entry
            learners.append(learner(entry_model.model_validate(entry), format, path))
        except ValueError as why:  # pydantic's ValidationError is one
            said = malformed(label and "the entry" or format.what, why) if isinstance(why, ValidationError) else why
            if not label:  # the file is the one learner
                raise ValueError(said) from None
            warn(f"skipped {path}, {one_line(label)}: {one_line(str(said))}")
    return learners


def text_of(path: Path) -> str:
    """The file's text: a regular file of at most MAX_FILE_BYTES, UTF-8 (with or without a byte-order mark)."""
    if not path.is_file():
        raise ValueError("not a regular file" if path.exists() else "no such file")
    with open(path, "rb") as handle:  # OSError: said by read_file
        raw = handle.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise ValueError(f"over {MAX_FILE_BYTES:,} bytes")
    return raw.decode("utf-8-sig")  # UnicodeDecodeError: a ValueError, "not UTF-8 text"


def parsed(text: str) -> tuple[object, tuple[ReadBack, ...]]:
    """The file's data and the formats it may be: JSON's, else a CSV's rows and the gradebook's."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # not JSON (or nested past Python's parser): a gradebook, or nothing
        return list(csv.reader(io.StringIO(text))), (gradebook.READ_BACK,)  # csv.Error: said by read_file
    if not isinstance(data, dict):
        raise ValueError("JSON, but no object: not a result")
    return data, JSON_FORMATS


def read_file(path: Path, assignment: str | None, warn: Callable[[str], None]) -> list[Learner]:
    """The learners of one file; none, said in a line, when it cannot be read. Raises NeedsAssignment."""
    try:
        data, formats = parsed(text_of(path))
        format = next((format for format in formats if format.claims(data)), None)
        if format is None:
            raise ValueError(NOT_CLAIMED[isinstance(data, dict)])
        return read_entries(data, format, path, assignment, warn)
    except OSError as error:
        warn(f"skipped {path}: {one_line(error.strerror or 'cannot be read')}")
    except (ValueError, csv.Error) as why:  # a UnicodeDecodeError is a ValueError
        warn(f"skipped {path}: {'not UTF-8 text' if isinstance(why, UnicodeDecodeError) else one_line(str(why))}")
    return []
