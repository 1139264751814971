"""The import preflight's host side (grader.host.runner.preflight): the file and line a hung import was stopped at,
read from faulthandler's stacks as hostile data; the files it finds, one preflight each; the checks that cannot run;
and what the dependencies and batch's error column say of a file that does not finish importing."""

from __future__ import annotations

import os

import pytest
from test_dependencies_unit import GRAPH

from grader.host.dependencies import with_failing_parts
from grader.host.results import CheckResult
from grader.host.runner.preflight import needs, stopped_at, unfinished_imports, unfinished_outcome
from grader.host.runner.request import Limits
from grader.host.tools.batch import import_failures
from grader.shared import wire

pytestmark = pytest.mark.unit
HUNG = "mlp.py does not finish importing (line 7 when stopped)"


@pytest.fixture
def package(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    for name in ("__init__.py", "mlp.py", "block.py"):
        (package / name).write_text("")
    (tmp_path / "scratch").mkdir()
    return package


def stacks(package, *frames: tuple[str, int, str]) -> str:
    """faulthandler's dump of one thread, the innermost call first."""
    lines = [f'  File "{path}", line {line} in {name}' for path, line, name in frames]
    return "\n".join(["Thread 0x00007f0000000000 (most recent call first):", *lines]) + "\n"


def write_stacks(package, text: str):
    scratch = package.parent / "scratch"
    (scratch / wire.IMPORT_STACK_FILE).write_text(text)
    return scratch


def test_the_innermost_module_level_frame_of_the_package_is_where_the_import_was_stopped(package):
    text = stacks(
        package,
        (package / "config.py", 3, "helper"),  # a function mlp.py calls at import: the import is mlp.py's
        (package / "mlp.py", 7, "<module>"),
        ("<frozen importlib._bootstrap>", 241, "_call_with_frames_removed"),
        (package / "block.py", 8, "<module>"),
    )
    assert stopped_at(write_stacks(package, text), package) == wire.StoodIn(
        "mlp.py", [], "does not finish importing", 7
    )


@pytest.mark.parametrize(
    "frame",
    [
        ("/elsewhere/mlp.py", 7, "<module>"),  # not the package's
        ("{package}/../pkg2/mlp.py", 7, "<module>"),
        ("{package}/absent.py", 7, "<module>"),  # no such file in the package
        ("{package}/mlp.py", 12345678, "<module>"),  # a line no file has
        ("{package}/mlp.py\nforged", 7, "<module>"),
    ],
)
def test_a_frame_that_is_not_one_of_the_package_s_files_names_nothing(package, frame):
    path, line, name = frame
    text = stacks(package, (path.format(package=package), line, name))
    assert stopped_at(write_stacks(package, text), package) is None


def test_what_is_not_a_readable_file_names_nothing(package):
    scratch = package.parent / "scratch"
    assert stopped_at(scratch, package) is None  # none written
    (scratch / wire.IMPORT_STACK_FILE).symlink_to(package / "mlp.py")
    assert stopped_at(scratch, package) is None  # a link is never followed
    (scratch / wire.IMPORT_STACK_FILE).unlink()
    os.mkfifo(scratch / wire.IMPORT_STACK_FILE)
    assert stopped_at(scratch, package) is None  # a FIFO is never blocked on
    (scratch / wire.IMPORT_STACK_FILE).unlink()
    (scratch / wire.IMPORT_STACK_FILE).write_bytes(b"\xff\x00" * 100_000)
    assert stopped_at(scratch, package) is None


def test_each_file_that_hangs_costs_one_preflight_and_the_next_stands_it_in(package):
    found = iter([wire.StoodIn("mlp.py", [], "does not finish importing", 7), None])
    asked = []

    def stopped(request: wire.Request):
        asked.append(request)
        return next(found)

    unfinished = unfinished_imports(package, ["block", "mlp"], Limits(timeout=20, fork=True), stopped)
    assert [stood.file for stood in unfinished] == ["mlp.py"]
    assert [request.unfinished for request in asked] == [[], unfinished]
    assert all(request.preflight == ["block", "mlp"] and request.timeout == 20 for request in asked)
    assert not any(request.cases for request in asked)


def test_a_file_found_again_ends_the_preflights(package):
    again = wire.StoodIn("mlp.py", [], "does not finish importing", 7)
    assert unfinished_imports(package, ["mlp"], Limits(fork=True), lambda request: again) == [again]


def test_a_check_of_the_file_or_of_a_package_whose_init_hangs_does_not_run():
    mlp = wire.StoodIn("mlp.py", [], "does not finish importing", 7)
    init = wire.StoodIn("__init__.py", [], "does not finish importing", 2)
    assert needs("mlp", [mlp]) == mlp and needs("block", [mlp]) is None and needs("block", [init]) == init
    outcome = unfinished_outcome(mlp)
    assert (outcome.ending, outcome.message) == ("timeout", HUNG)
    assert outcome.reply.where == wire.Place("mlp.py", 7)


def result(check_id: str, status: str = "pass", message: str = "", **fields) -> CheckResult:
    return CheckResult(check_id, "model", "", status, 1, message, next_step="own", **fields)


def test_a_file_that_does_not_finish_importing_is_named_not_the_parts_in_it():
    hung = {"status": "timeout", "message": HUNG, "file": "mlp.py", "line": 7}
    results = [result("gelu", **hung), result("mlp", **hung), result("block"), result("model", "fail", "differs")]
    by_id = {r.id: r for r in with_failing_parts(results, GRAPH)}
    assert by_id["mlp"].message == HUNG  # its gelu_new stopped by the same hang: not "fix gelu first"
    assert by_id["block"].notes == [f"passes, though {HUNG}: fix mlp.py too"]
    assert by_id["model"].message == f"{HUNG}: fix mlp.py first; differs"
    assert by_id["model"].next_step == "fix mlp.py first (grade mlp.py), then grade model again"


def test_batch_s_error_column_names_the_file_that_does_not_finish_importing(tmp_path):
    checks = [
        {"id": "gelu_new", "status": "timeout", "message": HUNG, "file": "mlp.py", "line": 7},
        {"id": "mlp", "status": "timeout", "message": HUNG, "file": "mlp.py", "line": 7},
        {"id": "attention", "status": "timeout", "message": "no answer within 20 s (an infinite loop?)"},
    ]
    assert import_failures(tmp_path, checks) == [HUNG]


def test_the_next_step_of_a_file_that_does_not_finish_importing_is_its_top_level():
    from grader.checks import registry
    from grader.host.verdict import next_step

    mlp = next(check for check in registry() if check.id == "mlp")
    hung = result("mlp", "timeout", HUNG, file="mlp.py", line=7)
    said = next_step(mlp, hung, "GPT-2", wire.Place("mlp.py", 7))
    assert said == "look for a loop that never ends in what mlp.py runs as it is imported (mlp.py:7)"
