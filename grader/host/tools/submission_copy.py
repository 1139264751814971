"""A submission's exercises/ copied for grading, or refused in one line: directories and regular files only, within
limits, each file measured by its metadata before a byte of it is copied (batch's and the notebooks' grades)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

# What a submission's exercises/ may hold: a module of this course is a few KB.
FILE_LIMIT = 2**20  # bytes a file
SUBMISSION_LIMIT = 8 * 2**20  # bytes in all
ENTRY_LIMIT = 1000  # files and directories
SPECIAL_FILES = {
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
}


class Refused(Exception):
    """A submission that is not graded: the message, one line, is its row's error."""


def copy_exercises(exercises: Path, target: Path) -> None:
    """Copy `exercises` (but __pycache__) to `target`: directories and regular files only, within the
    limits above, each file measured by its metadata before a byte of it is copied. Raises Refused."""
    pending, entries, total = [Path()], 0, 0
    while pending:  # a stack, not recursion: no depth of tree exhausts Python's
        relative = pending.pop()
        (target / relative).mkdir()
        with os.scandir(exercises / relative) as listing:
            for entry in listing:
                entries += 1
                if entries > ENTRY_LIMIT:
                    raise Refused(f"exercises/ holds more than {ENTRY_LIMIT} files and directories")
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    pending += [relative / entry.name] if entry.name != "__pycache__" else []
                    continue
                accept_file(f"exercises/{relative / entry.name}", info)
                total += info.st_size
                if total > SUBMISSION_LIMIT:
                    raise Refused(f"exercises/ holds more than the limit of {SUBMISSION_LIMIT:,} bytes")
                shutil.copyfile(entry.path, target / relative / entry.name, follow_symlinks=False)


def accept_file(name: str, info: os.stat_result) -> None:
    """Raise Refused unless `name` is a regular file within FILE_LIMIT. A symbolic link could hand the
    grader a file of the grading machine as the learner's; the others would fill the disk or hang
    the copy: a 1.5 GB sparse file is 1.5 GB to copy, however few blocks it has, a named pipe waits
    for a writer, /dev/zero never ends."""
    if stat.S_ISLNK(info.st_mode):
        raise Refused(f"symbolic links are not accepted: {name}")
    if not stat.S_ISREG(info.st_mode):
        raise Refused(f"{name} is {SPECIAL_FILES.get(stat.S_IFMT(info.st_mode), 'a special file')}, not a regular file")
    if info.st_size > FILE_LIMIT:
        raise Refused(f"{name} is {info.st_size:,} bytes, over the limit of {FILE_LIMIT:,} bytes a file")
