"""`grade --play`'s server (grader/host/play/app.py) over a fake Playground (tests/support/fake_playground.py): the
endpoints answer with the Playground's answers, refuse what the page would not send, never wait for one another, and
`grade --play --no-browser` starts, prints its address, serves the page and stops cleanly on Ctrl-C."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import fake_playground
import pytest
from fake_playground import Playground, serving
from repo import REPO

pytest.importorskip("uvicorn", reason="the play extra: pip install -e '.[play]'")


def asked(url: str, body: dict | None = None, timeout: float = 10) -> tuple[int, dict | str]:
    """(status, answer) of a GET (no body) or a JSON POST; JSON answers parsed."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            status, text, kind = reply.status, reply.read().decode(), reply.headers.get("Content-Type", "")
    except urllib.error.HTTPError as error:
        status, text, kind = error.code, error.read().decode(), error.headers.get("Content-Type", "")
    return status, json.loads(text) if kind.startswith("application/json") else text


def test_the_endpoints_answer_with_the_playgrounds_answers():
    playground = Playground()
    with serving(playground) as url:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url)
        status, page = asked(url)
        assert status == 200 and "<textarea" in page and "/static/play.js" in page
        assert asked(url + "static/play.js")[0] == 200
        assert asked(url + "api/analyse", {"text": "one two three"}) == (200, playground.analyse("one two three"))
        options = {"text": "a b", "greedy": True, "top_k": 5, "top_p": None, "seed": 7, "temperature": 0.5}
        status, answer = asked(url + "api/generate", options)
        assert status == 200
        assert answer["yours"]["text"] == "a b your words (greedy=True temperature=0.5 top_k=5 top_p=None seed=7)"


@pytest.mark.parametrize(
    ("endpoint", "body", "said"),
    [
        ("analyse", {"text": "   "}, "type some text first"),
        ("analyse", {"text": "x" * 2001}, "the text is 2001 characters long; the playground reads up to 2000"),
        ("analyse", ["not", "an", "object"], "the request is not a JSON object"),
        ("generate", {"text": "a", "top_k": 2.5}, "top_k is a whole number, not 2.5"),
        ("generate", {"text": "a", "top_p": 1.5}, "top_p is between 0 and 1, not 1.5"),
        ("generate", {"text": "a", "greedy": "yes"}, "greedy is true or false, not 'yes'"),
        ("generate", {"text": "a", "seed": None}, "seed is a whole number, not None"),
    ],
)
def test_a_request_the_page_would_not_send_is_refused_with_a_message_for_the_banner(endpoint, body, said):
    with serving(Playground()) as url:
        assert asked(f"{url}api/{endpoint}", body) == (400, {"error": {"file": None, "line": None, "message": said}})


def test_the_playgrounds_own_failure_is_an_error_answer_and_the_next_request_works():
    playground = Playground()
    analyse = playground.analyse
    playground.analyse = lambda text: analyse(text) if text != "boom" else 1 / 0
    with serving(playground) as url:
        status, answer = asked(url + "api/analyse", {"text": "boom"})
        assert (
            status == 500 and answer["error"]["message"] == "the playground failed: ZeroDivisionError: division by zero"
        )
        assert asked(url + "api/analyse", {"text": "fine"})[0] == 200


def test_a_nan_or_an_infinity_in_an_answer_comes_as_its_word():
    playground = Playground()
    playground.analyse = lambda text: {"next": {"max_logit_diff": float("nan")}, "where": [{"max_diff": float("-inf")}]}
    with serving(playground) as url:
        answer = asked(url + "api/analyse", {"text": "a"})
        assert answer == (200, {"next": {"max_logit_diff": "nan"}, "where": [{"max_diff": "-inf"}]})


def test_a_slow_answer_holds_up_neither_the_page_nor_its_files():
    playground = Playground()
    with serving(playground) as url:
        waiting = threading.Thread(target=asked, args=(url + "api/generate", {"text": "slow"}, 30))
        waiting.start()
        time.sleep(0.5)  # the slow generate is under way (nothing asserted of the time)
        assert asked(url, timeout=5)[0] == 200 and asked(url + "static/play.css", timeout=5)[0] == 200
        assert waiting.is_alive()  # still waiting for the learner's model
        playground.release.set()
        waiting.join(timeout=10)
        assert not waiting.is_alive()


def test_a_reference_that_cannot_be_had_is_said_in_one_line(monkeypatch, capsys):
    from grader.host.play.app import play
    from grader.host.refcache import ReferenceUnavailable

    class Unreachable(Playground):
        @classmethod
        def start(cls, package_dir, reference, timeout):
            raise ReferenceUnavailable("GPT-2's weights are not here and huggingface.co does not answer")

    monkeypatch.setitem(sys.modules, "grader.host.play.session", type(sys)("session"))
    monkeypatch.setattr(sys.modules["grader.host.play.session"], "Playground", Unreachable, raising=False)
    assert play(REPO / "solutions", "gpt2", 60.0, browser=False) == 2
    said = capsys.readouterr().err.splitlines()[-1]
    assert (
        said
        == "grade: GPT-2's weights are not here and huggingface.co does not answer (--reference random plays offline)"
    )


# grade's entry point with the fake in the place of the Playground's module, as `grade` would run with it.
WITH_THE_FAKE = """
import sys
import fake_playground
sys.modules["grader.host.play.session"] = fake_playground
from grader.host.main import main
sys.argv = ["grade", *sys.argv[1:]]
sys.exit(main())
"""


def test_grade_play_no_browser_prints_its_address_serves_the_page_and_stops_on_ctrl_c():
    environment = {"PYTHONPATH": f"{REPO}:{REPO / 'tests' / 'support'}", "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-c", WITH_THE_FAKE, "--play", "--no-browser", "--solutions", "--reference", "random"]
    grade = subprocess.Popen(
        command, cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        first = grade.stdout.readline()
        found = re.fullmatch(r"grade: the playground is at (http://127\.0\.0\.1:\d+/) \(Ctrl-C stops it\)\n", first)
        assert found, first + grade.stderr.read() if grade.poll() is not None else first
        url = found.group(1)
        assert "<textarea" in asked(url)[1]
        assert asked(url + "api/analyse", {"text": "stub words"})[1]["stand_ins"] == [fake_playground.STAND_IN]
        grade.send_signal(signal.SIGINT)
        out, err = grade.communicate(timeout=30)
    finally:
        if grade.poll() is None:
            grade.kill()
    assert grade.returncode == 0, err
    assert out.splitlines() == ["grade: the playground stopped", "fake playground: closed"], out
    with pytest.raises(urllib.error.URLError):
        asked(url, timeout=2)  # nothing listens there any more
