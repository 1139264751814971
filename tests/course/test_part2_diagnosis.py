"""Part 2 diagnosed like Part 1 (issue 26): a beam or sampling check whose parts fail says so first, points at
the learner's own function (never the given beam_search), turns a wrong kind of returned value into a sentence
about it, and names the common slips of top-k, top-p and the n-gram ban.

Each package below is solutions/ with several functions written wrong, each one whose checks do not call the
others' (beam.search calls Beams.generate and filter, and says so), so that one grading serves several tests: the
distribution checks draw 4000 tokens per case.
"""

from __future__ import annotations

import numpy as np
import pytest
from repo import by_id, write_variant
from test_sampling import function_node

from grader.checks.sampling._common import INDEX_NOT_MAPPED, NOT_RENORMALISED
from grader.checks.sampling._compare import frequencies
from grader.checks.sampling.beam_generate import BANNED_ACROSS_BEAMS
from grader.checks.sampling.top_k import K_PLUS_ONE, SMALLEST_K
from grader.checks.sampling.top_p import CROSSING_DROPPED

CHECKS = ("sampling.greedy", "sampling.generate", "sampling.top_k", "sampling.top_p", "beam")
TOP_K = "top_logits, top_ids = logits.topk(k)\n        return int(top_ids[Categorical(logits=top_logits).sample()])"
TOP_P_DRAW = (
    "kept_ids = sorted_ids[:n_keep]\n        return int(kept_ids[Categorical(logits=logits[kept_ids]).sample()])"
)
TOP_P_KEEP = f"n_keep = max(int((cumulative < top_p).sum()) + 1, min_tokens_to_keep)\n        {TOP_P_DRAW}"
FILTER_RETURN = "return self[best[~finished]], self[best[finished]]"
MODEL_CALL = "logprobs = self.model(self.tokens)[:, -1]"
MODEL_GIVEN_A_LIST = "logprobs = self.model(self.tokens.tolist())[:, -1]"


def unrenormalised_draw(probabilities: str, ids: str, n: str) -> str:
    """A draw that walks the kept probabilities' cumulative sum without renormalising them (clamped at the end)."""
    return (
        f"index = min(int(({probabilities}.cumsum(dim=-1) < torch.rand(())).sum()), {n} - 1)\n"
        f"        return int({ids}[index])"
    )


PACKAGES = {  # name: edits of sampling.py, as a learner would write each slip
    "cross_beam_ban": [
        ("banned[repeats, ngram[repeats, -1]] = True", "banned[:, ngram[repeats, -1]] = True"),
        # the k-th largest logit is sorted[k - 1]: sorted[k] as the threshold keeps k + 1 tokens
        (
            TOP_K,
            "threshold = logits.sort(descending=True).values[k]\n"
            '        return int(Categorical(logits=logits.masked_fill(logits < threshold, float("-inf"))).sample())',
        ),
        (
            TOP_P_DRAW,
            "kept_ids = sorted_ids[:n_keep]\n        return int(Categorical(logits=logits[kept_ids]).sample())",
        ),
        ("return int(logits.argmax())", "return int(logits.max())"),
    ],
    "filter_returns_lists": [
        (
            FILTER_RETURN,
            "continuing, done = best[~finished], best[finished]\n"
            "        return (\n"
            "            self.new_beams(self.logprob_sums[continuing], self.tokens[continuing].tolist()),\n"
            "            self.new_beams(self.logprob_sums[done], self.tokens[done].tolist()),\n"
            "        )",
        ),
        (
            "top_logits, top_ids = logits.topk(k)",
            "sorted_logits, sorted_ids = logits.sort()\n"
            "        top_logits, top_ids = sorted_logits[:k], sorted_ids[:k]",
        ),
        (
            TOP_P_DRAW,
            "kept_ids = sorted_ids[:n_keep]\n        kept_probabilities = sorted_logits.softmax(dim=-1)[:n_keep]\n"
            f"        {unrenormalised_draw('kept_probabilities', 'kept_ids', 'n_keep')}",
        ),
    ],
    "model_given_a_list": [
        (MODEL_CALL, MODEL_GIVEN_A_LIST),
        (
            TOP_K,
            f"top_probabilities, top_ids = logits.softmax(dim=-1).topk(k)\n"
            f"        {unrenormalised_draw('top_probabilities', 'top_ids', 'k')}",
        ),
        # the same off-by-one as "top-p drops the crossing token" of test_sampling, written as a mask
        (
            TOP_P_KEEP,
            "drop = cumulative > top_p\n"
            "        drop[:min_tokens_to_keep] = False\n"
            "        masked = logits.clone()\n"
            '        masked[sorted_ids[drop]] = float("-inf")\n'
            "        return int(Categorical(logits=masked).sample())",
        ),
    ],
    "filter_returns_one_beams": [
        (FILTER_RETURN, "return self[best]"),
        (TOP_K, "top_logits, top_ids = logits.topk(k)\n        return int(Categorical(logits=top_logits).sample())"),
    ],
}


