"""grader.host.runner against a fake worker (tests/support/fake_worker.py): the wire format spoken without torch, each
check's request answered as a script says (a reply with outputs, late, a crash, noise, a malformed reply, an outputs
file that is no file), so the runner's side of every ending is shown in a fraction of a second. The checks are toys
declared here; the reference is a meta.json's cases held in memory (and, for the verdicts, an expected file of a few
values). With the learner's real process: test_hostile.py, test_interrupt.py, test_lanes.py."""

from __future__ import annotations

import io
import json
import os
import tempfile
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

import fake_worker
import numpy as np
import psutil
import pytest
from fake_worker import Step
from safetensors.numpy import load_file, save_file

from grader.checks import Check, Run, Target
from grader.host import launch
from grader.host.launch import Started
from grader.host.main import wants_grading
from grader.host.refcache import ReferenceData
from grader.host.runner import GPT2_LANE, STAND_IN_LANE, LearnerProcesses, Limits, Outcome, rounds
from grader.host.runner import lanes as lane_rules
from grader.host.runner.scratch import remove_scratch
from grader.host.verdict import STATUS_OF_ENDING, Evidence, judge
from grader.shared import twin, wire

pytestmark = pytest.mark.unit

SMALL, BIG = [[1.0, 2.0], [3.0, 4.0]], [0.5, -0.25, 8.0]  # two cases' outputs
CASES = [wire.CaseSpec("small", 1, None, []), wire.CaseSpec("big", 1, None, [])]
FORKS = Limits(sandbox=False, fork=True)  # as on Linux: the worker's fork server times each check itself
NO_FORKS = Limits(timeout=0.3, sandbox=False, fork=False)  # as on macOS: the grader times each check
ROOMY = 30.0  # a toy's own timeout (Run.min_timeout): only a check declared without one runs out of time


BESIDE = frozenset({"toy.s", "toy.t"})  # the toys whose cases tell no other check its answers (the reference's word)


def toy(check_id: str, min_timeout: float | None = ROOMY) -> Check:
    target = Target("toy", check_id, method=None)
    return Check(check_id, 1, target, "a toy", lambda ref: [], run=Run(min_timeout=min_timeout))


def answer(**fields) -> Step:
    """Both cases answered right, unless `fields` says otherwise."""
    return Step(**({"outputs": {"small": SMALL, "big": BIG}} | fields))


def reference(directory: Path, check_ids, expected: dict | None = None) -> ReferenceData:
    """An entry's meta.json, held in memory: every check has the two cases; its expected file when given."""
    if expected is not None:
        save_file(expected, str(directory / "expected.safetensors"))
    cases = [asdict(case) for case in CASES]
    meta = {
        "cases": {i: cases for i in check_ids},
        "beside": sorted(BESIDE & set(check_ids)),
        "param_counts": {"total": 1},
    }
    return ReferenceData("random", directory, meta)


def grade(tmp_path: Path, steps: dict[str, Step], limits: Limits = FORKS, start: str = "ready", checks=None) -> dict:
    """Every check's outcome, each check run as its step says; the checks are `steps`' toys unless given."""
    checks = checks or [toy(check_id) for check_id in steps]
    with LearnerProcesses(limits, worker_command=fake_worker.command(tmp_path, steps, start)) as processes:
        return processes.run(tmp_path, checks, reference(tmp_path, [check.id for check in checks]))


def pid(outcome) -> int:
    return fake_worker.identity(outcome.printed)[0]


def lane_of(outcome) -> str:
    """The lane that ran a check, told by its scratch directory's name (check-<lane>-<n>)."""
    return fake_worker.identity(outcome.printed)[2].removeprefix("check-").rpartition("-")[0]


def pids_by_lane(outcomes: dict) -> dict[str, set[int]]:
    """The pids of the workers each lane's checks ran on."""
    lanes: dict[str, set[int]] = {}
    for outcome in outcomes.values():
        lanes.setdefault(lane_of(outcome), set()).add(pid(outcome))
    return lanes


TWO_KINDS = [toy("toy.a"), toy("toy.s"), toy("toy.b"), toy("toy.t")]


def summary(outcomes: dict) -> dict[str, tuple[str, str]]:
    return {check_id: (outcome.ending, outcome.error) for check_id, outcome in outcomes.items()}


