"""Part 6 as a command: does concatenating positions to the tokens, rather than adding them, help a model's sense of
position?

    python -m grader.builder.positions_experiment [--exercises PATH] [--steps N] [--seeds N] [--out DIR]
    (or: make experiment-positions)

It trains, once per seed, your `Transformer` (token and position embeddings added, as GPT-2 does) and your
`ConcatTransformer` (the residual stream starts as [token embedding | position embedding]) at two splits of the
width, with your `Trainer` on the offline corpus, then measures each model's held-out loss and how well a linear
probe reads the position (0 to 63) off its final residual stream (ln_final's input).

What is matched: every model has the same width (d_model 64), context, layers, heads and MLPs, so the blocks are
identical; only the embeddings differ. The concatenated models therefore have fewer parameters, all of them in a
narrower token embedding. Matching the total instead would need a wider residual stream, and so other blocks, for
the concatenated model: the question is about the stream's layout, so the blocks are what is held fixed. The two
splits (32 + 32 and 48 + 16) trade the position embedding's width against the token embedding's, and so against the
parameter gap (67,584 and 35,840 fewer than the added model's 368,384).

The probe: least squares from the residual vector (and a constant) to the one-hot position, fitted on half of the
held-out sequences and scored on the other half; its number is the fraction of positions it names exactly (chance:
1 in 64). A difference counts only if it is larger than the two models' standard deviations across seeds together.

Each seed sets the initial weights and the training batches (the same batches for every model), so the results
are the same on every run with the same seeds. The runs share the machine's cores, one process and one torch thread
each: about 8 minutes of CPU time in all at the defaults, so 4 minutes or more on 2 cores. It writes to DIR (default
experiment-output/) `positions.png` (every run's loss curve, the held-out losses and the probe's scores) and
`positions.md` (the table it prints). Nothing is graded: this runs your code in this process and its workers, as a
notebook would.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from grader.builder.train import BATCH, D_VOCAB, POSN, SHAPE, learner_package, run_learner_code
from grader.shared.commands import tool_parser

D_MODEL = SHAPE["d_model"]
SPLITS = (None, 32, 48)  # the token embedding's width: None adds the embeddings, a number concatenates
HELD_OUT_BATCHES = 8
SMOOTHING = 25  # steps averaged in the thick loss curves: one step's loss is too noisy to compare
RIDGE = 1e-4  # keeps the probe's least squares solvable where the residual stream has a direction it never uses
COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red")


def model_name(d_token: int | None) -> str:
    return "added" if d_token is None else f"concat {d_token}+{D_MODEL - d_token}"


@dataclasses.dataclass
class Run:
    """One model trained from one seed, and what was measured of it."""

    name: str
    seed: int
    parameters: int
    embedding_parameters: int
    losses: list[float]
    held_out_loss: float
    probe: float


def build(module, d_token: int | None, d_vocab: int):
    """The added model (d_token None) or the concatenated one, at the shape `make train` trains."""
    cfg = dataclasses.replace(module("config").Config(), **SHAPE, d_vocab=d_vocab)
    if d_token is None:
        return module("transformer").Transformer(cfg)
    return module("positions").ConcatTransformer(cfg, d_token)


def final_residuals(model, batches):
    """ln_final's input on every batch, as (sequences, posn, d_model)."""
    import torch

    caught = []
    hook = model.ln_final.register_forward_pre_hook(lambda _module, args: caught.append(args[0]))
    model.eval()
    try:
        with torch.no_grad():
            for windows in batches:
                model(windows)
    finally:
        hook.remove()
    return torch.cat(caught)


def position_probe(residuals) -> float:
    """The fraction of the second half's positions that least squares, fitted on the first half, names exactly."""
    import torch

    sequences, posn, _ = residuals.shape
    features = torch.cat([residuals.double(), torch.ones(sequences, posn, 1, dtype=torch.float64)], dim=-1)
    positions = torch.arange(posn).expand(sequences, posn)
    fit, score = sequences // 2, slice(sequences // 2, None)
    x = features[:fit].flatten(0, 1)
    y = torch.nn.functional.one_hot(positions[:fit].flatten(), posn).double()
    gram = x.T @ x
    ridge = RIDGE * gram.diagonal().mean() * torch.eye(len(gram), dtype=torch.float64)
    weights = torch.linalg.solve(gram + ridge, x.T @ y)
    named = (features[score] @ weights).argmax(dim=-1)
    return (named == positions[score]).double().mean().item()


