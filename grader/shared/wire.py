"""The wire format between the grader and a check's process: messages, statuses and tensor names.

A leaf module shared by every process (no torch, no numpy). The grader writes a `Request` as one
JSON line; the check's process writes its reply as JSON into its scratch directory, and its
tensors as `outputs.safetensors` beside it. The learner's code runs in that process and may have
written anything there (a link, a directory, a FIFO, a file with a forged header), so the grader
opens what it left through `open_left`, reads every reply through `parse_reply` and the outputs
file's header through `outputs_file.outputs_index` before any tensor; none of them raises on what it reads:
what is not what it should be is a `BadReply` with a one-line reason.

The dataclasses below are the format's one definition: every process builds its messages as these
objects and writes them through `to_json`; every reader validates them through the same classes, and
refuses a key a class does not declare (`message`), so that a misspelled field is an error,
never a field silently lost.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, BinaryIO, Literal, TypeVar

from pydantic import AfterValidator, ConfigDict, NonNegativeInt, TypeAdapter, ValidationError
from typing_extensions import dataclass_transform  # typing's from Python 3.11

# What a check's process says about its run, in its reply; how the process ended is the fork server's
# `Ending`. Neither is a check's status (pass, fail, ...): the grader's verdict decides that from both.
ReplyStatus = Literal["ran", "todo", "error", "weights", "forbidden"]
# Why a check ran on the grader's part for the learner's (learner.stand_ins): the learner's Transformer (or file) ...
StandIn = Literal["does not import", "fails its own check", "does not finish importing"]
# A part of the learner's package the grader has its own of (grader.learner.part_stand_ins), put in its place where
# that part fails its own check, so that a check composing it is graded on its own code: `<file>.<name>` of a class
# or function, `<file>.<Class>.<method>` of a method.
StandInPart = Literal[
    "embedding.Embed",
    "embedding.PosEmbed",
    "normalization.LayerNorm",
    "attention.Attention",
    "attention.Attention.apply_causal_mask",
    "mlp.gelu_new",
    "mlp.MLP",
    "block.TransformerBlock",
    "unembedding.Unembed",
    "positions.ConcatTransformer.residual",
]
RecordKind = Literal["locals", "returns", "modules"]  # what a `Record` holds: a named tensor, a return, a submodule's
Ending = Literal["answered", "timeout", "crashed", "memory"]
REPLY_FILE, OUTPUTS_FILE = "reply.json", "outputs.safetensors"
IMPORT_STACK_FILE = "import-stack.txt"  # the stacks of the preflight's process, in its scratch (runner.preflight)
READY = "ready"  # the worker's first word: torch is imported, so a check's time starts with its request
MAX_REPLY_BYTES = 8 * 2**20  # of the reply, and of the outputs file's header
MAX_TEXT = 2000  # characters of one message from the learner's side
T = TypeVar("T")
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def ready_line(pid: int) -> str:
    """A worker's first line: READY and its pid (a twin's only name for the grader, `grader.shared.twin`)."""
    return f"{READY} {pid}"


def ready_pid(line: str) -> int:
    """The pid a worker's first line gives; ValueError where the line is no `ready_line`."""
    word, _, pid = line.strip().partition(" ")
    if word != READY or not pid.isdigit():
        raise ValueError(f"not a ready line: {line[:80]!r}")
    return int(pid)


def clean_text(text: str, limit: int = MAX_TEXT) -> str:
    """Control characters and lone surrogates replaced, at most `limit` characters: safe to print anywhere."""
    text = _UNPRINTABLE.sub("\ufffd", text)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


Text = Annotated[str, AfterValidator(clean_text)]


@dataclass_transform(frozen_default=True)
def message(cls: type[T]) -> type[T]:
    """A class of the wire format: a frozen dataclass whose readers refuse a key it does not declare
    (pydantic's default for a dataclass drops such a key unread)."""
    cls.__pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[attr-defined]
    return dataclass(frozen=True)(cls)


def to_json(adapter: TypeAdapter, value) -> str:
    """A message as one line of JSON, through its class's own serialiser. Python's encoder writes the
    text: a lone surrogate in a learner's message is escaped, where pydantic's encoder would raise."""
    return json.dumps(adapter.dump_python(value, mode="json"))


