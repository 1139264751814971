"""The nbgrader source notebooks, one per part, and the course's nbgrader_config.py: what
`python -m grader.host.platforms.nbgrader.notebooks OUTDIR` writes (grader.host.platforms.nbgrader.notebooks
describes the notebooks' cells).

The names the notebooks' other sides look up live here too: the package the `%%exercise` cells
write (`NOTEBOOK_PACKAGE`), each part's notebook name and each test cell's grade id.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
from pathlib import Path
from typing import Any

from grader.shared.paths import REPO_ROOT

NOTEBOOK_PACKAGE = "notebook_exercises"  # the directory beside the notebook, and the module name
# The first cell. In a fresh Colab runtime the grader is not there yet: it is installed from the
# learner repository (--source), keeping Colab's own torch. Where the grader is installed already
# (Jupyter, nbgrader's autograde) the install is skipped.
PLACEHOLDER_SOURCE = "git+https://github.com/OWNER/REPOSITORY"
SETUP = (
    "import importlib.util\n"
    'if importlib.util.find_spec("grader") is None:  # a fresh Colab runtime\n'
    '    %pip install --quiet "gpt2-from-scratch-grader @ {source}"\n'
    "%load_ext grader.host.platforms.nbgrader.notebooks"
)
CONFIG_FILE = "nbgrader_config.py"
STARTUP_ALLOWANCE = 300  # seconds for the first cell's reference build, on a slow machine
# The course's nbgrader_config.py: Python that nbgrader runs in its own process as it starts.
CONFIG = """# Written by python -m grader.host.platforms.nbgrader.notebooks.
import os
import sysconfig

c = get_config()  # noqa: F821 (nbgrader defines it)
# A test cell grades one check in a process of its own; the first may also build the reference cache, so cells get
# more time than nbgrader's default 30 s.
c.Execute.timeout = {timeout}
# nbgrader makes a new gradebook by running the command `alembic` (nbgrader.api.get_alembic_version), looked up on
# PATH: the one installed beside nbgrader first, even where its environment is not activated (.venv/bin/nbgrader).
os.environ["PATH"] = os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")])
"""
HOW_TO = (
    "Each exercise cell starts with `%%exercise FILE`: running it writes the cell to "
    f"`{NOTEBOOK_PACKAGE}/FILE` and runs it, so what it defines can be tried in a new cell. "
    "Fill in the bodies that raise `NotImplementedError`, run the cell, then run the test cells "
    "below it: each grades one check against GPT-2 and shows what is wrong. "
    "Work through the parts in order, in one directory: later parts use the modules of earlier ones."
)
KERNEL = {
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"},
}


def notebook_name(part: str) -> str:
    """A part's notebook: "1-model.ipynb"; nbgrader's gradebook names it by the stem."""
    from grader.checks import PARTS

    return f"{list(PARTS).index(part) + 1}-{part}.ipynb"


def grade_cell_id(check_id: str) -> str:
    """The nbgrader grade id of a check's test cell (nbgrader's ids take no dots)."""
    return f"check-{check_id.replace('.', '-')}"


def nbgrader_cell(source: str, grade_id: str, *, solution: bool = False, points: int | None = None):
    """A code cell with nbgrader metadata: a solution cell, a locked cell, or a test cell with points."""
    import nbformat
    from nbgrader.nbgraderformat import SCHEMA_VERSION

    meta = {
        "grade_id": grade_id,
        "grade": points is not None,
        "solution": solution,
        "locked": not solution,
        "schema_version": SCHEMA_VERSION,
    }
    if points is not None:
        meta["points"] = points
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": meta})


def part_files(part: str, checks: list, solutions: Path) -> list[str]:
    """The files a part's notebook holds, in course order: the given ones (no solution region,
    such as config.py), then each file whose first check belongs to this part."""
    from grader.host.tools.stubs import strip_solutions

    owner: dict[str, str] = {}
    for check in checks:
        owner.setdefault(check.target.file, check.part)
    given = [
        path.stem
        for path in sorted(solutions.glob("*.py"))
        if path.stem != "__init__" and path.stem not in owner and strip_solutions(path.read_text()) == path.read_text()
    ]
    return given + [file for file, first in owner.items() if first == part]


# A GitHub repository as pip installs from it: git+https://github.com/OWNER/NAME(.git)(@REF)(#...)
GITHUB_SOURCE = re.compile(r"(?:git\+)?https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?(?:@([^#\s]+))?(?:#\S*)?")


def pages_base(source: str) -> str:
    """What a notebook's links to the course's pages start with. When `--source` is a GitHub repository (the
    learner repository, which ships docs/course/), its files on GitHub: `https://github.com/OWNER/NAME/blob/REF/`,
    REF the source's `@ref` or HEAD (the default branch), a link that works wherever the notebook runs (Colab,
    Jupyter). Otherwise (another host, a path, the placeholder) "": a link is the page's path in the repository,
    `docs/course/02-embed.md`, which opens where the notebook sits at the repository's root."""
    found = GITHUB_SOURCE.fullmatch(source.strip())
    if source == PLACEHOLDER_SOURCE or found is None:
        return ""
    owner, name, ref = found.groups()
    return f"https://github.com/{owner}/{name}/blob/{ref or 'HEAD'}/"


