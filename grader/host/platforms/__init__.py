"""The platforms a grading's results go to (GitHub Actions, Gradescope, Classroom 50, ...), each a folder of its own
here: `grade` and the class view know none of them by name, and iterate this registry.

A platform's folder is a package whose `__init__.py` declares `PLATFORM`, importing nothing heavier than this module
(`grade --help` reads every platform's options); its `writer` module writes its results (`render` or `emitter`, as
`grader.host.render` says) and declares how the class view reads them back (`ReadBack`s, named in `read_backs`).
Adding one: docs/adding-a-platform.md.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

from grader.host.render import FORMATS, Option, Renderer
from grader.host.results import ReadBack


@dataclass(frozen=True)
class Platform:
    options: tuple[Option, ...] = ()  # grade's options for its writer (the first chooses it); none: it has none
    read_backs: tuple[str, ...] = ()  # its writer's ReadBacks, by name, in the order the class view asks them


def platforms() -> dict[str, Platform]:
    """Every platform's declaration, by its folder's name, in the folders' order."""
    names = sorted(module.name for module in pkgutil.iter_modules(__path__) if module.ispkg)
    return {name: importlib.import_module(f"{__name__}.{name}").PLATFORM for name in names}


def read_backs() -> list[ReadBack]:
    """How the class view reads back each platform's results."""
    found = []
    for name, platform in platforms().items():
        writer = importlib.import_module(f"{__name__}.{name}.writer") if platform.read_backs else None
        found += [getattr(writer, read_back) for read_back in platform.read_backs]
    return found


# Every format `grade` can show a report in, in the order it shows them: the terminal and the report files, then each
# platform's.
RENDERERS: tuple[Renderer, ...] = (
    *FORMATS,
    *(Renderer(name, p.options, where=f"{__name__}.{name}.writer") for name, p in platforms().items() if p.options),
)
