"""Set-up without `make`, the same on Windows, macOS and Linux; the standard library only, as it
runs before torch or anything else is installed:

    python -m grader.host.tools.setup --venv .venv      # a virtual environment here, with the grader in it
    python -m grader.host.tools.setup                   # or: into the Python that runs this

PyTorch is installed before the grader, so nothing pulls the multi-GB CUDA build by accident, and
always torch TORCH_VERSION (`--torch-version`): a torch wheel already on this machine (`pip install
--no-index`, pip's find-links), else torch alone (`--no-deps`) from PyTorch's CPU-only index and no
other (pip's extra indexes and find-links off), or from the index of `--torch-index` (or $TORCH_INDEX),
such as https://download.pytorch.org/whl/cu124 for a GPU; then torch's dependencies from the index
pip is configured with. An index that does not answer within PROBE_SECONDS ends the set-up in one
line that says what to do. A torch that imports already is kept. Then `pip install -e .[play]` (with the
playground's server; `.[dev]` with --dev). `make` runs the torch step of this module (`--torch-only`), so the two
never disagree. `--dry-run` prints the commands instead. `--grading` is the autograders' set-up, for one grading in
a fresh environment: torch's dependencies and the grader's (no playground) in one pip run, none of them
byte-compiled (a grading imports a fraction of their modules, each compiled as it is first imported; torch itself
is compiled as ever).
"""

from __future__ import annotations

import argparse
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

TORCH_VERSION = "2.13.0"  # the Makefile's TORCH_VERSION; a test holds the two equal
OLDEST_PYTHON = (3, 10)  # pyproject's requires-python; a test holds the two equal
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_SECONDS = 10  # the index's first answer; pip's --timeout and --retries bound the rest to under a minute
PIP_PATIENCE = ["--timeout", "15", "--retries", "2"]
# pip ignores an empty value but splits this one into no URL at all: torch from the one index named, none other
ONE_INDEX = {"PIP_EXTRA_INDEX_URL": " ", "PIP_FIND_LINKS": " "}
REPO_ROOT = Path(__file__).resolve().parents[3]


def venv_python(venv: Path) -> Path:
    """The interpreter of a virtual environment: Scripts\\python.exe on Windows, bin/python elsewhere."""
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def pip(python: str, *args: str) -> list[str]:
    return [python, "-m", "pip", "install", *args]


def torch_plan(python: str, version: str, index: str) -> list[list[list[str]]]:
    """The ways to install torch `version`, in order, each a list of commands used when every earlier way failed:
    a local wheel, else torch alone from `index` (run with ONE_INDEX); each way then torch's dependencies from
    pip's configured index (torch, installed, satisfies the pin)."""
    dependencies = pip(python, f"torch=={version}")
    local = [pip(python, "--no-index", "--no-deps", f"torch=={version}"), dependencies]
    remote = [pip(python, "--no-deps", "--index-url", index, *PIP_PATIENCE, f"torch=={version}"), dependencies]
    return [local, remote]


def project_command(python: str, dev: bool, grading: str | None = None) -> list[str]:
    """The grader's install; for `--grading` (`grading`: the torch version) with torch's dependencies, uncompiled."""
    if grading:
        return pip(python, "--no-compile", f"torch=={grading}", "-e", ".")
    return pip(python, "-e", ".[dev]" if dev else ".[play]")  # an autograder's grading needs no playground


def torch_imports(python: str) -> bool:
    return subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


def runs(command: list[str], quiet: bool = False, env: dict | None = None) -> bool:
    """Whether command succeeds; a quiet one is a probe whose failure is expected (no local wheel), not shown."""
    output = subprocess.DEVNULL if quiet else None
    return subprocess.run(command, cwd=REPO_ROOT, stdout=output, stderr=output, env=env).returncode == 0


def unanswered(index: str) -> str | None:
    """Why `index` gives no answer within PROBE_SECONDS, or None when it answers. Any answer counts (an HTTP
    error, a certificate pip may accept with its own): pip then says what is wrong. Not http(s): not probed."""
    if not index.startswith(("http://", "https://")):
        return None
    try:
        urllib.request.urlopen(
            urllib.request.Request(f"{index.rstrip('/')}/torch/", method="HEAD"), timeout=PROBE_SECONDS
        ).close()
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as error:
        return None if isinstance(error.reason, ssl.SSLError) else said(error.reason)
    except OSError as error:  # a read that timed out, a connection reset
        return said(error)
    return None


def said(reason: object) -> str:
    return f"nothing within {PROBE_SECONDS} s" if isinstance(reason, TimeoutError) else str(reason)


