"""The speed-ups of the learner's process change no verdict.

Building a module skips every random fill its weights overwrite, nn.init's included (a whole
model's `nn.init.normal_` cost about 2 s per check), and the fork server imports a driver's heavy
dependencies once instead of each check's process (torch.optim's first optimizer imports
torch._dynamo). The verdicts with the fills skipped equal those with them paid for, on the
solutions, the stubs, and each written-wrong variant of test_mistakes and test_interp at its check.
"""

from __future__ import annotations

import sys

import pytest
import torch
from repo import write_variant
from test_interp import MISTAKES as INTERP_MISTAKES
from verdicts import NAMES, expected_statuses, verdicts

from grader.checks import registry
from grader.learner import server, weights
from grader.shared import wire


class Filled(torch.nn.Module):
    """Random fills by every route a learner's `__init__` takes, beside a deterministic one."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c, self.d = (torch.nn.Parameter(torch.zeros(4, 4)) for _ in range(4))
        torch.nn.init.normal_(self.a, std=1.0)
        torch.nn.init.kaiming_uniform_(tensor=self.b)  # by keyword
        self.c.data.uniform_()
        torch.nn.init.constant_(self.d, 2.0)


def test_every_random_fill_is_skipped_and_only_those():
    with weights.SkipRandomFills():
        module = Filled()
    assert all(not p.any() for p in (module.a, module.b, module.c))
    assert (module.d == 2.0).all()
    fresh = Filled()  # and nothing is skipped outside
    assert all(p.any() for p in (fresh.a, fresh.b, fresh.c))


def test_a_drivers_imports_are_warmed_before_the_fork(monkeypatch):
    """The check's driver and what it declares it imports on first use (make_optimizer: torch._dynamo) are imported by
    the fork server from the request, before the check's fork."""
    check = next(check for check in registry() if check.id == "training.make_optimizer")
    assert "torch._dynamo" in check.run.warm_imports
    for name in ("grader.learner.drivers.training", *check.run.warm_imports):
        monkeypatch.delitem(sys.modules, name, raising=False)
    target = wire.TargetSpec("training", "make_optimizer", None, check.target.driver)
    request = wire.Request("", "", target, [], "", "", "", 1.0, 0, warm_imports=list(check.run.warm_imports))
    server.warm_imports(request)
    assert {"grader.learner.drivers.training", "torch._dynamo"} <= set(sys.modules)


INTERP_NAMES = [f"interp: {check_id}" for check_id in INTERP_MISTAKES]


def interp_variant(name: str, tmp_path_factory):
    check_id = name.removeprefix("interp: ")
    (old, new), _ = INTERP_MISTAKES[check_id]
    return write_variant(tmp_path_factory.mktemp("interp"), {"interp.py": [(old, new)]}), check_id


def comparable(report) -> dict:
    return {check.id: (check.status, check.message, check.hint, check.max_abs_diff) for check in report.checks}


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_skipped_fills_change_no_verdict(name, grade, tmp_path_factory):
    skipped = verdicts(grade, tmp_path_factory, name, fast_init=True)
    assert verdicts(grade, tmp_path_factory, name, fast_init=False) == skipped
    assert skipped and expected_statuses(name, skipped)


@pytest.mark.slow
@pytest.mark.parametrize("name", INTERP_NAMES)
def test_skipped_fills_change_no_interp_verdict(name, grade, tmp_path_factory):
    package, check_id = interp_variant(name, tmp_path_factory)
    skipped = comparable(grade(package, check_id, fast_init=True))
    assert comparable(grade(package, check_id, fast_init=False)) == skipped
    assert skipped[check_id][0] == "fail"
