"""Two lanes: two workers share a grading's checks, and two exclusive checks (most of GPT-2's) never run at once.

A check may run beside any other where the reference says so (`ReferenceData.beside`, derived when the cache is built):
none of its cases maps the whole model, its inputs can tell no other check its expected outputs, and no other check's
inputs its own: shown here again on the cache itself, tensor by tensor, by value. The verdicts are the same as in one
lane."""

from __future__ import annotations

import hashlib
import threading
import time

import numpy as np
import psutil
import pytest
from repo import SOLUTIONS, stubs, tiered, write_variant

from grader.checks import registry
from grader.host.runner import Limits, Schedule, parallel
from grader.host.runner import lanes as lane_rules

# A variant failing in each lane: attention scaled by d_head (GPT-2's lane), top-k keeping k + 1 (stand-ins).
VARIANTS = {
    "attention": {"attention.py": [("attn_scores / self.cfg.d_head**0.5", "attn_scores / self.cfg.d_head")]},
    "top_k": {"sampling.py": [("logits.topk(k)", "logits.topk(k + 1)")]},
}


def digests(tensors: dict) -> set[str]:
    """Each tensor's values, hashed whatever their shape and width (floats as float64, the rest as int64: a float32
    input tells a float64 answer as well); scalars left out (a 1 or a 0 tells nothing)."""
    arrays = (np.asarray(t) for t in tensors.values())
    return {
        hashlib.sha256(np.asarray(a, np.float64 if a.dtype.kind == "f" else np.int64).tobytes()).hexdigest()
        for a in arrays
        if a.size > 1
    }


@pytest.fixture(scope="module")
def held(reference) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Each check's input digests and expected-output digests, by check id: read once for the module's tests."""
    checks = registry()
    return (
        {c.id: digests(reference.inputs(c.id)) for c in checks},
        {c.id: digests(reference.expected(c.id)) for c in checks},
    )


def test_the_checks_the_reference_lets_run_beside_others_map_a_part_and_tell_no_answer(reference, held):
    """Shown here again on the cache's own tensors, by this file's own reading of them."""
    checks = registry()
    inputs, expected = held
    beside = [c for c in checks if c.id in reference.beside]
    assert {"embed", "sampling.greedy", "interp.qk_circuit", "training.trainer"} <= {c.id for c in beside}
    for check in beside:
        assert all(case.weights != "" or case.config for case in reference.cases(check.id)), check.id
        others = [c for c in checks if c is not check]
        assert not inputs[check.id] & set().union(*(expected[c.id] for c in others)), check.id
        assert not expected[check.id] & set().union(*(inputs[c.id] for c in others)), check.id


def test_a_check_that_maps_the_whole_model_or_tells_another_its_answer_is_exclusive(reference, held):
    """The controls: the whole model (transformer), an input that is another's answer (layernorm's is block's), an
    answer that is another's input (previous_token_scores's, heads_above's)."""
    inputs, expected = held
    assert {"transformer", "layernorm", "induction.previous_token_scores"}.isdisjoint(reference.beside)
    assert any(case.weights == "" for case in reference.cases("transformer"))
    assert inputs["layernorm"] & expected["block"]
    assert expected["induction.previous_token_scores"] & inputs["induction.heads_above"]


def test_two_lanes_only_where_forks_cores_and_a_check_beside_allow(reference, monkeypatch):
    checks, beside = list(registry()), reference.beside
    monkeypatch.setattr(lane_rules, "usable_cores", lambda: 2)
    assert parallel(checks, Limits(fork=True), beside)
    assert not parallel(checks, Limits(fork=False), beside)  # no forks: one worker, replaced per package
    assert not parallel([c for c in checks if c.id not in beside], Limits(fork=True), beside)  # one at a time
    assert parallel([c for c in checks if c.id in beside], Limits(fork=True), beside)  # a save of sampling.py
    assert parallel(checks[:2], Limits(fork=True))  # the reference unread: they might
    monkeypatch.setattr(lane_rules, "usable_cores", lambda: 1)
    assert not parallel(checks, Limits(fork=True), beside)


