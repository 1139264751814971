"""Part 2: sampling, beam search and the KV cache.

The solutions pass, the stubs are todo (naming the function that raised, at its line), each
listed mistake fails at its check with its own diagnosis, correct code in other styles passes, and
the grader's own expected answers and its distribution bound hold up.
"""

from __future__ import annotations

import ast
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from repo import SOLUTIONS, by_id, stubs, tiered, write_variant

from grader.checks import registry
from grader.checks.sampling import _beam_search, _beams, search
from grader.checks.sampling import _compare as compare
from grader.checks.sampling import _oracle as oracle
from grader.checks.sampling.sampling_generate import END_OF_TEXT_DROPPED, NO_STOP, NOT_FED_BACK, PROMPT_ALONE
from grader.host.diagnose import matching_mistake
from grader.shared import wire

SAMPLING_CHECKS = ("sampling", "beam", "kv_cache")
DISTRIBUTION_CHECKS = ("sampling.basic", "sampling.top_k", "sampling.top_p")

TOP_P_KEEP = "n_keep = max(int((cumulative < top_p).sum()) + 1, min_tokens_to_keep)"
NGRAM_BAN = """        if no_repeat_ngram_size is not None:
            banned = self.banned_next_tokens(no_repeat_ngram_size, logprobs.shape[-1])
            logprobs = logprobs.masked_fill(banned, float("-inf"))
"""
APPEND = "            input_ids = torch.cat([input_ids, torch.tensor([next_token])])\n"
STOP = "            if next_token == self.tokenizer.eos_token_id:\n                break\n"
EOS_KEPT, EOS_DROPPED = APPEND + STOP, STOP + APPEND
PROBABILITIES_DIVIDED = "probs = logits.softmax(dim=-1) / temperature\n        probs = probs / probs.sum()"
MISTAKES = {  # name: (check, {file: [(old, new)]}, what the diagnosis must say)
    "temperature multiplied": (
        "sampling.temperature",
        {"sampling.py": [("return logits / temperature", "return logits * temperature")]},
        "multiplied by the temperature",
    ),
    # Temperature applied to the probabilities: renormalising undoes the division, returned as log-probabilities or
    # as the probabilities themselves; or probabilities at the right temperature returned for logits.
    "temperature applied to probabilities": (
        "sampling.temperature",
        {"sampling.py": [("return logits / temperature", f"{PROBABILITIES_DIVIDED}\n        return probs.log()")]},
        "the temperature changed nothing",
    ),
    "probabilities divided by the temperature returned": (
        "sampling.temperature",
        {"sampling.py": [("return logits / temperature", f"{PROBABILITIES_DIVIDED}\n        return probs")]},
        "dividing them by the temperature before renormalising undid it",
    ),
    "probabilities returned for logits": (
        "sampling.temperature",
        {"sampling.py": [("return logits / temperature", "return (logits / temperature).softmax(dim=-1)")]},
        "probabilities were returned, not logits",
    ),
    "penalty ignores repeats": (
        "sampling.frequency_penalty",
        {
            "sampling.py": [
                (
                    "counts = torch.bincount(input_ids, minlength=logits.shape[-1])\n"
                    "        return logits - freq_penalty * counts",
                    "logits = logits.clone()\n        logits[input_ids] -= freq_penalty\n        return logits",
                )
            ]
        },
        "penalised once, however often it occurs",
    ),
    "penalty ignores the vocabulary size": (
        "sampling.frequency_penalty",
        {"sampling.py": [("torch.bincount(input_ids, minlength=logits.shape[-1])", "torch.bincount(input_ids)")]},
        "one entry per vocabulary id",
    ),
    "top-k from all tokens": (
        "sampling.top_k",
        {
            "sampling.py": [
                (
                    "return int(top_ids[Categorical(logits=top_logits).sample()])",
                    "return int(torch.multinomial(logits.softmax(dim=-1), 1))",
                )
            ]
        },
        "outside the k most likely",
    ),
    "top-k threshold from sort's indices": (
        "sampling.top_k",
        {
            "sampling.py": [
                (
                    "top_logits, top_ids = logits.topk(k)\n"
                    "        return int(top_ids[Categorical(logits=top_logits).sample()])",
                    "threshold = torch.sort(logits).indices[..., -k]\n"
                    "        masked = logits.masked_fill(logits < threshold, -torch.inf)\n"
                    "        return int(Categorical(logits=masked).sample())",
                )
            ]
        },
        "a token id was the threshold",
    ),
    "top-p compares the sorted ids": (
        "sampling.top_p",
        {"sampling.py": [("(cumulative < top_p).sum()", "(sorted_ids < top_p).sum()")]},
        "the sorted token ids were compared with top_p",
    ),
    "top-p drops the crossing token": (
        "sampling.top_p",
        {"sampling.py": [("(cumulative < top_p).sum()) + 1", "(cumulative < top_p).sum())")]},
        "past top_p was dropped",
    ),
    "top-p ignores min_tokens_to_keep": (
        "sampling.top_p",
        {"sampling.py": [(TOP_P_KEEP, "n_keep = int((cumulative < top_p).sum()) + 1")]},
        "fewer than min_tokens_to_keep",
    ),
    "logits used as probabilities": (
        "sampling.basic",
        {
            "sampling.py": [
                ("return int(Categorical(logits=logits).sample())", "return int(torch.multinomial(logits, 1))")
            ]
        },
        "used as probabilities",
    ),
    "softmax applied twice": (
        "sampling.basic",
        {
            "sampling.py": [
                (
                    "return int(Categorical(logits=logits).sample())",
                    "return int(Categorical(logits=logits.softmax(dim=-1)).sample())",
                )
            ]
        },
        "the softmax was applied twice",
    ),
    "new token not fed back": (
        "sampling.generate",
        {
            "sampling.py": [
                (
                    "        for _ in range(max_tokens_generated):\n            logits = self.model(",
                    "        generated = input_ids\n"
                    "        for _ in range(max_tokens_generated):\n"
                    "            logits = self.model(",
                ),
                (
                    "input_ids = torch.cat([input_ids, torch.tensor([next_token])])",
                    "generated = torch.cat([generated, torch.tensor([next_token])])",
                ),
                ("return self.tokenizer.decode(input_ids)", "return self.tokenizer.decode(generated)"),
            ]
        },
        "same input at every step",
    ),
    "no stop at end-of-text": (
        "sampling.generate",
        {
            "sampling.py": [
                (
                    "            if next_token == self.tokenizer.eos_token_id:\n"
                    "                break\n"
                    "        return self.tokenizer.decode(input_ids)",
                    "        return self.tokenizer.decode(input_ids)",
                )
            ]
        },
        "went on after end-of-text",
    ),
    # The docstring says end-of-text stays in the text; learners' loops often break before appending it.
    "end-of-text dropped from the text": (
        "sampling.generate",
        {"sampling.py": [(EOS_KEPT, EOS_DROPPED)]},
        "end-of-text was left out of the text",
    ),
    "beams not sorted": (
        "beam.filter",
        {"sampling.py": [("topk(min(k, len(self))).indices", "topk(min(k, len(self))).indices.sort().values")]},
        "not sorted by log-prob sum",
    ),
    "finished beams dropped": (
        "beam.filter",
        {
            "sampling.py": [
                ("return self[best[~finished]], self[best[finished]]", "return self[best[~finished]], self[best[:0]]")
            ]
        },
        "finished beams (ending in end-of-text) were dropped",
    ),
    "n-gram ban not applied": ("beam.generate", {"sampling.py": [(NGRAM_BAN, "")]}, "repeats an n-gram"),
    "n-gram ban broadcast as ARENA's helper does": (
        "beam.generate",
        {
            "sampling.py": [
                (
                    "banned[repeats, ngram[repeats, -1]] = True",
                    "rows, ends = range(batch), ngram[:, [-1]]\n"
                    "            banned[rows, ends] = torch.where(repeats, True, banned[rows, ends])",
                )
            ]
        },
        "banned the next token of every beam's n-gram",
    ),
    "log-probs normalised over the kept tokens": (
        "beam.generate",
        {
            "sampling.py": [
                (
                    "top_logprobs, top_tokens = logprobs.topk(k, dim=-1)",
                    "top_logprobs, top_tokens = logprobs.topk(k, dim=-1)\n"
                    "        top_logprobs = top_logprobs.log_softmax(dim=-1)",
                )
            ]
        },
        "normalised over the k kept tokens",
    ),
    "logits added up in beam search": (
        "beam.generate",
        {
            "sampling.py": [
                (
                    "logprobs = self.model(self.tokens)[:, -1].log_softmax(dim=-1)",
                    "logprobs = self.model(self.tokens)[:, -1]",
                )
            ]
        },
        "logits were added up",
    ),
    "finished and continuing beams ranked apart": (
        "beam.filter",
        {
            "sampling.py": [
                (
                    "        best = self.logprob_sums.topk(min(k, len(self))).indices\n"
                    "        finished = self.tokens[best, -1] == self.tokenizer.eos_token_id\n"
                    "        return self[best[~finished]], self[best[finished]]",
                    "        done = self.tokens[:, -1] == self.tokenizer.eos_token_id\n"
                    "        going, ended = done.logical_not().nonzero()[:, 0], done.nonzero()[:, 0]\n"
                    "        going = going[self.logprob_sums[going].topk(min(k, len(going))).indices]\n"
                    "        ended = ended[self.logprob_sums[ended].topk(min(k, len(ended))).indices]\n"
                    "        return self[going], self[ended]",
                )
            ]
        },
        "ranked apart",
    ),
    # As issue 56 found it: the top k of each kind, then ranked together, but the 2k kept.
    "finished and continuing beams each cut to k, then ranked together": (
        "beam.filter",
        {
            "sampling.py": [
                (
                    "        best = self.logprob_sums.topk(min(k, len(self))).indices\n",
                    "        done = self.tokens[:, -1] == self.tokenizer.eos_token_id\n"
                    "        going, ended = (~done).nonzero()[:, 0], done.nonzero()[:, 0]\n"
                    "        going = going[self.logprob_sums[going].topk(min(k, len(going))).indices]\n"
                    "        ended = ended[self.logprob_sums[ended].topk(min(k, len(ended))).indices]\n"
                    "        best = torch.cat([going, ended])\n"
                    "        best = best[self.logprob_sums[best].argsort(descending=True)]\n",
                )
            ]
        },
        "ranked apart",
    ),
    "KV cache positions from 0": (
        "kv_cache",
        {"kv_cache.py": [("self.pos_embed(tokens, past_posn)", "self.pos_embed(tokens, 0)")]},
        "starts the new tokens' positions at 0",
    ),
    "KV cache mask without the cached length": (
        "kv_cache",
        {"kv_cache.py": [("self.cfg.d_head**0.5, past_posn)", "self.cfg.d_head**0.5)")]},
        "CachedAttention.forward's mask ignores the cached keys",
    ),
    "KV cache penalty without the prompt": (
        "kv_cache",
        {"kv_cache.py": [("self.sample_next_token(input_ids, ", "self.sample_next_token(new_tokens, ")]},
        "passes sample_next_token only the tokens it feeds the model",
    ),
    "KV cache positions off by one": (
        "kv_cache",
        {"kv_cache.py": [("kv_cache[0][0].shape[1]", "kv_cache[0][0].shape[1] - 1")]},
        "first differ at position 4",
    ),
}

