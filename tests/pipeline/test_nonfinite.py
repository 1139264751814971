"""A report, always: outputs of NaN, of inf, or of no values at all fail their check with a message that says so, and
the report is complete in every output format.

For every registered check, the learner's process's reply is replaced by outputs of the reference's shapes filled with
NaN (or +inf, or empty ones), each recorded step of the case too, then judged, diagnosed and rendered by the real
verdict, diagnosis and renderers. Two packages written wrong, each the solutions with one edit, are graded end to end:
a mask that hides the diagonal (a row of every attention pattern has no key left: NaN) and a KV cache whose mask
offset is one short (the same, in the cached model)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from repo import by_id, run_grade, tiered, write_variant
from test_diagnosis_everywhere import FORMATS, alone
from test_mistakes import FUTURE
from test_render_formats import schema
from test_reply_totality import every_format

from grader.checks import registry
from grader.checks.sampling.kv_cache import ONE_SHORT
from grader.host.dependencies import with_failing_parts
from grader.host.render import json as json_render
from grader.host.results import Report
from grader.host.runner import Outcome
from grader.host.verdict import Evidence, judge
from grader.shared import wire

FILLS = {"NaN": np.nan, "inf": np.inf, "empty": None}
ORIGIN = {"NaN": "a NaN", "inf": "an inf"}  # what the where adds: the first of the learner's tensors to hold one
SAID = {"NaN": "the first a NaN at index", "inf": "the first an inf at index", "empty": "output shape (0"}
# The checks whose outputs are not values compared with the reference's: what their messages say instead. The drivers
# that count draws, pick beams or decode a text run in the learner's process: NaN reaches the grader as what they make.
NOT_VALUES = {
    "sampling.greedy": "not one token id",
    "sampling.basic": "counts",
    "sampling.top_k": "counts",
    "sampling.top_p": "counts",
    "sampling.generate": "the text came back as",
    "beam.generate": "the beams",
    "beam.filter": "the beams",
    "beam.search": "the beams",
}
CHECKS = {check.id: check for check in registry()}


def filled(expected: np.ndarray, fill: str) -> np.ndarray:
    """An output of the expected shape, every value `fill` (as float64 where the reference's is not float), or an
    empty one of as many axes."""
    if FILLS[fill] is None:
        return np.zeros((0,) * max(expected.ndim, 1), np.float32)
    return np.full(expected.shape, FILLS[fill], expected.dtype if expected.dtype.kind == "f" else np.float64)


def nonfinite_outcome(check, reference, fill: str) -> Outcome:
    """What a learner's process whose every output, and every step it names, holds `fill` would send back: each
    case ran, each step recorded under its own label at a line of the check's file."""
    expected, outputs, captures = reference.expected(check.id), {}, {}
    for case in reference.cases(check.id):
        outputs[wire.OUTPUT.format(case=case.name)] = filled(expected[case.name], fill)
        records = []
        for i, label in enumerate(case.steps):
            value = filled(expected[wire.STEP.format(case=case.name, label=label)], fill)
            outputs[wire.CAPTURE.format(case=case.name, i=i)] = value
            records.append(wire.Record("locals", "", label, list(value.shape), i, f"{check.target.file}.py", 10 + i))
        captures[case.name] = records
    reply = wire.Reply("ran", outputs=list(captures), captures=captures)
    return Outcome("answered", reply, outputs, seconds=0.1, traced=True)


JUDGED: dict[tuple[str, str], object] = {}


def judged(check_id: str, fill: str, reference):
    """The check's result on outputs of `fill`, judged once per session."""
    key = (check_id, fill)
    if key not in JUDGED:
        check = CHECKS[check_id]
        JUDGED[key] = judge(Evidence(check, nonfinite_outcome(check, reference, fill), reference))
    return JUDGED[key]


@pytest.mark.parametrize("fill", list(FILLS))
@pytest.mark.parametrize("check_id", CHECKS)
def test_every_check_fails_and_says_so_in_every_format(check_id, fill, reference):
    """The check fails with one line that says what its output holds (its first NaN or inf and where); a check with
    steps adds, to its where, the first of them to hold one; each format shows the message, the JSON valid."""
    result = judged(check_id, fill, reference)
    assert result.status == "fail", (result.status, result.message)
    assert result.message and "\n" not in result.message, result.message
    assert NOT_VALUES.get(check_id, SAID[fill]) in result.message, result.message
    firsts = {case.steps[0] for case in reference.cases(check_id) if case.steps}  # each recorded at its own line
    if firsts and fill != "empty":
        origins = [f"{ORIGIN[fill]} first appears in your {label}" for label in firsts]
        assert any(result.divergence.endswith(origin) for origin in origins), result.divergence
    shown = alone(result)
    first_line = result.message.splitlines()[0]
    for form, show in FORMATS.items():
        assert first_line in show(shown), form
    data = json.loads(json_render.render(shown))
    jsonschema.validate(data, schema("report.schema.json"))
    (written,) = data["checks"]
    assert written["status"] == "fail" and written["message"] == result.message


@pytest.mark.parametrize("fill", list(FILLS))
def test_the_whole_run_renders_in_every_format(fill, reference, tmp_path):
    """Every check at once, each naming its failing parts, rendered and published as `grade` does a run (GitHub's
    summary and annotations, Classroom 50's files): every format written, nothing raised."""
    results = [judged(check_id, fill, reference) for check_id in CHECKS]
    report = Report(reference.kind, "pkg", with_failing_parts(results), sandbox="sandbox: on")
    every_format(report, tmp_path, draw=False)
    assert {check.status for check in report.checks} == {"fail"}


# --- two packages written wrong whose logits are NaN, graded end to end ---------------------------------------------

DIAGONAL_HIDDEN = {"attention.py": [(FUTURE, "torch.triu(all_ones, diagonal=past_kv_pos_offset)")]}
OFFSET_ONE_SHORT = {"kv_cache.py": [("self.cfg.d_head**0.5, past_posn)", "self.cfg.d_head**0.5, past_posn - 1)")]}
CRASH_VARIANTS = {"the diagonal hidden": DIAGONAL_HIDDEN, "the cache's mask offset one short": OFFSET_ONE_SHORT}
# The checks each is graded at. The diagonal hidden is graded at the cache alone: beside the mask's own check, which it
# fails, the cache would be graded on the grader's own mask and pass (tests/course/test_stand_ins.py); attention names
# the diagonal hidden inside its forward (test_mistakes.py).
GRADED_AT = {"the diagonal hidden": ("kv_cache",)}


@pytest.fixture(scope="module")
def crash_variant(grade, tmp_path_factory):
    """name -> (the package, its report at GRADED_AT, else the mask's check and the cache's), each graded once, when
    a test first asks."""
    done = {}

    def graded(name: str):
        if name not in done:
            package = write_variant(tmp_path_factory.mktemp("nonfinite"), CRASH_VARIANTS[name])
            done[name] = package, grade(package, *GRADED_AT.get(name, ("attention.causal_mask", "kv_cache")))
        return done[name]

    return graded


def function_lines(path: Path, qualname: str) -> range:
    """The lines of the function `Class.method` in `path`."""
    owner, name = qualname.split(".")
    tree = ast.parse(path.read_text())
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == owner]
    (function,) = [node for node in cls.body if isinstance(node, ast.FunctionDef) and node.name == name]
    return range(function.lineno, function.end_lineno + 1)


