"""Where the repository, the learner's package and the caches live."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def default_exercises() -> Path:
    """`exercises/` in the current directory when there is one, else the repository's."""
    local = Path.cwd() / "exercises"
    return local if (local / "__init__.py").exists() else REPO_ROOT / "exercises"


def cache_root() -> Path:
    """The grader's cache: $GPT2_GRADER_CACHE, else the user's cache directory."""
    configured = os.environ.get("GPT2_GRADER_CACHE")
    if configured:
        return Path(configured)
    from platformdirs import user_cache_path

    return user_cache_path("gpt2-grader")
