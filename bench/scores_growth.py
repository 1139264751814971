"""How much Classroom 50's scores.json grows a submission: the bytes of this grader's `result.json`.

    .venv/bin/python bench/scores_growth.py [--learners 100] [--pushes 30] [CHECK ...]

`collect-scores` keeps every submission's `result.json` (less its assignment's name) in the classroom's
`scores.json`, a file of the config repository that GitHub refuses over 100 MB. This grades the solutions and the
stubs with `grade --classroom50` (offline, the random reference), as the runner's variables would have it, and
prints each `result.json`'s bytes as written and without indenting, then a class's total under every-push.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.host.tools.stubs import expected_exercises  # noqa: E402

GITHUB_FILE_LIMIT = 100 * 10**6
RUNNER = {  # what Classroom 50's runner sets: a learner's submission, its tag, its URLs
    "CLASSROOM": "deep-learning",
    "ASSIGNMENT": "gpt2",
    "OWNER": "ada-lovelace",
    "SUBMISSION_TAG": "submit/2026-12-01T12-00-00Z-0123abc",
    "COMMIT_URL": "https://github.com/org/deep-learning-gpt2-ada-lovelace/commit/" + "0123abcd" * 5,
    "RELEASE_URL": "https://github.com/org/deep-learning-gpt2-ada-lovelace/releases/tag/submit%2F2026-12-01",
}


def result_bytes(checkout: Path, checks: list[str]) -> tuple[int, int]:
    """The bytes of `result.json` for a checkout's exercises/, graded from the checkout as the runner grades it: as
    written, and as compact JSON."""
    env = {**os.environ, **RUNNER, "GITHUB_OUTPUT": str(checkout / "output"), "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "grader", *checks, "--exercises", "exercises", "--reference", "random"]
    ran = subprocess.run([*command, "--classroom50", "."], cwd=checkout, env=env, capture_output=True, text=True)
    if not (checkout / "result.json").is_file():
        sys.exit(f"grade --classroom50 wrote no result.json in {checkout.name}: {ran.stderr[-2000:]}")
    text = (checkout / "result.json").read_bytes()
    return len(text), len(json.dumps(json.loads(text), separators=(",", ":")).encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checks", nargs="*", metavar="CHECK", help="the checks graded (default: every check)")
    parser.add_argument("--learners", type=int, default=100)
    parser.add_argument("--pushes", type=int, default=30, help="graded pushes per learner in a term")
    args = parser.parse_args()
    packages = {
        "solutions": {path.name: path.read_text() for path in sorted((REPO / "solutions").glob("*.py"))},
        "stubs": expected_exercises(REPO / "solutions"),
    }
    sizes = {}
    with tempfile.TemporaryDirectory(prefix="scores-growth-") as scratch:
        for name, files in packages.items():
            exercises = Path(scratch) / name / "exercises"
            exercises.mkdir(parents=True)
            for file, text in files.items():
                (exercises / file).write_text(text)
            sizes[name] = result_bytes(exercises.parent, args.checks)
    for name, (written, compact) in sizes.items():
        print(f"{name}: result.json {written:,} bytes as written, {compact:,} compact")
    largest = max(written for written, _ in sizes.values())
    total = largest * args.learners * args.pushes
    print(
        f"every-push: {args.learners} learners x {args.pushes} pushes x {largest:,} bytes = {total / 10**6:.1f} MB "
        f"in one scores.json; GitHub refuses a file over {GITHUB_FILE_LIMIT / 10**6:.0f} MB, "
        f"reached at {GITHUB_FILE_LIMIT // (largest * args.learners)} pushes each"
    )


if __name__ == "__main__":
    main()
