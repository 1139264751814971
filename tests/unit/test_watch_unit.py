"""`grade --watch` without a worker: which checks a save regrades, which files count as saved, and the lines one
regrade prints (what moved, a new reason for a check that still fails, the score), the grading stood in for by
reports built here. Under a pseudo-terminal, with a worker, in test_watch.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import watchfiles
from rich.console import Console

from grader.checks import select
from grader.host import pipeline
from grader.host.modes.watch import (
    SavedPython,
    Watch,
    changes_line,
    check_lines,
    regraded,
    saved_files,
    score_line,
    stale,
)
from grader.host.pipeline import ReferenceTampered
from grader.host.results import CheckResult, Report
from grader.host.runner import Limits

pytestmark = pytest.mark.unit


def ids(checks) -> list[str]:
    return [check.id for check in checks]


def test_a_save_regrades_its_files_watched_checks_and_a_shared_file_all_of_them():
    watched = select(["layernorm", "attention"])
    assert ids(regraded(["attention.py"], watched)) == ["attention.causal_mask", "attention"]
    assert regraded(["mlp.py"], watched) == []  # a file of checks not watched
    assert regraded(["config.py"], watched) == watched  # imported by every module
    assert regraded(["helpers/util.py", "mlp.py"], watched) == watched


def test_only_python_files_outside_pycache_and_editors_temporary_files_count(tmp_path):
    package = tmp_path / ".venv" / "exercises"  # where the package lives does not matter
    saved = SavedPython(package)
    assert saved(None, str(package / "attention.py")) and saved(None, str(package / "helpers" / "util.py"))
    for ignored in ("notes.txt", "__pycache__/attention.py", ".attention.py.swp", "attention.py~"):
        assert not saved(None, str(package / ignored)), ignored


def result(check_id: str, status: str, **fields) -> CheckResult:
    return CheckResult(check_id, "model", "", status, 1, **fields)


def by_id(*results: CheckResult) -> dict[str, CheckResult]:
    return {result.id: result for result in results}


def test_what_changed_names_each_move_and_each_check_that_stopped_passing():
    now = [result("a", "pass"), result("b", "fail", message="differs"), result("c", "fail", message="differs")]
    before = by_id(result("a", "fail", message="differs"), result("b", "pass"), result("c", "fail", message="differs"))
    line = changes_line(before, now).plain
    assert line == "  since the last run: a: fail -> pass; newly failing: b (pass -> fail)"
    assert changes_line(by_id(result("a", "pass")), [result("a", "pass")]).plain == "  since the last run: no change"


def test_what_changed_notices_a_new_reason_for_a_check_that_still_fails():
    before = by_id(result("attention", "fail", message="differs from GPT-2 on blocks.0.prompt: max abs diff 0.5"))
    now = [result("attention", "fail", message="differs from GPT-2 on blocks.0.prompt: output shape (2, 9)")]
    assert changes_line(before, now).plain == (
        "  since the last run: attention: still fails, now: differs from GPT-2 on blocks.0.prompt: output shape (2, 9)"
    )


SYNTAX = {"message": "SyntaxError: invalid syntax (attention.py, line 3)", "file": "attention.py", "line": 3}


def test_one_error_that_stops_a_files_checks_is_one_phrase_of_what_changed():
    before = by_id(result("attention.causal_mask", "pass"), result("attention", "pass"), result("layernorm", "pass"))
    now = [result("attention.causal_mask", "error", **SYNTAX), result("attention", "error", **SYNTAX)]
    now.append(result("layernorm", "fail", message="differs"))
    assert changes_line(before, now).plain == (
        "  since the last run: newly failing: attention.* (2 checks) (pass -> error); "
        "newly failing: layernorm (pass -> fail)"
    )
    moved = {**SYNTAX, "message": "SyntaxError: invalid syntax (attention.py, line 4)", "line": 4}
    again = [result("attention.causal_mask", "error", **moved), result("attention", "error", **moved)]
    assert changes_line(by_id(*now), again).plain == (
        f"  since the last run: attention.* (2 checks): still an error, now: {moved['message']}"
    )


def test_checks_stopped_by_one_error_share_a_line_and_a_failure_gets_its_next_step():
    other = {**SYNTAX, "message": "NameError: name 'x' is not defined (attention.py:3)"}
    shown = [
        line.plain
        for line in check_lines(
            [
                result("attention.causal_mask", "error", **SYNTAX),
                result("attention", "error", **SYNTAX),
                result("layernorm", "fail", message="differs", hint="eps outside the square root"),
                result("block", "error", **other),  # another error at the same line: a line of its own
            ]
        )
    ]
    assert shown[0].split()[:5] == ["attention.*", "(2", "checks)", "ERROR", "0/2"]
    assert shown[0].endswith(SYNTAX["message"])
    assert shown[1].split()[:2] == ["layernorm", "FAIL"]
    assert shown[2].strip() == "next: most likely: eps outside the square root"
    assert shown[3].split()[:2] == ["block", "ERROR"] and len(shown) == 4


def test_a_syntax_error_that_stops_passing_checks_is_one_line():
    """The README promises it: no `read:` line, as the fix is at the line the error names, not in the course."""
    before = by_id(result("attention.causal_mask", "pass"), result("attention", "pass"))
    now = [result("attention.causal_mask", "error", **SYNTAX), result("attention", "error", **SYNTAX)]
    (line,) = check_lines(now, before)
    assert line.plain.endswith(SYNTAX["message"])
    raised = {**SYNTAX, "message": "NameError: name 'x' is not defined (attention.py:3)"}  # a page may help there
    assert [line.plain.split()[0] for line in check_lines([result("attention", "error", **raised)], before)] == [
        "attention",
        "read:",
    ]


def test_the_saved_files_are_named_inside_the_package_once_each_and_printable(tmp_path):
    changes = {
        (watchfiles.Change.modified, str(tmp_path / "attention.py")),
        (watchfiles.Change.added, str(tmp_path / "attention.py")),  # one save, two events
        (watchfiles.Change.modified, str(tmp_path / "helpers" / "util.py")),
        (watchfiles.Change.modified, str(tmp_path / "bad\x1b[2Jname.py")),
    }
    assert saved_files(changes, tmp_path) == ["attention.py", "bad\ufffd[2Jname.py", "helpers/util.py"]


def test_a_saved_file_is_named_as_the_learner_names_it():
    watched = select(["embedding", "sampling"])
    assert ids(regraded(["embedding.py"], watched)) == ["embed", "pos_embed"]
    assert ids(regraded(["sampling.py"], watched)) == [c.id for c in watched if c.target.file == "sampling"]
    assert "kv_cache" not in ids(regraded(["sampling.py"], watched))  # kv_cache.py is its own file
    assert ids(regraded(["kv_cache.py"], watched)) == ["kv_cache"]


def test_a_check_that_stays_todo_or_times_out_again_for_another_reason_says_so():
    for status, said in (("todo", "still to do"), ("timeout", "still times out"), ("error", "still an error")):
        before = by_id(result("gelu_new", status, message="first"))
        assert changes_line(before, [result("gelu_new", status, message="second")]).plain == (
            f"  since the last run: gelu_new: {said}, now: second"
        )


def test_a_passing_check_is_no_change_whatever_its_message():
    before = by_id(result("embed", "pass", message="0.1 s"))
    assert changes_line(before, [result("embed", "pass", message="0.2 s")]).plain == "  since the last run: no change"


def test_the_score_counts_every_watched_check_by_status():
    results = [result("a", "pass"), result("b", "fail"), result("c", "pass"), result("d", "todo")]
    assert score_line(results).plain == "  watched checks: 2/4 points (2 pass, 1 fail, 1 todo)"


class Attempts:
    """GradingRun's attempts stood in for: each answers the next of the reports given, result by result, and records
    its checks and reference; the run's own rebuild and its report are the real ones."""

    def __init__(self, monkeypatch, *answers):
        self.answers, self.calls = list(answers), []
        monkeypatch.setattr(pipeline.GradingRun, "_attempt", lambda run: self.attempt(run))

    def attempt(self, run):
        self.calls.append(([check.id for check in run.checks], run.reference))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        results = [answer[check.id] for check in run.checks]
        yield from results
        run.grading = pipeline.Grading(Report("random", str(run.package), results))


