"""The path of macOS and Windows, where checks run in the worker itself, unforked: forced on Linux
by GPT2_GRADER_FORK=0 (here mostly `Limits(fork=False)`, what the switch settles to). Timeouts,
crashes and sys.exit cost only their check; the grader's guards hold; and every verdict on the
solutions, the stubs and each written-wrong variant equals the fork path's."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import pytest
from repo import by_id, run_grade, write_variant
from test_hostile import BREAKING, ENDS_ANY_PROCESS, PATCH_EVERY_COMPARISON, attention_body_prefix
from verdicts import NAMES, expected_statuses, verdicts

from grader.host.runner import FORK_SWITCH, Limits, forks_here

LINUX = pytest.mark.skipif(sys.platform != "linux", reason="the fork path to compare with is Linux's")
UNFORKED = {"fork": False}


def test_the_switch_is_read_once_and_settles_the_limits(monkeypatch):
    monkeypatch.setenv(FORK_SWITCH, "0")
    assert forks_here() is False and Limits().settled().fork is False
    assert Limits(fork=True).settled().fork is True  # an explicit decision is kept
    monkeypatch.delenv(FORK_SWITCH)
    assert forks_here() is (sys.platform == "linux")


def quick(names: Sequence[str], table: dict, quick_ones: tuple[str, ...]) -> list:
    """The parameters of `table` named in `names`, by name; those not in `quick_ones` are left to `make test-all`
    (test_hostile.py runs each of them forked in `make test`; ci.yml all of them unforked on macOS and Windows)."""
    return [pytest.param(*table[name], id=name, marks=() if name in quick_ones else pytest.mark.slow) for name in names]


@pytest.mark.portable
@pytest.mark.parametrize(("statement", "status", "fragment"), quick(ENDS_ANY_PROCESS, BREAKING, ("os._exit",)))
def test_a_check_that_breaks_the_worker_costs_only_itself(statement, status, fragment, grade, tmp_path):
    """A fresh worker serves the checks after one that hangs or ends the worker."""
    package = write_variant(tmp_path, {"attention.py": attention_body_prefix(statement)})
    results = by_id(grade(package, "embed", "attention", "mlp", timeout=3, **UNFORKED))
    assert results["attention"].status == status
    assert fragment in results["attention"].message and "\n" not in results["attention"].message
    assert results["embed"].status == results["mlp"].status == "pass"


@pytest.mark.slow  # test_hostile's segfault, forked, runs in `make test`
@pytest.mark.skipif(sys.platform == "win32", reason="Windows has no signals to name")
def test_a_segfault_is_named(grade, tmp_path):
    package = write_variant(tmp_path, {"attention.py": attention_body_prefix("import ctypes; ctypes.string_at(0)")})
    results = by_id(grade(package, "attention", "mlp", **UNFORKED))
    assert results["attention"].status == "error" and "killed by SIGSEGV" in results["attention"].message
    assert results["mlp"].status == "pass"


@pytest.mark.portable
@pytest.mark.slow  # waits out its timeout; test_hostile's infinite loop, forked, runs in `make test`
def test_the_timeout_is_the_checks_own(grade, tmp_path, monkeypatch):
    """The grader kills the hung worker at the check's timeout, not after the grace period a fork server
    gets (made ten minutes here, so that waiting for it could not pass for a slow machine)."""
    from grader.host.runner import lanes

    monkeypatch.setattr(lanes, "GRACE", 600.0)
    package = write_variant(tmp_path, {"attention.py": attention_body_prefix("while True: pass")})
    started = time.monotonic()
    result = by_id(grade(package, "attention", timeout=2, **UNFORKED))["attention"]
    assert result.status == "timeout" and time.monotonic() - started < lanes.GRACE / 2  # the worker's start included


HOSTILE = {
    "tensor subclass": (
        "return normalized_resid_pre.as_subclass(type('Sneaky', (torch.Tensor,), {}))",
        "not a torch.Tensor",
    ),
    "integer dtype": ("return normalized_resid_pre.long()", "dtype int64"),
    "NaN": ("return torch.full_like(normalized_resid_pre, float('nan'))", "the first a NaN at index (0, 0, 0)"),
    "wrong device": ("return torch.empty_like(normalized_resid_pre, device='meta')", "expected cpu"),
    "not a tensor": ("return [normalized_resid_pre]", "returned a builtins.list"),
    "run-time transformers": ("from transformers import GPT2Model", "may not import transformers"),
    "solutions": ("import solutions.attention", "may not import solutions"),
}


@pytest.mark.parametrize(
    ("statement", "fragment"),
    quick(list(HOSTILE), HOSTILE, ("tensor subclass", "run-time transformers")),
)
def test_outputs_are_validated_and_reference_imports_refused(statement, fragment, grade, tmp_path):
    result = by_id(
        grade(write_variant(tmp_path, {"attention.py": attention_body_prefix(statement)}), "attention", **UNFORKED)
    )
    assert result["attention"].status == "fail" and fragment in result["attention"].message, result["attention"].message


def test_patched_comparisons_fool_nothing(grade, tmp_path):
    """The comparisons happen in the grader's process, whatever the learner's code patched in its own."""
    edits = [
        (
            "from .config import Config, normal_weight\n",
            "from .config import Config, normal_weight\n" + PATCH_EVERY_COMPARISON,
        )
    ]
    edits += attention_body_prefix("return torch.zeros_like(normalized_resid_pre)")
    results = by_id(grade(write_variant(tmp_path, {"attention.py": edits}), "attention", "mlp", **UNFORKED))
    assert results["attention"].status == "fail" and results["mlp"].status == "pass"


@pytest.mark.portable
@pytest.mark.slow  # the `grade` command; test_first_report's printed lines, forked, run in `make test`
def test_learner_output_never_reaches_the_answers_or_the_report(reference, tmp_path):
    """Unforked, the learner's code prints on the worker's stdout, which is no longer the answer channel."""
    forged = 'import os; print(\'PRINTED BY LEARNER\'); os.write(1, b\'{"ending": "crashed", "reason": "FORGED"}\\n\')'
    package = write_variant(
        tmp_path,
        {"embedding.py": [("        return self.W_E[tokens]", f"        {forged}\n        return self.W_E[tokens]")]},
    )
    result = run_grade("--reference", "random", "--exercises", str(package), "embed", env={FORK_SWITCH: "0"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PRINTED BY LEARNER" not in result.stdout + result.stderr and "FORGED" not in result.stdout


FORKED_HERE = "raise ValueError('TMPDIR=' + os.environ.get('TMPDIR', 'unset'))"  # a fork's TMPDIR is its scratch


@LINUX
@pytest.mark.parametrize(("switch", "forked"), [("0", False), pytest.param("1", True, marks=pytest.mark.slow)])
def test_grade_passes_the_switch_to_the_worker_and_says_sandbox_off(switch, forked, reference, tmp_path):
    edits = {"embedding.py": [("        return self.W_E[tokens]", f"        import os\n        {FORKED_HERE}")]}
    package = write_variant(tmp_path, edits)
    result = run_grade(
        "--reference", "random", "--exercises", str(package), "embed", env={FORK_SWITCH: switch, "COLUMNS": "1000"}
    )
    assert result.returncode == 1 and "TMPDIR=" in result.stdout, result.stdout
    assert ("check-" in result.stdout.split("TMPDIR=")[1].split()[0]) is forked
    off = f"sandbox: off ({FORK_SWITCH}=0: checks run without forks, in one unconfined process)"
    assert (off in result.stdout) is not forked


@LINUX
@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_verdicts_equal_the_fork_paths(name, grade, tmp_path_factory):
    forked = verdicts(grade, tmp_path_factory, name, fork=True)
    assert verdicts(grade, tmp_path_factory, name, **UNFORKED) == forked
    assert forked and expected_statuses(name, forked)
