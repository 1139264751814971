"""A small trained model with induction heads: a previous-token head in layer 0, an induction head in layer 1.

Offline, the reference is a random GPT-2 and all its heads look alike; this model gives interpretability
something real to find. It has GPT-2's architecture (LayerNorm, GELU MLPs, learned positions) at the shape
of `make train`'s model (2 layers, d_model 64, 4 heads of 16, d_mlp 256, a context of 64), so a learner's
own `Transformer` can load its weights, with a vocabulary of the corpus's 512 most frequent tokens. It is
trained on a mixture of random segments repeated (of 8 to 32 tokens; a [random half, same half] is the
longest), which only an induction circuit predicts, and windows of the offline corpus (grader.builder.corpus).

    python -m grader.builder.induction_model [--out PATH] [--steps N]

trains it (deterministically, on one CPU thread) and writes PATH (the weights, safetensors, float32) and
PATH with a .json suffix (the config, the training settings, every head's scores and the heads found).
`load()` returns the shipped model as a HookedTransformer.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grader.shared.commands import tool_parser

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch
    from transformer_lens import HookedTransformer

SHIPPED = Path(__file__).resolve().parent / "data" / "induction-2l.safetensors"
# Fewer tokens than make train's 2,048: layer 1 must tell the random tokens apart by their 64-dimensional
# embeddings, and the unembedding is most of each step's time.
D_VOCAB = 512
# GPT-2's modules at make train's shape (grader.builder.train.SHAPE), MLPs included: the learner's Transformer
# always has them, so it can run these weights; an attention-only model would fit no module the course builds.
SHAPE = {"d_model": 64, "n_heads": 4, "d_head": 16, "d_mlp": 256, "n_layers": 2, "n_ctx": 64}
MODEL_SEED, DATA_SEED, SCORE_SEED = 0, 1, 2  # the initial weights, the training batches, the scoring batch
PREVIOUS_TOKEN_THRESHOLD = INDUCTION_THRESHOLD = 0.5  # a head above it is found
MIN_PERIOD = 8  # the shortest repeated segment trained on
SCORE_BATCH = 32  # random sequences the scores are averaged over


@dataclass(frozen=True)
class Training:
    """The training settings; each batch is `repeated` [random half, same half] sequences and `corpus` windows."""

    steps: int = 3000
    repeated: int = 16
    corpus: int = 16
    lr: float = 1e-3
    weight_decay: float = 0.01


def config():
    """GPT-2's architecture at SHAPE, as a transformer_lens config."""
    from transformer_lens import HookedTransformerConfig

    return HookedTransformerConfig(
        **SHAPE,
        d_vocab=D_VOCAB,
        act_fn="gelu_new",  # GPT-2's
        normalization_type="LN",
        positional_embedding_type="standard",
        model_name="induction-2l",
        device="cpu",
    )


def config_facts() -> dict:
    """What the JSON records of the config: the shape and the architecture's choices."""
    cfg = config()
    return {**SHAPE, "d_vocab": D_VOCAB, "act_fn": cfg.act_fn, "normalization_type": cfg.normalization_type}


# --- the data ---------------------------------------------------------------------------------------------


def random_tokens(n: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """(n, length) tokens drawn uniformly from the vocabulary, the rare-token bucket (the last id) left out."""
    import torch

    return torch.randint(0, D_VOCAB - 1, (n, length), generator=generator)


def repeated_halves(n: int, generator: torch.Generator) -> torch.Tensor:
    """(n, n_ctx) sequences [random half, the same half again]."""
    import torch

    half = random_tokens(n, SHAPE["n_ctx"] // 2, generator)
    return torch.cat([half, half], dim=1)


def repeated_segments(n: int, generator: torch.Generator) -> torch.Tensor:
    """(n, n_ctx) sequences, each a random segment repeated to fill it, of a length drawn per sequence between
    MIN_PERIOD and n_ctx / 2 (which is the scoring's [half, same half]). A period that varies defeats the shortcut
    a fixed one allows: attending to the position n_ctx / 2 - 1 back, whatever its token, with no induction."""
    import torch

    half = SHAPE["n_ctx"] // 2
    segments = random_tokens(n, half, generator)
    periods = torch.randint(MIN_PERIOD, half + 1, (n, 1), generator=generator)
    return segments.gather(1, torch.arange(SHAPE["n_ctx"]) % periods)


def training_batches(training: Training) -> Iterator[torch.Tensor]:
    """Each step's (repeated + corpus, n_ctx) batch, the same every time."""
    import torch

    from grader.builder import corpus

    windows = corpus.load().capped(D_VOCAB).train_batches(training.steps, training.corpus, SHAPE["n_ctx"], DATA_SEED)
    generator = torch.Generator().manual_seed(DATA_SEED)
    for step in range(training.steps):
        yield torch.cat([repeated_segments(training.repeated, generator), windows[step]])


# --- training ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def deterministic_single_thread() -> Iterator[None]:
    """One thread and deterministic kernels, restored afterwards (a test process shares these settings)."""
    import torch

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)  # the matrices are too small to share, and one thread sums in one order
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)


def initial_model() -> HookedTransformer:
    """The model at its seeded initial weights; the global random state is left as it was."""
    import torch
    from transformer_lens import HookedTransformer

    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "HookedTransformer is deprecated", DeprecationWarning)  # 3.x still has it
        torch.manual_seed(MODEL_SEED)
        return HookedTransformer(config())


