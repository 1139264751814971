"""A reference cache entry sealed for one grading: what the grading reads of it hashed and compared with the
digests its builder recorded, and its files watched until judging (`Seal`); `parts_read`, what that is.

An entry is found, read and built by `grader.host.refcache`; its files and digests are `grader.shared.entry`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from grader.shared import sandbox, wire
from grader.shared.entry import digested_files, part_digests
from grader.shared.paths import write_replacing

if TYPE_CHECKING:
    from grader.host.refcache import ReferenceData

VERIFIED_FILE = "verified.json"  # the parts an earlier run hashed, by their file's stat; read only where unconfined


def parts_read(data: ReferenceData, check_ids: Sequence[str] | None) -> list[str]:
    """The parts (digest names) a grading of these checks reads: the vocabulary, their inputs, their expected
    tensors and the weights their cases load; every part when `check_ids` is None."""
    names = list(data.meta["digests"])
    if check_ids is None:
        return names
    prefixes = [case.weights for check in check_ids for case in data.cases(check) if case.weights is not None]
    expected = tuple(wire.EXPECTED.format(check=check, case="") for check in check_ids)
    inputs = {f"inputs/{check}.safetensors" for check in check_ids}

    def read(name: str) -> bool:
        file, _, key = name.partition(":")
        if file == "weights.safetensors":
            return not key or any(key.startswith(prefix) for prefix in prefixes)
        if file == "expected.safetensors":
            return not key or key.startswith(expected)
        return file in inputs or not file.startswith("inputs/")

    return [name for name in names if read(name)]


class Seal:
    """Proof that what a grading reads of an entry is what its builder wrote, from before any learner code
    runs until judging.

    Started before the learner's process: the parts the selected checks read (`parts_read`) are hashed in a
    thread (beside the worker's start-up) and compared with the digests the builder recorded; `broken()`
    then also checks that no file was replaced or written since (inode, size, modification and change
    times). A part this process hashed before (watch's regrades) is not hashed again; one an earlier run
    hashed is hashed again wherever the sandbox is on (`_recall_verified`).
    """

    def __init__(self, data: ReferenceData, check_ids: Sequence[str] | None = None):
        self.data, self.parts = data, parts_read(data, check_ids)
        self.stats = {path: _stat(path) for path in [*digested_files(data.directory), data.directory / "meta.json"]}
        self._recall_verified()
        self._problem: str | None = None
        self._thread = threading.Thread(target=self._verify, daemon=True)
        self._thread.start()

    def _stat_of(self, part: str) -> tuple:
        return self.stats.get(self.data.directory / part.partition(":")[0], ())

    def _verify(self) -> None:
        recorded, verified = self.data.meta.get("digests", {}), self.data.verified
        # Hashed before in this process, and not written since: not again.
        unverified = [part for part in self.parts if verified.get(part) != self._stat_of(part)]
        for part, digest in part_digests(self.data.directory, unverified):
            if recorded.get(part) != digest:
                self._problem = f"{part.partition(':')[0]} is not what the reference builder wrote"
                return
            verified[part] = self._stat_of(part)
        self._remember_verified()

    def _recall_verified(self) -> None:
        """Parts hashed by an earlier run whose files were not written since (a write always moves the
        change time, which no unprivileged process can set back): the weights are not hashed every run.

        Only where checks run unconfined. The record is its user's file, so the code of any unconfined
        run (--no-sandbox, GPT2_GRADER_SANDBOX=off) could have rewritten it together with the files it
        vouches for: where the sandbox is on, every run hashes what it reads (`attention`'s few MB, the
        whole model's 1 GB in about 0.25 s of a core, beside the worker's start-up); where it is off, the
        learner's code could read the answers anyway."""
        if sandbox.status().on:
            return
        try:
            earlier = json.loads((self.data.directory / VERIFIED_FILE).read_text())
        except (OSError, ValueError):
            return
        if not isinstance(earlier, dict):
            return
        for part in self.parts:
            stat = self._stat_of(part)
            if stat and earlier.get(part) == list(stat):
                self.data.verified[part] = stat

    def _remember_verified(self) -> None:
        record = {part: list(stat) for part, stat in self.data.verified.items()}
        with contextlib.suppress(OSError):  # an unwritable cache only costs the hashing next time
            write_replacing(self.data.directory / VERIFIED_FILE, json.dumps(record))

    def broken(self) -> str | None:
        """Why the entry cannot be trusted, or None."""
        self._thread.join()
        if self._problem:
            return self._problem
        changed = [path.name for path, stat in self.stats.items() if _stat(path) != stat]
        return f"{', '.join(changed)} changed while the checks ran" if changed else None


def _stat(path: Path) -> tuple:
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
