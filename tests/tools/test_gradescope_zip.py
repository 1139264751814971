"""Gradescope's autograder zip, end to end: built, unpacked into an /autograder-shaped tree, set up by its own
setup.sh (against the packages already installed: pip is the one step left out), then run_autograder on a
correct, a partly wrong and a broken submission, each results.json validated against Gradescope's schema."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest
from repo import REPO, SOLUTIONS, write_variant

from grader.host.platforms.gradescope.bundle import SCRIPTS, build_zip
from grader.host.tools.release import ReleaseError

BIN = Path(sys.executable).parent
SCHEMA = json.loads((REPO / "grader" / "host" / "platforms" / "gradescope" / "results.schema.json").read_text())


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("zip") / "autograder.zip"
    build_zip(out)
    return out


def test_the_zip_holds_the_scripts_and_the_learner_repository_without_solutions(autograder_zip):
    with zipfile.ZipFile(autograder_zip) as archive:
        entries = {info.filename: info for info in archive.infolist()}
    assert all(stat.S_IMODE(entries[name].external_attr >> 16) == 0o755 for name in SCRIPTS)
    assert {"pyproject.toml", "grader/host/cli.py", "exercises/attention.py", "README.md"} <= set(entries)
    assert not [name for name in entries if name.startswith("solutions/")]


def test_the_scripts_are_shellcheck_clean(tmp_path, autograder_zip):
    with zipfile.ZipFile(autograder_zip) as archive:
        archive.extractall(tmp_path, members=list(SCRIPTS))
    linted = subprocess.run([str(BIN / "shellcheck"), *(str(tmp_path / name) for name in SCRIPTS)], capture_output=True)
    assert linted.returncode == 0, linted.stdout.decode()


def pip_left_out(directory: Path) -> dict:
    """PATH and the rest for the scripts: `python3` is this interpreter, whose `-m pip` only records its call."""
    directory.mkdir()
    shim = directory / "python3"
    shim.write_text(
        f'#!/bin/sh\nif [ "$1 $2" = "-m pip" ]; then echo "$*" >> "{directory}/pip.log"; exit 0; fi\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    shim.chmod(0o755)
    return {"PATH": f"{directory}:{os.environ['PATH']}"}


@pytest.mark.slow
def test_setup_then_run_autograder_on_three_submissions(reference, autograder_zip, tmp_path):
    root = tmp_path / "autograder"
    with zipfile.ZipFile(autograder_zip) as archive:
        archive.extractall(root / "source")
    for name in SCRIPTS:
        (root / "source" / name).chmod(0o755)
    env = {**os.environ, **pip_left_out(tmp_path / "bin"), "AUTOGRADER_ROOT": str(root)}
    setup = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env, capture_output=True, text=True)
    assert setup.returncode == 0, setup.stderr[-3000:]
    installs = (tmp_path / "bin" / "pip.log").read_text().splitlines()
    assert [line.split()[2] for line in installs] == ["install", "install"] and installs[1].endswith("install .")
    submissions = {
        "correct": SOLUTIONS,
        "partly_wrong": write_variant(tmp_path / "wrong", {"normalization.py": [("unbiased=False", "unbiased=True")]}),
        "broken": write_variant(tmp_path / "broken", {"attention.py": [("import einops", "import einops(")]}),
    }
    scores = {}
    for name, package in submissions.items():
        shutil.rmtree(root / "submission", ignore_errors=True)
        shutil.rmtree(root / "results", ignore_errors=True)
        shutil.copytree(package, root / "submission" / "exercises")
        ran = subprocess.run([str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True)
        assert ran.returncode == 0, (name, ran.stderr[-3000:])
        results = json.loads((root / "results" / "results.json").read_text())
        jsonschema.validate(results, SCHEMA)
        scores[name] = (
            sum(test["score"] for test in results["tests"]),
            sum(test["max_score"] for test in results["tests"]),
        )
    earned = {name: score for name, (score, _) in scores.items()}
    maximum = scores["correct"][1]
    assert earned["correct"] == maximum
    assert 0 < earned["partly_wrong"] < maximum and 0 < earned["broken"] < earned["partly_wrong"]


def test_a_zip_for_an_assignment_grades_it_and_an_unknown_one_writes_nothing(tmp_path):
    out = tmp_path / "part1.zip"
    build_zip(out, assignment="part1")  # make gradescope ASSIGNMENT=part1
    root = tmp_path / "autograder"
    with zipfile.ZipFile(out) as archive:
        archive.extractall(root / "source", members=[*SCRIPTS, "assignments.toml"])
    (root / "submission" / "exercises").mkdir(parents=True)
    bin_dir = tmp_path / "bin"  # a python3 that records how run_autograder calls the grader
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / "argv"}\n')
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "AUTOGRADER_ROOT": str(root)}
    ran = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:2] == ["-m", "grader"] and argv[argv.index("--assignment") + 1] == "part1"
    linted = subprocess.run([str(BIN / "shellcheck"), str(root / "source" / "run_autograder")], capture_output=True)
    assert linted.returncode == 0, linted.stdout.decode()
    with pytest.raises(ReleaseError, match="no assignment 'week9'"):
        build_zip(tmp_path / "week9.zip", assignment="week9")
    assert not (tmp_path / "week9.zip").exists()
