"""The course's pages (docs/course/): which checks each page covers, and the block of each page that says what
the report says when one of them fails, generated from the checks' own declarations so that it never drifts.

    python -m grader.host.course           # rewrite the generated block of every page
    python -m grader.host.course --check   # exit 1 when a page's generated block is stale (nothing written)

Each check module names its page (`PAGE`); `pages()` lists the pages with the checks on each, in course order,
and a report names the page of each failing check (`page_of`, read by `results.CheckResult.page`). The block
between `<!-- generated: report -->` and `<!-- /generated -->` lists, per check, the hints of its named
mistakes and of its cases, as the reference cache entry records them (the case builders compute them when
the entry is built); the rest of a page is written by hand.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grader.checks import Check
    from grader.host.refcache import ReferenceData

COURSE_DIR = "docs/course"  # relative to the repository's root, as reports name the pages
START = "<!-- generated: report -->"
END = "<!-- /generated -->"
GENERATED_BY = "<!-- written by `python -m grader.host.course` from the checks' declarations: edit those, not this -->"


def pages() -> dict[str, tuple[str, ...]]:
    """Each page of docs/course/ in reading order (its README, then by number), with the checks it covers: those
    whose module declares it as PAGE, in course order."""
    from grader.checks import registry
    from grader.shared.paths import REPO_ROOT

    names = sorted((path.name for path in (REPO_ROOT / COURSE_DIR).glob("*.md")), key=lambda n: (n != "README.md", n))
    checks = registry()
    return {name: tuple(check.id for check in checks if check.page == name) for name in names}


def page_of(check_id: str) -> str | None:
    """The page that covers a check, relative to the repository's root (`docs/course/05-attention.md`); None for
    an id no page covers (a report built by hand)."""
    from grader.checks import registry

    return next((page_path(check) for check in registry() if check.id == check_id), None)


def page_path(check: Check) -> str | None:
    """The page that covers `check`, as `page_of` names it."""
    return f"{COURSE_DIR}/{check.page}" if check.page else None


class StalePage(ValueError):
    """A page lacks its generated block's markers; the message names it."""


def check_section(check: Check, reference: ReferenceData) -> list[str]:
    """What the report says of one check, as Markdown lines: its named mistakes' hints and its cases' hints."""
    cases = reference.cases(check.id)
    mistakes = list(dict.fromkeys(hint for case in cases for hint in case.mistakes))
    hinted: dict[str, list[str]] = {}
    for case in cases:
        if case.hint:
            hinted.setdefault(case.hint, []).append(case.name)
    lines = [
        f"### `{check.id}`: {check.summary} ({check.points} point{'s' * (check.points != 1)})",
        "",
        f"`grade {check.id}` tries `{check.target.label}` of `exercises/{check.target.file}.py` on "
        f"{len(cases)} case{'s' * (len(cases) != 1)}.",
    ]
    if check.uses:
        used = ", ".join(f"`{used}`" for used in check.uses)
        lines += [
            "",
            f"It calls what these checks grade: {used}. When one of them fails, the report says to fix it first.",
        ]
    if mistakes:
        lines += ["", "When your output equals a classic mistake's, the `next:` line says `most likely:` and names it:"]
        lines += ["", *(f"- {hint}" for hint in mistakes)]
    if hinted:
        lines += ["", "Cases built to expose one mistake: when only such cases fail, the message ends with their hint:"]
        lines += ["", *(f"- {', '.join(f'`{name}`' for name in names)}: {hint}" for hint, names in hinted.items())]
    if not mistakes and not hinted:
        lines += ["", "It names no classic mistake: the message says which case differs, and how."]
    return lines


def report_block(check_ids: Sequence[str], reference: ReferenceData) -> str:
    """A page's generated block, markers included."""
    from grader.checks import registry

    checks = {check.id: check for check in registry()}
    lines = [START, GENERATED_BY]
    for check_id in check_ids:
        lines += ["", *check_section(checks[check_id], reference)]
    return "\n".join([*lines, "", END])


def rewritten(name: str, text: str, block: str) -> str:
    """The page with its generated block replaced (the first START to the END after it)."""
    start = text.find(START)
    end = text.find(END, start)
    if start < 0 or end < 0:
        raise StalePage(f"{COURSE_DIR}/{name} has no `{START}` ... `{END}` block")
    return text[:start] + block + text[end + len(END) :]


def pages_with_checks() -> dict[str, tuple[str, ...]]:
    return {page: check_ids for page, check_ids in pages().items() if check_ids}


def refreshed(root: Path, reference: ReferenceData) -> dict[str, tuple[str, str]]:
    """Each page that covers checks: (its text now, its text with a fresh generated block), by name."""
    pages = {}
    for name, check_ids in pages_with_checks().items():
        text = (root / COURSE_DIR / name).read_text(encoding="utf-8")
        pages[name] = (text, rewritten(name, text, report_block(check_ids, reference)))
    return pages


def stale(root: Path, reference: ReferenceData) -> list[str]:
    """The pages whose generated block is not what the checks declare now."""
    return [name for name, (now, fresh) in refreshed(root, reference).items() if now != fresh]


def main(argv: list[str] | None = None) -> int:
    from grader.host.refcache import ReferenceUnavailable, ensure_reference
    from grader.shared.commands import tool_parser
    from grader.shared.paths import REPO_ROOT

    parser = tool_parser("grader.host.course", __doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page's block is stale")
    args = parser.parse_args(argv)
    try:
        said: list[str] = []  # the reference build's first line says what is going on; its progress, nothing

        def progress(message: str, fraction: float | None = None) -> None:
            if not said:
                said.append(message)
                print(f"course: {message} (building the random reference once, for the checks' hints)", file=sys.stderr)

        reference = ensure_reference("random", progress)
        pages = refreshed(REPO_ROOT, reference)
    except (ReferenceUnavailable, StalePage, OSError) as error:
        print(f"course: {error}", file=sys.stderr)
        return 1
    changed = [name for name, (now, fresh) in pages.items() if now != fresh]
    if args.check:
        for name in changed:
            print(f"course: {COURSE_DIR}/{name} is stale: run python -m grader.host.course", file=sys.stderr)
        return 1 if changed else 0
    for name in changed:
        (REPO_ROOT / COURSE_DIR / name).write_text(pages[name][1], encoding="utf-8")
        print(f"rewrote the generated block of {COURSE_DIR}/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
