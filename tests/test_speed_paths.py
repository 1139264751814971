"""The speed-ups of the learner's process change no verdict.

Building a module skips every random fill its weights overwrite, nn.init's included (a whole
model's `nn.init.normal_` cost about 2 s per check), and the fork server imports a driver's heavy
dependencies once instead of each check's process (torch.optim's first optimizer imports
torch._dynamo). The verdicts with the fills skipped equal those with them paid for, on the
solutions, the stubs, and each written-wrong variant of test_mistakes and test_interp at its check.
A check runs in the process the fork server forked ahead of it (`server.Spare`) only where that process is
the one it would have forked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from conftest import REPO, SOLUTIONS, write_variant
from test_interp import MISTAKES as INTERP_MISTAKES
from verdicts import NAMES, expected_statuses, verdicts

from grader.checks import registry
from grader.host.runner import Limits
from grader.host.runner.request import request_for
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
    assert "torch._dynamo" in check.warm_imports
    for name in ("grader.learner.drivers.training", *check.warm_imports):
        monkeypatch.delitem(sys.modules, name, raising=False)
    target = wire.TargetSpec("training", "make_optimizer", None, check.target.driver)
    request = wire.Request("", "", target, [], "", "", "", 1.0, 0, warm_imports=list(check.warm_imports))
    server.warm_imports(request)
    assert {"grader.learner.drivers.training", "torch._dynamo"} <= set(sys.modules)


# A fork server of its own (the test's process must not become one: it would end the session's workers): each
# request of stdin in turn, given a spare that fits it, then one made for another memory limit, then one forked before
# the fork server imported what the request warms.
UNIMPORTED = "tabnanny"  # a module no process of the grader imports
SPARE_SERVER = """
import json, os, sys
from grader.learner import server
from grader.shared import sandbox, wire

sandbox.become_subreaper()
forked = []
fork = os.fork
os.fork = lambda: forked.append(fork()) or forked[-1]
requests = [wire.parse_request(line) for line in sys.stdin]
assert "tabnanny" not in sys.modules
answer_fd = os.dup(1)
for request, memory_bytes in zip(requests, (0, 1, 0)):
    spare = server.Spare(request.memory_bytes + memory_bytes, answer_fd)
    answer = server.run_one(request, answer_fd, spare)
    ended = not os.path.exists(f"/proc/{spare.pid}")  # reaped, used or not
    print(json.dumps({"answer": answer.ending, "forks": len(forked), "ended": ended}))
"""


def test_a_check_runs_in_the_spare_forked_ahead_only_where_it_fits(reference, tmp_path):
    check = next(check for check in registry() if check.id == "embed")
    scratches = [tmp_path / name for name in ("fits", "another_limit", "warms_an_import")]
    requests = []
    for scratch in scratches:
        scratch.mkdir()
        requests.append(request_for(SOLUTIONS, check, reference, scratch, Limits(fork=True)))
    requests[2] = replace(requests[2], warm_imports=[UNIMPORTED])
    lines = "\n".join(request.to_json() for request in requests)
    ran = subprocess.run([sys.executable, "-c", SPARE_SERVER], cwd=REPO, input=lines, text=True, capture_output=True,
                         timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    fits, another_limit, warms = (json.loads(line) for line in ran.stdout.splitlines())
    assert fits == {"answer": "answered", "forks": 1, "ended": True}  # the spare's own fork, and no other
    assert another_limit == {"answer": "answered", "forks": 3, "ended": True}  # the spare ended, the check forked anew
    assert warms == {"answer": "answered", "forks": 5, "ended": True}
    for scratch in scratches:
        assert json.loads((scratch / wire.REPLY_FILE).read_text())["status"] == "ran"


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
