"""Every grading ends in a report, whatever a check's process left in its scratch directory.

The learner's code runs in that process, and so do the drivers that sum up what it did (the counts
of draws, the rows of beams, the bytes of a text): anything there is the learner's to forge. Each
reply below, written by hand, by a package through `grade`, or generated (hypothesis), is that
check's `error` or `fail` with one line, never a pass and never the end of the grading.
"""

from __future__ import annotations

import io
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import figure_evidence
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from repo import REPO, by_id, stubs, tiered, write_variant

from grader.checks import registry
from grader.checks.sampling import _compare as sampling_compare
from grader.checks.sampling._beams import UNREADABLE
from grader.checks.sampling.beam_generate import same_beams_any_order
from grader.checks.sampling.filter import filtered_beams
from grader.checks.sampling.search import same_beams_in_order
from grader.host.runner import MAX_OUTPUTS_BYTES, Outcome, read_outputs, rounds
from grader.host.runner.replies import outcome_of
from grader.shared import wire
from grader.shared.types import Tolerance

CASES = [wire.CaseSpec("a", 1, None, []), wire.CaseSpec("b", 1, None, [])]
MB = 2**20


def safetensors_bytes(tensors: dict[str, np.ndarray], header_extra: dict | None = None) -> bytes:
    """An outputs file as safetensors lays it out, written here so that it can also be forged."""
    codes = {"f2": "F16", "f4": "F32", "f8": "F64", "i1": "I8", "i2": "I16", "i4": "I32", "i8": "I64"}
    codes |= {"u1": "U8", "u2": "U16", "u4": "U32", "u8": "U64", "b1": "BOOL"}
    header, data = {}, b""
    for name, value in tensors.items():
        raw = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes()
        code = codes[f"{value.dtype.kind}{value.dtype.itemsize}"]
        header[name] = {"dtype": code, "shape": list(value.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    encoded = json.dumps(header | (header_extra or {})).encode()
    return struct.pack("<Q", len(encoded)) + encoded + data


def reply_bytes(**reply) -> bytes:
    return json.dumps(reply).encode()


# --- what stands where a file should be ----------------------------------------------------------


def leave_directory(path: Path) -> None:
    path.mkdir()


def leave_fifo(path: Path) -> None:
    os.mkfifo(path)  # with no writer: opening it without O_NONBLOCK would block the grader for good


def leave_socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))


def leave_link(path: Path) -> None:
    target = path.with_name("elsewhere")
    target.write_bytes(reply_bytes(status="ran", outputs=["a", "b"]))
    path.symlink_to(target)


NOT_FILES = {"a directory": leave_directory, "a FIFO": leave_fifo, "a socket": leave_socket, "a link": leave_link}


@pytest.mark.parametrize("leave", list(NOT_FILES.values()), ids=list(NOT_FILES))
def test_a_reply_that_is_no_file_is_a_one_line_reason(leave, tmp_path):
    leave(tmp_path / wire.REPLY_FILE)
    reply = wire.read_reply(tmp_path, CASES)
    assert isinstance(reply, wire.BadReply) and reply.reason == (
        "the check's process left something other than a file as reply.json"
    ), reply


@pytest.mark.parametrize("leave", list(NOT_FILES.values()), ids=list(NOT_FILES))
def test_outputs_that_are_no_file_are_a_one_line_reason(leave, tmp_path):
    leave(tmp_path / wire.OUTPUTS_FILE)
    assert read_outputs(tmp_path, wire.Reply("ran", outputs=["a", "b"])) == (
        "the check's process left no readable outputs file"
    )


def test_a_missing_reply_is_said_as_such(tmp_path):
    reply = wire.read_reply(tmp_path, CASES)
    assert isinstance(reply, wire.BadReply) and reply.reason == "the check's process ended without a reply"


# --- the outputs file's header, checked before any tensor is read -----------------------------------

GOOD = {"a/out": np.arange(6, dtype=np.float32).reshape(2, 3), "b/out": np.array(7, dtype=np.int64)}


def header_of(tensors: dict, **changes) -> dict:
    """The header safetensors_bytes writes for `tensors`, with some entries replaced."""
    raw = safetensors_bytes(tensors)
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length]) | changes


