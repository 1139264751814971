"""One mistake, one penalty across files: the interp and training checks that take the learner's Transformer run on the
grader's stand-in (grader/learner/drivers/stand_in_transformer.py) where the learner's does not import or fails its own
check, and say so in a note; the checks of transformer.py itself still fail, at its own line."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from repo import REPO, SOLUTIONS, by_id, write_variant

from grader.learner.drivers.stand_in_transformer import ATOL, RTOL, Transformer, agrees_on_probe_weights, seeded
from grader.shared.formats import TINY

LOOP, NO_COLON = "        for block in self.blocks:\n", "        for block in self.blocks\n"
SYNTAX_ERROR = {"transformer.py": [(LOOP, NO_COLON)]}
NO_LN_FINAL = {"transformer.py": [("self.unembed(self.ln_final(residual))", "self.unembed(residual)")]}
ON_THE_MODEL = (  # the checks whose functions take the learner's Transformer
    "interp.parameter_counts",
    "interp.logit_lens",
    "interp.direct_path",
    "interp.is_tied",
    "training.make_optimizer",
    "training.trainer",
)
BESIDE_THE_MODEL = ("interp.qk_circuit", "interp.ov_circuit", "interp.fold_layernorm", "interp.erase_direction")
NOTE = "graded on the grader's own Transformer: yours "


def stand_in_notes(result) -> list[str]:
    return [note for note in result.notes if note.startswith(NOTE)]


@pytest.fixture(scope="module")
def graded(grade, tmp_path_factory):
    def graded_variant(edits: dict) -> dict:
        package = write_variant(tmp_path_factory.mktemp("stand_in"), edits)
        return by_id(grade(package, "transformer", *ON_THE_MODEL, *BESIDE_THE_MODEL)) | {"package": package}

    return graded_variant


@pytest.fixture(scope="module")
def syntax_error(graded) -> dict:
    return graded(SYNTAX_ERROR)


@pytest.fixture(scope="module")
def no_ln_final(graded) -> dict:
    return graded(NO_LN_FINAL)


def test_a_syntax_error_in_transformer_py_costs_its_own_check_only(syntax_error):
    transformer = syntax_error["transformer"]
    line = (syntax_error["package"] / "transformer.py").read_text().splitlines().index(NO_COLON.rstrip("\n")) + 1
    assert transformer.status == "error" and transformer.message.startswith("SyntaxError"), transformer.message
    assert (transformer.file, transformer.line) == ("transformer.py", line)
    assert not stand_in_notes(transformer)
    for check_id in (*ON_THE_MODEL, *BESIDE_THE_MODEL):
        assert syntax_error[check_id].status == "pass", (check_id, syntax_error[check_id].message)


def test_the_checks_on_the_model_say_they_ran_on_the_stand_in(syntax_error):
    for check_id in ON_THE_MODEL:
        assert stand_in_notes(syntax_error[check_id]) == [NOTE + "does not import"], check_id
    for check_id in BESIDE_THE_MODEL:  # graded on the learner's own Attention, LayerNorm or nothing
        assert not stand_in_notes(syntax_error[check_id]), check_id


@pytest.mark.slow  # a second variant graded on the model's checks; the syntax error's runs in `make test`
def test_a_transformer_that_fails_its_own_check_costs_its_own_check_only(no_ln_final):
    assert no_ln_final["transformer"].status == "fail"
    assert "ln_final is not applied" in no_ln_final["transformer"].hint
    for check_id in ON_THE_MODEL:
        result = no_ln_final[check_id]
        assert result.status == "pass", (check_id, result.message)
        assert stand_in_notes(result) == [NOTE + "gives other logits, your parts included"], check_id


def test_the_solutions_are_graded_on_their_own_transformer(grade):
    results = grade(SOLUTIONS, *ON_THE_MODEL, *BESIDE_THE_MODEL).checks
    assert {result.id: result.status for result in results} == dict.fromkeys((*ON_THE_MODEL, *BESIDE_THE_MODEL), "pass")
    assert not [result.id for result in results if stand_in_notes(result)]


@pytest.mark.slow  # GPT-2's forward pass twice (about 3 s); in `make test` the checks graded on the stand-in pass
def test_the_stand_in_computes_gpt2(reference):
    """Loaded with the reference's weights, the stand-in gives the reference's logits within the transformer check's
    tolerance: it is a model the learner's functions may be graded on."""
    from safetensors.torch import load_file

    weights = load_file(str(reference.weights_path))
    n_heads, d_model, d_head = weights["blocks.0.attn.W_Q"].shape
    cfg = SimpleNamespace(
        d_model=d_model,
        n_heads=n_heads,
        d_head=d_head,
        d_mlp=weights["blocks.0.mlp.W_in"].shape[1],
        n_layers=len({key.split(".")[1] for key in weights if key.startswith("blocks.")}),
        n_ctx=weights["pos_embed.W_pos"].shape[0],
        d_vocab=weights["embed.W_E"].shape[0],
        layer_norm_eps=1e-5,
        init_range=0.02,
    )
    model = Transformer(cfg)
    model.load_state_dict(weights)
    inputs, expected = reference.inputs("transformer"), reference.expected("transformer")
    for case in reference.cases("transformer"):
        with torch.no_grad():
            logits = model(torch.from_numpy(inputs[f"{case.name}/arg0"])).numpy()
        np.testing.assert_allclose(logits, expected[case.name], rtol=RTOL, atol=ATOL, err_msg=case.name)