def page_title(page: str) -> str:
    """A course page's title (its first heading), or its file name when it is not in this checkout."""
    path = REPO_ROOT / page
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    heading = next((line.lstrip("#").strip() for line in lines if line.startswith("# ")), "")
    return heading or Path(page).name


def page_links(pages: list[str], base: str) -> str:
    """Markdown links to course pages: "[Token embedding](https://github.com/.../docs/course/02-embed.md)"."""
    return ", ".join(f"[{page_title(page)}]({base}{page})" for page in pages)


def file_pages(graded: list) -> list[str]:
    """The course pages of a file's checks, in course order, each once (attention.py: 05-attention.md)."""
    from grader.host.course import page_of

    return [page for page in dict.fromkeys(page_of(check.id) for check in graded) if page]


def part_pages(graded: list) -> list[str]:
    """The pages that introduce a part: those covering no check just before its first exercise's page
    (Part 1: "The model, end to end"); the course's README is not one."""
    from grader.host.course import COURSE_DIR, pages

    checks_on = pages()
    names = list(checks_on)
    pages = [Path(page).name for page in file_pages(graded)]
    if not pages:
        return []
    start = end = min(names.index(name) for name in pages)
    while start > 0 and not checks_on[names[start - 1]] and names[start - 1] != "README.md":
        start -= 1
    return [f"{COURSE_DIR}/{name}" for name in names[start:end]]


def part_notebook(number: int, part: str, checks: list, solutions: Path, source: str):
    """The nbgrader source notebook of one part: its markdown cells link the course's pages (`pages_base`)."""
    import nbformat

    from grader.host.tools.stubs import strip_solutions

    base = pages_base(source)
    introduction = (
        (importlib.import_module(f"grader.checks.{part}").__doc__ or "").strip().split("\n\n")[0]
    )  # the rest is for the grader's authors
    in_part = [check for check in checks if check.part == part]
    overview = part_pages(in_part)
    course = (
        f"\n\nThe course's pages explain each exercise; read them as you go. This part: "
        f"{page_links(overview + file_pages(in_part), base)}."
        if in_part
        else ""
    )
    cells = [
        nbformat.v4.new_markdown_cell(
            f"# GPT-2 from scratch, part {number}: {part}\n\n{introduction}{course}\n\n{HOW_TO}"
        ),
        nbgrader_cell(SETUP.format(source=source), "setup"),
    ]
    for file in part_files(part, checks, solutions):
        text = (solutions / f"{file}.py").read_text()
        graded = [check for check in in_part if check.target.file == file]
        listing = "".join(
            f"\n- `{check.id}` ({check.points} point{'s' * (check.points != 1)}): {check.summary}" for check in graded
        )
        pages = file_pages(graded)
        cells.append(
            nbformat.v4.new_markdown_cell(
                f"## `{file}.py`\n\n{ast.get_docstring(ast.parse(text)) or ''}"
                + (f"\n\nRead first: {page_links(pages, base)}" if pages else "")
                + (f"\n\nChecks:{listing}" if listing else "")
            )
        )
        exercise = strip_solutions(text) != text
        cells.append(
            nbgrader_cell(
                f"%%exercise {file}.py\n{text}", f"{'exercise' if exercise else 'given'}-{file}", solution=exercise
            )
        )
        cells += [
            nbgrader_cell(f'grade_check("{check.id}")', grade_cell_id(check.id), points=check.points)
            for check in graded
        ]
    return nbformat.v4.new_notebook(cells=cells, metadata=KERNEL)


