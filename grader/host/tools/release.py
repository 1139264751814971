"""Build the learner's repository: everything needed to do and grade the exercises, no solution.

    python -m grader.host.tools.release OUTDIR

What goes in:
- `exercises/`, generated afresh from `solutions/` by `grader.host.tools.stubs`;
- the `grader/` package, `pyproject.toml`, the `Makefile` and `.gitignore`;
- the learner workflow, `.github/workflows/grade.yml` (feedback on every push), when it exists;
- `tests/conftest.py`, the session plugin and helpers it loads (TEST_SUPPORT), and each test module that
  declares `pytestmark = pytest.mark.learner`
  (a test module is instructor-only unless it says otherwise; learner modules must pass
  without `solutions/`);
- `README.md`, from `grader/templates/README.learner.md` with sections of the README filled in,
  less their instructor text (see BLOCK), and the files those sections
  link to or show (images under `docs/`);
- the pages of `docs/` and of its folders (the course's, `docs/course/`) the learner README links to,
  and those they link to in turn, each less its instructor text, with the
  files they link to or show. Every other page of `docs/` is listed in INSTRUCTOR_DOCS, and a learner
  text that links to one stops the build.

Files are taken from what git tracks or would track (ignored files never go). As a last guard,
the build fails when any line the stubs hide appears in any file of the release.
"""

from __future__ import annotations

import ast
import keyword
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from grader.host.assignments import AssignmentError, add_option, find
from grader.host.tools.stubs import strip_solutions, write_exercises
from grader.shared.commands import tool_parser
from grader.shared.paths import REPO_ROOT

WORKFLOW = (
    ".github/workflows/grade.yml"  # feedback on every push; Classroom 50's own workflow comes with `gh student accept`
)
TEST_SUPPORT = ("tests/conftest.py", "tests/support/reference_session.py", "tests/support/repo.py")
COPIED = ("pyproject.toml", "assignments.toml", "Makefile", ".gitignore", *TEST_SUPPORT, WORKFLOW)
UNASSIGNED = 'GRADE_ASSIGNMENT: ""'  # the workflow's line that `--assignment NAME` stamps
README_TEMPLATE = "grader/templates/README.learner.md"
INSTRUCTOR_SECTIONS = ("For instructors and maintainers",)  # README sections the learner README leaves out
# Pages of docs/ that never ship: the instructors' and the maintainers'. Every other page of docs/ must be
# linked from the learner README (or from a page it ships), so a new page is placed on purpose.
INSTRUCTOR_DOCS = (
    "docs/instructors.md",
    "docs/maintainers.md",
    "docs/speed.md",
    "docs/layout.md",
    "docs/adding-a-check.md",
    "docs/adding-a-platform.md",
    "docs/induction-model.md",
)
DOCS_PAGE = re.compile(r"docs/.+\.md")  # the pages of docs/ and of its folders (the course's, docs/course/)
INCLUDE = re.compile(r"^<!-- include: (.+) -->$", re.MULTILINE)
# What the learner README leaves out of the sections it includes, so that it names only what the
# release ships: a block between `<!-- instructors -->` and `<!-- /instructors -->` lines, and any
# other line that holds `<!-- instructors -->` (a table row: a comment line would end the table in
# the README itself).
BLOCK = re.compile(r"^<!-- instructors -->\n.*?^<!-- /instructors -->(?:\n|\Z)", re.MULTILINE | re.DOTALL)
MARKER_LINE = re.compile(r"^<!-- /?instructors\b.*-->$", re.MULTILINE)
INSTRUCTOR_LINE = re.compile(r"^.*<!-- instructors -->.*(?:\n|\Z)", re.MULTILINE)


class ReleaseError(RuntimeError):
    """The release cannot be built; the message says why in one line."""


def stamped(text: str, line: str, value: str, source: str) -> str:
    """`text` with its one `line` that holds `""` (`NAME = ""`, `NAME: ""`, `NAME=""`) holding `value` there
    instead (an assignment's name: letters, digits, '.', '_', '-', which need no escaping)."""
    if text.count(line) != 1:
        raise ReleaseError(f"{source} has no one line {line!r} to stamp")
    return text.replace(line, line.replace('""', f'"{value}"'))


def checked_assignment(name: str | None, root: Path) -> str | None:
    """The assignment's name, once `root`'s assignments.toml is known to hold it; None for every check."""
    if name is None:
        return None
    try:
        return find(name, root / "assignments.toml").name
    except AssignmentError as error:
        raise ReleaseError(str(error)) from None


# --- what goes in -------------------------------------------------------------------------------


