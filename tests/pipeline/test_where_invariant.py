"""The where invariant (tests/support/where_invariant.py): each of its rules can be broken, and the `grade` fixture
holds every variant it grades to it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from repo import write_variant
from where_invariant import violations

from grader.host.results import CheckResult

BASE = "def f(x):\n    y = x * 2\n    return y\n\n\ndef g(x):\n    return x\n"


@pytest.fixture
def variant(tmp_path) -> tuple[Path, Path]:
    base, package = tmp_path / "base", tmp_path / "pkg"
    for directory, source in ((base, BASE), (package, BASE.replace("x * 2", "x * 3"))):
        directory.mkdir()
        (directory / "toy.py").write_text(source)
        (directory / "other.py").write_text("def h():\n    return 1\n")
    return package, base


def failing(divergence: str | None, file: str = "toy.py", line: int = 2, message: str = "differs") -> CheckResult:
    return CheckResult("toy", "model", "toy", "fail", 1, message, file=file, line=line, divergence=divergence)


@pytest.mark.parametrize(
    "divergence",
    [
        "x matches GPT-2; y is the first step that does not (toy.py:2)",
        "x matches GPT-2; z is the first step that does not: your y holds x's values in another order (toy.py:2)",
    ],
)
def test_a_where_inside_the_edited_function_keeps_the_invariant(variant, divergence):
    assert violations(failing(divergence), *variant, steps={"x", "z"}) == []


def test_a_tensor_said_to_hold_values_must_be_named_somewhere(variant):
    result = failing("x matches GPT-2; z is the first step that does not: your y holds w's values in another order")
    assert violations(result, *variant, steps={"x", "z"}) == [
        "names w, which neither the reference's steps nor the code name"
    ]


@pytest.mark.parametrize(
    ("divergence", "file", "line", "broken"),
    [
        ("y, the first step, already differs from GPT-2 (toy.py:7)", "toy.py", 7, "outside the functions"),
        ("y, the first step, already differs from GPT-2 (other.py:2)", "other.py", 2, "did not edit"),
        ("z matches GPT-2; y is the first step that does not (toy.py:2)", "toy.py", 2, "names z"),
        ("y is where it all went wrong (toy.py:2)", "toy.py", 2, "no wording"),
    ],
)
def test_each_rule_of_the_invariant_can_be_broken(variant, divergence, file, line, broken):
    problems = violations(failing(divergence, file, line), *variant, steps=set())
    assert any(broken in problem for problem in problems), problems


def test_a_where_that_cannot_locate_may_leave_the_result_at_the_checks_own_line(variant):
    divergence = "x matches GPT-2; f is the first step that does not, though it was given the right input: "
    result = failing(divergence + "cannot locate the difference inside your f", "other.py", 1)
    assert violations(result, *variant, steps={"x", "f"}) == []


def test_where_a_nan_first_appears_follows_the_place_and_is_held_to_the_names_too(variant):
    """The clause a NaN output adds names a tensor without its line (a right step may make the first NaN): the place
    before it is still checked, and so is the name."""
    said = "x matches GPT-2; y is the first step that does not ({}:2); a NaN first appears in your {}"
    assert violations(failing(said.format("toy.py", "y")), *variant, steps={"x"}) == []
    problems = violations(failing(said.format("other.py", "w"), "other.py"), *variant, steps={"x"})
    assert any("did not edit" in problem for problem in problems) and any("names w" in p for p in problems), problems


def test_a_message_number_that_is_not_the_tables_is_a_violation(variant):
    result = failing(None, message="differs on a: max abs diff 0.5 at index (0,)")
    assert violations(dataclasses.replace(result, max_abs_diff=0.5), *variant, steps=set()) == []
    assert violations(dataclasses.replace(result, max_abs_diff=0.25), *variant, steps=set()) == [
        "the message gives max abs diff 0.5, the table 0.25"
    ]


# --- over the session ------------------------------------------------------------------------------------


def test_the_grade_fixture_checks_every_variant_it_grades(grade, session, tmp_path):
    checked = session.variants_checked
    package = write_variant(tmp_path, {"embedding.py": [("return self.W_E[tokens]", "return self.W_E[tokens] * 2")]})
    assert grade(package, "embed").checks[0].status == "fail"
    assert session.variants_checked == checked + 1
