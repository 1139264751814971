"""From what the learner's process sent back to a `CheckResult`: compare, then diagnose.

`judge` is a function of its evidence: each step returns what it found (`Compared`, `Diagnosis`,
`Verdict`, all frozen) and the `CheckResult` is built once from them."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace

from grader.checks import Check
from grader.host.course import page_path
from grader.host.dependencies import unfinished_import
from grader.host.diagnose import (
    Candidate,
    equal_step,
    expected_shape,
    first_divergence,
    matching_mistake,
    named_step,
    raised_on,
    where_said,
)
from grader.host.figures import difference
from grader.host.refcache import ReferenceData
from grader.host.results import CheckResult, CheckStatus, reference_name
from grader.host.runner import Outcome
from grader.host.weights_diagnosis import weights_mismatch
from grader.shared import wire
from grader.shared.compare import CaseComparison, allclose, modified_in_place

# The one table from how a check's process ended to the check's status, for every ending but `answered`, whose
# status its reply and outputs decide. A reply or outputs file that cannot be read is a crash (`Outcome`).
STATUS_OF_ENDING: dict[wire.Ending, CheckStatus] = {"timeout": "timeout", "crashed": "error", "memory": "error"}


@dataclass(frozen=True)
class Failure:
    case: str
    message: str
    output_wrong: bool  # False when the output is right but something else is not (an input modified in place)


@dataclass(frozen=True)
class Compared:
    """What comparing every case the learner's code completed found."""

    actual_shape: list[int] | None = None  # of the first case whose comparison knows the shapes
    expected_shape: list[int] | None = None
    max_abs_diff: float | None = None  # the reported failure's, else the largest over every case
    failure: Failure | None = None


@dataclass(frozen=True)
class Diagnosis:
    """Of a wrong output: the known mistake it matches and where it first leaves the reference."""

    hint: str | None = None
    divergence: str | None = None
    place: tuple[str, int] | None = None  # the learner's line that produced the first value that differs
    figures: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    status: CheckStatus
    message: str
    compared: Compared = Compared()  # nothing compared: the learner's process ended before answering
    diagnosis: Diagnosis = Diagnosis()
    notes: tuple[str, ...] = ()


class Evidence:
    """One check's outcome beside the reference's side of its cases, read once."""

    def __init__(self, check: Check, outcome: Outcome, reference: ReferenceData):
        self.check, self.outcome, self.reply = check, outcome, outcome.reply
        self.cases = {case.name: case for case in reference.cases(check.id)}
        self.expected = reference.expected(check.id)
        self.inputs = reference.inputs(check.id) if check.run.watch_inputs else {}
        self.reference_param_counts = reference.meta["param_counts"]
        self.prompt_tokens = reference.meta.get("prompt_tokens", [])
        self.small_model = reference.meta.get("small_model", {})  # its vocabulary's text, its lens case's tokens
        self.reference = reference
        self.reference_name = reference_name(reference.kind)
        # "GPT-2" is only ever the default; a check that compares with something else keeps its own words
        self.expected_from = self.reference_name if check.expected_from == "GPT-2" else check.expected_from

    def token_strings(self, ids) -> list[str]:
        """GPT-2's text of each token id (the reference's vocabulary, read only when a figure needs it)."""
        return [self._vocabulary[int(i)] for i in ids]

    @functools.cached_property
    def _vocabulary(self) -> list[str]:
        return self.reference.vocabulary()

    def output(self, case: str):
        return self.outcome.outputs[wire.OUTPUT.format(case=case)]

    def steps(self, case: str) -> list[tuple[str, object]]:
        return [(label, self.expected[wire.STEP.format(case=case, label=label)]) for label in self.cases[case].steps]

    def mistakes(self, case: str) -> list[tuple[str, object]]:
        return [
            (hint, self.expected[wire.MISTAKE.format(case=case, i=i)])
            for i, hint in enumerate(self.cases[case].mistakes)
        ]

    def captured(self, case: str) -> list:
        return [candidate.value for candidate in self.candidates(case)]

    def candidates(self, case: str) -> list[Candidate]:
        """The tensors the learner's process kept on this case, each with its name and line; a submodule's
        input and output go by its path below the module under check, as the steps do."""
        records = self.reply.captures.get(case, [])
        keys = ((r, wire.CAPTURE.format(case=case, i=r.saved)) for r in records if r.saved is not None)
        root, given, candidates = self.cases[case].weights or "", {}, []
        for r, key in keys:
            if key not in self.outcome.outputs:  # none when the case raised
                continue
            value, path = self.outcome.outputs[key], r.tag.removeprefix(root)
            if r.kind != "modules":
                candidates.append(Candidate(value, r.name, r.file, r.line))
            elif r.name == "input":  # recorded as the submodule is called, before its output
                given[r.tag] = value
                candidates.append(Candidate(value, f"{path} input", r.file, r.line))
            else:
                candidates.append(Candidate(value, path, r.file, r.line, given.pop(r.tag, None)))
        return candidates


