"""From what the learner's process sent back to a `CheckResult`: the compare stage of the pipeline."""

from __future__ import annotations

from .checks import Check
from .compare import CaseComparison, allclose, modified_in_place
from .refcache import ReferenceData
from .results import CheckResult
from .runner import Outcome


def judge(check: Check, outcome: Outcome, reference: ReferenceData) -> CheckResult:
    result = CheckResult(check.id, check.part, check.summary, "pass", check.points, seconds=round(outcome.seconds, 3))
    reply = outcome.reply
    where = reply.get("where") or reply.get("target_where") or {}
    result.file, result.line = where.get("file") or f"{check.target.file}.py", where.get("line")
    if outcome.status in ("timeout", "crashed"):
        return _set(result, "timeout" if outcome.status == "timeout" else "error", reply["error"])
    if outcome.status == "forbidden":
        return _set(result, "fail", reply["error"] + at(where))
    if outcome.status == "weights":
        return _set(result, "fail", weights_message(reply["weights"]))
    failure = first_failing_case(check, outcome, reference, result)
    if outcome.status == "todo":
        return _set(result, "todo", f"{check.target.label} is not implemented yet" + at(where, code=False))
    if failure:
        return _set(result, "fail", failure)
    if outcome.status == "error":
        return _set(result, "error", reply["error"] + at(where))
    if "bad_output" in reply:
        bad = reply["bad_output"]
        return _set(result, "fail", f"{check.target.label} {bad['problem']} on {bad['case']}")
    if check.notes:
        result.notes = check.notes({**reply, "outputs": _case_outputs(outcome), "expected": reference.expected(check.id), "reference_param_counts": reference.meta["param_counts"]})
    return result


def first_failing_case(check: Check, outcome: Outcome, reference: ReferenceData, result: CheckResult) -> str | None:
    """Compare every case the learner's code completed; describe the first that fails.

    A case with a hint (an input built to expose one mistake) names that mistake only when no
    ordinary case fails too.
    """
    if not outcome.outputs:
        return None
    expected = reference.expected(check.id)
    inputs = reference.inputs(check.id) if check.watch_inputs else {}
    compare = check.comparison or allclose
    cases = {case["name"]: case for case in reference.cases(check.id)}
    failures = []
    for name in outcome.reply["outputs"]:
        comparison: CaseComparison = compare(outcome.outputs[f"{name}/out"], expected[name], check.tolerance)
        if result.actual_shape is None:
            result.actual_shape, result.expected_shape = comparison.actual_shape, comparison.expected_shape
        if comparison.max_abs_diff is not None:
            result.max_abs_diff = max(result.max_abs_diff or 0.0, comparison.max_abs_diff)
        if not comparison.ok:
            failures.append((name, comparison.message))
        elif any(modified_in_place(inputs[f"{name}/arg{i}"], outcome.outputs[f"{name}/arg{i}_after"]) for i in range(cases[name]["args"]) if f"{name}/arg{i}_after" in outcome.outputs):
            failures.append((name, f"the output is right but {check.target.label} modified its input in place (use x = x + ..., not x += ...)"))
    if not failures:
        return None
    if all(cases[name]["hint"] for name, _ in failures):
        name, message = failures[0]
        return f"differs from GPT-2 on {name}: {message}; {cases[name]['hint']}"
    name, message = next((n, m) for n, m in failures if not cases[n]["hint"])
    return message if "in place" in message else f"differs from GPT-2 on {name}: {message}"


def weights_message(facts: dict) -> str:
    parts = []
    for name in facts["missing"]:
        suggestion = facts["suggestions"].get(name)
        parts.append(f"parameter {name} is not in GPT-2's weights" + (f" (GPT-2 calls it {suggestion[0]})" if suggestion else "") + " and would keep its random initial value")
    for name, (own, theirs) in facts["misshapen"].items():
        parts.append(f"parameter {name} has shape {tuple(own)}, GPT-2's has {tuple(theirs)}")
    return "; ".join(parts)


def at(where: dict, code: bool = True) -> str:
    """" (file.py:12: the line)", or "" when the place is unknown."""
    if not where:
        return ""
    line = f": {where['code']}" if code and where.get("code") else ""
    return f" ({where['file']}:{where['line']}{line})"


def _case_outputs(outcome: Outcome) -> dict:
    return {key[: -len("/out")]: value for key, value in outcome.outputs.items() if key.endswith("/out")}


def _set(result: CheckResult, status: str, message: str) -> CheckResult:
    result.status, result.message = status, message
    return result
