"""The registry of checks: one small declaration per check, in the modules `COURSE` names.

A check says which learner object to build (`Target`), how the reference computes its cases
(`cases`, run once when the reference cache is built), and how outputs are compared. Nothing here
knows about output formats or processes. Each module of checks declares `CHECK` (part 1's package,
`model/`, has one module per check) or `CHECKS`; docs/adding-a-check.md says how to add one.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from grader.shared.types import Tolerance  # here too, for the part modules, which declare tolerances

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.reference import Reference


@dataclass(frozen=True)
class Target:
    """The learner's object under test: `name` in `<package>/<file>.py`, called through `method`.

    A class is built from the package's `Config()` and loaded with reference weights; with
    `method=None` the target is a plain function. `driver` ("module:function", run in the
    learner's process) replaces that default call when a check needs more, e.g. a sampler
    driven by a model.
    """

    file: str
    name: str
    method: str | None = "forward"
    driver: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name}.{self.method}" if self.method else self.name


@dataclass
class Case:
    """One call of the learner's target with the reference's expected answer.

    `weights` is the prefix of the reference state_dict loaded into the learner's module ("" for
    the whole model, None for a function); `overrides` replaces some of those parameters; `hint`
    is what it most likely means when this case alone fails. `steps` are the reference's
    intermediates in computation order (label -> tensor), for finding where the learner's
    computation first leaves GPT-2's; `mistakes` map a one-line hint to what that known mistake
    outputs on this case.
    """

    name: str
    args: list[Tensor]
    expected: Tensor
    weights: str | None = None
    overrides: dict[str, Tensor] = field(default_factory=dict)
    hint: str = ""
    extra: dict[str, Tensor] = field(default_factory=dict)  # more named inputs, for drivers
    steps: dict[str, Tensor] = field(default_factory=dict)
    mistakes: dict[str, Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    id: str
    part: str
    points: int
    target: Target
    summary: str
    cases: Callable[[Reference], list[Case]]
    comparison: Callable[..., Any] | None = None  # (actual, expected, tolerance) -> CaseComparison; None: allclose
    tolerance: Tolerance = Tolerance()
    watch_inputs: bool = False
    capture: tuple[Literal["locals", "modules"], ...] = ()  # what the learner's process records for diagnosis
    notes: Callable[[dict[str, Any]], list[str]] | None = None
    expected_from: str = "GPT-2"  # where the expected values come from, as failure messages say
    min_timeout: float | None = None  # seconds this check is allowed at least, whatever --timeout says
    uses: tuple[str, ...] = ()  # the checks of the parts its target calls: a failure there is named first
    reads_gpt2: bool = True  # False: its cases hold none of GPT-2's weights or activations (runner.lanes_for)


def on_stand_ins(checks: tuple[Check, ...]) -> tuple[Check, ...]:
    """A module's checks whose cases hold none of GPT-2's weights or activations: stand-in models, fixed
    logits, the corpus."""
    return tuple(replace(check, reads_gpt2=False) for check in checks)


# The course's parts in order (Check.part), each with the modules that declare its checks, in the order a learner
# meets them: grade --list, the reports and the notebooks follow it.
COURSE = {
    "model": (
        "model.embed",
        "model.pos_embed",
        "model.layernorm",
        "model.causal_mask",
        "model.attention",
        "model.gelu_new",
        "model.mlp",
        "model.block",
        "model.unembed",
        "model.transformer",
    ),
    "sampling": ("sampling", "beam", "kv_cache"),
    "interp": ("interp",),
    "training": ("training",),
}
PARTS = tuple(COURSE)


class UndeclaredChecks(LookupError):
    pass


def registry() -> tuple[Check, ...]:
    """Every check, in the order a learner meets them: the CHECK or CHECKS of each module COURSE names."""
    declared = [module for modules in COURSE.values() for module in modules]
    undeclared = sorted(set(check_modules()) - set(declared))
    if undeclared:  # a check file COURSE does not name would otherwise be silently never graded
        where = f"{', '.join(undeclared)} declared but not placed: add each to COURSE in grader/checks/__init__.py"
        raise UndeclaredChecks(f"{where}, where a learner meets it (docs/adding-a-check.md)")
    return tuple(check for module in declared for check in checks_in(importlib.import_module(f"{__name__}.{module}")))


def check_modules() -> list[str]:
    """The modules under grader/checks/ that declare checks, dotted from here: every one but a package's
    `__init__` and a helper (`_common`)."""
    root = Path(__file__).parent
    files = (path.relative_to(root).with_suffix("") for path in root.rglob("*.py"))
    return sorted(".".join(file.parts) for file in files if not file.name.startswith("_"))


def checks_in(module) -> tuple[Check, ...]:
    """A module's checks: its one `CHECK`, or its `CHECKS` in course order."""
    return module.CHECKS if hasattr(module, "CHECKS") else (module.CHECK,)


class UnknownCheck(ValueError):
    pass


def select(patterns: Sequence[str], checks: Sequence[Check] | None = None) -> list[Check]:
    """The checks a learner names, in course order: by id or part, an id prefix (`attention` is also
    `attention.*`), a glob, or a file of theirs (`embedding`, `embedding.py`, `exercises/embedding.py`);
    any case. A name that matches nothing raises UnknownCheck with the nearest names."""
    checks = list(registry() if checks is None else checks)
    if not patterns:
        return checks
    chosen = []
    for pattern in patterns:
        matches = matching(pattern, checks)
        if not matches:
            raise UnknownCheck(unknown(pattern, checks))
        chosen += [c for c in matches if c not in chosen]
    return [c for c in checks if c in chosen]


def matching(pattern: str, checks: Sequence[Check]) -> list[Check]:
    """By id, part or glob first; a file only when nothing else matches, so `sampling` stays the part."""
    name = pattern.strip().lower()
    by_id = [
        c for c in checks if name in (c.id, c.part) or c.id.startswith(name + ".") or fnmatch.fnmatchcase(c.id, name)
    ]
    return by_id or [c for c in checks if c.target.file == file_stem(name)]


def file_stem(name: str) -> str:
    """`exercises/embedding.py`, `embedding.py`, `.\\embedding.py` -> `embedding`."""
    last = name.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return last.removesuffix(".py")


def unknown(pattern: str, checks: Sequence[Check]) -> str:
    files = (f"{c.target.file}.py" for c in checks)
    names = dict.fromkeys([*(c.id for c in checks), *(c.part for c in checks), *files])
    near = difflib.get_close_matches(pattern.strip().lower(), list(names), n=3, cutoff=0.6)
    near += [] if near else difflib.get_close_matches(file_stem(pattern.lower()) + ".py", list(names), n=3, cutoff=0.6)
    suggestion = f"did you mean {' or '.join(repr(n) for n in near)}? " if near else ""
    return f"no check matches {pattern!r}; {suggestion}`grade --list` shows every check"


def listing(checks: Sequence[Check]) -> list[str]:
    """`grade --list`: parts, then the files of each, then their checks with points, in course order."""
    width = max(len(c.id) for c in checks)
    lines: list[str] = []
    for part in dict.fromkeys(c.part for c in checks):
        in_part = [c for c in checks if c.part == part]
        lines.append(f"{part} ({sum(c.points for c in in_part)} pt)")
        for file in dict.fromkeys(c.target.file for c in in_part):
            lines.append(f"  {file}.py")
            lines += [f"    {c.id:{width}}  {c.points} pt  {c.summary}" for c in in_part if c.target.file == file]
    return lines
