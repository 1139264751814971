"""The reference cache: each entry holds everything the checks need from GPT-2, built once.

An entry is a directory of safetensors files plus meta.json, named by the reference kind and a
hash of the code that defines the cases, so a changed check invalidates it. Entries are built in a
separate process (`grader.reference`) into a temporary directory and renamed into place, so two
graders building at once cannot leave a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import __version__
from .paths import cache_root

GRADER_DIR = Path(__file__).resolve().parent
ENTRY_FILES = ("weights.safetensors", "inputs.safetensors", "expected.safetensors", "meta.json")


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

    @property
    def weights_path(self) -> Path:
        return self.directory / "weights.safetensors"

    @property
    def inputs_path(self) -> Path:
        return self.directory / "inputs.safetensors"

    def cases(self, check_id: str) -> list[dict]:
        return self.meta["cases"][check_id]

    def tensors(self, filename: str, check_id: str) -> dict:
        """The tensors of one check from one file, keyed without the check's prefix."""
        from safetensors import safe_open

        prefix = check_id + "/"
        with safe_open(str(self.directory / filename), "np") as handle:
            return {key[len(prefix) :]: handle.get_tensor(key) for key in handle.keys() if key.startswith(prefix)}

    def expected(self, check_id: str) -> dict:
        return self.tensors("expected.safetensors", check_id)

    def inputs(self, check_id: str) -> dict:
        return self.tensors("inputs.safetensors", check_id)


def code_fingerprint() -> str:
    """Hash of the grader version and of every source file that decides what the entry holds."""
    digest = hashlib.sha256(__version__.encode())
    for path in sorted([GRADER_DIR / "reference.py", *(GRADER_DIR / "checks").glob("*.py")]):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def entry_dir(root: Path, kind: str, seed: int) -> Path:
    return root / f"{kind}-seed{seed}-{code_fingerprint()}"


def read_entry(directory: Path, kind: str) -> ReferenceData:
    """A validated entry; raises ValueError naming what is wrong with a damaged one."""
    from safetensors import safe_open

    missing = [name for name in ENTRY_FILES if not (directory / name).is_file()]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    try:
        meta = json.loads((directory / "meta.json").read_text())
        for name in ENTRY_FILES[:3]:
            with safe_open(str(directory / name), "np") as handle:
                handle.keys()
    except Exception as error:  # any damage means the same thing: rebuild
        raise ValueError(f"{type(error).__name__}: {error}") from None
    if meta.get("reference") != kind:
        raise ValueError("meta.json names another reference")
    return ReferenceData(kind, directory, meta)


# --- where GPT-2 can come from ------------------------------------------------------------------


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache directory, resolved the way huggingface_hub does."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    hf_home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface")
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


def build_entry(root: Path, kind: str, seed: int, offline: bool, progress: Progress) -> ReferenceData:
    """Run the reference builder in its own process and move its output into place."""
    target = entry_dir(root, kind, seed)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=".building-"))
    command = [sys.executable, "-m", "grader.reference", "--kind", kind, "--out", str(staging), "--random-hub", str(root / "random-hub"), "--seed", str(seed)]
    if offline:
        command.append("--offline")
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
    from .reference import PROGRESS_PREFIX

    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=GRADER_DIR.parent)
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


def ensure_reference(requested: str, progress: Progress, root: Path | None = None, seed: int = 0) -> ReferenceData:
    """A ready cache entry for `requested` ("gpt2", "random" or "auto"), building it if needed.

    When the cache directory cannot be written, the entry is built in a temporary directory that
    lasts as long as the returned object: slower next time, but this run is graded.
    """
    root = root or cache_root()
    try:
        return _ensure(requested, progress, root, seed)
    except OSError as error:
        scratch = tempfile.TemporaryDirectory(prefix="gpt2-grader-cache-")
        progress(f"cannot write the reference cache at {root} ({error.strerror or error}); using a temporary one for this run")
        data = _ensure(requested, progress, Path(scratch.name), seed)
        return ReferenceData(data.kind, data.directory, data.meta, data.fallback_reason, owner=scratch)


def _ensure(requested: str, progress: Progress, root: Path, seed: int) -> ReferenceData:
    if requested == "random":
        return _cached_or_built(root, "random", seed, True, progress)
    cached = gpt2_in_hf_cache()
    if requested == "gpt2":
        return _cached_or_built(root, "gpt2", seed, cached, progress, build=cached or hub_reachable())
    try:
        return _cached_or_built(root, "gpt2", seed, cached, progress, build=cached or hub_reachable())
    except ReferenceUnavailable as error:
        reason = str(error)
    data = _cached_or_built(root, "random", seed, True, progress)
    return ReferenceData(data.kind, data.directory, data.meta, fallback_reason=reason)


def _cached_or_built(root: Path, kind: str, seed: int, offline: bool, progress: Progress, build: bool = True) -> ReferenceData:
    directory = entry_dir(root, kind, seed)
    if directory.exists():
        try:
            return read_entry(directory, kind)
        except ValueError as damage:
            progress(f"the reference cache at {directory} is damaged ({damage}); rebuilding it")
            shutil.rmtree(directory, ignore_errors=True)
    if not build:
        raise ReferenceUnavailable(f"GPT-2 is not in the Hugging Face cache ({hf_hub_cache()}) and huggingface.co cannot be reached")
    return build_entry(root, kind, seed, offline, progress)
