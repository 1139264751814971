"""What the skip_trigram checks share: the definitions their expected answers come from, written once (the builder
runs them when it builds the cache, and the tests that re-train the model import them), the heads and settings of
the cases, and the attention-only model's Config fields. Torch is imported inside the functions, in the builder.

On the one-layer attention-only model (grader/builder/attn_only_model.py) head h adds to the logits at a
destination token d, for each earlier source token s, A[d, s] * OV[s, :]: the attention weight times the source's
row of the full OV circuit. So a head is a table of skip-trigrams `s ... d -> o`, each scored A[d, s] * OV'[s, o]
where A is the softmax over all d_vocab sources of the scaled full QK circuit (the attention if every token were in
the context once) and OV' the full OV circuit less each row's mean over the outputs (a constant added to every logit
changes no prediction).
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from grader.checks import Case, Target, Tolerance, driven

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import Tensor

    from grader.builder.interface import Reference, SkipTrigramModel

HEADS = (1, 3)  # the shipped model's heads that hold the planted families (docs/attn-only-model.md)
N_SOURCES = 8  # sources per head in a table
K = 4  # destinations and outputs per source
MIN_REAL = 100  # a trigram the training windows have this often is real (about 3 times in the corpus itself)
WORD = re.compile(r" ?[A-Za-z]+")  # a candidate token: a whole word, with or without its leading space
EXACT = Tolerance(atol=0.0, rtol=0.0)
# The learner's einsum order differs from FactoredMatrix's: entries of the full circuits reach 40 or so.
CIRCUITS = Tolerance(atol=1e-4, rtol=1e-4)
# The same arithmetic as the definition's, up to its order: the attention, and the tables (whose ids differ by 1 or more
# when wrong).
ROUNDING = Tolerance(atol=1e-6, rtol=1e-5)
FROM_THE_MODEL = "transformer_lens's FactoredMatrix, on the attention-only model"
FROM_THE_DEFINITION = "the definition in grader/checks/experiments/_skip_trigrams.py"


def skip_trigrams(name: str, driver: str | None) -> Target:
    return driven("skip_trigrams", name, driver)


def one_thread(cases: Callable[[Reference], list[Case]]) -> Callable[[Reference], list[Case]]:
    """`cases`, built on one torch thread: they are many small operations (a loop over triples), which a second
    thread only slows, and many times over on a busy machine (measured: 15 s instead of 0.3 s)."""

    @functools.wraps(cases)
    def on_one_thread(ref: Reference) -> list[Case]:
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return cases(ref)
        finally:
            torch.set_num_threads(threads)

    return on_one_thread


def candidates(texts: list[str]) -> Tensor:
    """The ids of the whole-word tokens, ascending: the tables' sources, destinations and outputs."""
    import torch

    return torch.tensor([i for i, text in enumerate(texts) if WORD.fullmatch(text)])


# --- the circuits and the attention ---------------------------------------------------------------------------


def full_circuits(model: SkipTrigramModel, head: int) -> dict[str, Tensor]:
    """The head's full QK circuit W_E (W_Q W_K^T) W_E^T (destination x source, unscaled) and full OV circuit
    W_E (W_V W_O) W_U (source x output), from FactoredMatrix's QK and OV."""
    circuits = model.head_circuits(0, head)
    W_E, W_U = model.weight("embed.W_E"), model.weight("unembed.W_U")
    return {"qk": W_E @ circuits["qk"] @ W_E.T, "ov": W_E @ circuits["ov"] @ W_U}


def attention_to_sources(full_qk: Tensor, d_head: int) -> Tensor:
    """Each destination's attention to each source when every token is in the context once: the softmax over the
    sources (the last axis) of the scores scaled by 1/sqrt(d_head)."""
    import torch

    return torch.softmax(full_qk * d_head**-0.5, dim=-1)


# --- the table --------------------------------------------------------------------------------------------------


def ranked(values: Tensor, k: int) -> Tensor:
    """The indices of the k largest values along the last axis, ties to the lower index (a stable sort)."""
    return values.sort(dim=-1, descending=True, stable=True).indices[..., :k]


