"""The small trained model with induction heads (grader/builder/induction_model.py): the shipped weights have a
previous-token head in layer 0 and an induction head in layer 1, found by their attention patterns; a random
model of the same config has neither; the scores mean what they say; re-training finds the same heads."""

from __future__ import annotations

import fnmatch
import hashlib
import json

import pytest
import torch
from repo import REPO

from grader.builder import induction_model
from grader.builder.induction_model import INDUCTION_THRESHOLD, PREVIOUS_TOKEN_THRESHOLD, SHIPPED


@pytest.fixture(scope="module")
def shipped_scores():
    return induction_model.head_scores(induction_model.load())


def one_hot_pattern(targets: list[int]) -> torch.Tensor:
    """A (batch 1, head 1, query, key) pattern where query i attends only to key targets[i]."""
    return torch.nn.functional.one_hot(torch.tensor(targets), len(targets)).float()[None, None]


def test_the_shipped_model_has_a_previous_token_head_in_layer_0_and_an_induction_head_in_layer_1(shipped_scores):
    assert shipped_scores["previous_token"][0].max() > PREVIOUS_TOKEN_THRESHOLD
    assert shipped_scores["induction"][1].max() > INDUCTION_THRESHOLD
    found = induction_model.found_heads(shipped_scores)
    assert any(layer == 0 for layer, _ in found["previous_token"]), found
    assert any(layer == 1 for layer, _ in found["induction"]), found


def test_a_random_model_of_the_same_config_has_neither():
    """The control: the same scores on the untrained weights are low, so the test above can fail."""
    scores = induction_model.head_scores(induction_model.initial_model())
    assert scores["previous_token"].max() < PREVIOUS_TOKEN_THRESHOLD / 2
    assert scores["induction"].max() < INDUCTION_THRESHOLD / 2
    assert induction_model.found_heads(scores) == {"previous_token": [], "induction": []}


def test_a_pattern_on_the_previous_token_scores_as_one_and_not_as_induction():
    n_ctx = 16
    pattern = one_hot_pattern([max(i - 1, 0) for i in range(n_ctx)])
    assert induction_model.previous_token_score(pattern).tolist() == [1.0]
    assert induction_model.induction_score(pattern).tolist() == [0.0]


def test_a_pattern_on_the_token_after_the_previous_occurrence_scores_as_induction_and_not_previous_token():
    n_ctx, half = 16, 8
    pattern = one_hot_pattern([i if i < half else i - half + 1 for i in range(n_ctx)])
    assert induction_model.induction_score(pattern).tolist() == [1.0]
    assert induction_model.previous_token_score(pattern).tolist() == [0.0]


def test_scores_are_per_head_and_average_over_the_batch():
    previous = one_hot_pattern([max(i - 1, 0) for i in range(8)])
    itself = one_hot_pattern(list(range(8)))
    pattern = torch.cat([torch.cat([previous, itself], dim=1), torch.cat([itself, itself], dim=1)])  # (2, 2, 8, 8)
    assert induction_model.previous_token_score(pattern).tolist() == [0.5, 0.0]
    assert induction_model.heads_above(torch.tensor([[0.6, 0.2], [0.1, 0.9]]), 0.5) == [(0, 0), (1, 1)]


def test_the_shipped_json_agrees_with_the_scores_measured_now(shipped_scores):
    facts = json.loads(induction_model.facts_path(SHIPPED).read_text())
    assert facts["config"] == induction_model.config_facts()
    assert facts["weights_sha256"] == hashlib.sha256(SHIPPED.read_bytes()).hexdigest()
    found = induction_model.found_heads(shipped_scores)
    assert {kind: [tuple(head) for head in heads] for kind, heads in facts["heads"].items()} == found
    for kind, table in shipped_scores.items():
        assert torch.allclose(torch.tensor(facts["scores"][kind]), table, atol=1e-3), kind


def test_the_weights_are_small_and_installed_with_the_grader():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    assert SHIPPED.stat().st_size < 5_000_000
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = [SHIPPED.relative_to(REPO / "grader").as_posix(), induction_model.facts_path(SHIPPED).name]
    for path in shipped:
        name = path if "/" in path else f"builder/data/{path}"
        assert any(fnmatch.fnmatch(name, pattern) for pattern in package_data["grader"]), name


def test_the_shape_is_make_trains():
    """The learner's Transformer, as `make train` builds it, has this shape, so it can run these weights."""
    from grader.builder import train

    assert induction_model.SHAPE == train.SHAPE


@pytest.mark.slow
def test_training_from_scratch_finds_the_same_heads(tmp_path):
    weights = tmp_path / "induction.safetensors"
    assert induction_model.main(["--out", str(weights)]) == 0
    retrained = induction_model.head_scores(induction_model.load(weights))
    assert induction_model.found_heads(retrained) == induction_model.found_heads(
        induction_model.head_scores(induction_model.load())
    )