def test_two_lanes_sharing_a_schedule_never_run_two_exclusive_checks_at_once_and_import_once(reference):
    checks = list(registry())
    exclusive = [c.id for c in checks if c.id not in reference.beside]
    schedule, running, most, taken = Schedule(checks, reference.beside), [], [0], {}
    guard = threading.Lock()

    def lane(name: str) -> None:
        while (check := schedule.take(name)) is not None:
            with guard:
                running.append(check)
                most[0] = max(most[0], sum(c.id in exclusive for c in running))
                taken[check.id] = name
            time.sleep(0.001)
            with guard:
                running.remove(check)
            schedule.done(check)

    lanes = [threading.Thread(target=lane, args=(name,)) for name in (lane_rules.GPT2_LANE, lane_rules.STAND_IN_LANE)]
    for thread in lanes:
        thread.start()
    for thread in lanes:
        thread.join(timeout=30)
    assert most == [1] and sorted(taken) == sorted(c.id for c in checks)
    assert [i for i in taken if i in exclusive] == exclusive  # the exclusive checks in the course's order
    warm = [c.id for c in checks if c.run.warm_imports]
    assert len(warm) >= 2 and len({taken[i] for i in warm}) == 1  # torch._dynamo imported by one worker only


def test_the_second_lane_runs_on_a_twin_that_the_first_workers_checks_do_not_end(reference, monkeypatch):
    """The first worker forks the second lane's (`grader.shared.twin`) once torch is imported: a process that is no
    descendant of it, so that the first worker ending what each of its checks started leaves it be."""
    from grader.host import launch
    from grader.host.pipeline import GradingRun
    from grader.host.runner import GPT2_LANE, STAND_IN_LANE, LearnerProcesses

    monkeypatch.setattr(lane_rules, "usable_cores", lambda: 2)
    monkeypatch.setattr(launch, "usable_cores", lambda: 2)
    checks = [c for c in registry() if c.id in ("embed", "pos_embed", "sampling.greedy", "beam.filter", "gelu_new")]
    with LearnerProcesses(Limits()) as processes:
        report = GradingRun(SOLUTIONS, checks, reference, processes=processes).finished().report
        first, twin = (processes.lanes[name].worker.process for name in (GPT2_LANE, STAND_IN_LANE))
        assert isinstance(twin, launch.Twin) and twin.poll() is None and first.poll() is None
        twin_process = psutil.Process(pidfd_pid(twin.pidfd))
        assert first.pid not in {p.pid for p in twin_process.parents()}
        assert twin_process.cmdline() == psutil.Process(first.pid).cmdline()
    assert [r.status for r in report.checks] == ["pass"] * len(checks)


def pidfd_pid(pidfd: int) -> int:
    """The pid a pidfd refers to, as /proc says."""
    with open(f"/proc/self/fdinfo/{pidfd}") as info:
        return next(int(line.split()[1]) for line in info if line.startswith("Pid:"))


def one_lane_and_two(grade_in, monkeypatch) -> tuple[dict, dict]:
    def verdicts(cores: int) -> dict:
        monkeypatch.setattr(lane_rules, "usable_cores", lambda: cores)
        return {r.id: (r.status, r.score, r.hint) for r in grade_in().checks}

    return verdicts(1), verdicts(2)


# make test grades the GPT-2 lane's mistake in one lane and two; make test-all the other lane's too.
@pytest.mark.parametrize("variant", tiered(VARIANTS, ("attention",)))
def test_a_mistake_in_either_lane_gets_the_same_verdicts_in_one_lane_or_two(variant, grade, tmp_path, monkeypatch):
    package = write_variant(tmp_path, VARIANTS[variant])
    checks = ("attention", "kv_cache", "sampling.greedy", "sampling.top_k")  # two of each lane
    one, two = one_lane_and_two(lambda: grade(package, *checks), monkeypatch)
    assert one == two
    assert two["attention" if variant == "attention" else "sampling.top_k"][0] == "fail"


@pytest.mark.slow
@pytest.mark.parametrize("solved", [True, False], ids=["solutions", "stubs"])
def test_every_check_gets_the_same_verdicts_in_one_lane_or_two(solved, reference, monkeypatch):
    from grader.host.pipeline import GradingRun

    package = SOLUTIONS if solved else stubs()
    checks = list(registry())
    one, two = one_lane_and_two(lambda: GradingRun(package, checks, reference).finished().report, monkeypatch)
    assert one == two