ALTERNATIVES = {  # name: (checks that must pass, {file: [(old, new)]})
    "greedy returns a tensor": (
        ["sampling.greedy", "sampling.generate"],
        {"sampling.py": [("return int(logits.argmax())", "return logits.argmax()")]},
    ),
    "multinomial of the softmax": (
        ["sampling.basic"],
        {
            "sampling.py": [
                (
                    "return int(Categorical(logits=logits).sample())",
                    "return torch.multinomial(logits.softmax(dim=-1), 1).item()",
                )
            ]
        },
    ),
    # A sampler relying on the context sample() gives it: the draws call it under inference mode as sample() does.
    "sampling under sample()'s inference mode": (
        ["sampling.basic"],
        {
            "sampling.py": [
                (
                    "return int(Categorical(logits=logits).sample())",
                    "assert torch.is_inference_mode_enabled(), 'called outside sample()'\n"
                    "        return int(Categorical(logits=logits).sample())",
                )
            ]
        },
    ),
    "top-k by masking": (
        ["sampling.top_k"],
        {
            "sampling.py": [
                (
                    "top_logits, top_ids = logits.topk(k)\n"
                    "        return int(top_ids[Categorical(logits=top_logits).sample()])",
                    "masked = logits.masked_fill(logits < logits.topk(k).values[-1], float('-inf'))\n"
                    "        return int(Categorical(logits=masked).sample())",
                )
            ]
        },
    ),
    "top-p by masking the sorted tail": (
        ["sampling.top_p"],
        {
            "sampling.py": [
                (
                    f"{TOP_P_KEEP}\n"
                    "        kept_ids = sorted_ids[:n_keep]\n"
                    "        return int(kept_ids[Categorical(logits=logits[kept_ids]).sample()])",
                    "before = cumulative - sorted_logits.softmax(dim=-1)\n"
                    "        drop = before >= top_p\n"
                    "        drop[:min_tokens_to_keep] = False\n"
                    "        masked = logits.clone()\n"
                    "        masked[sorted_ids[drop]] = float('-inf')\n"
                    "        return int(torch.multinomial(masked.softmax(dim=-1), 1))",
                )
            ]
        },
    ),
    # Logits are defined up to one constant, which the softmax ignores: log-probabilities are logits too.
    "temperature as log-probabilities": (
        ["sampling.temperature"],
        {"sampling.py": [("return logits / temperature", "return (logits / temperature).log_softmax(dim=-1)")]},
    ),
    "penalty counted in a loop": (
        ["sampling.frequency_penalty"],
        {
            "sampling.py": [
                (
                    "counts = torch.bincount(input_ids, minlength=logits.shape[-1])\n"
                    "        return logits - freq_penalty * counts",
                    "logits = logits.clone()\n"
                    "        for token in input_ids.tolist():\n"
                    "            logits[token] -= freq_penalty\n"
                    "        return logits",
                )
            ]
        },
    ),
    "end-of-text appended by its own statement": (
        ["sampling.generate"],
        {
            "sampling.py": [
                (
                    EOS_KEPT,
                    EOS_DROPPED.replace(
                        "break", "input_ids = torch.cat([input_ids, torch.tensor([next_token])])\n                break"
                    ),
                )
            ]
        },
    ),
    "filter by argsort": (
        ["beam.filter", "beam.search"],
        {
            "sampling.py": [
                (
                    "best = self.logprob_sums.topk(min(k, len(self))).indices",
                    "best = self.logprob_sums.argsort(descending=True)[:k]",
                )
            ]
        },
    ),
}