# --- tensor names -------------------------------------------------------------------------------
# One spelling per kind of tensor, filled in with str.format: ARG.format(case="prompt", i=0) is "prompt/arg0". The
# inputs file of one check (`inputs/<check>.safetensors`) and the check's outputs file:
ARG = "{case}/arg{i}"  # the i-th argument the target is called with
OVERRIDE = "{case}/override/{parameter}"  # a parameter the case replaces GPT-2's with
EXTRA = "{case}/{name}"  # a named input of a driver (Case.extra)
OUTPUT = "{case}/out"  # what the target returned (the outputs file)
CAPTURE = "{case}/capture/{i}"  # the i-th intermediate recorded for diagnosis (the outputs file)
DEVICE_PROBE = "{case}/device_probe"  # the grader's own module's output on the check's device (learner.device_truth)
ARG_AFTER = "{case}/arg{i}_after"  # the i-th argument after the call, when the check watches its inputs
EXPECTED = "{check}/{case}"  # of the expected file: a case's answer, or (case=STEP.format(...)) a step or mistake
STEP = "{case}/step/{label}"  # GPT-2's intermediate, in computation order
MISTAKE = "{case}/mistake/{i}"  # what the i-th known mistake outputs
REPLAY = "replay/"  # extras of a case whose target's submodules answer GPT-2's outputs (learner.drivers.replay)


def replay_names(path: str) -> tuple[str, str]:
    """The extras holding GPT-2's input to the submodule at `path` and its output for that input."""
    return f"{REPLAY}{path}/input", f"{REPLAY}{path}/output"


# --- the request --------------------------------------------------------------------------------


@message
class StoodIn:
    """A learner's file that does not import, the grader's parts its importers took instead (learner.stand_ins)."""

    file: Text
    names: list[Text]
    why: StandIn
    line: int | None = None  # where its import was stopped, for one that does not finish

    def said(self) -> str:  # as every report says it: "mlp.py does not finish importing (line 7 when stopped)"
        return f"{self.file} {self.why}" + (f" (line {self.line} when stopped)" if self.line else "")


@message
class TargetSpec:
    file: str
    name: str
    method: str | None
    driver: str | None
    fast_init: bool = True


@message
class CaseSpec:
    """One case as the reference cache's meta.json describes it."""

    name: str
    args: int
    weights: str | None
    overrides: list[str]
    hint: str = ""
    steps: list[str] = field(default_factory=list)
    mistakes: list[str] = field(default_factory=list)
    # Config fields of another model (the small induction model): the learner's modules built at them, all overridden.
    config: dict[str, int] = field(default_factory=dict)


@message
class Capture:
    modes: list[str]  # "locals", "modules"
    keep: list[str]  # the modes whose values travel back


@message
class Request:
    package: str
    check: str
    target: TargetSpec
    cases: list[CaseSpec]
    weights: str  # the reference weights file
    inputs: str  # this check's inputs file
    scratch: str  # the only directory the check may write: its reply and outputs
    timeout: float
    memory_bytes: int  # 0: no limit
    watch_inputs: bool = False
    capture: Capture | None = None
    sandbox: bool = True  # confine the check's process (see `grader.shared.sandbox`)
    fork: bool = True  # run the check in a fork of the worker (Linux); else in the worker itself
    device: str = "cpu"  # where the learner's modules, weights and inputs go: cpu, cuda, mps or auto
    warm_imports: list[str] = field(default_factory=list)  # libraries imported before the fork (Run.warm_imports)
    round: int = 0  # the seed of anything random in the learner's code: 1 for a second round (Run.draws_again)
    stand_ins: list[StandInPart] = field(default_factory=list)  # the parts the grader's own replace in this check
    unfinished: list[StoodIn] = field(default_factory=list)  # files whose import hangs: stood in for, never run
    preflight: list[str] = field(default_factory=list)  # the learner's files to import, not a check (runner.preflight)

    def to_json(self) -> str:
        return to_json(REQUEST, self)


REQUEST = TypeAdapter(Request)


def parse_request(line: str) -> Request:
    return REQUEST.validate_json(line)


# --- the reply ----------------------------------------------------------------------------------


@message
class Place:
    file: Text
    line: int | None = None
    code: Text = ""
    function: Text = ""  # the qualified name of the learner's function there (`Beams.generate`)


@message
class WeightFacts:
    missing: list[Text]
    unexpected: list[Text]
    misshapen: dict[Text, list[list[int]]]
    suggestions: dict[Text, list[Text]]


@message
class BadOutput:
    case: Text
    problem: Text


@message
class Record:
    """A tensor the learner's code named (`locals`) or returned (`returns`), or a submodule output
    (`modules`), with the line of the learner's code that produced it where known (None for an argument)."""

    kind: RecordKind
    tag: Text
    name: Text
    shape: list[int]
    saved: int | None  # its index among the captures in the outputs file, when kept
    file: Text = ""
    line: int | None = None


