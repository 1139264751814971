"""`python -m grader.builder.train` (make train): the learner's loop trains, and leaves a plot, a checkpoint and
a sample."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from repo import REPO, SOLUTIONS, stubs, write_variant

RETURN_OF_EMBED = "        return self.W_E[tokens]\n"


def unfinished_embed(directory):
    """The solutions with Embed.forward left as a stub leaves it, and the line of its `raise`."""
    package = write_variant(directory, {"embedding.py": [(RETURN_OF_EMBED, "        raise NotImplementedError()\n")]})
    lines = (package / "embedding.py").read_text().splitlines()
    return package, lines.index("        raise NotImplementedError()") + 1


def train(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "grader.builder.train", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_solutions_train_and_leave_a_plot_a_checkpoint_and_a_sample(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    import torch
    from PIL import Image

    from grader.builder.train import SHAPE
    from solutions.config import Config
    from solutions.transformer import Transformer

    ran = train("--exercises", str(SOLUTIONS), "--steps", "12", "--out", str(tmp_path))
    assert ran.returncode == 0, ran.stderr[-2000:]
    with Image.open(tmp_path / "loss.png") as image:
        assert image.format == "PNG" and image.size[0] > 300
    weights = torch.load(tmp_path / "model.pt")
    model = Transformer(dataclasses.replace(Config(), **SHAPE, d_vocab=weights["embed.W_E"].shape[0]))
    model.load_state_dict(weights)  # strict: every parameter of the model, and no other
    prompt, _, written = (tmp_path / "sample.txt").read_text().partition("[...]")
    assert prompt and written.strip()
    assert "held-out loss" in ran.stdout


def test_unfinished_exercises_are_one_line(tmp_path):
    ran = train("--exercises", str(stubs()), "--steps", "2", "--out", str(tmp_path))
    assert ran.returncode == 1 and ran.stderr.strip().count("\n") == 0, ran.stderr
    assert ran.stderr.startswith("train: your code is not finished") and not (tmp_path / "model.pt").exists()


def test_unfinished_code_is_named_with_its_file_and_line(tmp_path):
    package, line = unfinished_embed(tmp_path)
    ran = train("--exercises", str(package), "--steps", "2", "--out", str(tmp_path / "out"))
    assert ran.returncode == 1, ran.stderr
    expected = f"Embed.forward raises NotImplementedError at {package / 'embedding.py'}:{line}"
    assert ran.stderr.strip() == f"train: your code is not finished: {expected} (grade training says what else is left)"


def test_the_sample_never_draws_the_rare_bucket():
    """Corpus.capped's last id stands for every rarer token and reads as U+FFFD: the sample leaves it out, even
    from a model that favours it (as a model trained on the capped corpus does: it is a tenth of the text)."""
    torch = pytest.importorskip("torch")
    from grader.builder.train import sample

    class FavoursTheLastId(torch.nn.Module):
        def forward(self, tokens):
            logits = torch.zeros(*tokens.shape, 8)
            logits[..., 7] = 5.0  # e^5 / (e^5 + 7): the last id, 95 % of every draw
            return logits

    prompt = torch.tensor([1, 2, 3])
    drawn = sample(FavoursTheLastId(), prompt, 40, never=7)
    assert drawn[:3].tolist() == [1, 2, 3] and len(drawn) == 43
    assert 7 not in drawn[3:].tolist() and len(set(drawn[3:].tolist())) > 1
