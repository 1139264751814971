"""Gradescope's autograder zip: the learner repository (no solution), with `setup.sh` and `run_autograder`.

    python -m grader.host.platforms.gradescope.bundle autograder.zip      (or: make gradescope)

Gradescope unpacks the zip into /autograder/source, runs `setup.sh` once to build its image (the
grader installed, GPT-2 downloaded where the image can reach it, the reference cache prepared) and
`run_autograder` for each submission: the submitted `exercises/` (or the files alone) graded with
`--require-sandbox` into /autograder/results/results.json. Both scripts honour AUTOGRADER_ROOT in
place of /autograder, which is how the tests run them.
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path

from grader.host.assignments import add_option
from grader.host.tools.release import ReleaseError, build_release, stamped
from grader.shared.commands import tool_parser
from grader.shared.paths import REPO_ROOT

SCRIPTS_DIR = Path(__file__).resolve().parent  # setup.sh and run_autograder, beside this
GRADES = "run_autograder"  # the script that grades each submission
SCRIPTS = ("setup.sh", GRADES)
UNASSIGNED = 'assignment=""'
EXECUTABLE = 0o100755 << 16  # a zip entry's Unix mode lives in the high half of external_attr


def script(name: str, assignment: str | None) -> str:
    """One of the SCRIPTS, run_autograder stamped with the assignment it grades."""
    text = (SCRIPTS_DIR / name).read_text()
    return stamped(text, UNASSIGNED, assignment, f"{SCRIPTS_DIR / name}") if assignment and name == GRADES else text


def build_zip(out: Path, root: Path = REPO_ROOT, assignment: str | None = None) -> list[str]:
    """Write the autograder zip, grading `assignment` (None: every check), to `out`; return the names it holds, the
    scripts first."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpt2-gradescope-") as scratch:
        source = Path(scratch) / "source"
        files = build_release(source, root, assignment)
        staging = out.with_name(f".{out.name}.{os.getpid()}")
        try:
            with zipfile.ZipFile(staging, "w", zipfile.ZIP_DEFLATED) as archive:
                for name in SCRIPTS:
                    entry = zipfile.ZipInfo(name)
                    entry.external_attr, entry.compress_type = EXECUTABLE, zipfile.ZIP_DEFLATED
                    archive.writestr(entry, script(name, assignment))
                for name in files:
                    archive.write(source / name, name)
            os.replace(staging, out)
        finally:
            staging.unlink(missing_ok=True)
    return [*SCRIPTS, *files]


def main(argv: list[str] | None = None) -> int:
    parser = tool_parser("grader.host.platforms.gradescope.bundle", __doc__)
    parser.add_argument("zip", type=Path, metavar="OUT.zip", help="the zip to write (e.g. autograder.zip)")
    add_option(parser, "run_autograder grades")
    args = parser.parse_args(argv)
    try:
        names = build_zip(args.zip, assignment=args.assignment)
    except (ReleaseError, OSError) as error:
        print(f"gradescope: {error}", file=sys.stderr)
        return 1
    print(f"wrote {args.zip}: {len(names)} files; upload it as the assignment's autograder (Configure Autograder)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