@pytest.fixture(scope="module")
def graded(grade, tmp_path_factory):
    """name -> (the package, its results by check id), each package graded once, when a test first asks."""
    done = {}

    def results(name: str):
        if name not in done:
            package = write_variant(tmp_path_factory.mktemp(name), {"sampling.py": PACKAGES[name]})
            done[name] = package, by_id(grade(package, *CHECKS))
        return done[name]

    return results


def def_line(package, qualname: str) -> int:
    """Where Python says the function is defined: at its first decorator (@staticmethod), if any."""
    node = function_node(package / "sampling.py", qualname)
    return min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])


def line_with(package, code: str) -> tuple[int, str]:
    """The number and the text of the one line of sampling.py that holds `code`."""
    [found] = [
        (i, line.strip())
        for i, line in enumerate((package / "sampling.py").read_text().splitlines(), 1)
        if code in line
    ]
    return found


# --- a check whose parts fail names them, and points at no line of the given loop -------------------


def test_beam_search_names_the_failing_generate_and_no_line_of_the_given_loop(graded):
    package, results = graded("cross_beam_ban")
    search = results["beam.search"]
    assert search.status == "fail"
    assert search.message.startswith(
        "your Beams.generate fails its own check: fix beam.generate first; differs from the exhaustive search on "
    ), search.message
    assert search.next_step == "fix beam.generate first (grade beam.generate), then grade beam.search again"
    assert (search.file, search.line) == ("sampling.py", None)
    assert "beam_search" not in "\n".join(search.diagnosis())


def test_sampling_generate_names_the_failing_greedy_search(graded):
    _, results = graded("cross_beam_ban")
    generate = results["sampling.generate"]
    assert results["sampling.greedy"].status == "fail" and generate.status == "fail"
    assert generate.message.startswith(
        "your TransformerSampler.greedy_search fails its own check: fix sampling.greedy first; "
    ), generate.message
    assert generate.next_step == "fix sampling.greedy first (grade sampling.greedy), then grade sampling.generate again"


@pytest.mark.slow
def test_kv_cache_names_the_failing_greedy_search(grade, tmp_path):
    package = write_variant(tmp_path, {"sampling.py": [("return int(logits.argmax())", "return int(logits.max())")]})
    result = by_id(grade(package, "sampling.greedy", "kv_cache"))["kv_cache"]
    assert result.message.startswith("your TransformerSampler.greedy_search fails its own check: fix sampling.greedy")


# --- a wrong kind of returned value, said of that value, at the learner's function ------------------


def test_beam_filter_returning_lists_is_said_so_at_its_def(graded):
    package, results = graded("filter_returns_lists")
    line = def_line(package, "Beams.filter")
    said = f"TypeError: Beams.filter returned a list as tokens; return tensors (sampling.py:{line})"
    assert (results["beam.filter"].status, results["beam.filter"].message) == ("error", said)
    search = results["beam.search"]  # at filter, not at the line of the given loop that called it
    assert search.status == "error" and search.message.endswith(said), search.message
    assert {(r.file, r.line) for r in (results["beam.filter"], search)} == {("sampling.py", line)}


# Two of the four slip packages (model_given_a_list, filter_returns_one_beams), each a grading, run in `make test-all`.
@pytest.mark.slow
def test_beam_filter_returning_one_beams_is_said_so(graded):
    package, results = graded("filter_returns_one_beams")
    line = def_line(package, "Beams.filter")
    said = f"TypeError: Beams.filter returned a Beams, not a pair of Beams (continuing, finished) (sampling.py:{line})"
    assert results["beam.filter"].message == said and results["beam.search"].message.endswith(said)
    assert results["beam.generate"].status == "pass" and not results["beam.generate"].hint


