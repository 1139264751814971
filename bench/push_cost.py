"""What one push costs in Classroom 50's autograder, cold: a fresh virtual environment, the wheels on this machine
and offline, an empty reference cache, the random reference; beside `import torch` and a bare `pip install torch`
from the same wheels, measured in the same run.

Each round runs, in turn: the floor (`python -c "import torch"` in the bare environment); a bare `pip install torch`
into a new environment; then for each bundle (`--bundle NAME=GRADER_SRC`, the autograder bundle's grader-src/, e.g.
one made before and one after a change) its install into a new environment as its autograder.py runs it
(`python -m grader.host.tools.setup`, with `--grading` where the bundle's setup has it), then, in that environment
and each with the floor again before it, Part 1 (`grade --assignment part1`) from an empty cache, the same again warm
(the checks alone), and the whole course from another empty cache, and warm. A cold grading's reference is its time
less the warm grading's. The first grading after an install pays for compiling what it imports, as the autograder's
does. Medians over the rounds; ratios to the medians of the floor and of the bare install.

    .venv/bin/python -m pip wheel -w /tmp/wheels torch==2.13.0 setuptools wheel .    # the wheels, once
    .venv/bin/python -m grader.host.platforms.classroom50.bundle /tmp/after                       # a bundle
    .venv/bin/python bench/push_cost.py --wheels /tmp/wheels --bundle after=/tmp/after/grader-src [--rounds 3]

It writes the raw seconds to `--json` after every measurement (a run cut short keeps what it had) and its section
of `--out` at the end; `--from-json` writes the section from such a file without measuring again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEADING = "# What a push costs"
PARTS = {"Part 1 (`--assignment part1`, 10 checks)": ["--assignment", "part1"], "the whole course (52 checks)": []}


def timed(command: list[str], env: dict, cwd: Path | None = None) -> tuple[float, float]:
    """Wall seconds, and the CPU seconds (user and system) of the process and the descendants it waited for: on a
    machine shared with others' work the CPU time is the steadier figure."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    stderr = process.stderr.read()  # before waiting: a full pipe would stall it
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}: {stderr[-1500:].decode()}")
    return seconds, usage.ru_utime + usage.ru_stime


def fresh_venv(where: Path) -> Path:
    shutil.rmtree(where, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    return where / "bin" / "python"


class Run:
    def __init__(self, args):
        self.args, self.scratch = args, Path(tempfile.mkdtemp(prefix="push-cost-"))
        self.samples: dict[str, list[float]] = {}
        offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(args.wheels), "HF_HUB_OFFLINE": "1"}
        drop = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "GPT2_GRADER_CACHE", "HF_HUB_CACHE")
        self.env = {key: value for key, value in os.environ.items() if key not in drop} | offline
        self.bare_python: Path | None = None

    def record(self, name: str, seconds: tuple[float, float]) -> None:
        self.samples.setdefault(name, []).append(seconds)
        print(f"{name}: {seconds[0]:.2f} s, {seconds[1]:.2f} s of CPU", file=sys.stderr, flush=True)
        self.args.json.write_text(json.dumps(self.samples, indent=1))

    def floor(self) -> None:
        self.record("import torch", timed([str(self.bare_python), "-c", "import torch"], self.env))

    def bare_install(self) -> None:
        python = fresh_venv(self.scratch / "bare")
        pip = [str(python), "-m", "pip", "install", "-q", "torch==2.13.0"]
        self.record("pip install torch", timed(pip, self.env))
        self.bare_python = python

    def bundle(self, name: str, source: Path) -> None:
        python = fresh_venv(self.scratch / name)
        grading = "--grading" in (source / "grader" / "host" / "tools" / "setup.py").read_text()
        setup = [str(python), "-m", "grader.host.tools.setup", *(["--grading"] if grading else [])]
        self.record(f"{name}: install", timed(setup, self.env, cwd=source))
        for part, selection in PARTS.items():
            if name in self.args.part1_only and not selection:
                continue
            cache = self.scratch / f"cache-{name}"
            shutil.rmtree(cache, ignore_errors=True)
            env = {**self.env, "GPT2_GRADER_CACHE": str(cache)}
            grade = [str(python), "-m", "grader", "--reference", "random", "--exercises", str(REPO / "solutions")]
            for state in ("cold", "warm"):
                self.floor()
                self.record(f"{name}: {part}, {state}", timed([*grade, *selection], env, cwd=source))
            shutil.rmtree(cache, ignore_errors=True)

    def rounds(self) -> None:
        for number in range(self.args.rounds):
            print(f"round {number + 1} of {self.args.rounds}", file=sys.stderr, flush=True)
            self.bare_install()
            self.floor()
            for name, source in self.args.bundle:
                self.bundle(name, source)
        shutil.rmtree(self.scratch, ignore_errors=True)


