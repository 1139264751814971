"""The class view (`python -m grader.host.tools.class_report`) on hand-written results of every kind it reads, junk
among them: what it counts, how it ranks, what it skips and says, and that no learner's text is interpreted."""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import replace
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from grader.host import assignments
from grader.host.assignments import load
from grader.host.platforms.classroom50 import writer as classroom50
from grader.host.render.markdown import literal
from grader.host.results import NeedsAssignment
from grader.host.tools import class_report
from grader.host.tools.classview import reader, tables
from grader.host.tools.classview.gather import read_results
from grader.host.tools.classview.page import render
from grader.host.tools.classview.reader import Learner
from grader.host.tools.classview.tally import pseudonym, tally

pytestmark = pytest.mark.unit

UNBIASED = "the variance divides by N-1: use the biased variance (unbiased=False)"
UNSCALED = "the scores are not scaled: divide q.k by sqrt(d_head)"
FORMULA = '=HYPERLINK("http://evil.example","x")'
INJECTED = "<img src=x onerror=alert(1)>"


def report(*checks: tuple[str, str, str | None]) -> dict:
    """A `grade --json` report: (id, status, mistake) per check, a point each."""
    rows = [
        {
            "id": id_,
            "status": status,
            "points": int(status == "pass"),
            "max_points": 1,
            "mistake": mistake,
            "title": "s",
        }
        for id_, status, mistake in checks
    ]
    score = sum(row["points"] for row in rows)
    return {"reference": "random", "package": "p", "score": score, "max_score": len(rows), "checks": rows}


def batch_result(name: str, *checks, error: str | None = None, graded: dict | None = None) -> dict:
    graded = graded or (report(*checks) if checks else None)
    score = graded["score"] if graded else 0
    return {"submission": name, "score": score, "max_score": 3, "error": error, "report": graded}


def classroom(owner: str, *tests: tuple[str, str, str | None]) -> dict:
    rows = [
        {"test-name": id_, "passed": status == "pass", "score": int(status == "pass"), "max-score": 1,
         "id": id_, "status": status, "mistake": mistake, "page": None, "message": ""}
        for id_, status, mistake in tests
    ]  # fmt: skip
    score = sum(row["score"] for row in rows)
    return {"schema": classroom50.SCHEMA, "owner": owner, "score": score, "max-score": len(rows), "tests": rows}


