"""A one-layer attention-only model whose heads are skip-trigram tables: what Part 6's skip_trigram checks read.

A one-layer attention-only transformer can only do two things: a bigram table (the direct path, W_E W_U) and, per
head, skip-trigrams `source ... destination -> output`: the destination attends to an earlier source token (the
QK circuit) and the source, once attended, raises some output tokens (the OV circuit). The two circuits meet only
in the attention weight, so what a source raises cannot depend on the destination that attends to it: learning
`keep ... in -> mind` and `keep ... at -> bay` in one head raises `keep ... in -> bay` too (Anthropic's "A
Mathematical Framework for Transformer Circuits", the skip-trigram bugs).

It is trained on windows of the offline corpus (grader.builder.corpus, capped at D_VOCAB tokens), each with one
trigram of four FAMILIES written in, as the induction model mixes repeated segments into the corpus: on the corpus
alone, a model this small learns skip-trigrams that differ from one training to the next (the families give every
training the same ones to find, and their crossed trigrams, which no window has, are the bugs to find). Four heads:
with one, the head is spent on bigram-like work and learns no family in 5,000 steps; with four, a family's two
trigrams usually share a head (and its bugs are forced), but a training may split one over two heads.

The full circuits are exact, not approximations, because nothing sits between the embedding and the head or
between the head and the unembedding: no LayerNorm (normalization_type=None, so there is nothing to fold), the
attention biases are zero and frozen, and the learned positions are "shortformer" ones, added to the inputs of
the queries and keys only: the residual stream (and so the values and the OV circuit) holds the token alone, and
positions enter the attention scores as extra terms beside the token-token QK circuit (how far back to look),
never what a head writes.

    python -m grader.builder.attn_only_model [--out PATH] [--steps N] [--model-seed S] [--data-seed S]

trains it (deterministically, on one CPU thread, in about 2.5 minutes) and writes PATH (the weights, safetensors,
float32) and PATH with a .json suffix (the config, the training settings, the losses and the weights' SHA-256).
`load()` returns the model as a HookedTransformer; `token_texts()` the text of each of its tokens. What its heads
learned, and the slow test that re-trains it: docs/attn-only-model.md.
"""

from __future__ import annotations

import argparse
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
    import torch
    from jaxtyping import Int
    from torch import Tensor
    from transformer_lens import HookedTransformer

    from grader.builder import corpus

SHIPPED = Path(__file__).resolve().parent / "data" / "attn-only-1l.safetensors"
# The corpus's 511 most frequent tokens and the rare-token bucket (75% of the corpus's tokens are kept): every token
# is seen often enough for its rows of the circuits to be trained, and the unembedding stays cheap.
D_VOCAB = 512
SHAPE = {"d_model": 128, "n_heads": 4, "d_head": 32, "n_layers": 1, "n_ctx": 64}
# Skip-trigram families written into the training windows, in the form of the paper's "keep ... in -> mind" and
# "keep ... at -> bay": a source, then two (destination, output) pairs. Every token is a whole word among the
# vocabulary's; the corpus alone has none of the 16 trigrams (s, d_i, o_j), crossed ones included, and 11 of the
# 16 bigrams (d_i, o_j) never, the others at most 9 times.
FAMILIES = (
    (" socket", (" in", " mode"), (" at", " end")),
    (" string", (" with", " zero"), (" from", " left")),
    (" key", (" as", " tuple"), (" on", " mapping")),
    (" server", (" by", " request"), (" for", " response")),
)
MAX_GAP = 8  # the most tokens from a planted source to its destination
FROZEN_AT_ZERO = ("blocks.0.attn.b_Q", "blocks.0.attn.b_K", "blocks.0.attn.b_V", "blocks.0.attn.b_O")


@dataclass(frozen=True)
class Training:
    """The training settings: `steps` AdamW steps on `batch` corpus windows of n_ctx tokens each, `planted` of
    them with a family's trigram written in."""

    steps: int = 5000
    batch: int = 32
    planted: int = 32  # windows per batch with a family's trigram written in (all of them)
    lr: float = 2e-3
    weight_decay: float = 1.0  # strong: a rare token's rows shrink instead of keeping extreme, untrained values
    model_seed: int = 0  # the initial weights
    data_seed: int = 1  # the windows' offsets


def config():
    """One attention-only layer, no normalization, shortformer positions, as a transformer_lens config."""
    from transformer_lens import HookedTransformerConfig

    return HookedTransformerConfig(
        **SHAPE,
        d_vocab=D_VOCAB,
        attn_only=True,
        normalization_type=None,  # nothing between W_E and the head or the head and W_U: the circuits are exact
        positional_embedding_type="shortformer",  # positions in the queries' and keys' inputs only
        model_name="attn-only-1l",
        device="cpu",
    )


