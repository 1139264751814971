"""What a check's process may read (Linux's confinement of it: `grader.shared.sandbox`): the allow-list of paths.

The Python installation and every directory its imports search, minus the reference's libraries (transformer_lens,
transformers), the grader (but its learner side, `LEARNER_SIDE`) and the solutions; the learner's package; the few
system files a check needs. Worked out from the paths alone: no rule is made or enforced here.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

FORBIDDEN_PACKAGES = ("transformer_lens", "transformers")  # the reference's libraries
# The grader files a check may read: its process's folder and the shared leaves (tests/tools/test_layering.py
# holds the learner's imports to these).
LEARNER_SIDE = ("__init__.py", "shared", "learner")
SYSTEM_READABLE = (
    *("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/etc/ld.so.cache"),  # shared libraries, loaded on first use
    *("/dev/null", "/dev/urandom", "/dev/zero"),
    *("/proc/cpuinfo", "/sys/devices/system/cpu"),  # torch's CPU detection
)


def python_paths() -> list[Path]:
    """The interpreter's standard library and every directory its imports search, as they are now."""
    paths = {Path(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= {Path(entry) for entry in sys.path if entry}
    return sorted(path.resolve() for path in paths if path.is_dir())


def forbidden_paths(package: Path) -> set[Path]:
    """What no check may read: the reference's libraries, the grader (but its learner side), the solutions."""
    grader = Path(__file__).resolve().parents[1]
    forbidden = {grader, grader.parent / "solutions"} - {package}
    for directory in python_paths():
        forbidden |= {entry.resolve() for entry in directory.iterdir() if _is_forbidden(entry.name)}
    return forbidden


def _is_forbidden(name: str) -> bool:
    stem = name.split("-")[0].split(".")[0].lower()
    return stem in FORBIDDEN_PACKAGES


def _without(path: Path, forbidden: set[Path], above: set[Path]) -> list[Path]:
    """`path`, or, when something forbidden lies beneath it (`above`: every parent of a forbidden path), its other
    entries, recursively. A set, not each forbidden path's parents in turn: site-packages has hundreds of entries,
    and this runs before the first check of every grading."""
    if path in forbidden:
        return []
    if path not in above:
        return [path]
    return [granted for entry in resolved_entries(path) for granted in _without(entry, forbidden, above)]


def resolved_entries(directory: Path) -> list[Path]:
    """The entries of a resolved directory, in order, each resolved: only a link needs it (realpath's lstat of
    every component, for each of site-packages' entries, was most of the allow-list's time)."""
    with os.scandir(directory) as scan:
        entries = sorted(scan, key=lambda entry: entry.name)
    return [Path(entry.path).resolve() if entry.is_symlink() else Path(entry.path) for entry in entries]


def readable_paths(package: Path) -> list[Path]:
    """The allow-list: the interpreter, site-packages without the reference, the package, the learner side."""
    grader = Path(__file__).resolve().parents[1]
    forbidden = forbidden_paths(package)
    above = {parent for path in forbidden for parent in path.parents}
    readable = [
        granted
        for directory in python_paths()
        if directory != grader.parent
        for granted in _without(directory, forbidden, above)
    ]
    readable += [grader / name for name in LEARNER_SIDE]
    return readable + [package, *(Path(p) for p in SYSTEM_READABLE if os.path.exists(p))]