# --- end to end ---------------------------------------------------------------------------------


def test_solutions_pass_every_sampling_check(grade):
    report = grade(SOLUTIONS, *SAMPLING_CHECKS)
    ids = [check.id for check in registry() if check.part == "sampling"]
    assert {c.id: (c.status, c.message) for c in report.checks} == {i: ("pass", "") for i in ids}
    assert len(ids) == 11


def test_stubs_are_todo(grade):
    report = grade(stubs(), *SAMPLING_CHECKS)
    assert {c.id: c.status for c in report.checks} == {c.id: "todo" for c in report.checks}
    assert (
        "TransformerSampler.sample_top_p is not implemented yet (sampling.py:"
        in by_id(report)["sampling.top_p"].message
    )


def function_node(path: Path, qualname: str) -> ast.FunctionDef:
    """The function `qualname` ("Beams.generate") of the file at `path`."""
    scope = ast.parse(path.read_text())
    for name in qualname.split("."):
        scope = next(node for node in scope.body if getattr(node, "name", None) == name)
    return scope


def raise_line(path: Path, qualname: str) -> int:
    """The line of the `raise` in the function `qualname` of the file at `path`."""
    return next(node.lineno for node in ast.walk(function_node(path, qualname)) if isinstance(node, ast.Raise))


