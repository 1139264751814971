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
    # TODO: implement this (see the docstring above)
    raise NotImplementedError()


def logit_lens(model: Transformer, tokens: Int[Tensor, "batch posn"]) -> Float[Tensor, "layer batch posn d_vocab"]:
    """Read the residual stream with the model's own readout: ln_final then unembed, applied to the
    stream before each block and after the last one.

    Shapes: tokens (batch, posn) -> (n_layers + 1, batch, posn, d_vocab); the last entry is the logits.
    Trap: apply ln_final to each stream, with that stream's own mean and variance.
    """
    # TODO: implement this (see the docstring above)
    raise NotImplementedError()


def qk_circuit(attn: Attention, head: int) -> Float[Tensor, "d_model_Q d_model_K"]:
    """The head's bilinear form on (query, key) residual vectors: W_Q W_K^T, biases ignored.

    Shapes: W_Q[head] and W_K[head] are (d_model, d_head) -> (d_model, d_model).
    Trap: rows index the query side; W_K W_Q^T is the transpose.
    """
    # TODO: implement this (see the docstring above)
    raise NotImplementedError()


def ov_circuit(attn: Attention, head: int) -> Float[Tensor, "d_model_in d_model_out"]:
    """What the head writes for what it reads from an attended position: W_V W_O, biases ignored.

    Shapes: W_V[head] (d_model, d_head) and W_O[head] (d_head, d_model) -> (d_model, d_model).
    Trap: one head only; the full attention output sums every head's.
    """
    # TODO: implement this (see the docstring above)
    raise NotImplementedError()


def fold_layernorm(
    ln: LayerNorm, W: Float[Tensor, "d_model d_out"], b: Float[Tensor, "d_out"]
) -> tuple[Float[Tensor, "d_model d_out"], Float[Tensor, "d_out"]]:
    """Fold LayerNorm's w and b into the linear map x -> x W + b that follows it, so that
    x_hat W_folded + b_folded == (x_hat * w + ln.b) W + b for the normalised x_hat.

    Shapes: W (d_model, d_out), b (d_out) -> the same.
    Trap: ln.b passes through W too: b_folded = ln.b W + b.
    """
    # TODO: implement this (see the docstring above)
    raise NotImplementedError()


def direct_path_logits(model: Transformer, tokens: Int[Tensor, "batch posn"]) -> Float[Tensor, "batch posn d_vocab"]:
    """The logits of the direct path alone, token embedding straight into the unembedding:
    W_E[tokens] W_U + b_U, a bigram-like table read at each token.

    Shapes: tokens (batch, posn) -> (batch, posn, d_vocab).
    Trap: no positional embedding and no LayerNorm on this path.
    """
    # TODO: implement this (see the docstring above)
    raise NotImplementedError()


def is_tied(model: Transformer) -> bool:
    """Whether the unembedding is exactly the embedding reused: W_U == W_E^T.

    Shapes: W_E (d_vocab, d_model), W_U (d_model, d_vocab) -> a bool.
    Trap: compare every entry exactly; equal shapes or norms are not enough.
    """
    # TODO: implement this (see the docstring above)
    raise NotImplementedError()


def erase_direction(
    x: Float[Tensor, "batch posn d_model"], v: Float[Tensor, "d_model"]
) -> Float[Tensor, "batch posn d_model"]:
    """An idealised ReLU neuron with input direction v and output direction -v:
    x - v ReLU(v . x), which removes x's component along the unit vector v when it is positive.

    Shapes: x (batch, posn, d_model), v (d_model) -> (batch, posn, d_model).
    Trap: the ReLU acts on the projection v . x, not on x; a negative component stays.
    """
    # TODO: implement this (see the docstring above)
    raise NotImplementedError()
