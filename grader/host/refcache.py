"""The reference cache: each entry holds everything the checks need from GPT-2, built once.

An entry is a directory of safetensors files plus meta.json, named by the reference kind and a
hash of the code that defines the cases, so a changed check invalidates it. An entry holds every check's cases, or
only those of the checks a grading selects (a Classroom 50 assignment graded from an empty cache builds only its own:
the part of the reference its checks read); such an entry's name ends in a hash of its checks, and a later grading of
other checks uses the whole entry where there is one, else builds an entry of its own. Entries are built in a
separate process (`grader.builder.reference`) into a temporary directory and renamed into place, so no grader
reads a half-written entry; and under a lock file beside it, so two graders started together on a cold cache (two
terminals, a batch, the test suite's workers) build it once: the second waits for the first and reads its entry.
What a grading reads of an entry is verified against its digests by `grader.host.seal`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout
from pydantic import TypeAdapter

from grader import __version__
from grader.shared import outputs_file, wire
from grader.shared.entry import ENTRY_FILES, PROGRESS_PREFIX, digested_files, safetensors_header
from grader.shared.paths import cache_root

GRADER_DIR = Path(__file__).resolve().parents[1]


class ReferenceUnavailable(RuntimeError):
    """No reference could be loaded or built; the message says why in one line."""


@dataclass(frozen=True)
class ReferenceData:
    """A complete cache entry, read lazily."""

    kind: str
    directory: Path
    meta: dict
    fallback_reason: str | None = None
    owner: object = None  # keeps a temporary cache directory alive as long as this entry
    verified: dict = field(default_factory=dict, compare=False)  # part -> the stat of its file when its digest matched

    @property
    def weights_path(self) -> Path:
        return self.directory / "weights.safetensors"

    def inputs_path(self, check_id: str) -> Path:
        return self.directory / "inputs" / f"{check_id}.safetensors"

    @property
    def beside(self) -> frozenset[str]:
        """The checks that may run beside any other: what their cases hold tells no other check its answers
        (grader.builder.reference.may_run_beside)."""
        return frozenset(self.meta["beside"])

    def cases(self, check_id: str) -> list[wire.CaseSpec]:
        return CASES.validate_python(self.meta["cases"][check_id])

    def expected(self, check_id: str) -> dict:
        """The expected tensors of one check, keyed without the check's id."""
        prefix = wire.EXPECTED.format(check=check_id, case="")
        tensors = mapped_tensors(self.directory / "expected.safetensors", prefix)
        return {key[len(prefix) :]: value for key, value in tensors.items()}

    def inputs(self, check_id: str) -> dict:
        from safetensors.numpy import load_file

        return load_file(str(self.inputs_path(check_id)))

    def vocabulary(self) -> list[str]:
        """The text of every token id, as the reference's tokenizer decodes it alone."""
        return json.loads((self.directory / "vocabulary.json").read_text(encoding="utf-8"))

    def with_fallback(self, reason: str | None, owner: object = None) -> ReferenceData:
        return ReferenceData(self.kind, self.directory, self.meta, reason, owner or self.owner, self.verified)


CASES = TypeAdapter(list[wire.CaseSpec])


def mapped_tensors(path: Path, prefix: str) -> dict:
    """The tensors of a safetensors file whose key starts with `prefix`: read-only NumPy views of one mapping of the
    file, so that nothing is copied (the finished package's expected outputs are 300 MB) and a page is read where
    it is compared. The mapping lasts as long as a view of it. Only a process that may write the cache could cut the
    file short beneath it (a SIGBUS): checks run where the cache is read-only, and an unconfined one could end the
    grader anyway."""
    import mmap

    import numpy as np

    with open(path, "rb") as handle:
        _, start, entries = safetensors_header(handle)
        chosen = {key: entry for key, entry in entries.items() if key.startswith(prefix)}
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if chosen else None
    tensors = {}
    for key, entry in chosen.items():
        numpy_name, (begin, end) = outputs_file.DTYPES[entry["dtype"]][0], entry["data_offsets"]
        if numpy_name is None:  # never one of the builder's: it writes float and integer tensors
            raise ValueError(f"{path.name}: {key} is {entry['dtype']}, a dtype NumPy cannot read")
        dtype = np.dtype(numpy_name)
        count = (end - begin) // dtype.itemsize
        tensors[key] = np.frombuffer(mapping, dtype, count, start + begin).reshape(entry["shape"])
    return tensors