def project_files(root: Path) -> list[str]:
    """Files git tracks or would track (new, not ignored), relative to root."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=root,
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        raise ReleaseError("git is not installed: the release copies the files git tracks") from None
    if listing.returncode:
        raise ReleaseError(f"{root} is not a git checkout: {listing.stderr.strip()}")
    return sorted(name for name in listing.stdout.split("\0") if name and (root / name).is_file())


def is_learner_test(path: Path) -> bool:
    """Whether a test module declares `pytestmark = pytest.mark.learner` (alone or in a list)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets
        ):
            return any(
                isinstance(n, ast.Attribute) and n.attr == "learner" and ast.unparse(n.value) == "pytest.mark"
                for n in ast.walk(node.value)
            )
    return False


def is_test_module(name: str) -> bool:
    """tests/<stage>/test_*.py."""
    path = PurePosixPath(name)
    return path.parts[0] == "tests" and path.name.startswith("test_") and path.suffix == ".py"


def learner_files(root: Path, files: list[str]) -> list[str]:
    def wanted(name: str) -> bool:
        if name in COPIED or name.startswith("grader/"):
            return True
        return is_test_module(name) and is_learner_test(root / name)

    return [name for name in files if wanted(name)]


def readme_sections(markdown: str) -> dict[str, str]:
    """Each second-level section of a Markdown text, heading line included, by heading."""
    from markdown_it import MarkdownIt

    lines = markdown.splitlines(keepends=True)
    tokens = MarkdownIt().parse(markdown)
    headings = [
        (token.map[0], token.tag, tokens[i + 1].content)
        for i, token in enumerate(tokens)
        if token.type == "heading_open" and token.tag in ("h1", "h2") and token.map
    ]
    ends = [start for start, _, _ in headings[1:]] + [len(lines)]
    return {
        title: "".join(lines[start:end]).rstrip()
        for (start, tag, title), end in zip(headings, ends, strict=False)
        if tag == "h2"
    }


def learner_readme(template: str, readme: str) -> str:
    """The template with each `<!-- include: HEADING -->` replaced by that section of the README,
    less what is for instructors (see BLOCK).

    Every section of the README must be included or listed in INSTRUCTOR_SECTIONS, so a new
    section is placed on purpose rather than silently left out.
    """
    sections = readme_sections(readme)
    included = INCLUDE.findall(template)
    unknown = [title for title in included if title not in sections]
    if unknown:
        raise ReleaseError(f"{README_TEMPLATE} includes the section {unknown[0]!r}, which README.md does not have")
    unplaced = [title for title in sections if title not in included and title not in INSTRUCTOR_SECTIONS]
    if unplaced:
        raise ReleaseError(
            f"README.md's section {unplaced[0]!r} is neither included in {README_TEMPLATE} "
            "nor in INSTRUCTOR_SECTIONS (grader/host/tools/release.py)"
        )
    return learner_text(INCLUDE.sub(lambda match: sections[match.group(1)], template))


def learner_text(markdown: str, source: str = "README.md") -> str:
    """The learner's text: instructor blocks and lines out."""
    text = BLOCK.sub("", markdown)
    stray = MARKER_LINE.search(text)  # before the lines go, as a marker line would go with them
    if stray:
        raise ReleaseError(f"{source}: the marker {stray.group(0)!r} has no partner (blocks do not nest)")
    return re.sub(r"\n{3,}", "\n\n", INSTRUCTOR_LINE.sub("", text))  # where a block went, one blank line


def linked_files(markdown: str) -> set[str]:
    """The relative paths a Markdown text links to or shows, such as an image under docs/."""
    from markdown_it import MarkdownIt

    targets = set()
    for token in MarkdownIt().parse(markdown):
        for child in token.children or []:
            target = str(child.attrs.get("src") or child.attrs.get("href") or "")
            if target and not urlparse(target).scheme and not target.startswith("#"):
                targets.add(target.partition("#")[0])
    return targets


def learner_docs(readme: str, pages: dict[str, str]) -> tuple[dict[str, str], set[str]]:
    """The pages of docs/ a learner gets, by path, as they ship, and the other files they and the
    README link to or show, relative to the repository's root.

    pages holds the text of every page of docs/, by path. A page ships when the learner README
    links to it, or a page that ships does; it ships less its instructor text, and only what is left
    of it is followed. Every page must ship or be in INSTRUCTOR_DOCS.
    """
    shipped: dict[str, str] = {}
    others: set[str] = set()
    queue = [("README.md", readme)]
    while queue:
        name, text = queue.pop()
        for target in sorted(linked_files(text)):
            path = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
            if path in INSTRUCTOR_DOCS:
                raise ReleaseError(f"the learner's {name} links to {path}, a page for instructors (INSTRUCTOR_DOCS)")
            if path in pages and path not in shipped:
                shipped[path] = learner_text(pages[path], path)
                queue.append((path, shipped[path]))
            elif path not in pages and path != "README.md":
                others.add(path)
    unplaced = sorted(set(pages) - set(shipped) - set(INSTRUCTOR_DOCS))
    if unplaced:
        raise ReleaseError(
            f"{unplaced[0]} is neither linked from the learner README (or a page it ships) "
            "nor in INSTRUCTOR_DOCS (grader/host/tools/release.py)"
        )
    return shipped, others