def forged(header: dict, data: bytes) -> bytes:
    encoded = json.dumps(header).encode()
    return struct.pack("<Q", len(encoded)) + encoded + data


GOOD_DATA = safetensors_bytes(GOOD)[-32:]  # the 24 bytes of a/out, then the 8 of b/out
MALFORMED = {
    "empty": (b"", "no readable header"),
    "a header longer than the file": (struct.pack("<Q", 10**6) + b"{}", "no readable header"),
    "a header larger than the bound": (struct.pack("<Q", wire.MAX_REPLY_BYTES + 1), "no readable header"),
    "a header that is not JSON": (struct.pack("<Q", 4) + b"\xff{[\x00", "not JSON"),
    "a header that is a list": (forged([], b""), "malformed (the whole"),  # type: ignore[arg-type]
    "an unknown dtype": (
        forged(header_of(GOOD, **{"a/out": {"dtype": "C64", "shape": [2, 3], "data_offsets": [0, 24]}}), GOOD_DATA),
        "malformed (a/out.dtype",
    ),
    "a negative dimension": (
        forged(header_of(GOOD, **{"a/out": {"dtype": "F32", "shape": [-2, -3], "data_offsets": [0, 24]}}), GOOD_DATA),
        "malformed (a/out.shape.0",
    ),
    "bytes beyond the file": (
        forged(header_of(GOOD, **{"a/out": {"dtype": "F32", "shape": [2, 300], "data_offsets": [0, 2400]}}), GOOD_DATA),
        "a/out: its bytes and shape disagree",
    ),
    "bytes that do not fit the shape": (
        forged(header_of(GOOD, **{"a/out": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 24]}}), GOOD_DATA),
        "a/out: its bytes and shape disagree",
    ),
    "reversed offsets": (
        forged(header_of(GOOD, **{"a/out": {"dtype": "F32", "shape": [0], "data_offsets": [24, 0]}}), GOOD_DATA),
        "a/out: its bytes and shape disagree",
    ),
    "two tensors on the same bytes": (
        forged(header_of(GOOD, **{"b/out": {"dtype": "I64", "shape": [], "data_offsets": [16, 24]}}), GOOD_DATA),
        "two tensors share bytes",
    ),
    "an output NumPy cannot read": (
        forged(header_of(GOOD, **{"b/out": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]}}), GOOD_DATA),
        "the check's output for b is BF16",
    ),
    "a case's output left out": (safetensors_bytes({"a/out": GOOD["a/out"]}), "gave no output for b"),
}


