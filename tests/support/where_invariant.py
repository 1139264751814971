"""The where invariant, over every written-wrong variant the suite grades through the `grade` fixture.

For each failing check of a package `write_variant` wrote: a "where" that gives a place (its own and the
result's file and line, where GitHub's annotation lands) lies in a file the variant edited, and in a function
it edited where the edit is inside one; or the where says it cannot locate the difference. A where names no
tensor that neither the reference's steps nor the variant's code names, and every max abs diff a message
gives is the table's. The `grade` fixture checks each such report as it is graded (reference_session's
`keeping_the_where_invariant`), and the test that graded it fails where it does not hold; tests/pipeline/
test_where_invariant.py tests the invariant itself.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from grader.host.results import CheckResult, Report

FAILING = ("fail", "error", "timeout")
PLACE = re.compile(r" \(([\w.]+\.py):(\d+)\)(?=; |$)")  # a clause without a place may follow (a NaN's origin)
NUMBER = re.compile(r"max abs diff (\S+?)(?=[ ;,)]|$)")
# What a where says the learner's values differ from: the reference, or a check's own expected values (Check's
# expected_from) where they are not the reference's (training.next_token_loss).
REFERENCE = r"(?:GPT-2|the random reference|the grader's own computation)"
INSIDE = r"(?:, though it was given the right input: cannot locate the difference inside your (?P<inside>\S+))?"
# Every clause a where may hold, as grader.host.diagnose words it; a clause none of these reads is a violation.
CLAUSES = [
    re.compile(rf"^(?P<list>.+) match(?:es)? {REFERENCE}$"),
    re.compile(r"^(?P<list>.+) (?:is|are) not among the tensors your code names$"),
    re.compile(
        rf"^(?P<step>\S+)(?: is the first step that (?:differs|does not)|, the first step, already differs from "
        rf"{REFERENCE})(?:: your (?P<name>.+?) (?:equals (?P<value>\S+)|holds (?P<moved>\S+)'s values in another "
        rf"order))?{INSIDE}$"
    ),
    re.compile(r"^.+ changes an argument in place$"),  # grader.host.verdict's, the learner's line of code quoted
    re.compile(r"^(?:a NaN|an inf) first appears in your (?P<name>.+)$"),
]
NAMED_BY_EVERY_FUNCTION = {"return value"}  # what a function returns, which the code names by `return`
# Test node id: why its variants may break the invariant. None now: a slip inside gelu_new, which once failed `mlp`
# with its where at MLP.forward's right call of gelu_new (issue 56), has mlp graded on the grader's gelu_new (issue 57).
EXEMPT: dict[str, str] = {}


# --- what a variant changed, read from its files ---------------------------------------------------------


def edited_files(package: Path, base: Path) -> set[str]:
    """The Python files of `package` that differ from `base`'s (or that `base` lacks), by name."""
    return {
        path.name
        for path in package.glob("*.py")
        if not (base / path.name).exists() or (base / path.name).read_text() != path.read_text()
    }


def functions(source: str) -> dict[str, tuple[int, int, str]]:
    """Each function of a module by its qualified name (`Attention.forward`): its lines and its source."""
    found: dict[str, tuple[int, int, str]] = {}

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found[name] = (child.lineno, child.end_lineno, ast.get_source_segment(source, child))
                visit(child, f"{name}.")

    visit(ast.parse(source), "")
    return found


def edited_functions(package: Path, base: Path, file: str) -> list[tuple[int, int]]:
    """The line ranges, in the package's file, of the functions the variant edited or added there."""
    try:
        ours = functions((package / file).read_text())
        theirs = functions((base / file).read_text()) if (base / file).exists() else {}
    except SyntaxError:
        return []
    return [(first, last) for name, (first, last, code) in ours.items() if theirs.get(name, (0, 0, None))[2] != code]


def code_names(package: Path) -> set[str]:
    """Every name the package's code uses: variables, arguments, attributes, functions and classes."""
    names: set[str] = set()
    for path in package.glob("*.py"):
        try:
            tree = ast.parse(path.read_text())
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            name = getattr(node, "id", None) or getattr(node, "arg", None) or getattr(node, "attr", None)
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                name = node.name
            if isinstance(name, str):
                names.add(name)
    return names


# --- the invariant ---------------------------------------------------------------------------------------


def named_in_where(divergence: str) -> tuple[set[str], list[str]]:
    """The tensors a where names, and the clauses of it that no wording of grader.host.diagnose reads."""
    names, unread = set(), []
    for clause in PLACE.sub("", divergence).split("; "):
        found = next((m for m in (pattern.match(clause) for pattern in CLAUSES) if m), None)
        if found is None:
            unread.append(clause)
            continue
        groups = found.groupdict()
        for listed in re.split(r", |-", groups.get("list") or ""):
            names.add(listed)
        names |= {groups[key] for key in ("step", "name", "value", "moved", "inside") if groups.get(key)}
    return names - {""}, unread


def placed_where_edited(result: CheckResult, package: Path, base: Path, edited: set[str]) -> list[str]:
    """Violations of: the where's line and the result's lie in an edited file, in an edited function there."""
    place = PLACE.search(result.divergence)
    places = [(result.file, result.line)] + ([(place.group(1), int(place.group(2)))] if place else [])
    problems = []
    for file, line in dict.fromkeys(places):  # the where's place is the result's, when it has one
        if file not in edited:
            problems.append(f"points at {file}:{line}, a file the variant did not edit ({sorted(edited)})")
            continue
        ranges = edited_functions(package, base, file)
        if ranges and line is not None and not any(first <= line <= last for first, last in ranges):
            problems.append(f"points at {file}:{line}, outside the functions the variant edited there {ranges}")
    return problems


def numbers_are_the_tables(result: CheckResult) -> list[str]:
    said = NUMBER.findall(result.message)
    table = "none" if result.max_abs_diff is None else f"{result.max_abs_diff:.3g}"
    return [f"the message gives max abs diff {number}, the table {table}" for number in said if number != table]


def violations(result: CheckResult, package: Path, base: Path, steps: set[str]) -> list[str]:
    """How one check's result of a variant breaks the where invariant (nothing when it keeps it)."""
    if result.status not in FAILING:
        return []
    problems = numbers_are_the_tables(result)
    if not result.divergence:
        return problems
    if "cannot locate" not in result.divergence:
        problems += placed_where_edited(result, package, base, edited_files(package, base))
    names, unread = named_in_where(result.divergence)
    problems += [f"a where no wording of grader.host.diagnose reads: {clause!r}" for clause in unread]
    unknown = names - steps - code_names(package) - NAMED_BY_EVERY_FUNCTION
    problems += [f"names {name}, which neither the reference's steps nor the code name" for name in sorted(unknown)]
    return problems


def where_invariant(report: Report, package: Path, base: Path, steps_of) -> list[str]:
    """Every violation in a variant's report, each with its check; `steps_of(check_id)` gives its step labels."""
    return [
        f"{result.id}: {problem} (where: {result.divergence}; message: {result.message})"
        for result in report.checks
        for problem in violations(result, package, base, steps_of(result.id))
    ]


# --- the invariant checks itself: each rule can fail ----------------------------------------------------