def median(samples: dict, name: str, cpu: bool = False) -> float:
    return statistics.median(sample[cpu] for sample in samples[name])


def row(samples: dict, name: str, label: str, floors: tuple[float, float], bundle: str = "", runs: int = 0) -> str:
    """A stage's wall and CPU medians, each beside its ratio to the floor of the same kind."""
    wall, cpu = median(samples, name), median(samples, name, cpu=True)
    return (
        f"| {bundle} | {label} | {wall:.1f} | {wall / floors[0]:.2f} | {cpu:.1f} | {cpu / floors[1]:.2f} | "
        f"{runs or len(samples[name])} |"
    )


def table(samples: dict, bundles: list[str]) -> list[str]:
    """Each stage against `import torch` and each install against a bare `pip install torch`; a cold grading's
    reference is its time less the warm grading's (its checks)."""
    torch = (median(samples, "import torch"), median(samples, "import torch", cpu=True))
    bare = (median(samples, "pip install torch"), median(samples, "pip install torch", cpu=True))
    lines = [
        "| bundle | stage | wall s | × floor | CPU s | × floor (CPU) | runs |",
        "|---|---|---|---|---|---|---|",
        row(samples, "import torch", "`import torch` (the floor of the gradings)", torch),
        row(samples, "pip install torch", "bare `pip install torch` (the floor of the installs)", bare),
    ]
    for name in bundles:
        lines.append(row(samples, f"{name}: install", "install (`grader.host.tools.setup`)", bare, name))
        for part in PARTS:
            cold, warm = f"{name}: {part}, cold", f"{name}: {part}, warm"
            if cold not in samples:
                continue
            samples[f"{name}: {part}, reference"] = [
                (c[0] - w[0], c[1] - w[1]) for c, w in zip(samples[cold], samples[warm], strict=False)
            ]
            for stage, label in (
                ("cold", "cold"),
                ("reference", "reference (cold less warm)"),
                ("warm", "checks (warm)"),
            ):
                lines.append(row(samples, f"{name}: {part}, {stage}", f"{part}: {label}", torch, name))
    return lines


def write_section(out: Path, lines: list[str]) -> None:
    """Replace this benchmark's section of `out`, leaving the others."""
    text = out.read_text() if out.exists() else ""
    start = text.find(HEADING)
    if start >= 0:
        following = text.find("\n# ", start + 1)
        text = text[:start] + (text[following + 1 :] if following >= 0 else "")
    out.write_text("\n".join(lines) + "\n\n" + text.lstrip("\n"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, help="a folder of every wheel the installs need")
    parser.add_argument(
        "--bundle",
        action="append",
        required=True,
        type=lambda text: (text.partition("=")[0], Path(text.partition("=")[2]).resolve()),
        help="NAME=GRADER_SRC, an autograder bundle's grader-src/; several are measured in turn",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--part1-only", action="append", default=[], metavar="NAME", help="a bundle graded on Part 1 only"
    )
    parser.add_argument("--json", type=Path, default=Path("push_cost.json"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--from-json", action="store_true", help="the table of --json's seconds, measuring nothing")
    args = parser.parse_args()
    if args.from_json:
        samples = json.loads(args.json.read_text())
    else:
        run = Run(args)
        run.rounds()
        samples = run.samples
    lines = table(samples, [name for name, _ in args.bundle])
    print("\n".join(lines))
    if args.out:
        write_section(args.out, [HEADING, "", *lines])
    return 0


if __name__ == "__main__":
    sys.exit(main())