@pytest.mark.parametrize(("raw", "reason"), list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_outputs_file_is_a_one_line_reason(raw, reason, tmp_path):
    (tmp_path / wire.OUTPUTS_FILE).write_bytes(raw)
    outputs = read_outputs(tmp_path, wire.Reply("ran", outputs=["a", "b"]))
    assert isinstance(outputs, str) and reason in outputs and "\n" not in outputs, outputs


def test_a_well_formed_outputs_file_is_read_exactly(tmp_path):
    """The control of the malformed ones: the same reading gives back every tensor, in its dtype."""
    capture = {"a/capture/0": np.array([[True, False]]), "a/capture/1": np.zeros((0, 3), np.float16)}
    (tmp_path / wire.OUTPUTS_FILE).write_bytes(safetensors_bytes(GOOD | capture, {"__metadata__": {"x": "y"}}))
    outputs = read_outputs(tmp_path, wire.Reply("ran", outputs=["a", "b"]))
    assert isinstance(outputs, dict) and set(outputs) == set(GOOD) | set(capture)
    for name, value in (GOOD | capture).items():
        assert outputs[name].dtype == value.dtype and np.array_equal(outputs[name], value), name


def test_outputs_over_the_limit_are_refused_and_recordings_over_it_left_out(tmp_path):
    capture = {"a/capture/0": np.ones(1000, np.float64)}
    (tmp_path / wire.OUTPUTS_FILE).write_bytes(safetensors_bytes(GOOD | capture))
    reply = wire.Reply("ran", outputs=["a", "b"])
    assert (
        read_outputs(tmp_path, reply, limit=31)
        == "the check's outputs hold 3.052e-05 MB, more than the 2.956e-05 MB allowed"
    )
    assert set(read_outputs(tmp_path, reply, limit=32 + 8000)) == set(GOOD) | set(capture)
    assert set(read_outputs(tmp_path, reply, limit=32 + 7999)) == set(GOOD)  # the recording only feeds the diagnosis


HOLE_READER = """
import sys
from pathlib import Path
from grader.shared import wire
from grader.host.runner import read_outputs
outputs = read_outputs(Path(sys.argv[1]), wire.Reply("error", outputs=["a"]), limit=int(sys.argv[2]))
print(outputs if isinstance(outputs, str) else "read")
# VmHWM, this process's own peak: ru_maxrss would also hold the parent's, whose memory a vfork borrows
print(next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def peak_reading(scratch: Path, limit: int) -> tuple[str, int]:
    """What a fresh grader process makes of the scratch's outputs file, and its peak memory in bytes."""
    done = subprocess.run(
        [sys.executable, "-c", HOLE_READER, str(scratch), str(limit)], capture_output=True, text=True, cwd=REPO
    )
    said, peak = done.stdout.splitlines()
    return said, int(peak)


@pytest.mark.slow  # its control reads the 1.2 GB hole into memory (about 7 s)
def test_a_sparse_outputs_file_costs_the_grader_nothing(tmp_path):
    """1.2 GB of hole: the check wrote 100 bytes, and the header alone says it holds too much."""
    size = 1200 * MB
    header = {"a/out": {"dtype": "F32", "shape": [size // 4], "data_offsets": [0, size]}}
    with open(tmp_path / wire.OUTPUTS_FILE, "wb") as file:
        file.write(forged(header, b""))
        file.truncate(file.tell() + size)
    said, peak = peak_reading(tmp_path, MAX_OUTPUTS_BYTES)
    assert said == "the check's outputs hold 1200 MB, more than the 256 MB allowed"
    assert peak < 200 * MB, peak / MB
    # The control: allowed more, the same reading would hold the hole's 1.2 GB in the grader's memory.
    said, peak = peak_reading(tmp_path, 2 * size)
    assert said == "read" and peak > size, peak / MB


# --- the comparers, total over what the drivers can be made to send -------------------------------

PROBABILITIES = np.array([0.5, 0.25, 0.25, 0.0])


@pytest.mark.parametrize(
    ("counts", "reason"),
    [
        (np.full(4, np.nan), "not whole numbers"),
        (np.zeros(4), "add up to 0 draws, not 2000 (or 4000 over two rounds)"),
        (np.array([2000.0, 1000.0, 1000.0, -0.0]) * 2, "add up to 8000 draws"),
        (np.array([2000.5, 999.5, 1000.0, 0.0]), "not whole numbers"),
        (np.array([4000.0, 1000.0, 1000.0, -2000.0]), "not whole numbers"),
        (np.array([np.inf, 0.0, 0.0, 0.0]), "not whole numbers"),
    ],
    ids=["NaN", "all zero", "twice both rounds", "fractions", "negative", "inf"],
)
def test_counts_must_be_the_counts_of_the_draws(counts, reason):
    comparison = sampling_compare.frequencies(counts, PROBABILITIES, Tolerance())
    assert not comparison.ok and reason in comparison.message, comparison.message


@pytest.mark.parametrize(
    ("counts", "again"),
    [
        (PROBABILITIES * sampling_compare.DRAWS, False),  # settled: exactly the distribution
        (np.array([0.6, 0.2, 0.2, 0.0]) * sampling_compare.DRAWS, True),  # 0.1 off: a second round
        (np.array([0.5, 0.25, 0.2, 0.05]) * sampling_compare.DRAWS, False),  # a token of probability 0: it fails now
        (PROBABILITIES * 2 * sampling_compare.DRAWS, False),  # not one round's counts: judged as they are
        (np.full(4, np.nan), False),
        (np.array([1000, 500, 500, 0], np.int64), False),
        (np.array([True, False, False, False]), False),
        (np.array([1000, 500, 500, 0], np.complex64), False),
        (np.array(2000.0), False),
        (np.array([1e308, -1e308, np.inf, 0.0]), False),
    ],
    ids=["settled", "undecided", "impossible token", "two rounds", "NaN", "int64", "bool", "complex", "0-d", "huge"],
)
def test_only_valid_undecided_counts_are_drawn_again(counts, again):
    assert sampling_compare.draws_again(counts, PROBABILITIES) is again


def test_without_that_check_nan_or_zero_counts_pass(monkeypatch):
    """The control: NaN or zero counts deviate from no probability by more than eps."""
    assert sampling_compare.frequencies(PROBABILITIES * sampling_compare.DRAWS, PROBABILITIES, Tolerance()).ok
    monkeypatch.setattr(sampling_compare, "counts_problem", lambda counts: None)
    with np.errstate(invalid="ignore", divide="ignore"):
        assert sampling_compare.frequencies(np.full(4, np.nan), PROBABILITIES, Tolerance()).ok
        assert sampling_compare.frequencies(np.zeros(4), PROBABILITIES, Tolerance()).ok


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (np.frombuffer(b"the cat \xff\xfe", np.uint8), "the text is 'the cat \ufffd\ufffd', expected 'the cat'"),
        (np.array([1.5, -3.0]), "the text came back as float64 values of shape (2,), not bytes"),
        (np.frombuffer(b"a" * 5000, np.uint8), "the text is '" + "a" * 200 + "'\u2026, expected 'the cat'"),
    ],
    ids=["not UTF-8", "not bytes", "very long"],
)
def test_any_text_is_compared_and_quoted_in_one_line(text, shown):
    comparison = sampling_compare.same_text(text, np.frombuffer(b"the cat\0\0", np.uint8), Tolerance())
    assert not comparison.ok and comparison.message == shown


ROWS = np.array([[0, -0.5, 0, 1], [0, -1.0, 0, 2]])  # two beams: "ab", "ac"


@pytest.mark.parametrize(
    ("rows", "shown"),
    [
        (np.array([[0, -0.5, 0, 4], [0, -1.0, 0, 2]]), "'a<4>' (-0.500)"),
        (np.array([[np.nan, -0.5, 0, 1], [0, -1.0, 0, 2]]), UNREADABLE),
        (np.array([[0, -0.5, 0, 1.5]]), UNREADABLE),
        (np.array([1.0]), UNREADABLE),
        (np.zeros((3, 2, 2)), UNREADABLE),
        (np.zeros((1000, 4)), "the beams hold 4000 values, where 8 are expected"),
        (np.zeros((20, 4)), "'aa' (0.000), 12 more"),
    ],
    ids=["a token outside the vocabulary", "a NaN group", "a fraction of a token", "one value", "3-D", "huge", "many"],
)
def test_any_beams_are_compared_and_shown_in_one_line(rows, shown):
    for compare in (same_beams_any_order, same_beams_in_order, filtered_beams):
        comparison = compare(rows, ROWS, Tolerance())
        assert not comparison.ok and shown in comparison.message and "\n" not in comparison.message, (
            compare.__name__,
            comparison.message,
        )


def test_beams_with_minus_inf_are_still_compared():
    comparison = same_beams_any_order(np.array([[0, -np.inf, 0, 1], [0, -1.0, 0, 2]]), ROWS, Tolerance())
    assert not comparison.ok and "'ab' (-inf)" in comparison.message
    assert same_beams_any_order(ROWS[::-1], ROWS, Tolerance()).ok


def test_nan_logits_of_the_cached_model_name_the_first_position():
    from grader.checks.sampling.kv_cache import cached_model_output

    expected = np.zeros((1, 3, 4), np.float32)
    actual = expected.copy()
    actual[0, 1, 2] = np.nan
    comparison = cached_model_output(actual, expected, Tolerance())
    assert not comparison.ok and comparison.message.startswith("the logits first differ at position 1"), comparison


# --- through `grade`: the report is written, and the other checks are graded as usual ---------------

# Appended to the stubs' sampling.py: what a package can make the grader's drivers, which run in its
# process, send back. The draw driver's counts are reached from the sampling method it calls.
FORGED_COUNTS = """
import sys as _sys

def _forged_draw(*args, **kwargs):
    counts = _sys._getframe(1).f_locals["counts"]
    counts[:] = [{value}] * len(counts)
    counts[0] -= 1  # the driver counts the token returned: 0
    return 0

for _method in ("sample_basic", "sample_top_k", "sample_top_p"):
    setattr(TransformerSampler, _method, staticmethod(_forged_draw))
"""
FORGED_TEXT_AND_BEAMS = """
import grader.learner.drivers.sampling as _drivers

_drivers.greedy_text = lambda ctx, sampler: torch.tensor([255, 254], dtype=torch.uint8)
_drivers.beams_of = lambda *beams: torch.tensor([[float("nan"), 0.0, 1.0]], dtype=torch.float64)
Beams.generate = lambda self, k, no_repeat_ngram_size=None: self
Beams.filter = lambda self, k: (self, self)
"""
DISTRIBUTION_CHECKS = ("sampling.basic", "sampling.top_k", "sampling.top_p")


def stubs_with(tmp_path: Path, code: str) -> Path:
    package = write_variant(tmp_path, {}, stubs())
    with open(package / "sampling.py", "a") as file:
        file.write(code)
    return package


@pytest.mark.parametrize("value", tiered(["float('nan')", "0"], ("NaN",), ids=["NaN", "zero"]))
def test_forged_counts_make_no_stub_pass(value, grade, tmp_path):
    results = by_id(grade(stubs_with(tmp_path, FORGED_COUNTS.format(value=value)), "sampling"))
    for check in DISTRIBUTION_CHECKS:
        assert results[check].status == "fail" and "counts" in results[check].message, results[check]
    assert results["sampling.greedy"].status == "todo"


def test_forged_text_and_beams_are_failures_of_their_checks(grade, tmp_path):
    results = by_id(grade(stubs_with(tmp_path, FORGED_TEXT_AND_BEAMS), "sampling.generate", "beam", "sampling.greedy"))
    assert results["sampling.generate"].status == "fail"
    assert "the text is '\ufffd\ufffd'" in results["sampling.generate"].message, results["sampling.generate"]
    for check in ("beam.generate", "beam.filter"):
        assert results[check].status == "fail" and UNREADABLE in results[check].message, results[check]
    assert results["sampling.greedy"].status == "todo"


def test_a_beam_token_outside_the_vocabulary_is_a_failure(grade, tmp_path):
    """An honest off-by-one: each new token one past the one chosen, end-of-text's past the vocabulary."""
    package = write_variant(
        tmp_path, {"sampling.py": [("top_tokens[..., None]], dim=-1", "top_tokens[..., None] + 1], dim=-1")]}
    )
    results = by_id(grade(package, "sampling.greedy", "beam"))
    generate = results["beam.generate"]
    assert generate.status == "fail" and "\n" not in generate.message, generate
    assert results["sampling.greedy"].status == results["beam.filter"].status == "pass"


SCRATCH = "__import__('os').environ['TMPDIR']"
LEFT_BEHIND = {  # statement at the start of Attention.forward: what it leaves, then the process ends
    "a directory as the reply": f"import os; os.mkdir({SCRATCH} + '/reply.json'); os._exit(0)",
    "a FIFO as the reply": f"import os; os.mkfifo({SCRATCH} + '/reply.json'); os._exit(0)",
    "outputs with a 1.2 GB hole": "from .forge import hole; hole('blocks.0.prompt')",
}
HOLE = """
import json, os, struct

def hole(case):
    scratch, size = os.environ["TMPDIR"], 1200 * 2**20
    header = json.dumps({case + "/out": {"dtype": "F32", "shape": [size // 4], "data_offsets": [0, size]}}).encode()
    with open(os.path.join(scratch, "outputs.safetensors"), "wb") as file:
        file.write(struct.pack("<Q", len(header)) + header)
        file.truncate(file.tell() + size)
    reply = {"status": "error", "error": "forged", "outputs": [case]}
    with open(os.path.join(scratch, "reply.json"), "w") as file:
        json.dump(reply, file)
    os._exit(0)
"""


@pytest.mark.parametrize(
    "statement", tiered(LEFT_BEHIND.values(), ("a FIFO as the reply", "outputs with a 1.2 GB hole"), ids=LEFT_BEHIND)
)
def test_what_a_check_leaves_is_its_error_and_grading_goes_on(statement, grade, reference, tmp_path):
    from test_hostile import attention_body_prefix

    assert [case.name for case in reference.cases("attention")][0] == "blocks.0.prompt"
    package = write_variant(tmp_path, {"attention.py": attention_body_prefix(statement), "forge.py": [("", HOLE)]})
    results = by_id(grade(package, "embed", "attention", "mlp", timeout=20))
    attention = results["attention"]
    assert attention.status == "error" and "\n" not in attention.message and attention.score == 0, attention
    assert results["embed"].status == results["mlp"].status == "pass"


# --- any reply at all: hypothesis, at the grader's boundary, for every check ------------------------

STATUSES = ["ran", "todo", "error", "weights", "forbidden", "pass", "", "crashed"]
ANY_TEXT = st.text(max_size=30)  # lone surrogates and control characters among them
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=12,
)
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.uint64, np.bool_]
# The limit on what the grader reads, the expected file of the check, and the arrays being compared:
# anything beyond is a leak.
MEMORY_SLACK = 64 * MB


