"""The GitHub Actions workflows: clean under actionlint and zizmor, shaped as learners and maintainers need,
and the grade step run here as GitHub runs it, then read back from its log and files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from junitparser import JUnitXml
from markdown_it import MarkdownIt
from repo import REPO, write_variant
from test_render_formats import FORGED_NOTICE, effective_commands, runner_command

from grader.checks import registry
from grader.host.tools.release import build_release
from grader.shared import sandbox

WORKFLOWS = REPO / ".github" / "workflows"
BIN = Path(sys.executable).parent  # the virtualenv's scripts: grade, actionlint, zizmor, shellcheck
PINNED = re.compile(r"uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d[\w.]*")

# Learner code that tries every way to print a forged score into the step's log: stdout
# (captured by the grader), its exception message (shown in the report), and a direct write to
# the grader's own stdout, found through /proc (the check runs in a fork of the worker the grader started).
HOSTILE_FORWARD = f"""        ### BEGIN SOLUTION
        import os
        print({FORGED_NOTICE!r}, flush=True)
        try:  # the sandbox refuses both opens
            with open(f"/proc/{{os.getppid()}}/stat") as worker:
                grader = worker.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{{grader}}/fd/1", "w") as grader_stdout:
                grader_stdout.write("\\n" + {FORGED_NOTICE!r} + "\\n")
        except PermissionError:
            pass
        raise ValueError({FORGED_NOTICE!r})