def test_each_outcome_comes_as_soon_as_it_is_known_and_leaving_early_ends_the_workers(tmp_path):
    """toy.b answers only once the caller has toy.a's outcome (its worker exits where that never comes); the caller
    then leaves before toy.c's: its worker is ended, and the session runs no more."""
    go = tmp_path / "toy.a is known"
    steps = {"toy.a": answer(), "toy.b": answer(awaits=str(go), delay=ROOMY), "toy.c": answer(delay=ROOMY)}
    checks = [toy(check_id) for check_id in steps]
    with LearnerProcesses(FORKS, worker_command=fake_worker.command(tmp_path, steps)) as processes:
        arriving = processes.outcomes(tmp_path, checks, reference(tmp_path, steps))
        first, outcome = next(arriving)
        go.touch()
        second, then = next(arriving)
        arriving.close()
        assert [first.id, second.id] == ["toy.a", "toy.b"] and then.ending == "answered", summary({"b": then})
        assert not any(alive(pid(known)) for known in (outcome, then))
        assert all(lane.worker is None and lane.cancelled for lane in processes.lanes.values())


def test_an_error_in_a_lanes_thread_is_raised_in_the_callers_and_ends_the_workers(tmp_path, two_cores, monkeypatch):
    """A bug of the grader's own in a lane (here: asking for toy.b raises) reaches the caller, not a lost thread, and
    no worker or lane thread is left running."""
    asked = lane_rules.Lane._run_one

    def broken(lane, package, check, *rest):
        if check.id == "toy.b":
            raise RuntimeError("a bug in the lane")
        return asked(lane, package, check, *rest)

    monkeypatch.setattr(lane_rules.Lane, "_run_one", broken)
    steps = {check.id: answer() for check in TWO_KINDS}
    before = set(threading.enumerate())
    with LearnerProcesses(FORKS, worker_command=fake_worker.command(tmp_path, steps)) as processes:
        with pytest.raises(RuntimeError, match="a bug in the lane"):
            processes.run(tmp_path, TWO_KINDS, reference(tmp_path, steps))
        assert all(lane.worker is None for lane in processes.lanes.values()) and len(processes.lanes) == 2
    assert set(threading.enumerate()) <= before


def test_a_valid_reply_becomes_an_outcome_with_its_outputs(tmp_path):
    outcome = grade(tmp_path, {"toy.a": answer()})["toy.a"]
    reply = outcome.reply
    assert (outcome.ending, outcome.error, reply.status, reply.outputs) == ("answered", "", "ran", ["small", "big"])
    assert sorted(outcome.outputs) == ["big/out", "small/out"]
    np.testing.assert_array_equal(outcome.outputs["small/out"], np.array(SMALL, np.float32), strict=True)
    np.testing.assert_array_equal(outcome.outputs["big/out"], np.array(BIG, np.float32), strict=True)
    assert fake_worker.identity(outcome.printed)[1:] == ("toy.a", "check-gpt2-1")


def test_the_fake_workers_outputs_file_is_one_safetensors_reads(tmp_path):
    """The control for the fake worker's own writer: the safetensors library reads back what it wrote."""
    written = tmp_path / wire.OUTPUTS_FILE
    fake_worker.write_outputs(written, {"a/out": SMALL, "b/out": BIG, "c/out": 2.0})
    tensors = load_file(str(written))
    assert {name: tensor.tolist() for name, tensor in tensors.items()} == {"a/out": SMALL, "b/out": BIG, "c/out": 2.0}
    assert {tensor.dtype for tensor in tensors.values()} == {np.dtype(np.float32)}


def test_a_check_past_its_timeout_ends_as_timeout_and_the_next_runs_on_a_fresh_worker(tmp_path):
    """Without forks the grader times each check: a worker late past it is killed, and a new one serves the rest."""
    steps = {"toy.a": answer(delay=ROOMY), "toy.b": answer()}
    with LearnerProcesses(NO_FORKS, worker_command=fake_worker.command(tmp_path, steps)) as processes:
        first = processes.lanes[GPT2_LANE].worker
        outcomes = processes.run(tmp_path, [toy("toy.a", min_timeout=None), toy("toy.b")], reference(tmp_path, steps))
    late, after = outcomes["toy.a"], outcomes["toy.b"]  # not the answer, which comes only after ROOMY seconds
    assert (late.ending, late.error, late.seconds, late.outputs) == (
        "timeout", "no answer within 0.3 s (an infinite loop?)", 0.3, {}
    )  # fmt: skip
    assert first.ended() and first.process.returncode < 0  # killed
    assert (after.ending, after.error, sorted(after.outputs)) == ("answered", "", ["big/out", "small/out"])
    assert pid(after) != first.process.pid


