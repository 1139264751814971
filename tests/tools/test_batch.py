"""Batch grading: every kind of submission gets its row, and none can stop the batch or use its own grader."""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jsonschema
import psutil
import pytest
from repo import REPO, SOLUTIONS, write_variant

from grader.checks import registry
from grader.shared import sandbox

MODEL = [check.id for check in registry() if check.part == "model"]
POINTS = {check.id: check.points for check in registry()}
CHECK_TIMEOUT = 20  # seconds: the whole model's check takes a few, even on a busy machine

# name -> (edits to the solutions, expected status of each check that does not pass)
GRADED = {
    "correct": ({}, {}),
    "partly_wrong": (
        {"normalization.py": [("unbiased=False", "unbiased=True")]},
        {"layernorm": "fail"},  # the block and the transformer are graded with the grader's LayerNorm in its place
    ),
    "crashing": (
        {
            "attention.py": [
                ("        q = einops.einsum(", "        __import__('os').abort()\n        q = einops.einsum(")
            ]
        },
        {"attention": "error"},  # one mistake, one penalty: the transformer is graded with the grader's Attention
    ),
    "hanging": (
        {
            "transformer.py": [
                (
                    "        residual = self.embed(tokens)",
                    "        while True:\n            pass\n        residual = self.embed(tokens)",
                )
            ]
        },
        {"transformer": "timeout"},
    ),
}
MODEL_FILES = ("attention.py", "block.py", "mlp.py", "normalization.py", "transformer.py", "unembedding.py")


def write_submission(root: Path, name: str, edits: dict) -> Path:
    """A learner checkout whose exercises/ is the solutions with `edits` applied."""
    submission = root / name
    submission.mkdir()
    write_variant(submission, edits).rename(submission / "exercises")
    return submission