def train_one(exercises: Path, d_token: int | None, seed: int, steps: int) -> dict:
    """One run, in a worker process; a plain dict, which pickles back whatever name this module runs under."""
    import torch

    from grader.builder import corpus

    torch.set_num_threads(1)  # the model's matrices are too small to share between threads
    module = learner_package(exercises)
    training = module("training")
    text = corpus.load().capped(D_VOCAB)
    batches = text.train_batches(n_batches=steps, batch_size=BATCH, posn=POSN, seed=seed)
    held_out = text.held_out_batches(n_batches=HELD_OUT_BATCHES, batch_size=BATCH, posn=POSN)
    torch.manual_seed(seed)
    model = build(module, d_token, text.d_vocab)
    trainer = training.Trainer(model, dataclasses.replace(training.TrainingArgs(), progress=False))
    losses = [float(loss) for loss in trainer.fit(batches)]
    loss, _ = training.evaluate(model, held_out)
    embeddings = (model.embed, model.pos_embed)
    return {
        "name": model_name(d_token),
        "seed": seed,
        "parameters": sum(p.numel() for p in model.parameters()),
        "embedding_parameters": sum(p.numel() for part in embeddings for p in part.parameters()),
        "losses": losses,
        "held_out_loss": loss,
        "probe": position_probe(final_residuals(model, held_out)),
    }


def check_package(exercises: Path) -> None:
    """Build each model and run it once here, so unfinished code fails before any worker starts."""
    import torch

    module = learner_package(exercises)
    tokens = torch.zeros(1, POSN, dtype=torch.int64)
    for d_token in SPLITS:
        build(module, d_token, D_VOCAB)(tokens)


def run_all(exercises: Path, steps: int, seeds: int) -> list[Run]:
    """Every model from every seed, one run per core at a time, each in a worker process of its own."""
    from grader.builder import corpus

    corpus.load()  # builds the cache once, before the workers read it
    jobs = [(d_token, seed) for seed in range(seeds) for d_token in SPLITS]
    with ProcessPoolExecutor(min(len(jobs), os.cpu_count() or 1), mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(train_one, exercises, d_token, seed, steps) for d_token, seed in jobs]
        runs = []
        try:
            for future in futures:
                runs.append(Run(**future.result()))
                print(
                    f"  {runs[-1].name}, seed {runs[-1].seed}: held-out loss {runs[-1].held_out_loss:.3f}", flush=True
                )
        except BaseException:
            pool.shutdown(cancel_futures=True)  # one run failed: the others would fail the same way
            raise
    return runs


def spread(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values)