def test_a_todo_names_the_function_that_raised_at_its_line(grade):
    """beam_search is given; what the learner has not written is Beams.generate, which it calls."""
    result = by_id(grade(stubs(), "beam.search"))["beam.search"]
    line = raise_line(stubs() / "sampling.py", "Beams.generate")
    assert result.message == f"Beams.generate is not implemented yet (sampling.py:{line})"
    assert result.next_step == f"implement Beams.generate (sampling.py:{line})"
    assert (result.file, result.line) == ("sampling.py", line)


def test_kv_cache_is_todo_when_the_bonus_file_is_absent(grade, tmp_path):
    package = tmp_path / "pkg"
    shutil.copytree(SOLUTIONS, package, ignore=shutil.ignore_patterns("__pycache__", "kv_cache.py"))
    (result,) = grade(package, "kv_cache").checks
    assert result.status == "todo" and "kv_cache.py" not in [p.name for p in package.iterdir()]


def test_a_broken_model_does_not_fail_the_sampling_checks(grade, tmp_path):
    broken = write_variant(
        tmp_path,
        {"transformer.py": [("return self.unembed(self.ln_final(residual))", "raise RuntimeError('a broken model')")]},
    )
    report = grade(broken, "sampling.generate", "beam.search", "transformer")
    assert {c.id: c.status for c in report.checks} == {
        "transformer": "error",
        "sampling.generate": "pass",
        "beam.search": "pass",
    }


