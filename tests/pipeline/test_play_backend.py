"""The playground's backend (issue 59): `Playground` on the solutions, a written-wrong variant, the stubs, a crash and
a hang, against the session's random reference. Each test starts GPT-2's builder process and a learner process."""

from __future__ import annotations

import json

import numpy as np
import pytest
from repo import SOLUTIONS, by_id, stubs, write_variant

from grader.host.play.answers import top_tokens
from grader.host.play.entry import MODULES
from grader.host.play.session import Playground

pytestmark = pytest.mark.slow

TEXT = "The cat sat on the mat"  # the prompt the reference entry's transformer case holds GPT-2's logits for
N_LAYERS = N_HEADS = 12


def started(package, timeout: float = 60.0) -> Playground:
    return Playground.start(package, "random", timeout=timeout)


def assert_complete(answer: dict) -> None:
    """Every part of the answer is there for both models, and it is JSON for the page."""
    n = len(answer["tokens"])
    json.dumps(answer, allow_nan=False)
    assert len(answer["next"]["yours"]) == len(answer["next"]["gpt2"]) == 10
    for side in ("yours", "gpt2"):
        patterns = np.array(answer["inside"]["patterns"][side])
        assert patterns.shape == (N_LAYERS, N_HEADS, n, n)
        assert np.allclose(patterns.sum(-1), 1.0, atol=n * 0.5e-4 + 1e-6)  # each weight to 4 digits
        assert np.array(answer["inside"]["induction"][side]).shape == (N_LAYERS, N_HEADS)
        assert np.array(answer["inside"]["previous_token"][side]).shape == (N_LAYERS, N_HEADS)
        assert [len(row) for row in answer["inside"]["logit_lens"][side]] == [n] * (N_LAYERS + 1)
    assert [row["module"] for row in answer["where"]] == list(MODULES)


def test_solutions_match_gpt2_on_the_text_and_continue_it_alike(reference):
    with started(SOLUTIONS) as play:
        answer = play.analyse(TEXT)
        generated = play.generate(TEXT, max_new_tokens=8, greedy=True)
    assert_complete(answer)
    # GPT-2's side against the reference entry's own logits on this prompt (built by the cache's builder)
    entry_logits = reference.expected("transformer")["prompt"][0, -1]
    expected = top_tokens(entry_logits, reference.vocabulary())
    assert [t["token"] for t in answer["next"]["gpt2"]] == [t["token"] for t in expected]
    assert [t["p"] for t in answer["next"]["gpt2"]] == pytest.approx([t["p"] for t in expected], rel=1e-4)
    assert [t["token"] for t in answer["next"]["yours"]] == [t["token"] for t in answer["next"]["gpt2"]]
    assert answer["next"]["max_logit_diff"] < 1e-3
    assert answer["stand_ins"] == [] and answer["error"] is None and answer["first_difference"] is None
    assert all(row["status"] == "pass" and row["mistake"] is None for row in answer["where"])
    assert answer["tokens"][1:] == ["The", " cat", " sat", " on", " the", " mat"]
    yours, theirs = generated["yours"], generated["gpt2"]
    assert generated["error"] is None and yours["kv_cache"] and yours["ms_per_token_cached"] > 0
    assert yours["text"] == theirs["text"] and len(theirs["text"]) > len(TEXT)


def test_variance_with_n_minus_1_is_named_in_where_as_grade_names_it(tmp_path, grade):
    package = write_variant(tmp_path, {"normalization.py": [("unbiased=False", "unbiased=True")]})
    with started(package) as play:
        answer = play.analyse(TEXT)
    assert_complete(answer)
    graded = by_id(grade(package, "layernorm"))["layernorm"]
    rows = {row["module"]: row for row in answer["where"]}
    assert rows["layernorm"]["status"] == "fail" and graded.status == "fail"
    assert rows["layernorm"]["mistake"] == graded.hint and "N-1" in graded.hint
    assert (
        rows["layernorm"]["first_step"].startswith("mean matches")
        and "var is the first step" in rows["layernorm"]["first_step"]
    )
    assert answer["first_difference"]["module"] == "layernorm"
    assert all(rows[module]["status"] == "pass" for module in ("embed", "pos_embed", "attention", "mlp"))


def test_stubs_answer_in_full_with_every_module_the_grader_s(reference):
    with started(stubs()) as play:
        answer = play.analyse(TEXT)
    assert_complete(answer)
    assert answer["stand_ins"] == [{"module": module, "why": "not written yet"} for module in MODULES]
    assert all(row["status"] == "todo" for row in answer["where"]) and answer["error"] is None
    assert [t["token"] for t in answer["next"]["yours"]] == [t["token"] for t in answer["next"]["gpt2"]]


def line_of(package, file: str, text: str) -> int:
    return (package / file).read_text().splitlines().index(text) + 1


def test_a_crash_in_attention_is_an_error_with_its_line_and_the_next_request_works(reference, tmp_path):
    raised = "        raise ValueError('boom')"
    edit = ("        attn_scores = einops.einsum(", raised + "\n        attn_scores = einops.einsum(")
    package = write_variant(tmp_path, {"attention.py": [edit]})
    with started(package) as play:
        first, second = play.analyse(TEXT), play.analyse("A different text, longer than the first one")
    for answer in (first, second):
        assert_complete(answer)
        assert answer["error"] == {
            "file": "attention.py",
            "line": line_of(package, "attention.py", raised),
            "message": "ValueError: boom",
        }
        assert [entry["module"] for entry in answer["stand_ins"]] == ["attention"]
        assert answer["stand_ins"][0]["why"].startswith("raises ValueError: boom")


def test_a_hang_in_the_mlp_is_stopped_at_the_timeout_with_its_line_and_the_next_request_works(reference, tmp_path):
    docstring = '        """pre = x W_in + b_in; post = gelu_new(pre); out = post W_out + b_out.'
    package = write_variant(tmp_path, {"mlp.py": [(docstring, "        while True:\n            pass\n" + docstring)]})
    loop = {line_of(package, "mlp.py", "        while True:"), line_of(package, "mlp.py", "            pass")}
    with started(package, timeout=5.0) as play:
        first, second = play.analyse(TEXT), play.analyse("The dog ran")
    for answer in (first, second):
        assert_complete(answer)
        assert answer["error"]["file"] == "mlp.py" and answer["error"]["line"] in loop
        assert "no answer within 5 s" in answer["error"]["message"]
        assert answer["stand_ins"] == [{"module": "mlp", "why": "does not finish (stopped at the timeout)"}]
        assert by_id_rows(answer)["transformer"] == "pass"  # graded with the grader's MLP in its place


def by_id_rows(answer: dict) -> dict:
    return {row["module"]: row["status"] for row in answer["where"]}
