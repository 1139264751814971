"""Ctrl-C: one line, no traceback, no process left behind, no cache damaged."""

from __future__ import annotations

import os
import re
import signal
import sys
import time

import pexpect
import psutil
import pytest
from repo import REPO, run_grade

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")


def default_sigint() -> None:
    """As in a terminal: a test run started in the background (`cmd &`) would pass SIGINT on ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_leaves_one_line_and_nothing_running(reference, tmp_path):
    report = tmp_path / "report.json"
    child = pexpect.spawn(
        sys.executable,
        ["-m", "grader", "--reference", "random", "--solutions", "--json", str(report)],
        cwd=str(REPO),
        env=dict(os.environ),
        encoding="utf-8",
        timeout=300,
        preexec_fn=default_sigint,
    )
    child.expect("running")  # the status line: the learner's worker is at work
    deadline = time.monotonic() + 30
    started: list[psutil.Process] = []
    while not started and time.monotonic() < deadline:  # its worker, and the check it runs
        started = psutil.Process(child.pid).children(recursive=True)
        time.sleep(0.05)
    assert started, "the grading never started its worker"
    os.killpg(child.pid, signal.SIGINT)  # what Ctrl-C sends: the whole foreground process group
    child.expect(pexpect.EOF)
    child.close()
    shown = re.sub(
        r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before
    )  # what the terminal shows, without its control sequences
    lines = [line for line in shown.replace("\r", "\n").splitlines() if line.strip()]
    assert child.exitstatus == 130 and "Traceback" not in child.before, child.before[-3000:]
    assert lines[-1].endswith("grade: interrupted: nothing was written")
    assert not report.exists()
    assert not [p.pid for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    again = run_grade("--reference", "random", "--solutions", "embed")
    assert again.returncode == 0 and "is damaged" not in again.stderr
