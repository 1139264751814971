"""Issue 59's "Done when", end to end: `grade --play --no-browser --reference random` started as a learner starts it
(the real Playground: GPT-2's builder process and the learner's confined one) and its page read in headless
Chromium. On the solutions a sentence shows both top-10 lists, a continuation from each, a head's pattern and the
"where" table; LayerNorm's N-1 variance is named in "where" in the check's own words; the stubs work with every
module marked as the stand-in; a crash and a hang each show on the page with their file and line, and the next
request is answered. One server per package; each test's page is a fresh one.

The README's picture (docs/playground.png) is this page on the solutions:
python tests/pipeline/test_playground_end_to_end.py docs/playground.png
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from repo import REPO, SOLUTIONS, stubs, write_variant
from test_html_report import CHROMIUM, LAUNCH_ARGS
from test_playground_page import cells, read  # the page's own helpers, the same over the real backend

from grader.host.play.entry import MODULES

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install -y chromium)"),
]
pytest.importorskip("uvicorn", reason="the play extra: pip install -e '.[play]'")

SENTENCE = "When Mary and John went to the store, John gave a drink to"
ANSWERED = 120_000  # ms a page waits for an answer: the first one starts the learner's process on a busy machine


@contextlib.contextmanager
def served(package: Path, log: Path, *options: str):
    """`grade --play --no-browser --reference random` on `package`, as a learner runs it; its page's address."""
    command = [sys.executable, "-m", "grader", "--play", "--no-browser", "--reference", "random", *options]
    command += ["--exercises", str(package)]
    with log.open("w") as errors:
        grade = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=errors, text=True)
    try:
        first = grade.stdout.readline()
        found = re.fullmatch(r"grade: the playground is at (http://127\.0\.0\.1:\d+/) \(Ctrl-C stops it\)\n", first)
        assert found, first + log.read_text()
        yield found.group(1)
    finally:
        grade.terminate()
        try:
            grade.wait(timeout=30)
        except subprocess.TimeoutExpired:
            grade.kill()
            grade.wait()


@pytest.fixture(scope="module")
def chromium():
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright (PyPI) drives Chromium")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def opened(chromium, reference, tmp_path):
    """opened(package, *grade's options): the playground's page on `package`, in a fresh page; afterwards, no console
    error and no request that left the server."""
    seen: dict = {"errors": [], "requests": []}

    with contextlib.ExitStack() as stack:

        def open_page(package: Path, *options: str):
            url = stack.enter_context(served(package, tmp_path / "grade.log", *options))
            page = chromium.new_page(viewport={"width": 1200, "height": 900})
            stack.callback(page.close)
            page.set_default_timeout(ANSWERED)
            page.on("console", lambda message: message.type == "error" and seen["errors"].append(message.text))
            page.on("pageerror", lambda error: seen["errors"].append(str(error)))
            page.on("request", lambda request: seen["requests"].append(request.url))
            page.goto(url, wait_until="load")
            seen["url"] = url
            return page

        yield open_page
    assert seen["errors"] == []
    assert all(request.startswith((seen["url"], "data:")) for request in seen["requests"]), seen["requests"]


def generated(page, new_tokens: int = 8) -> None:
    page.check("#greedy")
    page.fill("#max_new_tokens", str(new_tokens))
    page.evaluate("for (const id of ['gen-yours', 'gen-gpt2']) document.getElementById(id).textContent = ''")
    page.click("#generate-button")
    page.wait_for_function("document.getElementById('generate-status').textContent === ''")


def pattern(page, name: str, query: int, key: int) -> dict:
    """A pattern canvas: its size, its label and the colour at the centre of the cell (query, key)."""
    script = """([id, q, k]) => {
        const c = document.getElementById(id);
        if (!c.width) return {width: 0};
        const n = document.querySelector("#lens tr").cells.length - 1;  // the tokens
        const cell = Math.max(8, Math.min(28, Math.floor(360 / Math.max(1, n))));
        const at = c.getContext("2d").getImageData(80 + (k + 0.5) * cell, 80 + (q + 0.5) * cell, 1, 1).data;
        return {width: c.width, label: c.getAttribute("aria-label"), rgb: [at[0], at[1], at[2]]};
    }"""
    return page.evaluate(script, [name, query, key])


def where(page) -> dict[str, list[str]]:
    """The "where" table's rows by their first cell (the module)."""
    return {row[0]: row for row in cells(page, "#where-table")[1:]}


def top_tokens(page, side: str) -> list[str]:
    return [row[1] for row in cells(page, f"#next-{side}")[1:]]


def test_the_solutions_show_both_top_10_lists_a_continuation_from_each_a_pattern_and_where(opened):
    page = opened(SOLUTIONS)
    read(page, SENTENCE)
    assert page.is_hidden("#error") and page.is_hidden("#stand-ins")
    assert "random weights, not GPT-2" in page.text_content("#model-note") and page.is_visible("#model-note")
    yours, theirs = top_tokens(page, "yours"), top_tokens(page, "gpt2")
    assert len(yours) == 10 and yours == theirs  # the solutions compute the reference's model
    assert len(set(yours)) == 10
    diff = page.text_content("#next-diff")
    assert diff.startswith("largest |yours - the random reference| logit: ") and float(diff.split()[-1]) < 1e-3

    generated(page)
    mine, gpt2 = page.text_content("#gen-yours"), page.text_content("#gen-gpt2")
    assert SENTENCE in mine and mine.split(SENTENCE, 1)[1] != ""  # the sentence, continued
    assert mine == gpt2  # greedy, the same model: the same continuation
    assert re.fullmatch(
        r"[\d.]+ ms per token without the KV cache; [\d.]+ ms per token with yours",
        page.text_content("#gen-yours-time"),
    )
    assert re.fullmatch(r"[\d.]+ ms per token", page.text_content("#gen-gpt2-time"))

    page.select_option("#layer", "3")
    page.select_option("#head", "5")
    yours_pattern = pattern(page, "pattern-yours", 4, 2)
    assert yours_pattern["label"] == "your attention pattern, layer 3, head 5"
    assert yours_pattern["width"] > 80 and yours_pattern["rgb"] != [255, 255, 255]  # a weight drawn, not the margin
    assert pattern(page, "pattern-gpt2", 4, 2)["rgb"] == yours_pattern["rgb"]
    assert pattern(page, "pattern-yours", 2, 4)["rgb"] == [255, 255, 255]  # causal: a key after the query is 0

    rows = where(page)
    assert list(rows) == list(MODULES)
    assert all(
        row[2:4] == ["-", "-"] and row[4] == "matches the random reference on this text" for row in rows.values()
    )
    assert page.text_content("#where-first") == "Every module matches the random reference on this text."