@pytest.mark.slow
def test_beam_generate_giving_the_model_a_list_is_said_so_at_its_line(graded):
    package, results = graded("model_given_a_list")
    line, code = line_with(package, MODEL_GIVEN_A_LIST)
    said = f"TypeError: the model takes a tensor of token ids, not a list (sampling.py:{line}: {code})"
    assert results["beam.generate"].message == said
    assert results["beam.search"].message.endswith(said), results["beam.search"].message
    assert {(r.file, r.line) for r in (results["beam.generate"], results["beam.search"])} == {("sampling.py", line)}


# --- named mistakes: each slip, written as a learner would, named by its check -----------------------


TOP_K_FUNCTION, TOP_P_FUNCTION = "TransformerSampler.sample_top_k", "TransformerSampler.sample_top_p"
SLOW = pytest.mark.slow  # the packages graded only in `make test-all` (above)


@pytest.mark.parametrize(
    ("package", "check_id", "hint", "function"),
    [
        ("cross_beam_ban", "beam.generate", BANNED_ACROSS_BEAMS, "Beams.generate"),
        ("cross_beam_ban", "sampling.top_k", K_PLUS_ONE, TOP_K_FUNCTION),
        ("cross_beam_ban", "sampling.top_p", INDEX_NOT_MAPPED, TOP_P_FUNCTION),
        ("filter_returns_lists", "sampling.top_k", SMALLEST_K, TOP_K_FUNCTION),
        ("filter_returns_lists", "sampling.top_p", NOT_RENORMALISED, TOP_P_FUNCTION),
        pytest.param("model_given_a_list", "sampling.top_k", NOT_RENORMALISED, TOP_K_FUNCTION, marks=SLOW),
        pytest.param("model_given_a_list", "sampling.top_p", CROSSING_DROPPED, TOP_P_FUNCTION, marks=SLOW),
        pytest.param("filter_returns_one_beams", "sampling.top_k", INDEX_NOT_MAPPED, TOP_K_FUNCTION, marks=SLOW),
    ],
)
def test_sampling_and_beam_slips_are_named_at_the_learners_function(graded, package, check_id, hint, function):
    path, results = graded(package)
    result = results[check_id]
    assert (result.status, result.hint, result.next_step) == ("fail", hint, f"most likely: {hint}"), result.message
    assert hint not in result.message
    assert (result.file, result.line) == ("sampling.py", def_line(path, function))


def test_sampling_says_what_an_impossible_token_likely_means_and_nothing_the_code_already_does(graded):
    """The message's reading of the draws fits the slip: one token too many, the least likely kept, an index
    returned as the token; and it never asks the learner to do what their code does."""
    messages = {
        "one too many": graded("cross_beam_ban")[1]["sampling.top_k"].message,
        "least likely": graded("filter_returns_lists")[1]["sampling.top_k"].message,
        "index": graded("cross_beam_ban")[1]["sampling.top_p"].message,
    }
    assert messages["one too many"].endswith(
        "it is outside the top k (tokens 1, 3); it came out beside every one of them: is one token too many kept?"
    ), messages
    assert (
        "are the most likely tokens kept?" in messages["least likely"] and "map it back" not in messages["least likely"]
    )
    assert "it is outside the top-p set (tokens 1, 2, 3, 4)" in messages["index"]
    assert "map it back to its token id" in messages["index"] and "most likely tokens" not in messages["index"]


def test_sampling_reading_of_impossible_tokens_follows_the_counts():
    """Each branch of the reading, on counts made by hand: kept tokens 1 and 3 of six."""
    right = np.array([0.0, 0.6, 0.0, 0.4, 0.0, 0.0])

    def said(counts: list[float]) -> str:
        return frequencies(np.array(counts), right, None, kept="the top k").message

    assert said([600, 1400, 0, 2000, 0, 0]).endswith(
        "it came out beside every one of them: is one token too many kept?"
    )
    assert said([400, 1400, 300, 1000, 600, 300]).endswith("every token came out: draw from those only")
    assert said([2400, 1600, 0, 0, 0, 0]).endswith(
        "as if the index drawn among those were returned: map it back to its token id"
    )
    assert said([0, 0, 2400, 0, 0, 1600]).endswith(
        "and token 1, in it, never came out: are the most likely tokens kept?"
    )
    assert said([0, 2000, 1000, 500, 0, 500]).endswith("it is outside the top k (tokens 1, 3): draw from those only")
