"""Where the repository, the learner's package and the caches live, and how a file there is replaced whole."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def default_exercises() -> Path:
    """`exercises/` in the current directory when there is one, else the repository's."""
    local = Path.cwd() / "exercises"
    return local if (local / "__init__.py").exists() else REPO_ROOT / "exercises"


def write_replacing(path: Path, content: str | bytes) -> None:
    """`path` holds `content`, put there in one rename: a reader sees the old file or the new one, never half of
    one, and whatever was at `path` (a file or a link someone else made) is replaced, never written through.
    Raises OSError; nothing is left beside `path` then."""
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        if isinstance(content, str):
            staging.write_text(content, encoding="utf-8")
        else:
            staging.write_bytes(content)
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)


def cache_root() -> Path:
    """The grader's cache: $GPT2_GRADER_CACHE, else the user's cache directory."""
    configured = os.environ.get("GPT2_GRADER_CACHE")
    if configured:
        return Path(configured)
    from platformdirs import user_cache_path

    return user_cache_path("gpt2-grader")