def judge(evidence: Evidence) -> CheckResult:
    """The check's result, built once from the evidence: what its verdict says, where, and what to do next. Its
    figures are the diagnosis's; the HTML page's others are drawn only for it (`pipeline.Grading.with_figures`)."""
    check, outcome = evidence.check, evidence.outcome
    where = outcome.reply.where or outcome.reply.target_where
    ruling = verdict(evidence, where)
    compared, diagnosis = ruling.compared, ruling.diagnosis
    file, line = diagnosis.place or (
        (where.file if where else "") or f"{check.target.file}.py",
        where.line if where else None,
    )
    result = CheckResult(
        check.id,
        check.part,
        check.summary,
        ruling.status,
        check.points,
        ruling.message,
        max_abs_diff=compared.max_abs_diff,
        expected_shape=compared.expected_shape,
        actual_shape=compared.actual_shape,
        notes=[*ruling.notes, *run_notes(outcome)],
        file=file,
        line=line,
        seconds=round(outcome.seconds, 3),
        hint=diagnosis.hint,
        divergence=diagnosis.divergence,
        trace=trace_lines(evidence),
        target=unwritten(check, where) if ruling.status == "todo" else check.target.label,
        printed=list(outcome.printed),
        figures=diagnosis.figures,
        page=page_path(check),
    )
    return replace(result, next_step=next_step(check, result, evidence.expected_from, where))


def verdict(evidence: Evidence, where: wire.Place | None) -> Verdict:
    """The status and message, in the order the outcomes rule each other out: only a check whose
    every case was compared and right may pass."""
    check, outcome, reply = evidence.check, evidence.outcome, evidence.reply
    if outcome.ending != "answered":
        return Verdict(STATUS_OF_ENDING[outcome.ending], outcome.message)
    if reply.status == "forbidden":
        return Verdict("fail", reply.error + at(where))
    if reply.status == "weights" and reply.weights:
        said, hint = weights_mismatch(reply.weights, evidence.cases, evidence.mistakes, evidence.reference_name)
        return Verdict("fail", said, diagnosis=Diagnosis(hint))
    if unanswered := [name for name in reply.outputs if wire.OUTPUT.format(case=name) not in outcome.outputs]:
        return Verdict("error", f"the check's process gave no output for {unanswered[0]}")
    compared = compare_cases(evidence)
    failure = compared.failure
    unfinished = replace(compared, max_abs_diff=None)  # cases left uncompared: no one difference stands for them
    if reply.status == "todo":
        message = f"{unwritten(check, where)} is not implemented yet" + at(where, code=False)
        return Verdict("todo", message, unfinished)
    if failure:
        diagnosis = diagnose(evidence, failure.case) if failure.output_wrong else in_place_diagnosis(reply)
        return Verdict("fail", failure.message, compared, diagnosis)
    if reply.status == "error":
        hints = {name: case.hint for name, case in evidence.cases.items()}
        return Verdict("error", reply.error + at(where) + raised_on(hints, reply.outputs, reply.where), unfinished)
    if reply.bad_output:
        return Verdict(
            "fail", f"{check.target.label} {reply.bad_output.problem} (on {reply.bad_output.case})", unfinished
        )
    if reply.status != "ran" or len(reply.outputs) != len(evidence.cases):
        return Verdict("error", "the check's process did not complete every case", unfinished)
    return Verdict("pass", "", compared, notes=tuple(notes(evidence)))


def notes(evidence: Evidence) -> list[str]:
    """What the check says of a pass beyond "pass" (e.g. the parameter counts), from the facts it reads."""
    if not evidence.check.notes:
        return []
    outputs = {name: evidence.output(name) for name in evidence.reply.outputs}
    facts = {"param_counts": evidence.reply.param_counts, "outputs": outputs, "expected": evidence.expected}
    facts |= {"reference_param_counts": evidence.reference_param_counts, "reference": evidence.reference_name}
    return evidence.check.notes(facts)


