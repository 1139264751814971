"""grader.host.verdict.judge on hand-built outcomes: no reference build, no learner process.

The reference side is a small stand-in with the few methods the verdict reads (the cases, the
expected tensors, the inputs and the meta of one check), so each test states its arrays in full.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace
from typing import get_args

import numpy as np
import pytest

from grader.checks import Check, Run, Target
from grader.host.results import STATUSES
from grader.host.runner import Outcome
from grader.host.verdict import STATUS_OF_ENDING, Evidence, judge, largest, verdict
from grader.shared import wire
from grader.shared.compare import CaseComparison, allclose, causal_mask
from grader.shared.types import Tolerance

pytestmark = pytest.mark.unit

X = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
CHECK = Check(
    id="toy.double",
    points=2,
    target=Target("toy", "double", method=None),
    summary="doubles its input",
    cases=lambda ref: [],
    tolerance=Tolerance(atol=1e-4, rtol=1e-4),
    page="01-the-model.md",
)


class StandInReference:
    """What `judge` reads of a reference cache entry, held in memory."""

    def __init__(self, cases: list[wire.CaseSpec], expected: dict, inputs: dict | None = None, kind: str = "gpt2"):
        self.kind, self._cases, self._expected, self._inputs = kind, cases, expected, inputs or {}
        self.meta = {"param_counts": {"total": 124}, "prompt_tokens": []}

    def cases(self, check_id: str) -> list[wire.CaseSpec]:
        return self._cases

    def expected(self, check_id: str) -> dict:
        return self._expected

    def inputs(self, check_id: str) -> dict:
        return self._inputs

    def vocabulary(self) -> list[str]:
        return []


def case(name: str = "small", hint: str = "", steps: tuple[str, ...] = (), mistakes: tuple[str, ...] = ()):
    return wire.CaseSpec(name, 1, None, [], hint=hint, steps=list(steps), mistakes=list(mistakes))


ONE_CASE = StandInReference([case()], {"small": 2 * X})


def ran(outputs: dict, cases: tuple[str, ...] = ("small",), **reply) -> Outcome:
    return Outcome("answered", wire.Reply("ran", outputs=list(cases), **reply), outputs, seconds=0.12345)


def test_a_right_output_passes():
    result = judge(Evidence(CHECK, ran({"small/out": 2 * X}), ONE_CASE))
    assert (result.status, result.message, result.score) == ("pass", "", 2)
    assert result.max_abs_diff == 0.0
    assert (result.actual_shape, result.expected_shape) == ([2, 3], [2, 3])
    assert (result.file, result.line, result.target, result.seconds) == ("toy.py", None, "double", 0.123)
    assert result.next_step == "" and result.hint is None and result.divergence is None


def test_a_wrong_output_fails_with_the_difference():
    result = judge(Evidence(CHECK, ran({"small/out": 2 * X + np.array([0.0, 0.0, 0.5])}), ONE_CASE))
    assert result.status == "fail" and result.score == 0
    assert result.message == (
        "differs from GPT-2 on small: max abs diff 0.5 at index (0, 2); 66.7% of values within tolerance"
    )
    assert result.max_abs_diff == 0.5
    assert result.next_step == (
        "compare each step of double (toy.py) with what GPT-2 computes:"
        " grade toy.double --trace prints every tensor's shape"
    )


def test_against_the_random_model_messages_never_say_gpt2():
    reference = StandInReference([case()], {"small": 2 * X}, kind="random")
    result = judge(Evidence(CHECK, ran({"small/out": X}), reference))
    assert result.message.startswith("differs from the random reference on small: max abs diff 6 at index (1, 2);")


def test_a_known_mistake_is_named():
    reference = StandInReference(
        [case(mistakes=("multiplied by 3, not 2", "added 2, not multiplied"))],
        {"small": 2 * X, "small/mistake/0": 3 * X, "small/mistake/1": X + 2},
    )
    result = judge(Evidence(CHECK, ran({"small/out": X + 2}), reference))
    assert result.status == "fail"
    assert result.hint == "added 2, not multiplied"
    assert result.next_step == "most likely: added 2, not multiplied"


def test_the_first_step_that_leaves_the_reference_is_named_with_its_line():
    reference = StandInReference(
        [case(steps=("scaled", "shifted"))],
        {"small": 2 * X + 1, "small/step/scaled": 2 * X, "small/step/shifted": 2 * X + 1},
    )
    captures = {
        "small": [
            wire.Record("locals", "double", "y", [2, 3], 0, "toy.py", 3),
            wire.Record("locals", "double", "z", [2, 3], 1, "toy.py", 4),
        ]
    }
    outputs = {"small/out": 2 * X + 5, "small/capture/0": 2 * X, "small/capture/1": 2 * X + 5}
    result = judge(Evidence(CHECK, ran(outputs, captures=captures), reference))
    assert result.status == "fail"
    assert result.divergence == "scaled matches GPT-2; shifted is the first step that does not (toy.py:4)"
    assert (result.file, result.line) == ("toy.py", 4)


def test_a_hinted_case_names_its_hint_only_when_it_alone_fails():
    reference = StandInReference(
        [case("plain"), case("negative", hint="negative inputs: check the sign")],
        {"plain": 2 * X, "negative": -2 * X},
    )
    hinted_alone = judge(
        Evidence(CHECK, ran({"plain/out": 2 * X, "negative/out": 2 * X}, ("plain", "negative")), reference)
    )
    assert hinted_alone.message == (
        "differs from GPT-2 on negative: max abs diff 24 at index (1, 2); 0.0% of values within tolerance;"
        " negative inputs: check the sign"
    )
    both = judge(Evidence(CHECK, ran({"plain/out": X, "negative/out": 2 * X}, ("plain", "negative")), reference))
    assert both.message == (
        "differs from GPT-2 on plain: max abs diff 6 at index (1, 2); 0.0% of values within tolerance"
    )
    assert both.max_abs_diff == 6.0  # the reported case's, not the larger one of "negative"


def test_an_input_modified_in_place_fails_though_the_output_is_right():
    watching = replace(CHECK, run=Run(watch_inputs=True))
    reference = StandInReference([case()], {"small": 2 * X}, inputs={"small/arg0": X})
    result = judge(Evidence(watching, ran({"small/out": 2 * X, "small/arg0_after": 2 * X}), reference))
    assert result.status == "fail"
    assert result.message == (
        "the output is right but double modified its input in place on small (use x = x + ..., not x += ...)"
    )
    assert result.hint is None and result.divergence is None  # the learner's process found no line that did it
    assert (
        judge(Evidence(watching, ran({"small/out": 2 * X, "small/arg0_after": X.copy()}), reference)).status == "pass"
    )
    in_place = wire.Place("toy.py", 7, "x *= 2", "double")
    pointed = judge(
        Evidence(watching, ran({"small/out": 2 * X, "small/arg0_after": 2 * X}, in_place=in_place), reference)
    )
    assert (pointed.file, pointed.line, pointed.divergence) == (
        "toy.py",
        7,
        "x *= 2 changes an argument in place (toy.py:7)",
    )
    assert pointed.next_step.startswith("most likely: an argument is changed in place")


def test_an_unwritten_target_is_todo():
    result = judge(Evidence(CHECK, Outcome("answered", wire.Reply("todo", error="NotImplementedError")), ONE_CASE))
    assert (result.status, result.message) == ("todo", "double is not implemented yet")
    assert result.next_step == "implement double (toy.py)"


def test_an_exception_is_an_error_at_the_learners_line():
    where = wire.Place("toy.py", 3, "return x * y")
    outcome = Outcome("answered", wire.Reply("error", error="NameError: name 'y' is not defined", where=where))
    result = judge(Evidence(CHECK, outcome, ONE_CASE))
    assert (result.status, result.file, result.line) == ("error", "toy.py", 3)
    assert result.message == "NameError: name 'y' is not defined (toy.py:3: return x * y)"
    assert result.next_step == "fix the exception at toy.py:3"


@pytest.mark.parametrize(("ending", "status"), [("timeout", "timeout"), ("crashed", "error"), ("memory", "error")])
def test_the_processs_end_decides_timeout_and_crash(ending, status):
    result = judge(Evidence(CHECK, Outcome(ending, error="the check took longer than 60 s"), ONE_CASE))
    assert (result.status, result.message) == (status, "the check took longer than 60 s")


def test_every_ending_but_answered_has_its_status_in_the_one_table():
    assert set(STATUS_OF_ENDING) == set(get_args(wire.Ending)) - {"answered"}
    assert set(STATUS_OF_ENDING.values()) <= set(STATUSES)


def test_a_missing_output_is_the_checks_error():
    result = judge(Evidence(CHECK, ran({}), ONE_CASE))
    assert (result.status, result.message) == ("error", "the check's process gave no output for small")


def test_weights_that_do_not_fit_are_listed():
    facts = wire.WeightFacts(
        missing=["W_in"], unexpected=[], misshapen={"b": [[3], [4]]}, suggestions={"W_in": ["W_E"]}
    )
    result = judge(Evidence(CHECK, Outcome("answered", wire.Reply("weights", weights=facts)), ONE_CASE))
    assert result.status == "fail"
    assert result.message == (
        "parameter W_in is not in GPT-2's weights (GPT-2 calls it W_E) and would keep its random initial value;"
        " parameter b has shape (3,), GPT-2's has (4,)"
    )


def test_notes_are_added_to_a_pass():
    def notes(facts: dict) -> list[str]:
        return [f"{facts['param_counts']['total']} of {facts['reference_param_counts']['total']} parameters"]

    result = judge(
        Evidence(replace(CHECK, notes=notes), ran({"small/out": 2 * X}, param_counts={"total": 7}), ONE_CASE)
    )
    assert result.status == "pass" and result.notes == ["7 of 124 parameters"]


# --- judge as a function of its evidence --------------------------------------------------------


def test_the_verdict_is_frozen_and_the_same_evidence_gives_the_same_result():
    outcome = ran({"small/out": 2 * X + 1})
    ruling = verdict(Evidence(CHECK, outcome, ONE_CASE), None)
    assert (ruling.status, ruling.compared.max_abs_diff, ruling.compared.failure.case) == ("fail", 1.0, "small")
    with pytest.raises(FrozenInstanceError):
        ruling.status = "pass"
    assert judge(Evidence(CHECK, outcome, ONE_CASE)) == judge(Evidence(CHECK, outcome, ONE_CASE))
    assert outcome.outputs["small/out"][0, 0] == 3.0  # the evidence is read, never changed


def test_a_pass_reports_the_largest_difference_over_every_case():
    reference = StandInReference([case("a"), case("b")], {"a": 2 * X, "b": 2 * X})
    result = judge(Evidence(CHECK, ran({"a/out": 2 * X + 1e-5, "b/out": 2 * X + 3e-5}, ("a", "b")), reference))
    assert result.status == "pass" and result.max_abs_diff == pytest.approx(3e-5)


def test_the_shapes_are_those_of_the_first_case_whose_comparison_gives_them():
    def shapeless_for_scalars(actual, expected, tolerance):
        return allclose(actual, expected, tolerance) if actual.ndim else CaseComparison(True, "", 0.0)

    reference = StandInReference([case("scalar"), case("small")], {"scalar": np.array(1.0), "small": 2 * X})
    outputs = {"scalar/out": np.array(1.0), "small/out": 2 * X}
    result = judge(
        Evidence(replace(CHECK, comparison=shapeless_for_scalars), ran(outputs, ("scalar", "small")), reference)
    )
    assert (result.status, result.actual_shape, result.expected_shape) == ("pass", [2, 3], [2, 3])


def test_a_todo_keeps_its_completed_cases_shapes_but_no_difference():
    """No one number stands for cases never compared: the table's max abs diff is the message's or none."""
    reply = wire.Reply("todo", outputs=["small"], error="NotImplementedError")
    result = judge(Evidence(CHECK, Outcome("answered", reply, {"small/out": X}), ONE_CASE))
    assert (result.status, result.max_abs_diff, result.actual_shape) == ("todo", None, [2, 3])
    assert result.hint is None and result.divergence is None


# --- the max abs diff: a magnitude, and only where values were compared and differ ----------------

TWO_CASES = StandInReference([case("a"), case("b")], {"a": 2 * X, "b": 2 * X})


def test_an_error_after_right_cases_shows_no_difference():
    """A PosEmbed that takes no offset matches on the first cases, then raises: not 0.00e+00 beside ERROR."""
    reply = wire.Reply("error", outputs=["a"], error="TypeError: forward() got an unexpected keyword argument")
    result = judge(Evidence(CHECK, Outcome("answered", reply, {"a/out": 2 * X}), TWO_CASES))
    assert (result.status, result.max_abs_diff) == ("error", None)


def test_a_bad_output_after_right_cases_shows_no_difference():
    reply = wire.Reply("ran", outputs=["a"], bad_output=wire.BadOutput("b", "returned None: is its `return` missing?"))
    result = judge(Evidence(CHECK, Outcome("answered", reply, {"a/out": 2 * X}), TWO_CASES))
    assert (result.status, result.max_abs_diff) == ("fail", None)
    assert result.message == "double returned None: is its `return` missing? (on b)"


@pytest.mark.parametrize(
    "output",
    [X.T, np.full_like(X, np.nan)],
    ids=["shape mismatch", "non-finite output"],
)
def test_a_failure_not_compared_value_by_value_has_no_difference(output):
    result = judge(Evidence(CHECK, ran({"small/out": output}), ONE_CASE))
    assert (result.status, result.max_abs_diff) == ("fail", None)


def test_a_mask_that_hides_the_wrong_scores_has_no_difference():
    """Which scores are masked is wrong; the visible ones it compares agree: 0.0 would say nothing differs."""
    scores = np.array([[1.0, -np.inf], [2.0, 3.0]])
    masking = replace(CHECK, comparison=causal_mask)
    reference = StandInReference([case()], {"small": scores})
    leaked = judge(Evidence(masking, ran({"small/out": np.array([[1.0, 5.0], [2.0, 3.0]])}), reference))
    assert leaked.status == "fail" and "not masked" in leaked.message and leaked.max_abs_diff is None
    changed = judge(Evidence(masking, ran({"small/out": np.array([[1.0, -np.inf], [2.0, 3.5]])}), reference))
    assert changed.message.endswith("max abs diff 0.5") and changed.max_abs_diff == 0.5


def test_an_input_modified_in_place_shows_no_difference():
    watching = replace(CHECK, run=Run(watch_inputs=True))
    reference = StandInReference([case()], {"small": 2 * X}, inputs={"small/arg0": X})
    result = judge(Evidence(watching, ran({"small/out": 2 * X, "small/arg0_after": 2 * X}), reference))
    assert (result.status, result.max_abs_diff) == ("fail", None)


def test_a_nan_difference_is_never_the_largest():
    assert largest([CaseComparison(True, "", float("nan")), CaseComparison(True, "", 0.5), CaseComparison(True)]) == 0.5
    assert largest([CaseComparison(True, "", float("nan"))]) == 0.0
    assert largest([CaseComparison(True)]) is None