def skip_trigram_table(
    attention: Tensor,
    full_ov: Tensor,
    candidates: Tensor,
    n_sources: int,
    k: int,
    centred: bool = True,
    own_destination: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The n_sources candidate sources of greatest strength, each with its top-k candidate destinations by the
    attention they pay it (its column of `attention`, itself left out unless `own_destination`) and its top-k
    candidate outputs by its OV row, centred (unless not `centred`); strength is the score of its best destination
    with its best output.
    Returns (sources (n), destinations (n, k), outputs (n, k), scores (n, k, k)), scores[i, a, b] the score of
    (sources[i], destinations[i, a], outputs[i, b]). `candidates` are ascending, so ties go to the lower id."""
    if centred:  # over every output, before the candidates are taken
        full_ov = full_ov - full_ov.mean(dim=-1, keepdim=True)
    ov = full_ov[candidates][:, candidates]
    paid = attention[candidates][:, candidates].T.clone()  # paid[s, d]: what destination d pays source s
    if not own_destination:
        paid.fill_diagonal_(float("-inf"))
    destinations, outputs = ranked(paid, k), ranked(ov, k)
    paid_top = paid.gather(-1, destinations)
    ov_top = ov.gather(-1, outputs)
    chosen = ranked(paid_top[:, 0] * ov_top[:, 0], n_sources)
    scores = paid_top[chosen][:, :, None] * ov_top[chosen][:, None, :]
    sources, destination_ids, output_ids = (candidates[ids] for ids in (chosen, destinations[chosen], outputs[chosen]))
    return sources, destination_ids, output_ids, scores


def packed(table: tuple[Tensor, Tensor, Tensor, Tensor]) -> Tensor:
    """A table as one float64 tensor, the form the check compares: row i is [source, its k destinations, its k
    outputs, its k x k scores row by row], (n, 1 + 2k + k^2); ids are exact in float64."""
    import torch

    sources, destinations, outputs, scores = table
    parts = [sources[:, None], destinations, outputs, scores.flatten(1)]
    return torch.cat([part.to(torch.float64) for part in parts], dim=1)


def head_tables(model: SkipTrigramModel) -> list[tuple[Tensor, Tensor, Tensor, Tensor]]:
    """The table of each of HEADS, among the whole-word tokens, by the definitions above."""
    tables = []
    for head in HEADS:
        circuits = full_circuits(model, head)
        attention = attention_to_sources(circuits["qk"], model.config_fields()["d_head"])
        tables.append(skip_trigram_table(attention, circuits["ov"], candidates(model.texts), N_SOURCES, K))
    return tables


def triples_of(table: tuple[Tensor, Tensor, Tensor, Tensor]) -> Tensor:
    """Every (source, destination, output) of a table, source by source, destination by destination: (n k k, 3)."""
    import torch

    sources, destinations, outputs, _ = table
    n, k = destinations.shape
    grid = (sources[:, None, None], destinations[:, :, None], outputs[:, None, :])
    return torch.stack([part.expand(n, k, k) for part in grid], dim=-1).reshape(-1, 3)


# --- the counts and the bugs ------------------------------------------------------------------------------------


def count_skip_trigrams(windows: Tensor, triples: Tensor, n_ctx: int) -> Tensor:
    """For each (s, d, o), the positions of the windows where d is followed by o and s is among the n_ctx - 1
    tokens before d in its window (all a destination sees in a context of n_ctx, itself aside)."""
    return counted(windows, triples, range(1, n_ctx))


def counted(windows: Tensor, triples: Tensor, back: range, per_position: bool = True) -> Tensor:
    """For each (s, d, o), the positions p of the windows with d at p and o at p + 1 where s is at p - g for some g
    of `back`, within the window; with per_position False, the (p, g) pairs instead. The training windows are 10
    million tokens: their bigrams, each coded d * d_vocab + o, are looked up once, and those found sorted by code."""
    import torch

    posn = windows.shape[1]
    d_vocab = int(max(windows.max(), triples.max())) + 1
    bigrams = windows[:, :-1] * d_vocab + windows[:, 1:]
    codes = triples[:, 1] * d_vocab + triples[:, 2]
    wanted = torch.zeros(d_vocab * d_vocab, dtype=torch.bool)
    wanted[codes] = True  # a look-up, not torch.isin, which sorts the 10 million
    rows, positions = wanted[bigrams].nonzero(as_tuple=True)
    found, order = bigrams[rows, positions].sort(stable=True)
    rows, positions = rows[order], positions[order]
    starts, ends = torch.searchsorted(found, codes), torch.searchsorted(found, codes, right=True)
    offsets = torch.tensor(list(back))
    counts = []
    for source, start, end in zip(triples[:, 0].tolist(), starts.tolist(), ends.tolist(), strict=True):
        where = positions[start:end, None] - offsets  # (found, len(back)): where s may be
        inside = (where >= 0) & (where < posn)
        seen = inside & (windows[rows[start:end, None], where.clamp(0, posn - 1)] == source)
        counts.append(int(seen.any(dim=-1).sum() if per_position else seen.sum()))
    return torch.tensor(counts, dtype=torch.long)


def skip_trigram_bugs(counts: Tensor, min_real: int) -> Tensor:
    """(n, k, k) bools: a table's cell that is not real (its count below min_real) while its row (the same
    destination) and its column (the same output) each hold a real one, the two witnesses."""
    real = min_real <= counts
    return ~real & real.any(dim=-1, keepdim=True) & real.any(dim=-2, keepdim=True)
