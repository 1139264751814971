"""runner.device_truth's decisions, on outcomes built here: which device a check is graded on, and what it says."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest

from grader.checks import Check, Target
from grader.host.runner.device_truth import on_the_cpu_if_misled
from grader.host.runner.replies import Outcome
from grader.shared import wire

pytestmark = pytest.mark.unit
RIGHT, WRONG = np.ones(3, dtype=np.float32), np.zeros(3, dtype=np.float32)
CHECK = Check("layernorm", 1, Target("normalization", "LayerNorm"), "LayerNorm", lambda ref: [], page="04-layernorm.md")
REQUEST = wire.Request(
    "pkg", "layernorm", wire.TargetSpec("normalization", "LayerNorm", "forward", None), [], "w", "i", "s", 1.0, 0
)


@dataclass
class Expected:
    def expected(self, check_id: str) -> dict:
        return {"case": RIGHT}


def outcome(output, probe=None) -> Outcome:
    outputs = {wire.OUTPUT.format(case="case"): output}
    if probe is not None:
        outputs[wire.DEVICE_PROBE.format(case="case")] = probe
    return Outcome("answered", wire.Reply("ran", outputs=["case"], device="cuda:0 (a GPU)"), outputs)


def graded(first: Outcome, on_cpu: Outcome, device: str = "cuda") -> tuple[str, Outcome, list]:
    asked = []

    def ask(request):
        asked.append(request.device)
        return on_cpu

    request, result = on_the_cpu_if_misled(CHECK, replace(REQUEST, device=device), first, Expected(), ask)
    return request.device, result, asked


@pytest.mark.parametrize(
    ("first", "on_cpu", "device", "fault", "asks"),
    [
        (outcome(WRONG, probe=RIGHT), outcome(RIGHT), "cuda", "", False),  # the grader's module right there: learner
        (outcome(RIGHT, probe=RIGHT), outcome(RIGHT), "cuda", "", False),
        (outcome(RIGHT, probe=WRONG), outcome(RIGHT), "cpu", "cuda:0 (a GPU) computes LayerNorm wrongly", True),
        (outcome(WRONG, probe=WRONG), outcome(WRONG), "cpu", "cuda:0 (a GPU) computes LayerNorm wrongly", True),
        (outcome(WRONG), outcome(RIGHT), "cpu", "fails on cuda:0 (a GPU) and passes on the CPU", True),
        (outcome(WRONG), outcome(WRONG), "cuda", "", True),  # unprobed, wrong on both: the learner's, as on the device
        (outcome(RIGHT), outcome(WRONG), "cuda", "", False),
    ],
)
def test_the_device_a_check_is_graded_on(first, on_cpu, device, fault, asks):
    graded_on, result, asked = graded(first, on_cpu)
    assert graded_on == device and result.device_fault.startswith(fault) and bool(result.device_fault) == bool(fault)
    assert asked == (["cpu"] if asks else [])


def test_a_check_on_the_cpu_is_never_run_again():
    _, result, asked = graded(outcome(WRONG, probe=WRONG), outcome(RIGHT), device="cpu")
    assert asked == [] and not result.device_fault
