"""`python -m grader.builder.positions_experiment` (make experiment-positions): the learner's added and concatenated
models trained from a few seeds, a table and a plot; its probe names positions only where the stream holds them."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest
from repo import REPO, SOLUTIONS, stubs
from test_train_command import unfinished_embed

MODELS = ("added", "concat 32+32", "concat 48+16")
ROW = re.compile(r"\| (?P<model>[^|]+) \| (?P<parameters>[\d,]+) \([\d,]+\) \| (?P<loss>[\d.]+) ± [\d.]+ \| "
                 r"(?P<probe>[\d.]+)% ± [\d.]+% \| (?P<seeds>\d+) \|")  # fmt: skip


def experiment(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "grader.builder.positions_experiment", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_solutions_leave_a_plot_and_a_table_of_every_model(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    from PIL import Image

    from grader.builder.train import SHAPE
    from solutions.config import Config
    from solutions.positions import ConcatTransformer
    from solutions.transformer import Transformer

    ran = experiment("--exercises", str(SOLUTIONS), "--steps", "4", "--seeds", "2", "--out", str(tmp_path))
    assert ran.returncode == 0, ran.stderr[-2000:]
    with Image.open(tmp_path / "positions.png") as image:
        assert image.format == "PNG" and image.size[0] > 600
    written = (tmp_path / "positions.md").read_text()
    rows = {row["model"]: row for row in ROW.finditer(written)}
    assert tuple(rows) == MODELS, written
    assert {row["seeds"] for row in rows.values()} == {"2"}
    assert all(0 <= float(row["probe"]) <= 100 and float(row["loss"]) > 0 for row in rows.values())
    cfg = dataclasses.replace(Config(), **SHAPE, d_vocab=2048)
    models = (Transformer(cfg), ConcatTransformer(cfg, 32), ConcatTransformer(cfg, 48))
    for name, model in zip(MODELS, models, strict=True):
        assert int(rows[name]["parameters"].replace(",", "")) == sum(p.numel() for p in model.parameters())
    assert written.strip() in ran.stdout  # the table and its two sentences, printed as written


def test_the_probe_names_positions_only_where_the_stream_holds_them():
    torch = pytest.importorskip("torch")
    from grader.builder.positions_experiment import position_probe

    generator = torch.Generator().manual_seed(0)
    noise = torch.randn(64, 32, 48, generator=generator)  # 64 sequences of 32 positions, 48 wide
    positions = 2 * torch.randn(32, 48, generator=generator)  # one direction per position, as a position embedding
    assert position_probe(noise + positions) == 1.0
    assert position_probe(noise) < 0.1  # chance is 1 in 32


def test_unfinished_exercises_are_one_line(tmp_path):
    ran = experiment("--exercises", str(stubs()), "--steps", "2", "--out", str(tmp_path))
    assert ran.returncode == 1 and ran.stderr.strip().count("\n") == 0, ran.stderr
    assert ran.stderr.startswith("experiment-positions: your code is not finished")
    assert not (tmp_path / "positions.md").exists()


def test_unfinished_code_is_named_with_its_file_and_line(tmp_path):
    package, line = unfinished_embed(tmp_path)
    ran = experiment("--exercises", str(package), "--steps", "2", "--out", str(tmp_path / "out"))
    assert ran.returncode == 1, ran.stderr
    said = ran.stderr.strip().removeprefix("experiment-positions: your code is not finished: ")
    assert said.startswith(f"Embed.forward raises NotImplementedError at {package / 'embedding.py'}:{line} "), said


def test_one_seed_is_refused_as_it_has_no_spread(tmp_path):
    ran = experiment("--exercises", str(SOLUTIONS), "--seeds", "1", "--out", str(tmp_path))
    assert ran.returncode == 2 and "--seeds at least 2" in ran.stderr


def test_help_says_the_whole_question():
    from grader.builder.positions_experiment import parser

    question = (
        "Part 6 as a command: does concatenating positions to the tokens, rather than adding them, help a model's "
        "sense of position?"
    )
    assert " ".join(parser().format_help().split()).count(question) == 1