@message
class ParameterShape:
    tag: Text
    name: Text
    shape: list[int]
    requires_grad: bool = True  # as `grade --show` prints it: False for a parameter the learner froze


@message
class Reply:
    status: ReplyStatus
    outputs: list[Text] = field(default_factory=list)  # the cases completed, in order
    error: Text = ""
    where: Place | None = None  # where an exception came from in the learner's files
    target_where: Place | None = None  # where the learner defined the function under test
    in_place: Place | None = None  # the first line of that function that changes an argument in place (x += ...)
    # Other functions the driver calls, where defined: a named mistake that begins with one's name is located there.
    methods: list[Place] = field(default_factory=list)
    weights: WeightFacts | None = None
    bad_output: BadOutput | None = None
    param_counts: dict[Text, int] = field(default_factory=dict)
    captures: dict[Text, list[Record]] = field(default_factory=dict)
    parameters: list[ParameterShape] = field(default_factory=list)
    stand_in: StandIn | None = None  # why the check ran on the grader's Transformer, not the learner's
    stood_in: list[StoodIn] = field(default_factory=list)  # the learner's files that do not import, stood in for
    device: Text = ""  # the device the check ran on, named, where it is not the CPU (learner.device_truth)

    def to_json(self) -> str:
        return to_json(REPLY, self)


REPLY = TypeAdapter(Reply)


@dataclass(frozen=True)
class BadReply:
    reason: str


def parse_reply(raw: bytes, cases: list[CaseSpec]) -> Reply | BadReply:
    """The reply, checked against what was asked: known cases, in order, each once; every case
    answered when the status says the run went through."""
    try:
        data = json.loads(raw)  # Python's parser: a lone surrogate in a message is the learner's text, not an error
    except (ValueError, RecursionError):
        return BadReply("the check's reply is not JSON")
    try:
        reply = REPLY.validate_python(data)
    except ValidationError as error:
        return BadReply(malformed("the check's reply", error))
    names = [case.name for case in cases]
    if reply.outputs != names[: len(reply.outputs)]:
        return BadReply("the check's reply names outputs that were not asked for")
    if reply.status == "ran" and reply.bad_output is None and len(reply.outputs) != len(names):
        return BadReply(f"the check's process gave no output for {names[len(reply.outputs)]}")
    return reply


UNKNOWN_KEY = ("unexpected_keyword_argument", "extra_forbidden")  # pydantic's words for a key `message` refuses


def malformed(what: str, error: ValidationError) -> str:
    """One line naming the first field that is wrong; never the value, which may be anything."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "the whole"
    problem = "a field the wire format does not have" if first["type"] in UNKNOWN_KEY else first["msg"]
    return clean_text(f"{what} is malformed ({where}: {problem})", 300)


class NotRegular(OSError):
    """What the check's process left under a file's name is a directory, a FIFO, a socket or a device."""


def open_left(path: Path) -> BinaryIO:
    """A file the check's process left, open for reading: a link is never followed, a FIFO never
    blocked on. Raises FileNotFoundError when there is none, NotRegular (or another OSError) when
    what is there is no regular file."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    handle = os.fdopen(os.open(path, flags), "rb")
    if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
        handle.close()
        raise NotRegular(f"{path.name} is not a regular file")
    return handle


def read_reply(scratch: Path, cases: list[CaseSpec]) -> Reply | BadReply:
    """The reply file of a check's scratch directory: a regular file (never a link), of bounded size."""
    try:
        with open_left(scratch / REPLY_FILE) as handle:
            raw = handle.read(MAX_REPLY_BYTES + 1)
    except FileNotFoundError:
        return BadReply("the check's process ended without a reply")
    except OSError:  # a directory, a FIFO, a link, a socket
        return BadReply(f"the check's process left something other than a file as {REPLY_FILE}")
    if len(raw) > MAX_REPLY_BYTES:
        return BadReply(f"the check's reply is larger than {MAX_REPLY_BYTES // 2**20} MB")
    return parse_reply(raw, cases)


@message
class WorkerAnswer:
    """What the fork server says about one check's process once it has ended, with the start of what
    its processes printed (lines cleaned by the grader) and how many bytes of it were not kept."""

    ending: Ending
    reason: Text = ""
    printed: str = ""
    printed_beyond: NonNegativeInt = 0

    def to_json(self) -> str:
        return to_json(WORKER_ANSWER, self)


WORKER_ANSWER = TypeAdapter(WorkerAnswer)
