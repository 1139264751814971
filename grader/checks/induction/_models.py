"""The models Part 5's induction checks run on, and their input (for the check modules and `_circuits.py`;
`interp.py` reads the same batch through `_models.repeated_batch`): the small induction model always and GPT-2 when
the reference is GPT-2's own weights (`models`), each one's batch of [BOS, A, A] tokens (`repeated_batch`), its mean
attention patterns on it (`repeated_patterns`), and the loss of each next token on it (`next_token_loss`, the
per_token_loss check's answer, which ablation_cost's reads). Torch is imported by the builder's process only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

SEQ_LEN = 20  # the length of A in [BOS, A, A]: 41 positions, within the small model's context of 64
BATCH = {"small": 8, "gpt2": 4}


def models(ref: Reference) -> list[tuple[str, Reference]]:
    """("small", the small induction model) always; ("gpt2", GPT-2) when the reference is GPT-2's own weights."""
    return [("small", ref.induction_model())] + ([("gpt2", ref)] if ref.kind == "gpt2" else [])


def repeated_batch(model: Reference, name: str) -> Tensor:
    """The model's batch of [BOS, A, A], A random: drawn once per model, from its own generator (seeded with the
    input seed), so every check sees the same tokens."""
    import torch

    if "repeated" not in model.tokens:
        generator = torch.Generator().manual_seed(model.seed)
        first = torch.randint(0, model.d_vocab, (BATCH[name], SEQ_LEN), generator=generator)
        model.tokens["repeated"] = torch.cat([torch.full((BATCH[name], 1), model.bos), first.repeat(1, 2)], dim=1)
    return model.tokens["repeated"]


def repeated_patterns(model: Reference, name: str) -> Tensor:
    """The model's attention patterns on its [BOS, A, A] batch, averaged over the batch: (layer, head, posn, posn)."""
    repeated_batch(model, name)
    return model.mean_patterns("repeated")


def next_token_loss(logits: Tensor, tokens: Tensor) -> Tensor:
    """-log softmax(logits[:, p])[tokens[:, p + 1]], written as logsumexp minus the next token's logit."""
    predicting = logits[:, :-1]
    return predicting.logsumexp(-1) - predicting.gather(-1, tokens[:, 1:, None])[..., 0]
