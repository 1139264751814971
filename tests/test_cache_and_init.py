"""Speed paths change nothing: skipping the random initialisation of the learner's modules gives
the same verdicts as paying for it. (That a fresh build equals the cached entry, bit for bit, is
proven where a damaged entry is rebuilt, in test_hostile.py.)"""

from __future__ import annotations

import pytest
from conftest import EXERCISES, SOLUTIONS, write_variant
from test_mistakes import MISTAKES


def comparable(report) -> list[tuple]:
    return [(c.id, c.status, c.message, c.max_abs_diff, c.hint, c.divergence, tuple(c.notes)) for c in report.checks]


@pytest.mark.slow
def test_skipping_random_init_changes_no_verdict(grade, tmp_path):
    """The solutions and the stubs on every check; each written-wrong variant on its own check."""
    runs = [(SOLUTIONS, ()), (EXERCISES, ())]
    runs += [
        (write_variant(tmp_path / str(i), edits), (check_id,))
        for i, (check_id, edits, _, _) in enumerate(MISTAKES.values())
    ]
    for package, check_ids in runs:
        assert comparable(grade(package, *check_ids, fast_init=True)) == comparable(
            grade(package, *check_ids, fast_init=False)
        ), package
