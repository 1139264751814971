"""qk_circuit: a head's QK circuit W_Q W_K^T, compared with transformer_lens's `FactoredMatrix` on a head of the first
block and one of the last."""

from __future__ import annotations

from grader.checks import Check
from grader.checks.interp._common import circuit_cases, interp

PAGE = "15-interp.md"
CHECK = Check(
    "interp.qk_circuit",
    1,
    interp("qk_circuit", "head_circuit"),
    "a head's QK circuit",
    circuit_cases("qk"),
)
