"""The reference: the offline tokenizer, the random model's construction, and the real loading path."""

from __future__ import annotations

import json
import os

import pytest
from repo import SOLUTIONS, run_grade

PROMPT_IDS = [50256, 464, 3797, 3332, 319, 262, 2603]


def test_offline_tokenizer_matches_gpt2():
    from grader.builder.interface import PROMPT
    from grader.builder.reference import offline_tokenizer

    tokenizer = offline_tokenizer()
    assert len(tokenizer) == 50257
    assert [tokenizer.bos_token_id, *tokenizer(PROMPT)["input_ids"]] == PROMPT_IDS


def test_reference_prompt_tokens_come_from_transformer_lens(reference):
    assert reference.meta["prompt_tokens"] == PROMPT_IDS


def test_random_reference_has_no_identity_parameters(reference):
    from safetensors import safe_open

    with safe_open(str(reference.weights_path), "pt") as weights:
        for name in weights.keys():
            tensor = weights.get_tensor(name)
            assert not (tensor == 0).all(), f"{name} is all zeros"
            assert not (tensor == 1).all(), f"{name} is all ones"


def test_the_random_models_weights_are_written_once_into_the_entry(reference):
    """The random model is drawn in the builder and handed to transformer_lens: its local model cache holds the config
    and the tokenizer the loader reads, not a second copy of its weights."""
    from grader.builder.reference import random_hub_is_complete

    hub = reference.directory.parent / "random-hub"
    assert random_hub_is_complete(hub)
    assert not list(hub.rglob("*.safetensors")) and not list(hub.rglob("*.bin"))


@pytest.mark.slow
def test_real_loading_path_from_a_local_model_cache(reference, tmp_path):
    """`from_pretrained_no_processing("gpt2")` served from a Hugging Face cache built on this machine."""
    from grader.builder.reference import write_random_hub

    write_random_hub(tmp_path / "hub", weights=True)
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "GPT2_GRADER_CACHE": str(tmp_path / "cache")}
    auto = run_grade("--solutions", "--json", str(tmp_path / "auto.json"), env=env)
    assert auto.returncode == 0, auto.stdout + auto.stderr
    report = json.loads((tmp_path / "auto.json").read_text())
    assert report["reference"] == "gpt2" and report["fallback_reason"] is None
    assert report["score"] == report["max_score"]
    assert "RANDOM" not in auto.stdout
    explicit = run_grade("--reference", "gpt2", "--solutions", "transformer", env=env)
    assert explicit.returncode == 0 and "against gpt2" in explicit.stdout


def test_gpt2_unavailable_is_one_clear_line(reference, tmp_path):
    result = run_grade("--reference", "gpt2", "--exercises", str(SOLUTIONS), env={"GPT2_GRADER_CACHE": str(tmp_path)})
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("grade:")]
    assert len(lines) == 1 and "GPT-2 is not in the Hugging Face cache" in lines[0]


class RefusingNetwork:
    """socket.create_connection as a network that refuses, counting the attempts."""

    def __init__(self):
        self.attempts = 0

    def __call__(self, *args, **kwargs):
        self.attempts += 1
        raise ConnectionRefusedError("refused by the test")


def test_auto_uses_a_prepared_random_reference_without_the_network(reference, monkeypatch):
    from grader.host import refcache

    refusing = RefusingNetwork()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(refcache.socket, "create_connection", refusing)
    data = refcache.ensure_reference("auto", lambda *_: None, root=reference.directory.parent)
    assert (data.kind, data.directory) == ("random", reference.directory)
    assert refusing.attempts == 0
    assert "`grade --download` fetches it" in data.fallback_reason


def test_auto_asks_the_network_only_when_nothing_was_prepared(monkeypatch, tmp_path):
    """The control: with no reference prepared, auto asks the hub (refused here), then builds the random one."""
    from grader.host import refcache

    class Built(Exception):
        pass

    def build_entry(root, kind, *args):
        raise Built(kind)

    refusing = RefusingNetwork()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(refcache.socket, "create_connection", refusing)
    monkeypatch.setattr(refcache, "build_entry", build_entry)
    with pytest.raises(Built, match="random"):
        refcache.ensure_reference("auto", lambda *_: None, root=tmp_path)
    assert refusing.attempts == 1


def test_an_entry_of_some_checks_holds_their_cases_and_the_weights_they_load_only(reference, tmp_path):
    """What a Classroom 50 assignment's cold grading builds: the builder run for two checks, from the session's random
    model, writes their cases, their answers and the weights their cases load, and counts every parameter still."""
    import subprocess
    import sys

    from safetensors import safe_open

    from grader.host.refcache import read_entry

    hub = os.path.join(os.environ["GPT2_GRADER_CACHE"], "random-hub")
    out = tmp_path / "entry"
    out.mkdir()
    command = ["--kind", "random", "--out", str(out), "--random-hub", hub, "--checks", "pos_embed,gelu_new"]
    built = subprocess.run([sys.executable, "-m", "grader.builder.reference", *command], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    data = read_entry(out, "random")
    assert set(data.meta["cases"]) == {"pos_embed", "gelu_new"} == {path.stem for path in (out / "inputs").iterdir()}
    with safe_open(str(out / "expected.safetensors"), "np") as answers:
        assert {key.partition("/")[0] for key in answers.keys()} == {"pos_embed", "gelu_new"}
    with safe_open(str(out / "weights.safetensors"), "np") as weights:
        assert sorted(weights.keys()) == ["pos_embed.W_pos"]
    assert data.meta["param_counts"] == reference.meta["param_counts"] and data.meta["small_model"] == {}
    assert set(data.meta["beside"]) <= {"pos_embed", "gelu_new"}
