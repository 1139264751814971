"""Set-up without `make`, the same on Windows, macOS and Linux; the standard library only, as it
runs before torch or anything else is installed:

    python -m grader.host.tools.setup --venv .venv      # a virtual environment here, with the grader in it
    python -m grader.host.tools.setup                   # or: into the Python that runs this

PyTorch is installed before the grader, so nothing pulls the multi-GB CUDA build by accident: a
torch wheel already on this machine (`pip install --no-index`, pip's find-links) with its
dependencies from the usual index; else PyTorch's CPU-only index, or the index of `--torch-index`
(or $TORCH_INDEX), such as https://download.pytorch.org/whl/cu124 for a GPU. A torch that imports
already is kept. Then `pip install -e .` (`.[dev]` with --dev). `make` runs the torch step of this
module (`--torch-only`), so the two never disagree. `--dry-run` prints the commands instead.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

TORCH_VERSION = "2.13.0"  # the Makefile's TORCH_VERSION; a test holds the two equal
OLDEST_PYTHON = (3, 10)  # pyproject's requires-python; a test holds the two equal
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYPI = "https://pypi.org/simple"  # torch's own dependencies are on PyPI, not on PyTorch's index
REPO_ROOT = Path(__file__).resolve().parents[3]


def venv_python(venv: Path) -> Path:
    """The interpreter of a virtual environment: Scripts\\python.exe on Windows, bin/python elsewhere."""
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def pip(python: str, *args: str) -> list[str]:
    return [python, "-m", "pip", "install", *args]


def torch_plan(python: str, version: str, index: str) -> list[list[list[str]]]:
    """The ways to install torch, in order: each a list of commands, used when every earlier way failed."""
    local = [pip(python, "--no-index", "--no-deps", f"torch=={version}"), pip(python, f"torch=={version}")]
    remote = [pip(python, "torch", "--index-url", index, "--extra-index-url", PYPI)]
    return [local, remote]


def project_command(python: str, dev: bool) -> list[str]:
    return pip(python, "-e", ".[dev]" if dev else ".")


def torch_imports(python: str) -> bool:
    return subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


def run_all(commands: list[list[str]], quiet_first: bool = False) -> bool:
    """Run commands in turn until one fails. The first may be a probe whose failure is expected (no
    local wheel): its complaint is not shown."""
    for i, command in enumerate(commands):
        output = subprocess.DEVNULL if quiet_first and i == 0 else None
        if subprocess.run(command, cwd=REPO_ROOT, stdout=output, stderr=output).returncode != 0:
            return False
    return True


def install_torch(python: str, version: str, index: str) -> bool:
    if torch_imports(python):
        print(f"setup: torch already imports in {python}: kept")
        return True
    local, remote = torch_plan(python, version, index)
    return run_all(local, quiet_first=True) or run_all(remote)


def show(command: list[str]) -> str:
    return subprocess.list2cmdline(command) if os.name == "nt" else " ".join(command)


def dry_run(python: str, args: argparse.Namespace, steps: list[str]) -> int:
    """Print the commands, one a line; `else:` starts the way used when the one above it fails."""
    for step in steps:
        print(step)
    if Path(python).exists() and torch_imports(python):
        print(f"# torch already imports in {python}: the torch commands would be skipped")
    for i, way in enumerate(torch_plan(python, args.torch_version, args.torch_index)):
        for command in way:
            print(("else: " if i and command is way[0] else "") + show(command))
    if not args.torch_only:
        print(show(project_command(python, args.dev)))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m grader.host.tools.setup", description=__doc__.splitlines()[0])
    p.add_argument("--venv", type=Path, metavar="DIR", help="install into a virtual env at DIR, made if missing")
    p.add_argument(
        "--torch-index",
        default=os.environ.get("TORCH_INDEX") or CPU_INDEX,
        metavar="URL",
        help=f"PyTorch's index when no torch wheel is on this machine (default: $TORCH_INDEX, else {CPU_INDEX})",
    )
    p.add_argument(
        "--torch-version",
        default=os.environ.get("TORCH_VERSION") or TORCH_VERSION,
        metavar="X.Y.Z",
        help=f"the version of a torch wheel already on this machine (default: $TORCH_VERSION, else {TORCH_VERSION})",
    )
    p.add_argument("--dev", action="store_true", help="also the test suite's dependencies (pip install -e .[dev])")
    p.add_argument("--torch-only", action="store_true", help="install torch and stop (what make runs)")
    p.add_argument("--dry-run", action="store_true", help="print the commands instead of running them")
    return p


def make_venv(venv: Path, dry: bool) -> tuple[str, list[str]]:
    """The venv's interpreter, and the command that makes the venv when there is none yet."""
    python = str(venv_python(venv.resolve()))
    if Path(python).exists():
        return python, []
    command = [sys.executable, "-m", "venv", str(venv)]
    if not dry:
        subprocess.run(command, check=True)
    return python, [show(command)]


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if sys.version_info < OLDEST_PYTHON:  # torch and the grader would fail later, less clearly
        oldest, this = ".".join(map(str, OLDEST_PYTHON)), ".".join(map(str, sys.version_info[:2]))
        print(f"setup: the grader needs Python {oldest} or later, and this is Python {this}", file=sys.stderr)
        return 2
    python, steps = (sys.executable, []) if args.venv is None else make_venv(args.venv, args.dry_run)
    if args.dry_run:
        return dry_run(python, args, steps)
    if not install_torch(python, args.torch_version, args.torch_index):
        tried = f"a local wheel of torch {args.torch_version}, then {args.torch_index}"
        print(f"setup: could not install torch (tried {tried})", file=sys.stderr)
        return 1
    if not args.torch_only and subprocess.run(project_command(python, args.dev), cwd=REPO_ROOT).returncode != 0:
        return 1
    if args.venv is not None and not args.torch_only:
        scripts = "Scripts" if os.name == "nt" else "bin"
        print(f"setup: done; grade with {Path(args.venv) / scripts / 'grade'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
