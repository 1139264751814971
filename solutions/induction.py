"""Induction heads: repeated tokens, the heads that attend to the previous token and to the token after the
previous occurrence, what ablating them costs, their direct effect on the logits and how they compose.

Every function takes tensors (attention patterns, activations, weights), so it runs on any model: the grader
feeds it the small trained model's (and GPT-2's, when GPT-2's weights are here).
"""

import einops
import torch
from jaxtyping import Float, Int
from torch import Tensor


def repeated_tokens(batch: int, seq_len: int, d_vocab: int, bos: int, seed: int) -> Int[Tensor, "batch 1+2*seq_len"]:
    """A batch of sequences [BOS, seq_len random tokens, the same seq_len tokens again], the input on which an
    induction head shows itself: in the second half, each token's next token can be read from the first half.

    Shapes: -> (batch, 1 + 2 * seq_len), int64 ids in [0, d_vocab), each row its own random tokens.
    Trap: the same seed must give the same tokens: draw from a generator seeded with `seed`, not the global state.
    """
    ### BEGIN SOLUTION
    seeded = torch.Generator().manual_seed(seed)
    first_half = torch.randint(0, d_vocab, (batch, seq_len), generator=seeded)
    bos_column = torch.full((batch, 1), bos, dtype=first_half.dtype)
    return torch.cat([bos_column, first_half, first_half], dim=1)
    ### END SOLUTION


def per_token_loss(
    logits: Float[Tensor, "batch posn d_vocab"], tokens: Int[Tensor, "batch posn"]
) -> Float[Tensor, "batch posn-1"]:
    """The cross-entropy of each next token: entry [b, p] is -log P(tokens[b, p + 1]) under logits[b, p].

    Shapes: logits (batch, posn, d_vocab), tokens (batch, posn) -> (batch, posn - 1).
    Trap: position p predicts the token at p + 1, not its own token.
    """
    ### BEGIN SOLUTION
    log_probs = logits.log_softmax(dim=-1)[:, :-1]
    next_tokens = einops.rearrange(tokens[:, 1:], "batch posn -> batch posn 1")
    return -log_probs.gather(dim=-1, index=next_tokens).squeeze(-1)
    ### END SOLUTION


def previous_token_scores(patterns: Float[Tensor, "layer head query key"]) -> Float[Tensor, "layer head"]:
    """How much each head attends to the previous token: the mean of its attention from each position p to
    p - 1, the pattern's first diagonal below the main one.

    Shapes: patterns (n_layers, n_heads, posn, posn), each row a query's attention -> (n_layers, n_heads).
    Trap: the main diagonal is a token attending to itself; the previous token is one below it.
    """
    ### BEGIN SOLUTION
    below_diagonal = patterns.diagonal(offset=-1, dim1=-2, dim2=-1)
    return einops.reduce(below_diagonal, "layer head posn -> layer head", "mean")
    ### END SOLUTION


def induction_scores(patterns: Float[Tensor, "layer head query key"], seq_len: int) -> Float[Tensor, "layer head"]:
    """How much each head attends as an induction head on [BOS, A, A] sequences (A of seq_len tokens): the
    mean attention from each position q of the repeated half to q - seq_len + 1, the token after the previous
    occurrence of token q, which is the token to predict next.

    Shapes: patterns (n_layers, n_heads, 1 + 2 * seq_len, 1 + 2 * seq_len) -> (n_layers, n_heads).
    Trap: the stripe is seq_len - 1 below the diagonal (seq_len below is the previous occurrence itself), and
    only its last seq_len entries are queries of the repeated half.
    """
    ### BEGIN SOLUTION
    stripe = patterns.diagonal(offset=1 - seq_len, dim1=-2, dim2=-1)
    return einops.reduce(stripe[..., -seq_len:], "layer head posn -> layer head", "mean")
    ### END SOLUTION


def heads_above(scores: Float[Tensor, "layer head"], threshold: float) -> list[tuple[int, int]]:
    """The heads whose score is above the threshold, as (layer, head) pairs, layer by layer, then head by head.

    Shapes: scores (n_layers, n_heads) -> a list of (int, int).
    Trap: strictly above: a score equal to the threshold is not a head found.
    """
    ### BEGIN SOLUTION
    n_layers, n_heads = scores.shape
    return [(layer, head) for layer in range(n_layers) for head in range(n_heads) if scores[layer, head] > threshold]
    ### END SOLUTION


