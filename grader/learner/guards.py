"""Courtesies for honest mistakes, inside the check's process: reference imports and reads refused with a
clear message. Not security: the sandbox (`grader.shared.sandbox`) and the grader's validation are."""

from __future__ import annotations

import importlib.abc
import os
import sys
from pathlib import Path

FORBIDDEN_IMPORTS = ("transformer_lens", "transformers", "solutions")


class Forbidden(ImportError):
    """The learner's code reached for the reference instead of computing."""


class ReferenceBlocker(importlib.abc.MetaPathFinder):
    """Refuses the modules that would let an exercise delegate to the reference."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in FORBIDDEN_IMPORTS:
            raise Forbidden(f"exercises may not import {fullname.split('.')[0]}: write the computation yourself")
        return None


def install_guards(forbidden_dirs: list[Path]) -> None:
    """Block reference imports, and reads of the solutions or the expected outputs, for good."""
    sys.meta_path.insert(0, ReferenceBlocker())
    prefixes = tuple(str(d) + os.sep for d in forbidden_dirs)

    def audit(event: str, args: tuple) -> None:
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(args[0]))
            if path.startswith(prefixes) or os.path.basename(path) == "expected.safetensors":
                raise Forbidden(f"exercises may not read {path}: write the computation yourself")

    sys.addaudithook(audit)
