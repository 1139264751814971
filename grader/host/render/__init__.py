"""One module per output format of the grader's own, each a function of a `Report`, and `FORMATS`, their options
and help; `grader.host.platforms.RENDERERS` adds each platform's writer, and is the one list that `grade` reads.

The options are declared here, by module name, so that `grade --help` imports no renderer (matplotlib
alone takes longer to import than the help takes to print); `grade` imports the module of each
format chosen, before the learner's code runs. A format's module has one entry point:
- `render(report) -> str`, a report file: its option names the FILE, and `grade` writes it there;
- `emitter(chosen, say) -> emit`, what shows the report elsewhere (the terminal, GitHub's step, Classroom 50's
  files): called before the learner's code runs, with its options' values by name, it returns
  `emit(report)`, which shows the report and says what went wrong through `say`, one line each. An emitter
  that cannot work here at all raises `Unusable`: `grade` then says why and grades nothing (exit 2).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grader.host.results import Report

Emit = Callable[["Report"], None]
Say = Callable[[str], None]


class Unusable(Exception):
    """A format that cannot be shown here (Classroom 50's outside its runner); the message says why, in a line."""


@dataclass(frozen=True)
class Option:
    flag: str
    help: str
    # What the option names: "FILE", where `grade` writes `render(report)`, or "DIR", which the format's emitter
    # writes into; "" makes it a switch.
    value: str = ""

    @property
    def name(self) -> str:
        """Its attribute on argparse's namespace: `--memory-limit` -> `memory_limit`."""
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Renderer:
    name: str  # the format's: its module in grader.host.render, or its platform's folder (grader.host.platforms)
    options: tuple[Option, ...]  # the first one chooses the format, unless it is always shown
    always: bool = False  # the terminal's report: every run shows it
    where: str = ""  # the module of its entry point, where it is not grader.host.render's module `name`

    @property
    def module(self) -> str:
        return self.where or f"{__name__}.{self.name}"

    def chosen(self, values: dict) -> bool:
        return self.always or bool(values[self.options[0].name])

    def emitter(self, values: dict, say: Say) -> Emit:
        """Imports the format's module; a file format's emit writes its FILE."""
        module = importlib.import_module(self.module)
        first = self.options[0]
        if first.value == "FILE":
            return file_writer(module.render, values[first.name], say)
        return module.emitter({option.name: values[option.name] for option in self.options}, say)


def file_writer(render: Callable[[Report], str], path: Path, say: Say) -> Emit:
    """A report file; one that cannot be written costs one line, not the others."""

    def emit(report: Report) -> None:
        try:
            path.write_text(render(report) + "\n")
        except OSError as error:
            say(f"could not write {path}: {error.strerror or error}")

    return emit


FORMATS = (  # the grader's own, in the order they show a report: the terminal first; then each platform's
    Renderer("text", (Option("--quiet", "leave out what your code printed during each check"),), always=True),
    Renderer("json", (Option("--json", "also write the results as JSON to FILE", value="FILE"),)),
    Renderer("junit", (Option("--junit", "also write the results as JUnit XML to FILE", value="FILE"),)),
    Renderer(
        "html",
        (
            Option(
                "--html",
                "also write a self-contained HTML page to FILE: the results, attention patterns beside GPT-2's, "
                "where outputs differ, the logit lens",
                value="FILE",
            ),
        ),
    ),
)
