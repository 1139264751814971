"""Two lanes: the checks that hold none of GPT-2's data run beside the others, in a worker of their own.

Their running at the same time is safe only if neither lane's inputs can tell a check of the other lane
its expected outputs: shown here on the reference cache itself, tensor by tensor. The verdicts are the
same as in one lane."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from conftest import EXERCISES, SOLUTIONS, tiered, write_variant
from safetensors.numpy import load_file

from grader.checks import registry
from grader.host.runner import GPT2_LANE, STAND_IN_LANE, Limits, lanes_for
from grader.host.runner import lanes as lane_rules

# A variant failing in each lane: attention scaled by d_head (GPT-2's lane), top-k keeping k + 1 (stand-ins).
VARIANTS = {
    "attention": {"attention.py": [("attn_scores / self.cfg.d_head**0.5", "attn_scores / self.cfg.d_head")]},
    "top_k": {"sampling.py": [("logits.topk(k)", "logits.topk(k + 1)")]},
}


def digests(tensors: dict) -> set[str]:
    """Each tensor's bytes, dtype and shape, hashed; scalars left out (a 1 or a 0 tells nothing)."""
    return {
        hashlib.sha256(np.ascontiguousarray(t).tobytes() + str((t.dtype, t.shape)).encode()).hexdigest()
        for t in tensors.values()
        if np.asarray(t).size > 1
    }


def test_the_stand_in_lane_holds_nothing_of_gpt2s_and_tells_no_expected_output(reference):
    checks = registry()
    stand_ins = [c for c in checks if not c.reads_gpt2]
    gpt2 = [c for c in checks if c.reads_gpt2]
    assert stand_ins and gpt2
    for check in stand_ins:  # no case loads GPT-2's weights
        assert all(case.weights is None for case in reference.cases(check.id)), check.id
    lane_inputs = {lane: set().union(*(digests(reference.inputs(c.id)) for c in group)) for lane, group in
                   (("gpt2", gpt2), ("stand-ins", stand_ins))}  # fmt: skip
    lane_expected = {lane: set().union(*(digests(reference.expected(c.id)) for c in group)) for lane, group in
                     (("gpt2", gpt2), ("stand-ins", stand_ins))}  # fmt: skip
    assert not lane_inputs["stand-ins"] & lane_expected["gpt2"]
    assert not lane_inputs["gpt2"] & lane_expected["stand-ins"]
    assert not lane_inputs["stand-ins"] & digests(load_file(str(reference.weights_path)))


def test_lanes_split_by_what_the_checks_read_and_only_where_forks_and_cores_allow(monkeypatch):
    checks = list(registry())
    monkeypatch.setattr(lane_rules, "usable_cores", lambda: 2)
    lanes = lanes_for(checks, Limits(fork=True))
    assert [c.id for c in lanes[GPT2_LANE]] == [c.id for c in checks if c.reads_gpt2]
    assert [c.id for c in lanes[STAND_IN_LANE]] == [c.id for c in checks if not c.reads_gpt2]
    assert list(lanes_for(checks, Limits(fork=False))) == [GPT2_LANE]  # no forks: one worker, replaced per package
    only_model = [c for c in checks if c.reads_gpt2]
    assert list(lanes_for(only_model, Limits(fork=True))) == [GPT2_LANE]
    monkeypatch.setattr(lane_rules, "usable_cores", lambda: 1)
    assert list(lanes_for(checks, Limits(fork=True))) == [GPT2_LANE]


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
@pytest.mark.parametrize("package", [SOLUTIONS, EXERCISES], ids=str)
def test_every_check_gets_the_same_verdicts_in_one_lane_or_two(package, reference, monkeypatch):
    from grader.host.pipeline import grade_package

    checks = list(registry())
    one, two = one_lane_and_two(lambda: grade_package(package, checks, reference), monkeypatch)
    assert one == two