def run_batch(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # A session of its own: a submission that kills its process group must not reach pytest.
    return subprocess.run(
        [sys.executable, "-m", "grader.host.tools.batch", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
        start_new_session=True,
    )


@pytest.fixture(scope="module")
def batch(tmp_path_factory, reference):
    root = tmp_path_factory.mktemp("batch")
    submissions = root / "submissions"
    submissions.mkdir()
    for name, (edits, _) in GRADED.items():
        write_submission(submissions, name, edits)
    # Its own grader, tests and workflow: none of them may run.
    correct = submissions / "correct"
    sentinel = root / "submission-grader-ran"
    for decoy in ("grader/__init__.py", "grader/__main__.py", "tests/conftest.py"):
        (correct / decoy).parent.mkdir(parents=True, exist_ok=True)
        (correct / decoy).write_text(f"open({str(sentinel)!r}, 'w').close()\nraise SystemExit(0)\n")
    # Lacks files: the package holds two modules of eight.
    (submissions / "missing_files" / "exercises").mkdir(parents=True)
    for name in ("__init__.py", "config.py", "embedding.py"):
        shutil.copy(SOLUTIONS / name, submissions / "missing_files" / "exercises" / name)
    (submissions / "empty").mkdir()
    # A checkpoint beside its modules: a 1.5 GB hole, which costs the submission nothing and a copy 1.5 GB.
    checkpoint = write_submission(submissions, "oversized", {}) / "exercises" / "checkpoint.pt"
    checkpoint.touch()
    os.truncate(checkpoint, 3 * 2**29)
    # Kills the whole grading process group from its first check.
    write_submission(
        submissions,
        "killer",
        {"embedding.py": [("        return self.W_E[tokens]", "        __import__('os').killpg(0, 9)")]},
    )

    result = run_batch(
        str(submissions),
        *MODEL,
        "--csv",
        str(root / "grades.csv"),
        "--reference",
        "random",
        "--jobs",
        "2",
        "--timeout",
        str(CHECK_TIMEOUT),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with open(root / "grades.csv", newline="") as handle:
        rows = {row["submission"]: row for row in csv.DictReader(handle)}
    return {"root": root, "rows": rows, "sentinel": sentinel, "results": root / "grades-results"}


@pytest.mark.slow
def test_the_gradebook_has_one_row_per_submission_and_a_column_per_check(batch):
    with open(batch["root"] / "grades.csv", newline="") as handle:
        header = next(csv.reader(handle))
    assert header == [
        "submission",
        *(column for c in MODEL for column in (c, f"{c} points")),
        "score",
        "max_score",
        "error",
    ]
    assert sorted(batch["rows"]) == sorted([*GRADED, "missing_files", "empty", "oversized", "killer"])
    assert {row["max_score"] for row in batch["rows"].values()} == {str(sum(POINTS[i] for i in MODEL))}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(GRADED))
def test_each_graded_submission_gets_its_verdicts(batch, name):
    row = batch["rows"][name]
    expected = {check: GRADED[name][1].get(check, "pass") for check in MODEL}
    assert {check: row[check] for check in MODEL} == expected
    earned = {check: POINTS[check] if status == "pass" else 0 for check, status in expected.items()}
    assert {check: int(row[f"{check} points"]) for check in MODEL} == earned
    assert row["score"] == str(sum(earned.values()))
    assert row["error"] == ""


@pytest.mark.slow
def test_a_submission_missing_modules_is_graded_on_what_it_has(batch):
    row = batch["rows"]["missing_files"]
    assert {check: row[check] for check in MODEL} == {
        check: "pass" if check in ("embed", "pos_embed") else "error" for check in MODEL
    }
    assert row["score"] == "2" and row["error"] == "missing " + ", ".join(MODEL_FILES)


@pytest.mark.slow
def test_submissions_that_cannot_be_graded_get_a_row_with_their_error(batch):
    empty = batch["rows"]["empty"]
    assert "no exercises/" in empty["error"]
    assert empty["score"] == "0" and all(empty[check] == "" for check in MODEL)


@pytest.mark.slow
def test_a_submission_with_a_file_too_large_is_refused_before_it_is_copied(batch):
    oversized = batch["rows"]["oversized"]
    assert (
        oversized["error"] == "exercises/checkpoint.pt is 1,610,612,736 bytes, over the limit of 1,048,576 bytes a file"
    )
    assert oversized["score"] == "0" and all(oversized[check] == "" for check in MODEL)


@pytest.mark.slow
def test_a_submission_that_kills_its_grading(batch):
    """Confined, the signal never reaches the grading: the check that runs the killing line errors, and the
    transformer, graded with the grader's Embed in its place, passes. Unconfined, it kills its own grading process and
    the row says so."""
    killer = batch["rows"]["killer"]
    if sandbox.status().on:
        assert {check: killer[check] for check in MODEL} == {c: "error" if c == "embed" else "pass" for c in MODEL}
        assert killer["error"] == ""
    else:
        assert "stopped without a report" in killer["error"]
        assert killer["score"] == "0" and all(killer[check] == "" for check in MODEL)


@pytest.mark.slow
def test_only_the_submission_exercises_are_read(batch):
    assert not batch["sentinel"].exists()
    assert batch["rows"]["correct"]["score"] == batch["rows"]["correct"]["max_score"]


@pytest.mark.slow
def test_one_json_result_per_submission(batch):
    schema = json.loads((REPO / "grader" / "schemas" / "report.schema.json").read_text())
    files = sorted(path.name for path in batch["results"].glob("*.json"))
    assert files == sorted(f"{name}.json" for name in batch["rows"])
    for name, row in batch["rows"].items():
        result = json.loads((batch["results"] / f"{name}.json").read_text())
        assert (
            result["submission"] == name
            and str(result["score"]) == row["score"]
            and (result["error"] or "") == row["error"]
        )
        if result["report"] is not None:
            jsonschema.validate(result["report"], schema)
            assert {check["id"]: check["status"] for check in result["report"]["checks"]} == {
                check: row[check] for check in MODEL
            }


def stuck_processes() -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["name", "status"])
        if p.info["name"] == "gpt2-stuck" and p.info["status"] != "zombie"
    ]


@pytest.mark.slow
def test_a_submission_past_its_time_limit_is_stopped_with_its_processes_and_files(reference, monkeypatch, tmp_path):
    """What the killed grading and its check wrote (here 8 MB in the check's scratch) goes with the submission."""
    from grader.host.tools.batch import Options, grade_submission

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    submission = write_submission(tmp_path, "stuck", {})
    ballast = "import os\nopen(os.path.join(os.environ['TMPDIR'], 'ballast'), 'wb').write(bytes(8 << 20))\n"
    name_and_loop = "import ctypes\nctypes.CDLL(None).prctl(15, b'gpt2-stuck', 0, 0, 0)\nwhile True:\n    pass\n"
    (submission / "exercises" / "__init__.py").write_text(ballast + name_and_loop)
    options = Options(check_ids=("embed",), reference="random", timeout=60, submission_timeout=8)
    result = grade_submission(submission, [c for c in registry() if c.id == "embed"], options)
    assert result.report is None and result.error == "grading took longer than 8 s; stopped"
    deadline = time.monotonic() + 10
    while stuck_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert stuck_processes() == [], "the learner's process outlived its submission"
    assert list(temporary.iterdir()) == []


