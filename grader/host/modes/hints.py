"""`grade CHECK --hint`: the next hint for the first failing check of the selection, one level deeper each time.

1. the idea: what the check's exercise computes and why, from its course page;
2. where: the diagnosis the report computes (the message, the first step that differs, the named mistake);
3. the step, shape by shape: the reference's steps up to the one that differs, each with the learner's tensor
   that matches it, then a few of that step's numbers, the reference's beside the learner's.

The level reached is remembered per check in `.grade-hints.json`, beside the learner's package (git ignores it); a
check that passes is forgotten there. Nothing here reads the solutions: a hint says what the course pages and the
report say, and numbers.
"""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.markdown import Markdown

from grader.host.course import page_of
from grader.host.diagnose import (
    Candidate,
    first_divergence,
    matches_step,
    names_step,
    shaped_like,
    without_unit_axes,
)
from grader.host.modes.show import differences, shape_text
from grader.host.results import CheckResult, Report
from grader.host.verdict import Evidence, compare_cases
from grader.shared.paths import REPO_ROOT, write_replacing

STATE_FILE = ".grade-hints.json"
LEVELS = 3
SHOWN_VALUES = 5  # of the step that differs, along its last axis
WIDTH = 100  # of a course page's paragraph, rewrapped


def hint(report: Report, evidences: dict[str, Evidence], package: Path) -> int:
    """Print the next hint of the first failing check (none when every check passes); the exit code, as grade's."""
    path = package.parent / STATE_FILE
    remembered, problem = read_levels(path)
    if problem:
        say(problem)
    levels = {check_id: level for check_id, level in remembered.items() if not passes(report, check_id)}
    failing = next((result for result in report.checks if result.status != "pass"), None)
    if failing is None:
        print(f"every selected check passes ({len(report.checks)} of {len(report.checks)}): no hint to give")
    else:
        level = min(levels.get(failing.id, 0) + 1, LEVELS)
        levels[failing.id] = level
        print("\n".join(hint_lines(level, failing, evidences[failing.id])))
    if levels != remembered or problem:  # a passing package leaves no file behind
        problem = write_levels(path, levels)
        if problem:
            say(problem)
    return 0 if failing is None else 1


def stages(checks: list, package: Path) -> list[list]:
    """The selected checks in the order --hint grades them: up to the first check a hint was given for and still
    remembered (any earlier check that fails now comes first anyway), then the rest, only if those all pass. A
    learner asking again for the next hint waits for those checks, not for every check after them."""
    remembered, _ = read_levels(package.parent / STATE_FILE)
    ids = [check.id for check in checks]
    first = next((index for index, check_id in enumerate(ids) if check_id in remembered), None)
    if first is None or first == len(ids) - 1:
        return [checks]
    return [checks[: first + 1], checks[first + 1 :]]


def passes(report: Report, check_id: str) -> bool:
    return any(result.id == check_id and result.status == "pass" for result in report.checks)


def say(problem: str) -> None:
    import sys

    print(f"grade: {problem}", file=sys.stderr)


# --- the state file -----------------------------------------------------------------------------------------


