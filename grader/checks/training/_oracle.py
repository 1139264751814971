"""The training checks' expected answers from first principles, and what their known mistakes give: the
cross-entropy written out (next_token_loss, and every loss the other checks compute), the parameter groups from the
parameters' names (make_optimizer), the warm-up and cosine schedule and its classic variants (lr_at, and the
trainer's schedule), SGD steps taken by hand on the stand-in `TinyLM` (train_step), the unigram bar (the trainer).
Torch is imported by the builder's process only: these run in the case builders.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from grader.shared.formats import PARAMETER_NAMES

if TYPE_CHECKING:
    from torch import Tensor

EMBEDDINGS = ("W_E", "W_pos")


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """-log softmax(logits)[target] at every position, written out: logsumexp minus the target's logit."""
    return logits.logsumexp(dim=-1) - logits.gather(-1, targets[..., None])[..., 0]


def decayed_by_name(name: str) -> bool:
    leaf = name.split(".")[-1]
    return leaf.startswith("W_") and leaf not in EMBEDDINGS


def group_rows(decayed, weight_decay: float, lr: float) -> Tensor:
    """[groups holding it, weight decay, lr] per parameter, in PARAMETER_NAMES order."""
    import torch

    return torch.tensor(
        [[1.0, weight_decay if decayed(name) else 0.0, lr] for name in PARAMETER_NAMES], dtype=torch.float64
    )


def schedule(
    steps: list[int], warmup: int, total: int, max_lr: float, min_lr: float, *, warm=None, progress=None, floor=True
) -> Tensor:
    """The warm-up and cosine schedule at each step; the keywords give its classic variants."""
    import torch

    warm = warm or (lambda step: (step + 1) / warmup)
    progress = progress or (lambda step: (step - warmup) / (total - warmup))
    rates = []
    for step in steps:
        cosine = min_lr + 0.5 * (1 + math.cos(math.pi * progress(step))) * (max_lr - min_lr)
        rates.append(max_lr * warm(step) if step < warmup else min_lr if step >= total and floor else cosine)
    return torch.tensor(rates, dtype=torch.float64)


def grader_steps(batches: Tensor, clip: float, lr: float, *, zero: str = "before", clip_at: str = "global") -> Tensor:
    """TinyLM trained by hand with SGD, one step per batch: [losses, every parameter after].

    zero: "before" (right), "never", "after_backward"; clip_at: "global" (right), "none", "each".
    """
    import torch

    from grader.learner.drivers.tiny_lm import TinyLM, flat_parameters

    model = TinyLM()
    params = list(model.parameters())
    losses = []
    for tokens in batches:
        if zero == "before":
            for param in params:
                param.grad = None
        step_loss = cross_entropy(model(tokens)[:, :-1], tokens[:, 1:]).mean()
        step_loss.backward()
        if zero == "after_backward":
            for param in params:
                param.grad.zero_()
        with torch.no_grad():
            norms = [param.grad.norm() for param in params]
            total = torch.stack(norms).norm()
            for param, norm in zip(params, norms, strict=False):
                if clip_at != "none":
                    param.grad.mul_(min(1.0, clip / (float(total if clip_at == "global" else norm) + 1e-6)))
                param.sub_(lr * param.grad)
        losses.append(step_loss.item())
    return torch.cat([torch.tensor(losses), flat_parameters(model)]).double()


def first_gradient_norm(batch: Tensor) -> float:
    from grader.learner.drivers.tiny_lm import TinyLM

    model = TinyLM()
    cross_entropy(model(batch)[:, :-1], batch[:, 1:]).mean().backward()
    return float(sum(param.grad.pow(2).sum() for param in model.parameters()) ** 0.5)


def unigram_loss(train: Tensor, held_out: Tensor, d_vocab: int) -> float:
    """The held-out loss of the training text's token frequencies (add-one smoothed): what a model
    that ignores every previous token can reach at best, near enough."""
    counts = train.flatten().bincount(minlength=d_vocab).double() + 1
    return float(-(counts / counts.sum()).log()[held_out[:, :, 1:]].mean())
