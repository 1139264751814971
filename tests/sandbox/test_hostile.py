"""Learner code can neither break the grader nor fool it (hostile packages written here)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from repo import SOLUTIONS, by_id, run_grade, tiered, write_variant

PATCH_EVERY_COMPARISON = """
import torch as _torch
_always = lambda *args, **kwargs: True
_torch.allclose = _always
_torch.equal = _always
_torch.isclose = lambda a, b, *args, **kwargs: _torch.ones_like(a, dtype=_torch.bool)
_torch.Tensor.__sub__ = lambda self, other: _torch.zeros_like(self)
_torch.Tensor.__eq__ = lambda self, other: _torch.ones_like(self, dtype=_torch.bool)
_torch.Tensor.abs = lambda self: _torch.zeros_like(self)
_torch.testing.assert_close = lambda *args, **kwargs: None
"""


def attention_body_prefix(statement: str) -> list[tuple[str, str]]:
    """Insert `statement` as the first line of Attention.forward's solution body."""
    marker = "        ### BEGIN SOLUTION\n"
    return [(marker + "        per_head = ", f"{marker}        {statement}\n        per_head = ")]


@pytest.mark.slow  # grades every check (about 5 s); test_no_fork's patched comparisons run in `make test`
def test_patched_comparisons_and_zeros_score_nothing_where_they_touch(grade, tmp_path):
    package = write_variant(
        tmp_path,
        {
            "attention.py": [
                (
                    "from .config import Config, normal_weight\n",
                    "from .config import Config, normal_weight\n" + PATCH_EVERY_COMPARISON,
                )
            ]
            + attention_body_prefix("return torch.zeros_like(normalized_resid_pre)")
        },
    )
    results = by_id(grade(package))
    assert {i: results[i].status for i in ("attention", "transformer")} == {"attention": "fail", "transformer": "fail"}
    # The block is graded with GPT-2's sublayer outputs replayed into it, so its right wiring passes.
    untouched = ("embed", "pos_embed", "layernorm", "attention.causal_mask", "gelu_new", "mlp", "block", "unembed")
    assert {i: results[i].status for i in untouched} == {i: "pass" for i in untouched}
    assert sum(results[i].score for i in untouched) == sum(results[i].max_score for i in untouched)


# id: (statement at the start of Attention.forward, status, fragment of the message); the first
# five end or hang the process that runs them, with or without forks (tests/sandbox/test_no_fork.py).
BREAKING = {
    "infinite loop": ("while True: pass", "timeout", "no answer within 3 s"),
    "sys.exit": ("import sys; sys.exit(0)", "error", "SystemExit"),
    "SystemExit": ("raise SystemExit('bye')", "error", "SystemExit: bye"),
    "KeyboardInterrupt": ("raise KeyboardInterrupt", "error", "KeyboardInterrupt"),
    "os._exit": ("import os; os._exit(3)", "error", "exited with code 3"),
    "segfault": ("import ctypes; ctypes.string_at(0)", "error", "killed by SIGSEGV"),
    "out of memory": ("blob = torch.ones(3 * 2**28)", "error", "memory"),
}
ENDS_ANY_PROCESS = list(BREAKING)[:5]


# `make test`: a hang, an exit, a signal and memory; the other ways out of Python in `make test-all`.
QUICK_BREAKING = ("infinite loop", "os._exit", "segfault", "out of memory")


@pytest.mark.parametrize(("statement", "status", "fragment"), tiered(BREAKING.values(), QUICK_BREAKING, ids=BREAKING))
def test_a_check_that_breaks_its_process_costs_only_itself(statement, status, fragment, grade, tmp_path):
    package = write_variant(tmp_path, {"attention.py": attention_body_prefix(statement)})
    results = by_id(grade(package, "embed", "attention", "mlp", timeout=3, memory_gb=2))
    assert results["attention"].status == status
    assert fragment in results["attention"].message and "\n" not in results["attention"].message
    assert results["embed"].status == results["mlp"].status == "pass"


@pytest.mark.parametrize(
    ("statement", "fragment"),
    [
        ("return normalized_resid_pre.as_subclass(type('Sneaky', (torch.Tensor,), {}))", "not a torch.Tensor"),
        ("return normalized_resid_pre.long()", "dtype int64"),
        ("return torch.full_like(normalized_resid_pre, float('nan'))", "the first a NaN at index (0, 0, 0)"),
        ("return torch.empty_like(normalized_resid_pre, device='meta')", "expected cpu"),
        ("return [normalized_resid_pre]", "returned a builtins.list"),
    ],
    ids=["tensor subclass", "integer dtype", "NaN", "wrong device", "not a tensor"],
)
def test_outputs_are_validated_before_comparison(statement, fragment, grade, tmp_path):
    result = by_id(grade(write_variant(tmp_path, {"attention.py": attention_body_prefix(statement)}), "attention"))[
        "attention"
    ]
    assert result.status == "fail" and fragment in result.message, result.message


@pytest.mark.parametrize(
    ("edits", "fragment"),
    [
        (
            {"attention.py": [("import einops\n", "import einops\nimport transformer_lens\n")]},
            "may not import transformer_lens",
        ),
        ({"attention.py": attention_body_prefix("from transformers import GPT2Model")}, "may not import transformers"),
        ({"attention.py": attention_body_prefix("import solutions.attention")}, "may not import solutions"),
        (
            {"attention.py": attention_body_prefix(f"exec(open({str(SOLUTIONS / 'attention.py')!r}).read())")},
            "may not read",
        ),
    ],
    ids=["static transformer_lens", "run-time transformers", "solutions", "reading solutions/"],
)
def test_exercises_may_not_delegate_to_the_reference(edits, fragment, grade, tmp_path):
    results = by_id(grade(write_variant(tmp_path, edits), "embed", "attention"))
    assert results["attention"].status == "fail" and fragment in results["attention"].message, results[
        "attention"
    ].message
    assert results["embed"].status == "pass"