def table(runs: list[Run], seeds: int) -> str:
    lines = [
        "| model | parameters (embeddings) | held-out loss | position probe accuracy | seeds |",
        "|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(run.name for run in runs):
        mine = [run for run in runs if run.name == name]
        loss, loss_sd = spread([run.held_out_loss for run in mine])
        probe, probe_sd = spread([run.probe for run in mine])
        size = f"{mine[0].parameters:,} ({mine[0].embedding_parameters:,})"
        lines.append(f"| {name} | {size} | {loss:.3f} ± {loss_sd:.3f} | {probe:.1%} ± {probe_sd:.1%} | {seeds} |")
    return "\n".join(lines)


def verdict(runs: list[Run], seeds: int) -> str:
    """Two sentences: what the numbers show against the added model, and what they cannot."""
    # measure: (what it is called, the unit of its difference, the scale and decimals that unit is written at)
    measures = {"probe": ("probe", "points", 100, 1), "held_out_loss": ("held-out loss", "nats", 1, 3)}

    def of(name: str, measure: str) -> tuple[float, float]:
        return spread([getattr(run, measure) for run in runs if run.name == name])

    compared, beyond = [], []
    for name in dict.fromkeys(run.name for run in runs if run.name != "added"):
        differences = []
        for measure, (called, unit, scale, decimals) in measures.items():
            (mean, sd), (added, added_sd) = of(name, measure), of("added", measure)
            differences.append(f"{scale * (mean - added):+.{decimals}f} {unit} of {called}")
            if abs(mean - added) > sd + added_sd:
                beyond.append(f"{name}'s {called}")
        compared.append(f"{name} {' and '.join(differences)}")
    probe, loss = of("added", "probe")[0], of("added", "held_out_loss")[0]
    shown = (
        f"Against the added model (probe {probe:.1%}, held-out loss {loss:.3f}), {'; '.join(compared)}; "
        f"larger than the spread across seeds: {', '.join(beyond) or 'none'} (a smaller difference shows nothing)."
    )
    not_shown = (
        f"This is one small model (2 layers, d_model {D_MODEL}), one corpus, {seeds} seeds and a narrower token "
        "embedding in the concatenated models, and the probe measures what is linearly readable (an untrained "
        "stream holds its position embedding intact), not what the model uses: it says nothing of GPT-2's size."
    )
    return f"{shown}\n{not_shown}"


def smoothed(values: list[float], width: int) -> list[float]:
    """The mean of each value and the width - 1 before it (fewer at the start)."""
    return [statistics.mean(values[max(0, i + 1 - width) : i + 1]) for i in range(len(values))]


def dots(axes, index: int, values: list[float], colour: str) -> None:
    """One model's per-seed values as dots at x = index, their mean as a bar."""
    axes.scatter([index] * len(values), values, color=colour, s=18, zorder=2)
    axes.hlines(statistics.mean(values), index - 0.25, index + 0.25, color=colour, linewidth=2)


def plot(runs: list[Run], path: Path) -> None:
    """Every run's training loss (thin) with each model's smoothed mean (thick), and each model's held-out loss and
    probe score per seed (dots) with their means (bars)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 4), dpi=100, layout="constrained")
    curves, held_out, probes = figure.subplots(1, 3, width_ratios=(2, 1, 1))
    names = list(dict.fromkeys(run.name for run in runs))
    for index, (name, colour) in enumerate(zip(names, COLOURS, strict=False)):
        mine = [run for run in runs if run.name == name]
        steps = range(1, len(mine[0].losses) + 1)
        for run in mine:
            curves.plot(steps, run.losses, color=colour, linewidth=0.5, alpha=0.35)
        mean = [statistics.mean(losses) for losses in zip(*(run.losses for run in mine), strict=True)]
        curves.plot(steps, smoothed(mean, SMOOTHING), color=colour, linewidth=2, label=f"{name} (mean of seeds)")
        dots(held_out, index, [run.held_out_loss for run in mine], colour)
        dots(probes, index, [run.probe for run in mine], colour)
    probes.axhline(1 / POSN, linestyle=":", color="gray", label=f"chance (1 in {POSN})")
    curves.set(xlabel="step", ylabel="training loss (nats)", title="training loss: thin, each seed")
    curves.legend(fontsize=8)
    held_out.set(ylabel="held-out loss (nats)", title="held-out loss")
    probes.set(ylabel="positions named exactly", title="linear probe of position")
    probes.yaxis.set_major_formatter("{x:.0%}")
    probes.legend(fontsize=8)
    for axes in (held_out, probes):
        axes.set_xticks(range(len(names)), names, fontsize=8)
    figure.savefig(path, format="png")


def experiment(exercises: Path, steps: int, seeds: int, out: Path) -> dict[str, Path]:
    check_package(exercises)
    runs = run_all(exercises, steps, seeds)
    out.mkdir(parents=True, exist_ok=True)
    written = {"plot": out / "positions.png", "table": out / "positions.md"}
    plot(runs, written["plot"])
    summary = f"{table(runs, seeds)}\n\n{verdict(runs, seeds)}"
    written["table"].write_text(summary + "\n", encoding="utf-8")
    print(f"\nafter {steps} steps:\n{summary}")
    return written


def parser() -> argparse.ArgumentParser:
    p = tool_parser("grader.builder.positions_experiment", __doc__)
    p.add_argument("--exercises", type=Path, default=Path("exercises"), metavar="PATH", help="default: ./exercises")
    p.add_argument("--steps", type=int, default=500, metavar="N", help="training steps per run (default 500)")
    p.add_argument("--seeds", type=int, default=3, metavar="N", help="runs of each model (default 3, at least 2)")
    p.add_argument(
        "--out", type=Path, default=Path("experiment-output"), metavar="DIR", help="default: ./experiment-output"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.steps < 1 or args.seeds < 2:
        print(
            "experiment-positions: --steps must be at least 1, --seeds at least 2 (a spread needs two)", file=sys.stderr
        )
        return 2
    exercises = args.exercises.resolve()
    return run_learner_code(
        "experiment-positions",
        exercises,
        lambda: experiment(exercises, args.steps, args.seeds, args.out),
        "grade training and grade experiments",
    )


if __name__ == "__main__":
    sys.exit(main())