def source_notebooks(solutions: Path, source: str = PLACEHOLDER_SOURCE) -> tuple[dict[str, Any], list[str]]:
    """File name -> notebook for each part whose files are all in solutions/; and why others are not."""
    from grader.checks import PARTS, registry

    checks = list(registry())
    notebooks, skipped = {}, []
    for number, part in enumerate(PARTS, start=1):
        missing = sorted(
            {
                f"{c.target.file}.py"
                for c in checks
                if c.part == part and not (solutions / f"{c.target.file}.py").is_file()
            }
        )
        if missing:
            skipped.append(f"no notebook for part {part}: {', '.join(missing)} not in {solutions}")
            continue
        notebooks[notebook_name(part)] = part_notebook(number, part, checks, solutions, source)
    return notebooks, skipped


def write_notebooks(outdir: Path, solutions: Path, source: str = PLACEHOLDER_SOURCE) -> tuple[list[Path], list[str]]:
    """Write each part's notebook into outdir, validated as nbformat and as nbgrader metadata."""
    import nbformat
    from nbgrader import nbgraderformat

    notebooks, skipped = source_notebooks(solutions, source)
    outdir.mkdir(parents=True, exist_ok=True)
    for name, notebook in notebooks.items():
        nbformat.validate(notebook)
        with open(outdir / name, "w") as handle:
            nbgraderformat.write(notebook, handle)
    return [outdir / name for name in notebooks], skipped


def repository_source(root: Path = REPO_ROOT) -> str | None:
    """This checkout's `origin` as pip installs from git (`git+https://host/owner/name`), or None without one."""
    try:
        url = subprocess.run(
            ["git", "remote", "get-url", "origin"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    scp = re.fullmatch(r"[\w.-]+@([\w.-]+):(.+)", url)  # git@github.com:owner/name.git
    if scp:
        url = f"https://{scp[1]}/{scp[2]}"
    return f"git+{url.removesuffix('.git')}" if url.startswith("https://") else None


def cell_time_limit() -> int:
    """Seconds a test cell may take: its check's own limit, and the rest of a grading around it."""
    from grader.checks import registry
    from grader.host.limits import DEFAULT_TIMEOUT
    from grader.host.tools.batch import submission_time_limit

    return int(max(submission_time_limit([check], DEFAULT_TIMEOUT) for check in registry()) + STARTUP_ALLOWANCE)


def config_text() -> str:
    return CONFIG.format(timeout=cell_time_limit())


def write_config(course: Path) -> tuple[Path, bool]:
    """nbgrader_config.py at the course's root with the cells' time limit and alembic on PATH; an instructor's own
    is kept. Returns the file and whether it was written."""
    path = course / CONFIG_FILE
    if path.exists():
        return path, False
    path.write_text(config_text())
    return path, True


def settings_needed() -> str:
    """The generated config's statements, indented: what an instructor's own config needs of them."""
    return "\n".join(f"    {line}" for line in config_text().splitlines() if line and not line.startswith("#"))


def course_root(outdir: Path) -> Path:
    """COURSE of COURSE/source/ASSIGNMENT, nbgrader's layout; else the notebooks' own directory."""
    return outdir.parent.parent if outdir.parent.name == "source" else outdir