# --- the package: the stand-in for the files that import transformer.py, its own error for transformer.py itself ---

IMPORTS = """
import sys
from pathlib import Path
from grader.learner.package import LearnerPackage

package = LearnerPackage(Path(sys.argv[1]))
print(package.module("interp").Transformer.__module__)
for file in ("transformer", "kv_cache"):  # itself, after the stand-in was put; a file that builds on Transformer
    try:
        print(file, package.module(file).Transformer.__module__)
    except SyntaxError as error:
        print(file, type(error).__name__, error.filename.rsplit("/", 1)[-1], error.lineno)
"""


def test_interp_py_imports_the_stand_in_and_transformer_py_keeps_its_own_error(tmp_path):
    package = write_variant(tmp_path, SYNTAX_ERROR)
    line = (package / "transformer.py").read_text().splitlines().index(NO_COLON.rstrip("\n")) + 1
    ran = subprocess.run(
        [sys.executable, "-c", IMPORTS, str(package)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert ran.stdout.splitlines() == [
        "grader.learner.drivers.stand_in_transformer",
        f"transformer SyntaxError transformer.py {line}",
        "kv_cache grader.learner.drivers.stand_in_transformer",  # kv_cache.py's own classes graded on it
    ], ran.stderr


def test_the_stand_in_holds_no_line_of_the_solutions():
    """grader/ ships to learners: the stand-in is built from torch's functions, never from the solutions' lines."""
    from grader.host.tools.release import hidden_lines

    for stand_in in ("stand_in_transformer.py", "stand_in_parts.py"):
        source = (REPO / "grader" / "learner" / "drivers" / stand_in).read_text().splitlines()
        assert not {line.strip() for line in source} & hidden_lines(SOLUTIONS), stand_in


# --- the probe of a tiny model: a mistake its initial scale would hide, and the learner's weights kept -------------

TINY_CONFIG = SimpleNamespace(**TINY, d_vocab=256, layer_norm_eps=1e-5, init_range=0.02)


def divided_by_d_head(attn):
    """The attention forward of the stand-in with its scores divided by d_head, not its square root."""

    def forward(x):
        q, k, v = (
            torch.einsum("bpm,hmd->bhpd", x, W) + b[:, None]
            for W, b in ((attn.W_Q, attn.b_Q), (attn.W_K, attn.b_K), (attn.W_V, attn.b_V))
        )
        d_head = q.shape[-1]
        z = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / d_head)
        return torch.einsum("bhpd,hdm->bpm", z, attn.W_O) + attn.b_O

    return forward


def test_the_probe_tells_a_wrong_tiny_model_and_puts_its_weights_back():
    model = seeded(TINY_CONFIG, seed=1)
    initial = {name: param.detach().clone() for name, param in model.named_parameters()}
    with torch.no_grad():
        assert agrees_on_probe_weights(model, TINY_CONFIG)
        for block in model.blocks:
            block.attn.forward = divided_by_d_head(block.attn)
        assert not agrees_on_probe_weights(model, TINY_CONFIG)
    assert all(torch.equal(param, initial[name]) for name, param in model.named_parameters())


def test_the_probe_refuses_a_model_whose_names_gpt2s_weights_would_not_load_into():
    model = seeded(TINY_CONFIG)
    model.unembed.register_parameter("bias", model.unembed.b_U)
    del model.unembed.b_U
    with torch.no_grad():
        assert not agrees_on_probe_weights(model, TINY_CONFIG)
