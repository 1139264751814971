"""The learner's modules take GPT-2's weights from a private mapping of the reference file, not a copy:
what one module writes into its parameters reaches neither the file nor the next module built, and a
parameter whose memory something else shares gets a copy, so that the sharer sees the weights too."""

from __future__ import annotations

import hashlib

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from grader.learner.weights import WeightsFile, WeightsMismatch, load_weights

VALUES = {"W": torch.arange(12.0).reshape(3, 4), "b": torch.full((4,), 0.5), "ids": torch.arange(3)}


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(torch.empty(3, 4))
        self.b = nn.Parameter(torch.empty(4))


class KeepsAView(Plain):
    """Correct code in another style: a flat view of W kept beside it."""

    def __init__(self):
        super().__init__()
        self.W_flat = self.W.view(-1)


class Float64(nn.Module):
    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(torch.empty(3, 4, dtype=torch.float64))
        self.b = nn.Parameter(torch.empty(4, dtype=torch.float64))


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "weights.safetensors"
    save_file(VALUES, str(path))
    with safe_open(str(path), "pt") as handle:
        file = WeightsFile(str(path), handle)
        yield file, path
        file.close()


def loaded(module: nn.Module, file: WeightsFile) -> nn.Module:
    load_weights(module, file.sources({"W": "W", "b": "b"}))
    return module


def test_a_parameter_takes_the_mapped_values_and_writes_stay_its_own(weights):
    file, path = weights
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    first = loaded(Plain(), file)
    assert torch.equal(first.W, VALUES["W"]) and torch.equal(first.b, VALUES["b"])
    with torch.no_grad():
        first.W.mul_(-1)  # e.g. a LayerNorm folded into the weights in place
    second = loaded(Plain(), file)
    assert torch.equal(second.W, VALUES["W"]), "the next module built saw the first one's writes"
    assert torch.equal(first.W, -VALUES["W"])
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, "the reference file was written"


def test_a_parameter_whose_memory_is_shared_gets_a_copy(weights):
    file, _ = weights
    module = loaded(KeepsAView(), file)
    assert torch.equal(module.W_flat, VALUES["W"].flatten()), "the kept view does not see the weights"


def test_a_parameter_of_another_dtype_gets_a_converted_copy(weights):
    file, _ = weights
    module = loaded(Float64(), file)
    assert module.W.dtype == torch.float64 and torch.equal(module.W, VALUES["W"].double())


def test_misshapen_parameters_are_named_before_anything_is_loaded(weights):
    file, _ = weights
    module = Plain()
    module.b = nn.Parameter(torch.empty(5))
    with pytest.raises(WeightsMismatch) as raised:
        load_weights(module, file.sources({"W": "W", "b": "b"}))
    assert raised.value.facts.misshapen == {"b": [[5], [4]]}
