"""Skip-trigrams: the heads of a one-layer attention-only model read as tables of `source ... destination -> output`,
how often the training text holds them, and the bugs the factoring of QK and OV forces.

In such a model nothing sits between the token embedding and a head, or between the head and the unembedding, so a
head's full circuits are exact tables over the vocabulary: which source each destination attends to (QK) and what
each source, once attended to, adds to each output's logit (OV). The grader feeds these functions the small model of
grader/builder/attn_only_model.py: one layer, four heads, no LayerNorm, positions only in the queries and keys.
"""

import einops
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from .attention import Attention
from .interp import ov_circuit, qk_circuit


def full_ov_circuit(
    W_E: Float[Tensor, "d_vocab d_model"], attn: Attention, W_U: Float[Tensor, "d_model d_vocab"], head: int
) -> Float[Tensor, "d_vocab_src d_vocab_out"]:
    """What attending to each source token adds to each output token's logit: W_E (W_V W_O) W_U, with your
    ov_circuit for the head's W_V W_O.

    Shapes: W_E (d_vocab, d_model), W_U (d_model, d_vocab) -> (d_vocab, d_vocab), a row per source token.
    Traps: rows index the source token, columns the output, so do not transpose; the unembedding is W_U, not W_E^T
    (this model's embedding and unembedding are untied); one head only, not every head summed.
    """
    ### BEGIN SOLUTION
    ov = ov_circuit(attn, head)
    return einops.einsum(
        W_E,
        ov,
        W_U,
        "d_vocab_src d_model_in, d_model_in d_model_out, d_model_out d_vocab_out -> d_vocab_src d_vocab_out",
    )
    ### END SOLUTION


def full_qk_circuit(
    W_E: Float[Tensor, "d_vocab d_model"], attn: Attention, head: int
) -> Float[Tensor, "d_vocab_dst d_vocab_src"]:
    """Each destination token's attention score on each source token: W_E (W_Q W_K^T) W_E^T, with your qk_circuit,
    positions and biases left out.

    Shapes: W_E (d_vocab, d_model) -> (d_vocab, d_vocab), a row per destination (query) token.
    Traps: rows index the destination, the query side, so W_E qk W_E^T and not its transpose; no 1/sqrt(d_head)
    here: that scale belongs to the softmax.
    """
    ### BEGIN SOLUTION
    qk = qk_circuit(attn, head)
    return einops.einsum(
        W_E,
        qk,
        W_E,
        "d_vocab_dst d_model_Q, d_model_Q d_model_K, d_vocab_src d_model_K -> d_vocab_dst d_vocab_src",
    )
    ### END SOLUTION


def attention_to_sources(
    full_qk: Float[Tensor, "d_vocab_dst d_vocab_src"], d_head: int
) -> Float[Tensor, "d_vocab_dst d_vocab_src"]:
    """The attention each destination token pays each source token when every token is in the context once: the
    softmax of the scaled scores over all the sources. A statement about tokens alone: in a real context, positions
    add their own terms to the scores.

    Shapes: (d_vocab, d_vocab) -> the same; each row sums to 1.
    Traps: the softmax is over the sources, the last axis, so each destination's row sums to 1; divide the scores by
    sqrt(d_head) first, as the attention does.
    """
    ### BEGIN SOLUTION
    return (full_qk / d_head**0.5).softmax(dim=-1)
    ### END SOLUTION


