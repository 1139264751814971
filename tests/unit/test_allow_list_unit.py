"""The sandbox's allow-list on a tree of its own: what lies beside a forbidden directory stays readable, what is
forbidden does not, and neither does a link to it under another name, however deep."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grader.shared import allow_list, sandbox

pytestmark = pytest.mark.unit


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """site/: numpy/, transformer_lens/ (forbidden), innocent -> transformer_lens, deep/nested/{ok, hidden/},
    deep/also.py and a link to a plain directory."""
    root = (tmp_path / "site").resolve()
    for directory in ("numpy", "transformer_lens", "deep/nested/ok", "deep/nested/hidden", "elsewhere"):
        (root / directory).mkdir(parents=True)
    (root / "deep" / "also.py").write_text("")
    (root / "innocent").symlink_to(root / "transformer_lens")
    (root / "deep" / "link").symlink_to(root / "elsewhere")
    return root


def readable(site: Path, forbidden: set[Path]) -> list[Path]:
    return allow_list._without(site, forbidden, {parent for path in forbidden for parent in path.parents})


def test_the_forbidden_directory_and_a_link_to_it_are_left_out_and_the_rest_kept(site):
    kept = readable(site, {site / "transformer_lens"})
    assert kept == [site / "deep", site / "elsewhere", site / "numpy"]


def test_a_directory_above_something_forbidden_is_split_into_its_other_entries(site):
    kept = readable(site, {site / "deep" / "nested" / "hidden"})
    # a link is granted as what it resolves to: deep/link as elsewhere/, innocent as transformer_lens/
    assert kept == [
        site / "deep" / "also.py",
        site / "elsewhere",
        site / "deep" / "nested" / "ok",
        site / "elsewhere",
        site / "transformer_lens",
        site / "numpy",
        site / "transformer_lens",
    ]


def test_nothing_forbidden_grants_the_directory_whole(site):
    assert readable(site, {site.parent / "elsewhere-entirely"}) == [site]


@pytest.mark.skipif(sandbox.landlock_abi() < 1, reason="no Landlock on this kernel")
def test_the_fork_server_keeps_one_ruleset_made_anew_for_another_package_or_a_path_made_anew(site):
    """Every check's process inherits the kept ruleset's descriptor (each has 64 at most): one is kept at a time,
    the same for the same package, a new one where a path is not the directory it was."""
    abi = sandbox.landlock_abi()
    packages = [(site / name,) for name in ("numpy", "deep", "deep/nested", "deep/nested/ok", "elsewhere")]
    kept = sandbox.package_ruleset(packages[0], (), abi)
    assert sandbox.package_ruleset(packages[0], (), abi) == kept
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(10):  # five packages in turn, ten times
        for package in packages:
            sandbox.package_ruleset(package, (), abi)
    assert len(os.listdir("/proc/self/fd")) == before
    (site / "elsewhere").rename(site / "elsewhere-old")
    (site / "elsewhere").mkdir()
    sandbox.package_ruleset(packages[-1], (), abi)
    assert (
        sandbox._KEPT["key"][3]
        == (sandbox._identity(site / "elsewhere"),)
        != (sandbox._identity(site / "elsewhere-old"),)
    )
    assert len(os.listdir("/proc/self/fd")) == before
