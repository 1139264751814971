"""Part 4 as a command: your training loop on the offline corpus, with a plot, a checkpoint and a sample.

    python -m grader.builder.train [--exercises PATH] [--steps N] [--out DIR]      (or: make train)

It trains your `Transformer` (2 layers, d_model 64, a context of 64, a vocabulary of the corpus's 2,048
most frequent tokens) with your `Trainer` on one CPU thread, then writes to DIR (default train-output/):
`loss.png` (the training loss by step), `model.pt` (the weights) and `sample.txt` (text your model
writes after a held-out prompt). Nothing is graded: this runs your code in this process, as a notebook
would; `grade training` grades it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

from grader.learner.package import learner_frame, one_line
from grader.shared.commands import tool_parser
from grader.shared.plots import loss_curve

D_VOCAB, POSN, BATCH = 2048, 64, 16
SHAPE = {"d_model": 64, "n_heads": 4, "d_head": 16, "d_mlp": 256, "n_layers": 2, "n_ctx": POSN}
PROMPT_TOKENS, SAMPLED_TOKENS = 16, 48


def learner_package(path: Path):
    """The learner's exercises as a package of its own name, so its relative imports work."""
    spec = importlib.util.spec_from_file_location("exercises_trained", path / "__init__.py")
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{path} is not a Python package (no __init__.py)")
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    return lambda file: importlib.import_module(f"{spec.name}.{file}")


def plot(losses: list[float], path: Path) -> None:
    loss_curve(losses, "your Trainer on the standard library's docs").savefig(path, format="png")


def sample(model, prompt, n_tokens: int, never: int):
    """`n_tokens` more tokens after `prompt` (1-D), each drawn from the model's next-token distribution without
    token `never`."""
    import torch

    tokens = prompt[None]
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # sampling only: no gradients to keep
        for _ in range(n_tokens):
            logits = model(tokens[:, -POSN:])[0, -1].index_fill(0, torch.tensor(never), -torch.inf)
            token = torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)
            tokens = torch.cat([tokens, token[None]], dim=1)
    return tokens[0]


def train(exercises: Path, steps: int, out: Path) -> dict[str, Path]:
    import torch

    from grader.builder import corpus
    from grader.builder.corpus import RARE_TEXT
    from grader.builder.tokenizer import offline_tokenizer

    torch.set_num_threads(1)  # the model's matrices are too small to share between threads
    module = learner_package(exercises)
    config, transformer, training = module("config"), module("transformer"), module("training")
    text = corpus.load().capped(D_VOCAB)
    batches = text.train_batches(n_batches=steps, batch_size=BATCH, posn=POSN, seed=0)
    held_out = text.held_out_batches(n_batches=8, batch_size=BATCH, posn=POSN)
    torch.manual_seed(0)
    model = transformer.Transformer(dataclasses.replace(config.Config(), **SHAPE, d_vocab=text.d_vocab))
    trainer = training.Trainer(model, training.TrainingArgs())
    losses = [float(loss) for loss in trainer.fit(batches)]
    loss, accuracy = training.evaluate(model, held_out)
    out.mkdir(parents=True, exist_ok=True)
    written = {"plot": out / "loss.png", "checkpoint": out / "model.pt", "sample": out / "sample.txt"}
    plot(losses, written["plot"])
    torch.save(model.state_dict(), written["checkpoint"])
    prompt = text.held_out[:PROMPT_TOKENS]
    # Corpus.capped's last id stands for every rarer token and has no text of its own (it reads as RARE_TEXT, �):
    # about a tenth of the corpus, it would be a tenth of the sample.
    generated = sample(model, prompt, SAMPLED_TOKENS, never=text.d_vocab - 1)
    tokenizer = offline_tokenizer()
    said = f"{text.decode(prompt, tokenizer)}[...]{text.decode(generated[PROMPT_TOKENS:], tokenizer)}"
    written["sample"].write_text(said + "\n", encoding="utf-8")
    print(f"held-out loss {loss:.3f}, next-token accuracy {accuracy:.1%} after {steps} steps")
    print(f"sample (prompt, then [...] and your model's text; {RARE_TEXT} in the prompt: a rarer token):\n{said}")
    return written


def parser() -> argparse.ArgumentParser:
    p = tool_parser("grader.builder.train", __doc__)
    p.add_argument("--exercises", type=Path, default=Path("exercises"), metavar="PATH", help="default: ./exercises")
    p.add_argument("--steps", type=int, default=500, metavar="N", help="training steps, one batch each (default 500)")
    p.add_argument("--out", type=Path, default=Path("train-output"), metavar="DIR", help="default: ./train-output")
    return p


def run_learner_code(command: str, exercises: Path, run: Callable[[], dict[str, Path]], graded_by: str) -> int:
    """`run()`, which runs the learner's code in `exercises` and writes files, as a command: 0 with the files it
    wrote, 1 with one line naming the function not finished yet (`graded_by`: the grade command that grades it)."""
    try:
        written = run()
    except NotImplementedError as error:
        said = f"{command}: your code is not finished: {unfinished(error, exercises)}"
        print(f"{said} ({graded_by} says what else is left)", file=sys.stderr)
        return 1
    print("wrote " + ", ".join(str(path) for path in written.values()))
    return 0


def unfinished(error: NotImplementedError, exercises: Path) -> str:
    """Where the learner's code raised `error`: its function and file:line (as a path from here where it can be),
    or the error alone when it did not come from the learner's files."""
    place = learner_frame(error, exercises)
    if place is None:
        return one_line(error)
    folder = exercises.relative_to(Path.cwd()) if exercises.is_relative_to(Path.cwd()) else exercises
    return f"{place.function} raises {one_line(error)} at {folder / place.file}:{place.line}"


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.steps < 1:
        print("train: --steps must be at least 1", file=sys.stderr)
        return 2
    exercises = args.exercises.resolve()
    return run_learner_code("train", exercises, lambda: train(exercises, args.steps, args.out), "grade training")


if __name__ == "__main__":
    sys.exit(main())