def skip_trigram_table(
    attention: Float[Tensor, "d_vocab_dst d_vocab_src"],
    full_ov: Float[Tensor, "d_vocab_src d_vocab_out"],
    candidates: Int[Tensor, " c"],
    n_sources: int,
    k: int,
) -> tuple[Int[Tensor, " n"], Int[Tensor, "n k"], Int[Tensor, "n k"], Float[Tensor, "n k k"]]:
    """A head's strongest skip-trigrams `s ... d -> o`, scored attention[d, s] * OV'[s, o], where OV' is full_ov
    less each row's mean over every output (a constant added to every logit changes no prediction).

    Among the candidates (token ids, ascending), each source s gets its top-k destinations d (other than s) by
    attention[d, s] and its top-k outputs o by OV'[s, o]; its strength is the score of its best destination with
    its best output. Return the n_sources strongest sources, their destinations, their outputs and the k x k
    scores, scores[i, a, b] that of (sources[i], destinations[i, a], outputs[i, b]). Ties go to the lower id: sort
    with stable=True.

    Shapes: -> sources (n_sources,), destinations and outputs (n_sources, k) of token ids, scores (n_sources, k, k).
    Traps: centre each source's OV row; take the mean over all d_vocab outputs, before taking the candidates; a
    source is never its own destination; a source's destinations are read down its column of attention (what each
    destination pays it), not along its row.
    """
    ### BEGIN SOLUTION
    centred_ov = full_ov - full_ov.mean(dim=-1, keepdim=True)
    ov = centred_ov[candidates][:, candidates]  # [s, o] among the candidates
    paid = einops.rearrange(attention[candidates][:, candidates], "dst src -> src dst")
    paid = paid.fill_diagonal_(float("-inf"))  # a source is not its own destination
    destinations = paid.sort(dim=-1, descending=True, stable=True).indices[:, :k]
    outputs = ov.sort(dim=-1, descending=True, stable=True).indices[:, :k]
    paid_top, ov_top = paid.gather(-1, destinations), ov.gather(-1, outputs)
    strength = paid_top[:, 0] * ov_top[:, 0]
    chosen = strength.sort(descending=True, stable=True).indices[:n_sources]
    scores = einops.einsum(paid_top[chosen], ov_top[chosen], "n k_dst, n k_out -> n k_dst k_out")
    return candidates[chosen], candidates[destinations[chosen]], candidates[outputs[chosen]], scores
    ### END SOLUTION


def count_skip_trigrams(
    windows: Int[Tensor, "batch posn"], triples: Int[Tensor, "t 3"], n_ctx: int
) -> Int[Tensor, " t"]:
    """How often the text holds each skip-trigram (s, d, o): the positions p of the windows where d is at p, o at
    p + 1, and s among the n_ctx - 1 tokens before p in the same window (what d sees in a context of n_ctx).

    Shapes: windows (batch, posn) of token ids, each a text of its own; triples (t, 3) rows (s, d, o) -> (t,) ints.
    Traps: s is strictly before d, never at d's own position nor after it; d sees n_ctx tokens, itself included, so
    s is at most n_ctx - 1 back; each window is a text of its own, so nothing crosses from one window into the next;
    count positions, not (s, position) pairs: two s before one d count once.
    """
    ### BEGIN SOLUTION
    counts = []
    for s, d, o in triples.tolist():
        rows, posns = ((windows[:, :-1] == d) & (windows[:, 1:] == o)).nonzero(as_tuple=True)
        back = torch.arange(1, n_ctx, device=windows.device)  # s is 1 to n_ctx - 1 tokens before d
        before = einops.rearrange(posns, "found -> found 1") - back  # (found, n_ctx - 1) positions
        s_there = windows[einops.rearrange(rows, "found -> found 1"), before.clamp(min=0)] == s
        seen = s_there & (before >= 0)  # a position before the window's start holds nothing
        counts.append(int(seen.any(dim=-1).sum()))
    return torch.tensor(counts, dtype=torch.int64)
    ### END SOLUTION


def skip_trigram_bugs(counts: Int[Tensor, "n k k"], min_real: int) -> Bool[Tensor, "n k k"]:
    """The skip-trigram bugs of a table: counts[i, a, b] is how often the text holds (sources[i],
    destinations[i, a], outputs[i, b]); a trigram is real when it occurs min_real times or more. A cell is a bug
    when it is not real while its row (the same destination, another output) and its column (the same output,
    another destination) each hold a real trigram: the head raises it only because it must raise those two.

    Shapes: (n, k, k) counts -> (n, k, k) bools.
    Traps: not real means fewer than min_real, not zero; a bug needs both witnesses, a real trigram in its row and
    one in its column.
    """
    ### BEGIN SOLUTION
    real = counts >= min_real
    in_its_row = real.any(dim=-1, keepdim=True)
    in_its_column = real.any(dim=-2, keepdim=True)
    return ~real & in_its_row & in_its_column
    ### END SOLUTION
