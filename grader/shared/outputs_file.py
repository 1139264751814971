"""The outputs file a check's process leaves: safetensors' format, its header checked before any tensor is read.

8 bytes (little-endian) giving the header's length, the header (JSON: each tensor's dtype, shape and byte range in
the data after it), the data. Checked here, before any tensor is read, so that no forged header makes the grader
read more than it means to. A leaf of grader.shared, beside `wire`, whose reply checks it shares.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass
from typing import BinaryIO, Literal

from pydantic import NonNegativeInt, TypeAdapter, ValidationError

from grader.shared.wire import MAX_REPLY_BYTES, BadReply, clean_text, malformed, message

# safetensors' dtype -> (NumPy's name or None, bytes each)
DTYPES = {"F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": (None, 2), "F8_E4M3": (None, 1)}
DTYPES |= {"F8_E5M2": (None, 1), "BOOL": ("?", 1), "I64": ("<i8", 8), "I32": ("<i4", 4), "I16": ("<i2", 2)}
DTYPES |= {"I8": ("i1", 1), "U64": ("<u8", 8), "U32": ("<u4", 4), "U16": ("<u2", 2), "U8": ("u1", 1)}


@message
class TensorEntry:
    """One tensor of an outputs file, as its header describes it."""

    dtype: Literal[tuple(DTYPES)]  # type: ignore[valid-type]
    shape: list[NonNegativeInt]
    data_offsets: tuple[NonNegativeInt, NonNegativeInt]  # its bytes, from the end of the header

    @property
    def nbytes(self) -> int:
        return self.data_offsets[1] - self.data_offsets[0]

    @property
    def numpy_dtype(self) -> str | None:
        return DTYPES[self.dtype][0]


HEADER = TypeAdapter(dict[str, TensorEntry])


@dataclass(frozen=True)
class OutputsIndex:
    tensors: dict[str, TensorEntry]
    data_start: int  # where the data begins in the file: `data_offsets` count from here


def outputs_index(handle: BinaryIO) -> OutputsIndex | BadReply:
    """Every tensor of an outputs file, from its header alone: a bounded header, known dtypes, and
    byte ranges that match their shapes, lie inside the file and do not overlap."""
    size = os.fstat(handle.fileno()).st_size
    length = int.from_bytes(handle.read(8), "little")
    if size < 8 or length > min(MAX_REPLY_BYTES, size - 8):
        return BadReply("the check's outputs file has no readable header")
    try:
        data = json.loads(handle.read(length))
    except (ValueError, RecursionError):
        return BadReply("the check's outputs file has a header that is not JSON")
    if isinstance(data, dict):
        data.pop("__metadata__", None)
    try:
        tensors = HEADER.validate_python(data)
    except ValidationError as error:
        return BadReply(malformed("the check's outputs file", error))
    data_bytes = size - 8 - length
    for name, entry in tensors.items():
        begin, end = entry.data_offsets
        if not begin <= end <= data_bytes or entry.nbytes != math.prod(entry.shape) * DTYPES[entry.dtype][1]:
            return BadReply(
                clean_text(f"the check's outputs file is malformed ({name}: its bytes and shape disagree)", 300)
            )
    spans = sorted(entry.data_offsets for entry in tensors.values() if entry.nbytes)
    if any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans)):
        return BadReply("the check's outputs file is malformed (two tensors share bytes)")
    return OutputsIndex(tensors, 8 + length)
