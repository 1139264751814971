"""Layers by process: the grader's own process never imports torch or transformer_lens, and the
import contracts in pyproject.toml ([tool.importlinter]: layers by process, no cycles) hold."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from repo import REPO

# The grader's process: every module of grader/host/ and grader/shared/, with the registry it reads (each
# part's declarations, which `registry()` imports).
GRADERS_LAYER = """
import importlib, json, pkgutil, sys
import grader.host, grader.shared
modules = [m.name for p in (grader.host, grader.shared) for m in pkgutil.walk_packages(p.__path__, p.__name__ + ".")]
for name in modules:
    importlib.import_module(name)
importlib.import_module("grader.checks").registry()
heavy = ("torch", "transformer_lens", "transformers")
others = ("grader.learner", "grader.builder")  # the learner's process and the reference builder's
loaded = [m for m in sys.modules if m.split(".")[0] in heavy or m.startswith(others)]
print(json.dumps({"imported": modules, "heavy": sorted(loaded)}))
"""
# A whole grading in the grader's process, the HTML report's figures included; then what it had loaded.
GRADING = """
import json, sys
from grader.host.main import main
sys.argv = ["grade", *sys.argv[1:]]
code = main()
others = ("torch", "transformer_lens", "transformers", "grader.learner", "grader.builder")
print(json.dumps({"code": code, "loaded": sorted(m for m in sys.modules if m.startswith(others))}))
"""


def test_the_graders_process_imports_neither_torch_nor_the_other_processes_modules():
    ran = subprocess.run([sys.executable, "-c", GRADERS_LAYER], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout)
    assert {"grader.host.cli", "grader.host.verdict", "grader.host.render.html", "grader.host.render.text"} <= set(
        found["imported"]
    )
    assert found["heavy"] == []


def test_a_whole_grading_loads_nothing_of_the_other_processes(reference, tmp_path):
    """The registry, the runner, the verdicts and every renderer: not one module of the learner's process or the
    builder's, nor torch, enters the grader's (the checks name their drivers, they do not import them)."""
    html = str(tmp_path / "report.html")
    args = ["--solutions", "--reference", "random", "--quiet", "--html", html, "embed", "sampling", "beam", "kv_cache"]
    args += ["interp", "training", "induction.repeated_tokens"]
    ran = subprocess.run([sys.executable, "-c", GRADING, *args], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    found = json.loads(ran.stdout.strip().splitlines()[-1])
    assert found == {"code": 0, "loaded": []}


def test_grades_entry_point_imports_the_standard_library_alone_before_it_starts_the_worker():
    """grader.host.main starts the first worker before importing the grader: nothing it imports before may be more
    than the standard library and its two modules (with the leaves they read), or the worker waits for it."""
    heavy = "{'grader', 'pydantic', 'rich', 'numpy', 'torch', 'safetensors', 'psutil'}"
    code = (
        f"import json, sys, grader.host.main; print(json.dumps([m for m in sys.modules if m.split('.')[0] in {heavy}]))"
    )
    ran = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    imported = set(json.loads(ran.stdout))
    assert imported == {"grader", "grader.host", "grader.host.main", "grader.host.launch", "grader.shared",
                        "grader.shared.paths", "grader.shared.twin"}, imported  # fmt: skip


def test_the_import_contracts_hold():
    pytest.importorskip("importlinter", reason="import-linter 2.17 needs Python 3.11, where CI checks the contracts")
    lint_imports = Path(sysconfig.get_path("scripts")) / "lint-imports"
    ran = subprocess.run(
        [str(lint_imports), "--no-cache", "--no-logo"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert "0 broken" in ran.stdout


def layout_paths() -> set[str]:
    """The paths docs/layout.md's table names in its first column."""
    rows = [
        line.split("|")[1] for line in (REPO / "docs" / "layout.md").read_text().splitlines() if line.startswith("| `")
    ]
    return {path for row in rows for path in re.findall(r"`([^`]+)`", row)}


def test_the_layout_page_names_every_folder_and_module_of_the_grader_and_only_what_exists():
    """Every folder of grader/, and every module of the folders that are one process each but learner/ and
    checks/ (described as a whole), has a row."""
    named = layout_paths()
    assert sorted(path for path in named if not (REPO / path).exists()) == []
    grader = REPO / "grader"
    folders = {path for path in grader.iterdir() if path.is_dir() and path.name != "__pycache__"}
    listed = {f"grader/{path.name}/" for path in folders}
    for folder in folders - {grader / "learner", grader / "checks", grader / "schemas", grader / "templates"}:
        listed |= {f"grader/{folder.name}/{path.name}" for path in folder.glob("*.py") if path.name != "__init__.py"}
    listed |= {f"grader/{path.name}" for path in grader.glob("*.py") if path.name != "__init__.py"}
    assert sorted(listed - named) == []


def test_every_driver_a_check_names_is_a_function_of_the_learners_process():
    """The registry, which the grader's process imports, names drivers as "module:function" so that it
    never imports the learner's side; each name must still be a function there."""
    import importlib

    from grader.checks import registry

    named = {check.target.driver for check in registry() if check.target.driver}
    assert named
    for driver in named:
        module, _, function = driver.partition(":")
        assert module.startswith("grader.learner.drivers."), driver
        assert callable(getattr(importlib.import_module(module), function, None)), driver


def test_the_sandboxs_allow_list_is_the_folders_the_learners_process_imports():
    """sandbox.LEARNER_SIDE (what a check may read of the grader) names the learner's folder and the shared
    leaves, and everything the learner's process imports of the grader, even indirectly, lies there."""
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter, which needs Python 3.11")

    from grader.shared.sandbox import LEARNER_SIDE

    graph = grimp.build_graph("grader")
    learner = {m for m in graph.modules if m.startswith("grader.learner")}
    reached = set().union(*(graph.find_upstream_modules(m) for m in learner)) | learner
    folders = {m.split(".")[1] if m.count(".") else "__init__.py" for m in reached if m.startswith("grader")}
    assert folders <= set(LEARNER_SIDE) and "learner" in folders and "shared" in folders
    assert set(LEARNER_SIDE) == {"__init__.py", "learner", "shared"}
    on_disk = {path.name for path in (REPO / "grader").iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert {"host", "builder", "learner", "shared", "checks"} <= on_disk