# --- the guard ----------------------------------------------------------------------------------


def hidden_lines(solutions: Path) -> set[str]:
    """The lines the stubs hide: in a solution file but not in its stub, stripped.

    Only lines that say something count: the solution markers reveal nothing, nor do lines with
    fewer than two names or numbers besides keywords (`break`, `else:`, `return x`, a bracket).
    """
    hidden: set[str] = set()
    for path in solutions.glob("*.py"):
        source = path.read_text()
        stub = {line.strip() for line in strip_solutions(source).splitlines()}
        hidden |= {line.strip() for line in source.splitlines() if line.strip() not in stub}
    return {line for line in hidden if says_something(line) and not re.fullmatch(r"#+ (BEGIN|END) SOLUTION", line)}


def says_something(line: str) -> bool:
    """Whether a line holds two things besides keywords: two names, or a name and a number."""
    names = set(re.findall(r"[^\W\d]\w*", line)) - set(keyword.kwlist)
    return len(names) + bool(re.search(r"\d", line)) >= 2


def leaked_lines(directory: Path, hidden: set[str]) -> list[str]:
    """`path: line` for every hidden line found in a file under directory."""
    leaks = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        leaks += [
            f"{path.relative_to(directory)}: {line.strip()}" for line in text.splitlines() if line.strip() in hidden
        ]
    return leaks


# --- building -----------------------------------------------------------------------------------


def build_release(outdir: Path, root: Path = REPO_ROOT, assignment: str | None = None) -> list[str]:
    """Write the learner repository to outdir (new or empty), its workflow grading `assignment` (None: every check);
    return its files, relative."""
    assignment = checked_assignment(assignment, root)
    solutions = root / "solutions"
    if not solutions.is_dir():
        raise ReleaseError(f"{solutions} does not exist: the release is built from the instructor's repository")
    if outdir.exists() and (not outdir.is_dir() or any(outdir.iterdir())):
        raise ReleaseError(f"{outdir} already exists and is not an empty directory; choose a new one")
    available = project_files(root)
    readme = learner_readme((root / README_TEMPLATE).read_text(), (root / "README.md").read_text())
    pages = {name: (root / name).read_text() for name in available if DOCS_PAGE.fullmatch(name)}
    docs, linked = learner_docs(readme, pages)
    files = learner_files(root, available) + sorted(linked & set(available))
    outdir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".release-", dir=outdir.parent))  # renamed into place when complete
    try:
        for name in files:
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, staging / name)
        write_exercises(solutions, staging / "exercises")
        if assignment:
            workflow = staging / WORKFLOW
            if not workflow.is_file():
                raise ReleaseError(f"--assignment {assignment}: {WORKFLOW} does not exist to grade it")
            workflow.write_text(stamped(workflow.read_text(), UNASSIGNED, assignment, WORKFLOW))
        (staging / "README.md").write_text(readme)
        for name, text in docs.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_text(text)
        leaks = leaked_lines(staging, hidden_lines(solutions))
        if leaks:
            raise ReleaseError(
                f"a solution line would be released in {len(leaks)} place(s), e.g. {leaks[0]} "
                "(reword it in solutions/ or where it appears)"
            )
        if outdir.exists():
            outdir.rmdir()
        staging.rename(outdir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sorted(str(path.relative_to(outdir)) for path in outdir.rglob("*") if path.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = tool_parser("grader.host.tools.release", __doc__, "where to write the learner repository (new or empty)")
    add_option(parser, "the workflow (.github/workflows/grade.yml) grades")
    args = parser.parse_args(argv)
    try:
        files = build_release(args.outdir, assignment=args.assignment)
    except ReleaseError as error:
        print(f"release: {error}", file=sys.stderr)
        return 1
    tests = [name for name in files if is_test_module(name)]
    workflow = WORKFLOW if WORKFLOW in files else f"none ({WORKFLOW} does not exist)"
    workflow += f", grading assignment {args.assignment}" if args.assignment else ""
    print(
        f"wrote the learner repository to {args.outdir}: {len(files)} files; workflow: {workflow}; "
        f"learner tests: {', '.join(tests) or 'none'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
