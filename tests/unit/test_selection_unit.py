"""Naming checks the way a learner does: by file, in any case; a typo gets the nearest names."""

from __future__ import annotations

import pytest

from grader.checks import UnknownCheck, listing, registry, select

pytestmark = [pytest.mark.learner, pytest.mark.unit]


def ids(*patterns: str) -> list[str]:
    return [check.id for check in select(patterns)]


@pytest.mark.parametrize("name", ["embedding", "embedding.py", "exercises/embedding.py", "Embedding.PY"])
def test_a_file_selects_its_checks(name):
    assert ids(name) == ["embed", "pos_embed"]


def test_case_does_not_matter_and_a_part_stays_a_part():
    assert ids("Attention") == ["attention.causal_mask", "attention"]
    assert "kv_cache" in ids("sampling")  # the part, not only sampling.py
    assert ids("exercises/kv_cache.py", "LAYERNORM") == ["layernorm", "kv_cache"]  # course order


@pytest.mark.parametrize(
    ("typo", "nearest"), [("atention", "'attention'"), ("exercises/normalisation.py", "'normalization.py'")]
)
def test_an_unknown_name_gets_did_you_mean(typo, nearest):
    with pytest.raises(UnknownCheck) as raised:
        select([typo])
    assert f"did you mean {nearest}" in str(raised.value)


def test_nothing_near_names_the_list():
    with pytest.raises(UnknownCheck) as raised:
        select(["xyzzy"])
    assert "did you mean" not in str(raised.value) and "grade --list" in str(raised.value)


def test_the_list_is_a_tree_of_parts_files_and_checks():
    lines = listing(registry())
    assert lines[:4] == ["model (17 pt)", "  embedding.py", lines[2], lines[3]]
    assert lines[2].split()[:3] == ["embed", "1", "pt"] and lines[3].split()[0] == "pos_embed"
    parts = [line for line in lines if not line.startswith(" ")]
    assert [p.split()[0] for p in parts] == ["model", "sampling", "interp", "training", "induction", "experiments"]
    assert sum(int(p.split("(")[1].split()[0]) for p in parts) == sum(c.points for c in registry())
