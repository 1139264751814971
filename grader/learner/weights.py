"""Building the learner's modules with GPT-2's weights: random fills skipped, weights loaded or mismatches named."""

from __future__ import annotations

import difflib
import mmap
from typing import Callable, NamedTuple

from grader.shared.entry import safetensors_header
from grader.shared.wire import WeightFacts

RANDOM_FILLS = ("normal_", "uniform_", "bernoulli_", "exponential_", "cauchy_", "log_normal_", "geometric_", "random_")
RANDOM_INITS = (
    "normal_",
    "uniform_",
    "trunc_normal_",
    "kaiming_normal_",
    "kaiming_uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "orthogonal_",
    "sparse_",
)  # torch.nn.init's random fills


class WeightsMismatch(Exception):
    def __init__(self, facts: WeightFacts):
        super().__init__("weights do not fit")
        self.facts = facts


class Source(NamedTuple):
    """Where one parameter's reference value comes from."""

    shape: list[int]
    read: Callable  # () -> the tensor
    mapped: bool  # the tensor lies in a mapping of its own module's: the parameter may take it as it is


def load_weights(module, sources: dict[str, Source]) -> WeightFacts:
    """Give the learner's parameters their reference values: the mapped tensor itself where the parameter
    alone holds its memory, else a copy into it. Missing or misshapen parameters stop the check: a
    parameter that is not loaded would keep its initial value."""
    import torch

    own = dict(module.named_parameters())
    missing = sorted(set(own) - set(sources))
    unexpected = sorted(set(sources) - set(own))
    misshapen = {
        name: [list(own[name].shape), list(sources[name].shape)]
        for name in own
        if name in sources and list(own[name].shape) != list(sources[name].shape)
    }
    suggestions = {name: difflib.get_close_matches(name, unexpected, n=1) for name in missing}
    facts = WeightFacts(missing, unexpected, misshapen, suggestions)
    if missing or misshapen:
        raise WeightsMismatch(facts)
    with torch.no_grad():
        for name, param in own.items():
            value = sources[name].read()
            if sources[name].mapped and holds_its_memory_alone(param, value):
                param.data = value
            else:
                param.copy_(value)
    return facts


def holds_its_memory_alone(param, value) -> bool:
    """Whether `param` may take `value`'s memory instead of a copy: same dtype, on the CPU, and no other
    tensor shares the parameter's memory (a view the learner's code kept would go on reading the old one)."""
    import torch

    use_count = getattr(torch._C, "_storage_Use_Count", None)  # absent from some torch: then always a copy
    if use_count is None or param.dtype != value.dtype or param.device.type != "cpu":
        return False
    storage = param.untyped_storage()
    return storage.nbytes() == param.nbytes and use_count(storage._cdata) == 2  # the parameter's, and `storage`


class WeightsFile:
    """The reference's weights, through their safetensors handle, and mapped afresh for each module built.

    Each module gets a private copy-on-write mapping of the file (ACCESS_COPY): its parameters use GPT-2's
    values where they lie, in the page cache, instead of a 500 MB copy each time the whole model is built,
    and what the learner's code writes into them stays in that module's own pages. The offsets come from
    the safetensors header (`entry.safetensors_header`: the library does not expose them). Opened before the
    check's process is confined.
    """

    DTYPES = {"F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16", "I64": "int64"}

    def __init__(self, path: str, handle):
        self.handle = handle
        self.file = open(path, "rb")
        _, self.data_start, self.entries = safetensors_header(self.file)

    def keys(self) -> list[str]:
        return list(self.entries)

    def sources(self, names: dict[str, str]) -> dict[str, Source]:
        """A Source per parameter name of `names` (parameter name -> key of this file), all in one new mapping
        of the part of the file that holds them (a check's memory limit counts what is mapped)."""
        spans = [self.entries[key]["data_offsets"] for key in names.values()]
        if not spans:
            return {}
        first = self.data_start + min(start for start, _ in spans)
        first -= first % mmap.ALLOCATIONGRANULARITY  # where a mapping may begin
        length = self.data_start + max(end for _, end in spans) - first
        mapping = mmap.mmap(self.file.fileno(), length, offset=first, access=mmap.ACCESS_COPY) if length else None
        return {name: self._source(mapping, self.data_start - first, key) for name, key in names.items()}

    def _source(self, mapping, data_start: int, key: str) -> Source:
        """`key`'s Source; `data_start`: where the tensors' data begins in `mapping`."""
        import torch

        entry = self.entries[key]
        dtype, (start, end) = self.DTYPES.get(entry["dtype"]), entry["data_offsets"]
        if dtype is None or end == start:  # a dtype torch.frombuffer is not given here, or an empty tensor
            return Source(entry["shape"], lambda: self.handle.get_tensor(key), False)
        torch_dtype = getattr(torch, dtype)

        def read():
            count = (end - start) // torch_dtype.itemsize
            return torch.frombuffer(mapping, dtype=torch_dtype, count=count, offset=data_start + start).view(
                entry["shape"]
            )

        return Source(entry["shape"], read, True)

    def close(self) -> None:
        self.file.close()


class SkipRandomFills:
    """Skip the random initialisation of parameters that reference weights overwrite anyway.

    Only in-place random fills (what nn.init uses) are skipped, so a parameter keeps its
    allocated shape, and any parameter the weights do not cover is reported missing as usual.
    """

    def __enter__(self):
        import torch
        from torch.overrides import TorchFunctionMode

        # nn.init's own functions reach a mode before the Tensor method they call (which the mode then
        # no longer sees), so both are skipped.
        skipped = {getattr(torch.Tensor, name) for name in RANDOM_FILLS}
        skipped |= {getattr(torch.nn.init, name) for name in RANDOM_INITS}

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                if func in skipped:  # nn.init passes its tensor by keyword
                    return args[0] if args else (kwargs or {}).get("tensor")
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)