def test_the_fork_servers_own_endings_come_through_and_its_worker_serves_on(tmp_path):
    """A fork server that ended a check itself (its time, a signal, its memory) says so; the worker stays."""
    steps = {
        "toy.late": Step(do="end", ending="timeout", reason="no answer within 60 s (an infinite loop?)"),
        "toy.killed": Step(do="end", ending="crashed", reason="the check's process was killed by SIGSEGV"),
        "toy.big": Step(do="end", ending="memory", reason="the check's processes used more than 6 GB"),
        "toy.fine": answer(),
    }
    outcomes = grade(tmp_path, steps)
    assert summary(outcomes) == {
        "toy.late": ("timeout", "no answer within 60 s (an infinite loop?)"),
        "toy.killed": ("crashed", "the check's process was killed by SIGSEGV"),
        "toy.big": ("memory", "the check's processes used more than 6 GB"),
        "toy.fine": ("answered", ""),
    }
    assert len({pid(outcome) for outcome in outcomes.values()}) == 1


def test_a_worker_that_exits_mid_check_is_that_checks_crash_and_the_others_are_unaffected(tmp_path):
    steps = {"toy.a": answer(), "toy.b": Step(do="exit", code=7), "toy.c": answer()}
    outcomes = grade(tmp_path, steps)
    assert summary(outcomes) == {
        "toy.a": ("answered", ""),
        "toy.b": ("crashed", "the learner's process exited with code 7"),
        "toy.c": ("answered", ""),
    }
    assert pid(outcomes["toy.a"]) != pid(outcomes["toy.c"])  # a fresh worker after the crash
    np.testing.assert_array_equal(outcomes["toy.c"].outputs["big/out"], np.array(BIG, np.float32))


@pytest.mark.parametrize("start", ["exit", "babble"])
def test_a_worker_that_never_says_ready_is_every_checks_crash(tmp_path, start):
    """Ending before a word, or saying something else first: each check tries a fresh worker, none starts."""
    why = {"exit": f"the learner's process exited with code {fake_worker.START_CODE}", "babble": "it hung"}[start]
    outcomes = grade(tmp_path, {"toy.a": answer(), "toy.b": answer()}, start=start)
    assert summary(outcomes) == {
        check: ("crashed", f"the learner's process did not start: {why}") for check in outcomes
    }


def test_what_a_check_prints_goes_with_its_outcome_cleaned_and_never_passes_for_an_answer(tmp_path):
    forged = wire.WorkerAnswer("crashed", "forged").to_json()  # printed by the check, not its answer
    steps = {"toy.a": answer(printed=f"hello \x1b[31mred\n{forged}\n", printed_beyond=123)}
    outcome = grade(tmp_path, steps)["toy.a"]
    assert (outcome.ending, outcome.error, sorted(outcome.outputs)) == ("answered", "", ["big/out", "small/out"])
    assert outcome.printed[1:] == ["hello \ufffd[31mred", forged, "... 123 more bytes"]


def test_what_a_check_run_in_the_worker_prints_goes_to_the_log_not_the_answers(tmp_path):
    steps = {"toy.a": answer(printed="noise on stdout"), "toy.b": answer()}
    with LearnerProcesses(NO_FORKS, worker_command=fake_worker.command(tmp_path, steps)) as processes:
        outcomes = processes.run(tmp_path, [toy("toy.a"), toy("toy.b")], reference(tmp_path, steps))
        processes.log.flush()
        log = (processes.scratch / "learner.log").read_text()
    assert summary(outcomes) == {"toy.a": ("answered", ""), "toy.b": ("answered", "")}
    assert [len(outcome.printed) for outcome in outcomes.values()] == [1, 1]  # the fake worker's identity line only
    assert "noise on stdout" in log