def places() -> st.SearchStrategy:
    return st.none() | st.fixed_dictionaries(
        {"file": ANY_TEXT, "line": st.none() | st.integers()}, optional={"code": ANY_TEXT, "function": ANY_TEXT}
    )


def records(cases: list[str]) -> st.SearchStrategy:
    record = st.fixed_dictionaries(
        {
            "kind": st.sampled_from(["locals", "returns", "modules"]),
            "tag": ANY_TEXT,
            "name": st.sampled_from(["attn_pattern", "output", "x", "std"]) | ANY_TEXT,
            "shape": st.lists(st.integers(-2, 10**6), max_size=4),
            "saved": st.none() | st.integers(-1, 3),
        },
        optional={"file": ANY_TEXT, "line": st.none() | st.integers()},
    )
    return st.dictionaries(st.sampled_from(cases) | ANY_TEXT, st.lists(record, max_size=3), max_size=2)


def structured_replies(cases: list[str]) -> st.SearchStrategy:
    """Replies shaped as the wire's, with any values: statuses, case lists, places, captures, facts."""
    return st.fixed_dictionaries(
        {
            "status": st.sampled_from(STATUSES),
            "outputs": st.integers(0, len(cases)).map(lambda n: cases[:n]) | st.lists(ANY_TEXT, max_size=3),
        },
        optional={
            "error": ANY_TEXT,
            "where": places(),
            "target_where": places(),
            "weights": st.none()
            | st.fixed_dictionaries(
                {
                    "missing": st.lists(ANY_TEXT, max_size=2),
                    "unexpected": st.lists(ANY_TEXT, max_size=2),
                    "misshapen": st.dictionaries(ANY_TEXT, st.just([[1, 2], [3]]), max_size=2),
                    "suggestions": st.dictionaries(ANY_TEXT, st.lists(ANY_TEXT, max_size=2), max_size=2),
                }
            ),
            "bad_output": st.none() | st.fixed_dictionaries({"case": ANY_TEXT, "problem": ANY_TEXT}),
            "param_counts": st.dictionaries(ANY_TEXT, st.integers(), max_size=3),
            "captures": records(cases),
            "parameters": st.lists(
                st.fixed_dictionaries(
                    {"tag": ANY_TEXT, "name": ANY_TEXT, "shape": st.lists(st.integers(), max_size=3)}
                ),
                max_size=2,
            ),
            "param_count": st.just({}),  # a key the wire format does not have: the whole reply is refused
        },
    )


