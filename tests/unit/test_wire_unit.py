"""The wire format typed on both ends: what the learner's side builds is what the grader reads back, and a key
the format does not have makes the message invalid (that check's error, in one line), never a field lost."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader.learner.cases import CaseContext, failure_reply
from grader.learner.package import source_place
from grader.learner.recorder import Recorder, parameter_shapes
from grader.shared import outputs_file, wire

pytestmark = pytest.mark.unit

CASES = [wire.CaseSpec("a", 1, None, []), wire.CaseSpec("b", 1, None, [])]
UNKNOWN = "a field the wire format does not have"


class MetaTensor:
    """What the recorder reads of a tensor: its shape, and a device whose values it does not keep."""

    def __init__(self, *shape: int):
        self.shape, self.device = shape, SimpleNamespace(type="meta")


def honest_reply() -> dict:
    return json.loads(wire.Reply("ran", outputs=["a", "b"]).to_json())


@pytest.mark.parametrize(
    ("misspelled", "where"),
    [
        (lambda reply: reply.update(param_count=reply.pop("param_counts")), "param_count"),
        (lambda reply: reply.update(where={"file": "attention.py", "lin": 3}), "where.lin"),
        (lambda reply: reply.update(captures={"a": [record_with(sved=0)]}), "captures.a.0.sved"),
        (lambda reply: reply.update(bad_output={"case": "a", "problem": "x", "why": "y"}), "bad_output.why"),
    ],
    ids=["top level", "a place", "a record", "a bad output"],
)
def test_a_key_the_format_does_not_have_makes_the_reply_that_checks_error(misspelled, where):
    reply = honest_reply()
    misspelled(reply)
    parsed = wire.parse_reply(json.dumps(reply).encode(), CASES)
    assert parsed == wire.BadReply(f"the check's reply is malformed ({where}: {UNKNOWN})")


def record_with(**fields) -> dict:
    return {"kind": "locals", "tag": "attn", "name": "q", "shape": [1, 2], "saved": None} | fields


def test_the_fork_servers_answer_and_the_request_refuse_unknown_keys_too():
    answer = json.loads(wire.WorkerAnswer("crashed", "killed").to_json()) | {"printd": ""}
    with pytest.raises(ValueError, match="printd"):
        wire.WORKER_ANSWER.validate_json(json.dumps(answer))
    target = wire.TargetSpec("attention", "Attention", "forward", None)
    request = json.loads(wire.Request("pkg", "attention", target, CASES, "w", "i", "s", 1.0, 0).to_json())
    request["target"]["fast_inti"] = False
    with pytest.raises(ValueError, match="fast_inti"):
        wire.parse_request(json.dumps(request))


def test_an_outputs_header_with_an_unknown_key_is_refused(tmp_path):
    header = json.dumps({"a/out": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "strides": [1]}}).encode()
    (tmp_path / wire.OUTPUTS_FILE).write_bytes(len(header).to_bytes(8, "little") + header + bytes(4))
    with wire.open_left(tmp_path / wire.OUTPUTS_FILE) as handle:
        index = outputs_file.outputs_index(handle)
    assert index == wire.BadReply(f"the check's outputs file is malformed (a/out.strides: {UNKNOWN})")


def learner_function(x):
    return x


def test_a_reply_the_learner_side_builds_is_the_reply_the_grader_reads(tmp_path):
    """Built by the learner's own helpers (a raised error's place, a recorder's records, a function's source),
    written as the check's process writes it, read as the grader reads it: equal, and no serialiser warning."""
    recorder = Recorder(tmp_path, ["locals", "modules"], [], None, "blocks.0", "TransformerBlock")
    recorder.record("locals", "blocks.0.attn", "scores", MetaTensor(1, 12, 7, 7), ("attention.py", 41))
    recorder.record("modules", "blocks.0.ln1", "output", MetaTensor(1, 7, 768))
    root = SimpleNamespace(named_parameters=lambda: [("ln1.w", MetaTensor(768)), ("b_O", MetaTensor(768))])
    so_far = wire.Reply(
        "ran",
        outputs=["a"],
        target_where=source_place(learner_function),
        weights=wire.WeightFacts([], ["unembed.b_U"], {}, {}),
        param_counts={"blocks": 85054464, "total": 85054464},
        captures={"a": recorder.records},
        parameters=parameter_shapes(root, recorder),
        stand_in="fails its own check",
    )
    package = Path(__file__).parent
    try:
        raise ValueError("shapes (1, 7) and (7, 1) do not match")
    except ValueError as error:
        reply = failure_reply(error, package, so_far=so_far)
    assert reply.where is not None and reply.where.file == Path(__file__).name
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a field of the wrong type warns as pydantic serialises it
        raw = reply.to_json()
    assert wire.parse_reply(raw.encode(), CASES) == reply
    assert (reply.status, reply.outputs, reply.error) == (
        "error",
        ["a"],
        "ValueError: shapes (1, 7) and (7, 1) do not match",
    )


def test_a_lone_surrogate_in_the_learners_message_is_written_and_read_cleaned():
    raw = wire.Reply("error", error="bad \ud800 text").to_json()
    parsed = wire.parse_reply(raw.encode(), CASES)
    assert isinstance(parsed, wire.Reply) and parsed.error == "bad \ufffd text"


def test_a_driver_cannot_set_a_field_the_reply_does_not_have():
    ctx = CaseContext(None, wire.TargetSpec("attention", "Attention", "forward", None), None, None)
    ctx.update_reply(param_counts={"total": 1})
    with pytest.raises(TypeError, match="param_count"):
        ctx.update_reply(param_count={"total": 1})
    assert ctx.reply.param_counts == {"total": 1}
