"""Batch grading throughput: submissions per minute for classes of 5, 10 and 20 on 2 cores.

    .venv/bin/python bench/batch_speed.py [--sizes 5 10 20] [--jobs 2] [CHECK ...]

The generated class cycles through three kinds of submission: the solutions (every check runs to
the end), the solutions with one mistake (LayerNorm's variance with N-1), and the untouched stubs
(every check stops at once). The reference is prepared before the clock starts; each size is one
run of `python -m grader.host.tools.batch`, timed from start to exit.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.host.refcache import ensure_reference  # noqa: E402
from grader.host.tools.stubs import expected_exercises  # noqa: E402

MISTAKE = ("normalization.py", "unbiased=False", "unbiased=True")


def write_class(root: Path, size: int) -> None:
    solutions = REPO / "solutions"
    stubs = expected_exercises(solutions)
    for i in range(size):
        exercises = root / f"learner{i:02d}" / "exercises"
        shutil.copytree(solutions, exercises, ignore=shutil.ignore_patterns("__pycache__"))
        if i % 3 == 1:
            file, old, new = MISTAKE
            (exercises / file).write_text((exercises / file).read_text().replace(old, new))
        elif i % 3 == 2:
            for name, text in stubs.items():
                (exercises / name).write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checks", nargs="*", metavar="CHECK", help="grade only these checks (default: all)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 20])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    ensure_reference("random", lambda message, fraction=None: print(message, file=sys.stderr))
    print("| submissions | jobs | seconds | submissions per minute |\n|---|---|---|---|")
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="batch-bench-") as scratch:
            root = Path(scratch)
            write_class(root / "class", size)
            command = [
                sys.executable,
                "-m",
                "grader.host.tools.batch",
                str(root / "class"),
                *args.checks,
                "--csv",
                str(root / "grades.csv"),
                "--reference",
                "random",
                "--jobs",
                str(args.jobs),
            ]
            started = time.perf_counter()
            subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            seconds = time.perf_counter() - started
        print(f"| {size} | {args.jobs} | {seconds:.0f} | {size / seconds * 60:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
