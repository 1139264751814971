"""Adding a platform touches its folder and at most two files outside it, as docs/adding-a-platform.md says: its Toy
platform, added to a copy of the repository from the page's code alone, grades with `grade --toy` and the class view
reads its results back; and no module outside grader/host/platforms/ names a platform."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from repo import REPO

DOC = REPO / "docs" / "adding-a-platform.md"
FOLDER = "grader/host/platforms/toy/"
PLATFORM_NAMES = ("classroom50", "gradescope", "github", "nbgrader")


def section(title: str) -> str:
    return DOC.read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def toy_files() -> dict[str, str]:
    """The page's Python blocks, each a file named by its first line (`# PATH`)."""
    blocks = re.findall(r"^```python\n# (\S+)\n(.*?)^```", DOC.read_text(), re.MULTILINE | re.DOTALL)
    return {path: text for path, text in blocks}


def copy_of_the_repository(to: Path) -> Path:
    """The repository's files as a fresh clone has them (and this working tree's new ones), without its venv."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for name in listed:
        source = REPO / name
        if name.split("/")[0] == ".venv" or not source.is_file():
            continue
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, to / name)
    return to


def in_copy(copy: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=copy,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(copy)},
        timeout=600,
    )


def test_the_page_names_at_most_two_files_outside_the_folder_and_each_exists():
    outside = set(re.findall(r"^\d+\. `([^`]+)`", section("Outside its folder"), re.MULTILINE))
    assert 1 <= len(outside) <= 2 and all((REPO / path).is_file() for path in outside), outside
    assert toy_files() and all(path.startswith(FOLDER) for path in toy_files())


def test_nothing_outside_the_platforms_folder_imports_a_platform_by_name():
    named = re.compile(rf"grader\.host\.platforms\.({'|'.join(PLATFORM_NAMES)})\b")
    outside = [
        path.relative_to(REPO).as_posix()
        for path in (REPO / "grader").rglob("*.py")
        if "platforms" not in path.parts and named.search(path.read_text())
    ]
    assert outside == []


def test_the_toy_platform_grades_and_the_class_view_reads_it_back(reference, tmp_path):
    copy = copy_of_the_repository(tmp_path / "repo")
    for path, text in toy_files().items():
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        (copy / path).write_text(text)
    assert "--toy FILE" in in_copy(copy, "-m", "grader", "--help").stdout
    results = tmp_path / "results"
    results.mkdir()
    graded = in_copy(
        copy, "-m", "grader", "--solutions", "--reference", "random", "embed", "--toy", str(results / "ada.json")
    )
    assert graded.returncode == 0, graded.stderr
    written = json.loads((results / "ada.json").read_text())
    assert [(record["id"], record["status"]) for record in written["records"]] == [("embed", "pass")]
    read_back = (
        "import json, sys; from pathlib import Path; from grader.host.tools.classview.gather import read_results; "
        "learners = read_results([Path(sys.argv[1])], None, print, str); "
        "print(json.dumps([[l.name, l.statuses, l.score, l.max_score, l.source] for l in learners]))"
    )
    read = in_copy(copy, "-c", read_back, str(results))
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout.splitlines()[-1]) == [
        ["ada", {"embed": "pass"}, written["points"], written["of"], str(results / "ada.json")]
    ]
