"""`grade`: arguments -> reference -> learner's process -> verdicts -> renderers -> exit code.

Heavy modules (torch, rich) are imported only once a command needs them, so `grade --help` is quick.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .paths import REPO_ROOT, default_exercises


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="grade", description="Grade your GPT-2 modules against the real GPT-2.")
    p.add_argument("checks", nargs="*", metavar="CHECK", help="check ids or prefixes to grade (default: all), e.g. attention mlp")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--exercises", type=Path, metavar="PATH", help="grade the package at PATH (default: ./exercises)")
    source.add_argument("--solutions", action="store_true", help="grade the reference solutions in solutions/")
    p.add_argument("--reference", choices=("auto", "gpt2", "random"), default="auto", help="gpt2: the released weights; random: a seeded random model of the same shape; auto (default): gpt2 when cached or downloadable, else random")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON to FILE")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="time allowed per check (default: 60)")
    p.add_argument("--list", action="store_true", help="list the checks and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from .checks import UnknownCheck, registry, select

    if args.list:
        for check in registry():
            print(f"{check.id:24} {check.points} pt  {check.summary}")
        return 0
    try:
        checks = select(args.checks)
    except UnknownCheck as error:
        print(f"grade: {error}", file=sys.stderr)
        return 2
    package = REPO_ROOT / "solutions" if args.solutions else (args.exercises or default_exercises())
    if not (package / "__init__.py").is_file():
        print(f"grade: {package} is not a Python package (no __init__.py)", file=sys.stderr)
        return 2
    return grade(checks, package.resolve(), args)


def grade(checks, package: Path, args) -> int:
    from rich.console import Console

    from .pipeline import grade_package
    from .refcache import ReferenceUnavailable, ensure_reference
    from .render import text
    from .runner import DEFAULT_TIMEOUT

    console = Console()
    errors = Console(stderr=True)
    try:
        with errors.status("preparing the reference") as status:
            reference = ensure_reference(args.reference, lambda message: status.update(message))
    except ReferenceUnavailable as error:
        print(f"grade: {error} (--reference random grades offline)", file=sys.stderr)
        return 2
    with errors.status(f"running {len(checks)} checks on {package}"):
        report = grade_package(package, checks, reference, args.timeout or DEFAULT_TIMEOUT)
    text.print_report(report, console)
    if args.json:
        from .render import json as json_render

        try:
            args.json.write_text(json_render.render(report) + "\n")
        except OSError as error:
            print(f"grade: could not write {args.json}: {error.strerror or error}", file=sys.stderr)
    return 0 if report.passed else 1
