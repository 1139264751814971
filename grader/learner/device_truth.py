"""Device truth, in the check's process: the grader's own module of the same name run beside the learner's on the
check's device, from the same inputs and weights, so that the grader can tell a device that computes GPT-2 wrongly
(PyTorch's MPS backend has) from a learner who does. And the simulated faulty device the tests run it on."""

from __future__ import annotations

import contextlib
import os

# Tests and maintainers: with this set, `--device cuda` or `mps` runs on the CPU with every floating-point result
# off by FAULT (relative), so that the device, not the learner's code, is what computes wrongly.
SIMULATED_FAULT = "GPT2_GRADER_SIMULATED_FAULTY_DEVICE"
FAULT = 1e-3


def simulated(requested: str) -> bool:
    return requested != "cpu" and bool(os.environ.get(SIMULATED_FAULT))


def arithmetic(requested: str):
    """The context the check's cases run in: the simulated fault where asked for (every floating-point tensor an
    operation returns, off by FAULT), else nothing."""
    if not simulated(requested):
        return contextlib.nullcontext()
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class FaultyArithmetic(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            return result * (1 + FAULT) if isinstance(result, torch.Tensor) and result.is_floating_point() else result

    return FaultyArithmetic()


def device_name(device, requested: str) -> str:
    """The device as a report names it: its kind, its model where torch says it, and torch's version."""
    if simulated(requested):
        return f"a simulated faulty {requested} (the CPU, every floating-point result off by {FAULT:g})"
    import torch

    model = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    return f"{device}{f' ({model})' if model else ''} with torch {torch.__version__}"


def probes(device, requested: str) -> bool:
    """Whether the check's cases are probed: on any device but the CPU the reference was computed on."""
    return device.type != "cpu" or simulated(requested)


def stand_in_output(ctx, args: list):
    """The grader's own module of the target's name (`stand_in_transformer`, torch's functions) loaded as the
    learner's is, or its own function, called the same way; None where it has neither."""
    import torch

    from grader.learner.drivers import stand_in_transformer

    target = ctx.target
    own = getattr(stand_in_transformer, target.name) if target.name in stand_in_transformer.__all__ else None
    module = isinstance(own, type) and target.method == "forward"
    function = callable(own) and not isinstance(own, type) and target.method is None
    if target.driver or not (module or function):
        return None
    own = ctx.stand_in(own) if module else own
    with torch.no_grad():
        return own(*args).detach().cpu().clone().contiguous()
