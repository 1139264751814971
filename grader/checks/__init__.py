"""The registry of checks: one small declaration per check, in the modules under grader/checks/.

A check says which learner object to build (`Target`), how the reference computes its cases
(`cases`, run once when the reference cache is built), and how outputs are compared. Nothing here
knows about output formats or processes. Each part of the course is a package here, with one module per check
that declares its `CHECK` and its `PAGE` of docs/course/, which places it in the course; docs/adding-a-check.md
says how to add one.
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

    from grader.builder.interface import Reference


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


def driven(file: str, name: str, driver: str | None, method: str | None = None) -> Target:
    """`name` of exercises/<file>.py called through its part's drivers, `grader.learner.drivers.<file>:<driver>`
    (None: called directly); a plain function unless `method` is given."""
    return Target(file, name, method, driver=driver and f"grader.learner.drivers.{file}:{driver}")


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
    config: dict[str, int] = field(default_factory=dict)  # another model's Config fields; `overrides` its weights


@dataclass(frozen=True)
class Run:
    """How the learner's process runs a check beyond calling its target; a check that needs none of it leaves it out."""

    capture: tuple[Literal["locals", "modules"], ...] = ()  # what the learner's process records for diagnosis
    watch_inputs: bool = False  # the arguments are sent back after the call: one the target changed in place is named
    # Libraries its driver imports on first use, slow to import: imported once in the worker before the fork, and the
    # checks that need one run in the lane that imported it (runner.lanes.Schedule).
    warm_imports: tuple[str, ...] = ()
    min_timeout: float | None = None  # seconds this check is allowed at least, whatever --timeout says
    # A check that counts random draws: (counts, expected) -> whether a case's first round leaves it undecided. Those
    # cases are drawn again with another seed and their counts summed (grader/host/runner/rounds.py), decided in the
    # grader's process so that the expected answer never enters the learner's.
    draws_again: Callable[[Any, Any], bool] | None = None


@dataclass(frozen=True)
class Check:
    """What is graded: the target, its cases, how outputs compare, the points, and the checks of the parts it calls
    (`uses`: a failure there is named first). Its page places it in the course, and so in a part (`part`). Which
    checks may run at the same time is read from what their cases hold (grader.builder.reference.may_run_beside)."""

    id: str
    points: int
    target: Target
    summary: str
    cases: Callable[[Reference], list[Case]]
    comparison: Callable[..., Any] | None = None  # (actual, expected, tolerance) -> CaseComparison; None: allclose
    tolerance: Tolerance = Tolerance()
    expected_from: str = "GPT-2"  # where the expected values come from, as failure messages say
    notes: Callable[[dict[str, Any]], list[str]] | None = None  # a passing check's notes, from its evidence
    uses: tuple[str, ...] = ()
    run: Run = Run()
    page: str = ""  # its page of docs/course/ (e.g. "05-attention.md"): the module's PAGE, set by check_in

    @property
    def part(self) -> str:
        """The part of the course its page is in: the last whose first page comes before it ("" for no page)."""
        return next((part for part, first in reversed(PARTS.items()) if self.page and first <= self.page), "")


# The course's parts in the order a learner meets them, each with its first page of docs/course/ (numbered in reading
# order): a check's page places it in its part. Within a part, checks follow their pages, and on one page a check comes
# after those it `uses`: grade --list, the reports and the notebooks follow that order, so a new check file needs no
# line anywhere else.
PARTS = {
    "model": "01-the-model.md",
    "sampling": "10-sampling-and-beam-search.md",
    "interp": "14-looking-inside.md",
    "training": "16-training.md",
    "induction": "18-induction-heads.md",
    "experiments": "20-open-questions.md",
}


class MisplacedCheck(LookupError):
    pass


def registry() -> tuple[Check, ...]:
    """Every check, in the order a learner meets them: the CHECK of each module under grader/checks/."""
    modules = (importlib.import_module(f"{__name__}.{name}") for name in check_modules())
    checks = [check_in(module) for module in modules]
    misplaced = [check.id for check in checks if not check.part]
    if misplaced:  # a check no learner would meet in order: say so rather than grade it somewhere arbitrary
        raise MisplacedCheck(
            f"{', '.join(misplaced)}: each check's module must declare PAGE, its page of docs/course/, which places "
            "it in a part of PARTS in grader/checks/__init__.py (docs/adding-a-check.md)"
        )
    by_page = sorted(checks, key=lambda check: check.page)  # stable: the modules' own order
    return tuple(after_what_they_use(by_page))


def after_what_they_use(checks: list[Check]) -> list[Check]:
    """The checks in their order, except that a check waits for the checks on its page that it `uses`
    (attention after attention.causal_mask): a stable topological order."""
    placed, waiting = [], list(checks)
    while waiting:
        blocked = {c.id for c in waiting if c.uses and set(c.uses) & {w.id for w in waiting if w.page == c.page}}
        ready = next((c for c in waiting if c.id not in blocked), waiting[0])  # a cycle: keep the modules' order
        placed.append(ready)
        waiting.remove(ready)
    return placed


def check_modules() -> list[str]:
    """The modules under grader/checks/ that declare checks, dotted from here: every one but a package's
    `__init__` and a helper (`_common`); in each package, those its `ORDER` names first, in that order (the checks
    that share a page), then the rest by name."""
    root = Path(__file__).parent
    names = sorted(".".join(path.relative_to(root).with_suffix("").parts) for path in root.rglob("[!_]*.py"))
    return sorted(names, key=place_in_package)


def place_in_package(name: str) -> tuple[str, int]:
    package, _, module = name.rpartition(".")
    order = getattr(importlib.import_module(f"{__name__}.{package}"), "ORDER", ()) if package else ()
    return package, order.index(module) if module in order else len(order)


def check_in(module) -> Check:
    """A module's check, on the module's `PAGE`."""
    return replace(module.CHECK, page=getattr(module, "PAGE", ""))


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
