"""What a check's process left, read as an attacker's data: its reply (`wire.read_reply`), its tensors one by
one, what it printed; an `Outcome` whatever they hold, so that a malformed or forged answer is that check's
error, never a crash of the grading."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grader.shared import outputs_file, wire

MAX_OUTPUTS_BYTES = 256 * 2**20  # what the grader reads of one check's outputs: ten times the most a solution writes


@dataclass
class Outcome:
    """What came back from the learner's process for one check, validated. Its reply and tensors are those of
    an `answered` ending only; a reply or outputs file that cannot be read counts as a crash."""

    ending: wire.Ending
    reply: wire.Reply = field(default_factory=lambda: wire.Reply("error"))  # none came back: an empty one
    outputs: dict = field(default_factory=dict)  # tensor name -> numpy array
    seconds: float = 0.0
    traced: bool = False  # --trace: the reply records every tensor the learner's code named
    error: str = ""  # why, for an ending other than `answered` and an unreadable answer
    printed: list[str] = field(default_factory=list)  # what the check's process printed, cleaned lines
    device_fault: str = ""  # why it was graded on the CPU, not on the device asked for (runner.device_truth)

    @property
    def message(self) -> str:
        return self.error or self.reply.error

    @property
    def completed(self) -> bool:
        """Whether the learner's process ran every case to an output that can be compared."""
        return self.ending == "answered" and self.reply.status == "ran" and self.reply.bad_output is None


def outcome_of(
    answer: wire.WorkerAnswer, scratch: Path, cases: list[wire.CaseSpec], seconds: float, traced: bool
) -> Outcome:
    """The check's outcome from the fork server's answer and what the check left in `scratch`. What its
    processes printed goes with it whatever its ending: a crash's last words too."""
    outcome = read_answer(answer, scratch, cases, seconds, traced)
    outcome.printed = printed_lines(answer)
    return outcome


def read_answer(
    answer: wire.WorkerAnswer, scratch: Path, cases: list[wire.CaseSpec], seconds: float, traced: bool
) -> Outcome:
    if answer.ending != "answered":
        return Outcome(answer.ending, seconds=seconds, error=answer.reason)
    reply = wire.read_reply(scratch, cases)
    if isinstance(reply, wire.BadReply):
        return Outcome("crashed", seconds=seconds, error=reply.reason)
    outputs = read_outputs(scratch, reply)
    if isinstance(outputs, str):
        return Outcome("crashed", reply, seconds=seconds, error=outputs)
    return Outcome("answered", reply, outputs, seconds, traced)


def printed_lines(answer: wire.WorkerAnswer) -> list[str]:
    """What the check's processes printed, as the fork server kept it, each line cleaned; then how much
    more there was."""
    lines = [wire.clean_text(line) for line in answer.printed.splitlines()]
    return lines + ([f"... {answer.printed_beyond} more bytes"] if answer.printed_beyond else [])


def read_outputs(scratch: Path, reply: wire.Reply, limit: int = MAX_OUTPUTS_BYTES) -> dict | str:
    """The tensors of a reply, or why they cannot be used. The file is what the learner's code left:
    never a link followed or a FIFO blocked on, its header checked (`outputs_file.outputs_index`) before any
    tensor is read, and at most `limit` bytes of it read. A case's output must be there, in a dtype
    NumPy has, within the limit; a recorded tensor that is not is left out (it only feeds the diagnosis)."""
    import numpy as np

    if not reply.outputs:
        return {}
    try:
        handle = wire.open_left(scratch / wire.OUTPUTS_FILE)
    except OSError:
        return "the check's process left no readable outputs file"
    with handle:
        index = outputs_file.outputs_index(handle)
        if isinstance(index, wire.BadReply):
            return index.reason
        tensors = index.tensors
        required = {wire.OUTPUT.format(case=case): case for case in reply.outputs}
        for key, case in required.items():
            if key not in tensors:
                return f"the check's process gave no output for {case}"
            if tensors[key].numpy_dtype is None:
                return f"the check's output for {case} is {tensors[key].dtype}, a dtype NumPy cannot read"
        needed = sum(tensors[key].nbytes for key in required)
        if needed > limit:
            return f"the check's outputs hold {needed / 2**20:.4g} MB, more than the {limit / 2**20:.4g} MB allowed"
        outputs, budget = {}, limit
        for key in [*required, *(key for key in tensors if key not in required)]:  # the cases' outputs first
            entry = tensors[key]
            if entry.numpy_dtype is None or entry.nbytes > budget:
                continue
            value = np.empty(entry.shape, entry.numpy_dtype)
            handle.seek(index.data_start + entry.data_offsets[0])
            if handle.readinto(value.reshape(-1).view(np.uint8)) != entry.nbytes:
                return "the check's outputs file ended early"
            outputs[key], budget = value, budget - entry.nbytes
    return outputs