def test_a_stray_line_among_the_answers_is_that_checks_crash_and_a_fresh_worker_answers_the_next(tmp_path):
    """A worker whose answers are out of step with the requests is replaced: else each later check would be read
    with the answer of the one before (and its reply read before it was written)."""
    steps = {"toy.a": answer(stray=["not an answer"]), "toy.b": answer(), "toy.c": answer()}
    outcomes = grade(tmp_path, steps)
    assert summary(outcomes) == {
        "toy.a": ("crashed", "the learner's process answered something unreadable"),
        "toy.b": ("answered", ""),
        "toy.c": ("answered", ""),
    }
    assert [fake_worker.identity(outcomes[c].printed)[1] for c in ("toy.b", "toy.c")] == ["toy.b", "toy.c"]


def test_a_malformed_reply_is_that_checks_crash_with_a_one_line_reason(tmp_path):
    steps = {
        "toy.unknown": answer(extra_keys={"param_count": 1}),
        "toy.broken": answer(truncate=True),
        "toy.oversized": answer(pad=wire.MAX_REPLY_BYTES),
        "toy.unasked": Step(outputs={"small": SMALL, "huge": BIG}),
        "toy.short": Step(outputs={"small": SMALL}),
        "toy.fine": answer(),
    }
    outcomes = grade(tmp_path, steps)
    assert summary(outcomes) == {
        "toy.unknown": (
            "crashed",
            "the check's reply is malformed (param_count: a field the wire format does not have)",
        ),
        "toy.broken": ("crashed", "the check's reply is not JSON"),
        "toy.oversized": ("crashed", "the check's reply is larger than 8 MB"),
        "toy.unasked": ("crashed", "the check's reply names outputs that were not asked for"),
        "toy.short": ("crashed", "the check's process gave no output for big"),
        "toy.fine": ("answered", ""),
    }
    assert len({pid(outcome) for outcome in outcomes.values()}) == 1  # a reply is the check's, not the worker's


@pytest.mark.parametrize("left", ["symlink", "fifo", "directory"])
def test_an_outputs_file_that_is_no_regular_file_is_refused(tmp_path, left):
    """Its reply sound, what it left as outputs.safetensors a link (to a sound file), a FIFO or a directory: never
    followed, opened or waited on. The control, the same outputs as a file, is read."""
    outcomes = grade(tmp_path, {"toy.left": answer(outputs_file=left), "toy.file": answer()})
    assert summary(outcomes) == {
        "toy.left": ("crashed", "the check's process left no readable outputs file"),
        "toy.file": ("answered", ""),
    }
    assert (outcomes["toy.left"].reply.outputs, outcomes["toy.left"].outputs) == (["small", "big"], {})


def test_paused_stops_the_workers_and_restarts_those_that_ran(tmp_path, monkeypatch):
    monkeypatch.setattr(lane_rules, "usable_cores", lambda: 2)
    steps = {"toy.a": answer(), "toy.s": answer()}
    checks = [toy("toy.a"), toy("toy.s")]
    with LearnerProcesses(FORKS, worker_command=fake_worker.command(tmp_path, steps)) as processes:
        ref = reference(tmp_path, steps)
        before = processes.run(tmp_path, checks, ref)
        gpt2, stand_ins = processes.lanes[GPT2_LANE], processes.lanes[STAND_IN_LANE]
        stand_ins.close()  # this lane's worker is not running when the pause begins
        running = gpt2.worker
        with processes.paused():
            assert (gpt2.worker, stand_ins.worker) == (None, None)
            assert running.ended()
        assert (gpt2.worker is not None, stand_ins.worker) == (True, None)
        restarted = gpt2.worker.process.pid
        after = processes.run(tmp_path, checks[:1], ref)
    assert summary(after) == {"toy.a": ("answered", "")}
    assert pid(before["toy.a"]) == running.process.pid != restarted == pid(after["toy.a"])


@pytest.mark.parametrize(("limits", "cores", "lanes"), [
    (FORKS, 2, {"gpt2", "stand-ins"}),
    (FORKS, 1, {"gpt2"}),
    (NO_FORKS, 2, {"gpt2"}),
])  # fmt: skip
def test_checks_run_in_two_lanes_where_forks_and_cores_allow(tmp_path, monkeypatch, limits, cores, lanes):
    """Where forks and two cores allow, two workers take the checks from one schedule (`lanes.Schedule`); else one."""
    monkeypatch.setattr(lane_rules, "usable_cores", lambda: cores)
    outcomes = grade(tmp_path, {check.id: answer() for check in TWO_KINDS}, limits, checks=TWO_KINDS)
    assert list(outcomes) == [check.id for check in TWO_KINDS]  # in the checks' order, whatever lane ran them
    workers = pids_by_lane(outcomes)
    assert set(workers) <= lanes and lane_of(outcomes["toy.a"]) == "gpt2"  # the first lane takes the first check
    assert all(len(pids) == 1 for pids in workers.values()) and len(set.union(*workers.values())) == len(workers)


