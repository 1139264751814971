"""Training a GPT-2-style model: the next-token loss, AdamW with GPT-2's weight decay, a warm-up and
cosine schedule, one optimisation step, evaluation, and the loop that ties them together."""

import math
from collections.abc import Iterable
from dataclasses import dataclass

import einops
import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

NO_DECAY = ("W_E", "W_pos")  # the embeddings: matrices by shape, looked up rather than multiplied


def next_token_loss(
    logits: Float[Tensor, "batch posn d_vocab"], tokens: Int[Tensor, "batch posn"]
) -> Float[Tensor, ""]:
    """The cross-entropy of predicting each next token, averaged over the batch and every position.

    Shapes: logits (batch, posn, d_vocab), tokens (batch, posn) -> a scalar (0-d tensor).
    Trap: the logits at position t predict token t + 1, so drop the last logits and the first token.
    """
    ### BEGIN SOLUTION
    log_probs = logits[:, :-1].log_softmax(dim=-1)
    targets = einops.rearrange(tokens[:, 1:], "batch posn -> batch posn 1")
    return -log_probs.gather(dim=-1, index=targets).mean()
    ### END SOLUTION


def make_optimizer(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW whose weight decay applies to the matrices only (every W_ but the embeddings W_E and
    W_pos, W_U included); biases, LayerNorm's w and b and the embeddings get none.

    Shapes: two parameter groups, every trainable parameter in exactly one.
    Trap: b_Q, b_K and b_V are 2-D and W_E is a matrix: decide by name, not by p.ndim.
    """
    ### BEGIN SOLUTION
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        leaf = name.rsplit(".", 1)[-1]
        (decay if leaf.startswith("W_") and leaf not in NO_DECAY else no_decay).append(parameter)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr)
    ### END SOLUTION


def lr_at(step: int, warmup: int, total: int, max_lr: float, min_lr: float) -> float:
    """The learning rate at `step` (counted from 0): a linear warm-up reaching max_lr at step
    warmup - 1, then a cosine decay from max_lr at step warmup to min_lr at step total, then min_lr.

    Shapes: numbers in, a float out.
    Trap: step 0 must already train: the warm-up gives max_lr * (step + 1) / warmup.
    """
    ### BEGIN SOLUTION
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if step >= total:
        return min_lr
    progress = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (max_lr - min_lr)
    ### END SOLUTION


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, batch: Int[Tensor, "batch posn"], clip: float
) -> float:
    """One optimisation step on one batch: zero the gradients, forward, next_token_loss, backward,
    clip the gradients' global norm to `clip`, step. Returns the loss before the step.

    Shapes: batch (batch, posn) -> a float.
    Trap: clip after backward and before the step; without zero_grad the gradients accumulate.
    """
    ### BEGIN SOLUTION
    model.train()
    optimizer.zero_grad()
    loss = next_token_loss(model(batch), batch)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return loss.item()
    ### END SOLUTION


def evaluate(model: nn.Module, batches: Iterable[Int[Tensor, "batch posn"]]) -> tuple[float, float]:
    """The mean next-token loss over the batches, and the fraction of next tokens that are the
    logits' argmax: in eval mode (no dropout) and under torch.inference_mode (no graph).

    Shapes: batches of (batch, posn), all the same shape -> (loss, accuracy), two floats.
    Trap: model.eval() and inference_mode are both needed; the accuracy is shifted like the loss.
    """
    ### BEGIN SOLUTION
    model.eval()  # no dropout
    losses, hits = [], []
    with torch.inference_mode():
        for batch in batches:
            logits = model(batch)
            losses.append(next_token_loss(logits, batch))
            hits.append((logits[:, :-1].argmax(dim=-1) == batch[:, 1:]).float().mean())
    return torch.stack(losses).mean().item(), torch.stack(hits).mean().item()
    ### END SOLUTION


@dataclass
class TrainingArgs:
    max_lr: float = 1e-2  # for this part's tiny models; GPT-2 small itself was trained at 6e-4
    min_lr: float = 1e-3
    warmup: int = 10
    weight_decay: float = 0.1
    clip: float = 1.0
    progress: bool = True  # show a progress bar


class Trainer:
    def __init__(self, model: nn.Module, args: TrainingArgs):
        self.model, self.args = model, args
        self.optimizer = make_optimizer(model, args.max_lr, args.weight_decay)
        self.losses: list[float] = []

    def fit(self, batches: Int[Tensor, "step batch posn"]) -> list[float]:
        """One train_step per batch, each group's learning rate set from lr_at before every step,
        with a progress bar when args.progress. Returns (and keeps in self.losses) every step's loss.

        Shapes: batches (step, batch, posn) -> a list of step floats.
        Trap: set the learning rate of every parameter group, not only the first.
        """
        ### BEGIN SOLUTION
        from rich.progress import track

        args, total = self.args, len(batches)
        for step, batch in enumerate(track(batches, description="training", disable=not args.progress)):
            for group in self.optimizer.param_groups:
                group["lr"] = lr_at(step, args.warmup, total, args.max_lr, args.min_lr)
            self.losses.append(train_step(self.model, self.optimizer, batch, args.clip))
        return self.losses
        ### END SOLUTION