def replies(cases: list[str]) -> st.SearchStrategy:
    return (
        structured_replies(cases).map(lambda reply: json.dumps(reply).encode())
        | JSON.map(lambda value: json.dumps(value).encode())
        | st.binary(max_size=40)
    )


def arrays(expected: np.ndarray | None) -> st.SearchStrategy:
    """Any dtype and values (NaN, inf, huge, empty), in the expected shape, another, or the expected
    array itself with some values changed (so that comparisons and diagnoses get past the shapes)."""
    shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)
    if expected is not None:
        shapes = st.just(expected.shape) | shapes
    anything = st.tuples(st.sampled_from(DTYPES), shapes).flatmap(lambda spec: hnp.arrays(*spec))
    if expected is None or not expected.size:
        return anything
    changed = st.tuples(
        st.integers(0, expected.size - 1), st.sampled_from([np.nan, np.inf, -np.inf, 1e30, 0.0, 1.0, -1.0])
    ).map(lambda change: with_value(expected, *change))
    return anything | changed | st.just(expected)


def with_value(array: np.ndarray, index: int, value: float) -> np.ndarray:
    changed = array.astype(array.dtype if array.dtype.kind == "f" else np.float64)  # an id or a count set to NaN
    changed.reshape(-1)[index] = value
    return changed


