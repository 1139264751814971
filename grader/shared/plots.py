"""Pictures drawn the same way wherever they appear: the training loss curve, for `make train`'s loss.png
(the builder's side) and the HTML report (the grader's process). matplotlib only, imported on first use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def loss_curve(losses: Sequence[float], title: str, levels: Mapping[str, float] | None = None) -> Figure:
    """Training loss by step, with each of `levels` (a held-out loss, a bar to beat) as a labelled line."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 3.5), dpi=100, layout="constrained")
    axes = figure.subplots()
    axes.plot(range(1, len(losses) + 1), losses, label="training loss")
    for (label, level), style in zip((levels or {}).items(), ("--", ":", "-."), strict=False):
        axes.axhline(level, linestyle=style, color="gray", label=label)
    axes.set(xlabel="step", ylabel="loss (nats)", title=title)
    if levels:
        axes.legend(fontsize=8)
    return figure
