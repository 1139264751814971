"""Where a warm grading's time goes, check by check, and the grader's own overhead around the checks.

The grading runs here, in this process, as `grade --solutions` runs it (the same `LearnerProcesses`, the same
`GradingRun`), with timestamps taken around the functions each stage already is: nothing is changed but a
clock read before and after. The learner's process is `grader.learner`'s own fork server, started through this
script (`--worker`), which wraps the same functions on its side; a check's fork writes its timestamps to a
descriptor it inherits (opened before confinement, as the weights are), so the sandbox stays as it is.
Timestamps are `time.monotonic()`, one clock for every process of the machine.

Per check, in seconds (medians over the runs):

- prep: the grader's request and scratch directory, up to the request written to the worker
- fork: the fork server from the request to the check's process having it (warm imports, the cgroup, the fork)
- setup: in the check's process, up to the learner's first import (the reference's files opened, the caps, the
  sandbox)
- import: the learner's modules imported (compiled from source)
- weights: the learner's modules built and loaded with GPT-2's weights
- run: the rest of the driver and the learner's code: the check's own computation
- write: its outputs and reply written to the scratch
- reap: from its reply written to the grader reading the fork server's answer (exit, the cgroup's end, the pipe)
- reply: the grader reading the reply and tensors back (`outcome_of`)
- judge: compare and diagnose (`verdict.judge`)

Then the last run's lanes: which lane ran which check when, from the start of the `GradingRun` (the worker is ready
by then), and each lane's busy and idle time: where the grading's wall time goes when two checks run at once.

    .venv/bin/python bench/check_breakdown.py [--runs 3] [--checks ID ...] [--out bench/results.md]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SECTION = "# Per-check time breakdown"
STAGES = ("prep", "fork", "setup", "import", "weights", "run", "write", "reap", "reply", "judge")
TIMINGS_VARIABLE = "CHECK_BREAKDOWN_TIMINGS"


# ---- the learner's side: the fork server, wrapped -------------------------------------------------------------


def _worker() -> None:
    """`python bench/check_breakdown.py --worker`: the fork server of `grader.learner`, its stages timed."""
    fd = os.open(os.environ.pop(TIMINGS_VARIABLE), os.O_WRONLY | os.O_APPEND)  # inherited by each check's fork
    here = Path(__file__).resolve().parent
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != here]  # as `python -m` would
    state = {"check": ""}

    def mark(event: str) -> None:
        os.write(fd, (json.dumps({"check": state["check"], "event": event, "t": time.monotonic()}) + "\n").encode())

    from grader.learner import cases, package, server

    run_one = server.run_one

    def timed_run_one(request, answer_fd):
        state["check"] = request.check
        mark("request")
        try:
            return run_one(request, answer_fd)
        finally:
            mark("answered")

    check_process = server.check_process

    def timed_check_process(answer_fd, printed, group, request):
        mark("child")  # in the check's process, just forked
        return check_process(answer_fd, printed, group, request)

    def around(owner, name: str, before: str, after: str, outermost: bool = False) -> None:
        original, depth = getattr(owner, name), [0]  # this wrapper's own nesting: an import inside an import

        @functools.wraps(original)
        def wrapped(*args, **kwargs):
            depth[0] += 1
            if not outermost or depth[0] == 1:
                mark(before)
            try:
                return original(*args, **kwargs)
            finally:
                depth[0] -= 1
                if not outermost or depth[0] == 0:
                    mark(after)

        setattr(owner, name, wrapped)

    server.run_one, server.check_process = timed_run_one, timed_check_process
    around(package.LearnerPackage, "module", "import", "imported", outermost=True)
    around(cases.CaseContext, "module", "build", "built")
    around(server, "run_request", "run", "ran")
    around(server, "write_reply", "write_reply", "replied")
    import safetensors.torch

    around(safetensors.torch, "save_file", "save", "saved")
    server.serve()


# ---- the grader's side ----------------------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.events: list[dict] = []

    def mark(self, check: str, event: str) -> None:
        self.events.append({"check": check, "event": event, "t": time.monotonic()})

    def around(self, owner, name: str, before: str, after: str, check_of) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def wrapped(*args, **kwargs):
            check = check_of(*args, **kwargs)
            self.mark(check, before)
            try:
                return original(*args, **kwargs)
            finally:
                self.mark(check, after)

        setattr(owner, name, wrapped)


def one_run(checks_wanted: list[str]) -> dict:
    """Per check its stages' seconds; the whole run's own stages; each check's status; the lanes' timeline."""
    started = time.monotonic()
    overhead: dict[str, float] = {}
    from grader.checks import select
    from grader.host import pipeline
    from grader.host.refcache import ensure_reference
    from grader.host.render import text
    from grader.host.runner import LearnerProcesses, Limits, lanes

    overhead["grader imports"] = time.monotonic() - started
    clock = Clock()
    timings_file = Path(tempfile.mkdtemp(prefix="check-breakdown-")) / "timings.jsonl"
    timings_file.touch(mode=0o666)  # a confined check runs as nobody where the grader is root
    timings_file.parent.chmod(0o755)
    os.environ[TIMINGS_VARIABLE] = str(timings_file)
    command = (sys.executable, str(Path(__file__).resolve()), "--worker")
    checks = select(checks_wanted)

    ask = lanes.Lane._ask
    current: dict[int, str] = {}

    def timed_ask(self, request):
        clock.mark(request.check, "asked")
        try:
            return ask(self, request)
        finally:
            clock.mark(request.check, "got")

    lanes.Lane._ask = timed_ask
    lane_of: dict[str, str] = {}

    def run_by(lane, package, check, reference) -> str:
        lane_of[check.id] = lane.name
        return check.id

    clock.around(lanes.Lane, "_run_one", "prepare", "done", run_by)
    clock.around(lanes, "outcome_of", "read", "read_done", lambda *a: current.get(id(a[2]), "?"))
    request_for = lanes.request_for

    def remembered_request(package, check, reference, scratch, limits):
        request = request_for(package, check, reference, scratch, limits)
        current[id(request.cases)] = check.id
        return request

    lanes.request_for = remembered_request
    clock.around(pipeline, "judge", "judge", "judged", lambda evidence: evidence.check.id)
    try:
        entered = time.monotonic()
        with LearnerProcesses(Limits(), worker_command=command) as processes:
            processes.start_for(checks)  # as grade does once it has selected the checks
            reference = ensure_reference("auto", lambda message, fraction=None: None)
            overhead["reference cache opened"] = time.monotonic() - entered
            lane = processes.lane(lanes.GPT2_LANE)
            lane._ready_worker()
            overhead["waiting for the worker's torch"] = time.monotonic() - entered - overhead["reference cache opened"]
            graded = time.monotonic()
            report = pipeline.GradingRun(REPO / "solutions", checks, reference, processes=processes).finished().report
            overhead["grading"] = time.monotonic() - graded
            rendered = time.monotonic()
            from rich.console import Console

            text.print_report(report, Console(file=open(os.devnull, "w"), width=120), True)
            overhead["terminal report"] = time.monotonic() - rendered
    finally:
        lanes.Lane._ask, lanes.request_for = ask, request_for
    overhead["total (in process)"] = time.monotonic() - started
    learner = [json.loads(line) for line in timings_file.read_text().splitlines() if line.strip()]
    events: dict[str, dict[str, float]] = defaultdict(dict)
    for event in [*clock.events, *learner]:
        events[event["check"]].setdefault(event["event"], event["t"])  # the first of each; repeated ones: `summed`
    sums = summed(learner)
    stages = {check.id: stages_of(events[check.id], sums.get(check.id, {})) for check in checks}
    timeline = [
        [lane_of[c.id], c.id, events[c.id]["prepare"] - graded, events[c.id]["done"] - graded]
        for c in checks
        if "prepare" in events[c.id] and "done" in events[c.id]
    ]
    # Summed over both lanes: more than the wall time where two run at once.
    overhead["checks' lanes (wall)"] = sum(finished - started for *_, started, finished in timeline)
    overhead["judging (all checks)"] = sum(stages[c.id]["judge"] for c in checks)
    statuses = {result.id: result.status for result in report.checks}
    return {"stages": stages, "overhead": overhead, "statuses": statuses, "timeline": timeline}


def summed(learner: list[dict]) -> dict[str, dict[str, float]]:
    """Per check, the seconds spent between each before/after pair that may come several times."""
    pairs = {"import": "imported", "build": "built", "save": "saved"}
    open_at: dict[tuple[str, str], float] = {}
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for event in learner:
        name, check = event["event"], event["check"]
        if name in pairs:
            open_at[(check, name)] = event["t"]
        for before, after in pairs.items():
            if name == after and (check, before) in open_at:
                sums[check][before] += event["t"] - open_at.pop((check, before))
    return sums


def stages_of(t: dict[str, float], sums: dict[str, float]) -> dict[str, float]:
    def between(a: str, b: str) -> float:
        return max(0.0, t[b] - t[a]) if a in t and b in t else 0.0

    imports, builds, saves = sums.get("import", 0.0), sums.get("build", 0.0), sums.get("save", 0.0)
    return {
        "prep": between("prepare", "asked") + between("asked", "request"),
        "fork": between("request", "child"),
        "setup": between("child", "run"),
        "import": imports,
        "weights": builds,
        "run": max(0.0, between("run", "ran") - imports - builds - saves),  # imports and builds happen inside
        "write": saves + between("write_reply", "replied"),
        "reap": between("replied", "answered") + between("answered", "got"),
        "reply": between("read", "read_done"),
        "judge": between("judge", "judged"),
    }


def table(per_run: list[dict[str, dict[str, float]]], statuses: dict[str, str]) -> list[str]:
    checks = list(per_run[0])
    medians = {c: {s: statistics.median(run[c][s] for run in per_run) for s in STAGES} for c in checks}
    rows = sorted(checks, key=lambda c: -sum(medians[c].values()))
    lines = [
        "| check | " + " | ".join(STAGES) + " | total | status |",
        "|---|" + "---|" * (len(STAGES) + 2),
    ]
    for c in rows:
        values = " | ".join(f"{medians[c][s]:.3f}" for s in STAGES)
        lines.append(f"| `{c}` | {values} | {sum(medians[c].values()):.3f} | {statuses.get(c, '')} |")
    totals = " | ".join(f"**{sum(medians[c][s] for c in checks):.2f}**" for s in STAGES)
    lines.append(f"| **sum** | {totals} | **{sum(sum(m.values()) for m in medians.values()):.2f}** | |")
    return lines


def lane_table(timeline: list[list]) -> list[str]:
    """The last run's checks by lane, in the order each lane ran them; seconds from the start of grading."""
    end = max(finished for *_, finished in timeline)
    lines = ["The last run's lanes (seconds from the start of grading):", ""]
    for lane in sorted({row[0] for row in timeline}):
        rows = sorted((row for row in timeline if row[0] == lane), key=lambda row: row[2])
        busy = sum(finished - started for _, _, started, finished in rows)
        lines.append(
            f"- `{lane}`: busy {busy:.2f} s of {end:.2f} s; "
            + ", ".join(f"`{check}` {started:.2f} to {finished:.2f}" for _, check, started, finished in rows)
        )
    return lines


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        _worker()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--checks", nargs="*", default=[])
    parser.add_argument("--out", type=Path, default=None, help="replace this section of a results file")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # one run, as JSON on stdout
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.checks)))
        return
    import subprocess

    runs = []
    for _ in range(args.runs):  # each in a fresh process, as a `grade` is
        done = subprocess.run(
            [sys.executable, __file__, "--one", "--checks", *args.checks],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    overhead = {key: statistics.median(run["overhead"][key] for run in runs) for key in runs[0]["overhead"]}
    from grade_speed import machine, replace_section

    lines = [
        SECTION,
        "",
        f"Measured by `bench/check_breakdown.py` on {time.strftime('%Y-%m-%d %H:%M')}: {machine()}. "
        f"Medians of {args.runs} warm in-process gradings of `solutions/`; load average (1 min) "
        f"{os.getloadavg()[0]:.1f} at the end. Seconds; the stages are defined in the script's docstring.",
        "",
        *table([run["stages"] for run in runs], runs[-1]["statuses"]),
        "",
        "The grader's own time (medians, seconds):",
        "",
        "| stage | seconds |",
        "|---|---|",
        *(f"| {key} | {value:.3f} |" for key, value in overhead.items()),
        "",
        *lane_table(runs[-1]["timeline"]),
    ]
    print("\n".join(lines))
    if args.out:
        replace_section(args.out, lines, SECTION)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    # This tree's grader, not the one the venv installed (editable, perhaps another checkout); the worker's
    # `serve` takes the tree's entry off again, as it does `python -m`'s
    sys.path[:0] = [str(REPO), str(Path(__file__).resolve().parent)]
    main()