@pytest.fixture(scope="module")
def graded_mistake(grade, tmp_path_factory):
    """name -> the result of its check, each mistake's variant graded once, when a test first asks: the two tests
    below read the same grading."""
    done = {}

    def result(name: str):
        if name not in done:
            check_id, edits, _ = MISTAKES[name]
            package = write_variant(tmp_path_factory.mktemp("mistake"), edits)
            done[name] = by_id(grade(package, check_id))[check_id]
        return done[name]

    return result


# `make test` grades a mistake of each file's main checks (sampling's temperature, top-k, top-p and generate, beam
# search, the KV cache); `make test-all` every one.
QUICK = (
    "temperature multiplied",
    "top-k from all tokens",
    "top-p drops the crossing token",
    "new token not fed back",
    "beams not sorted",
    "KV cache positions off by one",
)


@pytest.mark.parametrize("mistake", tiered(MISTAKES, QUICK))
def test_mistake_fails_at_its_check_with_its_message(mistake, graded_mistake):
    check_id, edits, fragment = MISTAKES[mistake]
    result = graded_mistake(mistake)
    assert result.status == "fail", (result.status, result.message)
    assert fragment in "\n".join(result.diagnosis()), result.diagnosis()
    assert result.score == 0
    # The sampler runs under a driver, without the recorder: --trace would print nothing.
    assert "--trace" not in result.next_step


@pytest.mark.parametrize(
    "mistake",
    tiered([name for name, (check_id, _, _) in MISTAKES.items() if check_id != "kv_cache"], QUICK[:-1]),  # no KV cache
)
def test_a_named_mistake_is_the_hint_and_the_next_step(mistake, graded_mistake):
    """The same mechanism as the model's checks: the case's known mistakes, matched by the check's
    own comparison, give the hint, and the next step names it."""
    check_id, edits, fragment = MISTAKES[mistake]
    result = graded_mistake(mistake)
    assert fragment in (result.hint or ""), (result.message, result.hint)
    assert fragment not in result.message and result.next_step == f"most likely: {result.hint}"


