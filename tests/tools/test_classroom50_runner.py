"""Classroom 50's own runner on this course's bundle, end to end, as a push runs it: the bundle built by its command,
committed into a config repository laid out as `gh teacher` lays it out, published by publish-pages.yaml's own
`run:` steps, served on 127.0.0.1 in place of GitHub Pages, and graded by autograde-runner.yaml's own "Grade
details" step (which fetches runner.py from Pages and runs it) in a learner's checkout, with the grade job's
environment read from the workflow. pip's installs are recorded instead of run (test_classroom50's stand-in), and
the reference is the session's random one, offline.

Classroom 50's files have no license, so none is copied into this repository: they are read from a config repository
named by $CLASSROOM50_CONFIG_REPO (a clone, or a bare mirror), by default the mirror below where it exists. Tested
with tbzdevops/classroom50 at TESTED_WITH.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import warnings
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jsonschema
import pytest
import yaml
from repo import REPO, SOLUTIONS
from test_classroom50 import NOTHING_TO_GRADE, SCHEMA, recording_pip

CONFIG_REPO_VARIABLE = "CLASSROOM50_CONFIG_REPO"
MIRROR = Path("/work/.mirror/tbzdevops+classroom50/repo")  # where a bare mirror of tbzdevops/classroom50 may be
# tbzdevops/classroom50's commit of 2026-08-20 and its runner.py's blob (`git hash-object`; runner.py carries no
# version string): the runner these tests were last run against.
TESTED_WITH = "9cae13150cd39b09d5a0c806c5f95145574cd8c7"
RUNNER_BLOB = "b03a5bbd9780cbeb6d2aed296b0b6610ccac1031"
WORKFLOWS = Path(".github") / "workflows"
CLASSROOM, ASSIGNMENT, OWNER, ORG = "ml-fall-2026", "gpt2", "alice", "ml-org"
EXPRESSION = re.compile(r"^\$\{\{\s*needs\.setup\.outputs\.([\w-]+)\s*\}\}$")  # the grade job's env values
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": OWNER,
    "GIT_AUTHOR_EMAIL": f"{OWNER}@example.com",
    "GIT_COMMITTER_NAME": OWNER,
    "GIT_COMMITTER_EMAIL": f"{OWNER}@example.com",
}


def config_source() -> Path | None:
    named = os.environ.get(CONFIG_REPO_VARIABLE)
    return Path(named) if named else MIRROR if MIRROR.exists() else None


def skeleton(into: Path) -> Path:
    """The `.github/` that `gh teacher init` puts in a config repository, copied into `into` from the one named:
    from a clone's files, or from a bare mirror's HEAD. Skips where there is none."""
    source = config_source()
    how = (
        f"set {CONFIG_REPO_VARIABLE} to a clone of a Classroom 50 config repository "
        "(git clone https://github.com/tbzdevops/classroom50)"
    )
    if source is None:
        pytest.skip(f"Classroom 50's runner is not on this machine: {how}")
    if (source / ".github" / "scripts" / "runner.py").is_file():
        shutil.copytree(source / ".github", into / ".github")
        return into
    archive = subprocess.run(["git", "--git-dir", str(source), "archive", "HEAD", ".github"], capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"{source} holds no .github/scripts/runner.py: {how}")
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def steps(workflow: Path, job: str) -> list[dict]:
    return yaml.safe_load(workflow.read_text())["jobs"][job]["steps"]


def run_step(step: dict, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """A `run:` step as a Linux runner runs it (bash, -e and pipefail). Its text is Classroom 50's, unchanged: a step
    that uses an expression or another shell would need the runner's evaluation, which this does not do."""
    script = step["run"]
    assert "${{" not in script and step.get("shell", "bash") == "bash", step.get("name")
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def python3_first(directory: Path) -> str:
    """PATH with a `python3` first that is this test's interpreter: the runner's Python, with torch in it."""
    directory.mkdir(parents=True)
    (directory / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (directory / "python3").chmod(0o755)
    return os.pathsep.join([str(directory), os.environ["PATH"]])


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """The config repository's Pages site, served: (its URL, the config repository)."""
    root = tmp_path_factory.mktemp("classroom50-pages")
    config = skeleton(root / "classroom50")
    blob = subprocess.run(["git", "hash-object", str(config / ".github/scripts/runner.py")], capture_output=True)
    if blob.stdout.decode().strip() != RUNNER_BLOB:
        tested = f"Classroom 50's runner.py is not the one last tested ({RUNNER_BLOB}): docs/instructors.md says which"
        warnings.warn(tested, stacklevel=1)
    classroom = config / CLASSROOM
    built = subprocess.run(
        [sys.executable, "-m", "grader.host.platforms.classroom50.bundle", str(classroom / "autograders" / ASSIGNMENT)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    (classroom / "classroom.json").write_text(
        json.dumps({"schema": "classroom50/classroom/v1", "name": "ML", "short_name": CLASSROOM, "org": ORG})
    )
    entry = {"slug": ASSIGNMENT, "name": "GPT-2 from scratch", "mode": "individual", "autograder": "default"}
    (classroom / "assignments.json").write_text(
        json.dumps({"schema": "classroom50/assignments/v1", "assignments": [entry]})
    )
    runner_temp = root / "runner-temp"
    runner_temp.mkdir()
    env = {**os.environ, "RUNNER_TEMP": str(runner_temp), "PATH": python3_first(root / "bin")}
    for step in (step for step in steps(config / WORKFLOWS / "publish-pages.yaml", "build") if "run" in step):
        ran = run_step(step, config, env)
        assert ran.returncode == 0, (step["name"], ran.stdout, ran.stderr)
    site = config / "_site"
    assert (site / CLASSROOM / "autograders" / f"{ASSIGNMENT}.tar.gz").is_file()
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", config
    server.shutdown()
    server.server_close()


def git(checkout: Path, *args: str) -> str:
    ran = subprocess.run(["git", *args], cwd=checkout, env={**os.environ, **GIT_IDENTITY}, capture_output=True)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.decode().strip()


def learner_checkout(directory: Path, package: Path, planted: dict[str, Path]) -> Path:
    """A learner's repository as `gh student accept` starts it (the accept commit), then their work: `package` as
    exercises/, and each of `planted` committed as a link to where it names."""
    checkout = directory / f"{CLASSROOM}-{ASSIGNMENT}-{OWNER}"
    (checkout / ".github" / "workflows").mkdir(parents=True)
    git(checkout, "init", "-q", "-b", "main")
    (checkout / ".classroom50.yaml").write_text(f"classroom: {CLASSROOM}\nassignment: {ASSIGNMENT}\n")
    (checkout / ".github" / "workflows" / "autograde.yaml").write_text("name: autograde\n")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "Accept assignment")
    shutil.copytree(package, checkout / "exercises", ignore=shutil.ignore_patterns("__pycache__"))
    for name, target in planted.items():
        (checkout / name).symlink_to(target)
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "My work")
    return checkout


def graded_by_the_runner(pages, checkout: Path, work: Path) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """autograde-runner.yaml's "Grade details" step in `checkout`, with the grade job's environment: its `env:`
    (the setup job's outputs, as a setup on this assignment gives them) and what Actions sets. Returns the run and
    the step's outputs."""
    url, config = pages
    workflow = config / WORKFLOWS / "autograde-runner.yaml"
    job = yaml.safe_load(workflow.read_text())["jobs"]["grade"]
    sha = git(checkout, "rev-parse", "HEAD")
    setup_outputs = {
        "base-url": url,
        "classroom": CLASSROOM,
        "assignment": ASSIGNMENT,
        "submission-tag": f"submit/2026-12-03T20-15-00Z-{sha[:7]}",
        "secret": "",
        "mode": "individual",
        "allowed-files": "[]",
        "release-assets": "[]",
    }
    job_env = {name: setup_outputs[EXPRESSION.match(value)[1]] for name, value in job["env"].items()}
    for folder in ("home", "runner-temp"):
        (work / folder).mkdir(parents=True)
    actions = {
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": f"{ORG}/{checkout.name}",
        "GITHUB_REPOSITORY_OWNER": ORG,
        "GITHUB_SHA": sha,
        "GITHUB_REF": "refs/heads/main",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_ACTOR": OWNER,
        "GITHUB_ACTOR_ID": "1001",
        "GITHUB_WORKSPACE": str(checkout),
        "GITHUB_OUTPUT": str(work / "github_output"),
        "GITHUB_STEP_SUMMARY": str(work / "step_summary"),
        "RUNNER_TEMP": str(work / "runner-temp"),
        "HOME": str(work / "home"),  # the step adds the checkout to git's safe.directory in ~/.gitconfig
        "PATH": python3_first(work / "bin"),
        "PYTHONPATH": str(recording_pip(work / "shim")),
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
    }
    (step,) = [step for step in job["steps"] if step.get("id") == "autograde"]
    ran = run_step(step, checkout, {**os.environ, **actions, **job_env})
    lines = (work / "github_output").read_text().splitlines()
    return ran, dict(line.split("=", 1) for line in lines)


def runner_module(pages):
    """Classroom 50's runner.py as a module, for its own validation of a result."""
    spec = importlib.util.spec_from_file_location("classroom50_runner", pages[1] / ".github/scripts/runner.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def accepted_result(pages, checkout: Path, ran: subprocess.CompletedProcess) -> dict:
    """result.json as the runner left it, after its validation accepted it (else it says why and writes its own)."""
    assert ran.returncode == 0, (ran.stdout[-3000:], ran.stderr[-3000:])
    assert "runner: using per-assignment entrypoint" in ran.stdout
    assert "runner: autograder set status/summary; using as-is" in ran.stdout, ran.stderr[-3000:]
    result = json.loads((checkout / "result.json").read_text())
    error = runner_module(pages).validate_result(result, classroom=CLASSROOM, assignment=ASSIGNMENT, owner=OWNER)
    assert error is None
    jsonschema.validate(result, SCHEMA)
    return result


@pytest.mark.slow
def test_the_runner_grades_the_solutions_at_full_points(reference, pages, tmp_path):
    checkout = learner_checkout(tmp_path, SOLUTIONS, {})
    ran, outputs = graded_by_the_runner(pages, checkout, tmp_path / "job")
    result = accepted_result(pages, checkout, ran)
    assert outputs["status"] == "success" and outputs["head-sha"] == git(checkout, "rev-parse", "HEAD")
    assert result["score"] == result["max-score"] > 0 and all(test["passed"] for test in result["tests"])
    body = (checkout / "release-body.md").read_text()
    assert body.startswith(f"## GPT-2 grader: {result['score']}/{result['score']} points\n")
    assert (tmp_path / "job" / "step_summary").read_text() == body  # the runner shows the notes on the run's page


@pytest.mark.slow
def test_a_link_for_the_result_and_no_package_get_zero_points_and_nothing_written_outside(pages, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.md").write_text("kept")
    package = tmp_path / "package"
    shutil.copytree(SOLUTIONS, package, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    planted = {"result.json": outside / "result.json", "release-body.md": outside / "notes.md"}
    checkout = learner_checkout(tmp_path, package, planted)
    ran, outputs = graded_by_the_runner(pages, checkout, tmp_path / "job")
    result = accepted_result(pages, checkout, ran)
    assert sorted(path.name for path in outside.iterdir()) == ["notes.md"]
    assert (outside / "notes.md").read_text() == "kept"
    assert not (checkout / "result.json").is_symlink() and not (checkout / "release-body.md").is_symlink()
    assert outputs["status"] == "failure"
    assert result["score"] == 0 < result["max-score"]
    assert {(test["status"], test["message"]) for test in result["tests"]} == {("error", NOTHING_TO_GRADE)}
    assert result["tests"][0]["file"] == "exercises/__init__.py"
    heading = f"## GPT-2 grader: 0/{result['max-score']} points"
    assert (checkout / "release-body.md").read_text().splitlines() == [heading, "", NOTHING_TO_GRADE]
