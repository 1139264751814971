"""GPT-2's own sublayer outputs replayed into the learner's module, so that a check grades its wiring alone.

A case may ship, for a submodule path of the target (`ln1`, `attn`, ...), the input GPT-2 gives that sublayer
and what GPT-2's sublayer returns for it (`wire.replay_names`; precomputed by the reference builder, so no reference
code runs here). While the target runs, the learner's submodule answers GPT-2's output when it is called with
GPT-2's input, without running its own code, and runs its own code on anything else. So a block whose wiring is
right passes whatever its attention computes, and a block that feeds a sublayer the wrong tensor still fails: that
call computes with the learner's own sublayer. The match is decided in the learner's process, so code that patches
torch can fake it; what that buys is a pass for a wiring a learner who can write it knows already, since the
block's expected output itself is never shipped and the parent still compares the block's output.
"""

from __future__ import annotations

import contextlib

from grader.shared import wire

# Within this of GPT-2's input is GPT-2's input: the stream a right wiring passes on is GPT-2's to the last bit
# or nearly (another order of additions, float64 on the way), a wrong one differs by whole sublayer outputs.
RTOL, ATOL = 1e-5, 1e-6


def replayed_paths(ctx) -> list[str]:
    """The submodule paths this case ships a replay for."""
    start = wire.EXTRA.format(case=ctx.case.name, name=wire.REPLAY)
    return sorted({key[len(start) :].rpartition("/")[0] for key in ctx.inputs.keys() if key.startswith(start)})


class Replayed:
    """A submodule's forward that answers GPT-2's output for GPT-2's input and runs `own` otherwise."""

    def __init__(self, own, given, answer):
        self.own, self.given, self.answer = own, given, answer

    def __call__(self, *args, **kwargs):
        if kwargs or len(args) != 1 or not self.is_given(args[0]):
            return self.own(*args, **kwargs)
        return self.answer.clone()  # a copy: the learner's code may write into what it gets

    def is_given(self, x) -> bool:
        import torch

        if not isinstance(x, torch.Tensor) or x.shape != self.given.shape or not x.is_floating_point():
            return False
        return bool(torch.allclose(x.to(self.given), self.given, rtol=RTOL, atol=ATOL))


def submodule(root, path: str):
    try:
        return root.get_submodule(path)
    except AttributeError:  # not an nn.Module, or no such submodule
        return None


@contextlib.contextmanager
def replaying(ctx, root):
    """Within: each submodule of `root` this case ships a replay for answers it (see the module's docstring)."""
    replaced = []
    try:
        for path in replayed_paths(ctx) if root is not None else []:
            module = submodule(root, path)
            if module is None:  # named otherwise: its weights did not load, and the message says so
                continue
            given, answer = (ctx.tensor(name) for name in wire.replay_names(path))
            replaced.append((module, module.__dict__.get("forward")))
            module.forward = Replayed(module.forward, given, answer)  # an instance attribute: nn.Module calls it
        yield
    finally:
        for module, own in reversed(replaced):
            del module.forward
            if own is not None:
                module.forward = own