def outputs_files(cases: list[str], expected: dict) -> st.SearchStrategy:
    """Bytes of an outputs file: a well-formed one holding any tensors under the names the wire uses,
    or any bytes; None for none."""
    names = [wire.OUTPUT.format(case=case) for case in cases]
    names += [wire.CAPTURE.format(case=case, i=i) for case in cases for i in range(2)]
    names += [wire.ARG_AFTER.format(case=case, i=0) for case in cases]

    def tensors(chosen: list[str]) -> st.SearchStrategy:
        return st.fixed_dictionaries({name: arrays(expected.get(name.split("/")[0])) for name in chosen})

    well_formed = st.lists(st.sampled_from(names), unique=True, max_size=6).flatmap(tensors).map(safetensors_bytes)
    return st.none() | well_formed | st.binary(max_size=64)


def every_format(report, directory: Path, draw: bool) -> None:
    """The report rendered in every format of grader.host.platforms.RENDERERS, as `grade` would; the HTML
    page's figures drawn only with `draw` (matplotlib takes seconds over a check's attention patterns)."""
    import importlib
    from dataclasses import replace

    from rich.console import Console

    from grader.host.platforms import RENDERERS
    from grader.host.platforms.classroom50 import writer as classroom50
    from grader.host.platforms.github import writer as github
    from grader.host.render import html, text

    shown_below = {"text", "html", "classroom50", "github"}  # each needs more than the report
    for renderer in (renderer for renderer in RENDERERS if renderer.name not in shown_below):
        assert renderer.options[0].value == "FILE", f"{renderer.name}: show it here as grade would"
        assert importlib.import_module(renderer.module).render(report)  # a file format: a new one is rendered too
    text.print_report(report, Console(file=io.StringIO(), width=100))
    checks = report.checks if draw else [replace(check, figures={}) for check in report.checks]
    assert html.render(replace(report, checks=checks))
    environ = {"GITHUB_STEP_SUMMARY": str(directory / "summary"), "GITHUB_OUTPUT": str(directory / "output")}
    assert github.publish(report, environ, io.StringIO(), "token") == []
    runner = {name: "x" for name in (*classroom50.RUNNER_VARIABLES, "OWNER")}
    assert classroom50.publish(report, {**environ, **runner}, directory) == []


