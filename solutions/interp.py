"""Looking inside: the logit lens, a head's QK and OV circuits, folding LayerNorm, the direct path."""

import einops
import torch
from jaxtyping import Float, Int
from torch import Tensor

from .attention import Attention
from .normalization import LayerNorm
from .transformer import Transformer


def parameter_counts(model: Transformer) -> dict[str, int]:
    """Parameters per top-level part (embed, pos_embed, blocks, ln_final, unembed), their total, and
    "tied": the count GPT-2 is quoted with, where the unembedding is the embedding reused.

    Shapes: a dict of ints; GPT-2 small's tied count is 124,439,808.
    Trap: b_U is a parameter too, even though it does not train (requires_grad=False).
    """
    ### BEGIN SOLUTION
    counts = {name: sum(param.numel() for param in part.parameters()) for name, part in model.named_children()}
    counts["total"] = sum(counts.values())
    counts["tied"] = counts["total"] - counts["unembed"]
    return counts
    ### END SOLUTION


def logit_lens(model: Transformer, tokens: Int[Tensor, "batch posn"]) -> Float[Tensor, "layer batch posn d_vocab"]:
    """Read the residual stream with the model's own readout: ln_final then unembed, applied to the
    stream before each block and after the last one.

    Shapes: tokens (batch, posn) -> (n_layers + 1, batch, posn, d_vocab); the last entry is the logits.
    Trap: apply ln_final to each stream, with that stream's own mean and variance.
    """
    ### BEGIN SOLUTION
    residual = model.embed(tokens) + model.pos_embed(tokens)
    streams = [residual]
    for block in model.blocks:
        residual = block(residual)
        streams.append(residual)
    return torch.stack([model.unembed(model.ln_final(stream)) for stream in streams])
    ### END SOLUTION


def qk_circuit(attn: Attention, head: int) -> Float[Tensor, "d_model_Q d_model_K"]:
    """The head's bilinear form on (query, key) residual vectors: W_Q W_K^T, biases ignored.

    Shapes: W_Q[head] and W_K[head] are (d_model, d_head) -> (d_model, d_model).
    Trap: rows index the query side; W_K W_Q^T is the transpose.
    """
    ### BEGIN SOLUTION
    return einops.einsum(attn.W_Q[head], attn.W_K[head], "d_model_Q d_head, d_model_K d_head -> d_model_Q d_model_K")
    ### END SOLUTION


def ov_circuit(attn: Attention, head: int) -> Float[Tensor, "d_model_in d_model_out"]:
    """What the head writes for what it reads from an attended position: W_V W_O, biases ignored.

    Shapes: W_V[head] (d_model, d_head) and W_O[head] (d_head, d_model) -> (d_model, d_model).
    Trap: one head only; the full attention output sums every head's.
    """
    ### BEGIN SOLUTION
    return einops.einsum(
        attn.W_V[head], attn.W_O[head], "d_model_in d_head, d_head d_model_out -> d_model_in d_model_out"
    )
    ### END SOLUTION


def fold_layernorm(
    ln: LayerNorm, W: Float[Tensor, "d_model d_out"], b: Float[Tensor, "d_out"]
) -> tuple[Float[Tensor, "d_model d_out"], Float[Tensor, "d_out"]]:
    """Fold LayerNorm's w and b into the linear map x -> x W + b that follows it, so that
    x_hat W_folded + b_folded == (x_hat * w + ln.b) W + b for the normalised x_hat.

    Shapes: W (d_model, d_out), b (d_out) -> the same.
    Trap: ln.b passes through W too: b_folded = ln.b W + b.
    """
    ### BEGIN SOLUTION
    W_folded = einops.einsum(ln.w, W, "d_model, d_model d_out -> d_model d_out")
    b_folded = einops.einsum(ln.b, W, "d_model, d_model d_out -> d_out") + b
    return W_folded, b_folded
    ### END SOLUTION


def direct_path_logits(model: Transformer, tokens: Int[Tensor, "batch posn"]) -> Float[Tensor, "batch posn d_vocab"]:
    """The logits of the direct path alone, token embedding straight into the unembedding:
    W_E[tokens] W_U + b_U, a bigram-like table read at each token.

    Shapes: tokens (batch, posn) -> (batch, posn, d_vocab).
    Trap: no positional embedding and no LayerNorm on this path.
    """
    ### BEGIN SOLUTION
    embedded = model.embed.W_E[tokens]
    logits = einops.einsum(embedded, model.unembed.W_U, "batch posn d_model, d_model d_vocab -> batch posn d_vocab")
    return logits + model.unembed.b_U
    ### END SOLUTION


def is_tied(model: Transformer) -> bool:
    """Whether the unembedding is exactly the embedding reused: W_U == W_E^T.

    Shapes: W_E (d_vocab, d_model), W_U (d_model, d_vocab) -> a bool.
    Trap: compare every entry exactly; equal shapes or norms are not enough.
    """
    ### BEGIN SOLUTION
    return torch.equal(model.unembed.W_U, model.embed.W_E.T)
    ### END SOLUTION


def erase_direction(
    x: Float[Tensor, "batch posn d_model"], v: Float[Tensor, "d_model"]
) -> Float[Tensor, "batch posn d_model"]:
    """An idealised ReLU neuron with input direction v and output direction -v:
    x - v ReLU(v . x), which removes x's component along the unit vector v when it is positive.

    Shapes: x (batch, posn, d_model), v (d_model) -> (batch, posn, d_model).
    Trap: the ReLU acts on the projection v . x, not on x; a negative component stays.
    """
    ### BEGIN SOLUTION
    component = einops.einsum(x, v, "batch posn d_model, d_model -> batch posn")
    return x - einops.einsum(component.relu(), v, "batch posn, d_model -> batch posn d_model")
    ### END SOLUTION
