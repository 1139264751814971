"""Device truth, in the grader's process: telling a device that computes wrongly from a learner who does.

Where the grader has a module of its own for the check (`grader.learner.device_truth`), it ran beside the learner's
on the check's device, from the same inputs and weights: if it misses GPT-2's output there, the device computes that
module wrongly, and the check is graded again on the CPU. Where the grader has none, a check that fails on the device
is run again on the CPU, and graded there if it passes there."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from grader.checks import Check
from grader.host.refcache import ReferenceData
from grader.host.runner.replies import Outcome
from grader.shared import wire
from grader.shared.compare import CaseComparison, allclose

Ask = Callable[[wire.Request], Outcome]  # a request's outcome, run in a new scratch directory


def on_the_cpu_if_misled(
    check: Check, request: wire.Request, outcome: Outcome, reference: ReferenceData, ask: Ask
) -> tuple[wire.Request, Outcome]:
    """The request and outcome the check is graded on: the device's, or the CPU's where the device computes wrongly
    (the outcome's `device_fault` then says so)."""
    if request.device == "cpu":
        return request, outcome
    device = outcome.reply.device or "this device"
    fault = probe_fault(check, outcome, reference, device)
    if fault == "" or (fault is None and (not outcome.completed or all_pass(check, outcome, reference))):
        return request, outcome  # the device is right, or the check does not fail there
    on_cpu = replace(request, device="cpu")
    cpu = ask(on_cpu)
    if fault is None:  # unprobed: the device is suspect only where the CPU passes what it failed
        if not (cpu.completed and all_pass(check, cpu, reference)):
            return request, outcome
        fault = f"fails on {device} and passes on the CPU, where it was graded: this device computes it differently"
    return on_cpu, replace(cpu, device_fault=fault)


def probe_fault(check: Check, outcome: Outcome, reference: ReferenceData, device: str) -> str | None:
    """Of a check probed on the device: why the device is wrong, or "" where the grader's own module is right there
    (a failure is then the learner's). None where nothing was probed."""
    probed = False
    for case in outcome.reply.outputs:
        probe = outcome.outputs.get(wire.DEVICE_PROBE.format(case=case))
        if probe is None:
            continue
        probed, result = True, compared(check, reference, probe, case)
        if not result.ok:
            module = check.target.name
            return (
                f"{device} computes {module} wrongly: the grader's own {module} misses GPT-2's output there on "
                f"{case} ({result.message}); graded on the CPU instead"
            )
    return "" if probed else None


def all_pass(check: Check, outcome: Outcome, reference: ReferenceData) -> bool:
    outputs = outcome.outputs
    return all(compared(check, reference, outputs[wire.OUTPUT.format(case=c)], c).ok for c in outcome.reply.outputs)


def compared(check: Check, reference: ReferenceData, value, case: str) -> CaseComparison:
    """`value` against the case's expected output, by the check's own comparison, as its verdict compares."""
    return (check.comparison or allclose)(value, reference.expected(check.id)[case], check.tolerance)
