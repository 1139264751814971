"""The pytest plugin every test session runs under (tests/conftest.py loads it): one random-weight reference per
session, and the `grade` fixture that grades packages against it.

Every test and subprocess gets a fresh grader cache and an empty Hugging Face cache. The reference is built in the
background as soon as the tests are known, by the builder's own process, so the tests that need none run meanwhile
on the other core. Under pytest-xdist (`make test` runs two workers) the controller makes the session's root and
every worker shares it: the reference is built once (the grader's own build lock: the other worker waits for it and
reads it), and each worker grades its share of solutions/ and the stubs in full ahead (`ReferenceBuild.ahead`),
for the `grade` fixture. The stubs are generated from solutions/ into the root (repo.stubs), never read from
exercises/, which holds the learner's work. The session's state lives on pytest's config stash (`session_of`).
"""

from __future__ import annotations

import copy
import os
import pickle
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from filelock import FileLock
from repo import HAS_REFERENCE, SOLUTIONS, STUBS_AT, stubs, variant_of

from grader.host.results import Report

CACHE_KEYS = ("GPT2_GRADER_CACHE", "HF_HUB_CACHE", "HF_HUB_OFFLINE")
# pytest-xdist's workers set a terminal size of 80 x 24 in the environment: the `grade` a test runs in a pseudo-terminal
# of its own size (test_watch) would take it and wrap its lines. Unset for the session, as without the workers.
TERMINAL_KEYS = ("COLUMNS", "LINES")
ROOT_KEY = "gpt2_grader_tests_root"  # the shared root, in each xdist worker's workerinput
# A selection with this many tests that grade (a tier, not a file or two) has solutions/ and the stubs graded in
# full by the build's thread (ReferenceBuild.ahead) once the reference is built.
GRADED_AHEAD_FROM = 50
UNIT_FOLDER = "unit"  # the unit tier (`make test-unit`, `pytest -m unit`): no torch, no worker, no reference