@pytest.mark.parametrize(("told", "started"), [
    ("both kinds", {"gpt2", "stand-ins"}),
    ("one", {"gpt2"}),
    ("nothing", {"gpt2"}),
])  # fmt: skip
def test_entering_starts_the_workers_of_the_lanes_the_checks_will_use(tmp_path, monkeypatch, told, started):
    """Entering starts the first worker; told the checks, `start_for` the second where they may run in two lanes
    (both import torch while the grader reads the reference, which says whether they will), none more where one
    check cannot."""
    monkeypatch.setattr(lane_rules, "usable_cores", lambda: 2)
    checks = {"both kinds": [toy("toy.a"), toy("toy.s")], "one": [toy("toy.a")]}
    steps = {"toy.a": answer()}
    with LearnerProcesses(FORKS, fake_worker.command(tmp_path, steps)) as processes:
        processes.start_for(checks.get(told, []))
        assert {name for name, lane in processes.lanes.items() if lane.worker is not None} == started


def test_the_worker_grade_started_early_is_the_first_lanes_and_its_checks_run_on_it(tmp_path):
    """`grader.host.main` starts the first worker before importing the grader; the session adopts it, starts none of its
    own for that lane, and ends it with the rest."""
    started = Started(fake_worker.command(tmp_path, {"toy.a": answer()}))
    early = started.process
    with LearnerProcesses(FORKS, started=started) as processes:
        assert processes.lanes[GPT2_LANE].worker.process is early
        outcome = processes.run(tmp_path, [toy("toy.a")], reference(tmp_path, ["toy.a"]))["toy.a"]
        assert (outcome.ending, pid(outcome)) == ("answered", early.pid)
    assert early.poll() is not None and not Path(started.scratch.name).exists()


@pytest.fixture
def two_cores(monkeypatch):
    """Two lanes (`lanes.parallel`) and a twin for the second (`launch.twins_here`), whatever this machine has."""
    monkeypatch.setattr(lane_rules, "usable_cores", lambda: 2)
    monkeypatch.setattr(launch, "usable_cores", lambda: 2)


def test_the_second_lane_runs_on_the_first_workers_twin(tmp_path, two_cores):
    """One worker is started; the second lane's is its twin (`grader.shared.twin`): a fork, which no check of the
    first lane's worker can end, with pipes of its own, and ended with the session."""
    steps = {"toy.a": answer(delay=0.3), "toy.s": answer(), "toy.b": answer(), "toy.t": answer()}
    with LearnerProcesses(FORKS, worker_command=fake_worker.command(tmp_path, steps)) as processes:
        outcomes = processes.run(tmp_path, TWO_KINDS, reference(tmp_path, steps))
        first, second = (processes.lanes[name].worker.process for name in (GPT2_LANE, STAND_IN_LANE))
        twin_pid = pid(outcomes["toy.s"])
        assert isinstance(second, launch.Twin) and second.poll() is None
        assert pids_by_lane(outcomes) == {GPT2_LANE: {first.pid}, STAND_IN_LANE: {twin_pid}}
        assert twin_pid != first.pid and first.pid not in {p.pid for p in psutil.Process(twin_pid).parents()}
    assert second.pidfd is None and not alive(twin_pid)


def test_a_twin_serves_on_when_its_sibling_dies(tmp_path, two_cores):
    """The first lane's worker exits mid-check (that check's crash; a fresh worker for the next): the twin, no
    descendant of it, runs every check of the second lane."""
    steps = {
        "toy.a": Step(do="exit", code=7, delay=0.1),
        "toy.s": answer(delay=0.3),
        "toy.b": answer(),
        "toy.t": answer(),
    }
    outcomes = grade(tmp_path, steps, checks=TWO_KINDS)
    assert summary(outcomes)["toy.a"] == ("crashed", "the learner's process exited with code 7")
    assert all(outcomes[c].ending == "answered" for c in ("toy.b", "toy.s", "toy.t"))
    lanes = pids_by_lane({check: outcomes[check] for check in ("toy.b", "toy.s", "toy.t")})
    assert len(lanes[STAND_IN_LANE]) == 1 and not lanes[STAND_IN_LANE] & lanes[GPT2_LANE]


