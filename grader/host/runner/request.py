"""What a check is sent: the limits it runs under, and the request the learner's process gets for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from grader.checks import Check
from grader.host.launch import forks_here
from grader.host.limits import DEFAULT_MEMORY_LIMIT_GB, DEFAULT_TIMEOUT
from grader.host.refcache import ReferenceData
from grader.shared import sandbox, wire


@dataclass(frozen=True)
class Limits:
    timeout: float = DEFAULT_TIMEOUT  # seconds per check
    memory_gb: float = DEFAULT_MEMORY_LIMIT_GB  # 0: no limit
    fast_init: bool = True  # skip the random initialisation the reference weights overwrite
    trace: bool = False  # record every tensor the learner's code names, for `grade --trace`
    sandbox: bool = True  # confine each check where the machine allows it (`sandbox.status`)
    fork: bool | None = None  # each check in a fork of the worker; None: as `forks_here` decides
    device: str = "cpu"  # one of DEVICES; auto: what the learner's torch finds (cuda, mps, else cpu)

    def settled(self) -> Limits:
        """These limits with the fork decision made, once, in the grader's process."""
        return self if self.fork is not None else replace(self, fork=forks_here())


def request_for(
    package: Path, check: Check, reference: ReferenceData, scratch: Path, limits: Limits, stand_ins: Sequence[str] = ()
) -> wire.Request:
    """`stand_ins`: the parts of the learner's package the grader's own replace in this check (wire.StandInPart)."""
    target = check.target
    return wire.Request(
        package=str(package),
        check=check.id,
        target=wire.TargetSpec(target.file, target.name, target.method, target.driver, limits.fast_init),
        cases=reference.cases(check.id),
        weights=str(reference.weights_path),
        inputs=str(reference.inputs_path(check.id)),
        scratch=str(scratch),
        timeout=check_timeout(check, limits),
        memory_bytes=int(limits.memory_gb * 2**30),
        watch_inputs=check.run.watch_inputs,
        capture=capture_request(check, limits.trace),
        sandbox=limits.sandbox and bool(limits.fork) and sandbox.status().on,
        fork=bool(limits.fork),
        device=limits.device,
        warm_imports=list(check.run.warm_imports),
        stand_ins=list(stand_ins),
    )


def check_timeout(check: Check, limits: Limits) -> float:
    return max(limits.timeout, check.run.min_timeout or 0.0)


def capture_request(check: Check, trace: bool) -> wire.Capture | None:
    """What the learner's process records: the check's own needs for diagnosis, plus every named
    tensor under --trace. Values travel back only when a diagnosis compares them."""
    modes = set(check.run.capture) | ({"locals"} if trace else set())
    return wire.Capture(sorted(modes), list(check.run.capture)) if modes else None
