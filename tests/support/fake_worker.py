"""A stand-in for the learner's process (`python -m grader.learner`) that speaks the wire format, imports no torch
and starts in about a tenth of a second: the unit tier drives grader.host.runner against it
(`LearnerProcesses(limits, worker_command=fake_worker.command(directory, steps))`).

    python tests/support/fake_worker.py SCRIPT.json

The script (JSON, written by `command`) says how the worker starts and what it does with each check's request:

    {"start": "ready",                 # or "exit": ends (code 3) before a word; "babble": says something else
     "checks": {"<check id>": {...}}}  # a `Step`'s fields; a check it does not name gets an error reply

Like the fork server (grader.learner.server) it keeps its stdout for the answers and sends anything else printed
there to stderr (the grader's log); forks its twin where asked (`grader.shared.twin`); then says wire.READY with its
pid, reads one wire.Request a line, writes the check's wire.Reply and outputs file into the request's scratch
directory, and answers one wire.WorkerAnswer a line. Every
message is built through the wire format's classes and written by their own serialisers, so that a change of the
format breaks this worker loudly; a deliberately broken message (`Step.extra_keys`, `pad`, `truncate`) is one of
them, altered after serialising. The first line of what each check "printed" names the worker's pid, the check
and its scratch directory (`identity`), so that a test can tell which worker, and which lane, ran a check.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from grader.shared import twin, wire
from grader.shared.outputs_file import HEADER, TensorEntry

SCRIPT_FILE = "fake-worker.json"
IDENTITY = "fake worker {pid}: {check} in {scratch}"
START_CODE = 3  # the exit code of a worker scripted to end before its first word


@dataclass(frozen=True)
class Step:
    """What the fake worker does with one check's request."""

    do: Literal["answer", "end", "exit"] = "answer"  # a reply; the fork server's own answer, no reply; exit mid-check
    # answer: the cases completed, in order, each with its output (nested lists of numbers, written as F32)
    outputs: dict[str, list | float] = field(default_factory=dict)
    status: wire.ReplyStatus = "ran"
    error: str = ""
    extra_keys: dict = field(default_factory=dict)  # keys added to the reply's JSON (ones the format does not have)
    pad: int = 0  # bytes of white space after the reply's JSON (an oversized reply, still JSON)
    truncate: bool = False  # the reply's JSON cut in half (not JSON)
    outputs_file: Literal["file", "symlink", "fifo", "directory"] = "file"  # what is left as the outputs file
    # end: the fork server's answer for a check it ended itself
    ending: wire.Ending = "crashed"
    reason: str = ""
    # exit: the worker's exit code mid-check
    code: int = 7
    # any step
    delay: float = 0.0  # seconds before acting (an answer later than the check's timeout)
    awaits: str = ""  # a file to wait for before acting, at most `delay` seconds: exit (`code`) where none came
    printed: str = ""  # what the check printed: in the answer where checks run in forks, else on stdout (the log)
    printed_beyond: int = 0  # bytes the fork server counted beyond what it kept
    stray: list[str] = field(default_factory=list)  # lines written on the answer channel before the answer
    again: dict = field(default_factory=dict)  # a second round's request (round 1): these fields instead


def command(directory: Path, checks: dict[str, Step], start: str = "ready") -> tuple[str, ...]:
    """The command that starts a fake worker following these steps; the script is written into `directory`."""
    script = directory / SCRIPT_FILE
    script.write_text(json.dumps({"start": start, "checks": {check: asdict(step) for check, step in checks.items()}}))
    return (sys.executable, str(Path(__file__).resolve()), str(script))


def identity(printed: list[str]) -> tuple[int, str, str]:
    """The worker's pid, the check and its scratch directory's name, from the first line an outcome printed."""
    prefix, _, rest = printed[0].partition(": ")
    check, _, scratch = rest.partition(" in ")
    return int(prefix.removeprefix("fake worker ")), check, scratch


# --- the outputs file: safetensors' format, its header through TensorEntry ------------------------------------------


def shape_of(value: list | float) -> list[int]:
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        value = value[0] if value else 0.0
    return shape


def flat(value: list | float) -> list[float]:
    return [x for item in value for x in flat(item)] if isinstance(value, list) else [float(value)]


