"""What the checks (in the reference builder's process) and the drivers (in the learner's) agree on that is not one of
GPT-2's tensors: text as UTF-8 bytes in a uint8 tensor (read by `tensor_text`, made by the drivers' `text_tensor`);
beams as rows [group, log-prob sum, token ids padded with PADDING] (`beam_rows`); the names of the extras a driver
reads; the tiny Transformer of the training checks; the case whose tokens the builder writes for a figure. Shared
and torch-free, so that the grader's process, which imports the checks, imports nothing of the learner's side to know
them."""

from __future__ import annotations

# The small induction model's logit lens case, and its token set (one [BOS, A, A]): the builder writes its tokens
# beside the entry for the HTML report's figure of it.
SMALL_LENS = "small_repeated"
COUNT_KEYS = (
    "embed",
    "pos_embed",
    "blocks",
    "ln_final",
    "unembed",
    "total",
    "tied",
)  # interp.parameter_counts, in order
END_OF_TEXT = "<|endoftext|>"  # GPT-2's end-of-text token, also the stand-in tokenizer's
# The interp checks' inputs that decide, once per check, whether it runs on the learner's Transformer: a few token
# ids (a batch of two, a few positions) and GPT-2's logits on them, which the learner's must give (drivers.interp).
PROBE_TOKENS, PROBE_LOGITS, PROBE_SHAPE = "probe_tokens", "probe_logits", (2, 8)
PADDING = -1


def tensor_text(data) -> str:
    """The text in a uint8 tensor or array, zero bytes at its end (padding) left out."""
    return bytes(data.tolist()).rstrip(b"\0").decode("utf-8")


TINY = {"d_model": 32, "n_heads": 4, "d_head": 8, "d_mlp": 128, "n_layers": 1, "n_ctx": 32}  # and a d_vocab
BLOCK_PARAMETERS = (
    "ln1.w",
    "ln1.b",
    "attn.W_Q",
    "attn.W_K",
    "attn.W_V",
    "attn.W_O",
    "attn.b_Q",
    "attn.b_K",
    "attn.b_V",
    "attn.b_O",
    "ln2.w",
    "ln2.b",
    "mlp.W_in",
    "mlp.b_in",
    "mlp.W_out",
    "mlp.b_out",
)
PARAMETER_NAMES = (  # the tiny Transformer's parameters, named as GPT-2's: make_optimizer's rows, in order
    "embed.W_E",
    "pos_embed.W_pos",
    *(f"blocks.{layer}.{name}" for layer in range(TINY["n_layers"]) for name in BLOCK_PARAMETERS),
    "ln_final.w",
    "ln_final.b",
    "unembed.W_U",
    "unembed.b_U",
)

# The playground's drivers (learner.drivers.play) and the grader's side (host.play): what `inside` leaves as its
# captures, in order; the file its stacks go to shortly before its time is up (at that fraction), for a loop's line.
PLAY_INSIDE = ("patterns", "lens_p", "lens_ids", "stood_in")
PLAY_STACKS, PLAY_STACKS_AT = "play-stacks.txt", 0.9