def sparse_file(exercises: Path) -> None:
    (exercises / "weights.bin").touch()
    os.truncate(exercises / "weights.bin", 3 * 2**29)


def too_many_files(exercises: Path) -> None:
    (exercises / "notes").mkdir()
    for i in range(1000):
        (exercises / "notes" / f"{i}.txt").touch()


def too_many_bytes(exercises: Path) -> None:
    for i in range(9):
        (exercises / f"data{i}.bin").write_bytes(bytes(2**20))


def named_pipe(exercises: Path) -> None:
    os.mkfifo(exercises / "pipe")


def unix_socket(exercises: Path) -> None:
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(exercises / "sock"))


def zero_device(exercises: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root makes a device file")
    os.mknod(exercises / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero: a copy never ends


REFUSED = {
    "a sparse file": (
        sparse_file,
        "exercises/weights.bin is 1,610,612,736 bytes, over the limit of 1,048,576 bytes a file",
    ),
    "too many files": (too_many_files, "exercises/ holds more than 1000 files and directories"),
    "too many bytes": (too_many_bytes, "exercises/ holds more than the limit of 8,388,608 bytes"),
    "a named pipe": (named_pipe, "exercises/pipe is a named pipe, not a regular file"),
    "a socket": (unix_socket, "exercises/sock is a socket, not a regular file"),
    "a device": (zero_device, "exercises/zero is a device, not a regular file"),
}


@pytest.mark.parametrize("kind", list(REFUSED))
def test_a_submission_with_a_file_grading_cannot_take_gets_its_reason(kind, monkeypatch, tmp_path):
    """Refused before it is copied, in one line; the batch's scratch is left empty."""
    from grader.host.tools.batch import Options, grade_submission

    make, reason = REFUSED[kind]
    submission = write_submission(tmp_path, "s", {})
    make(submission / "exercises")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    result = grade_submission(submission, registry(), Options((), "random", 10.0, 60.0))
    assert (result.report, result.error) == (None, reason)
    assert list(temporary.iterdir()) == []


def test_bad_input_is_one_line(tmp_path):
    missing = run_batch(str(tmp_path / "nowhere"), "--csv", str(tmp_path / "grades.csv"))
    assert missing.returncode == 2 and missing.stderr == f"batch: {tmp_path / 'nowhere'} is not a directory\n"
    (tmp_path / "subs").mkdir()
    empty = run_batch(str(tmp_path / "subs"), "--csv", str(tmp_path / "grades.csv"))
    assert (
        empty.returncode == 2
        and "has no submission directories" in empty.stderr
        and not (tmp_path / "grades.csv").exists()
    )
    assert os.listdir(tmp_path / "subs") == []
    # The checks may follow the options, as `make batch ARGS="embed"` passes them; an unknown one is still refused.
    checks_last = run_batch(str(tmp_path / "subs"), "--csv", str(tmp_path / "grades.csv"), "embed", "--jobs", "1")
    assert checks_last.returncode == 2 and "has no submission directories" in checks_last.stderr
    unknown = run_batch(str(tmp_path / "subs"), "--csv", str(tmp_path / "grades.csv"), "--jobs", "1", "nonesuch")
    assert unknown.returncode == 2 and "nonesuch" in unknown.stderr
    # make batch ASSIGNMENT=NAME: an assignment the course does not have, or a check it does not grade, is refused.
    for given, said in (
        (["--assignment", "week9"], "no assignment 'week9'"),
        (["--assignment", "part1", "mlp", "kv_cache"], "assignment 'part1': no check matches 'kv_cache'"),
    ):
        refused = run_batch(str(tmp_path / "subs"), "--csv", str(tmp_path / "grades.csv"), *given)
        assert refused.returncode == 2 and refused.stderr.startswith("batch: ") and said in refused.stderr
        assert refused.stderr.count("\n") == 1


def test_the_gradebook_gives_each_check_its_points_beside_its_status(tmp_path):
    from grader.host.tools.batch import Submission, write_gradebook

    checks = [check for check in registry() if check.id in ("embed", "pos_embed")]
    report = {
        "score": POINTS["embed"],
        "checks": [
            {"id": "embed", "status": "pass", "points": POINTS["embed"]},
            {"id": "pos_embed", "status": "fail", "points": 0},
        ],
    }
    write_gradebook(tmp_path / "g.csv", [Submission("ada", report), Submission("bob", None, "no exercises/")], checks)
    with open(tmp_path / "g.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    maximum = str(POINTS["embed"] + POINTS["pos_embed"])
    assert rows == [
        {
            "submission": "ada",
            "embed": "pass",
            "embed points": str(POINTS["embed"]),
            "pos_embed": "fail",
            "pos_embed points": "0",
            "score": str(POINTS["embed"]),
            "max_score": maximum,
            "error": "",
        },
        {
            "submission": "bob",
            "embed": "",
            "embed points": "0",
            "pos_embed": "",
            "pos_embed points": "0",
            "score": "0",
            "max_score": maximum,
            "error": "no exercises/",
        },
    ]


# A module-level line, a class body, a decorator and a default run as the file is imported; a function's body, a
# lambda's included, runs when called.
IMPORT_TIME_LINES = """import functools
LIMIT = 2


class Model:
    size = LIMIT * 2

    @functools.cache
    def forward(self, x=LIMIT):
        y = x + 1
        return y


scale = lambda x: x / 0
"""


@pytest.mark.parametrize(
    ("line", "at_import"),
    [(2, True), (6, True), (8, True), (9, True), (10, False), (11, False), (14, False)],
)
def test_a_line_runs_at_import_outside_every_function_body(line, at_import, tmp_path):
    from grader.host.tools.batch import runs_at_import

    (tmp_path / "model.py").write_text(IMPORT_TIME_LINES)
    assert runs_at_import(tmp_path, "model.py", line) is at_import


def test_any_line_of_a_file_that_does_not_compile_runs_at_import_and_no_other_file_s(tmp_path):
    from grader.host.tools.batch import runs_at_import

    (tmp_path / "model.py").write_text(IMPORT_TIME_LINES.replace("y = x + 1", "y = x +"))
    assert runs_at_import(tmp_path, "model.py", 10) and runs_at_import(tmp_path, "model.py", 11)
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "model.py").write_text("undefined\n")
    assert not runs_at_import(tmp_path, "absent.py", 1) and not runs_at_import(tmp_path, "inner/model.py", 1)


# Two files that do not import, one that never compiles and one that raises as it runs, and a forward that raises when
# a check calls it.
BROKEN = {
    "block.py": [("from .mlp import MLP\n", "from .mlp import MLP\ndef broken(:\n")],
    "mlp.py": [("\n\ndef gelu_new", "\n\nundefined_name\n\n\ndef gelu_new")],
    "attention.py": [("        q = einops.einsum(", "        1 / 0\n        q = einops.einsum(")],
}
BROKEN_CHECKS = ("attention", "gelu_new", "mlp", "block", "unembed")


def test_the_error_column_names_the_files_that_do_not_import_and_why(reference, tmp_path):
    """Alongside the missing files: the files that do not import, each with its error in one line, in the CSV and the
    JSON result. An error a forward raised when a check called it (attention's here) is that check's, and stays out."""
    from grader.host.tools.batch import Options, grade_submission, result_writer, write_gradebook

    submission = write_submission(tmp_path, "broken", BROKEN)
    (submission / "exercises" / "unembedding.py").unlink()
    checks = [check for check in registry() if check.id in BROKEN_CHECKS]
    result = grade_submission(submission, checks, Options(BROKEN_CHECKS, "random", 60, 300))

    checked = {check["id"]: check for check in result.report["checks"]}
    assert {check: checked[check]["status"] for check in BROKEN_CHECKS} == dict.fromkeys(BROKEN_CHECKS, "error")
    assert checked["attention"]["message"].startswith("ZeroDivisionError")  # the control: it raised, when called
    syntax_line = (submission / "exercises" / "block.py").read_text().splitlines().index("def broken(:") + 1
    expected = (
        "missing unembedding.py; "
        "mlp.py does not import: NameError: name 'undefined_name' is not defined; "
        f"block.py does not import: SyntaxError: invalid syntax (block.py, line {syntax_line})"
    )
    assert result.error == expected
    write_gradebook(tmp_path / "grades.csv", [result], checks)
    result_writer(tmp_path / "results", sum(check.points for check in checks))(result)
    with open(tmp_path / "grades.csv", newline="") as handle:
        assert [row["error"] for row in csv.DictReader(handle)] == [expected]
    assert json.loads((tmp_path / "results" / "broken.json").read_text())["error"] == expected