def ablate_head(
    z: Float[Tensor, "batch posn head d_head"], head: int, how: str
) -> Float[Tensor, "batch posn head d_head"]:
    """A hook on hook_z that removes one head: "zero" sets its z to 0, "mean" to its mean over the batch, at
    each position (what the head writes on average there), so the rest of the model sees no token-specific
    output from it.

    Shapes: z (batch, posn, n_heads, d_head) -> the same; every other head unchanged.
    Trap: the mean is over the batch only, per position and per d_head component.
    """
    ### BEGIN SOLUTION
    ablated = z.clone()
    if how == "zero":
        ablated[:, :, head] = 0.0
    elif how == "mean":
        ablated[:, :, head] = einops.reduce(z[:, :, head], "batch posn d_head -> posn d_head", "mean")
    else:
        raise ValueError(f'how is "zero" or "mean", not {how!r}')
    return ablated
    ### END SOLUTION


def ablation_cost(
    clean_logits: Float[Tensor, "batch posn d_vocab"],
    ablated_logits: Float[Tensor, "batch posn d_vocab"],
    tokens: Int[Tensor, "batch posn"],
    seq_len: int,
) -> Float[Tensor, ""]:
    """How much ablating a head raises the loss on the repeated half of [BOS, A, A] tokens: the mean of
    per_token_loss over the predictions of the repeated half's tokens, ablated minus clean.

    Shapes: logits (batch, 1 + 2 * seq_len, d_vocab), tokens (batch, 1 + 2 * seq_len) -> a scalar.
    Trap: per_token_loss[:, p] is the loss of token p + 1, so the repeated half (tokens seq_len + 1 to
    2 * seq_len) is per_token_loss[:, seq_len:].
    """
    ### BEGIN SOLUTION
    clean = per_token_loss(clean_logits, tokens)[:, seq_len:]
    ablated = per_token_loss(ablated_logits, tokens)[:, seq_len:]
    return (ablated - clean).mean()
    ### END SOLUTION


def direct_logit_attribution(
    head_outputs: Float[Tensor, "batch posn layer head d_model"],
    ln_scale: Float[Tensor, "batch posn 1"],
    ln_w: Float[Tensor, "d_model"],
    W_U: Float[Tensor, "d_model d_vocab"],
    tokens: Int[Tensor, "batch posn"],
) -> Float[Tensor, "batch posn-1 layer head"]:
    """Each head's direct contribution to the logit of the correct next token: its output passed through
    ln_final as the whole residual stream's is (centred, divided by the stream's scale, times w), then read
    with the unembedding column of the next token. ln_final's b and b_U belong to no head.

    Shapes: head_outputs (batch, posn, n_layers, n_heads, d_model), ln_scale (batch, posn, 1) -> (batch,
    posn - 1, n_layers, n_heads): position p is scored on token p + 1, so the last position has none.
    Trap: the scale is the whole stream's (ln_scale), not each head's own; each head's output is centred alone.
    """
    ### BEGIN SOLUTION
    centred = head_outputs - head_outputs.mean(dim=-1, keepdim=True)
    scale = einops.rearrange(ln_scale, "batch posn 1 -> batch posn 1 1 1")
    normalised = centred / scale * ln_w
    next_token_directions = W_U[:, tokens[:, 1:]]
    return einops.einsum(
        normalised[:, :-1],
        next_token_directions,
        "batch posn layer head d_model, d_model batch posn -> batch posn layer head",
    )
    ### END SOLUTION


def k_composition_score(
    W_OV: Float[Tensor, "d_model_in d_model_out"], W_QK: Float[Tensor, "d_model_Q d_model_K"]
) -> Float[Tensor, ""]:
    """How much an earlier head's output feeds a later head's keys: ||W_OV W_QK^T||_F / (||W_OV||_F ||W_QK||_F),
    W_OV the earlier head's OV circuit and W_QK the later head's QK circuit. Between 0 and 1; a previous-token
    head and the induction head reading it score high.

    Shapes: W_OV (d_model, d_model), W_QK (d_model, d_model) -> a scalar.
    Trap: the earlier head writes into the key side, W_QK's columns, so W_QK is transposed; then normalise.
    """
    ### BEGIN SOLUTION
    composed = einops.einsum(W_OV, W_QK, "d_model_in d_model_K, d_model_Q d_model_K -> d_model_in d_model_Q")
    return torch.linalg.matrix_norm(composed) / (torch.linalg.matrix_norm(W_OV) * torch.linalg.matrix_norm(W_QK))
    ### END SOLUTION
