"""ov_circuit: a head's OV circuit W_V W_O, compared with transformer_lens's `FactoredMatrix` on a head of the first
block and one of the last."""

from __future__ import annotations

from grader.checks import Check
from grader.checks.interp._common import circuit_cases, interp

PAGE = "15-interp.md"
CHECK = Check(
    "interp.ov_circuit",
    1,
    interp("ov_circuit", "head_circuit"),
    "a head's OV circuit",
    circuit_cases("ov"),
)
