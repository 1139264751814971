"""The playground's page (grader/host/play/static/) in headless Chromium, over the server and a fake Playground
(tests/support/fake_playground.py): a sentence typed shows both top-10 lists, a continuation from each, a head's
pattern, the logit lens, the scores and the "where" table; an error shows in the banner and the next request works;
stand-ins are marked; every request stays on 127.0.0.1; and all of it works from the keyboard alone."""

from __future__ import annotations

import fake_playground
import pytest
from fake_playground import Playground, serving
from test_html_report import CHROMIUM, LAUNCH_ARGS

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install -y chromium)"
)
pytest.importorskip("uvicorn", reason="the play extra: pip install -e '.[play]'")


@pytest.fixture
def console_errors() -> list[str]:
    """The page's console errors: a test that expects one takes it out."""
    return []


@pytest.fixture
def page(tmp_path, console_errors):
    """The page, loaded from the server over a fake Playground; afterwards, no console error and no request that
    left 127.0.0.1."""
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright (PyPI) drives Chromium")
    errors, requests = console_errors, []
    with serving(Playground()) as url, playwright.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=LAUNCH_ARGS,
            viewport={"width": 1200, "height": 900},
        )
        try:
            opened = browser.new_page()
            opened.on("console", lambda message: message.type == "error" and errors.append(message.text))
            opened.on("pageerror", lambda error: errors.append(str(error)))
            opened.on("request", lambda request: requests.append(request.url))
            opened.goto(url, wait_until="load")
            yield opened
        finally:
            browser.close()
    assert errors == []
    assert requests and all(request.startswith(url) or request.startswith("data:") for request in requests), requests