"""


def load(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def triggers(workflow: dict) -> dict:
    return workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as true


def steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def step_using(workflow: dict, action: str) -> dict:
    return next(step for step in steps(workflow) if step.get("uses", "").startswith(action + "@"))


def grade_step(workflow: dict) -> dict:
    return next(step for step in steps(workflow) if "grade --github" in step.get("run", ""))


def lint(directory: Path) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    files = sorted(str(path) for path in (directory / ".github" / "workflows").glob("*.yml"))
    actionlint = subprocess.run(
        [str(BIN / "actionlint"), "-no-color", "-shellcheck", str(BIN / "shellcheck"), *files],
        capture_output=True,
        text=True,
        cwd=directory,
    )
    zizmor = subprocess.run(
        [str(BIN / "zizmor"), "--offline", "--no-progress", "--format", "plain", *files],
        capture_output=True,
        text=True,
        cwd=directory,
    )
    return actionlint, zizmor


def test_actionlint_and_zizmor_report_nothing():
    assert sorted(path.name for path in WORKFLOWS.glob("*.yml")) == ["ci.yml", "grade.yml"]
    actionlint, zizmor = lint(REPO)
    assert (actionlint.returncode, actionlint.stdout + actionlint.stderr) == (0, "")
    assert zizmor.returncode == 0 and "No findings" in zizmor.stdout, zizmor.stdout + zizmor.stderr


def test_the_linters_do_report_a_bad_workflow(tmp_path):
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "on: push\njobs:\n  build:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v4\n"
        '      - run: echo "${{ github.event.head_commit.message }}" $UNQUOTED ${{ steps.missing.outputs.x }}\n'
    )
    actionlint, zizmor = lint(tmp_path)
    assert actionlint.returncode == 1 and "SC2086" in actionlint.stdout and "steps.missing" in actionlint.stdout
    assert zizmor.returncode != 0 and "unpinned-uses" in zizmor.stdout and "template-injection" in zizmor.stdout


def test_every_workflow_reads_only_and_pins_its_actions():
    for path in WORKFLOWS.glob("*.yml"):
        assert load(path.name)["permissions"] == {"contents": "read"}, path.name
        uses = [line.strip().removeprefix("- ") for line in path.read_text().splitlines() if "uses:" in line]
        assert uses and all(PINNED.fullmatch(line) for line in uses), (path.name, uses)


def test_grade_workflow_installs_cpu_torch_caches_gpt2_and_keeps_the_reports():
    workflow = load("grade.yml")
    assert set(triggers(workflow)) == {"push", "workflow_dispatch"}
    assert step_using(workflow, "actions/setup-python")["with"]["cache"] == "pip"
    assert "~/.cache/huggingface" in step_using(workflow, "actions/cache")["with"]["path"].split()
    installs = [line for step in steps(workflow) for line in step.get("run", "").splitlines() if "pip install" in line]
    assert installs == [
        "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu",
        "python -m pip install -e .",
    ]
    grade = grade_step(workflow)
    assert "--junit" in grade["run"] and "--json" in grade["run"] and "continue-on-error" not in grade
    upload = step_using(workflow, "actions/upload-artifact")
    assert upload["if"] == "always()" and steps(workflow).index(upload) > steps(workflow).index(grade)


def test_ci_workflow_runs_the_test_suite_on_push_and_pull_request():
    workflow = load("ci.yml")
    assert set(triggers(workflow)) == {"push", "pull_request"}
    # The whole suite, slow tests included; .ci/run (a fresh clone's check) runs the README's `make test`.
    assert [step["run"] for step in workflow["jobs"]["test"]["steps"] if "run" in step] == ["make test-all"]
    assert (REPO / ".ci" / "run").read_text().rstrip().splitlines()[-1] == "make test"
    assert workflow["jobs"]["test"]["runs-on"] == "ubuntu-latest"


def platform_commands() -> list[str]:
    return [line for step in load("ci.yml")["jobs"]["platforms"]["steps"] for line in step.get("run", "").splitlines()]


def test_ci_workflow_runs_the_fast_tests_on_every_platform_without_make():
    platforms = load("ci.yml")["jobs"]["platforms"]
    assert platforms["strategy"]["matrix"]["os"] == ["ubuntu-latest", "macos-latest", "windows-latest"]
    assert platforms["runs-on"] == "${{ matrix.os }}" and platforms["timeout-minutes"] <= 15
    assert not any("make" in command.split() for command in platform_commands())
    assert platform_commands()[0] == "python -m grader.host.tools.setup"


def test_ci_platform_commands_run_here():
    """The set-up as a dry run, and the test command collecting only portable and learner tests."""
    setup, pytest_command = platform_commands()[0], platform_commands()[-1]
    dry = subprocess.run([sys.executable, *setup.split()[1:], "--dry-run"], capture_output=True, text=True, cwd=REPO)
    assert dry.returncode == 0 and "--index-url https://download.pytorch.org/whl/cpu" in dry.stdout, dry.stderr
    arguments = [part.strip('"') for part in re.findall(r'"[^"]*"|\S+', pytest_command)][3:]
    # Collecting runs no test: no assertion needs pytest's rewriting, which is 2.5 s of the collection here.
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", *arguments, "--collect-only", "-q", "--assert=plain"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert collected.returncode == 0, collected.stdout + collected.stderr
    ids = [line for line in collected.stdout.splitlines() if "::" in line]
    assert len(ids) > 20 and not any("test_verdicts_equal" in i or "segfault" in i for i in ids), ids


@pytest.mark.slow
def test_grade_step_under_actions_reports_and_forges_nothing(reference, tmp_path):
    script = grade_step(load("grade.yml"))["run"]
    workspace = tmp_path / "repo"
    workspace.mkdir()
    package = write_variant(
        tmp_path, {"embedding.py": [("        ### BEGIN SOLUTION\n        return self.W_E[tokens]\n", HOSTILE_FORWARD)]}
    )
    package.rename(workspace / "exercises")
    raise_line = (workspace / "exercises" / "embedding.py").read_text().splitlines().index(
        f"        raise ValueError({FORGED_NOTICE!r})"
    ) + 1
    summary = tmp_path / "summary.md"
    environ = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(workspace),
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    # As GitHub runs a `run:` step: bash, with the step's stdout and stderr in one log.
    step = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=workspace,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    log = step.stdout
    assert step.returncode == 1, log

    forged = runner_command(FORGED_NOTICE)
    reached = forged in [runner_command(line) for line in log.splitlines()]
    # Confined, the learner's code cannot reach the grader's stdout at all; unconfined it can, and is fenced.
    assert reached != sandbox.status().on, (
        "the learner's line reached the log" if reached else "it never reached the log"
    )
    points = {check.id: check.points for check in registry()}
    # Every check that runs the learner's Embed (embed itself, the whole model, ...) errors at the raise.
    report = json.loads((workspace / "grade-results" / "report.json").read_text())
    broken = [c["id"] for c in report["checks"] if c["status"] != "pass"]
    assert {"embed", "transformer"} <= set(broken) and {c["status"] for c in report["checks"] if c["id"] in broken} == {
        "error"
    }
    total, lost = sum(points.values()), sum(points[i] for i in broken)
    acted = effective_commands(log)
    assert [(name, properties) for name, properties, _ in acted] == [
        *[
            (
                "error",
                {
                    "file": "exercises/embedding.py",
                    "line": str(raise_line),
                    "title": f"{i}: error, 0/{points[i]} points",
                },
            )
            for i in broken
        ],
        ("notice", {"title": "GPT-2 grader"}),
    ]
    assert all(
        FORGED_NOTICE in data for _, _, data in acted[:-1]
    )  # the learner's text, inside the grader's own annotations
    assert acted[-1][2] == f"{total - lost}/{total} points, {len(points) - len(broken)} of {len(points)} checks pass"

    tokens = MarkdownIt("commonmark").enable("table").parse(summary.read_text())
    body = tokens[[t.type for t in tokens].index("tbody_open") :]
    assert sum(t.type == "tr_open" for t in body) == len(points)

    suites = list(JUnitXml.fromfile(str(workspace / "grade-results" / "junit.xml")))
    totals = [sum(getattr(suite, count) for suite in suites) for count in ("tests", "failures", "errors", "skipped")]
    assert totals == [len(points), 0, len(broken), 0]
    assert [case.name for suite in suites for case in suite] == list(points)


def grade_called_by(workspace: Path, workflow: dict, tmp_path: Path) -> list[str]:
    """The arguments the grade step passes to `grade`, its run script run as GitHub runs it (bash, the step's `env`)
    with a `grade` on PATH that only records them."""
    recorder = tmp_path / "bin" / "grade"
    recorder.parent.mkdir(parents=True)
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / "argv"}\n')
    recorder.chmod(0o755)
    step = grade_step(workflow)
    environ = {**os.environ, **step.get("env", {}), "PATH": f"{recorder.parent}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=workspace, env=environ
    )
    assert ran.returncode == 0
    return (tmp_path / "argv").read_text().splitlines()


def test_the_workflow_grades_every_check_and_a_release_for_an_assignment_grades_it(tmp_path):
    assert "--assignment" not in grade_called_by(tmp_path, load("grade.yml"), tmp_path / "course")
    release = tmp_path / "release"
    build_release(release, assignment="part1")  # make release ASSIGNMENT=part1
    argv = grade_called_by(release, yaml.safe_load((release / ".github/workflows/grade.yml").read_text()), tmp_path)
    assert argv[argv.index("--assignment") + 1] == "part1" and argv[0] == "--github"
    actionlint, zizmor = lint(release)
    assert (actionlint.returncode, actionlint.stdout + actionlint.stderr) == (0, "")
    assert zizmor.returncode == 0 and "No findings" in zizmor.stdout, zizmor.stdout + zizmor.stderr
