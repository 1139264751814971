"""Layers by process: the grader's own process never imports torch or transformer_lens, and the
import contracts in pyproject.toml ([tool.importlinter]: layers by process, no cycles) hold."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

from conftest import REPO

# The grader's process: every module of the package but the reference builder's and the learner's
# process's, with the registry it reads (each part's declarations, which `registry()` imports).
OTHER_PROCESSES = ("reference", "corpus", "tokenizer", "learner", "drivers", "__main__")
GRADERS_LAYER = f"""
import importlib, json, pkgutil, sys
import grader, grader.render
modules = [f"grader.{{m.name}}" for m in pkgutil.iter_modules(grader.__path__) if m.name not in {OTHER_PROCESSES}]
modules += [f"grader.render.{{m.name}}" for m in pkgutil.iter_modules(grader.render.__path__)]
for name in modules:
    importlib.import_module(name)
importlib.import_module("grader.checks").registry()
heavy = ("torch", "transformer_lens", "transformers")
print(json.dumps({{"imported": modules, "heavy": sorted(m for m in sys.modules if m.split(".")[0] in heavy)}}))
"""


def test_the_graders_process_imports_neither_torch_nor_transformer_lens():
    ran = subprocess.run([sys.executable, "-c", GRADERS_LAYER], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout)
    assert {"grader.cli", "grader.verdict", "grader.render.html", "grader.render.text"} <= set(found["imported"])
    assert found["heavy"] == []


def test_the_import_contracts_hold():
    lint_imports = Path(sysconfig.get_path("scripts")) / "lint-imports"
    ran = subprocess.run(
        [str(lint_imports), "--no-cache", "--no-logo"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert "0 broken" in ran.stdout


def layout_paths() -> set[str]:
    """The paths the README's Layout table names in its first column."""
    section = (REPO / "README.md").read_text().split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {path for row in rows for path in re.findall(r"`([^`]+)`", row)}


def test_the_readme_layout_names_every_module_of_the_grader_and_only_what_exists():
    named = layout_paths()
    assert sorted(path for path in named if not (REPO / path).exists()) == []
    grader = REPO / "grader"
    modules = {f"grader/{path.name}" for path in grader.glob("*.py") if path.name != "__init__.py"}
    packages = {f"grader/{path.name}/" for path in grader.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert sorted((modules | packages) - named) == []


def test_every_driver_a_check_names_is_a_function_of_the_learners_process():
    """The registry, which the grader's process imports, names drivers as "module:function" so that it
    never imports the learner's side; each name must still be a function there."""
    import importlib

    from grader.checks import registry

    named = {check.target.driver for check in registry() if check.target.driver}
    assert named
    for driver in named:
        module, _, function = driver.partition(":")
        assert module.startswith("grader.drivers."), driver
        assert callable(getattr(importlib.import_module(module), function, None)), driver