def test_a_twin_nobody_took_ends_with_the_session(tmp_path, two_cores):
    """One lane was enough: the twin, idle, ends when its pipes close."""
    started = Started(fake_worker.command(tmp_path, {}))
    twin_pid = wire.ready_pid(started.twin.stdout.readline())
    started.close()
    assert not alive(twin_pid)


def alive(pid: int, within: float = 5.0) -> bool:
    """Whether the process still runs after `within` seconds (its end is the reaper's, a moment after its exit)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            return False
        time.sleep(0.02)
    return True


def test_an_early_worker_nobody_adopted_is_ended_with_the_scratch(tmp_path):
    """Arguments that turn out to ask for no grading (or to be wrong): `Started.close` ends the worker it started."""
    started = Started(fake_worker.command(tmp_path, {}))
    early = started.process
    started.close()
    started.close()  # once, whoever calls it first: the session, then grader.host.main
    assert early.poll() is not None and not Path(started.scratch.name).exists()


@pytest.mark.parametrize(("argv", "grading"), [
    (["--solutions", "attention"], True),
    ([], True),
    (["--watch", "layernorm"], True),
    (["--help"], False),
    (["-h"], False),
    (["--list"], False),
    (["--download"], False),
    (["--play", "--no-browser"], False),  # the playground starts a learner's process of its own
])  # fmt: skip
def test_grade_starts_a_worker_early_only_where_the_arguments_grade(argv, grading):
    assert wants_grading(argv) is grading


def test_checks_with_warm_imports_run_in_the_lane_that_imported_them_first():
    """The first check needing a slow import pins the others that need it to its lane: imported once, not per lane."""
    warm = [replace(toy(f"toy.{i}"), run=Run(warm_imports=("slow",))) for i in "abc"]
    schedule = lane_rules.Schedule(warm, beside=frozenset(check.id for check in warm))
    first = schedule.take(GPT2_LANE)
    other: list = []
    waiting = threading.Thread(target=lambda: other.append(schedule.take(STAND_IN_LANE)), daemon=True)
    waiting.start()
    waiting.join(timeout=0.2)
    assert waiting.is_alive()  # the stand-in lane waits: every check left needs what the first lane imported
    taken = [first, schedule.take(GPT2_LANE), schedule.take(GPT2_LANE)]
    assert schedule.take(GPT2_LANE) is None
    for check in taken:
        schedule.done(check)
    waiting.join(timeout=5)
    assert [check.id for check in taken] == ["toy.a", "toy.b", "toy.c"] and other == [None]


def test_a_lane_that_asks_before_the_first_takes_a_check_once_the_first_lane_has_its_own():
    """The first check goes to the first lane; a second lane that asked earlier is woken by that take, not left
    waiting until the first check is done."""
    schedule = lane_rules.Schedule([toy("toy.a"), toy("toy.s")], BESIDE)
    other: list = []
    waiting = threading.Thread(target=lambda: other.append(schedule.take(STAND_IN_LANE)), daemon=True)
    waiting.start()
    waiting.join(timeout=0.2)
    assert waiting.is_alive()  # nothing for it before the first lane's first
    first = schedule.take(GPT2_LANE)
    waiting.join(timeout=5)
    assert first.id == "toy.a" and [check.id for check in other] == ["toy.s"]  # toy.a is still running


def test_the_verdict_of_each_ending(tmp_path):
    """What the runner made of each ending, judged: only an answered check is compared; the others' status is
    verdict.STATUS_OF_ENDING's."""
    steps = {
        "toy.right": answer(),
        "toy.wrong": answer(outputs={"small": SMALL, "big": [0.5, -0.25, 9.0]}),
        "toy.late": Step(do="end", ending="timeout", reason="no answer within 60 s (an infinite loop?)"),
        "toy.big": Step(do="end", ending="memory", reason="the check's processes used more than 6 GB"),
        "toy.gone": Step(do="exit", code=7),
        "toy.unknown": answer(extra_keys={"param_count": 1}),
    }
    expected = {}
    for check_id in steps:
        expected[wire.EXPECTED.format(check=check_id, case="small")] = np.array(SMALL, np.float32)
        expected[wire.EXPECTED.format(check=check_id, case="big")] = np.array(BIG, np.float32)
    checks = [toy(check_id) for check_id in steps]
    with LearnerProcesses(FORKS, worker_command=fake_worker.command(tmp_path, steps)) as processes:
        ref = reference(tmp_path, steps, expected)
        outcomes = processes.run(tmp_path, checks, ref)
    results = {check.id: judge(Evidence(check, outcomes[check.id], ref)) for check in checks}
    assert {check: (result.status, result.message) for check, result in results.items()} == {
        "toy.right": ("pass", ""),
        "toy.wrong": (
            "fail",
            "differs from the random reference on big: max abs diff 1 at index (2,); 66.7% of values within tolerance",
        ),
        "toy.late": ("timeout", "no answer within 60 s (an infinite loop?)"),
        "toy.big": ("error", "the check's processes used more than 6 GB"),
        "toy.gone": ("error", "the learner's process exited with code 7"),
        "toy.unknown": ("error", "the check's reply is malformed (param_count: a field the wire format does not have)"),
    }
    assert results["toy.wrong"].max_abs_diff == pytest.approx(1.0)
    assert STATUS_OF_ENDING == {"timeout": "timeout", "crashed": "error", "memory": "error"}