def report_of(*results: CheckResult) -> dict[str, CheckResult]:
    return by_id(*results)


def printed_by(session: Watch, saved: list[str]) -> list[str]:
    console = Console(record=True, width=200, color_system=None)
    session.regrade(saved, console, show_printed=False)
    return [line for line in console.export_text().splitlines() if line.strip()]


FIRST = report_of(
    result("layernorm", "fail", message="differs: max abs diff 0.5"),
    result("attention.causal_mask", "pass"),
    result("attention", "pass"),
)


def test_a_save_regrades_its_checks_and_prints_the_new_reason_and_the_score(monkeypatch, tmp_path):
    again = report_of(result("layernorm", "fail", message="differs: output shape (2, 9)"))
    grading = Attempts(monkeypatch, FIRST, again)
    session = Watch(tmp_path, select(["layernorm", "attention"]), "the reference", None, rebuild=None)
    session.report(session.grading(session.watched))
    lines = printed_by(session, ["normalization.py"])
    assert lines[0].endswith(" normalization.py saved: layernorm")
    assert lines[1].split() == ["layernorm", "FAIL", "0/1", "differs:", "output", "shape", "(2,", "9)"]
    assert lines[2:] == [
        "  since the last run: layernorm: still fails, now: differs: output shape (2, 9)",
        "  watched checks: 2/3 points (2 pass, 1 fail)",
    ]
    assert grading.calls[1] == (["layernorm"], "the reference")