def n_minus_1_mistake() -> str:
    """The LayerNorm check's named mistake for the N-1 variance, from its own table."""
    import torch

    from grader.checks.model.layernorm import layernorm_mistakes

    names = layernorm_mistakes(torch.zeros(1, 2, 4), torch.ones(4), torch.zeros(4), 1e-5)
    return next(name for name in names if "N-1" in name)


def test_the_n_minus_1_variance_is_named_in_where_in_grade_s_words(opened, tmp_path):
    package = write_variant(tmp_path, {"normalization.py": [("unbiased=False", "unbiased=True")]})
    page = opened(package)
    read(page, SENTENCE)
    rows = where(page)
    assert rows["layernorm"][3] == n_minus_1_mistake()
    assert rows["layernorm"][2].startswith("mean matches") and "var is the first step" in rows["layernorm"][2]
    assert all(rows[module][3] == "-" for module in ("embed", "pos_embed", "attention", "mlp"))
    assert page.text_content("#where-first").startswith("The first module that differs: layernorm")
    assert page.is_hidden("#error")


def test_the_stubs_work_with_every_module_marked_as_the_stand_in(opened):
    page = opened(stubs())
    read(page, SENTENCE)
    assert page.is_hidden("#error")
    said = page.text_content("#stand-ins")
    assert page.is_visible("#stand-ins") and all(f"{module} (not written yet)" in said for module in MODULES)
    rows = where(page)
    assert list(rows) == [f"{module} (stand-in)" for module in MODULES]
    assert top_tokens(page, "yours") == top_tokens(page, "gpt2") and len(top_tokens(page, "yours")) == 10
    assert pattern(page, "pattern-yours", 1, 0)["width"] > 80
    generated(page)
    assert page.text_content("#gen-yours") == page.text_content("#gen-gpt2") != ""
    assert page.text_content("#gen-yours-time").endswith(
        "(stand-in: the grader's TransformerSampler, yours is not written yet)"
    )


def line_of(package: Path, file: str, text: str) -> int:
    return (package / file).read_text().splitlines().index(text) + 1


def test_a_crash_in_attention_shows_its_file_and_line_and_the_next_request_works(opened, tmp_path):
    raised = "        raise ValueError('boom')"
    edit = ("        attn_scores = einops.einsum(", raised + "\n        attn_scores = einops.einsum(")
    package = write_variant(tmp_path, {"attention.py": [edit]})
    page = opened(package)
    banner = f"attention.py:{line_of(package, 'attention.py', raised)}: ValueError: boom"
    for text in (SENTENCE, "The dog ran"):
        read(page, text)
        assert page.is_visible("#error") and page.text_content("#error") == banner
        assert len(top_tokens(page, "yours")) == 10  # answered, with the grader's Attention in its place
        assert "attention (raises ValueError: boom" in page.text_content("#stand-ins")
    generated(page)
    assert "The dog ran" in page.text_content("#gen-yours") and page.text_content("#gen-gpt2") != ""


def test_a_hang_in_the_mlp_is_stopped_with_its_file_and_line_and_the_next_request_works(opened, tmp_path):
    docstring = '        """pre = x W_in + b_in; post = gelu_new(pre); out = post W_out + b_out.'
    package = write_variant(tmp_path, {"mlp.py": [(docstring, "        while True:\n            pass\n" + docstring)]})
    loop = {line_of(package, "mlp.py", "        while True:"), line_of(package, "mlp.py", "            pass")}
    page = opened(package, "--timeout", "5")
    for text in (SENTENCE, "The dog ran"):
        read(page, text)
        found = re.fullmatch(r"mlp\.py:(\d+): (.*)", page.text_content("#error"))
        assert page.is_visible("#error") and found and int(found.group(1)) in loop
        assert "no answer within 5 s" in found.group(2)
        assert len(top_tokens(page, "yours")) == 10
        assert "mlp (does not finish (stopped at the timeout))" in page.text_content("#stand-ins")


def screenshot(path: str) -> None:
    """The README's picture of the page, over the real backend on the solutions (the random reference, offline)."""
    import tempfile

    from PIL import Image  # matplotlib's dependency: 128 colours keep the README's picture small
    from playwright.sync_api import sync_playwright

    with (
        tempfile.TemporaryDirectory() as log,
        served(SOLUTIONS, Path(log) / "grade.log") as url,
        sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1000, "height": 800})
        page.set_default_timeout(ANSWERED)
        page.goto(url, wait_until="load")
        read(page, SENTENCE)
        generated(page, 20)
        shot = page.screenshot(full_page=True)
        browser.close()
    Image.open(io.BytesIO(shot)).convert("RGB").quantize(colors=128).save(path, optimize=True)


if __name__ == "__main__":
    screenshot(sys.argv[1])
