"""A learner's file that does not import, and the grader's module given in its place to the files that import it.

One syntax error in attention.py would otherwise stop every file that imports it (block.py, interp.py, kv_cache.py,
...): its importers get a `StandInModule` instead, which serves each part the course's files export (`Attention`,
`gelu_new`, `qk_circuit`, ...) from the grader's own implementations (`SOURCES`' `__all__`), so that their checks
grade their own code. Asked for by itself, the file still raises its own error (`grader.learner.package`).
"""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

from grader.shared.wire import StandIn, StoodIn

SOURCES = ("grader.learner.drivers.stand_in_transformer", "grader.learner.drivers.stand_in_parts")
DOES_NOT_IMPORT: StandIn = "does not import"
UNFINISHED: StandIn = "does not finish importing"


class StandInModule(types.ModuleType):
    """The grader's module in the place of a learner's `file`: the grader's part of each name asked of it (PEP 562's
    `__getattr__` answers `from .file import name` too), remembered so that the check's reply says which. Where the
    learner's file imports but lacks a name its importer asks for, it wraps that module (`own`) and serves only
    the names it lacks."""

    def __init__(self, file: str, why: StandIn, line: int | None = None, own: types.ModuleType | None = None):
        super().__init__(f"grader.learner.stand_ins:{file}")  # not the learner's name: `LearnerPackage.module` tells
        self._file, self._why, self._line, self._own, self._served = f"{file}.py", why, line, own, []

    def __getattr__(self, name: str):
        if name.startswith("__"):  # what the import system asks of a module (__path__, __spec__, ...)
            raise AttributeError(name)
        if self._own is not None and hasattr(self._own, name):
            return getattr(self._own, name)
        for source in map(importlib.import_module, SOURCES):
            if name in source.__all__:
                if name not in self._served:
                    self._served.append(name)
                return getattr(source, name)
        raise AttributeError(f"the grader has no {name} to stand in for {self._file}'s")

    def stood_in(self) -> StoodIn | None:
        """What the check's reply says of this stand-in: None where no learner's file took a part of it."""
        return StoodIn(self._file, list(self._served), self._why, self._line) if self._served else None


def learner_imports(package: Path, file: str) -> dict[str, set[str]]:
    """The package's files that `file` imports relatively (`from .attention import Attention`, `from . import mlp`),
    each with the names it takes from it; {} where the file does not parse (its own error says why)."""
    try:
        tree = ast.parse((package / f"{file}.py").read_text(), f"{file}.py")
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level != 1:
            continue
        names = {alias.name for alias in node.names} - {"*"}
        if node.module:
            found.setdefault(node.module.split(".")[0], set()).update(names)
        else:  # from . import mlp: the files themselves
            found.update({name: found.get(name, set()) for name in names})
    return {name: names for name, names in found.items() if name != file and (package / f"{name}.py").is_file()}
