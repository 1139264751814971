"""The playground's answer time (issue 59): `Playground.analyse` (next token, inside, "where") on a 20-token text
and a 30-token greedy `generate`, warm (after `Playground.start`), each against `import torch` measured in the same
run, interleaved (one floor sample before each answer), on solutions/ with the random reference.

    .venv/bin/python bench/play_speed.py [--rounds 5] [--out bench/results.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from grade_speed import FLOOR, REPO, Sample, machine, replace_section

sys.path.insert(0, str(REPO))
from grader.host.play.session import Playground  # noqa: E402

SECTION = "# Playground answer time (issue 59)"
TEXT = "When Mary and John went to the store, John gave a drink to Mary because she was thirsty after"  # 20 tokens
TARGETS = {"analyse": 3.0, "generate": 6.0}  # times `import torch`, issue 59's


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def measure(rounds: int) -> tuple[dict[str, list[float]], int]:
    seconds: dict[str, list[float]] = {"import torch (floor)": [], "analyse": [], "generate": []}
    with Playground.start(REPO / "solutions", "random") as play:
        tokens = len(play.analyse(TEXT)["tokens"])  # warms both processes and the seal's hashing up
        play.generate(TEXT, max_new_tokens=30, greedy=True)
        for _ in range(rounds):
            seconds["import torch (floor)"].append(Sample(FLOOR, dict(os.environ)).seconds)
            seconds["analyse"].append(timed(lambda: play.analyse(TEXT)))
            seconds["import torch (floor)"].append(Sample(FLOOR, dict(os.environ)).seconds)
            seconds["generate"].append(timed(lambda: play.generate(TEXT, max_new_tokens=30, greedy=True)))
    return seconds, tokens


def section(seconds: dict[str, list[float]], tokens: int, rounds: int) -> list[str]:
    floor = statistics.median(seconds["import torch (floor)"])
    lines = [
        SECTION,
        "",
        f"Measured by `bench/play_speed.py --rounds {rounds}` on {time.strftime('%Y-%m-%d %H:%M')}: {machine()}.",
        f"`analyse` on {tokens} tokens (BOS included) and a 30-token greedy `generate`, warm, on solutions/ with the",
        "random reference; medians, each answer after a floor sample of its own.",
        "",
        "| what | median s | × import torch | target |",
        "|---|---|---|---|",
    ]
    for name, values in seconds.items():
        median = statistics.median(values)
        lines.append(f"| {name} | {median:.2f} | {median / floor:.2f} | {target(name, median / floor)} |")
    return [*lines, ""]


def target(name: str, ratio: float) -> str:
    if name not in TARGETS:
        return ""
    return f"within {TARGETS[name]:g}×: {'met' if ratio <= TARGETS[name] else 'not met'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results.md")
    args = parser.parse_args()
    seconds, tokens = measure(args.rounds)
    print(seconds, tokens)
    lines = section(seconds, tokens, args.rounds)
    print("\n".join(lines))
    replace_section(args.out, lines, SECTION)


if __name__ == "__main__":
    main()