def test_a_save_of_a_file_no_watched_check_grades_grades_nothing(monkeypatch, tmp_path):
    grading = Attempts(monkeypatch, FIRST)
    session = Watch(tmp_path, select(["layernorm", "attention"]), "the reference", None, rebuild=None)
    session.report(session.grading(session.watched))
    lines = printed_by(session, ["mlp.py"])
    assert len(lines) == 1 and lines[0].endswith(" mlp.py saved: no watched check grades it")
    assert len(grading.calls) == 1


def test_a_reference_that_does_not_verify_is_rebuilt_and_the_same_checks_graded_again(monkeypatch, tmp_path):
    tampered = ReferenceTampered("weights.safetensors is not what the reference builder wrote")
    grading = Attempts(monkeypatch, FIRST, tampered, report_of(result("layernorm", "pass")))
    rebuilt = []

    def rebuild(reference, error):
        rebuilt.append((reference, str(error)))
        return "the rebuilt reference"

    session = Watch(tmp_path, select(["layernorm", "attention"]), "the reference", None, rebuild)
    session.report(session.grading(session.watched))
    lines = printed_by(session, ["normalization.py"])
    assert rebuilt == [("the reference", "weights.safetensors is not what the reference builder wrote")]
    assert grading.calls[1:] == [(["layernorm"], "the reference"), (["layernorm"], "the rebuilt reference")]
    assert session.reference == "the rebuilt reference"
    assert lines[-2:] == ["  since the last run: layernorm: fail -> pass", "  watched checks: 3/3 points (3 pass)"]


class Fed(str):
    """A fed outcome: its check's id (what the stand-in verdict reads), and a reply that took no file's stand-in."""

    reply = SimpleNamespace(stood_in=[])


class FedOutcomes:
    """LearnerProcesses stood in for: hands the run one outcome at a time, in the order given, noting each in `log`;
    a second pass's outcome (the parts stood in for given) is the check's id with " again"."""

    def __init__(self, order: list[str], log: list):
        self.order, self.log = order, log
        self.limits = Limits(sandbox=False, fork=True)

    def outcomes(self, package, checks, reference, stand_ins=None):
        by_id = {check.id: check for check in checks}
        if stand_ins:
            for check in checks:
                self.log.append(("again", check.id, stand_ins[check.id]))
                yield check, Fed(f"{check.id} again")
            return
        for check_id in self.order:
            self.log.append(("outcome", check_id))
            yield by_id[check_id], Fed(check_id)


def fed(monkeypatch, tmp_path, verdicts: dict, order: list[str]) -> tuple[pipeline.GradingRun, list]:
    """A run of the checks of `order` on FedOutcomes, each outcome judged as `verdicts` says, and its log."""
    monkeypatch.setattr(pipeline, "Seal", lambda reference, ids: type("Sealed", (), {"broken": lambda self: None})())
    monkeypatch.setattr(pipeline, "Evidence", lambda check, outcome, reference: outcome)
    monkeypatch.setattr(pipeline, "judge", lambda outcome: verdicts[outcome])
    log: list = []
    reference = SimpleNamespace(kind="random", meta={}, fallback_reason="")
    return pipeline.GradingRun(tmp_path, select(order), reference, processes=FedOutcomes(order, log)), log


