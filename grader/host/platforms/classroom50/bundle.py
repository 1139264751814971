"""Classroom 50's autograder bundle: the folder CLASSROOM/autograders/ASSIGNMENT/ of a classroom's config repository.

    python -m grader.host.platforms.classroom50.bundle OUTDIR      (or: make classroom50)

OUTDIR gets `autograder.py` (from grader/host/platforms/classroom50/), stamped with this checkout's commit, and
`grader-src/`: the grader as the learner release ships it (`grader/`, `pyproject.toml`, the learner README), so
every submission is graded by the course's release, never by the copy in the learner's repository. Classroom 50
publishes the folder as a tar.gz of at most 10 MiB; the build stops, writing nothing, when it would be larger or
when a line the stubs hide appears in it (the release's guard). OUTDIR must be new, empty, or a bundle this
command wrote, which is replaced.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from grader.host.assignments import add_option
from grader.host.tools.release import ReleaseError, build_release, hidden_lines, leaked_lines, stamped
from grader.shared.commands import tool_parser
from grader.shared.paths import REPO_ROOT

TEMPLATE = Path(__file__).resolve().parent / "autograder.py"
UNSTAMPED = 'RELEASE = "unreleased"'
UNASSIGNED = 'COURSE_ASSIGNMENT = ""'
SOURCE = "grader-src"
SOURCE_FILES = (
    "pyproject.toml",
    "README.md",
    "assignments.toml",
)  # beside grader/: what `pip install` of the grader reads
BUNDLE_LIMIT = 10 * 2**20  # Classroom 50's runner fetches no bundle over 10 MiB, compressed
BUNDLE_ENTRIES = {"autograder.py", SOURCE}


def course_commit(root: Path) -> str:
    """This checkout's commit, `-modified` when files differ from it; "unknown" outside git."""

    def git(*args: str) -> str:
        ran = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return ran.stdout.strip() if ran.returncode == 0 else ""

    commit = git("rev-parse", "--short=12", "HEAD")
    if not commit:
        return "unknown"
    return commit + ("-modified" if git("status", "--porcelain", "--untracked-files=no") else "")


def stamped_autograder(commit: str, assignment: str | None = None) -> str:
    """autograder.py, stamped with the course's commit and the assignment it grades (None: every check)."""
    text = TEMPLATE.read_text()
    if UNSTAMPED not in text:
        raise ReleaseError(f"{TEMPLATE} has no line {UNSTAMPED!r} to stamp the commit into")
    text = text.replace(UNSTAMPED, f'RELEASE = "{commit}"')
    return stamped(text, UNASSIGNED, assignment, str(TEMPLATE)) if assignment else text


def compressed_size(folder: Path) -> int:
    """The bytes of `folder` as a gzipped tar, as Classroom 50 publishes it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(folder, arcname=folder.name)
    return buffer.tell()


def replaceable(outdir: Path) -> bool:
    """Whether `outdir` may be written: new, empty, or a bundle of this command's."""
    if not outdir.exists():
        return True
    return outdir.is_dir() and {entry.name for entry in outdir.iterdir()} <= BUNDLE_ENTRIES


def build_bundle(outdir: Path, root: Path = REPO_ROOT, assignment: str | None = None) -> tuple[str, int]:
    """Write the bundle, grading `assignment` (None: every check), to `outdir`; return the commit stamped into it and
    its compressed size."""
    if not replaceable(outdir):
        raise ReleaseError(f"{outdir} holds files that are no bundle of this command's; choose a new directory")
    commit = course_commit(root)
    outdir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpt2-classroom50-") as scratch:
        release = Path(scratch) / "release"
        files = build_release(release, root, assignment)
        staging = Path(scratch) / outdir.name
        for name in files:
            if name.startswith("grader/") or name in SOURCE_FILES:
                (staging / SOURCE / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(release / name, staging / SOURCE / name)
        (staging / "autograder.py").write_text(stamped_autograder(commit, assignment))
        leaks = leaked_lines(staging, hidden_lines(root / "solutions"))
        if leaks:
            raise ReleaseError(f"a solution line would be in the bundle, e.g. {leaks[0]}")
        size = compressed_size(staging)
        if size > BUNDLE_LIMIT:
            raise ReleaseError(f"the bundle is {size:,} bytes compressed, over Classroom 50's {BUNDLE_LIMIT:,}")
        shutil.rmtree(outdir, ignore_errors=True)
        shutil.copytree(staging, outdir)
    return commit, size


def main(argv: list[str] | None = None) -> int:
    parser = tool_parser(
        "grader.host.platforms.classroom50.bundle",
        __doc__,
        "where to write the bundle, e.g. CLASSROOM/autograders/ASSIGNMENT",
    )
    add_option(parser, "the bundle grades")
    args = parser.parse_args(argv)
    try:
        commit, size = build_bundle(args.outdir, assignment=args.assignment)
    except (ReleaseError, OSError) as error:
        print(f"classroom50: {error}", file=sys.stderr)
        return 1
    graded = f"assignment {args.assignment}" if args.assignment else "every check"
    print(
        f"wrote Classroom 50's autograder bundle to {args.outdir} ({size:,} bytes compressed; the grader at {commit}, "
        f"grading {graded}); "
        "commit it to your classroom50 repository as CLASSROOM/autograders/ASSIGNMENT/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
