"""The device a request names, and torch's error about tensors on two devices in words a learner can act on."""

from __future__ import annotations

import re

# torch's words for tensors on two devices: cuda's kernels, and the checks of meta and mps tensors
DEVICE_MIXUP = re.compile(r"Expected all tensors to be on the same device|is not on the expected device")
DEVICE_NAME = re.compile(r"\b(?:cpu|cuda|mps|meta|xpu)(?::\d+)?\b")


class DeviceUnavailable(Exception):
    """`grade --device` asked for a device this machine's torch does not have."""


def resolve_device(requested: str):
    """The torch device of a request: `auto` is cuda, else mps, else cpu. On CUDA, TF32 is off, so
    matrix products keep float32's precision and the tolerances mean what they say."""
    import torch

    mps = getattr(torch.backends, "mps", None)
    found = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": bool(mps and mps.is_available())}
    name = next(d for d in ("cuda", "mps", "cpu") if found[d]) if requested == "auto" else requested
    if not found.get(name):
        raise DeviceUnavailable(f"--device {name}: this machine's torch {torch.__version__} finds no {name} device")
    if name == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return torch.device(name, 0) if name != "cpu" else torch.device("cpu")  # cuda:0, as tensors name it


def device_mixup(error: BaseException, device) -> str | None:
    """What a learner can act on, for torch's error about tensors on two devices; None for others."""
    text = str(error)
    if not isinstance(error, RuntimeError) or not DEVICE_MIXUP.search(text):
        return None
    inputs = str(device) if device is not None else "cpu"
    other = next((d for d in DEVICE_NAME.findall(text) if d.split(":")[0] != inputs.split(":")[0]), None)
    if other is None:
        return None
    return (
        f"your code created a tensor on {other} while the inputs are on {inputs}: create it on the "
        "input's device (device=x.device)"
    )