@pytest.mark.parametrize(
    ("mistake", "method"),
    [
        ("KV cache mask without the cached length", ("class CachedAttention", "def forward")),
        ("KV cache positions from 0", ("class CachedTransformer(", "def forward")),
        ("KV cache penalty without the prompt", ("class CachedTransformerSampler", "@torch.inference_mode()")),
    ],
)
def test_a_kv_cache_slip_is_located_in_the_method_that_holds_it(mistake, method, graded_mistake):
    """The driver reports where CachedAttention.forward is defined: the mask slip is pointed there, not at the
    CachedTransformer.forward the check calls."""
    result = graded_mistake(mistake)
    lines = (SOLUTIONS / "kv_cache.py").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(method[0]))
    forward = next(i for i in range(start, len(lines)) if lines[i].strip().startswith(method[1])) + 1
    assert (result.file, result.line) == ("kv_cache.py", forward), (result.file, result.line, result.hint)


@pytest.mark.parametrize(
    "alternative",
    tiered(ALTERNATIVES, ("greedy returns a tensor", "top-k by masking", "temperature as log-probabilities")),
)
def test_correct_code_in_another_style_passes(alternative, grade, tmp_path):
    check_ids, edits = ALTERNATIVES[alternative]
    report = by_id(grade(write_variant(tmp_path, edits), *check_ids))
    for check_id in check_ids:
        assert report[check_id].status == "pass", (check_id, report[check_id].message)


# --- the grader's expected answers --------------------------------------------------------------


def test_the_distribution_bound_is_what_the_docstring_says(reference):
    eps = compare.frequency_bound(5, compare.DRAWS)
    assert math.isclose(2 * 5 * math.exp(-2 * compare.DRAWS * eps**2), compare.FALSE_FAILURE_PER_CASE)
    cases = sum(len(reference.cases(check_id)) for check_id in DISTRIBUTION_CHECKS)
    assert cases == 6 and cases * compare.FALSE_FAILURE_PER_CASE < 1e-7


def test_each_known_wrong_distribution_is_far_from_the_right_one(reference):
    """A mistake's row either puts mass where the right answer has none, or moves some
    probability by more than twice the bound: it is then missed with probability below 1e-8."""
    for check_id in DISTRIBUTION_CHECKS:
        expected = reference.expected(check_id)
        for case in reference.cases(check_id):
            right = np.asarray(expected[case.name])
            eps = compare.frequency_bound(int((right > 0).sum()), compare.ROUNDS * compare.DRAWS)
            assert math.isclose(right.sum(), 1.0) and right.min() >= 0
            for i, hint in enumerate(case.mistakes):
                row = np.asarray(expected[wire.MISTAKE.format(case=case.name, i=i)])
                assert ((row > 0) & (right == 0)).any() or np.abs(row - right).max() > 2 * eps, (check_id, hint)


def test_frequency_comparison_passes_exact_counts_and_names_a_known_mistake():
    right, wrong = np.array([0.5, 0.5, 0.0]), np.array([1.0, 0.0, 0.0])
    mistakes = [("only the first token", wrong)]
    assert compare.frequencies(np.array([2000.0, 2000.0, 0.0]), right, None).ok
    only_first = np.array([4000.0, 0.0, 0.0])
    failed = compare.frequencies(only_first, right, None)
    assert not failed.ok and failed.message.startswith("token 0 was drawn 100.0%")
    assert matching_mistake(only_first, mistakes, None, compare.frequencies) == "only the first token"
    impossible = np.array([1999.0, 2000.0, 1.0])
    failed = compare.frequencies(impossible, right, None)
    assert not failed.ok and "token 2 was drawn 1 times, but its probability is 0" in failed.message
    assert matching_mistake(impossible, mistakes, None, compare.frequencies) is None


def test_top_p_sets_from_first_principles():
    probabilities = torch.tensor([0.04, 0.35, 0.10, 0.25, 0.20, 0.06], dtype=torch.float64)
    assert oracle.nucleus(probabilities, 0.7, 1) == [1, 3, 4]
    assert oracle.nucleus(probabilities, 0.7, 1, keep_crossing=False) == [1, 3]
    assert oracle.nucleus(probabilities, 0.2, 3) == [1, 3, 4]
    assert oracle.nucleus(probabilities, 0.2, 3, apply_minimum=False) == [1]


