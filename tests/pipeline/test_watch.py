"""`grade --watch` under a pseudo-terminal: a save regrades its file's checks and says what changed;
a syntax error costs one line and watching goes on; Ctrl-C leaves one line and no process. What a save regrades
and the lines it prints, without a worker, are in test_watch_unit.py."""

from __future__ import annotations

import os
import re
import signal
import sys

import pexpect
import psutil
import pytest
from repo import REPO, write_variant
from test_interrupt import default_sigint

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
@pytest.mark.parametrize(("watched", "regraded", "one_line"), [
    (("attention", "layernorm"), ("attention.causal_mask", "attention"), "attention.* (2 checks)"),  # not layernorm
    # block.py imports attention.py: a block that passed does not stay at pass while attention.py cannot compile
    (("attention", "block"), ("attention.causal_mask", "attention", "block"), "attention.*, block (3 checks)"),
])  # fmt: skip
def test_a_syntax_error_is_one_line_for_its_files_checks_and_its_importers_and_other_files_are_ignored(
    reference, tmp_path, watched, regraded, one_line
):
    package = write_variant(tmp_path, {})
    child = start_watching(package, *watched)
    original = save(package, "attention.py", NOT_PYTHON)
    broken = next_report(child)
    assert broken[0].endswith(f"attention.py saved: {' '.join(regraded)}"), broken
    errors = [line for line in broken if "SyntaxError" in line]
    assert len(errors) == 1 and errors[0].startswith(f"  {one_line}  ERROR"), broken
    (changed,) = [line for line in broken if "since the last run" in line]
    assert changed.strip() == f"since the last run: newly failing: {one_line} (pass -> error)"

    (package / "notes.txt").write_text("not python")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "attention.py").write_text("x = 1")
    save(package, "attention.py", original=original)
    mended = next_report(child)
    assert not any("notes.txt" in line or "__pycache__" in line for line in mended)
    assert mended[0].endswith(f"attention.py saved: {' '.join(regraded)}")
    assert all(f"{check}: error -> pass" in " ".join(mended) for check in regraded), mended
    child.kill(signal.SIGINT)
    child.expect(pexpect.EOF)