def train(training: Training = Training()) -> tuple[HookedTransformer, list[float]]:
    """The model trained with AdamW on `training_batches`, and its loss at each step."""
    import torch

    with deterministic_single_thread():
        model = initial_model()
        optimizer = torch.optim.AdamW(model.parameters(), lr=training.lr, weight_decay=training.weight_decay)
        losses = []
        for tokens in training_batches(training):
            loss = model(tokens, return_type="loss")
            # Spelled unlike the Trainer exercise's lines: the release's leak guard ships no line of a solution.
            optimizer.zero_grad(set_to_none=True)
            torch.autograd.backward(loss)
            optimizer.step(closure=None)
            losses.append(loss.item())
    model.eval()
    return model, losses


# --- scoring heads from their attention patterns -------------------------------------------------------------


def previous_token_score(pattern: torch.Tensor) -> torch.Tensor:
    """Per head, the mean attention from position i to i - 1; `pattern` is (batch, head, query, key)."""
    return pattern.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))


def induction_score(pattern: torch.Tensor) -> torch.Tensor:
    """Per head, on [half, same half] sequences, the mean attention from position i of the second half to the
    token after the previous occurrence of token i (position i - half + 1); `pattern` is (batch, head, query, key).
    """
    half = pattern.shape[-1] // 2
    return pattern.diagonal(offset=1 - half, dim1=-2, dim2=-1)[..., -half:].mean(dim=(0, -1))


def patterns(model: HookedTransformer, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Each layer's attention pattern on `tokens`, (batch, head, query, key)."""
    import torch

    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.cfg.n_layers)]
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=lambda name: name in names)
    return [cache[name] for name in names]


def head_scores(model: HookedTransformer) -> dict[str, torch.Tensor]:
    """Every head's previous-token score (on random tokens) and induction score (on repeated halves), each
    (n_layers, n_heads), on a seeded batch of SCORE_BATCH sequences."""
    import torch

    generator = torch.Generator().manual_seed(SCORE_SEED)
    random = random_tokens(SCORE_BATCH, model.cfg.n_ctx, generator)
    repeated = repeated_halves(SCORE_BATCH, generator)
    return {
        "previous_token": torch.stack([previous_token_score(p) for p in patterns(model, random)]),
        "induction": torch.stack([induction_score(p) for p in patterns(model, repeated)]),
    }


def heads_above(scores: torch.Tensor, threshold: float) -> list[tuple[int, int]]:
    """The (layer, head) of every head whose score is above `threshold`, in order."""
    return [(layer, head) for layer, head in (scores > threshold).nonzero().tolist()]


def found_heads(scores: dict[str, torch.Tensor]) -> dict[str, list[tuple[int, int]]]:
    return {
        "previous_token": heads_above(scores["previous_token"], PREVIOUS_TOKEN_THRESHOLD),
        "induction": heads_above(scores["induction"], INDUCTION_THRESHOLD),
    }


# --- the shipped files ---------------------------------------------------------------------------------------


def facts_path(weights: Path) -> Path:
    return weights.with_suffix(".json")


def save(model: HookedTransformer, weights: Path, training: Training, losses: list[float]) -> dict:
    """Write the weights (float32) and, beside them, the JSON of the config and the heads, scored on the weights
    as written; the JSON's contents are returned."""
    from safetensors.torch import save_file

    weights.parent.mkdir(parents=True, exist_ok=True)
    save_file({name: t.detach().contiguous() for name, t in model.named_parameters()}, str(weights))
    scores = head_scores(load(weights))
    facts = {
        "config": config_facts(),
        "training": {**asdict(training), "model_seed": MODEL_SEED, "data_seed": DATA_SEED},
        "final_loss": round(sum(losses[-50:]) / len(losses[-50:]), 4),  # the mean of the last 50 steps
        "thresholds": {"previous_token": PREVIOUS_TOKEN_THRESHOLD, "induction": INDUCTION_THRESHOLD},
        "heads": found_heads(scores),
        "scores": {kind: [[round(float(s), 4) for s in layer] for layer in table] for kind, table in scores.items()},
        "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
    }
    facts_path(weights).write_text(json.dumps(facts, indent=1) + "\n")
    return facts


def load(weights: Path = SHIPPED) -> HookedTransformer:
    """The model with the weights at `weights` (the shipped ones by default), in eval mode."""
    from safetensors.torch import load_file

    model = initial_model()
    missing, unexpected = model.load_state_dict(load_file(str(weights)), strict=False)
    parameters = dict(model.named_parameters())
    if unexpected or any(name in parameters for name in missing):  # only buffers (the causal masks) are not saved
        raise ValueError(f"{weights} does not fit the config: missing {missing}, unexpected {unexpected}")
    return model.eval()


# --- the command ---------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = tool_parser("grader.builder.induction_model", __doc__)
    p.add_argument("--out", type=Path, default=SHIPPED, metavar="PATH", help=f"the weights file (default {SHIPPED})")
    p.add_argument("--steps", type=int, default=Training.steps, metavar="N", help=f"default {Training.steps}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    training = Training(steps=args.steps)
    started = time.perf_counter()
    model, losses = train(training)
    seconds = time.perf_counter() - started
    facts = save(model, args.out, training, losses)
    print(f"trained {training.steps} steps in {seconds:.1f} s on one thread; final loss {facts['final_loss']}")
    for kind, table in facts["scores"].items():
        print(f"{kind} scores by layer and head: {table}")
    print(f"heads found: {facts['heads']}")
    print(f"wrote {args.out} and {facts_path(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