def test_a_result_is_yielded_once_every_part_it_uses_is_judged_naming_the_failing_ones(monkeypatch, tmp_path):
    """attention's outcome comes first, but its result waits for its part, the causal mask: once that fails,
    attention is graded again with the grader's mask, and yielded with that verdict; layernorm, which uses nothing
    graded here, is yielded at once."""
    verdicts = {
        "attention": result("attention", "fail", message="differs: max abs diff 2"),
        "layernorm": result("layernorm", "pass"),
        "attention.causal_mask": result("attention.causal_mask", "fail", message="differs: max abs diff 1e9"),
        "attention again": result("attention", "fail", message="differs: max abs diff 3"),
    }
    run, log = fed(monkeypatch, tmp_path, verdicts, ["attention", "layernorm", "attention.causal_mask"])
    for got in run:
        log.append(("result", got.id))
    assert log == [
        ("outcome", "attention"),
        ("outcome", "layernorm"),
        ("result", "layernorm"),
        ("outcome", "attention.causal_mask"),
        ("result", "attention.causal_mask"),
        ("again", "attention", ["attention.Attention.apply_causal_mask"]),
        ("result", "attention"),
    ]
    attention = next(r for r in run.finished().report.checks if r.id == "attention")
    assert (attention.message, attention.stood_in) == ("differs: max abs diff 3", ["attention.causal_mask"])
    assert attention.notes == [
        "graded with the grader's Attention.apply_causal_mask in place of yours, which fails attention.causal_mask"
    ]


def test_a_check_waits_for_the_second_pass_of_a_part_and_is_graded_again_in_a_wave_after_it(monkeypatch, tmp_path):
    """The mask fails, and so attention and the whole model; attention passes on the grader's mask, so the whole
    model is graded again with the grader's mask alone; the block, which passed, waits for attention's verdict, so
    its note does not name an attention that passes."""
    verdicts = {
        "attention.causal_mask": result("attention.causal_mask", "fail"),
        "attention": result("attention", "fail"),
        "block": result("block", "pass"),
        "transformer": result("transformer", "fail"),
        "attention again": result("attention", "pass"),
        "transformer again": result("transformer", "pass"),
    }
    order = ["attention.causal_mask", "attention", "block", "transformer"]
    run, log = fed(monkeypatch, tmp_path, verdicts, order)
    for got in run:
        log.append(("result", got.id))
    mask = ["attention.Attention.apply_causal_mask"]
    assert log == [
        ("outcome", "attention.causal_mask"),
        ("result", "attention.causal_mask"),
        *(("outcome", check_id) for check_id in order[1:]),
        ("again", "attention", mask),
        ("result", "attention"),
        ("result", "block"),
        ("again", "transformer", mask),
        ("result", "transformer"),
    ]
    results = {r.id: r for r in run.finished().report.checks}
    assert [results[c].status for c in order] == ["fail", "pass", "pass", "pass"]
    assert results["block"].notes == [
        "passes, though your Attention.apply_causal_mask fails its own check: fix attention.causal_mask too"
    ]


def package_importing_attention(directory, attention: str):
    """A package whose block.py imports attention.py and transformer.py imports block.py; layernorm's file does not."""
    files = {
        "attention.py": attention,
        "block.py": "import torch\nfrom .attention import Attention\nfrom . import config\n",
        "transformer.py": "from .block import TransformerBlock\n",
        "normalization.py": "from .config import Config\n",
        "config.py": "",
    }
    for name, source in files.items():
        (directory / name).write_text(source)
    return directory


def test_a_syntax_error_makes_the_checks_of_every_file_importing_it_stale_and_only_those(tmp_path):
    watched = select(["layernorm", "attention", "block", "transformer"])
    broken = package_importing_attention(tmp_path, "class Attention(:\n")
    assert stale(["attention.py"], watched, broken, {}) == {"block", "transformer"}  # attention's own: regraded
    mended = package_importing_attention(tmp_path, "class Attention:\n    pass\n")
    assert stale(["attention.py"], watched, mended, {}) == set()  # a save that compiles regrades its own checks
    erred = {"block": result("block", "error", **SYNTAX), "layernorm": result("layernorm", "fail")}
    assert stale(["attention.py"], watched, mended, erred) == {"block"}  # its error was at the saved file's line
    assert stale(["mlp.py"], watched, mended, erred) == set()


def test_a_syntax_error_regrades_the_checks_that_import_it_as_errors_not_passes(monkeypatch, tmp_path):
    package = package_importing_attention(tmp_path, "class Attention(:\n")
    stopped = {check_id: result(check_id, "error", **SYNTAX) for check_id in ("attention.causal_mask", "attention")}
    grading = Attempts(
        monkeypatch, FIRST | report_of(result("block", "pass")), stopped | report_of(result("block", "error", **SYNTAX))
    )
    session = Watch(package, select(["layernorm", "attention", "block"]), "the reference", None, rebuild=None)
    session.report(session.grading(session.watched))
    lines = printed_by(session, ["attention.py"])
    assert lines[0].endswith(" attention.py saved: attention.causal_mask attention block")
    assert grading.calls[1][0] == ["attention.causal_mask", "attention", "block"]
    assert lines[1].split()[:5] == ["attention.*,", "block", "(3", "checks)", "ERROR"], lines
