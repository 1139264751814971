"""`grade`'s entry point: the first learner's process started before the rest of the grader is imported.

Every grading waits for its first worker, which imports torch; the grader's own imports (pydantic, rich, the checks:
about 0.35 s) then run beside it instead of before it. Where the arguments plainly ask for no grading, none starts.
"""

from __future__ import annotations

import sys

from grader.host.launch import Started

NO_GRADING = {
    "-h",
    "--help",
    "--list",
    "--assignments",
    "--download",
    "--play",  # the playground starts a learner's process of its own
}  # grade's options that start no learner's process


def wants_grading(argv: list[str]) -> bool:
    """Whether these arguments will, as far as can be told without the parser, grade: then a worker is wanted."""
    return not NO_GRADING & set(argv)


def main() -> int:
    argv = sys.argv[1:]
    started = Started() if wants_grading(argv) else None
    try:
        from grader.host.cli import main as grade

        return grade(argv, started)
    finally:
        if started is not None:  # ends the worker where the session did not take it: no grading after all
            started.close()
