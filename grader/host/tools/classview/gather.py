"""Which files the class view reads, and one learner of several results: the files of the folders given (not its own
outputs, nor Classroom 50's summary of totals), and a learner read twice merged (a JSON result and a gradebook row) or
the newer result kept, said on stderr without a name or path that --anonymise hides."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from grader.host.tools.classview.reader import Learner, read_file

# Classroom 50's `gh teacher download` writes, beside each learner's clone (which holds result.json, the newest
# submission's, and results.json, every submission's newest first), a scores.csv of totals only, with this header:
# as read in github.com/foundation50/classroom50, cli/gh-teacher/internal/download/download.go at commit
# 0343327c7678fefeaf3a89dd44a23bcc186d484b. (With --by-pattern it writes clones alone.)
CLASSROOM50_SUMMARY = ",".join(
    ["username", "first_name", "last_name", "email", "section", "score", "max_score", "datetime", "submission_tag"]
    + ["submitted_by", "review_url", "late", "override"]
)


def first_line(path: Path) -> str:
    """A regular file's first line (a named pipe's would wait for a writer); "" where there is none."""
    try:
        if not path.is_file():
            return ""
        with open(path, encoding="utf-8-sig", errors="replace") as handle:
            return handle.readline(4096).rstrip("\r\n")
    except OSError:
        return ""  # read_file says why


def files_in(paths: Iterable[Path], not_results: Iterable[str] = ()) -> list[Path]:
    """Each path, or a directory's *.json and *.csv and each subfolder's result.json, else its results.json
    (Gradescope's export, a folder of Classroom results), sorted. Passed over: a CSV whose first line is one of
    `not_results` (the class view's own outputs) or Classroom 50's summary, and Classroom 50's results.json beside a
    result.json (the newest of the same submissions)."""
    passed_over = {CLASSROOM50_SUMMARY, *not_results}
    found = []
    for path in paths:
        if path.is_dir():
            histories = [file for file in path.glob("*/results.json") if not file.with_name("result.json").exists()]
            files = [*path.glob("*.json"), *path.glob("*.csv"), *path.glob("*/result.json"), *histories]
            found += sorted(file for file in files if file.is_file())
        else:
            found.append(path)  # read_file says why, when it is no file
    return [path for path in found if path.suffix != ".csv" or first_line(path) not in passed_over]


def from_gradebook(learner: Learner) -> bool:
    """Whether the learner was read from a CSV gradebook: statuses only."""
    return Path(learner.source).suffix.lower() == ".csv"


def modified(learner: Learner) -> int:
    try:
        return Path(learner.source).stat().st_mtime_ns
    except OSError:
        return 0


Say = Callable[[str], None]
Label = Callable[[str], str]  # a file as messages name it


def merged(result: Learner, gradebook: Learner, label: Label) -> tuple[Learner, str]:
    """A JSON result and a gradebook row of one learner as one: the statuses of both (the JSON's where both have
    one, and the remark says where they differ), the rest the JSON's (its score, mistakes and errors)."""
    differ = [check for check, status in gradebook.statuses.items() if result.statuses.get(check, status) != status]
    remark = f"{label(result.source)} and {label(gradebook.source)} differ on {', '.join(differ)}: the first's kept"
    one = replace(
        result if result.graded or not gradebook.graded else gradebook,
        statuses={**gradebook.statuses, **result.statuses},
        mistakes=result.mistakes,
        errors=result.errors,
        pages=result.pages,
        flag=result.flag or gradebook.flag,
        source=result.source,
    )
    return one, remark if differ else ""


def combined(kept: Learner, read: Learner, label: Label) -> tuple[Learner, str]:
    """One learner read twice, and a remark: a JSON result and a gradebook row merged; else the newer file's (the
    later read of files as old, or of one file), and the remark says which was kept."""
    if read.source == kept.source:
        return read, f"{label(read.source)} holds them twice: the later kept"
    if from_gradebook(kept) != from_gradebook(read):
        result, gradebook = (read, kept) if from_gradebook(kept) else (kept, read)
        return merged(result, gradebook, label)
    newer, older = sorted((read, kept), key=modified, reverse=True)
    return newer, f"{label(newer.source)} kept, newer than {label(older.source)}"


def read_results(
    paths: Iterable[Path],
    assignment: str | None,
    warn: Say,
    shown: Callable[[str], str],
    not_results: Iterable[str] = (),
    hide_paths: bool = False,
) -> list[Learner]:
    """Every learner of every file (files_in), once: a learner seen again is merged or replaced (`combined`), and
    `warn` says so, naming the learner as `shown` does and, with `hide_paths`, each file by its place among the files
    read ("input 3"), never by its path. Raises NeedsAssignment."""
    files = files_in(paths, not_results)
    places = {str(path): f"input {number}" for number, path in enumerate(files, 1)}
    label = places.__getitem__ if hide_paths else str

    def say(message: str) -> None:
        for path in sorted(places, key=len, reverse=True) if hide_paths else ():
            message = message.replace(path, places[path])
        warn(message)

    learners: dict[str, Learner] = {}
    for path in files:
        for read in read_file(path, assignment, say):
            if read.name not in learners:
                learners[read.name] = read
                continue
            learners[read.name], remark = combined(learners[read.name], read, label)
            if remark:
                say(f"{shown(read.name)}: {remark}")
    return list(learners.values())