@pytest.mark.parametrize("name", tiered(CRASH_VARIANTS, ["the cache's mask offset one short"]))
def test_nan_logits_end_in_a_complete_report(name, crash_variant, tmp_path):
    package, report = crash_variant(name)
    results = by_id(report)
    kv_cache = results["kv_cache"]
    assert kv_cache.status == "fail" and "the first a NaN at index (0, 0, 0)" in kv_cache.message, kv_cache.message
    assert kv_cache.max_abs_diff is None and "\n" not in kv_cache.message
    every_format(report, tmp_path, draw=True)


# name: (the check that names it, the function holding the edit, the start of the hint)
NAMED_AT = {"the cache's mask offset one short": ("kv_cache", "kv_cache.py", "CachedAttention.forward", ONE_SHORT)}


@pytest.mark.parametrize("name", NAMED_AT)
def test_each_nan_mistake_is_named_at_its_line(name, crash_variant):
    """NaN in the mistake's own output (the first row of a pattern with the diagonal hidden) matches NaN at the same
    places; the mask check tells the cache's mistake from the mask's: it passes where the cache's offset is one
    short."""
    package, report = crash_variant(name)
    results = by_id(report)
    check_id, file, function, said = NAMED_AT[name]
    check = results[check_id]
    assert check.status == "fail" and check.hint and check.hint.startswith(said), (check.message, check.hint)
    assert check.next_step == f"most likely: {check.hint}"
    assert check.file == file and check.line in function_lines(package / file, function), (check.file, check.line)
    assert results["attention.causal_mask"].status == "pass", results["attention.causal_mask"].message


@pytest.mark.slow  # a `grade` command of its own
@pytest.mark.parametrize("name", CRASH_VARIANTS)
def test_the_grade_command_writes_every_report(name, reference, tmp_path):
    """`grade` as a learner runs it, on the variant: no traceback, the exit code of a failing grading, and every file
    it was asked for written, each read back (JSON and Gradescope's against their schemas)."""
    package = write_variant(tmp_path, CRASH_VARIANTS[name])
    files = {option: tmp_path / f"report.{option}" for option in ("json", "junit", "gradescope", "html")}
    options = [item for option, path in files.items() for item in (f"--{option}", str(path))]
    done = run_grade("--reference", "random", "--exercises", str(package), *options, "kv_cache")
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout, done.stderr
    report = json.loads(files["json"].read_text())
    jsonschema.validate(report, schema("report.schema.json"))
    (kv_cache,) = report["checks"]
    assert kv_cache["status"] == "fail" and kv_cache["mistake"].startswith(ONE_SHORT), kv_cache
    jsonschema.validate(json.loads(files["gradescope"].read_text()), schema("gradescope-results.schema.json"))
    assert "<failure" in files["junit"].read_text() and kv_cache["message"][:40] in files["html"].read_text()


def test_the_diagonal_hidden_in_attention_is_named_where_the_nan_first_appears(grade, tmp_path):
    """The scores, masked on the diagonal inside forward, differ first; the softmax then makes NaN."""
    from test_mistakes import MISTAKES

    check_id, edits, _, said = MISTAKES["a mask that hides the diagonal"]
    attention = by_id(grade(write_variant(tmp_path, edits), check_id))["attention"]
    assert attention.status == "fail" and said in attention.hint, (attention.message, attention.hint)
    assert attention.divergence.startswith(
        "q, k, v, unscaled_scores match the random reference; attn_scores is the first step"
    ), attention.divergence
    assert attention.divergence.endswith("; a NaN first appears in your attn_pattern"), attention.divergence