def code_fingerprint() -> str:
    """Hash of the grader version and of every source file that decides what the entry holds."""
    digest = hashlib.sha256(__version__.encode())
    sources = [
        *(GRADER_DIR / "builder").glob("*.py"),
        GRADER_DIR / "shared" / "wire.py",
        GRADER_DIR / "shared" / "entry.py",  # the digests meta.json holds
        *(GRADER_DIR / "checks").rglob("*.py"),
    ]
    for path in sorted(sources):
        digest.update(path.relative_to(GRADER_DIR).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def entry_dir(root: Path, kind: str, seed: int, checks: Collection[str] | None = None) -> Path:
    """Where the entry of every check (`checks` None), or of exactly `checks`, lives."""
    whole = f"{kind}-seed{seed}-{code_fingerprint()}"
    if checks is None:
        return root / whole
    return root / f"{whole}-{hashlib.sha256(' '.join(sorted(checks)).encode()).hexdigest()[:12]}"


def selection(check_ids: Collection[str] | None) -> frozenset[str] | None:
    """The checks an entry is built for: None (every check) where `check_ids` holds them all."""
    if check_ids is None:
        return None
    from grader.checks import registry

    return None if {check.id for check in registry()} <= set(check_ids) else frozenset(check_ids)


def entry_dirs(root: Path, kind: str, seed: int, checks: frozenset[str] | None) -> list[Path]:
    """The entries that can serve a grading of `checks`, in the order they are looked for: the whole one first."""
    return [entry_dir(root, kind, seed)] + ([entry_dir(root, kind, seed, checks)] if checks else [])


def read_entry(directory: Path, kind: str) -> ReferenceData:
    """A structurally sound entry; raises ValueError naming what is wrong with a damaged one.
    Its contents are verified against their digests by `grader.host.seal.Seal`, beside the grading."""
    from safetensors import safe_open

    missing = [name for name in ENTRY_FILES if not (directory / name).is_file()]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    try:
        meta = json.loads((directory / "meta.json").read_text())
        data = ReferenceData(kind, directory, meta)
        for check_id in meta["cases"]:
            data.cases(check_id)
        if not set(data.beside) <= set(meta["cases"]):
            raise ValueError("meta.json's checks that may run beside others are not its checks")
        for path in digested_files(directory):
            if path.suffix == ".safetensors":
                with safe_open(str(path), "np") as handle:
                    handle.keys()
        files = {name.partition(":")[0] for name in meta["digests"]}
        if files != {str(path.relative_to(directory)) for path in digested_files(directory)}:
            raise ValueError("the files do not match meta.json's digests")
    except Exception as error:  # any damage means the same thing: rebuild
        raise ValueError(wire.clean_text(f"{type(error).__name__}: {error}", 300)) from None
    if meta.get("reference") != kind:
        raise ValueError("meta.json names another reference")
    return data


def discard(data: ReferenceData) -> None:
    """Remove an entry that did not verify, so that the next `ensure_reference` rebuilds it."""
    shutil.rmtree(data.directory, ignore_errors=True)


# --- where GPT-2 can come from ------------------------------------------------------------------

NOT_CACHED = "GPT-2 is not in the Hugging Face cache: `grade --download` fetches it"
UNREACHABLE = "GPT-2 is not in the Hugging Face cache ({hub}) and huggingface.co cannot be reached"


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache directory, resolved the way huggingface_hub does."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    hf_home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface"
    )
    return Path(hf_home) / "hub"


def gpt2_in_hf_cache() -> bool:
    snapshots = hf_hub_cache() / "models--gpt2" / "snapshots"
    return any((s / "config.json").is_file() and (s / "model.safetensors").is_file() for s in snapshots.glob("*"))


def hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout):
            return True
    except OSError:
        return False


# --- building -----------------------------------------------------------------------------------

Progress = Callable[..., None]  # (message, fraction done or None)
# Entered around a build: the learner's workers paused (`LearnerProcesses.paused`), their memory left to the builder.
Pause = Callable[[], AbstractContextManager]


def build_entry(
    root: Path, kind: str, seed: int, offline: bool, progress: Progress, checks: frozenset[str] | None = None
) -> ReferenceData:
    """Run the reference builder in its own process (for every check, or `checks` only) and move its output into
    place."""
    target = entry_dir(root, kind, seed, checks)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=".building-"))
    command = [
        sys.executable,
        "-m",
        "grader.builder.reference",
        "--kind",
        kind,
        "--out",
        str(staging),
        "--random-hub",
        str(root / "random-hub"),
        "--seed",
        str(seed),
    ]
    if offline:
        command.append("--offline")
    if checks is not None:
        command += ["--checks", ",".join(sorted(checks))]
    try:
        tail = _run_builder(command, progress)
        try:
            read_entry(staging, kind)
        except ValueError as error:
            raise ReferenceUnavailable(f"could not build the {kind} reference: {tail or error}") from None
        try:
            os.rename(staging, target)
        except OSError:
            if not target.exists():  # otherwise another grader finished first: use theirs
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return read_entry(target, kind)