# --- a second round of draws (Run.draws_again, runner.rounds) -----------------------------------------------------


def drawn_toy(check_id: str) -> Check:
    """A toy that counts draws: a case is drawn again where its first output's first value is not the expected's."""
    return replace(
        toy(check_id), run=Run(draws_again=lambda counts, expected: bool(counts.flat[0] != expected.flat[0]))
    )


def graded_in_rounds(tmp_path: Path, steps: dict[str, Step], checks: list[Check]) -> dict:
    expected = {}
    for check in checks:
        expected[wire.EXPECTED.format(check=check.id, case="small")] = np.array(SMALL, np.float32)
        expected[wire.EXPECTED.format(check=check.id, case="big")] = np.array(BIG, np.float32)
    with LearnerProcesses(FORKS, worker_command=fake_worker.command(tmp_path, steps)) as processes:
        return processes.run(tmp_path, checks, reference(tmp_path, [check.id for check in checks], expected))


def output(outcome, case: str) -> list:
    return outcome.outputs[output_key(case)].tolist()


OFF = [9.0, -0.25, 8.0]  # the big case's first round, undecided: its first value is not the expected 0.5


def test_only_the_undecided_cases_are_drawn_again_and_their_counts_summed(tmp_path):
    again = {"outputs": {"big": [1.0, 2.0, 3.0]}}
    steps = {"toy.draws": answer(outputs={"small": SMALL, "big": OFF}, again=again)}
    outcome = graded_in_rounds(tmp_path, steps, [drawn_toy("toy.draws")])["toy.draws"]
    assert (outcome.ending, output(outcome, "small"), output(outcome, "big")) == ("answered", SMALL, [10.0, 1.75, 11.0])
    assert len(outcome.printed) == 2  # each round's process printed its identity: two requests


def test_settled_cases_and_checks_without_rounds_are_asked_once(tmp_path):
    asked_twice = {"status": "error", "error": "asked twice", "outputs": {}}
    steps = {
        "toy.settled": answer(again=asked_twice),
        "toy.plain": answer(outputs={"small": SMALL, "big": OFF}, again=asked_twice),
    }
    outcomes = graded_in_rounds(tmp_path, steps, [drawn_toy("toy.settled"), toy("toy.plain")])
    assert [output(outcomes[check], "big") for check in steps] == [BIG, OFF]
    assert [len(outcomes[check].printed) for check in steps] == [1, 1]


def test_a_first_round_that_failed_is_not_drawn_again(tmp_path):
    steps = {"toy.draws": answer(status="error", error="a bug", again={"outputs": {"small": SMALL, "big": BIG}})}
    outcome = graded_in_rounds(tmp_path, steps, [drawn_toy("toy.draws")])["toy.draws"]
    assert (outcome.reply.status, outcome.reply.error, len(outcome.printed)) == ("error", "a bug", 1)


