"""`grade --watch` under a pseudo-terminal: a save regrades its file's checks and says what changed;
a syntax error costs one line and watching goes on; Ctrl-C leaves one line and no process."""

from __future__ import annotations

import os
import re
import signal
import sys

import pexpect
import psutil
import pytest
from conftest import REPO, write_variant
from test_interrupt import default_sigint

from grader.checks import select
from grader.host.results import CheckResult
from grader.host.watch import SavedPython, changes_line, check_lines, regraded

in_a_terminal = pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")

CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # colours and cursor moves: not what the learner reads
N_MINUS_1 = ("unbiased=False", "unbiased=True")
NOT_PYTHON = ("def forward(self", "def forward(self (")


def start_watching(package, *checks: str) -> pexpect.spawn:
    """`grade --watch CHECK ...` in a terminal wide enough that no report line wraps, once it watches."""
    child = pexpect.spawn(
        sys.executable,
        ["-m", "grader", "--reference", "random", "--exercises", str(package), "--watch", *checks],
        cwd=str(REPO),
        env=dict(os.environ),
        encoding="utf-8",
        timeout=300,  # the first run may build the reference cache
        dimensions=(60, 300),
        preexec_fn=default_sigint,
    )
    child.expect(r"watching [^\r\n]*\(Ctrl-C ends\)[^\r\n]*\r?\n")
    child.timeout = 120
    return child


def next_report(child: pexpect.spawn) -> list[str]:
    """The lines of the next compact report, as the terminal shows them: from the save to the score."""
    child.expect(r"watched checks: [^\r\n]*\r?\n")
    shown = CONTROL.sub("", child.before + child.after).replace("\r", "\n")
    return [line for line in shown.splitlines() if line.strip()]


def save(package, file: str, edit: tuple[str, str] | None = None, original: str | None = None) -> str:
    """Write `file` of the package afresh, from `original` (default: what it holds) with `edit` applied."""
    path = package / file
    text = original if original is not None else path.read_text()
    path.write_text(text.replace(*edit) if edit else text)
    return text


@pytest.mark.slow
@in_a_terminal
def test_a_save_regrades_its_check_and_says_what_changed_and_ctrl_c_ends_it(reference, tmp_path):
    package = write_variant(tmp_path, {})
    child = start_watching(package, "layernorm")
    original = save(package, "normalization.py", N_MINUS_1)
    wrong = next_report(child)
    assert wrong[0].endswith("normalization.py saved: layernorm")
    verdict = next(line for line in wrong if line.split()[:2] == ["layernorm", "FAIL"])
    assert wrong[wrong.index(verdict) + 1].strip() == (
        "next: most likely: the variance divides by N-1: use the biased variance (unbiased=False)"
    )
    assert "newly failing: layernorm (pass -> fail)" in " ".join(wrong)

    save(package, "normalization.py", original=original)
    fixed = next_report(child)
    assert any(line.split()[:3] == ["layernorm", "PASS", "2/2"] for line in fixed)
    assert "layernorm: fail -> pass" in " ".join(fixed)

    started = psutil.Process(child.pid).children(recursive=True)  # the warm worker
    assert started, "the watch keeps no worker between saves"
    os.killpg(child.pid, signal.SIGINT)  # what Ctrl-C sends: the whole foreground process group
    child.expect(pexpect.EOF)
    child.close()
    after = [line for line in CONTROL.sub("", child.before).replace("\r", "\n").splitlines() if line.strip()]
    assert child.exitstatus == 130 and "Traceback" not in child.before
    assert after == ["grade: interrupted: nothing was written"]
    assert not [p.pid for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
@in_a_terminal
def test_a_syntax_error_is_one_line_for_its_files_checks_and_other_files_are_ignored(reference, tmp_path):
    package = write_variant(tmp_path, {})
    child = start_watching(package, "attention", "layernorm")
    original = save(package, "attention.py", NOT_PYTHON)
    broken = next_report(child)
    assert broken[0].endswith("attention.py saved: attention.causal_mask attention")  # not layernorm
    errors = [line for line in broken if "SyntaxError" in line]
    assert len(errors) == 1 and errors[0].split()[:4] == ["attention.*", "(2", "checks)", "ERROR"], broken
    (changed,) = [line for line in broken if "since the last run" in line]
    assert changed.strip() == "since the last run: newly failing: attention.* (2 checks) (pass -> error)"

    (package / "notes.txt").write_text("not python")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "attention.py").write_text("x = 1")
    save(package, "attention.py", original=original)
    mended = next_report(child)
    assert not any("notes.txt" in line or "__pycache__" in line for line in mended)
    assert mended[0].endswith("attention.py saved: attention.causal_mask attention")
    assert "attention: error -> pass" in " ".join(mended)
    child.kill(signal.SIGINT)
    child.expect(pexpect.EOF)