def _run_builder(command: list[str], progress: Progress) -> str:
    """Stream the builder's progress lines; return the last line of anything else it printed."""
    # glibc keeps freed blocks of up to 32 MB in its heap; from 1 MB up they are mapped and handed
    # back instead, which lowers the builder's peak memory by about a tenth at no cost in time.
    env = {"MALLOC_MMAP_THRESHOLD_": str(2**20), **os.environ}
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=GRADER_DIR.parent, env=env
    )
    last_other = ""
    assert process.stderr is not None
    for line in process.stderr:
        line = line.rstrip()
        if line.startswith(PROGRESS_PREFIX):
            fraction, _, message = line[len(PROGRESS_PREFIX) :].partition(" ")
            progress(message, float(fraction))
        elif line.strip():
            last_other = line.strip()
    process.wait()
    return last_other if process.returncode else ""


def ensure_reference(
    requested: str,
    progress: Progress,
    root: Path | None = None,
    seed: int = 0,
    pause: Pause = contextlib.nullcontext,
    checks: Collection[str] | None = None,
) -> ReferenceData:
    """A ready cache entry for `requested` ("gpt2", "random" or "auto") that holds `checks` (every check when None),
    building it if needed (inside `pause()`): the whole entry where there is one, else one of those checks only.

    When the cache directory cannot be written, the entry is built in a temporary directory that
    lasts as long as the returned object: slower next time, but this run is graded.
    """
    root, wanted = root or cache_root(), Wanted(seed, selection(checks), pause)
    try:
        return _ensure(requested, progress, root, wanted)
    except OSError as error:
        scratch = tempfile.TemporaryDirectory(prefix="gpt2-grader-cache-")
        progress(
            f"cannot write the reference cache at {root} ({error.strerror or error}); using a temporary "
            "one for this run"
        )
        data = _ensure(requested, progress, Path(scratch.name), wanted)
        return data.with_fallback(data.fallback_reason, owner=scratch)


@dataclass(frozen=True)
class Wanted:
    """What a grading asks of the cache: the inputs' seed, its checks (None: every one), and what to enter around a
    build."""

    seed: int
    checks: frozenset[str] | None
    pause: Pause

    def prepared(self, root: Path, kind: str) -> bool:
        return any(directory.exists() for directory in entry_dirs(root, kind, self.seed, self.checks))


def _ensure(requested: str, progress: Progress, root: Path, wanted: Wanted) -> ReferenceData:
    if requested == "random":
        return _cached_or_built(root, "random", True, progress, wanted)
    cached = gpt2_in_hf_cache()
    if requested == "gpt2":
        return _cached_or_built(root, "gpt2", cached, progress, wanted, build=cached or hub_reachable())
    return _auto(progress, root, cached, wanted)


def _auto(progress: Progress, root: Path, cached: bool, wanted: Wanted) -> ReferenceData:
    """`--reference auto`: GPT-2 where its entry or its weights are already here, else the random reference.
    The network is asked only when neither reference was ever prepared; after that, `grade --download` is
    the way to GPT-2 (the random reference's notice says so)."""
    if cached or wanted.prepared(root, "gpt2"):
        with contextlib.suppress(ReferenceUnavailable):  # an entry damaged past repair without the weights
            return _cached_or_built(root, "gpt2", cached, progress, wanted, build=cached)
    reason = NOT_CACHED
    if not wanted.prepared(root, "random") and hub_reachable():
        try:
            return _cached_or_built(root, "gpt2", False, progress, wanted)
        except ReferenceUnavailable as error:
            reason = str(error)
    return _cached_or_built(root, "random", True, progress, wanted).with_fallback(reason)


def _cached_or_built(
    root: Path, kind: str, offline: bool, progress: Progress, wanted: Wanted, build: bool = True
) -> ReferenceData:
    for directory in entry_dirs(root, kind, wanted.seed, wanted.checks):
        if directory.exists():
            try:
                return _holding(read_entry(directory, kind), wanted.checks)
            except ValueError as damage:
                progress(f"the reference cache at {directory} is damaged ({damage}); rebuilding it")
                shutil.rmtree(directory, ignore_errors=True)
    if not build:
        raise ReferenceUnavailable(UNREACHABLE.format(hub=hf_hub_cache()))
    directory = entry_dir(root, kind, wanted.seed, wanted.checks)
    with building(directory, progress):
        if directory.exists():  # another grader built it while this one waited
            return read_entry(directory, kind)
        with wanted.pause():
            return build_entry(root, kind, wanted.seed, offline, progress, wanted.checks)


def _holding(data: ReferenceData, checks: frozenset[str] | None) -> ReferenceData:
    """`data`, which must hold the cases of `checks`: an entry that does not is damaged (a whole entry holds every
    check's by its name, the hash of the code that declares them)."""
    missing = sorted((checks or frozenset()) - set(data.meta["cases"]))
    if missing:
        raise ValueError(f"it holds no cases for {', '.join(missing[:3])}")
    return data


@contextlib.contextmanager
def building(directory: Path, progress: Progress):
    """Held while the entry at `directory` is built: one grader builds it, any other waits here (and says so)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(directory.parent / f".{directory.name}.lock", thread_local=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        progress(f"another grader is building the reference at {directory}; waiting for it")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()
