"""Speed paths change nothing: skipping the random initialisation of the learner's modules gives the verdicts the
course expects, as paying for it does: the solutions pass every check, the stubs are todo at every check, and each
written-wrong variant fails at its own check with its message and its named mistake (test_mistakes.MISTAKES). (That a
fresh build equals the cached entry, bit for bit, is proven where a damaged entry is rebuilt, in test_hostile.py.)"""

from __future__ import annotations

import pytest
from repo import SOLUTIONS, by_id, stubs, write_variant
from test_mistakes import MISTAKES

from grader.checks import registry

EVERY_CHECK = [check.id for check in registry()]


def comparable(report) -> list[tuple]:
    return [(c.id, c.status, c.message, c.max_abs_diff, c.hint, c.divergence, tuple(c.notes)) for c in report.checks]


@pytest.mark.slow
@pytest.mark.parametrize("fast_init", [True, False], ids=["initialisation skipped", "initialisation paid for"])
def test_the_solutions_pass_and_the_stubs_are_todo_at_every_check(grade, fast_init):
    solved, stubbed = grade(SOLUTIONS, fast_init=fast_init), grade(stubs(), fast_init=fast_init)
    assert {c.id: c.status for c in solved.checks} == dict.fromkeys(EVERY_CHECK, "pass")
    assert {c.id: c.status for c in stubbed.checks} == dict.fromkeys(EVERY_CHECK, "todo")


@pytest.mark.slow
def test_each_mistake_fails_at_its_check_and_is_named_whether_or_not_the_initialisation_is_skipped(grade, tmp_path):
    for i, (name, (check_id, edits, fragment, hint)) in enumerate(MISTAKES.items()):
        package = write_variant(tmp_path / str(i), edits)
        skipped, paid = grade(package, check_id, fast_init=True), grade(package, check_id, fast_init=False)
        for report in (skipped, paid):
            result = by_id(report)[check_id]
            assert result.status == "fail" and fragment in result.message, (name, result.status, result.message)
            assert result.hint is None if hint is None else hint in (result.hint or ""), (name, result.hint)
        assert comparable(skipped) == comparable(paid), name
