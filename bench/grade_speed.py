"""How long `grade` takes, as whole processes, beside the time it takes to import torch.

Each command runs several times, each run right after a run of the floor (`python -c "import torch"`);
the table reports medians, each as a ratio to the median of the floor runs beside it (a shared machine
slows down and speeds up over minutes: the floor is measured where the command is), and peak memory:
of the largest process (ru_maxrss) and of the whole process tree (the grader, its workers and every
check's fork, sampled every 0.1 s; pages a fork shares with its worker are counted in each, so it is
an upper bound). The finished package is `solutions/`, the
untouched one `exercises/` (every check todo). "cold" starts with an empty grader cache and GPT-2
(here: the seeded random model, through the same `from_pretrained` path) already in the Hugging
Face cache; "warm" has the cache. The warm runs of the whole finished package also give each
check's own time (its `seconds` in the JSON report), as medians.

    .venv/bin/python bench/grade_speed.py [--runs 5] [--cold-runs 3] [--out bench/results.md]

It replaces its own section of `--out`, leaving the other benchmarks' sections there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
GRADE = [sys.executable, "-m", "grader"]
FINISHED = [*GRADE, "--solutions"]
WHOLE = "grade --solutions (every check)"
FLOOR = [sys.executable, "-c", "import torch"]
COMMANDS = {
    "import torch (floor)": FLOOR,
    "grade --help": [*GRADE, "--help"],
    "grade (every check, stubs)": [*GRADE, "--exercises", "exercises"],
    "grade embed": [*FINISHED, "embed"],
    "grade attention": [*FINISHED, "attention"],
    "grade attention --no-sandbox": [*FINISHED, "attention", "--no-sandbox"],
    "grade transformer": [*FINISHED, "transformer"],
    "grade model (part 1)": [*FINISHED, "model"],
    "grade sampling (part 2)": [*FINISHED, "sampling"],
    "grade interp (part 3)": [*FINISHED, "interp"],
    "grade training (part 4)": [*FINISHED, "training"],
    WHOLE: FINISHED,
}
COLD = ("grade attention", WHOLE)  # a cold run builds the whole reference whatever is selected
HEADING = "# `grade` speed"


class Sample:
    """One run: wall seconds, the largest process's peak RSS and the whole tree's, in MB."""

    def __init__(self, command: list[str], env: dict):
        self.tree_mb, self.done = 0.0, False
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        watcher = threading.Thread(target=self._watch, args=(process.pid,), daemon=True)
        watcher.start()
        _, status, usage = os.wait4(process.pid, 0)
        self.seconds = time.perf_counter() - started
        self.done = True
        watcher.join()
        if os.waitstatus_to_exitcode(status) not in (0, 1):
            raise RuntimeError(f"{' '.join(command)} failed")
        self.largest_mb = usage.ru_maxrss / 1024

    def _watch(self, pid: int) -> None:
        try:
            root = psutil.Process(pid)
        except psutil.NoSuchProcess:
            return
        while not self.done:
            total = 0
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for process in tree:
                try:
                    total += process.memory_info().rss
                except psutil.Error:
                    pass
            self.tree_mb = max(self.tree_mb, total / 2**20)
            time.sleep(0.1)


def medians(samples: list[Sample]) -> tuple[float, float, float]:
    """Median seconds; the largest peaks, of one process and of the tree."""
    return (
        statistics.median(s.seconds for s in samples),
        max(s.largest_mb for s in samples),
        max(s.tree_mb for s in samples),
    )


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

    python = f"Python {platform.python_version()}, torch {torch.__version__}"
    return f"{cpu}, {os.cpu_count()} cores, {memory} GiB RAM; {python}"


def check_seconds(reports: list[Path]) -> dict[str, float]:
    """Each check's median time over the JSON reports of the warm whole runs."""
    times: dict[str, list[float]] = {}
    for path in reports:
        for check in json.loads(path.read_text())["checks"]:
            times.setdefault(check["id"], []).append(check["seconds"])
    return {check_id: statistics.median(values) for check_id, values in times.items()}


def replace_section(path: Path, section: list[str], heading: str = HEADING) -> None:
    """`section` in place of the section under `heading` (this script's own by default) of `path`;
    the other sections kept."""
    lines = path.read_text().splitlines() if path.exists() else []
    start = lines.index(heading) if heading in lines else len(lines)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("# ")), len(lines))
    kept_after = ([""] if end < len(lines) else []) + lines[end:]
    path.write_text("\n".join([*lines[:start], *section, *kept_after]) + "\n")


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
    loads = [os.getloadavg()[0]]
    reports = [scratch / f"report-{i}.json" for i in range(args.runs)]
    for label, command in COMMANDS.items():
        command = [*command, "--reference", "gpt2"] if command[:3] == GRADE and "--help" not in command else command
        runs = [[*command, "--json", str(report)] for report in reports] if label == WHOLE else [command] * args.runs
        floors, samples = [], []
        for run in runs:
            floors.append(Sample(FLOOR, warm))
            samples.append(Sample(run, warm))
        warm_run, floor = medians(samples), medians(floors)[0]
        cold_wanted = label in COLD and args.cold_runs
        cold = None
        if cold_wanted:
            cold_samples = []
            for _ in range(args.cold_runs):
                floors.append(Sample(FLOOR, warm))
                cold_samples.append(Sample(command, cold_env()))
            cold, floor = medians(cold_samples), medians(floors)[0]
        rows.append((label, warm_run, cold, floor))
        loads.append(os.getloadavg()[0])
        print(
            f"{label}: warm {warm_run[0]:.2f} s ({warm_run[0] / floor:.2f}x), {warm_run[2]:.0f} MB tree"
            + (f"; cold {cold[0]:.2f} s ({cold[0] / floor:.2f}x), {cold[2]:.0f} MB tree" if cold else "")
            + f"; floor {floor:.2f} s",
            flush=True,
        )
    checks = check_seconds(reports)
    whole_floor = next(floor for label, _, _, floor in rows if label == WHOLE)
    shutil.rmtree(scratch, ignore_errors=True)
    lines = [
        HEADING,
        "",
        f"Measured by `bench/grade_speed.py` on {time.strftime('%Y-%m-%d')}: {machine()}.",
        f"Medians of {args.runs} warm and {args.cold_runs} cold runs of whole processes; ratios to the median of the "
        "import-torch floor runs interleaved with each command's (its own column); peak RSS of the largest process "
        "and of the whole process tree (shared pages counted in each process). Load average (1 min) during the run: "
        f"{min(loads):.1f} to {max(loads):.1f}.",
        "",
        "| command | warm | × floor | peak RSS | tree peak RSS | cold | × floor | cold tree peak RSS | floor |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, (seconds, largest, tree), cold, floor in rows:
        cold_cells = f"{cold[0]:.2f} s | {cold[0] / floor:.2f} | {cold[2]:.0f} MB" if cold else " | | "
        lines.append(
            f"| `{label}` | {seconds:.2f} s | {seconds / floor:.2f} | {largest:.0f} MB | {tree:.0f} MB | {cold_cells} "
            f"| {floor:.2f} s |"
        )
    lines += [
        "",
        f"Each check of `{WHOLE}`, warm (median of its `seconds` over the {args.runs} reports), slowest first:",
        "",
        "| check | seconds | × floor |",
        "|---|---|---|",
        *(
            f"| `{check_id}` | {seconds:.2f} | {seconds / whole_floor:.2f} |"
            for check_id, seconds in sorted(checks.items(), key=lambda item: -item[1])
        ),
    ]
    replace_section(args.out, lines)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
