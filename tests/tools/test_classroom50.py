"""Classroom 50: `grade --classroom50 DIR`'s three outputs read back with a schema and a Markdown parser, and the
autograder bundle end to end: built, laid out as Classroom 50's runner lays it out, run on a correct, a partly
wrong and a broken submission with the runner's environment, its installs recorded by a stand-in pip."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
from markdown_it import MarkdownIt
from repo import REPO, SOLUTIONS, run_grade, stubs, write_variant
from test_render_formats import FORGED_NOTICE, effective_commands, runner_command

from grader.checks import registry
from grader.host.platforms.classroom50 import writer as classroom50
from grader.host.platforms.classroom50.bundle import BUNDLE_LIMIT, build_bundle
from grader.host.results import CheckResult, Report
from grader.host.tools.release import ReleaseError, hidden_lines, leaked_lines
from grader.host.tools.setup import TORCH_VERSION

SCHEMA = json.loads((REPO / "grader" / "host" / "platforms" / "classroom50" / "result.schema.json").read_text())
# What Classroom 50's runner sets for an autograder (runner.py), in the shapes it gives them.
RUNNER = {
    "CLASSROOM": "ml-fall-2026",
    "ASSIGNMENT": "gpt2",
    "SUBMISSION_TAG": "submit/2026-12-03T20-15-00Z-1a2b3c4",
    "COMMIT_URL": "https://github.com/ml-org/ml-fall-2026-gpt2-alice/commit/1a2b3c4d",
    "RELEASE_URL": "https://github.com/ml-org/ml-fall-2026-gpt2-alice/releases/tag/submit%2F2026-12-03T20-15-00Z-1a2b3c4",
    "REVIEW_URL": "https://github.com/ml-org/ml-fall-2026-gpt2-alice/compare/0f0f0f0...1a2b3c4d",
    "OWNER": "alice",
    "USERNAME": "alice",
    "ASSIGNMENT_TYPE": "individual",
    "MODE": "individual",
}
WORKSPACE = Path("/home/runner/work/checkout")
NOTHING_TO_GRADE = "Nothing to grade: the submission has no exercises/ package (exercises/__init__.py is missing)."


def report_of(*checks: CheckResult) -> Report:
    return Report("random", str(WORKSPACE / "exercises"), list(checks), fallback_reason="offline")


SAMPLE = report_of(
    CheckResult("embed", "model", "token embedding", "pass", 1),
    CheckResult(
        "layernorm",
        "model",
        "LayerNorm",
        "fail",
        2,
        "differs from GPT-2",
        file="normalization.py",
        line=27,
        hint="the variance divides by N-1: use the biased variance (unbiased=False)",
    ),
    CheckResult("attention", "model", "attention", "todo", 3, "Attention.forward is not implemented yet"),
    CheckResult("mlp", "model", "MLP", "error", 2, "ValueError: **bold** | [a](b)", file="mlp.py", line=9),
)


def test_the_result_is_valid_and_its_points_add_up():
    result = classroom50.result(SAMPLE, RUNNER, WORKSPACE)
    jsonschema.validate(result, SCHEMA)
    assert (result["score"], result["max-score"]) == (1, 8)
    assert sum(t["score"] for t in result["tests"]) == result["score"]
    assert sum(t["max-score"] for t in result["tests"]) == result["max-score"]
    assert [(t["test-name"], t["passed"], t["status"]) for t in result["tests"]] == [
        ("embed", True, "pass"),
        ("layernorm", False, "fail"),
        ("attention", False, "todo"),
        ("mlp", False, "error"),
    ]
    layernorm = result["tests"][1]
    assert layernorm["mistake"] == SAMPLE.checks[1].hint and layernorm["page"].startswith("docs/course/")
    assert (layernorm["file"], layernorm["line"]) == ("exercises/normalization.py", 27)
    assert layernorm["message"] == SAMPLE.checks[1].message and layernorm["error"] is None
    identity = {key: result[key] for key in ("classroom", "assignment", "owner", "submission", "review")}
    assert identity == {
        "classroom": "ml-fall-2026",
        "assignment": "gpt2",
        "owner": "alice",
        "submission": RUNNER["SUBMISSION_TAG"],
        "review": RUNNER["REVIEW_URL"],
    }


def test_the_review_link_falls_back_to_the_commit_and_the_owner_to_the_username():
    runner = {key: value for key, value in RUNNER.items() if key not in ("REVIEW_URL", "OWNER", "ASSIGNMENT_TYPE")}
    result = classroom50.result(SAMPLE, {**runner, "MODE": "group"}, WORKSPACE)
    jsonschema.validate(result, SCHEMA)
    assert (result["review"], result["owner"], result["assignment_type"]) == (RUNNER["COMMIT_URL"], "alice", "group")


def test_the_release_notes_open_with_the_score_then_what_to_fix_first():
    body = classroom50.release_body(SAMPLE, classroom50.commit_pages(RUNNER))
    tokens = MarkdownIt().enable("table").parse(body)
    headings = [tokens[i + 1].content for i, token in enumerate(tokens) if token.type == "heading_open"]
    assert headings == ["GPT-2 grader: 1/8 points", "Fix first"]
    fix_first = body.split("### Fix first", 1)[1].split("| id |", 1)[0]
    assert fix_first.index("`layernorm`") < fix_first.index("`mlp`") and "`attention`" not in fix_first
    page = "https://github.com/ml-org/ml-fall-2026-gpt2-alice/blob/1a2b3c4d/docs/course/"
    assert f"[`layernorm`]({page}" in fix_first
    assert "\\*\\*bold\\*\\*" in body and "**bold**" not in body  # the learner's text stays literal
    assert "RANDOM model" in body


def test_a_passing_grading_has_nothing_to_fix_and_says_success():
    passing = report_of(SAMPLE.checks[0])
    assert "###" not in classroom50.release_body(passing)
    assert classroom50.outputs(passing) == "status=success\nsummary=1/1 points, 1 of 1 checks pass"
    assert classroom50.outputs(SAMPLE) == "status=failure\nsummary=1/8 points, 1 of 4 checks pass"


def test_where_nothing_fails_yet_the_notes_say_where_to_start():
    started = report_of(SAMPLE.checks[0], SAMPLE.checks[2], replace(SAMPLE.checks[2], id="mlp", summary="MLP"))
    body = classroom50.release_body(started)
    assert "### Fix first" not in body and "### Start here\n\n- `attention` 📝 todo, 0/3 points" in body
    assert "`mlp`" not in body.split("| id |")[0]


def test_publish_replaces_what_the_checkout_holds_and_appends_the_outputs(tmp_path):
    (tmp_path / "elsewhere").write_text("kept")
    (tmp_path / "result.json").symlink_to(tmp_path / "elsewhere")  # committed by the learner
    (tmp_path / "release-body.md").write_text("forged")
    output = tmp_path / "github_output"
    output.write_text("earlier=1\n")
    problems = classroom50.publish(SAMPLE, {**RUNNER, "GITHUB_OUTPUT": str(output)}, tmp_path)
    assert problems == []
    assert (tmp_path / "elsewhere").read_text() == "kept" and not (tmp_path / "result.json").is_symlink()
    jsonschema.validate(json.loads((tmp_path / "result.json").read_text()), SCHEMA)
    assert (tmp_path / "release-body.md").read_text().startswith("## GPT-2 grader: 1/8 points")
    assert output.read_text() == "earlier=1\nstatus=failure\nsummary=1/8 points, 1 of 4 checks pass\n"


def test_under_actions_nothing_printed_while_the_learners_code_runs_is_a_command(monkeypatch, tmp_path):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stdout", log)
    for name, value in {**RUNNER, "GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(tmp_path / "output")}.items():
        monkeypatch.setenv(name, value)
    said: list[str] = []
    emit = classroom50.emitter({"classroom50": tmp_path}, said.append)
    log.write(FORGED_NOTICE + "\n")  # what the learner's code prints while it runs
    emit(SAMPLE)
    assert runner_command(FORGED_NOTICE) in [runner_command(line) for line in log.getvalue().splitlines()]
    assert effective_commands(log.getvalue()) == [] and said == []
    assert (tmp_path / "output").read_text().startswith("status=failure\n")


def test_outside_the_runner_grade_says_what_is_missing_in_one_line(reference, tmp_path):
    env = {key: "" for key in RUNNER}
    ran = run_grade("--solutions", "embed", "--classroom50", str(tmp_path), env=env)
    assert ran.returncode == 2 and "Traceback" not in ran.stderr
    assert ran.stderr.strip().splitlines() == [
        "grade: --classroom50 needs Classroom 50's runner environment: CLASSROOM, ASSIGNMENT, SUBMISSION_TAG, "
        "COMMIT_URL, RELEASE_URL, OWNER are not set"
    ]
    assert not list(tmp_path.iterdir())
    missing_dir = run_grade("--solutions", "embed", "--classroom50", str(tmp_path / "nowhere"), env=RUNNER)
    assert missing_dir.returncode == 2 and missing_dir.stderr.strip().endswith("is not a directory")


@pytest.mark.parametrize("earned", ["all", "none"])
def test_grade_on_the_solutions_and_the_stubs_writes_all_three(reference, tmp_path, earned):
    package = SOLUTIONS if earned == "all" else stubs()
    output = tmp_path / "github_output"
    env = {**RUNNER, "GITHUB_OUTPUT": str(output), "GITHUB_ACTIONS": "false"}
    checks = ["model"] if earned == "all" else []  # the stubs grade at once; the solutions' Part 1 stands for them
    ran = run_grade("--exercises", str(package), *checks, "--classroom50", str(tmp_path), env=env)
    assert ran.returncode == (0 if earned == "all" else 1), ran.stderr[-2000:]
    result = json.loads((tmp_path / "result.json").read_text())
    jsonschema.validate(result, SCHEMA)
    assert sum(t["score"] for t in result["tests"]) == result["score"]
    assert sum(t["max-score"] for t in result["tests"]) == result["max-score"] > 0
    assert result["score"] == (result["max-score"] if earned == "all" else 0)
    statuses = {t["status"] for t in result["tests"]}
    assert statuses == ({"pass"} if earned == "all" else {"todo"})
    status = "success" if earned == "all" else "failure"
    assert output.read_text().splitlines()[0] == f"status={status}"
    assert (tmp_path / "release-body.md").read_text().startswith(f"## GPT-2 grader: {result['score']}/")


# --- the bundle ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("classroom50") / "gpt2"
    build_bundle(out)
    return out


def test_the_bundle_holds_the_autograder_and_the_grader_without_a_solution(bundle):
    assert sorted(entry.name for entry in bundle.iterdir()) == ["autograder.py", "grader-src"]
    assert (bundle / "grader-src" / "grader" / "host" / "cli.py").is_file()
    assert not list(bundle.rglob("solutions")) and not (bundle / "grader-src" / "exercises").exists()
    assert leaked_lines(bundle, hidden_lines(REPO / "solutions")) == []
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True)
    assert f'RELEASE = "{commit.stdout.strip()}' in (bundle / "autograder.py").read_text()


def test_the_bundle_is_under_classroom50s_limit_as_it_publishes_it(bundle, tmp_path):
    with tarfile.open(tmp_path / "gpt2.tar.gz", "w:gz") as archive:  # publish-pages: tar -czf ... -C autograders
        archive.add(bundle, arcname="gpt2")
    assert (tmp_path / "gpt2.tar.gz").stat().st_size < BUNDLE_LIMIT


def test_a_bundle_is_replaced_but_other_files_are_not(bundle, tmp_path):
    again = tmp_path / "gpt2"
    shutil.copytree(bundle, again)
    (again / "autograder.py").write_text("old")
    build_bundle(again)
    assert (again / "autograder.py").read_text() == (bundle / "autograder.py").read_text()
    (again / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="no bundle of this command's"):
        build_bundle(again)
    assert (again / "notes.txt").read_text() == "mine"


def recording_pip(directory: Path) -> Path:
    """A `pip` module that only records its arguments, first on PYTHONPATH: `python -m pip` finds it."""
    (directory / "pip").mkdir(parents=True)
    (directory / "pip" / "__init__.py").write_text("")
    (directory / "pip" / "__main__.py").write_text(
        f"import json, sys\nwith open({str(directory / 'pip.log')!r}, 'a') as log:\n"
        "    log.write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    return directory


def test_a_submission_without_a_package_gets_zero_points_and_its_planted_outputs_are_removed(bundle, tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "exercises").mkdir(parents=True)  # no __init__.py
    (checkout / "result.json").symlink_to(tmp_path / "planted.json")  # out of the checkout, to nothing yet
    (checkout / "release-body.md").mkdir()
    output = tmp_path / "github_output"
    env = {
        **os.environ,
        **RUNNER,
        "PYTHONPATH": str(recording_pip(tmp_path / "shim")),
        "GITHUB_OUTPUT": str(output),
        "GITHUB_WORKSPACE": str(checkout),
    }
    autograder = [sys.executable, str(bundle / "autograder.py")]
    ran = subprocess.run(autograder, cwd=checkout, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkout", "github_output", "shim"]
    result = json.loads((checkout / "result.json").read_text())
    jsonschema.validate(result, SCHEMA)
    points = sum(check.points for check in registry())
    assert (result["score"], result["max-score"]) == (0, points)
    assert [test["test-name"] for test in result["tests"]] == [check.id for check in registry()]
    assert {(test["status"], test["message"]) for test in result["tests"]} == {("error", NOTHING_TO_GRADE)}
    body = (checkout / "release-body.md").read_text()
    assert body.splitlines() == [f"## GPT-2 grader: 0/{points} points", "", NOTHING_TO_GRADE]
    assert output.read_text().splitlines()[0] == "status=failure"


def test_a_submission_without_a_package_scores_zero_of_its_assignments_points(tmp_path, monkeypatch):
    from grader.host.assignments import find
    from grader.host.platforms.classroom50.writer import nothing_to_grade

    for key, value in {**RUNNER, "GITHUB_OUTPUT": str(tmp_path / "out"), "GITHUB_WORKSPACE": str(tmp_path)}.items():
        monkeypatch.setenv(key, value)
    assert nothing_to_grade(NOTHING_TO_GRADE, tmp_path, "part1") == 0
    result, part1 = json.loads((tmp_path / "result.json").read_text()), find("part1")
    assert (result["score"], result["max-score"]) == (0, part1.max_score)
    assert [test["test-name"] for test in result["tests"]] == [check.id for check in part1.checks]


@pytest.mark.slow
def test_the_autograder_grades_three_submissions_as_the_runner_runs_it(reference, bundle, tmp_path):
    runtime = tmp_path / "runner_temp" / "classroom50-runtime" / "gpt2"  # where runner.py unpacks the bundle
    shutil.copytree(bundle, runtime)
    shim = recording_pip(tmp_path / "shim")
    sentinel = tmp_path / "learner-grader-ran"
    submissions = {
        "correct": SOLUTIONS,
        "partly_wrong": write_variant(tmp_path / "wrong", {"normalization.py": [("unbiased=False", "unbiased=True")]}),
        "broken": write_variant(tmp_path / "broken", {"attention.py": [("import einops", "import einops(")]}),
    }
    scores, seconds = {}, {}
    for name, package in submissions.items():
        checkout = tmp_path / "checkouts" / name
        shutil.copytree(package, checkout / "exercises")
        (checkout / "grader").mkdir()  # the learner's own grader: never imported
        for module in ("__init__.py", "__main__.py"):
            (checkout / "grader" / module).write_text(f"open({str(sentinel)!r}, 'w').close()\n")
        output = checkout.parent / f"{name}.output"
        env = {
            **os.environ,
            **RUNNER,
            "PYTHONPATH": str(shim),
            "GITHUB_OUTPUT": str(output),
            "GITHUB_WORKSPACE": str(checkout),
            "HF_HUB_OFFLINE": "1",
        }
        started = time.monotonic()
        ran = subprocess.run(
            [sys.executable, str(runtime / "autograder.py")], cwd=checkout, env=env, capture_output=True, text=True
        )
        seconds[name] = time.monotonic() - started
        assert ran.returncode == 0, (name, ran.stdout[-3000:], ran.stderr[-3000:])
        result = json.loads((checkout / "result.json").read_text())
        jsonschema.validate(result, SCHEMA)
        assert result["owner"] == "alice" and sum(t["score"] for t in result["tests"]) == result["score"]
        assert result["tests"][0]["file"].startswith("exercises/")
        assert (checkout / "release-body.md").read_text().startswith("## GPT-2 grader: ")
        assert output.read_text().startswith("status=")
        scores[name] = (result["score"], result["max-score"])
    assert not sentinel.exists()
    installs = [json.loads(line) for line in (shim / "pip.log").read_text().splitlines()]
    grading = ["install", "--no-compile", f"torch=={TORCH_VERSION}", "-e", "."]  # torch: kept, its dependencies too
    assert installs and all(call == grading for call in installs)
    maximum = scores["correct"][1]
    assert scores["correct"][0] == maximum
    assert 0 < scores["partly_wrong"][0] < maximum and 0 < scores["broken"][0] < scores["partly_wrong"][0]
    assert max(seconds.values()) < 15 * 60, seconds  # Classroom 50's whole job has 15 minutes
    print(f"autograder seconds per submission: {seconds}")


def test_a_bundle_for_an_assignment_grades_it_with_the_file_it_was_built_from(tmp_path, monkeypatch):
    out = tmp_path / "part1"
    build_bundle(out, assignment="part1")  # make classroom50 ASSIGNMENT=part1
    assert (out / "grader-src" / "assignments.toml").read_text() == (REPO / "assignments.toml").read_text()
    spec = importlib.util.spec_from_file_location("autograder", out / "autograder.py")
    autograder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(autograder)
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(autograder, "python", lambda *args, quiet=False: calls.append(args) or 0)
    monkeypatch.setattr(autograder, "CHECKOUT", tmp_path / "checkout")
    (tmp_path / "checkout" / "exercises").mkdir(parents=True)
    (tmp_path / "checkout" / "exercises" / "__init__.py").write_text("")
    assert autograder.main() == 0
    (grading,) = [call for call in calls if "--classroom50" in call]
    assert grading[grading.index("--assignment") + 1] == "part1"
    with pytest.raises(ReleaseError, match="no assignment 'week9'"):
        build_bundle(tmp_path / "week9", assignment="week9")
    assert not (tmp_path / "week9").exists()


@pytest.mark.slow
def test_a_bundle_for_part1_grades_part1_alone_as_the_runner_runs_it(reference, tmp_path):
    build_bundle(tmp_path / "part1", assignment="part1")
    checkout = tmp_path / "checkout"
    shutil.copytree(SOLUTIONS, checkout / "exercises")
    env = {
        **os.environ,
        **RUNNER,
        "PYTHONPATH": str(recording_pip(tmp_path / "shim")),
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_WORKSPACE": str(checkout),
        "HF_HUB_OFFLINE": "1",
    }
    autograder = str(tmp_path / "part1" / "autograder.py")
    ran = subprocess.run([sys.executable, autograder], cwd=checkout, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, (ran.stdout[-3000:], ran.stderr[-3000:])
    result = json.loads((checkout / "result.json").read_text())
    jsonschema.validate(result, SCHEMA)
    part1 = [check for check in registry() if check.part == "model"]
    assert [test["test-name"] for test in result["tests"]] == [check.id for check in part1]
    assert {test["assignment"] for test in result["tests"]} == {"part1"}
    assert result["score"] == result["max-score"] == sum(check.points for check in part1)
    assert (checkout / "release-body.md").read_text().startswith("## GPT-2 grader, assignment part1: 17/17 points")
    assert "summary=assignment part1: 17/17 points" in (tmp_path / "output").read_text()