def ids(checks) -> list[str]:
    return [check.id for check in checks]


def test_a_save_regrades_its_files_watched_checks_and_a_shared_file_all_of_them():
    watched = select(["layernorm", "attention"])
    assert ids(regraded(["attention.py"], watched)) == ["attention.causal_mask", "attention"]
    assert regraded(["mlp.py"], watched) == []  # a file of checks not watched
    assert regraded(["config.py"], watched) == watched  # imported by every module
    assert regraded(["helpers/util.py", "mlp.py"], watched) == watched


def test_only_python_files_outside_pycache_and_editors_temporary_files_count(tmp_path):
    package = tmp_path / ".venv" / "exercises"  # where the package lives does not matter
    saved = SavedPython(package)
    assert saved(None, str(package / "attention.py")) and saved(None, str(package / "helpers" / "util.py"))
    for ignored in ("notes.txt", "__pycache__/attention.py", ".attention.py.swp", "attention.py~"):
        assert not saved(None, str(package / ignored)), ignored


def result(check_id: str, status: str, **fields) -> CheckResult:
    return CheckResult(check_id, "model", "", status, 1, **fields)


def by_id(*results: CheckResult) -> dict[str, CheckResult]:
    return {result.id: result for result in results}


def test_what_changed_names_each_move_and_each_check_that_stopped_passing():
    now = [result("a", "pass"), result("b", "fail", message="differs"), result("c", "fail", message="differs")]
    before = by_id(result("a", "fail", message="differs"), result("b", "pass"), result("c", "fail", message="differs"))
    line = changes_line(before, now).plain
    assert line == "  since the last run: a: fail -> pass; newly failing: b (pass -> fail)"
    assert changes_line(by_id(result("a", "pass")), [result("a", "pass")]).plain == "  since the last run: no change"


def test_what_changed_notices_a_new_reason_for_a_check_that_still_fails():
    before = by_id(result("attention", "fail", message="differs from GPT-2 on blocks.0.prompt: max abs diff 0.5"))
    now = [result("attention", "fail", message="differs from GPT-2 on blocks.0.prompt: output shape (2, 9)")]
    assert changes_line(before, now).plain == (
        "  since the last run: attention: still fails, now: differs from GPT-2 on blocks.0.prompt: output shape (2, 9)"
    )


SYNTAX = {"message": "SyntaxError: invalid syntax (attention.py, line 3)", "file": "attention.py", "line": 3}


def test_one_error_that_stops_a_files_checks_is_one_phrase_of_what_changed():
    before = by_id(result("attention.causal_mask", "pass"), result("attention", "pass"), result("layernorm", "pass"))
    now = [result("attention.causal_mask", "error", **SYNTAX), result("attention", "error", **SYNTAX)]
    now.append(result("layernorm", "fail", message="differs"))
    assert changes_line(before, now).plain == (
        "  since the last run: newly failing: attention.* (2 checks) (pass -> error); "
        "newly failing: layernorm (pass -> fail)"
    )
    moved = {**SYNTAX, "message": "SyntaxError: invalid syntax (attention.py, line 4)", "line": 4}
    again = [result("attention.causal_mask", "error", **moved), result("attention", "error", **moved)]
    assert changes_line(by_id(*now), again).plain == (
        f"  since the last run: attention.* (2 checks): still an error, now: {moved['message']}"
    )


def test_checks_stopped_by_one_error_share_a_line_and_a_failure_gets_its_next_step():
    other = {**SYNTAX, "message": "NameError: name 'x' is not defined (attention.py:3)"}
    shown = [
        line.plain
        for line in check_lines(
            [
                result("attention.causal_mask", "error", **SYNTAX),
                result("attention", "error", **SYNTAX),
                result("layernorm", "fail", message="differs", hint="eps outside the square root"),
                result("block", "error", **other),  # another error at the same line: a line of its own
            ]
        )
    ]
    assert shown[0].split()[:5] == ["attention.*", "(2", "checks)", "ERROR", "0/2"]
    assert shown[0].endswith(SYNTAX["message"])
    assert shown[1].split()[:2] == ["layernorm", "FAIL"]
    assert shown[2].strip() == "next: most likely: eps outside the square root"
    assert shown[3].split()[:2] == ["block", "ERROR"] and len(shown) == 4
