"""A reference cache entry's files and digests: written by the builder, verified by the grader's process.

The large safetensors files are digested tensor by tensor (and each header), so a grading hashes only
the parts its checks read. The digest is BLAKE3's: every sandboxed grading hashes what it reads (up to 1 GB, the
whole model's), and BLAKE3 does that in a third of SHA-256's time on one core (docs/speed.md).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path

from blake3 import blake3

PROGRESS_PREFIX = "[reference] "  # marks the builder's progress lines: "[reference] 0.300 message"
TENSOR_DIGESTED = ("weights.safetensors", "expected.safetensors")  # the large files, digested tensor by tensor
MAX_HEADER_BYTES = 64 << 20
HASH_CHUNK_BYTES = 8 << 20
ENTRY_FILES = (
    "weights.safetensors",
    "expected.safetensors",
    "vocabulary.json",
    "meta.json",
)  # and inputs/<check>.safetensors


def digested_files(directory: Path) -> list[Path]:
    """Every file of an entry but meta.json, which holds their digests."""
    fixed = [directory / name for name in ENTRY_FILES if name != "meta.json"]
    return [*fixed, *sorted((directory / "inputs").glob("*.safetensors"))]


def file_digest(path: Path) -> str:
    return blake3().update_mmap(path).hexdigest()


def entry_digests(directory: Path) -> dict[str, str]:
    """A digest of every file of an entry but meta.json; those in TENSOR_DIGESTED by part, so that a grading
    hashes only what its checks read: `file:` names its header, `file:key` each tensor's bytes."""
    digests = {}
    for path in digested_files(directory):
        name = str(path.relative_to(directory))
        if name not in TENSOR_DIGESTED:
            digests[name] = file_digest(path)
            continue
        with open(path, "rb") as handle:
            header, spans = safetensors_layout(handle)
            digests[f"{name}:"] = blake3(header).hexdigest()
            digests |= {f"{name}:{key}": span_digest(handle, span) for key, span in spans.items()}
    return digests


def safetensors_layout(handle) -> tuple[bytes, dict[str, tuple[int, int]]]:
    """A safetensors file's header bytes and where each tensor's bytes lie in the file; raises ValueError
    for a header that cannot be one (a header is read before it is verified)."""
    header, start, entries = safetensors_header(handle)
    spans = {
        key: (start + entry["data_offsets"][0], start + entry["data_offsets"][1]) for key, entry in entries.items()
    }
    return header, spans


def safetensors_header(handle) -> tuple[bytes, int, dict[str, dict]]:
    """A safetensors file's header bytes, where its data begins, and each tensor's entry (dtype, shape, data_offsets
    from that beginning); raises ValueError for a header that cannot be one."""
    size_field = handle.read(8)
    size = int.from_bytes(size_field, "little") if len(size_field) == 8 else -1
    if not 0 < size <= min(MAX_HEADER_BYTES, os.fstat(handle.fileno()).st_size - 8):
        raise ValueError("not a safetensors header")
    body = handle.read(size)
    parsed = json.loads(body)
    if not isinstance(parsed, dict):
        raise ValueError("not a safetensors header")
    return size_field + body, 8 + size, {key: entry for key, entry in parsed.items() if key != "__metadata__"}


def span_digest(handle, span: tuple[int, int]) -> str:
    digest, (position, end) = blake3(), span
    while position < end:
        chunk = os.pread(handle.fileno(), min(HASH_CHUNK_BYTES, end - position), position)
        if not chunk:
            break  # past the end of the file: the digest cannot match
        digest.update(chunk)
        position += len(chunk)
    return digest.hexdigest()


def part_digests(directory: Path, names: list[str]) -> Iterator[tuple[str, str | None]]:
    """Each part `entry_digests` names, with its digest as the files are now (None where it cannot be read), in
    the order given; each file is opened, and its header parsed, once for its run of parts."""
    for file, run in itertools.groupby(names, key=lambda name: name.partition(":")[0]):
        parts = list(run)
        yield from zip(parts, file_parts(directory / file, [part.partition(":")[1:] for part in parts]), strict=True)


def file_parts(path: Path, keys: list[tuple[str, str]]) -> list[str | None]:
    """The digests of a file's parts: ("", "") the whole file, (":", "") its header, (":", key) one tensor."""
    try:
        if not any(split for split, _ in keys):
            return [file_digest(path)] * len(keys)
        with open(path, "rb") as handle:
            header, spans = safetensors_layout(handle)
            return [part_of(handle, header, spans, split, key) for split, key in keys]
    except (OSError, ValueError, TypeError, IndexError):
        return [None] * len(keys)


def part_of(handle, header: bytes, spans: dict, split: str, key: str) -> str | None:
    if not split:
        return None  # a whole safetensors file is digested by part only
    if not key:
        return blake3(header).hexdigest()
    return span_digest(handle, spans[key]) if key in spans else None
