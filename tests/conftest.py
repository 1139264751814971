"""Shared fixtures: one random-weight reference per session, and packages written wrong on purpose."""

from __future__ import annotations

import copy
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from filelock import FileLock

from grader.host.main import wants_grading
from grader.host.results import Report

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"
EXERCISES = REPO / "exercises"


CACHE_KEYS = ("GPT2_GRADER_CACHE", "HF_HUB_CACHE", "HF_HUB_OFFLINE")
# pytest-xdist's workers set a terminal size of 80 x 24 in the environment: the `grade` a test runs in a pseudo-terminal
# of its own size (test_watch) would take it and wrap its lines. Unset for the session, as without the workers.
TERMINAL_KEYS = ("COLUMNS", "LINES")


class Session:
    """What every test of a session shares: a fresh grader cache and an empty Hugging Face cache (for every test
    and subprocess), and the random reference, built in the background as soon as the tests are known.

    Under pytest-xdist (`make test` runs two workers) the controller makes the root and every worker shares it:
    the reference is built once (the grader's own build lock: the other worker waits for it and reads it), and each
    worker grades its share of solutions/ and exercises/ ahead, for both (`ReferenceBuild.grade_ahead`)."""

    def __init__(self):
        self.root: Path | None = None
        self.owner = False  # this process made the root and removes it at the end
        self.worker, self.workers = 0, 1  # this process's index among the xdist workers, and their number
        self.saved = {key: os.environ.get(key) for key in CACHE_KEYS + TERMINAL_KEYS}
        self.build: ReferenceBuild | None = None
        self.variants: dict[Path, Path] = {}  # each package write_variant wrote: the package it copied
        self.variants_checked = 0  # reports of those packages the where invariant was checked on
        self.current = None  # the test being run (pytest's item)

    def configure(self, config) -> None:
        shared = getattr(config, "workerinput", {}).get(ROOT_KEY)
        if shared is None:
            self.root, self.owner = Path(tempfile.mkdtemp(prefix="gpt2-grader-tests-")), True
        else:
            self.root = Path(shared)
            self.worker, self.workers = (
                int(config.workerinput["workerid"].removeprefix("gw")),
                config.workerinput["workercount"],
            )

    def isolate(self) -> None:
        grader, hub = self.root / "grader", self.root / "hf-empty"
        os.environ.update(GPT2_GRADER_CACHE=str(grader), HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1")
        for key in TERMINAL_KEYS:
            os.environ.pop(key, None)

    def start_building(self, ahead: bool = False) -> None:
        self.build = ReferenceBuild(ahead)
        self.build.start()

    def reference(self):
        if self.build is None:  # a test asked for it that collection did not see coming
            self.start_building()
        return self.build.result()

    def graded_ahead(self, package: Path) -> Report | None:
        """The full grading of solutions/ or exercises/ a build's thread did once the reference was built (this
        worker's, or another's, waited for), or None (a selection too small to ask for it, or it failed: the
        `grade` fixture then grades, and fails, itself)."""
        if self.build is None or not self.build.ahead:
            return None
        if package in self.build.packages:
            self.build.join_ahead()
            return self.build.graded.get(package)
        with ahead_lock(package):  # held by the worker grading it until its report is written
            saved = ahead_file(package)
            return pickle.loads(saved.read_bytes()) if saved.exists() else None

    def end(self) -> None:
        if self.build is not None:
            self.build.join()  # the builder writes below root until it is done
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if self.owner:
            shutil.rmtree(self.root, ignore_errors=True)


ROOT_KEY = "gpt2_grader_tests_root"  # the shared root, in each xdist worker's workerinput
AHEAD = (SOLUTIONS, EXERCISES)  # the packages graded in full ahead, shared out among the workers


def ahead_file(package: Path) -> Path:
    return SESSION.root / f"ahead-{package.name}.pickle"


def ahead_lock(package: Path) -> FileLock:
    return FileLock(SESSION.root / f"ahead-{package.name}.lock", thread_local=False)


class ReferenceBuild(threading.Thread):
    """The builder is a process of its own, so the tests that need no reference run meanwhile on the other core.

    With `ahead`, the thread then grades this worker's share of solutions/ and exercises/ at every check, on workers
    of its own under the default limits, for the `grade` fixture: the core the builder leaves does it while the tests
    go on, rather than the first test that asks for it. Each report is written to the shared root for the other
    workers, under a lock taken before the thread starts, so that they wait for it rather than grade it again."""

    def __init__(self, ahead: bool = False):
        super().__init__(daemon=True)
        self.data, self.error = None, None
        self.ahead = ahead
        self.packages = AHEAD[SESSION.worker :: SESSION.workers] if ahead else ()
        self.locks = [ahead_lock(package) for package in self.packages]
        self.reference_ready = threading.Event()
        self.graded: dict[Path, Report] = {}

    def start(self) -> None:
        for lock in self.locks:
            lock.acquire()
        super().start()

    def run(self):
        from grader.host.refcache import ensure_reference

        try:
            self.data = ensure_reference("random", lambda *_: None)
        except BaseException as error:  # raised again in the test that asks for the reference
            self.error = error
        finally:
            self.reference_ready.set()
        try:
            if self.ahead and self.error is None:
                self.grade_ahead()
        finally:
            for lock in self.locks:
                lock.release()

    def grade_ahead(self) -> None:
        from grader.checks import select
        from grader.host.pipeline import grade_package
        from grader.host.runner import LearnerProcesses, Limits

        limits = Limits().settled()
        if not limits.fork:  # the fixture reads a full grading only from forked checks
            return
        try:
            with LearnerProcesses(limits) as processes:
                for package in self.packages:
                    self.graded[package] = grade_package(package, select(()), self.data, processes=processes)
                    written = ahead_file(package).with_suffix(".partial")
                    written.write_bytes(pickle.dumps(self.graded[package]))
                    written.rename(ahead_file(package))
        except Exception:  # the fixture grades what is missing itself, where a failure has its test
            pass

    def result(self):
        self.reference_ready.wait()
        if self.error is not None:
            raise self.error
        return self.data

    def join_ahead(self) -> None:
        self.join()


SESSION = Session()


def pytest_configure(config):
    SESSION.configure(config)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's, in the controller: every worker shares its root
def pytest_configure_node(node):
    node.workerinput[ROOT_KEY] = str(SESSION.root)


def pytest_sessionstart(session):
    SESSION.isolate()


# The unit tier (`make test-unit`, `pytest -m unit`): the files named test_*_unit.py, every test of them marked
# `unit` and none elsewhere; no torch, no worker, no reference. Under `-m unit` no other file is even imported.
UNIT_FILE = "_unit.py"


def unit_tier(config) -> bool:
    return config.option.markexpr == "unit"


def pytest_ignore_collect(collection_path, config):
    """Under `-m unit` the other test files are not imported: importing some of them imports torch."""
    if unit_tier(config) and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return not collection_path.name.endswith(UNIT_FILE)
    return None


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected: a selection that needs no reference builds none
def pytest_collection_modifyitems(config, items):
    """The tests that need no reference first: they run while it is built."""
    misplaced = [item.nodeid for item in items if in_unit_file(item) != bool(item.get_closest_marker("unit"))]
    if misplaced:
        raise pytest.UsageError(
            f"the unit tier is the files test_*{UNIT_FILE}, each test of them marked unit and no other: {misplaced}"
        )
    items.sort(key=reference_need)
    if items and reference_need(items[-1]) and not config.option.collectonly:
        SESSION.start_building(ahead=sum("grade" in item.fixturenames for item in items) >= GRADED_AHEAD_FROM)


# A selection with this many tests that grade (a tier, not a file or two) has solutions/ and exercises/ graded in
# full by the build's thread (ReferenceBuild.ahead) once the reference is built.
GRADED_AHEAD_FROM = 50


def in_unit_file(item) -> bool:
    return item.path.name.endswith(UNIT_FILE)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    SESSION.current = item  # run_grade asks it whether the test said it needs the reference


def pytest_sessionfinish(session):
    SESSION.end()
    if unit_tier(session.config) and "torch" in sys.modules:  # the tier's promise: none of it needs torch
        said = "the unit tier imported torch: a file tests/test_*_unit.py, or what it imports, imports torch"
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_sep("=", said, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def reference_need(item) -> bool:
    """Whether the test needs the session's reference: it asks for the `reference` fixture, directly or through
    another fixture (`grade`, say). A test that runs the `grade` command (run_grade) must ask for it too."""
    return "reference" in item.fixturenames


@pytest.fixture(scope="session")
def reference():
    return SESSION.reference()


@pytest.fixture(scope="session")
def grade(reference):
    """grade(package, *check_ids, **limits) -> Report, in this process; the learner's code still runs
    in a child. One worker per set of limits serves the whole session, as in batch grading.

    solutions/ and exercises/ never change during a session, so under the default limits each is
    graded at every check once, and any selection of their checks is read from that grading: each
    check runs in a fork of its own, so which other checks ran changes nothing.
    """
    from grader.checks import select
    from grader.host.pipeline import grade_package
    from grader.host.runner import LearnerProcesses, Limits

    shared: dict = {}
    graded_in_full: dict = {}

    def graded(package: Path, checks: list, limits) -> Report:
        if limits not in shared:
            shared[limits] = LearnerProcesses(limits)
        return grade_package(package, checks, reference, processes=shared[limits])

    def run(package: Path, *check_ids: str, **limits):
        key, checks, where = Limits(**limits).settled(), select(check_ids), Path(package).resolve()
        if where not in (SOLUTIONS, EXERCISES) or key != Limits().settled() or not key.fork:
            return keeping_the_where_invariant(graded(package, checks, key), where, reference)
        if where not in graded_in_full:
            graded_in_full[where] = SESSION.graded_ahead(where) or graded(package, select(()), key)
        return selected(graded_in_full[where], [check.id for check in checks])

    def graded_alone(package: Path, *check_ids: str) -> Report:
        """These checks really graded on their own, under the default limits (test_end_to_end holds the rows of
        such a grading of the solutions and the stubs to those `run` reads from the full one)."""
        return graded(package, select(check_ids), Limits().settled())

    run.graded_alone = graded_alone
    yield run
    for processes in shared.values():
        processes.close()


def keeping_the_where_invariant(report: Report, package: Path, reference) -> Report:
    """The report, once what it says of a variant is checked against the where invariant (test_where_invariant): the
    test that graded it fails where it does not hold, unless test_where_invariant.EXEMPT names that test."""
    if package in SESSION.variants:
        from test_where_invariant import EXEMPT, where_invariant

        def steps_of(check_id: str) -> set[str]:
            return {label for case in reference.cases(check_id) for label in case.steps}

        found = where_invariant(report, package, SESSION.variants[package], steps_of)
        SESSION.variants_checked += 1
        if found and SESSION.current.nodeid not in EXEMPT:
            pytest.fail("the where invariant (tests/test_where_invariant.py) is broken:\n" + "\n".join(found))
    return report


def selected(report: Report, check_ids: list[str]) -> Report:
    """A copy of `report` with only these checks, in this order."""
    results = {result.id: result for result in report.checks}
    return replace(report, checks=[copy.deepcopy(results[check_id]) for check_id in check_ids])


def write_variant(directory: Path, edits: dict[str, list[tuple[str, str]]], base: Path = SOLUTIONS) -> Path:
    """A copy of `base` with each (old, new) replacement applied once to the named file.

    Every `old` must occur exactly once, so a variant can never silently equal the solution.
    """
    package = directory / "pkg"
    shutil.copytree(base, package, ignore=shutil.ignore_patterns("__pycache__"))
    for file, replacements in edits.items():
        path = package / file
        text = path.read_text() if path.exists() else ""
        for old, new in replacements:
            assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {file}"
            text = text.replace(old, new)
        path.write_text(text)
    SESSION.variants[package.resolve()] = Path(base).resolve()
    return package


def run_grade(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The `grade` command as a learner runs it; one that grades waits for the session's reference (never built
    twice)."""
    if wants_grading(list(args)):  # else it reads no reference
        test = SESSION.current
        if test is not None and not reference_need(test):
            raise AssertionError(
                f"{test.nodeid} runs grade, which waits for the session's reference: ask for the `reference` fixture"
            )
        SESSION.reference()
    return subprocess.run(
        [sys.executable, "-m", "grader", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def tiered(values, quick, ids=None) -> list:
    """Parameters for `parametrize`: those whose id is in `quick` run in `make test`, the others are marked slow and
    left to `make test-all`. `values` are the parameters as parametrize takes them (a dict's keys, say; a tuple is the
    values of several argument names); `ids`, when given, are their ids, else each value is its own id."""
    ids = list(values) if ids is None else list(ids)
    unknown = set(quick) - set(ids)
    assert not unknown, f"quick parameters that are not among the ids: {sorted(unknown)}"
    return [
        pytest.param(value, id=name, marks=() if name in quick else pytest.mark.slow)
        if not isinstance(value, tuple)
        else pytest.param(*value, id=name, marks=() if name in quick else pytest.mark.slow)
        for value, name in zip(values, ids, strict=True)
    ]


def by_id(report) -> dict:
    return {check.id: check for check in report.checks}