def run_notes(outcome: Outcome) -> list[str]:
    """What the check's run says whatever its verdict: its device computed wrongly (graded on the CPU); it ran on the
    grader's Transformer, not "GPT-2's" (offline that holds random weights); each grader's part put in place of a
    learner's file that does not import (a Transformer said once)."""
    stand_in = outcome.reply.stand_in
    said = {"Transformer"} if stand_in else set()
    parts = [
        f"graded with the grader's {' and '.join(names)} in place of yours: {stood.said()}"
        for stood in outcome.reply.stood_in
        if (names := [name for name in stood.names if name not in said])
    ]
    said = "gives other logits, your parts included" if stand_in == "fails its own check" else stand_in  # not "its own"
    model = stand_in and f"graded on the grader's own Transformer: yours {said}"
    return [note for note in (outcome.device_fault, model, *parts) if note]


def compare_cases(evidence: Evidence) -> Compared:
    """Compare every case the learner's code completed; the failure to report, if any.

    A case with a hint (an input built to expose one mistake) names that mistake only when no
    ordinary case fails too. Once one fails, `max_abs_diff` is that case's, the number its message
    gives, not the largest over every case (see `reported_difference`).
    """
    check = evidence.check
    compare = check.comparison or allclose
    comparisons: dict[str, CaseComparison] = {
        name: compare(evidence.output(name), evidence.expected[name], check.tolerance)
        for name in evidence.reply.outputs
    }
    failures = [
        failure for name, comparison in comparisons.items() if (failure := case_failure(evidence, name, comparison))
    ]
    failure = reported_failure(evidence, failures)
    # The shapes of the first case whose comparison gives them (those of text and of beams do not).
    shaped = next((c for c in comparisons.values() if c.actual_shape is not None), CaseComparison(False, ""))
    max_abs_diff = reported_difference(comparisons, failure)
    return Compared(shaped.actual_shape, shaped.expected_shape, max_abs_diff, failure)


def reported_difference(comparisons: dict[str, CaseComparison], failure: Failure | None) -> float | None:
    """The table's max abs diff: of a pass, the largest over every case; of a failure, its case's where
    values differ. None where none do: the output is right (an input modified in place), or was never
    compared value by value (a shape, a NaN, which scores a mask hides)."""
    if failure is None:
        return largest(comparisons.values())
    difference = comparisons[failure.case].max_abs_diff
    return difference if failure.output_wrong and difference else None


def case_failure(evidence: Evidence, case: str, comparison: CaseComparison) -> Failure | None:
    if not comparison.ok:
        return Failure(case, f"differs from {evidence.expected_from} on {case}: {comparison.message}", True)
    if modified_input(evidence, case):
        message = (
            f"the output is right but {evidence.check.target.label} modified its input in place on {case} "
            "(use x = x + ..., not x += ...)"
        )
        return Failure(case, message, False)
    return None


def largest(comparisons: Iterable[CaseComparison]) -> float | None:
    """The largest difference a case reported (a NaN never wins), or None when none reported one."""
    known = [c.max_abs_diff for c in comparisons if c.max_abs_diff is not None]
    return max((diff for diff in known if not math.isnan(diff)), default=0.0) if known else None


def reported_failure(evidence: Evidence, failures: list[Failure]) -> Failure | None:
    """The failure the message tells of: the first ordinary one, else the first hinted one with its hint."""
    hinted = [f for f in failures if evidence.cases[f.case].hint]
    if failures and len(hinted) == len(failures):
        first = failures[0]
        return Failure(first.case, f"{first.message}; {evidence.cases[first.case].hint}", True)
    return next((f for f in failures if f not in hinted), None)


def modified_input(evidence: Evidence, case: str) -> bool:
    """Whether an input came back changed; only a check that watches its inputs has them (any other
    `arg_after` in the outputs is the learner's process's invention)."""
    outputs, inputs = evidence.outcome.outputs, evidence.inputs
    pairs = [
        (wire.ARG.format(case=case, i=i), wire.ARG_AFTER.format(case=case, i=i))
        for i in range(evidence.cases[case].args)
    ]
    return any(
        modified_in_place(inputs[before], outputs[after])
        for before, after in pairs
        if before in inputs and after in outputs
    )


IN_PLACE = "an argument is changed in place, so the caller's tensor changes too: write x = x + ..., not x += ..."


def in_place_diagnosis(reply: wire.Reply) -> Diagnosis:
    """A right output whose input came back changed: the line that changed it, where the learner's process found
    one (an argument updated in place before any rebinding of its name), named as the mistake it is."""
    place = reply.in_place
    if not (place and place.line):
        return Diagnosis()
    said = f"{place.code or 'this line'} changes an argument in place ({place.file}:{place.line})"
    return Diagnosis(IN_PLACE, said, (place.file, place.line))