def write(path: Path, content: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def read(*paths: Path, assignment: str | None = None) -> tuple[dict[str, Learner], list[str]]:
    said: list[str] = []
    learners = read_results(paths, assignment, said.append, str)
    return {learner.name: learner for learner in learners}, said


# --- each kind of input ------------------------------------------------------------------------------------------


def test_batchs_result_gives_its_submissions_statuses_and_mistakes(tmp_path):
    path = write(tmp_path / "ann.json", batch_result("ann", ("layernorm", "fail", UNBIASED), ("embed", "pass", None)))
    learners, said = read(path)
    assert said == []
    ann = learners["ann"]
    assert ann.statuses == {"layernorm": "fail", "embed": "pass"} and ann.mistakes == {"layernorm": UNBIASED}
    assert (ann.score, ann.max_score, ann.source, ann.graded) == (1, 3, str(path), True)


def test_batchs_result_without_a_report_is_a_learner_who_could_not_be_graded(tmp_path):
    learners, _ = read(write(tmp_path / "bo.json", batch_result("bo", error="no exercises/ package")))
    assert learners["bo"].graded is False and learners["bo"].ungraded == "no exercises/ package"


def test_a_bare_report_is_named_by_its_file(tmp_path):
    learners, _ = read(write(tmp_path / "cy.json", report(("attention", "timeout", None))))
    assert learners["cy"].statuses == {"attention": "timeout"}


def test_gradescopes_results_by_each_tests_record_in_extra_data(tmp_path):
    newer = {"score": 1, "tests": [
        {"name": "embed: x", "score": 0, "max_score": 1, "status": "failed",
         "extra_data": {"id": "embed", "status": "error", "mistake": None, "page": "docs/course/02-embed.md",
                        "max_points": 1}},
        {"name": "attention: y", "score": 0, "max_score": 3, "status": "failed",
         "extra_data": {"id": "attention", "status": "fail", "mistake": UNSCALED, "page": None, "max_points": 3}},
    ]}  # fmt: skip
    older = {"score": 1, "tests": [
        {"name": "embed: the embedding: a lookup", "score": 1, "max_score": 1, "status": "passed"},
        {"name": "layernorm: z", "score": 0, "max_score": 2, "status": "failed"},
    ]}  # fmt: skip
    export = tmp_path / "export"
    write(export / "dee" / "results.json", newer)
    write(export / "eve" / "results.json", older)
    learners, said = read(export)
    assert said == [  # a file written before the record: its tests name no check
        f"skipped {export / 'eve' / 'results.json'}: a Gradescope results.json is malformed "
        "(tests.0.extra_data.id: Field required)"
    ]
    assert learners["dee"].statuses == {"embed": "error", "attention": "fail"}
    assert learners["dee"].mistakes == {"attention": UNSCALED} and learners["dee"].max_score == 4
    assert learners["dee"].pages == {"embed": "docs/course/02-embed.md"}
    assert "eve" not in learners


def test_classroom_50s_result_is_its_owners(tmp_path):
    path = write(tmp_path / "repo" / "result.json", classroom("fay", ("mlp", "todo", None), ("block", "fail", "m")))
    learners, _ = read(tmp_path)
    assert learners["fay"].statuses == {"mlp": "todo", "block": "fail"} and learners["fay"].source == str(path)


def scores(**assignments: list[dict]) -> dict:
    return {
        "schema": classroom50.SCORES_SCHEMA,
        "assignments": {slug: {"type": "individual", "entries": entries} for slug, entries in assignments.items()},
    }


def entry(owner: str, *submissions: dict) -> dict:
    return {"owner": owner, "submissions": [{k: v for k, v in s.items() if k != "owner"} for s in submissions]}


def test_classroom_50s_scores_give_each_entrys_newest_submission(tmp_path):
    newest, older = classroom("x", ("embed", "pass", None)), classroom("x", ("embed", "fail", None))
    path = write(tmp_path / "scores.json", scores(gpt2=[entry("gus", newest, older), entry("hal")]))
    learners, said = read(path)
    assert said == []
    assert learners["gus"].statuses == {"embed": "pass"}
    assert learners["hal"].graded is False and learners["hal"].ungraded == "no submission"


def test_of_several_assignments_the_one_asked_for_and_else_a_refusal_naming_them(tmp_path):
    path = write(
        tmp_path / "scores.json",
        scores(part1=[entry("ian", classroom("", ("embed", "pass", None)))], part2=[entry("jo")]),
    )
    learners, _ = read(path, assignment="part1")
    assert list(learners) == ["ian"]
    with pytest.raises(NeedsAssignment, match="part1, part2"):
        read(path)
    learners, said = read(path, assignment="part3")
    assert learners == {} and said == [f"skipped {path}: no assignment part3 (it holds: part1, part2)"]


def test_the_gradebook_csv_gives_statuses_only(tmp_path):
    path = write(
        tmp_path / "grades.csv",
        "student,embed,embed points,layernorm,layernorm points,score,max_score,error\n"
        "kim,pass,1,todo,0,1,3,\nlee,,0,,0,0,3,the grading process stopped without a report\n",
    )
    learners, said = read(path)
    assert said == []
    assert learners["kim"].statuses == {"embed": "pass", "layernorm": "todo"} and learners["kim"].mistakes == {}
    assert learners["lee"].graded is False and learners["lee"].ungraded.startswith("the grading process stopped")


def test_why_a_check_errored_or_timed_out_is_its_records_error_else_its_message(tmp_path):
    graded = report(("attention", "error", None), ("mlp", "timeout", None), ("embed", "fail", None))
    graded["checks"][0] |= {"message": "SyntaxError: invalid syntax", "error": "SyntaxError at attention.py:12"}
    graded["checks"][1] |= {"message": "mlp.py does not finish importing\n(line 7 when stopped)"}
    graded["checks"][2] |= {"message": "differs from GPT-2"}
    learners, said = read(write(tmp_path / "uma.json", batch_result("uma", graded=graded)))
    assert said == []
    assert learners["uma"].errors == {
        "attention": "SyntaxError at attention.py:12",
        "mlp": "mlp.py does not finish importing (line 7 when stopped)",
    }


def test_the_reader_is_one_short_module():
    assert len(Path(reader.__file__).read_text().splitlines()) <= 150


def test_the_gradebooks_flag_column_before_the_score_is_the_learners_flag(tmp_path):
    path = write(
        tmp_path / "grades.csv",
        "student,embed,embed points,flag,score,max_score,error\n"
        "val,pass,1,the kernel showed 73 points; 0 recorded,1,1,\nwyn,pass,1,,1,1,\n",
    )
    learners, said = read(path)
    assert said == [] and learners["val"].statuses == {"embed": "pass"}
    assert (learners["val"].flag, learners["wyn"].flag) == ("the kernel showed 73 points; 0 recorded", "")


def test_each_format_as_the_graders_own_renderers_write_it(tmp_path):
    """The same report through batch, grade --json, Gradescope's and Classroom 50's writers reads back the same."""
    from grader.host.platforms.classroom50 import writer as classroom50
    from grader.host.platforms.gradescope import writer as gradescope
    from grader.host.results import CheckResult, Report
    from grader.host.tools.batch import Submission

    checks = [
        CheckResult("layernorm", "model", "LayerNorm", "fail", 2, hint=UNBIASED),
        CheckResult("attention", "model", "attention", "timeout", 3),
        CheckResult("embed", "model", "embedding", "pass", 1),
    ]
    graded = Report("random", str(tmp_path / "exercises"), checks)
    environ = dict.fromkeys(classroom50.RUNNER_VARIABLES, "x") | {"OWNER": "tia"}
    write(tmp_path / "batch" / "tia.json", Submission("tia", graded.to_dict()).to_dict(graded.max_score))
    write(tmp_path / "report" / "tia.json", graded.to_dict())
    write(tmp_path / "gradescope" / "tia" / "results.json", gradescope.results(graded))
    write(tmp_path / "classroom" / "result.json", classroom50.result(graded, environ, tmp_path))
    for kind in ("batch", "report", "gradescope", "classroom"):
        learners, said = read(tmp_path / kind)
        assert said == [] and list(learners) == ["tia"], kind
        tia = learners["tia"]
        assert tia.statuses == {"layernorm": "fail", "attention": "timeout", "embed": "pass"}, kind
        assert tia.mistakes == {"layernorm": UNBIASED} and (tia.score, tia.max_score) == (1, 6), kind
        assert (
            tia.pages == {check.id: check.page for check in checks} and tia.pages["embed"] == "docs/course/02-embed.md"
        )


# --- junk --------------------------------------------------------------------------------------------------------

JUNK = {
    "not-json.json": ("{not json", "neither a JSON result nor a gradebook CSV"),
    "list.json": ("[1, 2]", "JSON, but no object: not a result"),
    "other.json": ('{"hello": 1}', "JSON, but none of the results this command reads"),
    "string-score.json": (json.dumps({**batch_result("x", ("embed", "pass", None)), "score": "3"}), "(score: "),
    "nan-score.json": ('{"submission": "x", "score": NaN, "max_score": 3, "report": null}', "finite number"),
    "status.json": (json.dumps(batch_result("x", ("embed", "passed", None))), "report.checks.0.status"),
    "test-not-object.json": ('{"score": 1, "tests": ["embed: passed"]}', "(tests.0: "),
    "deep.json": ("[" * 100_000, "neither a JSON result nor a gradebook CSV"),
    "bytes.json": (b"\xff\xfe{}", "not UTF-8 text"),
    "wrong-schema.json": (json.dumps({**classroom("x"), "tests": {"a": 1}}), "Classroom 50 result.json is malformed"),
}


@pytest.mark.parametrize("name", list(JUNK))
def test_a_file_that_is_not_a_result_is_skipped_with_a_line_and_the_rest_read(tmp_path, name):
    content, reason = JUNK[name]
    junk = tmp_path / name
    junk.write_bytes(content if isinstance(content, bytes) else content.encode())
    write(tmp_path / "zed.json", batch_result("zed", ("embed", "pass", None)))
    learners, said = read(tmp_path)
    assert list(learners) == ["zed"]
    assert len(said) == 1 and said[0].startswith(f"skipped {junk}: ") and reason in said[0], said


def test_a_bad_entry_or_row_costs_that_record_alone(tmp_path):
    bad_entry = {"owner": "mo", "submissions": [{"score": 1, "max-score": 1, "tests": [{"test-name": "embed"}]}]}
    collected = write(
        tmp_path / "scores.json", scores(gpt2=[entry("nat", classroom("", ("embed", "pass", None))), bad_entry])
    )
    gradebook = write(
        tmp_path / "grades.csv",
        "submission,embed,embed points,score,max_score,error\nola,pass,1,1,1,\npat,PASS,1,1,1,\nquin,pass\n"
        "ray,pass,1,inf,1,\n",
    )
    learners, said = read(collected, gradebook)
    assert sorted(learners) == ["nat", "ola"]
    assert said[0].startswith(f"skipped {collected}, entry 2 of gpt2: the entry is malformed (submissions.0.tests.0.id")
    assert said[1:] == [
        f"skipped {gradebook}, row 3: the entry is malformed (records.0.status: Input should be 'pass', 'fail', "
        "'todo', 'error' or 'timeout')",
        f"skipped {gradebook}, row 4: 2 cells where the header has 6",
        f"skipped {gradebook}, row 5: the entry is malformed (score: Input should be a finite number)",
    ]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_missing_path_a_file_too_large_and_a_named_pipe_are_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_FILE_BYTES", 100)
    large = write(tmp_path / "large.json", batch_result("x", ("embed", "pass", None)))
    os.mkfifo(tmp_path / "pipe.json")  # read, it would wait for a writer; in a directory it is passed over
    learners, said = read(tmp_path / "nowhere.json", tmp_path / "pipe.json", large, tmp_path)
    assert learners == {}
    assert said == [
        f"skipped {tmp_path / 'nowhere.json'}: no such file",
        f"skipped {tmp_path / 'pipe.json'}: not a regular file",
        f"skipped {large}: over 100 bytes",
        f"skipped {large}: over 100 bytes",  # the directory's
    ]


def test_of_two_results_of_a_learner_the_newer_file_is_kept_and_a_line_says_so(tmp_path):
    newer = write(tmp_path / "a" / "sam.json", batch_result("sam", ("embed", "pass", None)))
    older = write(tmp_path / "b" / "sam.json", batch_result("sam", ("embed", "fail", None)))
    os.utime(older, ns=(1_000_000_000, 1_000_000_000))  # read later, but written long before
    learners, said = read(newer, older)
    assert learners["sam"].statuses == {"embed": "pass"}
    assert said == [f"sam: {newer} kept, newer than {older}"]
    os.utime(newer, ns=(1_000_000_000, 1_000_000_000))  # as old: the later read is kept
    learners, said = read(newer, older)
    assert learners["sam"].statuses == {"embed": "fail"} and said == [f"sam: {older} kept, newer than {newer}"]


GRADEBOOK = "submission,embed,embed points,layernorm,layernorm points,mlp,mlp points,score,max_score,error\n"


def test_a_json_result_and_a_gradebook_row_of_a_learner_are_merged_not_replaced(tmp_path):
    """The gradebook (read after, as grades.csv is after grades-results/ by name) keeps the JSON's mistakes and errors
    and adds what the JSON lacks; a line says where the two disagree, and only there."""
    result = batch_result("ann", ("embed", "pass", None), ("layernorm", "fail", UNBIASED))
    write(tmp_path / "grades-results" / "ann.json", result)
    write(tmp_path / "grades-results" / "bo.json", batch_result("bo", ("embed", "pass", None)))
    gradebook = write(tmp_path / "grades.csv", GRADEBOOK + "ann,pass,1,fail,0,todo,0,1,3,\nbo,fail,0,,0,,0,0,3,\n")
    learners, said = read(tmp_path / "grades-results", gradebook)
    ann, bo = learners["ann"], learners["bo"]
    assert ann.statuses == {"embed": "pass", "layernorm": "fail", "mlp": "todo"}
    assert ann.mistakes == {"layernorm": UNBIASED} and ann.source == str(tmp_path / "grades-results" / "ann.json")
    assert bo.statuses == {"embed": "pass"}  # the JSON's where they differ
    assert said == [f"bo: {tmp_path / 'grades-results' / 'bo.json'} and {gradebook} differ on embed: the first's kept"]


def test_a_learner_twice_in_one_file_keeps_the_later_record_and_says_so(tmp_path):
    path = write(tmp_path / "grades.csv", GRADEBOOK + "sam,fail,0,,0,,0,0,3,\nsam,pass,1,,0,,0,1,3,\n")
    learners, said = read(path)
    assert learners["sam"].statuses == {"embed": "pass"} and said == [f"sam: {path} holds them twice: the later kept"]


def test_the_class_views_own_csvs_and_classroom_50s_download_files_are_not_read(tmp_path, capsys):
    """A folder as `gh teacher download` writes it (a clone per learner holding result.json, the newest submission,
    and results.json, every submission newest first; scores.csv of totals beside them), with the class view's own CSVs
    of an earlier run in it: every learner read once, and no line on stderr."""
    from grader.host.tools.classview.gather import CLASSROOM50_SUMMARY

    newest, older = classroom("tia", ("embed", "pass", None)), classroom("tia", ("embed", "fail", None))
    clone = tmp_path / "cs-gpt2-tia"
    write(clone / "result.json", newest)
    write(clone / "results.json", [{"submission_tag": "submit/2", "result": newest}, {"submission_tag": "submit/1",
                                   "result": older}])  # fmt: skip
    write(tmp_path / "scores.csv", f"{CLASSROOM50_SUMMARY}\ntia,Tia,T,tia@example.org,1,1,1,2026-01-01,submit/2,,,,\n")
    assert run(tmp_path, "--csv", tmp_path / "class.csv", "--lms", tmp_path / "lms.csv") == 0
    first = capsys.readouterr().err
    assert run(tmp_path, "--csv", tmp_path / "class.csv", "--lms", tmp_path / "lms.csv") == 0
    assert capsys.readouterr().err == first == "class-report: 1 learners graded; median score 1 of 1\n"
    learners, said = read(tmp_path)  # the control: without their first lines, the command's CSVs are tried
    assert learners["tia"].statuses == {"embed": "pass"}
    assert said == [f"skipped {tmp_path / name}: neither a JSON result nor a gradebook CSV" for name in CSVS]


CSVS = ("class.csv", "lms.csv")


def test_each_check_that_errored_or_timed_out_keeps_its_reason(tmp_path):
    checks = report(("embed", "error", None), ("attention", "timeout", None), ("mlp", "timeout", None))["checks"]
    checks[0]["message"] = "SyntaxError: invalid syntax (embed.py, line 3)"
    checks[1]["message"] = ""
    checks[2]["message"] = "mlp.py does not finish importing (line 1 when stopped)"
    result = {"submission": "cy", "score": 0, "max_score": 3, "error": None, "report": {**report(), "checks": checks}}
    learners, _ = read(write(tmp_path / "cy.json", result))
    assert learners["cy"].errors == {
        "embed": "SyntaxError: invalid syntax (embed.py, line 3)",
        "attention": "timeout",  # no message: its status
        "mlp": "mlp.py does not finish importing (line 1 when stopped)",
    }


# --- the tally ---------------------------------------------------------------------------------------------------


def learner(name: str, statuses: dict, mistakes: dict | None = None, ungraded: str = "") -> Learner:
    score = sum(status == "pass" for status in statuses.values())
    return Learner(name, statuses, mistakes or {}, score, 4, "here", ungraded=ungraded)


CLASS = [
    learner("a", {"embed": "pass", "layernorm": "fail", "attention": "pass", "old": "pass"}, {"layernorm": UNBIASED}),
    learner("b", {"embed": "pass", "layernorm": "fail", "attention": "todo", "old": "pass"}, {"layernorm": UNBIASED}),
    learner("c", {"embed": "pass", "layernorm": "pass", "attention": "fail", "old": "pass"}, {"attention": UNSCALED}),
    learner("d", {"embed": "todo", "layernorm": "todo", "attention": "todo", "old": "todo"}),
    learner("e", {"attention": "timeout", "embed": "error", "layernorm": "pass"}),
    learner("f", {}, ungraded="no exercises/"),
]


def test_each_check_is_counted_in_course_order_an_unknown_one_last():
    view = tally(CLASS)
    assert view.checks == ["embed", "layernorm", "attention", "old"]
    assert {check: dict(view.statuses[check]) for check in view.checks} == {
        "embed": {"pass": 3, "todo": 1, "error": 1},
        "layernorm": {"fail": 2, "pass": 2, "todo": 1},
        "attention": {"pass": 1, "todo": 2, "fail": 1, "timeout": 1},
        "old": {"pass": 3, "todo": 1},
    }
    assert [view.graded_on(check) for check in view.checks] == [5, 5, 5, 4]
    assert view.lowest_pass_rates(2) == ["attention", "layernorm"]  # 1/5, then 2/5 (before embed's 3/5)


def test_mistakes_rank_by_learners_and_learners_stop_at_their_first_todo():
    view = tally(CLASS)
    assert [(m.check, m.words, m.learners, m.page) for m in view.mistakes] == [
        ("layernorm", UNBIASED, 2, "docs/course/04-layernorm.md"),
        ("attention", UNSCALED, 1, "docs/course/05-attention.md"),
    ]
    assert view.stops == [("embed", 1), ("attention", 1)] and view.finished == 3  # b stops at attention, d at embed


def test_a_learner_who_could_not_be_graded_is_counted_apart():
    view = tally(CLASS)
    assert [ln.name for ln in view.ungraded] == ["f"] and "f" not in [ln.name for ln in view.learners]
    assert view.median_score == 2 and view.max_score == 4  # scores 3, 2, 3, 0, 1
    assert view.score_counts() == [(0, 1), (1, 1), (2, 1), (3, 2)]


def test_the_view_of_an_assignment_counts_its_checks_alone_scored_with_its_points(tmp_path):
    toml = '[[assignment]]\nname = "week1"\nchecks = ["embed", "layernorm"]\npoints = { layernorm = 5 }\n'
    (week1,) = load(write(tmp_path / "assignments.toml", toml))
    view = tally([*CLASS, learner("g", {"old": "pass"})], week1)
    assert view.checks == ["embed", "layernorm"] and view.max_score == 6
    assert {ln.name: ln.score for ln in view.learners} == {"c": 6, "e": 5, "a": 1, "b": 1, "d": 0}
    assert [(m.check, m.learners) for m in view.mistakes] == [("layernorm", 2)]  # attention's is not week1's
    assert {ln.name: ln.ungraded for ln in view.ungraded} == {
        "f": "no exercises/",
        "g": "graded on none of assignment week1's checks",
    }
    said = "assignment week1: 5 learners graded (1 with checks that errored or timed out), 2 could not be graded"
    assert tables.headline(view).startswith(said)
    assert not tables.headline(tally(CLASS)).startswith("assignment")


SYNTAX = "SyntaxError: invalid syntax (normalization.py, line 3)"
HANG = "attention.py does not finish importing (line 1 when stopped)"
DOUBT = "the notebook's kernel showed 73, the gradebook records 0"


def troubled() -> list[Learner]:
    """CLASS, and one whose LayerNorm does not compile and whose attention hangs, and one whose grade is in doubt."""
    stuck = Learner(
        "g",
        {"embed": "pass", "layernorm": "error", "attention": "timeout", "old": "error"},
        {},
        1,
        4,
        "here",
        errors={"layernorm": SYNTAX, "attention": HANG, "old": SYNTAX},
    )
    return [*CLASS, stuck, replace(learner("h", {"embed": "pass"}), flag=DOUBT)]


def test_checks_that_stopped_are_listed_by_learner_and_reason_each_mistake_names_its_learners():
    view = tally(troubled())
    assert [(stop.learner, stop.status, stop.reason, stop.checks) for stop in view.stopped] == [
        ("e", "error", "error", ("embed",)),  # no message read: its status
        ("e", "timeout", "timeout", ("attention",)),
        ("g", "error", SYNTAX, ("layernorm", "old")),  # one reason, its checks in course order
        ("g", "timeout", HANG, ("attention",)),
    ]
    assert [(m.check, m.names, m.learners) for m in view.mistakes] == [
        ("layernorm", ("a", "b"), 2),
        ("attention", ("c",), 1),
    ]
    assert [(ln.name, ln.flag) for ln in view.flagged] == [("h", DOUBT)]
    assert tables.headline(view).startswith("7 learners graded (2 with checks that errored or timed out), 1 could not")


def test_the_csv_and_the_markdown_list_every_stop_every_learner_not_graded_and_every_grade_in_doubt():
    view = tally(troubled())
    handle = io.StringIO()
    tables.write_csv(view, handle)
    rows = [row for row in csv.DictReader(io.StringIO(handle.getvalue())) if row["kind"] not in ("check", "mistake")]
    assert [(row["kind"], row["check"], row["names"], row["reason"], row["learners"]) for row in rows] == [
        ("error", "embed", "e", "error", "1"),
        ("timeout", "attention", "e", "timeout", "1"),
        ("error", "layernorm old", "g", SYNTAX, "1"),
        ("timeout", "attention", "g", HANG, "1"),
        ("ungraded", "", "f", "no exercises/", "1"),
        ("flag", "", "h", DOUBT, "1"),
    ]
    summary = tables.markdown(view)
    assert f"| g | error | layernorm old | {literal(SYNTAX)} |" in summary
    assert f"| g | timeout | attention | {literal(HANG)} |" in summary
    assert (
        f"| layernorm | {literal(UNBIASED)} | 2 | {literal('a; b')} |" in summary
        and f"| f | {literal('no exercises/')} |" in summary
    )
    assert f"| h | {literal(DOUBT)} |" in summary


def test_the_page_lists_every_stop_with_its_reason_and_each_mistakes_learners():
    html = render(tally(troubled()))
    assert f'title="{escape(f"g, layernorm: error: {SYNTAX}", quote=True)}"' in html  # its heatmap cell says why
    page = Text(html)
    text = "".join(page.text)
    assert f"gerrorlayernorm old{SYNTAX}" in text and f"gtimeoutattention{HANG}" in text
    assert f"layernorm{UNBIASED}2a; b" in text and f"h: {DOUBT}" in text and "f: no exercises/" in text


def test_the_lms_csv_has_a_row_per_learner_and_each_assignments_points(tmp_path, monkeypatch, capsys):
    toml = (
        '[[assignment]]\nname = "week1"\nchecks = ["embed", "layernorm"]\npoints = { embed = 2, layernorm = 5 }\n'
        '[[assignment]]\nname = "week2"\nchecks = ["attention"]\npoints = { attention = 3 }\n'
    )
    monkeypatch.setattr(assignments, "FILE", write(tmp_path / "assignments.toml", toml))
    write(tmp_path / "r" / "a.json", batch_result("a", ("embed", "pass", None), ("layernorm", "fail", UNBIASED),
                                                  ("attention", "pass", None)))  # fmt: skip
    write(tmp_path / "r" / "b.json", batch_result("b", ("embed", "pass", None)))
    write(tmp_path / "r" / "c.json", batch_result("c", error="no exercises/ package"))
    assert run(tmp_path / "r", "--lms", tmp_path / "lms.csv", "--assignment", "week2") == 0
    assert (tmp_path / "lms.csv").read_text().splitlines() == ["learner,week1,week2", "a,2,3", "b,2,", "c,,"]
    assert capsys.readouterr().err.startswith("class-report: assignment week2: 1 learners graded, 2 could not")


def test_pseudonyms_are_stable_and_differ_by_name():
    assert pseudonym("alice") == pseudonym("alice") != pseudonym("alicf")
    assert len({pseudonym(str(n)) for n in range(1000)}) == 1000
    assert pseudonym("alice").startswith("learner-") and len(pseudonym("alice")) == len("learner-") + 6


# --- the command and its outputs ---------------------------------------------------------------------------------


class Text(HTMLParser):
    """The page's text, the tags it holds and where its links lead."""

    def __init__(self, page: str):
        super().__init__()
        self.text, self.tags, self.links = [], [], []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.links += [value for name, value in attrs if name in ("href", "src")]

    def handle_data(self, data):
        self.text.append(data)


PAGES = ("04-layernorm.md", "05-attention.md")  # of the mistakes, in their order


@pytest.fixture
def hostile_class(tmp_path) -> Path:
    """Two learners with the LayerNorm mistake, one named to inject HTML, one whose 'mistake' is a formula."""
    results = tmp_path / "results"
    write(results / "a.json", batch_result(INJECTED, ("layernorm", "fail", UNBIASED), ("attention", "pass", None)))
    write(results / "b.json", batch_result("uma", ("layernorm", "fail", UNBIASED), ("attention", "fail", FORMULA)))
    write(results / "c.json", batch_result("vic", ("layernorm", "pass", None), ("attention", "todo", None)))
    return results


def run(*args: str) -> int:
    return class_report.main([str(arg) for arg in args])


def test_the_csv_counts_each_check_then_each_mistake_spreadsheet_safe(hostile_class, tmp_path):
    out = tmp_path / "class.csv"
    assert run(hostile_class, "--csv", out) == 0
    with open(out, newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows == [
        [
            "kind",
            "check",
            "pass",
            "fail",
            "todo",
            "error",
            "timeout",
            "graded",
            "mistake",
            "learners",
            "names",
            "reason",
        ],
        ["check", "layernorm", "1", "2", "0", "0", "0", "3", "", "", "", ""],
        ["check", "attention", "1", "1", "1", "0", "0", "3", "", "", "", ""],
        ["mistake", "layernorm", "", "", "", "", "", "", UNBIASED, "2", f"{INJECTED}; uma", ""],
        ["mistake", "attention", "", "", "", "", "", "", "'" + FORMULA, "1", "uma", ""],
    ]


def test_the_page_shows_every_text_escaped(hostile_class, tmp_path):
    out = tmp_path / "class.html"
    assert run(hostile_class, "--html", out, "--pages", "https://github.com/o/r/blob/main/") == 0
    page = out.read_text()
    parsed = Text(page)
    assert "img" not in parsed.tags and "script" not in parsed.tags
    assert INJECTED in parsed.text and FORMULA in parsed.text and UNBIASED in parsed.text
    assert parsed.links == ["data:,", *(f"https://github.com/o/r/blob/main/docs/course/{page}" for page in PAGES)]


def test_the_markdown_makes_every_text_literal(hostile_class, tmp_path, capsys):
    assert run(hostile_class, "--markdown", "-") == 0
    summary = capsys.readouterr().out
    assert summary.startswith("## Class report\n\n3 learners graded; median score 1 of 3.\n")
    assert "| layernorm | 1 of 3 | 33% |" in summary and "| attention | 1 of 3 | 33% |" in summary
    assert (
        "| layernorm | the variance divides by N\\-1\\: use the biased variance \\(unbiased\\=False\\) | 2 |" in summary
    )
    assert '| attention | \\=HYPERLINK\\(\\"http\\:\\/\\/evil\\.example\\"\\,\\"x\\"\\) | 1 |' in summary


def test_anonymise_keeps_every_name_and_input_path_out_of_every_output_and_message(hostile_class, tmp_path, capsys):
    """Even a name in a result's text (a path in batch's error), a learner seen twice, a file skipped."""
    write(hostile_class / "d.json", batch_result("uma", ("layernorm", "pass", None)))  # uma again: a message
    write(hostile_class / "e.json", batch_result("wyn", error="could not copy exercises/: /srv/class/wyn/exercises"))
    write(hostile_class / "f.json", "{not json")  # a message
    out = {kind: tmp_path / f"class.{kind}" for kind in ("html", "md", "csv", "lms")}
    options = ["--html", out["html"], "--markdown", out["md"], "--csv", out["csv"], "--lms", out["lms"]]
    assert run(hostile_class, "--anonymise", *options) == 0
    said, written = capsys.readouterr(), {kind: path.read_text() for kind, path in out.items()}
    assert said.err.splitlines()[:2] == [
        f"class-report: {pseudonym('uma')}: input 4 kept, newer than input 2",
        "class-report: skipped input 6: neither a JSON result nor a gradebook CSV",
    ]
    wyn = pseudonym("wyn")
    ungraded = f"| {literal(wyn)} | {literal(f'could not copy exercises/: /srv/class/{wyn}/exercises')} |"
    assert ungraded in written["md"]
    for name in (INJECTED, "uma", "vic", "wyn"):
        assert pseudonym(name) in written["html"] and pseudonym(name) in written["lms"]  # each learner's row
        assert all(escape(name) not in text and name not in text for text in (*written.values(), said.out, said.err))
    assert str(hostile_class) not in said.err


def test_without_an_output_or_a_readable_input_the_command_says_so_and_exits_2(tmp_path, capsys):
    assert run(tmp_path, "--csv", tmp_path / "out.csv") == 2
    assert capsys.readouterr().err == f"class-report: no results could be read from {tmp_path}\n"
    assert run(tmp_path) == 2
    assert capsys.readouterr().err == "class-report: nothing to write: give --csv, --html, --markdown or --lms\n"
    assert run(tmp_path, "--html", tmp_path / "no" / "page.html") == 2
    assert "is not a directory" in capsys.readouterr().err
    assert not (tmp_path / "out.csv").exists()


def test_several_assignments_and_no_choice_is_one_line_and_exit_2(tmp_path, capsys):
    write(tmp_path / "scores.json", scores(part1=[entry("wes")], part2=[entry("xia")]))
    assert run(tmp_path, "--csv", tmp_path / "out.csv") == 2
    assert capsys.readouterr().err == "class-report: several assignments, pick one with --assignment: part1, part2\n"
    assert run(tmp_path, "--csv", tmp_path / "out.csv", "--assignment", "part2") == 0


def test_the_command_views_a_course_assignment_and_says_so(tmp_path, capsys):
    write(tmp_path / "r" / "a.json", batch_result("ann", ("embed", "pass", None), ("sampling.greedy", "fail", None)))
    assert run(tmp_path / "r", "--markdown", "-", "--assignment", "part1") == 0
    assert "assignment part1: 1 learners graded; median score 1 of 17." in capsys.readouterr().out
