"""Types every process shares: a leaf module that imports nothing of the grader (and no torch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """Elementwise: |actual - expected| <= atol + rtol * |expected|."""

    atol: float = 1e-4
    rtol: float = 1e-4
