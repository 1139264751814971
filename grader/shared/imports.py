"""Large imports with Python's cyclic garbage collector paused: torch's in the learner's worker, transformer_lens's
in the reference builder. (The grader's own process imports too little to gain: about 0.01 s.)

What an import allocates (modules, classes, functions, their dicts) lives as long as the process, yet the
allocations themselves set off collections that walk it all again and find nothing: about a third of
`import torch` and nearly half of `import transformer_lens` (docs/speed.md). Paused for the import, then frozen
(`gc.freeze`), those objects are never walked again, by this process or by a fork of it: a check's process then
collects only what it made itself, and copies none of the fork server's pages by walking them.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic collection inside; what is alive on leaving is frozen, and the collector is as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
