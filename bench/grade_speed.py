"""How long `grade` takes, as whole processes, beside the time it takes to import torch.

Each command runs several times; the table reports medians and peak resident memory (the largest
process of the run, the learner's worker included), each time as a ratio to the floor measured in
the same run. "cold" starts with an empty grader cache and GPT-2 (here: the seeded random model,
through the same `from_pretrained` path) already in the Hugging Face cache; "warm" has the cache.

    .venv/bin/python bench/grade_speed.py [--runs 5] [--cold-runs 3] [--out bench/results.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GRADE = [sys.executable, "-m", "grader"]
COMMANDS = {
    "import torch (floor)": [sys.executable, "-c", "import torch"],
    "grade --help": [*GRADE, "--help"],
    "grade embed": [*GRADE, "--solutions", "embed"],
    "grade attention": [*GRADE, "--solutions", "attention"],
    "grade attention --no-sandbox": [*GRADE, "--solutions", "attention", "--no-sandbox"],
    "grade transformer": [*GRADE, "--solutions", "transformer"],
    "grade model (every model check)": [*GRADE, "--solutions", "model"],
    "grade (every check)": [*GRADE, "--solutions"],
}


def measure(command: list[str], env: dict) -> tuple[float, float]:
    """Wall seconds and peak RSS in MB of one run, children included."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise RuntimeError(f"{' '.join(command)} failed")
    return seconds, usage.ru_maxrss / 1024


def medians(command: list[str], env_for_run, runs: int) -> tuple[float, float]:
    samples = [measure(command, env_for_run()) for _ in range(runs)]
    return statistics.median(s for s, _ in samples), max(m for _, m in samples)


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory = next(
        (
            int(line.split()[1]) // 2**20
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        0,
    )
    import torch

    return f"{cpu}, {os.cpu_count()} cores, {memory} GiB RAM; Python {platform.python_version()}, torch {torch.__version__}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cold-runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results.md")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="grade-speed-"))
    base = {**os.environ, "HF_HUB_OFFLINE": "1"}
    # A Hugging Face cache that holds "gpt2" (the random model), as a learner's would after a download.
    subprocess.run(
        [*GRADE, "--reference", "random", "--solutions", "embed"],
        cwd=REPO,
        env={**base, "GPT2_GRADER_CACHE": str(scratch / "seed")},
        check=True,
        capture_output=True,
    )
    hub = scratch / "seed" / "random-hub"
    warm = {**base, "HF_HUB_CACHE": str(hub), "GPT2_GRADER_CACHE": str(scratch / "warm")}
    subprocess.run(
        [*GRADE, "--reference", "gpt2", "--solutions", "embed"], cwd=REPO, env=warm, check=True, capture_output=True
    )
    cold_runs = iter(range(10**6))

    def cold_env() -> dict:
        return {**base, "HF_HUB_CACHE": str(hub), "GPT2_GRADER_CACHE": str(scratch / f"cold-{next(cold_runs)}")}

    rows = []
    floor = None
    for label, command in COMMANDS.items():
        command = [*command, "--reference", "gpt2"] if command[:3] == GRADE and "--help" not in command else command
        warm_seconds, warm_rss = medians(command, lambda: warm, args.runs)
        floor = floor or warm_seconds
        cold = medians(command, cold_env, args.cold_runs) if args.cold_runs and "--solutions" in command else None
        rows.append((label, warm_seconds, warm_rss, cold))
        print(
            f"{label}: warm {warm_seconds:.2f} s ({warm_seconds / floor:.2f}x), {warm_rss:.0f} MB"
            + (f"; cold {cold[0]:.2f} s, {cold[1]:.0f} MB" if cold else ""),
            flush=True,
        )
    shutil.rmtree(scratch, ignore_errors=True)
    lines = [
        "# `grade` speed",
        "",
        f"Measured by `bench/grade_speed.py` on {time.strftime('%Y-%m-%d')}: {machine()}.",
        f"Medians of {args.runs} warm and {args.cold_runs} cold runs of whole processes; ratios to the import-torch floor of the same run; peak RSS of the largest process.",
        "",
        "| command | warm | × floor | peak RSS | cold | cold peak RSS |",
        "|---|---|---|---|---|---|",
    ]
    for label, seconds, rss, cold in rows:
        cold_cells = f"{cold[0]:.2f} s | {cold[1]:.0f} MB" if cold else "| "
        lines.append(f"| `{label}` | {seconds:.2f} s | {seconds / floor:.2f} | {rss:.0f} MB | {cold_cells} |")
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
