"""A check whose parts fail their own checks says so first: one mistake is fixed where it is made.

Each check declares the checks of the parts its target calls (`Check.uses`; attention uses the causal mask, the
whole model uses the block, ...). Once every result of a run is known, a check that failed says first, in its
message, which of those parts fail ("your Attention fails its own check: fix attention first"), and its next step
is to fix them unless it names a mistake of its own; a check that passed anyway says so in a note. Only the parts
where the failures start are named: when the mask fails and so attention does, the whole model names the mask.
A check whose own code raised (its own file does not import, say) tells its own error first, and the failing
parts in a note; a part stopped by that same error is not named at all. A pure step over results: nothing is re-run.

A failing check whose parts the grader has its own of (`wire.StandInPart`: the model's modules, the mask, gelu_new)
is graded again with the grader's in place of each that fails its own check (`to_stand_in`; the grading's second
pass, grader.host.pipeline): its result is then that pass's, with a note naming them (`stood_in_note`), and those
parts are not named again.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import get_args

from grader.checks import Check, registry
from grader.host.results import CheckResult
from grader.shared.wire import StandInPart

BLAMED = ("fail", "error", "timeout")  # a check that is only todo says what to write next already
UNCOMPILED = ("SyntaxError", "IndentationError", "TabError")  # errors of a file that never ran (wire's "Type: text")
UNFINISHED = re.compile(r"\S+\.py does not finish importing( \(line \d+ when stopped\))?")  # wire.StoodIn.said


def used_by(check_id: str, graph: dict[str, Check]) -> set[str]:
    """Every check whose part `check_id`'s target calls, directly or through another part."""
    found: set[str] = set()
    waiting = list(graph[check_id].uses) if check_id in graph else []
    while waiting:
        part = waiting.pop()
        if part not in found:
            found.add(part)
            waiting += graph[part].uses if part in graph else ()
    return found


def first_failures(check_id: str, results: dict[str, CheckResult], graph: dict[str, Check]) -> list[CheckResult]:
    """The failing parts of this check that fail on their own: none of the parts they use fails too."""

    def failing(part: str) -> bool:
        return part in results and results[part].status != "pass"

    parts = [part for part in used_by(check_id, graph) if failing(part)]
    roots = [part for part in parts if not any(failing(inner) for inner in used_by(part, graph))]
    return [results[part] for part in graph if part in roots]  # in course order


def part_name(check: Check) -> str:
    """What the learner wrote for that check: `Attention`, `Attention.apply_causal_mask`, `gelu_new`."""
    return check.target.label if check.target.method not in (None, "forward") else check.target.name


def stand_in_part(check: Check) -> str:
    """The part as the learner's process names it for the grader's own (wire.StandInPart): `mlp.gelu_new`."""
    return f"{check.target.file}.{part_name(check)}"


def to_stand_in(result: CheckResult, results: dict[str, CheckResult], graph: dict[str, Check]) -> list[str]:
    """The parts of a failing check that fail their own checks (as `results` holds them) and that the grader has its
    own of, in course order; none where it passes, where they fail by the check's own error, or where their file did
    not import (the grader's own stood in for them already, in this pass)."""
    if result.status not in BLAMED:
        return []
    return [
        part
        for part in graph
        if part in used_by(result.id, graph)
        and part in results
        and results[part].status in BLAMED
        and stand_in_part(graph[part]) in get_args(StandInPart)
        and not stopped_by(results[part], result, graph)
        and part not in result.stood_in  # its file did not import: the grader's stood in for it already
    ]


def replaced(parts: Sequence[str], graph: dict[str, Check]) -> list[str]:
    """The parts the grader's own replace: a method is left out where its class is replaced too (the mask, where the
    whole Attention is the grader's)."""
    classes = tuple(stand_in_part(graph[part]) + "." for part in parts)
    return [part for part in parts if not stand_in_part(graph[part]).startswith(classes)]


def stood_in_note(parts: Sequence[str], graph: dict[str, Check]) -> str:
    """ "graded with the grader's LayerNorm in place of yours, which fails layernorm" """
    names, ids = " and ".join(part_name(graph[part]) for part in parts), " and ".join(parts)
    return f"graded with the grader's {names} in place of yours, which {'fail' if len(parts) > 1 else 'fails'} {ids}"


def state(result: CheckResult, graph: dict[str, Check]) -> str:
    if unfinished_import(result):
        return result.message
    verb = "is not implemented yet" if result.status == "todo" else "fails its own check"
    return f"your {part_name(graph[result.id])} {verb}"


def to_fix(result: CheckResult) -> str:
    """What to fix for a failing part: its check, or its file where that does not finish importing."""
    return result.file if unfinished_import(result) else result.id


def unfinished_import(result: CheckResult) -> bool:
    """Whether the check did not run, its file not finishing importing (`runner.preflight`)."""
    return result.status == "timeout" and UNFINISHED.fullmatch(result.message) is not None


def with_failing_parts(
    results: Sequence[CheckResult],
    checks: Sequence[Check] | None = None,
    among: dict[str, CheckResult] | None = None,
) -> list[CheckResult]:
    """The results, each check whose parts fail naming them first (see the module's docstring); its parts' results
    looked up `among` those of the run, where it holds more than `results` (a run's checks judged so far)."""
    graph = {check.id: check for check in (registry() if checks is None else checks)}
    by_id = {result.id: result for result in results} if among is None else among
    return [blamed(result, first_failures(result.id, by_id, graph), graph) for result in results]


def raised_in_own_file(result: CheckResult, graph: dict[str, Check]) -> bool:
    """Whether the check's error is at a line of its own exercise file: its own code raised, or does not import."""
    return result.error_place is not None and result.file == f"{graph[result.id].target.file}.py"


def stopped_by(part: CheckResult, result: CheckResult, graph: dict[str, Check]) -> bool:
    """Whether the part failed only by the check's own error: at the same line, one that is not the part's own
    code (its package does not import) or never ran (a syntax error). A part's code raising there is the cause."""
    if unfinished_import(part):  # the same file's hang
        return part.message == result.message
    same = part.error_place is not None and part.error_place == result.error_place
    return same and (not raised_in_own_file(part, graph) or result.message.startswith(UNCOMPILED))


def blamed(result: CheckResult, parts: list[CheckResult], graph: dict[str, Check]) -> CheckResult:
    parts = [part for part in parts if not stopped_by(part, result, graph) and part.id not in result.stood_in]
    if not parts:
        return result
    states = " and ".join(dict.fromkeys(state(part, graph) for part in parts))
    fixes = list(dict.fromkeys(to_fix(part) for part in parts))
    ids = " and ".join(fixes)
    if result.status == "pass":
        return dataclasses.replace(result, notes=[*result.notes, f"passes, though {states}: fix {ids} too"])
    if raised_in_own_file(result, graph) and all(part.error_place != result.error_place for part in parts):
        return dataclasses.replace(result, notes=[*result.notes, f"{states}: fix {ids} too"])  # its own error first
    if result.status not in BLAMED:
        return result
    # A named mistake is still the next step; else the part's own check says what is wrong there.
    fix_first = f"fix {ids} first (grade {' '.join(fixes)}), then grade {result.id} again"
    return dataclasses.replace(
        result,
        message=f"{states}: fix {ids} first; {result.message}",
        next_step=result.next_step if result.hint else fix_first,
    )
