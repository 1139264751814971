"""Drivers of the training checks.

The function checks drive the learner's code with `TinyLM` (`tiny_lm`), a seeded stand-in the
reference builder builds too, to take the grader's own step on it; only make_optimizer and the
outcome use the learner's `Transformer`, at the TINY config (the grader's stand-in where the learner's does
not import or fails its own check: `stand_in_transformer`), its config and parameters named in
`grader.shared.formats`. Answers that are not tensors travel as float64 tensors.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from grader.shared.formats import PARAMETER_NAMES, TINY

if TYPE_CHECKING:
    from torch import Tensor, nn


def learner_function(ctx):
    """The learner's training function named by the check, remembered as the place to point at."""
    function = ctx.package.attribute(ctx.target.file, ctx.target.name)
    ctx.point_at(function)
    return function


def tiny_transformer(ctx, d_vocab: int) -> nn.Module:
    """The learner's Transformer at the TINY config with this vocabulary, initialised as the learner's
    code does (the learner's process seeds torch before every case); the stand-in, from its own seed, where
    the learner's does not import or fails its own check (tried with probe weights, its own put back)."""
    from grader.learner.drivers.stand_in_transformer import agrees_on_probe_weights, fault, seeded

    config = ctx.package.attribute("config", "Config")()
    if not dataclasses.is_dataclass(config):
        raise TypeError("Config must be a dataclass: the training checks build a tiny one with dataclasses.replace")
    tiny = dataclasses.replace(config, **TINY, d_vocab=d_vocab)
    built = {}

    def sound(cls) -> bool:
        built["own"] = cls(tiny)
        return agrees_on_probe_weights(built["own"], tiny)

    ctx.update_reply(stand_in=fault(ctx, sound))
    if ctx.reply.stand_in:
        return seeded(tiny)
    return built["own"] if "own" in built else ctx.package.attribute("transformer", "Transformer")(tiny)


def as_number(value, what: str) -> float:
    from torch import Tensor

    if isinstance(value, Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, (int, float)):
        return float(value)
    raise TypeError(f"{what} returned a {type(value).__name__}, not a number")


def groups(ctx, args) -> Tensor:
    """make_optimizer(model, lr, weight_decay) as rows [groups holding it, weight decay, lr], one per
    parameter in PARAMETER_NAMES order."""
    import torch

    lr, weight_decay = float(args[0]), float(args[1])
    model = tiny_transformer(ctx, d_vocab=int(args[2]))
    optimizer = learner_function(ctx)(model, lr, weight_decay)
    if not isinstance(optimizer, torch.optim.AdamW):
        raise TypeError(f"make_optimizer returned a {type(optimizer).__name__}, not a torch.optim.AdamW")
    named = dict(model.named_parameters())
    missing = [name for name in PARAMETER_NAMES if name not in named]
    if missing:
        raise LookupError(f"the tiny Transformer has no parameter {missing[0]}")
    rows = {name: [0.0, 0.0, 0.0] for name in PARAMETER_NAMES}
    by_id = {id(param): name for name, param in named.items()}
    for group in optimizer.param_groups:
        for param in group["params"]:
            row = rows[by_id[id(param)]]
            row[0] += 1
            row[1:] = [group["weight_decay"], group["lr"]]
    for name, row in rows.items():
        if row[0] == 0 and not named[name].requires_grad:
            row[:] = [1.0, 0.0, lr]  # a frozen parameter left out trains exactly as one never decayed
    return torch.tensor([rows[name] for name in PARAMETER_NAMES], dtype=torch.float64)


def schedule(ctx, args) -> Tensor:
    """lr_at at each of args[0]'s steps, the schedule's other arguments from args[1]."""
    import torch

    warmup, total, max_lr, min_lr = args[1].tolist()
    lr_at = learner_function(ctx)
    return torch.tensor(
        [as_number(lr_at(step, int(warmup), int(total), max_lr, min_lr), "lr_at") for step in args[0].tolist()],
        dtype=torch.float64,
    )