def read_levels(path: Path) -> tuple[dict[str, int], str | None]:
    """The level reached per check, and a one-line note when the file was there but unreadable (it starts over)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError):
        data = None
    levels = data.get("levels") if isinstance(data, dict) else None
    if not isinstance(levels, dict) or not all(valid_level(key, value) for key, value in levels.items()):
        return {}, f"{path.name} held no record of hints (corrupt?): it is reset, and the hints start over"
    return levels, None


def valid_level(check_id, level) -> bool:
    return isinstance(check_id, str) and type(level) is int and 1 <= level <= LEVELS


def write_levels(path: Path, levels: dict[str, int]) -> str | None:
    """Write the levels (a whole file, or none: a reader never sees half of one); a one-line note if it cannot."""
    try:
        write_replacing(path, json.dumps({"levels": levels}, indent=1, sort_keys=True) + "\n")
    except OSError as error:
        return (
            f"could not remember the hint level in {path} ({error.strerror or error}): the next hint repeats this one"
        )
    return None


# --- the levels ---------------------------------------------------------------------------------------------


def hint_lines(level: int, result: CheckResult, evidence: Evidence) -> list[str]:
    title, body = LEVEL_TEXT[level]
    last = " (the last: it shows again until the check passes)" if level == LEVELS else ""
    lines = [f"hint {level} of {LEVELS} for {result.id} ({result.status}): {title}{last}"]
    lines += body(result, evidence)
    if level < LEVELS:
        lines.append(f"(grade {result.id} --hint again: {LEVEL_TEXT[level + 1][0]})")
    return lines


def idea(result: CheckResult, evidence: Evidence) -> list[str]:
    """What the exercise computes and why: the first paragraph of its course page, and the page to read."""
    check = evidence.check
    lines = [f"  {check.target.label}, in {check.target.file}.py of your package: {check.summary}"]
    page = page_of(check.id)
    lines += [f"  {line}" for line in (first_paragraph(REPO_ROOT / page) if page else [])]
    if page:
        lines.append(f"  read: {page}")
    return lines


def first_paragraph(page: Path) -> list[str]:
    """The first paragraph of a page's first section (after its title, links and exercise lines), with the list it
    introduces when it ends in a colon, as a terminal shows Markdown (rich): no `**` or backticks left, links as their
    text, wrapped to WIDTH."""
    try:
        text = page.read_text(encoding="utf-8")
    except OSError:
        return []
    paragraphs = text.split("\n## ", 1)[1].split("\n\n")[1:] if "\n## " in text else []
    shown = paragraphs[:2] if paragraphs and paragraphs[0].rstrip().endswith(":") else paragraphs[:1]
    console = Console(file=io.StringIO(), width=WIDTH, color_system=None, emoji=False, highlight=False)
    with console.capture() as captured:
        console.print(Markdown("\n\n".join(shown), hyperlinks=False))
    return [line.rstrip() for line in captured.get().splitlines() if line.strip()]


def where(result: CheckResult, evidence: Evidence) -> list[str]:
    """What the report says of the check: the message, the first step that differs, the likely mistake."""
    return [f"  {line}" for line in result.diagnosis()]


def walk(result: CheckResult, evidence: Evidence) -> list[str]:
    """The reference's steps on the failing case up to the first that differs, then that step's numbers."""
    failure = compare_cases(evidence).failure if result.status == "fail" else None
    if failure is None or not failure.output_wrong:
        return [*where(result, evidence), "  no output of yours was compared value by value: nothing to walk through"]
    case, reference = failure.case, evidence.reference_name
    steps, candidates = evidence.steps(case), evidence.candidates(case)
    index, divergence = first_differing_step(evidence, steps, candidates)
    lines = [f"  on the case {case}, each step's shape, {reference}'s then yours:"]
    for label, expected in steps[: len(steps) if index is None else index]:
        lines.append(matched_row(label, expected, candidates, evidence))
    output = evidence.output(case), evidence.expected[case]
    if index is None:
        return lines + side_by_side("the output", *output, reference)
    label, expected = steps[index]
    yours = learners_tensor(label, expected, candidates, divergence)
    if yours is None or divergence.moved:
        said = (
            f"your {yours.name}{at_place(yours)} holds {divergence.moved}'s values in another order"
            if yours and divergence.moved
            else "your code does not name it"
        )
        lines.append(f"    {label:<14} {shape_text(expected.shape):<18} {said}; the output it feeds:")
        return lines + side_by_side("the output", *output, reference)
    return lines + side_by_side(f"{label} (yours: {yours.name}{at_place(yours)})", yours.value, expected, reference)


def first_differing_step(evidence: Evidence, steps: list, candidates: list[Candidate]) -> tuple[int | None, object]:
    """The index of the step the report's `where:` names, and its divergence, from the very diagnosis the report
    gives (so that this walk, the report and its `next:` tell one story); (None, None) when no step is found to
    differ."""
    check = evidence.check
    found = first_divergence(steps, candidates, check.tolerance, evidence.expected_from, f"{check.target.file}.py")
    if found is None:
        return None, None
    return [label for label, _ in steps].index(found.step), found


def matched_row(label: str, expected: np.ndarray, candidates: list[Candidate], evidence: Evidence) -> str:
    twin = next((c for c in candidates if matches_step(c.value, expected, evidence.check.tolerance)), None)
    said = f"yours: {twin.name} {shape_text(twin.value.shape)}, same values" if twin else "not among your named tensors"
    return f"    {label:<14} {shape_text(expected.shape):<18} {said}"


def learners_tensor(label: str, expected: np.ndarray, candidates: list[Candidate], divergence) -> Candidate | None:
    """The learner's tensor for the step that differs: the one at the line the diagnosis names, else one named for
    the step; of the step's shape (its axes in any order)."""
    shaped = shaped_like(expected, candidates)
    at_line = [c for c in shaped if divergence.line and (c.file, c.line) == (divergence.file, divergence.line)]
    named = [c for c in shaped if names_step(c.name, label)]
    return next(iter(at_line[::-1] or named), None)  # the last one made at that line: after the step, not before


