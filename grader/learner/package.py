"""The learner's package, imported under a private name, and the places in it a report points to."""

from __future__ import annotations

import ast
import contextlib
import functools
import gc
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import sys
import traceback
import types
from collections.abc import Sequence
from pathlib import Path

from grader.learner.stand_ins import DOES_NOT_IMPORT, UNFINISHED, StandInModule, learner_imports
from grader.shared.wire import Place, StoodIn

PACKAGE_NAME = "learner_package"


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300]}" if text else type(error).__name__


class SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles a learner's file from its source every time, and writes no bytecode: a .pyc written within
    the second of a save, at the same size, would pass for the saved file (watch mode saves often)."""

    def path_stats(self, path):
        raise OSError("the learner's files are never read from bytecode")  # SourceLoader then compiles the source


class LearnerFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of the learner's package, and only those, with SourceOnlyLoader; the libraries
    they import keep their bytecode caches."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(PACKAGE_NAME + ".") or not path:
            return None
        return importlib.machinery.FileFinder(path[0], (SourceOnlyLoader, [".py"])).find_spec(fullname, target)


class DoesNotFinishImporting(ImportError):
    """A file the import preflight found to hang, asked for by itself: never imported again."""


class LearnerPackage:
    """The learner's package, each file that does not import given to the files that import it as the grader's
    stand-in (`grader.learner.stand_ins`); `unfinished`, the files whose import hangs, stood in for from the start."""

    def __init__(self, path: Path, unfinished: Sequence[StoodIn] = ()):
        self.path = path.resolve()
        if not any(isinstance(finder, LearnerFinder) for finder in sys.meta_path):  # once per process
            sys.meta_path.insert(0, LearnerFinder())
        self.unfinished = {Path(stood.file).stem: stood for stood in unfinished}
        sys.modules.update(
            {full_name(file): StandInModule(file, UNFINISHED, stood.line) for file, stood in self.unfinished.items()}
        )
        init = self.path / "__init__.py"
        spec = importlib.util.spec_from_file_location(
            PACKAGE_NAME,
            init,
            loader=SourceOnlyLoader(PACKAGE_NAME, str(init)),
            submodule_search_locations=[str(self.path)],
        )
        if spec is None or spec.loader is None:
            raise ImportError(f"{self.path} is not a Python package (no __init__.py)")
        package = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE_NAME] = package
        spec.loader.exec_module(package)

    def module(self, file: str):
        """The learner's file, imported, its own error raised where it does not import: those of the files it imports
        stood in for first."""
        if not (self.path / f"{file}.py").is_file():
            raise LookupError(f"{file}.py is missing from {self.path}")
        if file in self.unfinished:
            raise DoesNotFinishImporting(self.unfinished[file].said())
        name = full_name(file)
        if isinstance(sys.modules.get(name), StandInModule):  # put there for another file's import
            del sys.modules[name]
        try:
            return importlib.import_module(name)
        except Exception:
            if not self.stand_ins_under(file):
                raise
        return importlib.import_module(name)

    def part(self, file: str, name: str):
        """`name` of the learner's `file` where that file imports, else the grader's stand-in for it (and the check's
        reply says so): a part the check builds on, not the one it grades."""
        stood_in = self.stood_in_for(file, {name}, ())
        return getattr(sys.modules[full_name(file)] if stood_in else self.module(file), name)

    def stand_ins_under(self, importer: str, chain: tuple[str, ...] = ()) -> bool:
        """Put the grader's stand-in in the place of each file `importer` imports, directly or through another, that
        does not import; whether one was put, so that importing `importer` again may succeed."""
        placed = False
        for file, names in learner_imports(self.path, importer).items():
            if file not in chain:
                placed |= self.stood_in_for(file, names, (*chain, importer))
        return placed

    def stood_in_for(self, file: str, names: set[str], chain: tuple[str, ...]) -> bool:
        """Whether `file`, or a file it imports, is stood in for, as it is put now where `file` does not import (after
        a stand-in for each file it imports that does not) or lacks one of `names`, the names its importer takes."""
        name = full_name(file)
        if isinstance(sys.modules.get(name), StandInModule):
            return True
        placed = False
        try:
            module = importlib.import_module(name)
        except Exception:
            placed, module = self.stand_ins_under(file, chain), None
            with contextlib.suppress(Exception):
                module = importlib.import_module(name) if placed else None
        if module is None:
            sys.modules[name] = StandInModule(file, DOES_NOT_IMPORT)
        elif not all(hasattr(module, part) for part in names):
            sys.modules[name] = StandInModule(file, DOES_NOT_IMPORT, own=module)
        else:
            return placed
        return True

    def stood_in(self) -> list[StoodIn]:
        """The stand-ins the learner's files took parts of, for the check's reply."""
        modules = [module for module in list(sys.modules.values()) if isinstance(module, StandInModule)]
        return [stood for stood in (module.stood_in() for module in modules) if stood]

    def attribute(self, file: str, name: str):
        module = self.module(file)
        if not hasattr(module, name):
            raise LookupError(f"{file}.py has no {name}")
        return getattr(module, name)

    def config(self):
        return self.attribute("config", "Config")()


def full_name(file: str) -> str:
    """The module name a file of the learner's package is imported under."""
    return f"{PACKAGE_NAME}.{file}"


