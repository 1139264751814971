"""The course's pages (docs/course/): which checks each page covers, and the block of each page that says what
the report says when one of them fails, generated from the checks' own declarations so that it never drifts.

    python -m grader.host.course           # rewrite the generated block of every page
    python -m grader.host.course --check   # exit 1 when a page's generated block is stale (nothing written)

`PAGES` is the one map from a page to the checks it covers: every registered check on exactly one page, in
course order. A report names the page of each failing check from it (`results.CheckResult.page`). The block
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

# Each page of docs/course/, in the order a learner reads them, with the checks it covers.
PAGES: dict[str, tuple[str, ...]] = {
    "README.md": (),
    "01-the-model.md": (),
    "02-embed.md": ("embed",),
    "03-pos-embed.md": ("pos_embed",),
    "04-layernorm.md": ("layernorm",),
    "05-attention.md": ("attention.causal_mask", "attention"),
    "06-mlp.md": ("gelu_new", "mlp"),
    "07-block.md": ("block",),
    "08-unembed.md": ("unembed",),
    "09-transformer.md": ("transformer",),
    "10-sampling-and-beam-search.md": (),
    "11-sampling.md": (
        "sampling.greedy",
        "sampling.temperature",
        "sampling.frequency_penalty",
        "sampling.basic",
        "sampling.top_k",
        "sampling.top_p",
        "sampling.generate",
    ),
    "12-beam-search.md": ("beam.generate", "beam.filter", "beam.search"),
    "13-kv-cache.md": ("kv_cache",),
    "14-looking-inside.md": (),
    "15-interp.md": (
        "interp.parameter_counts",
        "interp.logit_lens",
        "interp.qk_circuit",
        "interp.ov_circuit",
        "interp.fold_layernorm",
        "interp.direct_path",
        "interp.is_tied",
        "interp.erase_direction",
    ),
    "16-training.md": (),
    "17-training-loop.md": (
        "training.next_token_loss",
        "training.make_optimizer",
        "training.lr_at",
        "training.train_step",
        "training.evaluate",
        "training.trainer",
    ),
}
_PAGE_OF = {check_id: f"{COURSE_DIR}/{page}" for page, check_ids in PAGES.items() for check_id in check_ids}


def page_of(check_id: str) -> str | None:
    """The page that covers a check, relative to the repository's root (`docs/course/05-attention.md`); None for
    an id no page covers (a report built by hand)."""
    return _PAGE_OF.get(check_id)


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
    return {page: check_ids for page, check_ids in PAGES.items() if check_ids}


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
