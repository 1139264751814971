"""The argument parser every `python -m grader.<folder>.<tool>` command starts from."""

from __future__ import annotations

import argparse
from pathlib import Path


def tool_parser(module: str, doc: str, outdir_help: str | None = None) -> argparse.ArgumentParser:
    """The parser of `python -m <module>`, described by its docstring's first paragraph (its lines joined: argparse
    wraps them again); with `outdir_help`, it takes the folder it writes (OUTDIR)."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=" ".join(doc.strip().split("\n\n")[0].split()))
    if outdir_help:
        p.add_argument("outdir", type=Path, metavar="OUTDIR", help=outdir_help)
    return p
