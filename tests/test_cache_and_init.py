"""Speed paths change nothing: a fresh build equals the cached entry, and skipping the random
initialisation of the learner's modules gives the same verdicts as paying for it."""

from __future__ import annotations

import json

import numpy as np
from safetensors.numpy import load_file

from conftest import EXERCISES, SOLUTIONS, run_grade, write_variant
from test_mistakes import MISTAKES

from grader.refcache import ENTRY_FILES


def comparable(report) -> list[tuple]:
    return [(c.id, c.status, c.message, c.max_abs_diff, c.hint, c.divergence, tuple(c.notes)) for c in report.checks]


def test_a_fresh_build_equals_the_cached_entry(reference, tmp_path):
    result = run_grade("--reference", "random", "--solutions", "--json", str(tmp_path / "cold.json"), env={"GPT2_GRADER_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stdout + result.stderr
    fresh = next((tmp_path / "cache").glob(f"{reference.directory.name}"))
    for name in ENTRY_FILES[:3]:
        built, cached = load_file(str(fresh / name)), load_file(str(reference.directory / name))
        assert built.keys() == cached.keys()
        assert all(np.array_equal(built[k], cached[k], equal_nan=True) for k in built), name
    warm = run_grade("--reference", "random", "--solutions", "--json", str(tmp_path / "warm.json"))
    strip = lambda report: [{k: v for k, v in c.items() if k != "seconds"} for c in report["checks"]]  # noqa: E731
    assert strip(json.loads((tmp_path / "cold.json").read_text())) == strip(json.loads((tmp_path / "warm.json").read_text()))


def test_skipping_random_init_changes_no_verdict(grade, tmp_path):
    """The solutions and the stubs on every check; each written-wrong variant on its own check."""
    runs = [(SOLUTIONS, ()), (EXERCISES, ())]
    runs += [(write_variant(tmp_path / str(i), edits), (check_id,)) for i, (check_id, edits, _, _) in enumerate(MISTAKES.values())]
    for package, check_ids in runs:
        assert comparable(grade(package, *check_ids, fast_init=True)) == comparable(grade(package, *check_ids, fast_init=False)), package