def at_place(candidate: Candidate) -> str:
    return f" at {candidate.place}" if candidate.place else ""


def side_by_side(label: str, yours: np.ndarray, theirs: np.ndarray, reference: str) -> list[str]:
    """A few of the step's values where the two differ most (along its last axis), the reference's beside yours."""
    lines = [f"    {label}: {reference}'s {shape_text(theirs.shape)}, yours {shape_text(yours.shape)}"]
    aligned = in_axis_order(yours, theirs)
    if aligned is None or not theirs.size:
        return [*lines, "    the shapes differ: fix the shape first (grade --trace prints each tensor's)"]
    worst = np.unravel_index(int(np.argmax(differences(aligned, theirs))), theirs.shape)
    start = max(0, min(worst[-1] - SHOWN_VALUES // 2, theirs.shape[-1] - SHOWN_VALUES))
    window = (*worst[:-1], slice(start, start + SHOWN_VALUES))
    at = ", ".join([*(str(i) for i in worst[:-1]), f"{start}:{start + SHOWN_VALUES}"])
    rows = {f"{reference}'s": theirs[window], "yours": aligned[window]}
    if np.all(np.isfinite(theirs[window])) and np.all(theirs[window] != 0):
        with np.errstate(all="ignore"):
            rows["yours / theirs"] = aligned[window].astype(np.float64) / theirs[window]
    width = max(len(name) for name in rows) + 1
    lines.append(f"    where they differ most, at [{at}]:")
    lines += [f"      {name + ':':<{width}} " + " ".join(f"{x:>11.4g}" for x in row) for name, row in rows.items()]
    return lines


def in_axis_order(yours: np.ndarray, theirs: np.ndarray) -> np.ndarray | None:
    """The learner's tensor with its axes in the reference's order (the first order that fits), or None."""
    if yours.shape == theirs.shape:
        return yours
    if without_unit_axes(yours.shape) == without_unit_axes(theirs.shape):  # taken without keepdim, say
        return yours.reshape(theirs.shape)
    if yours.ndim != theirs.ndim or sorted(yours.shape) != sorted(theirs.shape):
        return None
    order = next(o for o in itertools.permutations(range(yours.ndim)) if yours.transpose(o).shape == theirs.shape)
    return yours.transpose(order)


LEVEL_TEXT = {
    1: ("the idea", idea),
    2: ("where your output leaves the reference's", where),
    3: ("the step that differs, shape by shape, with numbers", walk),
}