@pytest.mark.parametrize(
    ("again", "ending", "status", "said"),
    [
        (
            {"do": "end", "ending": "timeout", "reason": "no answer within 60 s"},
            "timeout",
            None,
            "no answer within 60 s",
        ),
        (
            {"status": "error", "error": "ValueError: no more", "outputs": {}},
            "answered",
            "error",
            "ValueError: no more",
        ),
        ({"outputs": {"big": [1.0, 2.0]}}, "answered", "ran", "float32 values of shape (2,) as counts in its second"),
        ({"outputs": {}}, "crashed", None, "gave no output for big"),
        ({"outputs": {"small": SMALL, "big": BIG}}, "crashed", None, "names outputs that were not asked for"),
    ],
    ids=["timeout", "error", "another shape", "no counts", "cases not asked for"],
)
def test_a_second_round_that_fails_is_the_checks_failure(tmp_path, again, ending, status, said):
    steps = {"toy.draws": answer(outputs={"small": SMALL, "big": OFF}, again=again)}
    outcome = graded_in_rounds(tmp_path, steps, [drawn_toy("toy.draws")])["toy.draws"]
    problem = outcome.reply.bad_output.problem if outcome.reply.bad_output else outcome.message
    assert (outcome.ending, status is None or outcome.reply.status == status, said in problem) == (ending, True, True)


def test_second_round_counts_that_are_no_numbers_are_a_failing_output():
    first = Outcome("answered", wire.Reply("ran", outputs=["big"]), {output_key("big"): np.array(OFF)})
    second = replace(first, outputs={output_key("big"): np.array(OFF, np.complex64)})
    merged = rounds.summed(first, second, [CASES[1]])
    assert merged.reply.bad_output == wire.BadOutput(
        "big",
        "gave complex64 values of shape (3,) as counts in its second round of draws, float64 values of shape (3,) in "
        "its first",
    )


def output_key(case: str) -> str:
    return wire.OUTPUT.format(case=case)


def test_a_scratch_is_removed_whatever_modes_its_check_left():
    """An unreadable and an unwritable directory, links out (to a file and a directory, left as they are): all go,
    as the user that grades (here a user of its own where the tests run as root, whom modes do not stop)."""
    with tempfile.TemporaryDirectory() as directory:  # not pytest's: nobody may not enter it
        removed_from(Path(directory))


def removed_from(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("kept")
    as_user = os.geteuid() == 0
    if as_user:
        os.chown(tmp_path, NOBODY, NOBODY)
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            if as_user:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            scratch = tmp_path / "check-gpt2-1"
            (scratch / "locked" / "deeper").mkdir(parents=True)
            (scratch / "locked" / "deeper" / "file").write_text("x")
            (scratch / "read-only").mkdir()
            (scratch / "read-only" / "file").write_text("x")
            (scratch / "to-a-file").symlink_to(outside / "kept")
            (scratch / "to-a-directory").symlink_to(outside)
            for directory, mode in (("locked/deeper", 0), ("locked", 0), ("read-only", 0o500)):
                os.chmod(scratch / directory, mode)
            remove_scratch(scratch)
            os.write(writing, json.dumps(scratch.exists()).encode())
        finally:
            os._exit(0)
    os.close(writing)
    with os.fdopen(reading) as answer:
        left = json.loads(answer.read() or "null")
    os.waitpid(child, 0)
    assert left is False
    assert (outside / "kept").read_text() == "kept" and oct(os.stat(outside).st_mode & 0o777) == "0o755"


NOBODY = 65534


def test_a_worker_that_cannot_fork_its_twin_serves_alone(monkeypatch):
    """The fork refused (a cap on processes): the twin's ends are closed, so the grader reads the end of its pipe and
    the second lane starts a worker of its own; the first worker answers on its own channel."""
    requests, twin_answers = os.pipe()
    monkeypatch.setenv(twin.VARIABLE, f"{requests},{twin_answers}")

    def refused() -> int:
        raise BlockingIOError("fork: Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refused)
    answers = io.StringIO()
    assert twin.split(answers) is answers and twin.VARIABLE not in os.environ
    for fd in (requests, twin_answers):
        with pytest.raises(OSError):
            os.fstat(fd)
