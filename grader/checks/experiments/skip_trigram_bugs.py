"""skip_trigram.bugs: a table's skip-trigram bugs, the cells that are not real (the text holds them fewer than min_real
times) while their row and their column each hold a real one; on the two heads' tables with their counts in every
training window, and on hand-made counts at and around min_real."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.experiments._skip_trigrams import (
    EXACT,
    FROM_THE_DEFINITION,
    HEADS,
    MIN_REAL,
    N_SOURCES,
    K,
    count_skip_trigrams,
    head_tables,
    one_thread,
    skip_trigram_bugs,
    skip_trigrams,
    triples_of,
)

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

ZERO = "a cell counts as not real only when its count is 0: not real means fewer than min_real"
ONE_WITNESS = (
    "one witness is enough here: a bug needs both, a real trigram in its row (same destination) and one in its "
    "column (same output)"
)
HAND_MADE = "it fails only on the hand-made counts: a count of exactly min_real is real"
HAND_MADE_MIN_REAL = 10
# Two 3 x 3 grids: the first with a count of exactly 10 and one of 3, a row witness alone and a column witness alone;
# the second with no real cell, so no bug.
HAND_MADE_COUNTS = (
    ((10, 3, 0), (0, 12, 0), (0, 0, 0)),
    ((9, 0, 9), (0, 9, 0), (1, 2, 3)),
)


def bugs_case(name: str, counts: Tensor, min_real: int, hint: str = "") -> Case:
    import torch

    real = min_real <= counts
    in_row, in_column = real.any(dim=-1, keepdim=True), real.any(dim=-2, keepdim=True)
    mistakes = {ZERO: (counts == 0) & in_row & in_column, ONE_WITNESS: ~real & (in_row | in_column)}
    floats = {hint: bugs.to(torch.float64) for hint, bugs in mistakes.items()}
    expected = skip_trigram_bugs(counts, min_real).to(torch.float64)
    return Case(name, [counts, torch.tensor(min_real)], expected, hint=hint, mistakes=floats)


def bugs_cases(ref: Reference) -> list[Case]:
    import torch

    model = ref.attn_only_model()
    triples = torch.cat([triples_of(table) for table in head_tables(model)])
    counts = count_skip_trigrams(model.training_windows(), triples, model.n_ctx)
    grids = counts.reshape(len(HEADS), N_SOURCES, K, K)
    cases = [bugs_case(f"head{head}", grid, MIN_REAL) for head, grid in zip(HEADS, grids, strict=True)]
    hand_made = torch.tensor(HAND_MADE_COUNTS)
    return [*cases, bugs_case("hand_made", hand_made, HAND_MADE_MIN_REAL, HAND_MADE)]


PAGE = "22-skip-trigrams.md"
CHECK = Check(
    "skip_trigram.bugs",
    1,
    skip_trigrams("skip_trigram_bugs", "bugs"),
    "the bugs the factoring forces",
    one_thread(bugs_cases),
    tolerance=EXACT,
    expected_from=FROM_THE_DEFINITION,
)
