"""How long `grade --watch` takes from a save to the regraded check's line, on a warm worker.

One `grade --watch layernorm attention sampling transformer kv_cache training` runs under a pseudo-terminal, as a
learner's would, on a copy of solutions/. Each sample writes one file (the solution, or a classic mistake in it) and
times the write to the moment the check's line appears (or, for a whole
save, the last line); the first sample of each row warms up
and is left out. Beside it, the import-torch floor of the same run (`grade_speed.medians`).

    .venv/bin/python bench/watch_latency.py [--saves 7] [--out bench/results.md]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pexpect
from grade_speed import COMMANDS, REPO, Sample, machine, medians, replace_section

SECTION = "# `grade --watch` latency"
# (row, file, check, (old, new) or None for the solution as it is)
ROWS = (
    ("layernorm, passing", "normalization.py", "layernorm", None),
    ("layernorm, N-1 in the variance", "normalization.py", "layernorm", ("unbiased=False", "unbiased=True")),
    ("attention, passing", "attention.py", "attention", None),
    (
        "attention, softmax over the query axis",
        "attention.py",
        "attention",
        ("attn_scores_masked.softmax(dim=-1)", "attn_scores_masked.softmax(dim=-2)"),
    ),
    ("sampling.py, passing: its first check's line", "sampling.py", "sampling.greedy|sampling.temperature", None),
    ("sampling.py, passing: all 10 checks' lines", "sampling.py", None, None),
    ("transformer, passing", "transformer.py", "transformer", None),
    ("kv_cache, passing", "kv_cache.py", "kv_cache", None),
    ("training.py, passing: the trainer's line", "training.py", "training.trainer", None),
)


def check_line(check: str | None) -> re.Pattern:
    """The regraded check's own line (colours between its words), not a longer id that starts alike; one of
    several ("a|b": whichever comes first); None: the save's last line, the score, after every check's."""
    if check is None:
        return re.compile(r"watched checks: [^\r\n]*\r?\n")
    ids = "|".join(re.escape(one) for one in check.split("|"))
    return re.compile(rf"\n  (?:{ids}) +(?:\x1b\[[0-9;]*m)*(?:PASS|FAIL|ERROR)")


def save_to_line(child: pexpect.spawn, path: Path, text: str, check: str) -> float:
    """Seconds from writing `path` to `check`'s line on the terminal; then the rest of that report."""
    started = time.perf_counter()
    path.write_text(text)
    child.expect(check_line(check))
    seconds = time.perf_counter() - started
    if check is not None:
        child.expect(r"watched checks: [^\r\n]*\r?\n")
    time.sleep(0.3)  # each save its own burst of events
    return seconds


def sample(child: pexpect.spawn, package: Path, file: str, check: str, edit, saves: int) -> list[float]:
    path = package / file
    original = path.read_text()
    text = original.replace(*edit) if edit else original
    times = [save_to_line(child, path, text, check) for _ in range(saves + 1)][1:]  # the first warms up
    path.write_text(original)
    child.expect(r"watched checks: [^\r\n]*\r?\n")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=7)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results.md")
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    floor = medians([Sample(COMMANDS["import torch (floor)"], env) for _ in range(5)])[0]
    scratch = Path(tempfile.mkdtemp(prefix="watch-latency-"))
    package = scratch / "pkg"
    shutil.copytree(REPO / "solutions", package, ignore=shutil.ignore_patterns("__pycache__"))
    command = [
        "-m",
        "grader",
        "--reference",
        "random",
        "--exercises",
        str(package),
        "--watch",
        "layernorm",
        "attention",
        "sampling",
        "transformer",
        "kv_cache",
        "training",
    ]
    child = pexpect.spawn(sys.executable, command, cwd=str(REPO), env=env, encoding="utf-8", dimensions=(60, 300))
    child.timeout = 900  # the first report may build the reference cache
    rows = []
    try:
        child.expect(r"\(Ctrl-C ends\)")
        child.timeout = 120
        for label, file, check, edit in ROWS:
            times = sample(child, package, file, check, edit, args.saves)
            rows.append((label, statistics.median(times), min(times), max(times)))
            print(f"{label}: median {rows[-1][1]:.3f} s (min {rows[-1][2]:.3f}, max {rows[-1][3]:.3f})", flush=True)
    finally:
        child.sendintr()
        child.expect(pexpect.EOF)
        shutil.rmtree(scratch, ignore_errors=True)
    lines = [
        SECTION,
        "",
        f"Measured by `bench/watch_latency.py` on {time.strftime('%Y-%m-%d')}: {machine()}.",
        "One `grade --watch layernorm attention sampling transformer kv_cache training` under a pseudo-terminal, "
        "`--reference random`; "
        f"{args.saves} saves per row after one to warm up, each timed from the file's write to its check's line "
        "on the terminal (a whole save: to its last line). "
        f"Import-torch floor of the same run: {floor:.2f} s; load average {os.getloadavg()[0]:.1f} at the end.",
        "",
        "| save | median | min | max | median × floor |",
        "|---|---|---|---|---|",
        *(f"| {label} | {m:.3f} s | {lo:.3f} s | {hi:.3f} s | {m / floor:.2f} |" for label, m, lo, hi in rows),
    ]
    replace_section(args.out, lines, SECTION)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
