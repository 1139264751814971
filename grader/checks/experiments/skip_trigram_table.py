"""skip_trigram.table: a head's strongest skip-trigrams `s ... d -> o`, each source with its top destinations (by the
attention they pay it) and top outputs (by its centred OV row) and their scores; on the two heads' attention and full
OV circuits (the reference's, so a slip upstream does not carry over), among the whole-word tokens, and on a small
hand-made case full of ties. The learner's four tensors come back packed as rows [source, destinations, outputs,
scores] (drivers.skip_trigrams)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case, Check, Tolerance
from grader.checks.experiments._skip_trigrams import (
    FROM_THE_DEFINITION,
    HEADS,
    N_SOURCES,
    ROUNDING,
    K,
    attention_to_sources,
    candidates,
    full_circuits,
    one_thread,
    packed,
    skip_trigram_table,
    skip_trigrams,
)
from grader.shared.compare import CaseComparison, allclose

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

NOT_CENTRED = (
    "OV is not centred: take each source's mean over every output from its row first (a constant added to every "
    "logit changes no prediction, but it ranks sources)"
)
OVER_CANDIDATES = (
    "OV is centred over the candidates only: take each row's mean over every output, d_vocab of them, before taking "
    "the candidates"
)
OWN_DESTINATION = "a source is its own destination: leave attention[s, s] out of s's destinations"
ALONG_THE_ROW = (
    "the destinations are read along the source's row of attention (what s pays as a destination): read down its "
    "column, attention[:, s], what each destination pays s"
)
TIES = "it fails only on the small hand-made case, full of ties: sort with stable=True, so that ties go to the lower id"
HAND_MADE_SEED = 2  # a draw whose ties decide sources, destinations and outputs (tests/course/test_skip_trigrams.py)


def same_table(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> CaseComparison:
    """allclose, its message naming the first of the learner's four tensors that differs, at the first row where
    one does: sources[i], destinations[i], outputs[i] (ids) or scores[i]."""
    compared = allclose(actual, expected, tolerance)
    if compared.ok or compared.actual_shape != compared.expected_shape or not np.isfinite(actual).all():
        return compared  # shapes, dtypes and non-finite values are said by allclose
    k = math.isqrt(expected.shape[1]) - 1  # a row is 1 + 2k + k^2 = (k + 1)^2 wide
    differs = np.abs(actual - expected) > tolerance.atol + tolerance.rtol * np.abs(expected)
    row = int(np.argwhere(differs)[0, 0])
    parts = {"sources": slice(0, 1), "destinations": slice(1, 1 + k), "outputs": slice(1 + k, 1 + 2 * k)}
    for name, columns in parts.items():
        if differs[row, columns].any():
            got, want = (values[row, columns].astype(int).tolist() for values in (actual, expected))
            said = f"{name}[{row}] is {got[0]}, the definition's {want[0]}" if name == "sources" else ""
            said = said or f"{name}[{row}] are {got}, the definition's {want}"
            return replace(compared, message=f"{said}; {compared.message}")
    largest = float(np.abs(actual[row, 1 + 2 * k :] - expected[row, 1 + 2 * k :]).max())
    return replace(compared, message=f"scores[{row}] differ by up to {largest:.3g}; {compared.message}")


def table_case(name: str, attention: Tensor, full_ov: Tensor, among: Tensor, n: int, k: int, hint: str = "") -> Case:
    import torch

    def table(attention: Tensor = attention, ov: Tensor = full_ov, **slip) -> Tensor:
        return packed(skip_trigram_table(attention, ov, among, n, k, **slip))

    mistakes = {
        NOT_CENTRED: table(centred=False),
        OVER_CANDIDATES: table(ov=full_ov - full_ov[:, among].mean(dim=-1, keepdim=True), centred=False),
        OWN_DESTINATION: table(own_destination=True),
        ALONG_THE_ROW: table(attention.T),
    }
    args = [attention, full_ov, among, torch.tensor(n), torch.tensor(k)]
    return Case(name, args, table(), hint=hint, mistakes=mistakes)


def table_cases(ref: Reference) -> list[Case]:
    import torch

    model = ref.attn_only_model()
    cases = []
    for head in HEADS:
        circuits = full_circuits(model, head)
        attention = attention_to_sources(circuits["qk"], model.config_fields()["d_head"])
        cases.append(table_case(f"head{head}", attention, circuits["ov"], candidates(model.texts), N_SOURCES, K))
    # Eight tokens, the fifth no candidate; attention in eighths and OV in integers, so ties are exact.
    drawn = torch.Generator().manual_seed(HAND_MADE_SEED)
    attention = torch.randint(0, 5, (8, 8), generator=drawn) / 8
    full_ov = torch.randint(-4, 5, (8, 8), generator=drawn).float()
    among = torch.tensor([0, 1, 2, 3, 5, 6, 7])
    return [*cases, table_case("ties", attention, full_ov, among, 3, 2, TIES)]


PAGE = "22-skip-trigrams.md"
CHECK = Check(
    "skip_trigram.table",
    2,
    skip_trigrams("skip_trigram_table", "table"),
    "a head's strongest skip-trigrams",
    one_thread(table_cases),
    comparison=same_table,
    tolerance=ROUNDING,
    expected_from=FROM_THE_DEFINITION,
)