class Judged:
    """One check's side of the reference, read once for all its examples."""

    def __init__(self, check, reference):
        self.check, self.reference = check, reference
        self.specs = reference.cases(check.id)
        self.cases = [case.name for case in self.specs]
        self.expected = reference.expected(check.id)
        self.expected_bytes = sum(value.nbytes for value in self.expected.values())

    def outcome(self, scratch: Path, answer: wire.WorkerAnswer) -> Outcome:
        """What the lane makes of the scratch directory, by the same function."""
        return outcome_of(answer, scratch, self.specs, 0.5, traced=True)

    def equals_expected(self, outcome: Outcome) -> bool:
        """Whether every case's output is the expected one, value for value: the only reply that may pass."""
        names = outcome.reply.outputs
        return names == self.cases and all(
            np.array_equal(outcome.outputs[wire.OUTPUT.format(case=name)], self.expected[name]) for name in names
        )


JUDGED: dict[str, Judged] = {}
# The trainer's check passes any held-out loss below the bar its process reports (see grader.checks.training.trainer).
PASSES_ON_ITS_OWN_NUMBERS = {"training.trainer": lambda out, expected: out[0] < expected[0]}


EXAMPLES = settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)


# The logit lens's replies take seconds to judge (every layer's logits); its generated replies run in `make test-all`.
@pytest.mark.parametrize(
    "check",
    tiered(registry(), [c.id for c in registry() if c.id != "interp.logit_lens"], ids=[c.id for c in registry()]),
)
@settings(EXAMPLES, max_examples=6)
@given(data=st.data())
def test_every_reply_ends_in_a_report(check, data, reference):
    any_reply_ends_in_a_report(check, data, reference, draw=False)


@pytest.mark.slow
@pytest.mark.parametrize("check", registry(), ids=lambda check: check.id)
@settings(EXAMPLES, max_examples=40)
@given(data=st.data())
def test_every_reply_ends_in_a_report_figures_drawn(check, data, reference):
    any_reply_ends_in_a_report(check, data, reference, draw=True)


