"""Batch grading: a submission graded beside a classmate (`--jobs 2`) can neither take from it nor leave
anything for it, and the classmate gets the grade it gets alone.

The hostile submission's Attention.forward first fills its own scratch (64 MB, which is its own to
fill), then tries to leave a file in the batch's temporary directory, where every submission's scratch
lives, and to read the classmate's copy there. Confined, both are refused and its check errors.
Unconfined (the control) the file is left and the correct code after it passes; the classmate's copy
is read there only when the two gradings overlap in time, which a loaded machine does not promise,
so the control asserts the file alone.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
from test_batch import run_batch, write_submission
from test_hostile import attention_body_prefix

from grader.checks import select

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux's (docs/isolation.md)")
CHECKS = ("attention", "transformer")  # the classmate's grading outlasts the hostile's first check
GRADED = select(CHECKS)  # attention.causal_mask too
FULL_SCORE = sum(check.points for check in GRADED)
LEFT = "left-for-a-classmate"
REACH_BESIDE = f'''

def reach_beside(shared):
    """What this submission reached outside its own scratch: a file left, a classmate's module read."""
    import os, time

    with open(os.path.join(os.environ["TMPDIR"], "ballast"), "wb") as ballast:
        ballast.write(bytes(64 << 20))
    reached = []
    try:
        open(os.path.join(shared, "{LEFT}"), "w").close()
        reached.append("left a file")
    except OSError:
        pass
    # Wait for a classmate's copy in the first call only: every case calls this, and a classmate already
    # graded would otherwise cost each call the whole wait (the check then times out, unconfined too).
    deadline = time.monotonic() + (0 if getattr(reach_beside, "waited", False) else 20)
    reach_beside.waited = True
    try:
        while "read a classmate" not in reached:
            copies = [os.path.join(shared, name, "exercises", "attention.py") for name in os.listdir(shared)]
            if any(os.path.exists(copy) and "reach_beside" not in open(copy).read() for copy in copies):
                reached.append("read a classmate")
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
    except OSError:
        pass
    if "left a file" not in reached:
        raise RuntimeError(f"reached {{reached}}")
'''


def graded_beside(tmp_path: Path, *flags: str, env: dict | None = None) -> tuple[dict, dict, Path]:
    """The batch of the classmate and the hostile submission, two at a time, with its temporary directory
    in `shared`: the gradebook's rows, the hostile submission's attention result, and `shared`."""
    shared, submissions = tmp_path / "shared", tmp_path / "submissions"
    shared.mkdir(parents=True)
    submissions.mkdir()
    for name, edits in {"classmate": {}, "hostile": hostile_edits(shared)}.items():
        write_submission(submissions, name, edits)
    csv_path = tmp_path / "grades.csv"
    args = (str(submissions), *CHECKS, "--csv", str(csv_path), "--reference", "random", "--jobs", "2", *flags)
    result = run_batch(*args, "--timeout", "60", env={"TMPDIR": str(shared), **(env or {})})
    assert result.returncode == 0, result.stderr[-3000:]
    with open(csv_path, newline="") as handle:
        rows = {row["submission"]: row for row in csv.DictReader(handle)}
    report = json.loads((tmp_path / "grades-results" / "hostile.json").read_text())["report"]
    return rows, next(check for check in report["checks"] if check["id"] == "attention"), shared


def hostile_edits(shared: Path) -> dict:
    import_line = "from .config import Config, normal_weight\n"
    reach = attention_body_prefix(f"reach_beside({str(shared)!r})")
    return {"attention.py": [(import_line, import_line + REACH_BESIDE), *reach]}


def full_score(row: dict) -> bool:
    return all(row[check.id] == "pass" for check in GRADED) and row["score"] == str(FULL_SCORE) and row["error"] == ""


@pytest.mark.slow
def test_a_classmate_graded_beside_a_hostile_submission_gets_its_grade(reference, tmp_path):
    rows, hostile, shared = graded_beside(tmp_path / "on", "--require-sandbox")
    assert full_score(rows["classmate"]), rows["classmate"]
    assert hostile["status"] == "error" and "reached []" in hostile["message"], hostile
    assert sorted(path.name for path in shared.iterdir()) == []  # no file left, every scratch gone
    # The control: unconfined, the same code leaves its file and reads the classmate's module.
    rows, hostile, shared = graded_beside(tmp_path / "off", env={"GPT2_GRADER_SANDBOX": "off"})
    assert hostile["status"] == "pass", hostile
    assert (shared / LEFT).exists() and full_score(rows["classmate"]), rows["classmate"]
