"""skip_trigram.counts: how often a text holds each skip-trigram (s, d, o), the positions where d is followed by o with
s among the n_ctx - 1 tokens before d in its window; the trigrams of the two heads' tables in the first training
windows and in the start of the corpus as one long window, and hand-made windows longer than n_ctx."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check
from grader.checks.experiments._skip_trigrams import (
    EXACT,
    FROM_THE_DEFINITION,
    count_skip_trigrams,
    counted,
    head_tables,
    one_thread,
    skip_trigrams,
    triples_of,
)

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

AT_D = "s at d's own position is counted: look only at the tokens before d"
AFTER_D = "s after d is counted: only the tokens before d are in its context"
N_CTX_BACK = "s is looked for n_ctx back: d sees n_ctx tokens, itself included, so s is at most n_ctx - 1 before it"
JOINED = "the windows are joined into one stream, so a trigram crosses from one window into the next: count each alone"
PAIRS = "(s, position) pairs are counted: a position with s twice before d counts once"
HAND_MADE = (
    "it fails only on the hand-made windows, where n_ctx (5) is shorter than a window (12): s is 1 to n_ctx - 1 "
    "tokens before d, and s may be d's own token"
)
WINDOWS = 1000  # of the 160,000 training windows: 64,000 tokens, the planted trigrams about 125 times each
CORPUS_TOKENS = 20_000
# Four windows of 12 and n_ctx 5. (1, 2, 3): s 1 back; 2 and 3 back; 2 and 4 back; 5 back only; and two trigrams
# across windows' edges. (2, 2, 3): s is d's own token. (4, 5, 6): s after d only. (1, 6, 4): every slip counts it.
HAND_MADE_WINDOWS = (
    (1, 2, 3, 0, 0, 0, 0, 1, 1, 0, 2, 3),
    (2, 3, 0, 0, 0, 1, 5, 6, 4, 1, 0, 2),
    (3, 1, 0, 1, 0, 2, 3, 0, 0, 0, 0, 0),
    (0, 1, 0, 0, 0, 0, 2, 3, 0, 0, 0, 0),
)
HAND_MADE_TRIPLES = ((1, 2, 3), (2, 2, 3), (4, 5, 6), (1, 6, 4))


def anywhere_in_window(windows: Tensor, triples: Tensor) -> Tensor:
    """AFTER_D's counts: the positions with d then o whose window holds s anywhere, before d, at it or after it."""
    import torch

    counts = []
    for source, destination, output in triples.tolist():
        per_window = ((windows[:, :-1] == destination) & (windows[:, 1:] == output)).sum(dim=-1)
        counts.append(int(per_window[(windows == source).any(dim=-1)].sum()))
    return torch.tensor(counts, dtype=torch.long)


def counts_case(name: str, windows: Tensor, triples: Tensor, n_ctx: int, hint: str = "") -> Case:
    import torch

    mistakes = {
        AT_D: counted(windows, triples, range(0, n_ctx)),
        AFTER_D: anywhere_in_window(windows, triples),
        N_CTX_BACK: counted(windows, triples, range(1, n_ctx + 1)),
        JOINED: count_skip_trigrams(windows.reshape(1, -1), triples, n_ctx),
        PAIRS: counted(windows, triples, range(1, n_ctx), per_position=False),
    }
    expected = count_skip_trigrams(windows, triples, n_ctx).to(torch.float64)
    floats = {hint: counts.to(torch.float64) for hint, counts in mistakes.items()}
    return Case(name, [windows, triples, torch.tensor(n_ctx)], expected, hint=hint, mistakes=floats)


def counts_cases(ref: Reference) -> list[Case]:
    import torch

    model = ref.attn_only_model()
    triples, n_ctx = torch.cat([triples_of(table) for table in head_tables(model)]), model.n_ctx
    corpus = model.corpus_stream()[:CORPUS_TOKENS]
    return [
        counts_case("training_windows", model.training_windows()[:WINDOWS].clone(), triples, n_ctx),
        counts_case("corpus", corpus[None].clone(), triples, n_ctx),
        counts_case("hand_made", torch.tensor(HAND_MADE_WINDOWS), torch.tensor(HAND_MADE_TRIPLES), 5, HAND_MADE),
    ]


PAGE = "22-skip-trigrams.md"
CHECK = Check(
    "skip_trigram.counts",
    1,
    skip_trigrams("count_skip_trigrams", "counts"),
    "how often the text holds each skip-trigram",
    one_thread(counts_cases),
    tolerance=EXACT,
    expected_from=FROM_THE_DEFINITION,
)