def learner_frame(error: BaseException, package: Path) -> Place | None:
    """The innermost place in the learner's files where `error` came from, with the function there."""
    if isinstance(error, SyntaxError) and error.filename and Path(error.filename).resolve().is_relative_to(package):
        return Place(Path(error.filename).name, error.lineno, (error.text or "").strip())
    frames = [
        (frame, line)
        for frame, line in traceback.walk_tb(error.__traceback__)
        if Path(frame.f_code.co_filename).resolve().is_relative_to(package)
    ]
    if not frames:
        return None
    frame, line = frames[-1]
    return code_place(frame.f_code, line)


def code_place(code, line: int) -> Place:
    """file, line, that line's code, and the function it is in: the function a comprehension or a
    nested helper belongs to, as the learner wrote it (`Beams.generate`, not `<listcomp>`)."""
    return Place(
        Path(code.co_filename).name,
        line,
        linecache.getline(code.co_filename, line).strip(),
        qualified_name(code).split(".<locals>")[0],
    )


def qualified_name(code) -> str:
    """The qualified name of the function whose code this is. Python 3.10's code objects do not carry it: there
    it is the function object's that holds this code, where one is still alive, else the bare name."""
    if hasattr(code, "co_qualname"):
        return code.co_qualname
    functions = (f for f in gc.get_referrers(code) if isinstance(f, types.FunctionType) and f.__code__ is code)
    return next((f.__qualname__ for f in functions), code.co_name)


def describe(value) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def in_place_update(function) -> Place | None:
    """The first line of `function` that changes one of its arguments in place, before any rebinds that name:
    `x += ...`, `x[...] = ...`, `x.add_(...)` (torch's in-place methods end in `_`). Where an input comes back
    changed, the report points there rather than at the `def`."""
    code = getattr(function, "__code__", None)
    return None if code is None else in_place_in(code)


@functools.lru_cache(maxsize=64)
def in_place_in(code) -> Place | None:
    """`in_place_update` of the function whose code this is: its source read once per check, not once per case."""
    import inspect
    import textwrap

    try:
        lines, start = inspect.getsourcelines(code)
        definition = ast.parse(textwrap.dedent("".join(lines))).body[0]
    except (TypeError, OSError, SyntaxError, IndexError):
        return None
    if not isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    arguments = definition.args
    names = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]} - {"self"}
    for node in sorted(ast.walk(definition), key=lambda node: getattr(node, "lineno", 0)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Subscript) and argument_of(t.value, names) for t in targets):
                return code_place(code, start + node.lineno - 1)
            names -= {t.id for t in targets if isinstance(t, ast.Name)}  # rebound: a new tensor from here on
        changed = (isinstance(node, ast.AugAssign) and argument_of(node.target, names)) or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr.endswith("_")
            and not node.func.attr.startswith("_")
            and argument_of(node.func.value, names)
        )
        if changed:
            return code_place(code, start + node.lineno - 1)
    return None


def argument_of(node, names: set[str]) -> bool:
    """Whether `node` is one of the arguments `names`, or a part of one (`x[0]`)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return getattr(node, "id", None) in names


def source_place(function) -> Place | None:
    """Where the learner defined `function`: the place a failing check points to."""
    import inspect

    try:
        file, line = Path(inspect.getsourcefile(function)).name, inspect.getsourcelines(function)[1]
    except (TypeError, OSError):
        return None
    return Place(file, line, function=getattr(function, "__qualname__", ""))
