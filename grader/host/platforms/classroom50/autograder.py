"""Classroom 50's autograder for the GPT-2 course, written by `python -m grader.host.platforms.classroom50.bundle`
(do not edit: build it again).

Classroom 50's runner runs this with the learner's checkout as the working directory and the submission in its
environment. It installs the grader that sits beside it in grader-src/ (the course's release, not the copy in the
learner's repository) with a CPU-only PyTorch, fetches GPT-2 where the runner can reach it, and grades the
checkout's exercises/ into ./result.json, ./release-body.md and the step's status and summary; a submission with no
exercises/ package gets 0 points and notes that say why. It exits 0 once a result is written, whatever the score; any
other exit tells the runner that grading itself failed.
The standard library only: nothing else is installed when it starts.
"""

import shutil
import subprocess
import sys
import time
from pathlib import Path

RELEASE = "unreleased"  # the course's commit this bundle was made from, stamped by its bundle.py
COURSE_ASSIGNMENT = ""  # the assignment of the course's assignments.toml graded, stamped as well; "": every check
GRADER = Path(__file__).resolve().parent / "grader-src"
CHECKOUT = Path.cwd()
# Whether this runner can confine the learner's code: then a grading that could not is refused, never quietly
# unconfined.
SANDBOX_PROBE = "import sys; from grader.shared.sandbox import status; sys.exit(not status().on)"
NOTHING_TO_GRADE = (
    "import sys; from pathlib import Path; from grader.host.platforms.classroom50.writer import nothing_to_grade; "
    "sys.exit(nothing_to_grade(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))"
)
# What the runner reads back from the checkout: it writes its own error result into them when this script fails,
# following a link the learner committed there to wherever it points.
OUTPUTS = ("result.json", "release-body.md")


def say(message: str) -> None:
    print(f"autograder: {message}", flush=True)


def python(*args: str, quiet: bool = False) -> int:
    """This interpreter on `args`, run in grader-src/: `-m grader` is the bundle's grader there, whatever the
    checkout holds (a learner's own grader/ is never imported)."""
    output = subprocess.DEVNULL if quiet else None
    return subprocess.run([sys.executable, *args], cwd=GRADER, stdout=output).returncode


def remove_planted_outputs() -> None:
    """Remove what the submission holds at an output's name where it is not a plain file (a link, a folder)."""
    for path in (CHECKOUT / name for name in OUTPUTS):
        if not path.is_symlink() and (path.is_file() or not path.exists()):
            continue
        say(f"removing {path.name} from the submission: it is not a plain file")
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def main() -> int:
    started = time.monotonic()
    remove_planted_outputs()
    say(f"the GPT-2 course's grader at {RELEASE}, on Python {sys.version.split()[0]}")
    # torch from a local wheel or PyTorch's CPU index, then the grader and its packages, uncompiled (--grading)
    if python("-m", "grader.host.tools.setup", "--grading"):
        say("could not install the grader and PyTorch (see pip's lines above)")
        return 1
    exercises = CHECKOUT / "exercises"
    if not (exercises / "__init__.py").is_file():
        reason = "Nothing to grade: the submission has no exercises/ package (exercises/__init__.py is missing)."
        say(reason)
        return python("-c", NOTHING_TO_GRADE, reason, str(CHECKOUT), COURSE_ASSIGNMENT)
    python("-m", "grader", "--download", quiet=True)  # where it cannot, grade says why once, then grades offline
    confined = python("-c", SANDBOX_PROBE, quiet=True) == 0  # the report's `sandbox:` line says which
    outputs = ["--exercises", str(exercises), "--classroom50", str(CHECKOUT)]
    outputs += ["--assignment", COURSE_ASSIGNMENT] if COURSE_ASSIGNMENT else []
    code = python("-m", "grader", *outputs, *(["--require-sandbox"] if confined else []))
    say(f"graded in {time.monotonic() - started:.0f} s since this script started")
    return 0 if code in (0, 1) else code  # 1: some check does not pass, which result.json says


if __name__ == "__main__":
    sys.exit(main())