def diagnose(evidence: Evidence, case: str) -> Diagnosis:
    """The known mistake the output matches, and where the computation first leaves the reference's:
    the line of the learner's code that produced the first value that differs, when it is known."""
    check = evidence.check
    actual, expected = evidence.output(case), evidence.expected[case]
    answered = [name for name in evidence.cases if wire.OUTPUT.format(case=name) in evidence.outcome.outputs]
    elsewhere = [(evidence.output(name), dict(evidence.mistakes(name))) for name in answered]
    hint = matching_mistake(actual, evidence.mistakes(case), check.tolerance, check.comparison, expected, elsewhere)
    own_file, candidates = f"{check.target.file}.py", evidence.candidates(case)  # a sublayer's lines: its own check's
    divergence = first_divergence(evidence.steps(case), candidates, check.tolerance, evidence.expected_from, own_file)
    place = (divergence.file, divergence.line) if divergence and divergence.line else method_of(hint, evidence)
    said = where_said(divergence, actual, candidates, own_file)
    return Diagnosis(hint, said, place, difference(evidence, case))


def method_of(hint: str | None, evidence: Evidence) -> tuple[str, int] | None:
    """Where the learner defined the function a named mistake begins with (`CachedAttention.forward's mask ...`,
    `CachedTransformerSampler.sample passes ...`)."""
    for place in evidence.outcome.reply.methods if hint else ():
        if place.function and place.line and hint.split()[0] in (place.function, f"{place.function}'s"):
            return place.file, place.line
    return None


def trace_lines(evidence: Evidence) -> list[dict]:
    """Every tensor the learner's code named on the first case, and what it returned, with GPT-2's shape where known."""
    captures = evidence.reply.captures
    case = next(iter(evidence.cases), None)
    if not evidence.outcome.traced or case not in captures:
        return []
    steps = dict(evidence.steps(case))
    shapes = {label: list(value.shape) for label, value in steps.items()}
    shapes.setdefault("output", list(evidence.expected[case].shape))
    parameters = [{**asdict(p), "expected_shape": None} for p in evidence.reply.parameters]
    locals_ = [
        {"tag": r.tag, "name": r.name, "shape": r.shape, "expected_shape": expected_shape(r.name, shapes)}
        | step_equality(r, case, steps, evidence)
        for r in captures[case]
        if r.kind == "locals" or r.name == "return"  # the target's own return: Embed's has no name
    ]
    return parameters + locals_


def step_equality(record: wire.Record, case: str, steps: dict, evidence: Evidence) -> dict:
    """For --trace, where the check kept the tensor's values: the reference's step it equals, else the step its name
    names, which it then differs from."""
    value = evidence.outcome.outputs.get(wire.CAPTURE.format(case=case, i=record.saved))  # none where not saved
    if value is None:
        return {}
    equal = equal_step(value, steps, evidence.check.tolerance)
    return {"equals": equal, "named": None if equal else named_step(record.name, steps)}


def next_step(check: Check, result: CheckResult, expected_from: str, where: wire.Place | None = None) -> str:
    place = f"{result.file}:{result.line}" if result.line else result.file
    if result.status == "todo":
        return f"implement {unwritten(check, where)} ({place})"
    if unfinished_import(result):
        return f"look for a loop that never ends in what {result.file} runs as it is imported ({place})"
    if result.status == "timeout":
        return f"look for a loop that never ends in {check.target.label} ({place}); --timeout allows more time"
    if result.status == "error":
        return f"fix the exception at {place}"
    if result.status != "fail":
        return ""
    if result.hint:
        return f"most likely: {result.hint}"
    if check.target.driver:  # a driver calls the learner's code without the recorder: --trace shows nothing
        return f"compare {check.target.label} ({place}) with its docstring; the message says what differs"
    shapes = "the trace gives" if result.trace else f"grade {check.id} --trace prints"  # not again where it ran
    said = f"compare each step of {check.target.label} ({place}) with what {expected_from} computes"
    return f"{said}: {shapes} every tensor's shape"


def unwritten(check: Check, where: wire.Place | None) -> str:
    """The function a todo is about: the one that raised NotImplementedError, else the check's target."""
    return (where.function if where else "") or check.target.label


def at(where: wire.Place | None, code: bool = True) -> str:
    """ " (file.py:12: the line)", or "" when the place is unknown."""
    line = f": {where.code}" if where and code and where.code else ""
    return f" ({where.file}:{where.line}{line})" if where else ""