def config_facts() -> dict:
    """What the JSON records of the config: the shape and the architecture's choices."""
    cfg = config()
    return {
        **SHAPE,
        "d_vocab": D_VOCAB,
        "attn_only": cfg.attn_only,
        "normalization_type": cfg.normalization_type,
        "positional_embedding_type": cfg.positional_embedding_type,
        "frozen_at_zero": list(FROZEN_AT_ZERO),
    }


# --- training ---------------------------------------------------------------------------------------------


def vocabulary() -> list[int]:
    """The GPT-2 id of each of the model's token ids (corpus.RARE for the rare-token bucket, the last), as the JSON
    beside the shipped weights records them: the corpus's 511 most frequent tokens on the Python that trained it.
    Another Python's docstrings give another corpus, whose ranking may differ; these ids keep naming the same tokens."""
    return json.loads(facts_path(SHIPPED).read_text())["gpt2_ids"]


def corpus_in_vocabulary() -> corpus.Corpus:
    """The offline corpus in the model's token ids: each token that is among `vocabulary()` as its id there, any other
    as the rare bucket. On the Python that trained the model, this is the corpus capped at D_VOCAB."""
    import torch

    from grader.builder import corpus

    text, gpt2_ids = corpus.load(), vocabulary()
    model_id = {gpt2: i for i, gpt2 in enumerate(gpt2_ids) if gpt2 != corpus.RARE}
    to_model = torch.tensor([model_id.get(int(gpt2), D_VOCAB - 1) for gpt2 in text.gpt2_ids])
    return corpus.Corpus(to_model[text.train], to_model[text.held_out], torch.tensor(gpt2_ids))


def family_ids() -> Int[Tensor, "n_families 5"]:
    """Each family's (source, destination 1, output 1, destination 2, output 2) as the model's token ids."""
    import torch

    from grader.builder.tokenizer import offline_tokenizer

    tokenizer, ids = offline_tokenizer(), {gpt2: i for i, gpt2 in enumerate(vocabulary())}
    rows = []
    for source, (d1, o1), (d2, o2) in FAMILIES:
        row = []
        for text in (source, d1, o1, d2, o2):
            (gpt2_id,) = tokenizer.encode(text)  # each is one GPT-2 token
            row.append(ids[gpt2_id])  # and among the vocabulary's D_VOCAB - 1 kept tokens
        rows.append(row)
    return torch.tensor(rows)


def plant(windows: Int[Tensor, "n n_ctx"], families: Int[Tensor, "f 5"], generator: torch.Generator) -> None:
    """Write one family's trigram into each window, in place: one of its two (destination, output) pairs at
    positions i, i + 1 and its source at j = i - gap, gap drawn from 1 to MAX_GAP; all uniformly."""
    import torch

    n, n_ctx = windows.shape
    family = families[torch.randint(0, len(families), (n,), generator=generator)]
    pair = torch.randint(0, 2, (n,), generator=generator)
    i = torch.randint(MAX_GAP, n_ctx - 1, (n,), generator=generator)  # MAX_GAP .. n_ctx - 2
    j = i - torch.randint(1, MAX_GAP + 1, (n,), generator=generator)
    rows = torch.arange(n)
    windows[rows, j] = family[:, 0]
    windows[rows, i] = family[rows, 1 + 2 * pair]
    windows[rows, i + 1] = family[rows, 2 + 2 * pair]


def training_batches(training: Training) -> Int[Tensor, "steps batch n_ctx"]:
    """Each step's windows of the corpus's training stream (`corpus_in_vocabulary`), the first `training.planted` of
    each batch with a family's trigram written in; the same every time."""
    import torch

    windows = corpus_in_vocabulary().train_batches(training.steps, training.batch, SHAPE["n_ctx"], training.data_seed)
    if training.planted:
        generator = torch.Generator().manual_seed(training.data_seed)
        planted = windows[:, : training.planted].reshape(-1, SHAPE["n_ctx"])
        plant(planted, family_ids(), generator)
        windows[:, : training.planted] = planted.reshape(training.steps, training.planted, SHAPE["n_ctx"])
    return windows


def token_texts() -> list[str]:
    """The text of each of the model's token ids (`vocabulary()`), the rare bucket as corpus.RARE_TEXT."""
    from grader.builder import corpus
    from grader.builder.tokenizer import offline_tokenizer

    tokenizer = offline_tokenizer()
    return [corpus.RARE_TEXT if gpt2 == corpus.RARE else tokenizer.decode([gpt2]) for gpt2 in vocabulary()]