def any_reply_ends_in_a_report(check, data, reference, draw: bool) -> None:
    """No exception escapes; the report renders in every format; only the expected outputs pass;
    the grader's memory stays within what it may read, the check's expected outputs and some slack."""
    from grader.host.dependencies import with_failing_parts
    from grader.host.results import Report
    from grader.host.verdict import Evidence, judge

    judged = JUDGED.get(check.id) or JUDGED.setdefault(check.id, Judged(check, reference))
    raw_reply = data.draw(replies(judged.cases), "reply")
    raw_outputs = data.draw(outputs_files(judged.cases, judged.expected), "outputs")
    with tempfile.TemporaryDirectory() as directory:
        scratch = Path(directory) / "scratch"
        scratch.mkdir()
        (scratch / wire.REPLY_FILE).write_bytes(raw_reply)
        if raw_outputs is not None:
            (scratch / wire.OUTPUTS_FILE).write_bytes(raw_outputs)
        tracemalloc.start()  # while the grader reads and judges what the check left
        try:
            outcome = in_rounds(check, judged.outcome(scratch, wire.WorkerAnswer("answered")), reference)
            result = judge(Evidence(check, outcome, reference))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        report = Report(reference.kind, "pkg", with_failing_parts([result]), sandbox="sandbox: on")
        every_format(report, Path(directory), draw)
    assert result.status in ("fail", "error", "todo", "pass"), result
    assert "\n" not in result.message
    if result.status == "pass":
        passes = PASSES_ON_ITS_OWN_NUMBERS.get(check.id)
        case = judged.cases[0]
        assert judged.equals_expected(outcome) or (
            passes and passes(outcome.outputs[wire.OUTPUT.format(case=case)], judged.expected[case])
        ), (raw_reply, outcome.outputs)
    assert peak < MAX_OUTPUTS_BYTES + 4 * judged.expected_bytes + MEMORY_SLACK, peak / MB


def in_rounds(check, outcome: Outcome, reference) -> Outcome:
    """The outcome as a lane makes it of a check that draws again (Run.draws_again): the same reply taken as the
    second round of every case the first leaves undecided."""
    again = rounds.undecided(check, outcome, reference.cases(check.id), reference)
    return rounds.summed(outcome, outcome, again) if again else outcome


# --- the HTML report's figures, on any learner output -------------------------------------------------------------

# Each figure's hand-built evidence (tests/support/figure_evidence.py) with the learner's output or captured tensor
# replaced: the figure data extraction and its drawing never raise, whatever that tensor holds.
FIGURE_EVIDENCE = {
    "attention": lambda value: figure_evidence.attention_evidence(value),
    "predictions": lambda value: figure_evidence.predictions_evidence(value),
    "head_scores": lambda value: figure_evidence.scores_evidence(value),
    "token_loss": lambda value: figure_evidence.token_loss_evidence(value),
    "ablation": lambda value: figure_evidence.ablation_evidence(value),
}
FIGURE_EXPECTED = {
    "attention": figure_evidence.GPT2_PATTERN,
    "predictions": figure_evidence.REFERENCE_LOGITS,
    "head_scores": figure_evidence.INDUCTION_SCORES,
    "token_loss": figure_evidence.repeated_losses(),
    "ablation": figure_evidence.ABLATION_COSTS["small.blocks.0.head1.zero"],
}


@pytest.mark.parametrize("figure", list(FIGURE_EVIDENCE))
@settings(EXAMPLES, max_examples=12)
@given(data=st.data())
def test_every_figure_of_any_output_is_drawn_or_left_out(figure, data):
    from grader.host import figures
    from grader.host.render import html
    from grader.host.results import CheckResult

    value = data.draw(arrays(FIGURE_EXPECTED[figure]), "the learner's tensor")
    drawn = figures.all_figures(FIGURE_EVIDENCE[figure](value))
    assert figure in drawn  # the reference's side is always drawn; the learner's where it can be
    result = CheckResult("toy", "model", "a toy", "fail", 1, figures=drawn)
    page = html.check_figures(result, "GPT-2")
    assert page.startswith("<section>") and "model shown:" in page