def steps(ctx, args) -> Tensor:
    """train_step on TinyLM with the grader's SGD, once per batch of args[0]: the losses returned,
    then every parameter after the last step."""
    import torch

    from grader.learner.drivers.tiny_lm import TinyLM, flat_parameters

    batches, clip, lr = args[0], float(args[1]), float(args[2])
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    train_step = learner_function(ctx)
    with torch.enable_grad():  # the learner's process runs every case under no_grad
        losses = [as_number(train_step(model, optimizer, batch, clip), "train_step") for batch in batches]
    return torch.cat([torch.tensor(losses), flat_parameters(model)]).double()


def evaluation(ctx, args) -> Tensor:
    """evaluate(model, batches) on TinyLM with dropout, left in training mode with gradients on as
    after training. args[1] 0: [loss, accuracy]; 1: the fractions of forwards in training mode and
    with gradients enabled."""
    import torch

    from grader.learner.drivers.tiny_lm import TinyLM

    model = TinyLM(dropout=0.5).train()
    with torch.enable_grad():
        answer = learner_function(ctx)(model, args[0])
    if not (isinstance(answer, tuple) and len(answer) == 2):
        raise TypeError("evaluate must return a tuple (loss, accuracy)")
    if int(args[1]):
        modes = torch.tensor(model.seen, dtype=torch.float64).reshape(-1, 2)
        return modes.mean(dim=0) if len(modes) else torch.zeros(2, dtype=torch.float64)
    return torch.tensor(
        [as_number(answer[0], "evaluate's loss"), as_number(answer[1], "evaluate's accuracy")], dtype=torch.float64
    )


def held_out_loss(model: nn.Module, batches: Tensor) -> float:
    """The grader's own mean next-token loss on (n, batch, posn) batches, whatever the learner's loss computes."""
    import torch
    from torch import nn

    model.train(False)
    with torch.no_grad():
        losses = [
            nn.functional.cross_entropy(model(batch)[:, :-1].flatten(0, 1), batch[:, 1:].flatten()) for batch in batches
        ]
    return torch.stack(losses).mean().item()


def stepped_rates(fit):
    """`fit()`'s return value, and for every optimiser step it took the learning rate of its first and of its last
    parameter group, read as the step begins (torch's global step hook: whatever optimiser the loop steps)."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    rates: list[tuple[float, float]] = []

    def record(optimizer, *_):
        groups = optimizer.param_groups
        rates.append((as_number(groups[0]["lr"], "a group's lr"), as_number(groups[-1]["lr"], "a group's lr")))

    handle = register_optimizer_step_pre_hook(record)
    try:
        return fit(), rates
    finally:
        handle.remove()


def outcome(ctx, args) -> Tensor:
    """The learner's Trainer fits the learner's tiny Transformer to the corpus's training batches; [held-out loss
    by the grader, seconds, every step's loss, every step's lr of the first parameter group, then of the last]."""
    import torch

    max_lr, min_lr, warmup, weight_decay, clip, d_vocab = args[0].tolist()
    trainer_class = ctx.package.attribute("training", "Trainer")
    ctx.point_at(getattr(trainer_class, "fit", trainer_class))
    training_args = ctx.package.attribute("training", "TrainingArgs")(
        max_lr=max_lr, min_lr=min_lr, warmup=int(warmup), weight_decay=weight_decay, clip=clip, progress=False
    )
    model = tiny_transformer(ctx, int(d_vocab))
    train = ctx.tensor("train")
    started = time.monotonic()
    with torch.enable_grad():
        trainer = trainer_class(model, training_args)
        losses, rates = stepped_rates(lambda: trainer.fit(train))
    seconds = time.monotonic() - started
    if len(losses) != len(train):
        raise ValueError(f"Trainer.fit returned {len(losses)} losses for {len(train)} batches")
    if len(rates) != len(train):
        raise ValueError(f"Trainer.fit stepped the optimizer {len(rates)} times for {len(train)} batches")
    losses = [as_number(loss, "Trainer.fit") for loss in losses]
    firsts, lasts = zip(*rates, strict=True)
    held_out = held_out_loss(model, ctx.tensor("held_out"))
    return torch.tensor([held_out, seconds, *losses, *firsts, *lasts], dtype=torch.float64)