def write_outputs(path: Path, tensors: dict[str, list | float]) -> None:
    """A safetensors file of F32 tensors: 8 bytes giving the header's length, the header, the data."""
    entries, data, offset = {}, b"", 0
    for name, value in tensors.items():
        values, shape = flat(value), shape_of(value)
        assert len(values) == math.prod(shape), f"{name} is not rectangular"
        chunk = struct.pack(f"<{len(values)}f", *values)
        entries[name] = TensorEntry("F32", shape, (offset, offset + len(chunk)))
        data, offset = data + chunk, offset + len(chunk)
    header = wire.to_json(HEADER, entries).encode()
    header += b" " * (-len(header) % 8)  # safetensors aligns the data on 8 bytes
    path.write_bytes(len(header).to_bytes(8, "little") + header + data)


def leave_outputs(scratch: Path, step: Step) -> None:
    target = scratch / wire.OUTPUTS_FILE
    tensors = {wire.OUTPUT.format(case=case): value for case, value in step.outputs.items()}
    if step.outputs_file == "file":
        write_outputs(target, tensors)
    elif step.outputs_file == "symlink":  # a sound file, but elsewhere: the grader must not follow the link
        elsewhere = scratch.parent / f"{scratch.name}-elsewhere.safetensors"
        write_outputs(elsewhere, tensors)
        target.symlink_to(elsewhere)
    elif step.outputs_file == "fifo":  # opening it for reading would block until a writer comes: none will
        os.mkfifo(target)
    else:
        target.mkdir()


def reply_bytes(step: Step) -> bytes:
    reply = wire.Reply(step.status, outputs=list(step.outputs), error=step.error)
    text = reply.to_json()
    if step.extra_keys:
        text = json.dumps(json.loads(text) | step.extra_keys)
    if step.truncate:
        text = text[: len(text) // 2]
    return text.encode() + b" " * step.pad


# --- the worker ---------------------------------------------------------------------------------------------------


def perform(step: Step, request: wire.Request, answers) -> wire.WorkerAnswer:
    deadline = time.monotonic() + step.delay
    while step.awaits and not Path(step.awaits).exists():
        if time.monotonic() > deadline:
            os._exit(step.code)
        time.sleep(0.01)
    time.sleep(0 if step.awaits else step.delay)
    for line in step.stray:
        answers.write(line + "\n")
    answers.flush()
    if step.do == "exit":
        os._exit(step.code)
    scratch = Path(request.scratch)
    printed = IDENTITY.format(pid=os.getpid(), check=request.check, scratch=scratch.name) + "\n"
    if request.fork:  # the check's output through the fork server's pipe
        printed += step.printed
    elif step.printed:  # the check ran here: what it prints goes where this process's stdout goes, the log
        print(step.printed, flush=True)
    if step.do == "end":
        return wire.WorkerAnswer(step.ending, step.reason, printed=printed, printed_beyond=step.printed_beyond)
    if step.outputs:
        leave_outputs(scratch, step)
    (scratch / wire.REPLY_FILE).write_bytes(reply_bytes(step))
    return wire.WorkerAnswer("answered", printed=printed, printed_beyond=step.printed_beyond)


def main(script_path: str) -> None:
    script = json.loads(Path(script_path).read_text())
    sys.stdout.flush()
    answers = os.fdopen(os.dup(1), "w")  # as the fork server does: stdout kept for the answers,
    os.dup2(2, 1)  # and fd 1 joins stderr, so that nothing else printed can pass for an answer
    if script["start"] == "exit":
        sys.exit(START_CODE)
    answers = twin.split(answers)  # where the grader asked for a twin, as the fork server does
    answers.write(("warming up" if script["start"] == "babble" else wire.ready_line(os.getpid())) + "\n")
    answers.flush()
    if script["start"] == "babble":
        sys.stdin.read()  # until the grader gives up on it
        return
    unscripted = {"status": "error"}
    for line in sys.stdin:
        request = wire.parse_request(line)
        step = Step(**script["checks"].get(request.check, unscripted | {"error": f"no step for {request.check}"}))
        if request.round:
            step = Step(**(asdict(step) | step.again))
        answers.write(perform(step, request, answers).to_json() + "\n")
        answers.flush()


if __name__ == "__main__":
    main(sys.argv[1])
