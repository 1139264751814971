"""Types every process shares: a leaf module that imports nothing of the grader (and no torch)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """Elementwise: |actual - expected| <= atol + rtol * |expected|."""

    atol: float = 1e-4
    rtol: float = 1e-4


def counts_by_part(sizes: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Parameter counts per top-level part ("embed", "blocks", ...) and their "total", from (name, numel) pairs:
    the learner's module and the reference's weights are counted by this one rule."""
    counts: dict[str, int] = {}
    for name, size in sizes:
        part = name.split(".")[0]
        counts[part] = counts.get(part, 0) + size
    return counts | {"total": sum(counts.values())}  # last, as the reports list it