def described(index: str) -> str:
    return f"{index} (CPU only)" if index == CPU_INDEX else index


def install_torch(python: str, version: str, index: str, dependencies: bool = True) -> str | None:
    """Install torch `version`, and its dependencies unless told not to (`--grading` installs them with the grader's);
    None once it is there, else the one line that says why not and what to do."""
    if torch_imports(python):
        print(f"setup: torch already imports in {python}: kept")
        return None
    (local, dependencies), (alone, _) = torch_plan(python, version, index)
    print(f"setup: installing torch {version} from a wheel on this machine, if there is one", flush=True)
    if not runs(local, quiet=True):
        print(f"setup: no torch {version} wheel on this machine; installing it from {described(index)}", flush=True)
        failure = install_from_index(alone, version, index)
        if failure is not None:
            return failure
    if not dependencies:
        return None
    print(f"setup: installing torch {version}'s dependencies from pip's own index", flush=True)
    return None if runs(dependencies) else f"setup: pip could not install torch {version}'s dependencies (above)"


def install_from_index(alone: list[str], version: str, index: str) -> str | None:
    """Run `alone` (torch from `index` and no other) where the index answers; else, or where pip fails, one line."""
    yourself = f"retry later, pass --torch-index URL (a mirror), or install torch=={version} yourself and rerun"
    reason = unanswered(index)
    if reason is not None:
        return f"setup: {index} does not answer ({reason}): {yourself}"
    if not runs(alone, env=os.environ | ONE_INDEX):
        return f"setup: pip could not install torch {version} from {index} (above): {yourself}"
    return None


def show(command: list[str]) -> str:
    return subprocess.list2cmdline(command) if os.name == "nt" else " ".join(command)


def dry_run(python: str, args: argparse.Namespace, steps: list[str]) -> int:
    """Print the commands, one a line; `else:` starts the way used when the one above it fails."""
    for step in steps:
        print(step)
    if Path(python).exists() and torch_imports(python):
        print(f"# torch already imports in {python}: the torch commands would be skipped")
    local, remote = torch_plan(python, args.torch_version, args.torch_index)
    if args.grading and not args.torch_only:  # torch's dependencies come with the grader's
        local, remote = local[:1], remote[:1]
    print(*map(show, local), sep="\n")
    one_index = " ".join(f"{name}=' '" for name in ONE_INDEX)
    print(f"# else, if {args.torch_index} answers within {PROBE_SECONDS} s (else stop), torch with {one_index}:")
    print(*(("else: " if command is remote[0] else "") + show(command) for command in remote), sep="\n")
    if not args.torch_only:
        print(show(project_command(python, args.dev, args.torch_version if args.grading else None)))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m grader.host.tools.setup", description=__doc__.splitlines()[0])
    p.add_argument("--venv", type=Path, metavar="DIR", help="install into a virtual env at DIR, made if missing")
    p.add_argument(
        "--torch-index",
        default=os.environ.get("TORCH_INDEX") or CPU_INDEX,
        metavar="URL",
        help=f"torch's one index where no torch wheel is on this machine (default: $TORCH_INDEX, else {CPU_INDEX})",
    )
    p.add_argument(
        "--torch-version",
        default=os.environ.get("TORCH_VERSION") or TORCH_VERSION,
        metavar="X.Y.Z",
        help=f"the torch installed, from a local wheel or the index (default: $TORCH_VERSION, else {TORCH_VERSION})",
    )
    p.add_argument("--dev", action="store_true", help="also the test suite's dependencies (pip install -e .[dev])")
    p.add_argument("--torch-only", action="store_true", help="install torch and stop (what make runs)")
    p.add_argument(
        "--grading",
        action="store_true",
        help="the autograders' set-up: torch's and the grader's dependencies in one pip run, not byte-compiled",
    )
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
    grading = args.torch_version if args.grading and not args.torch_only else None
    failure = install_torch(python, args.torch_version, args.torch_index, dependencies=not grading)
    if failure is not None:
        print(failure, file=sys.stderr)
        return 1
    if args.torch_only:
        return 0
    project = project_command(python, args.dev, grading)
    print(f"setup: installing the grader ({show(project[1:])})", flush=True)
    if subprocess.run(project, cwd=REPO_ROOT).returncode != 0:
        return 1
    if args.venv is not None:
        print(f"setup: done; run {Path(python).parent / 'grade'}, or activate {args.venv} and run grade")
    return 0


if __name__ == "__main__":
    sys.exit(main())