@dataclass
class Session:
    """What every test of a session shares: its root (the caches), the environment it replaced, the reference's
    build, and how many variants the `grade` fixture held to the where invariant."""

    root: Path
    owner: bool  # this process made the root and removes it at the end
    worker: int = 0  # this process's index among the xdist workers
    workers: int = 1
    saved: dict[str, str | None] = field(
        default_factory=lambda: {k: os.environ.get(k) for k in (*CACHE_KEYS, STUBS_AT, *TERMINAL_KEYS)}
    )
    build: ReferenceBuild | None = None
    variants_checked: int = 0

    def isolate(self) -> None:
        grader, hub = self.root / "grader", self.root / "hf-empty"
        os.environ.update(GPT2_GRADER_CACHE=str(grader), HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1")
        os.environ[STUBS_AT] = str(self.stubs)
        for key in TERMINAL_KEYS:
            os.environ.pop(key, None)

    @property
    def stubs(self) -> Path:
        """Where repo.stubs() writes the session's stubs."""
        return self.root.resolve() / "exercises"  # named as the learner's package is: the reports name its files

    def start_building(self, ahead: bool = False) -> None:
        self.build = ReferenceBuild(self, ahead)
        self.build.start()

    def reference(self):
        if self.build is None:  # a test asked for it that collection did not see coming
            self.start_building()
        return self.build.result()

    def ahead_file(self, package: Path) -> Path:
        return self.root / f"ahead-{package.name}.pickle"

    def ahead_lock(self, package: Path) -> FileLock:
        return FileLock(self.root / f"ahead-{package.name}.lock", thread_local=False)

    def graded_ahead(self, package: Path) -> Report | None:
        """The full grading of solutions/ or the stubs a build's thread did once the reference was built (this
        worker's, or another's, waited for), or None (a selection too small to ask for it, or it failed: the
        `grade` fixture then grades, and fails, itself)."""
        if self.build is None or not self.build.ahead:
            return None
        if package in self.build.packages:
            self.build.join()
            return self.build.graded.get(package)
        with self.ahead_lock(package):  # held by the worker grading it until its report is written
            saved = self.ahead_file(package)
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


SESSION_KEY = pytest.StashKey[Session]()


def session_of(config: pytest.Config) -> Session:
    return config.stash[SESSION_KEY]


class ReferenceBuild(threading.Thread):
    """The builder's process, waited for in a thread. With `ahead`, the thread then grades this worker's share of
    solutions/ and the stubs at every check, on workers of its own under the default limits: the core the builder
    leaves does it while the tests go on. Each report is written to the shared root for the other workers, under a
    lock taken before the thread starts, so that they wait for it rather than grade it again."""

    def __init__(self, session: Session, ahead: bool = False):
        super().__init__(daemon=True)
        self.session, self.ahead = session, ahead
        self.data, self.error = None, None
        self.packages = (SOLUTIONS, session.stubs)[session.worker :: session.workers] if ahead else ()
        self.locks = [session.ahead_lock(package) for package in self.packages]
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
        from grader.host.runner import LearnerProcesses, Limits

        limits = Limits().settled()
        if not limits.fork:  # the fixture reads a full grading only from forked checks
            return
        try:
            if self.session.stubs in self.packages:
                stubs()
            with LearnerProcesses(limits) as processes:
                for package in self.packages:
                    self.graded[package] = drawn(package, select(()), self.data, processes)
                    written = self.session.ahead_file(package).with_suffix(".partial")
                    written.write_bytes(pickle.dumps(self.graded[package]))
                    written.rename(self.session.ahead_file(package))
        except Exception:  # the fixture grades what is missing itself, where a failure has its test
            pass

    def result(self):
        self.reference_ready.wait()
        if self.error is not None:
            raise self.error
        return self.data


def pytest_configure(config):
    shared = getattr(config, "workerinput", {}).get(ROOT_KEY)
    if shared is None:
        session = Session(Path(tempfile.mkdtemp(prefix="gpt2-grader-tests-")), owner=True)
    else:
        worker = int(config.workerinput["workerid"].removeprefix("gw"))
        session = Session(Path(shared), owner=False, worker=worker, workers=config.workerinput["workercount"])
    config.stash[SESSION_KEY] = session


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's, in the controller: every worker shares its root
def pytest_configure_node(node):
    node.workerinput[ROOT_KEY] = str(session_of(node.config).root)


def pytest_sessionstart(session):
    session_of(session.config).isolate()


def unit_tier(config) -> bool:
    return config.option.markexpr == "unit"


def in_unit_folder(path: Path) -> bool:
    return path.parent.name == UNIT_FOLDER


def pytest_ignore_collect(collection_path, config):
    """Under `-m unit` the other test files are not imported: importing some of them imports torch."""
    if unit_tier(config) and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return not in_unit_folder(collection_path)
    return None


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected: a selection that needs no reference builds none
def pytest_collection_modifyitems(config, items):
    """The tests that need no reference first: they run while it is built."""
    misplaced = [item.nodeid for item in items if in_unit_folder(item.path) != bool(item.get_closest_marker("unit"))]
    if misplaced:
        raise pytest.UsageError(
            f"the unit tier is tests/{UNIT_FOLDER}/, each test of it marked unit and no other: {misplaced}"
        )
    items.sort(key=reference_need)
    if items and reference_need(items[-1]) and not config.option.collectonly:
        ahead = sum("grade" in item.fixturenames for item in items) >= GRADED_AHEAD_FROM
        session_of(config).start_building(ahead)


def reference_need(item) -> bool:
    """Whether the test needs the session's reference: it asks for the `reference` fixture, directly or through
    another fixture (`grade`, say). A test that runs the `grade` command (repo.run_grade) must ask for it too."""
    return "reference" in item.fixturenames


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    os.environ[HAS_REFERENCE] = str(int(reference_need(item)))


def pytest_sessionfinish(session):
    session_of(session.config).end()
    os.environ.pop(HAS_REFERENCE, None)
    if unit_tier(session.config) and "torch" in sys.modules:  # the tier's promise: none of it needs torch
        said = f"the unit tier imported torch: a file of tests/{UNIT_FOLDER}/, or what it imports, imports torch"
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_sep("=", said, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def session(pytestconfig) -> Session:
    return session_of(pytestconfig)


@pytest.fixture(scope="session")
def reference(session):
    return session.reference()


@pytest.fixture(scope="session")
def grade(reference, session, request):
    """grade(package, *check_ids, **limits) -> Report, in this process, with its figures drawn (`drawn`); the
    learner's code still runs in a child. One worker per set of limits serves the whole session, as in batch grading.

    solutions/ and the stubs never change during a session, so under the default limits each is
    graded at every check once, and any selection of their checks is read from that grading: each
    check runs in a fork of its own, so which other checks ran changes nothing.
    """
    from grader.checks import select
    from grader.host.runner import LearnerProcesses, Limits

    shared: dict = {}
    graded_in_full: dict = {}

    def graded(package: Path, checks: list, limits) -> Report:
        if limits not in shared:
            shared[limits] = LearnerProcesses(limits)
        return drawn(package, checks, reference, shared[limits])

    def run(package: Path, *check_ids: str, **limits):
        key, checks, where = Limits(**limits).settled(), select(check_ids), Path(package).resolve()
        if where not in (SOLUTIONS, session.stubs) or key != Limits().settled() or not key.fork:
            return keeping_the_where_invariant(graded(package, checks, key), where, reference, session)
        if where not in graded_in_full:
            graded_in_full[where] = session.graded_ahead(where) or graded(package, select(()), key)
        return selected(graded_in_full[where], [check.id for check in checks])

    def graded_alone(package: Path, *check_ids: str) -> Report:
        """These checks really graded on their own, under the default limits (test_end_to_end holds the rows of
        such a grading of the solutions and the stubs to those `run` reads from the full one)."""
        return graded(package, select(check_ids), Limits().settled())

    run.graded_alone = graded_alone
    yield run
    for processes in shared.values():
        processes.close()


def drawn(package: Path, checks: list, reference, processes) -> Report:
    """A grading's report with the HTML page's figures drawn, as `grade --html` writes it: the tests read them."""
    from grader.host.pipeline import GradingRun

    return GradingRun(package, checks, reference, processes=processes, keep_evidence=True).finished().with_figures()


def keeping_the_where_invariant(report: Report, package: Path, reference, session: Session) -> Report:
    """The report, once what it says of a variant is checked against the where invariant (where_invariant.py): the
    test that graded it fails where it does not hold, unless where_invariant.EXEMPT names that test."""
    base = variant_of(package)
    if base is not None:
        from where_invariant import EXEMPT, where_invariant

        def steps_of(check_id: str) -> set[str]:
            return {label for case in reference.cases(check_id) for label in case.steps}

        found = where_invariant(report, package, base, steps_of)
        session.variants_checked += 1
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]  # less " (call)": an id may hold spaces
        if found and test not in EXEMPT:
            pytest.fail("the where invariant (tests/support/where_invariant.py) is broken:\n" + "\n".join(found))
    return report


def selected(report: Report, check_ids: list[str]) -> Report:
    """A copy of `report` with only these checks, in this order."""
    results = {result.id: result for result in report.checks}
    return replace(report, checks=[copy.deepcopy(results[check_id]) for check_id in check_ids])
