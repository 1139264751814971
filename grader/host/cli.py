"""`grade`: arguments -> reference -> learner's process -> verdicts -> renderers -> exit code.

Everything beyond the parser (the runner, pydantic, numpy, rich; torch only in the learner's process) is imported
once the arguments are parsed, and only what the command needs, so `grade --help` is quick.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from grader.host.limits import DEFAULT_MEMORY_LIMIT_GB, DEFAULT_TIMEOUT, DEVICES
from grader.host.platforms import RENDERERS
from grader.host.render import Unusable
from grader.shared.paths import REPO_ROOT, default_exercises

if TYPE_CHECKING:
    from grader.host.launch import Started
    from grader.host.refcache import Pause


def add_timeout_option(p: argparse.ArgumentParser) -> None:
    """--timeout, as grade and grader.host.tools.batch both take it."""
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"time allowed per check (default: {DEFAULT_TIMEOUT:g})",
    )


def add_switches(group, helps: dict[str, str]) -> None:
    """Options that take no value (store_true), each with its help."""
    for flag, help_text in helps.items():
        group.add_argument(flag, action="store_true", help=help_text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="grade", description="Grade your GPT-2 modules against the real GPT-2.")
    p.add_argument(
        "checks", nargs="*", metavar="CHECK", help="check ids or prefixes to grade (default: all), e.g. attention mlp"
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--exercises", type=Path, metavar="PATH", help="grade the package at PATH (default: ./exercises)"
    )
    source.add_argument("--solutions", action="store_true", help="grade the reference solutions in solutions/")
    p.add_argument(
        "--reference",
        choices=("auto", "gpt2", "random"),
        default="auto",
        help="gpt2: the released weights; random: a seeded random model of the same shape; "
        "auto (default): gpt2 when its weights are here, else random (the network is asked only before "
        "any reference was prepared; --download switches to gpt2)",
    )
    for option in (option for renderer in RENDERERS for option in renderer.options):
        if option.value:
            p.add_argument(option.flag, type=Path, metavar=option.value, help=option.help)
        else:
            add_switches(p, {option.flag: option.help})
    add_timeout_option(p)
    p.add_argument(
        "--memory-limit",
        type=float,
        default=DEFAULT_MEMORY_LIMIT_GB,
        metavar="GB",
        help=f"memory a check may allocate before it is stopped (default: {DEFAULT_MEMORY_LIMIT_GB:g}; 0: no limit)",
    )
    where = "where your modules, GPT-2's weights and the inputs go (default: cpu); auto: cuda, else mps, else cpu"
    p.add_argument("--device", choices=DEVICES, default="cpu", help=where)
    traced = "print every tensor your code names or returns, with its shape and GPT-2's, and the step it equals"
    add_switches(p, {"--trace": traced})
    confinement = {
        "--require-sandbox": "refuse to grade where the sandbox is not available (Gradescope, batch grading)",
        "--no-sandbox": "run checks unconfined (for debugging the grader; reports say so)",
    }
    add_switches(p.add_mutually_exclusive_group(), confinement)
    p.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seed of the random inputs (default: 0); the report prints it"
    )
    add_switches(p, {"--list": "list the checks and exit", "--assignments": "list the course's assignments and exit"})
    p.add_argument(
        "--assignment",
        metavar="NAME",
        help="grade the checks of assignment NAME (assignments.toml), with its points; CHECK names narrow it",
    )
    add_switches(p.add_mutually_exclusive_group(), TERMINAL_MODES)
    add_switches(p, {"--download": "fetch GPT-2 into the Hugging Face cache (online, once) and exit"})
    add_switches(p, PLAYGROUND)
    return p


PLAYGROUND = {
    "--play": "serve a page on 127.0.0.1 where your model and GPT-2 read the text you type (Ctrl-C stops it)",
    "--no-browser": "with --play: print the page's address, open no browser",
}


# Ways of grading that print to the terminal instead of the report, so they write no report file.
TERMINAL_MODES = {
    "--watch": "keep running: each save regrades the checks of the saved file and says what changed (Ctrl-C ends)",
    "--hint": "show the next hint (the idea, then where, then the numbers) for the first failing check",
    "--show": "print your module on GPT-2's weights: parameters, each step's shape, predictions, the diff",
}


def main(argv: list[str] | None = None, started: Started | None = None) -> int:
    """`grade`; `started`: what `grader.host.main` started before importing this (the first worker among it)."""
    args = parser().parse_args(argv)
    from grader.checks import listing, registry

    if args.download:
        return download()
    if args.list:
        print("\n".join(listing(registry())))
        return 0
    if args.assignments:
        return assignments_listed()
    if args.play:
        return played(args)
    from grader.host.runner import LearnerProcesses
    from grader.shared import sandbox

    sandbox.become_subreaper()  # a learner process that outlives its worker still ends with the grading
    try:
        with LearnerProcesses(limits_of(args), started=started) as processes:  # its worker imports torch meanwhile
            return selected_and_graded(args, processes)
    except KeyboardInterrupt:
        sandbox.end_descendants()  # the worker and the check it was running; a half-built cache entry is only staging
        print("grade: interrupted: nothing was written", file=sys.stderr)
        return 130


def limits_of(args):
    from grader.host.runner import Limits

    return Limits(
        timeout=args.timeout,
        memory_gb=args.memory_limit,
        trace=args.trace or args.show,  # --show prints every tensor the learner's code names
        sandbox=not args.no_sandbox,
        device=args.device,
    )


def selected_and_graded(args, processes) -> int:
    """The checks and the package the arguments name, graded; 2 where they name none."""
    from grader.checks import UnknownCheck
    from grader.host.assignments import AssignmentError, chosen

    try:
        checks = chosen(args.checks, args.assignment)
    except (UnknownCheck, AssignmentError) as error:
        print(f"grade: {error}", file=sys.stderr)
        return 2
    mode = next((flag for flag in TERMINAL_MODES if getattr(args, flag[2:])), None)
    if mode and any(not r.always for r in chosen_renderers(args)):  # --watch: a file would hold one run of many
        print(
            f"grade: {mode} reports in the terminal only; run grade without it to write report files", file=sys.stderr
        )
        return 2
    package = package_of(args)
    if package is None:
        return 2
    return grade(checks, package, args, processes)


def package_of(args) -> Path | None:
    """The learner's package the arguments name, resolved; None (said on stderr) where it is not one."""
    package = REPO_ROOT / "solutions" if args.solutions else (args.exercises or default_exercises())
    if not (package / "__init__.py").is_file():
        print(f"grade: {package} is not a Python package (no __init__.py)", file=sys.stderr)
        return None
    return package.resolve()