def cells(page, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(f"{selector} tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")


def read(page, text: str) -> None:
    page.fill("#text", text)
    page.click("#read")
    page.wait_for_function("document.getElementById('read-status').textContent === ''")


def generated(page) -> None:
    page.click("#generate-button")
    page.wait_for_function("document.getElementById('gen-yours').textContent !== ''")


def canvas(page, name: str) -> dict:
    """A pattern canvas: its size, its label, and the colour at the centre of the cell (query, key)."""
    script = """([id, q, k]) => {
        const c = document.getElementById(id);
        const cell = (c.width - 80) / 3;
        const at = c.getContext("2d").getImageData(80 + (k + 0.5) * cell, 80 + (q + 0.5) * cell, 1, 1).data;
        return {width: c.width, label: c.getAttribute("aria-label"), rgb: [at[0], at[1], at[2]]};
    }"""
    return page.evaluate(script, [name, 2, 1])


def test_a_sentence_shows_both_top_10_lists_a_continuation_from_each_a_pattern_and_where(page):
    read(page, "Mary gave John")
    yours, theirs = cells(page, "#next-yours"), cells(page, "#next-gpt2")
    assert [row[1] for row in yours[1:]] == fake_playground.YOURS_TOP
    assert [row[1] for row in theirs[1:]] == fake_playground.GPT2_TOP
    assert yours[1] == ["1", " the", "0.3000"] and len(yours) == len(theirs) == 11
    assert page.text_content("#next-diff") == "largest |yours - the random reference| logit: 3.2500"
    assert "random weights, not GPT-2" in page.text_content("#model-note") and page.is_visible("#model-note")

    # layer 0, head 0: yours is causal-uniform (query 2 gives key 1 a third), GPT-2's is previous-token (all of it)
    assert canvas(page, "pattern-yours") == {
        "width": 80 + 3 * 28,
        "label": "your attention pattern, layer 0, head 0",
        "rgb": [170, 170, 255],
    }
    assert canvas(page, "pattern-gpt2")["rgb"] == [0, 0, 255]
    assert canvas(page, "pattern-diff")["rgb"] == [0, 0, 255]  # yours - GPT-2's: -2/3, the largest, full blue
    page.select_option("#head", "2")
    assert canvas(page, "pattern-yours")["label"] == "your attention pattern, layer 0, head 2"

    lens = cells(page, "#lens")
    assert lens[0] == ["layer", "Mary", " gave", " John"] and lens[1] == [
        "0",
        "Mary /  gave",
        " gave /  John",
        " John / Mary",
    ]
    induction = cells(page, "#induction")
    assert len(induction) == 13 and induction[1][0] == "0" and induction[1][-1] == "0.10 / 0.90"
    assert cells(page, "#previous")[0] == ["layer", *(f"head {h}" for h in range(12))]
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")  # 12 heads fit the page

    where = cells(page, "#where-table")
    assert where[0] == ["module", "max |diff|", "first step that differs", "most likely", "what it says"]
    assert where[4] == ["Attention", "0.1240", "attn_scores", fake_playground.MISTAKE, "differs"]
    assert where[1] == ["Embed", "0.0000", "-", "-", "matches"]
    assert where[3] == ["LayerNorm", "4.5e-8", "-", "-", "matches"]  # float rounding, not 0.0000
    assert page.text_content("#where-first") == "The first module that differs: Attention, from step attn_scores on."
    assert not page.is_visible("#stand-ins") and not page.is_visible("#error")

    page.fill("#top_k", "5")
    page.fill("#seed", "3")
    generated(page)
    assert (
        page.text_content("#gen-yours")
        == "Mary gave John your words (greedy=False temperature=1 top_k=5 top_p=None seed=3)"
    )
    assert page.text_content("#gen-gpt2") == "Mary gave John GPT-2's words"
    assert page.text_content("#gen-yours-time") == "41.5 ms per token without the KV cache; 9.3 ms per token with yours"
    assert page.text_content("#gen-gpt2-time") == "30.0 ms per token"


def test_an_error_shows_in_the_banner_with_its_file_and_line_and_the_next_request_works(page, console_errors):
    read(page, "crash now please")
    assert page.is_visible("#error")
    assert page.text_content("#error") == "attention.py:42: RuntimeError: shape '[1, 5, 12, 64]' is invalid"
    assert cells(page, "#next-yours") == [["#", "token", "p"]] and cells(page, "#where-table") == []
    assert len(cells(page, "#next-gpt2")) == 11 and page.text_content("#next-diff").endswith("logit: -")
    assert (
        canvas(page, "pattern-yours")["width"] == 0 and canvas(page, "pattern-diff")["width"] == 0
    )  # nothing of yours
    assert canvas(page, "pattern-gpt2")["rgb"] == [0, 0, 255]  # GPT-2's side is still drawn
    assert cells(page, "#lens")[1] == ["0", "- /  now", "- /  please", "- / crash"]
    assert cells(page, "#induction")[1][-1] == "- / 0.90"
    generated_error = page.evaluate("""async () => (await fetch("/api/generate", {method: "POST",
        body: JSON.stringify({text: "crash"})})).status""")
    assert generated_error == 200
    read(page, "all is well")
    assert not page.is_visible("#error")
    assert len(cells(page, "#next-yours")) == 11
    page.fill("#text", "   ")
    page.click("#read")
    page.wait_for_selector("#error:not([hidden])")
    assert page.text_content("#error") == "type some text first"  # the server's refusal, in the same banner
    refused = "Failed to load resource: the server responded with a status of 400 (Bad Request)"
    assert console_errors == [refused]  # Chromium's own line for the 400, and nothing else
    console_errors.clear()


def test_stand_ins_are_said_at_the_top_and_marked_in_where(page):
    read(page, "a stub here")
    assert page.is_visible("#stand-ins")
    assert "LayerNorm (LayerNorm.forward raises NotImplementedError)" in page.text_content("#stand-ins")
    where = {row[0]: row for row in cells(page, "#where-table")[1:]}
    assert where["LayerNorm (stand-in)"][4] == "matches (the grader's stand-in)"
    assert "Embed" in where and all("stand-in" not in name for name in where if name != "LayerNorm (stand-in)")
    generated(page)
    assert page.text_content("#gen-yours-time").endswith(
        "(stand-in: the grader's TransformerSampler, yours is not written yet)"
    )


def focused(page) -> str:
    return page.evaluate("document.activeElement.id")


def tab_to(page, target: str, limit: int = 30) -> None:
    for _ in range(limit):
        if focused(page) == target:
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reaches #{target}")


def test_the_keyboard_alone_reads_generates_and_chooses_a_head_with_the_focus_visible(page):
    page.keyboard.press("Tab")
    assert focused(page) == "text"  # the text box comes first
    page.keyboard.press("Control+A")
    page.keyboard.type("Mary gave John")
    page.keyboard.press("Enter")  # Enter reads the text; Shift+Enter would add a line
    page.wait_for_function("document.querySelectorAll('#next-yours tr').length === 11")
    assert page.input_value("#text") == "Mary gave John"

    tab_to(page, "greedy")
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"  # the focus is seen
    page.keyboard.press("Space")
    tab_to(page, "seed")
    page.keyboard.press("Control+A")
    page.keyboard.type("9")
    page.keyboard.press("Enter")  # Enter in a control generates
    page.wait_for_function("document.getElementById('gen-yours').textContent !== ''")
    assert "greedy=True" in page.text_content("#gen-yours") and "seed=9" in page.text_content("#gen-yours")

    tab_to(page, "layer")
    page.keyboard.press("ArrowDown")
    tab_to(page, "head")
    page.keyboard.press("ArrowDown")
    assert canvas(page, "pattern-yours")["label"] == "your attention pattern, layer 1, head 1"
    labelled = page.eval_on_selector_all("input, select, textarea", "xs => xs.map(x => x.labels.length > 0)")
    assert labelled and all(labelled)  # every control has its label