def test_the_generation_table_spells_its_sentence(reference):
    from grader.shared.formats import tensor_text

    expected = reference.expected("sampling.generate")
    texts = {
        (case.name, hint): tensor_text(expected[wire.MISTAKE.format(case=case.name, i=i)])
        for case in reference.cases("sampling.generate")
        for i, hint in enumerate(case.mistakes)
    }
    assert tensor_text(expected["until_end_of_text"]) == "the cat sat on the mat.<|endoftext|>"
    assert tensor_text(expected["until_max_tokens"]) == "the cat sat o"
    assert texts["until_end_of_text", NOT_FED_BACK] == "the cat" + " " * 24
    assert texts["until_end_of_text", END_OF_TEXT_DROPPED] == "the cat sat on the mat."
    assert "<|endoftext|>" in texts["until_end_of_text", NO_STOP].removesuffix("<|endoftext|>")
    # Six tokens never reach end-of-text: dropping it or not stopping changes nothing there.
    assert {hint for name, hint in texts if name == "until_max_tokens"} == {NOT_FED_BACK, PROMPT_ALONE}


def test_beam_search_beats_greedy_on_the_notes_example():
    table, eos = search.notes_table(), len(_beams.BEAM_ALPHABET)
    greedy = oracle.greedy_walk(table, [0], 2, eos)
    greedy_logprob = sum(_beam_search.log_softmax_row(table, tuple(greedy[:i]))[greedy[i]] for i in (1, 2))
    (best_logprob, best_tokens), _ = _beam_search.expected_beam_search(table, (0,), 2, 2, 2, 0, eos)
    assert greedy == [0, 1, 0] and math.isclose(math.exp(greedy_logprob), 0.18, rel_tol=1e-6)
    assert best_tokens == (0, 2, 0) and math.isclose(math.exp(best_logprob), 0.19, rel_tol=1e-6)


@pytest.mark.parametrize("seed", range(8, 14))
def test_one_beam_is_the_greedy_walk(seed):
    table, eos = _beams.beam_table(seed, eos_bias=0.5), len(_beams.BEAM_ALPHABET)
    [(_, tokens)] = _beam_search.expected_beam_search(table, (0,), 1, 1, 5, 0, eos)
    assert list(tokens) == oracle.greedy_walk(table, [0], 5, eos)


def test_beam_cases_have_no_near_ties():
    """Every kept candidate beats every dropped one by a margin far above float32 rounding."""
    eos = len(_beams.BEAM_ALPHABET)
    for name, (make_table, _, num_beams, max_new, ngram) in search.BEAM_SEARCHES.items():
        table, beams = make_table(), [(0.0, (0,))]
        for _ in range(max_new):
            ranked = _beam_search.best(_beam_search.extensions(table, beams, ngram), len(table[0]) ** 2)
            if len(ranked) > num_beams:
                assert ranked[num_beams - 1][0] - ranked[num_beams][0] > 1e-3, name
            beams = [beam for beam in ranked[:num_beams] if beam[1][-1] != eos]


def test_the_cases_show_each_beam_mistake(reference):
    expected = reference.expected("beam.generate")
    for name in ("no_repeat_bigram", "no_repeat_trigram"):
        right, unbanned = expected[name], expected[wire.MISTAKE.format(case=name, i=0)]
        assert not np.array_equal(right, unbanned), name
    searches = {name: _beams.parse_beams(rows) for name, rows in reference.expected("beam.search").items()}
    assert any(tokens[-1] == len(_beams.BEAM_ALPHABET) for _, _, tokens in searches["finished_beams"])