def played(args) -> int:
    """`grade --play`: the playground over the package the arguments name (grader.host.play.app)."""
    package = package_of(args)
    if package is None:
        return 2
    try:
        from grader.host.play.app import play
    except ImportError as error:  # the `play` extra: make play installs it
        print(f"grade: --play needs {error.name} (make play installs it, or pip install -e '.[play]')", file=sys.stderr)
        return 2
    return play(package, args.reference, args.timeout, browser=not args.no_browser)


def grade(checks, package: Path, args, processes) -> int:
    from rich.console import Console

    from grader.host.refcache import ReferenceUnavailable
    from grader.shared import sandbox

    confinement = sandbox.status()
    if args.require_sandbox and not confinement.on:
        print(f"grade: --require-sandbox, and there is none: {confinement.describe()}", file=sys.stderr)
        return 2
    # Everything the grader needs after the learner's code has run is imported before it runs, and
    # under GitHub Actions nothing printed from here on until the report is published is a workflow command.
    try:
        emits = [renderer.emitter(vars(args), say) for renderer in chosen_renderers(args)]
    except Unusable as error:
        print(f"grade: {error}", file=sys.stderr)
        return 2
    errors = Console(stderr=True)
    processes.start_for(checks)  # the second lane's worker, where the checks run in two
    try:
        reference = prepare_reference(args, errors, processes.paused, checks)
    except ReferenceUnavailable as error:
        print(f"grade: {error} (--reference random grades offline)", file=sys.stderr)
        return 2
    return graded(checks, package, args, reference, processes, emits, errors)