def initial_model(seed: int = Training.model_seed) -> HookedTransformer:
    """The model at its seeded initial weights, the attention biases zero and frozen; the global random state is
    left as it was."""
    import torch
    from transformer_lens import HookedTransformer

    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "HookedTransformer is deprecated", DeprecationWarning)  # 3.x still has it
        torch.manual_seed(seed)
        model = HookedTransformer(config())
    parameters = dict(model.named_parameters())
    with torch.no_grad():
        for name in FROZEN_AT_ZERO:
            parameters[name].zero_().requires_grad_(False)
    return model


def train(training: Training = Training()) -> tuple[HookedTransformer, list[float]]:
    """The model trained with AdamW on `training_batches`, and its loss at each step."""
    import torch

    from grader.builder.induction_model import deterministic_single_thread

    with deterministic_single_thread():
        model = initial_model(training.model_seed)
        trained = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trained, lr=training.lr, weight_decay=training.weight_decay)
        # Linear warm-up over the first 5% of the steps, then a linear decay to zero: the last steps settle.
        warmup = max(1, training.steps // 20)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min((step + 1) / warmup, (training.steps - step) / (training.steps - warmup))
        )
        losses = []
        for tokens in training_batches(training):
            loss = model(tokens, return_type="loss")
            optimizer.zero_grad(set_to_none=True)
            torch.autograd.backward(loss)
            optimizer.step(closure=None)
            schedule.step()
            losses.append(loss.item())
    model.eval()
    return model, losses


def held_out_loss(model: HookedTransformer, n_batches: int = 8, batch: int = 32) -> float:
    """The mean loss on the start of the corpus's held-out stream (`corpus_in_vocabulary`)."""
    import torch

    windows = corpus_in_vocabulary().held_out_batches(n_batches, batch, SHAPE["n_ctx"])
    with torch.no_grad():
        return sum(model(w, return_type="loss").item() for w in windows) / n_batches


# --- the files ---------------------------------------------------------------------------------------------


def facts_path(weights: Path) -> Path:
    return weights.with_suffix(".json")


def save(
    model: HookedTransformer, weights: Path, training: Training, losses: list[float], seconds: float, cpu_seconds: float
) -> dict:
    """Write the weights (float32) and, beside them, the JSON of the config, the training and the losses; the JSON's
    contents are returned."""
    from safetensors.torch import save_file

    weights.parent.mkdir(parents=True, exist_ok=True)
    save_file({name: t.detach().contiguous() for name, t in model.named_parameters()}, str(weights))
    facts = {
        "config": config_facts(),
        "training": {
            **asdict(training),
            "seconds": round(seconds, 1),
            "cpu_seconds": round(cpu_seconds, 1),
            "threads": 1,
        },
        "final_loss": round(sum(losses[-50:]) / len(losses[-50:]), 4),  # the mean of the last 50 steps
        "held_out_loss": round(held_out_loss(load(weights)), 4),
        "gpt2_ids": vocabulary(),  # the vocabulary it was trained in, kept with it
        "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
    }
    facts_path(weights).write_text(json.dumps(facts, indent=1, ensure_ascii=False) + "\n")
    return facts


def load(weights: Path = SHIPPED, seed: int = Training.model_seed) -> HookedTransformer:
    """The model with the weights at `weights` (the shipped ones by default), in eval mode."""
    from safetensors.torch import load_file

    model = initial_model(seed)
    missing, unexpected = model.load_state_dict(load_file(str(weights)), strict=False)
    parameters = dict(model.named_parameters())
    if unexpected or any(name in parameters for name in missing):  # only buffers (the causal masks) are not saved
        raise ValueError(f"{weights} does not fit the config: missing {missing}, unexpected {unexpected}")
    return model.eval()


# --- the command ---------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = tool_parser("grader.builder.attn_only_model", __doc__)
    p.add_argument("--out", type=Path, default=SHIPPED, metavar="PATH", help=f"the weights file (default {SHIPPED})")
    p.add_argument("--steps", type=int, default=Training.steps, metavar="N", help=f"default {Training.steps}")
    p.add_argument("--model-seed", type=int, default=Training.model_seed, metavar="S")
    p.add_argument("--data-seed", type=int, default=Training.data_seed, metavar="S")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    training = Training(steps=args.steps, model_seed=args.model_seed, data_seed=args.data_seed)
    started, cpu_started = time.perf_counter(), time.process_time()
    model, losses = train(training)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    facts = save(model, args.out, training, losses, seconds, cpu_seconds)
    print(
        f"trained {training.steps} steps in {seconds:.1f} s ({cpu_seconds:.1f} s of CPU) on one thread; "
        f"final loss {facts['final_loss']}, "
        f"held-out loss {facts['held_out_loss']}"
    )
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes) and {facts_path(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