@pytest.mark.slow
def test_a_syntax_error_costs_only_the_checks_that_need_its_file(grade, tmp_path):
    package = write_variant(tmp_path, {"mlp.py": [("        post = gelu_new(pre)\n", "        post = gelu_new(pre\n")]})
    results = by_id(grade(package))
    for check_id in ("gelu_new", "mlp", "block", "transformer"):
        assert (
            results[check_id].status == "error"
            and "SyntaxError" in results[check_id].message
            and "mlp.py:" in results[check_id].message
        )
    assert all(results[i].status == "pass" for i in ("embed", "pos_embed", "layernorm", "attention", "unembed"))


def test_missing_file_and_class_are_named(grade, tmp_path):
    package = write_variant(tmp_path, {"embedding.py": [("class PosEmbed(", "class PositionalEmbedding(")]})
    (package / "unembedding.py").unlink()
    results = by_id(grade(package, "embed", "pos_embed", "unembed"))
    assert results["embed"].status == "pass"
    assert results["pos_embed"].status == "error" and "embedding.py has no PosEmbed" in results["pos_embed"].message
    assert results["unembed"].status == "error" and "unembedding.py is missing" in results["unembed"].message


@pytest.mark.slow  # the `grade` command twice; test_first_report's printed lines and test_resources' cap in `make test`
def test_learner_output_is_shown_with_its_check_and_neutralised(reference, tmp_path):
    """What the learner's code prints is theirs to see, under its check's label; a forged workflow
    command never starts a line and an escape sequence reaches no terminal."""
    printing = "        print('PRINTED BY LEARNER')\n        print('::error::forged')\n        print('\\x1b[31mred')\n"
    package = write_variant(
        tmp_path, {"embedding.py": [("        return self.W_E[tokens]", printing + "        return self.W_E[tokens]")]}
    )
    result = run_grade("--reference", "random", "--exercises", str(package), "embed")
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and "  | PRINTED BY LEARNER" in lines
    assert lines[lines.index("  | PRINTED BY LEARNER") - 1] == "embed printed:"
    assert "  | ::error::forged" in lines and not any(line.startswith("::") for line in lines)
    assert "\x1b" not in result.stdout + result.stderr and "  | \ufffd[31mred" in lines
    quiet = run_grade("--reference", "random", "--exercises", str(package), "embed", "--quiet")
    assert quiet.returncode == 0 and "PRINTED BY LEARNER" not in quiet.stdout + quiet.stderr


@pytest.mark.slow
def test_damaged_reference_cache_is_rebuilt_bit_for_bit(reference, tmp_path):
    """A damaged entry is reported and rebuilt, and the rebuild equals the cached entry exactly:
    a fresh build and a warm cache give the same verdicts."""
    from safetensors.numpy import load_file

    from grader.host.refcache import ensure_reference
    from grader.shared.entry import digested_files

    shutil.copytree(reference.directory, tmp_path / reference.directory.name)
    shutil.copytree(reference.directory.parent / "random-hub", tmp_path / "random-hub")
    damaged = tmp_path / reference.directory.name / "expected.safetensors"
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    messages = []
    rebuilt = ensure_reference("random", lambda message, fraction=None: messages.append(message), root=tmp_path)
    assert any("is damaged" in m and "rebuilding" in m for m in messages)
    for path in digested_files(reference.directory):
        name = path.relative_to(reference.directory)
        if path.suffix != ".safetensors":
            assert (rebuilt.directory / name).read_bytes() == path.read_bytes(), name
            continue
        fresh, cached = load_file(str(rebuilt.directory / name)), load_file(str(path))
        assert fresh.keys() == cached.keys()
        assert all(np.array_equal(fresh[key], cached[key], equal_nan=True) for key in fresh), name


@pytest.mark.slow
def test_unwritable_cache_still_grades(reference, tmp_path):
    """Also a fresh entry for another input seed, which the report names."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory should be")
    env = {"GPT2_GRADER_CACHE": str(blocker / "cache")}
    result = run_grade(
        "--reference", "random", "--solutions", "embed", "--seed", "7", "--json", str(tmp_path / "r.json"), env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cannot write the reference cache" in result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["score"] == 1 and report["seed"] == 7 and "seed 7" in result.stdout


def corrupt_hf_cache(root: Path) -> Path:
    from grader.builder.reference import write_random_hub

    hub = root / "hub"
    write_random_hub(hub, weights=True)
    weights = next(hub.glob("models--gpt2/snapshots/*/model.safetensors"))
    weights.write_bytes(weights.read_bytes()[:1000])
    return hub


@pytest.mark.slow
def test_corrupt_hugging_face_cache(reference, tmp_path):
    env = {"HF_HUB_CACHE": str(corrupt_hf_cache(tmp_path)), "GPT2_GRADER_CACHE": os.environ["GPT2_GRADER_CACHE"]}
    strict = run_grade("--reference", "gpt2", "--solutions", "embed", env=env)
    assert strict.returncode == 2
    assert [line for line in strict.stderr.splitlines() if line.startswith("grade:")][-1].startswith(
        "grade: could not build the gpt2 reference"
    )
    fallback = run_grade("--solutions", "embed", env=env)
    assert fallback.returncode == 0 and "RANDOM model" in fallback.stdout.replace("\n", " ")