def graded(checks, package: Path, args, reference, processes, emits, errors) -> int:
    """Grade with `reference`, show the report with each of `emits`, and say what the exit code means."""
    from rich.console import Console

    from grader.host.pipeline import GradingRun, ReferenceTampered
    from grader.host.refcache import ReferenceUnavailable, discard
    from grader.shared import sandbox

    def rebuilt(tampered, error: ReferenceTampered):  # never judged from: rebuilt, and graded again
        print(f"grade: the reference cache did not verify ({error}); rebuilding it", file=sys.stderr)
        discard(tampered)  # no worker holds its files: a fork's close with it, and an unforked worker is replaced
        return prepare_reference(args, errors, processes.paused, checks)

    try:
        if args.watch:
            from grader.host.modes.watch import watch

            return watch(package, checks, reference, processes, Console(), not args.quiet, rebuilt)
        keep = bool(args.hint or args.show or args.html)  # what reads more than the report: the evidence
        whole, stages = None, hint_stages(checks, package) if args.hint else [checks]
        for stage in stages:
            run = GradingRun(package, stage, reference, processes=processes, keep_evidence=keep, rebuild=rebuilt)
            with errors.status(f"running {len(stage)} checks on {package}"):
                graded_now = run.finished()
            reference = run.reference
            whole = graded_now if whole is None else whole.then(graded_now)
            if not graded_now.report.passed:  # --hint's stages: a failing check is the one to give a hint for
                break
    except (ReferenceTampered, ReferenceUnavailable) as again:
        print(f"grade: no trustworthy reference: {again}", file=sys.stderr)
        return 2
    sandbox.end_descendants()  # nothing the learner's code started may touch what is written next
    if args.hint or args.show:
        return inspected(whole, package, args.hint)
    report = whole.with_figures() if args.html else whole.report  # the figures only for the page that draws them
    report = replace(report, assignment=args.assignment)
    for emit in emits:  # the terminal's report, then the files, then GitHub's step
        emit(report)
    if not report.passed:  # CI prints only "exit code 1": say what it means, and make's 0 (the Makefile's grade)
        passing = sum(check.status == "pass" for check in report.checks)
        said = f"{passing} of {len(report.checks)} checks pass; grade exits 1 until all do (make grade exits 0)"
        print(f"grade: {said}", file=sys.stderr)
    return 0 if report.passed else 1


def assignments_listed() -> int:
    """`grade --assignments`: one line each, or why the file cannot be read (exit 2)."""
    from grader.host.assignments import AssignmentError, listing, load

    try:
        print("\n".join(listing(load())))
    except AssignmentError as error:
        print(f"grade: {error}", file=sys.stderr)
        return 2
    return 0


def hint_stages(checks: list, package: Path) -> list[list]:
    """--hint's stages (grader.host.modes.hints.stages), said on stderr when there are two."""
    from grader.host.modes.hints import stages

    staged = stages(checks, package)
    if len(staged) > 1:
        say(f"--hint: grading up to {staged[0][-1].id} first, the check of the last hint, then the rest if they pass")
    return staged


def inspected(whole, package: Path, hint: bool) -> int:
    """`grade --hint` or `grade --show` on a grading and its evidence: the exit code is the grading's."""
    if hint:
        from grader.host.modes.hints import hint as give_hint

        return give_hint(whole.report, whole.evidence, package)
    from grader.host.modes.show import printout

    print("\n".join(printout(whole.report, whole.evidence)))
    return 0 if whole.report.passed else 1


def say(problem: str) -> None:
    """One line on stderr about what could not be done; the rest of the report stays intact."""
    print(f"grade: {problem}", file=sys.stderr)


def download() -> int:
    """`grade --download`: GPT-2's files into the Hugging Face cache, where `--reference auto` finds them."""
    from huggingface_hub import snapshot_download

    try:  # the weights once, as safetensors; not the TensorFlow, Flax and ONNX copies
        path = snapshot_download("gpt2", allow_patterns=["*.json", "*.txt", "model.safetensors"])
    except Exception as error:  # offline, a proxy, a full disk: each says why in its first line
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        print(f"grade: could not download GPT-2: {reason}", file=sys.stderr)
        return 2
    print(f"grade: GPT-2 is in the Hugging Face cache ({path}); `grade` now grades against it")
    return 0


def prepare_reference(args, errors, pause: Pause = contextlib.nullcontext, checks=None):
    """The reference cache entry of `checks` (every check when None: an entry holding every check serves any), with a
    progress bar while it is built (the first run only); outside a terminal (CI logs, `| tee`) plain lines instead,
    each step once, as a bar redrawn there is noise. A build runs inside `pause()` (`LearnerProcesses.paused`: no
    worker beside the builder)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from grader.host.refcache import ensure_reference

    ids = None if checks is None else [check.id for check in checks]
    if not errors.is_terminal:
        return ensure_reference(args.reference, plain_progress(), seed=args.seed, pause=pause, checks=ids)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=errors, transient=True
    ) as bar:
        task = bar.add_task("checking the reference cache", total=1.0)

        def progress(message: str, fraction: float | None = None) -> None:
            if fraction is None:
                bar.console.print(message)
            else:
                bar.update(task, description=message, completed=fraction)

        return ensure_reference(args.reference, progress, seed=args.seed, pause=pause, checks=ids)


def plain_progress():
    """A progress callback that prints each new message once, on stderr."""
    said = []

    def progress(message: str, fraction: float | None = None) -> None:
        if message not in said[-1:]:
            said.append(message)
            print(f"grade: {message}", file=sys.stderr, flush=True)

    return progress


def chosen_renderers(args) -> list:
    """The renderers this run shows its report with, in RENDERERS' order."""
    return [renderer for renderer in RENDERERS if renderer.chosen(vars(args))]
