"""Layers by process: the grader's own process never imports torch or transformer_lens, and the
import contracts in pyproject.toml ([tool.importlinter]: layers by process, no cycles) hold."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

from conftest import REPO

# The grader's process: every module of the package but the reference builder's and the learner's
# process's, with the registry it reads (each part's declarations, which `registry()` imports).
OTHER_PROCESSES = ("reference", "corpus", "learner", "drivers", "__main__")
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