def test_stand_in_tokenizer_matches_gpt2s():
    from grader.builder.interface import PROMPT
    from grader.builder.reference import offline_tokenizer
    from grader.learner.drivers import text_tensor
    from grader.learner.drivers.stand_ins import Tokenizer

    gpt2 = offline_tokenizer()
    tokenizer = Tokenizer(text_tensor(gpt2.backend_tokenizer.to_str()))
    ids = gpt2.encode(PROMPT + " and then<|endoftext|>")
    assert tokenizer.encode(PROMPT + " and then<|endoftext|>") == ids
    assert tokenizer.encode(PROMPT, return_tensors="pt").tolist() == [gpt2.encode(PROMPT)]
    assert tokenizer.decode(torch.tensor(ids)) == gpt2.decode(ids)
    assert tokenizer.eos_token_id == gpt2.eos_token_id == 50256


# --- stress: the distribution checks, many times over, on the solution --------------------------


STRESS_SEEDS = 200


@pytest.mark.stress
def test_distribution_checks_never_fail_the_solution(reference):
    """200 runs of every distribution case with different seeds, a second round where the first does not decide
    (a few minutes on two busy cores)."""
    from safetensors import safe_open

    from grader.learner.cases import CaseContext
    from grader.learner.drivers.sampling import draw
    from grader.learner.package import LearnerPackage

    package = LearnerPackage(SOLUTIONS)
    declared = {check.id: check for check in registry()}
    for check_id in DISTRIBUTION_CHECKS:
        check, expected = declared[check_id], reference.expected(check_id)
        with safe_open(str(reference.inputs_path(check_id)), "pt") as inputs:
            ctx = CaseContext(
                package,
                wire.TargetSpec("sampling", "TransformerSampler", check.target.method, check.target.driver),
                None,
                inputs,
            )
            for case in reference.cases(check_id):
                ctx.start(case)
                for seed in range(STRESS_SEEDS):
                    torch.manual_seed(seed)
                    counts = draw(ctx, ctx.args)
                    if check.run.draws_again(counts.numpy(), expected[case.name]):  # as runner.rounds asks again
                        torch.manual_seed(STRESS_SEEDS + seed)
                        counts = counts + draw(ctx, ctx.args)
                    result = check.comparison(counts, expected[case.name], check.tolerance)
                    assert result.ok, (check_id, case.name, seed, result.message)


# --- the second round of draws (Run.draws_again): the learner's process sees only its seed -----------------------

SECOND_ROUND_RAISES = (
    '        if torch.initial_seed() == 1:\n            raise RuntimeError("drawn in a second round")\n'
)
BASIC = "        return int(Categorical(logits=logits).sample())\n"
TOP_K = "        return int(top_ids[Categorical(logits=top_logits).sample()])\n"
TOP_P = "        return int(kept_ids[Categorical(logits=logits[kept_ids]).sample()])\n"
# The most likely token's probability, 0.06 of it moved to the least likely: the first round is not settled.
BIASED_BASIC = """        probabilities = logits.softmax(dim=-1).clone()
        probabilities[probabilities.argmax()] -= 0.06
        probabilities[probabilities.argmin()] += 0.06
        return int(Categorical(probs=probabilities).sample())
"""


def test_the_solutions_distributions_are_settled_by_one_round(grade, tmp_path):
    edits = {"sampling.py": [(line, SECOND_ROUND_RAISES + line) for line in (BASIC, TOP_K, TOP_P)]}
    report = by_id(grade(write_variant(tmp_path, edits), *DISTRIBUTION_CHECKS))
    assert {check_id: report[check_id].status for check_id in DISTRIBUTION_CHECKS} == dict.fromkeys(
        DISTRIBUTION_CHECKS, "pass"
    ), [report[check_id].message for check_id in DISTRIBUTION_CHECKS]


def test_an_unsettled_first_round_is_drawn_again_with_the_next_seed(grade, tmp_path):
    edits = {"sampling.py": [(BASIC, SECOND_ROUND_RAISES + BIASED_BASIC)]}
    result = by_id(grade(write_variant(tmp_path, edits), "sampling.basic"))["sampling.basic"]
    assert result.status == "error" and "drawn in a second round" in result.message, result.message
