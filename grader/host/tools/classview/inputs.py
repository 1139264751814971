"""The class view's inputs: the result files named (a folder's, found), and every learner of them once; each file is
read by the one reader, `grader.host.tools.classview.reader`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from grader.host.results import NeedsAssignment
from grader.host.tools.classview.reader import Learner, read_file

__all__ = ["Learner", "NeedsAssignment", "files_in", "read_results"]


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
