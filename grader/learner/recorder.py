"""What a check records of the learner's code for its diagnosis: named tensors, returns and submodule outputs."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from grader.shared.wire import ParameterShape, Record, RecordKind


def parameter_shapes(root, recorder: Recorder) -> list[ParameterShape]:
    shapes = []
    for name, parameter in root.named_parameters():
        path, _, own = name.rpartition(".")
        # What carries no flag (a stand-in the recorder is handed for a tensor) trains, as a Parameter does by default.
        trains = bool(getattr(parameter, "requires_grad", True))
        shapes.append(ParameterShape(recorder.tag_of_path(path), own, list(parameter.shape), trains))
    return shapes


class Recorder:
    """Records, in order, each tensor the learner's code binds to a name or returns (the locals of
    every function in the learner's files, seen line by line) and each submodule's input and output,
    tagged by the module's path, which is also transformer_lens's hook prefix (`blocks.0.attn`). Each
    record keeps the line of the learner's code that produced it: the line that bound the name (the one
    run before the trace saw the change), the `return`, or the call of the submodule."""

    def __init__(self, package_dir: Path, modes: list[str], keep: list[str], root, root_tag: str, root_name: str):
        self.prefix = str(package_dir) + os.sep
        self.modes, self.keep, self.root, self.root_tag, self.root_name = modes, keep, root, root_tag, root_name
        self.paths = {id(module): name for name, module in root.named_modules()} if root is not None else {}
        self.records: list[Record] = []
        self.kept: list = []  # the values of the records whose kind a diagnosis compares
        self._last: dict = {}
        self._lines: dict = {}  # frame id: the line its last trace event was at
        self._outermost: int | None = None  # the frame of the target itself, the first of the learner's called
        self._hooks: list = []

    def tag_of_path(self, path: str) -> str:
        """`blocks.0.attn` for the attention of a block graded as `blocks.0`; the root's own name
        (`Transformer`) for a root that has no path."""
        return ".".join(part for part in (self.root_tag, path) if part) or self.root_name

    def record(self, kind: RecordKind, tag: str, name: str, value, place: tuple[str, int | None] = ("", None)) -> None:
        saved = None
        mode = "locals" if kind == "returns" else kind  # a return is seen by the same trace as the locals
        if mode in self.keep and value.device.type != "meta":  # a meta tensor has no values to keep
            saved = len(self.kept)
            self.kept.append(value.detach().cpu())  # recorded on the device, kept in the CPU's memory
        file, line = place
        self.records.append(Record(kind, tag, name, list(value.shape), saved, file, line))

    def __enter__(self):
        if "modules" in self.modes and self.root is not None:
            for path, module in self.root.named_modules():
                if path:
                    tag = self.tag_of_path(path)
                    self._hooks.append(module.register_forward_pre_hook(functools.partial(self._module_input, tag)))
                    self._hooks.append(module.register_forward_hook(functools.partial(self._module_output, tag)))
        if "locals" in self.modes:
            sys.settrace(self._global)
        return self

    def __exit__(self, *exc):
        sys.settrace(None)
        for hook in self._hooks:
            hook.remove()

    def _module_input(self, tag: str, _module, inputs) -> None:
        """The first tensor a submodule is called with, copied before its code can change it in place."""
        import torch

        given = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
        if given is not None:
            self.record("modules", tag, "input", given.clone(), self._calling_line())

    def _module_output(self, tag: str, _module, _inputs, output) -> None:
        import torch

        if isinstance(output, torch.Tensor):
            self.record("modules", tag, "output", output, self._calling_line())

    def _calling_line(self) -> tuple[str, int | None]:
        """The innermost line of the learner's code running now: for a hook, the submodule's call."""
        frame = sys._getframe(1)
        while frame is not None and not frame.f_code.co_filename.startswith(self.prefix):
            frame = frame.f_back
        return (Path(frame.f_code.co_filename).name, frame.f_lineno) if frame is not None else ("", None)

    def _global(self, frame, event, _arg):
        if event != "call" or not frame.f_code.co_filename.startswith(self.prefix):
            return None
        if self._outermost is None:
            self._outermost = id(frame)
        return self._local

    def _local(self, frame, event, arg):
        import torch

        key, file = id(frame), os.path.basename(frame.f_code.co_filename)  # on every line: no Path
        # A name bound since the last event was bound by the line run then; None before the first
        # line: the arguments. A `return` binds on its own line.
        line = frame.f_lineno if event == "return" else self._lines.get(key)
        tag = None
        for name, value in list(frame.f_locals.items()):
            if name == "self" or not isinstance(value, torch.Tensor) or self._last.get((key, name)) is value:
                continue
            self._last[(key, name)] = value
            tag = tag or self._frame_tag(frame)
            self.record("locals", tag, name, value, (file, line))
        if event == "return":
            self._lines.pop(key, None)
            if isinstance(arg, torch.Tensor):  # "return" is the target's own; a helper's is not the output
                name = "return" if key == self._outermost else f"return of {frame.f_code.co_name}"
                self.record("returns", tag or self._frame_tag(frame), name, arg, (file, frame.f_lineno))
        else:
            self._lines[key] = frame.f_lineno
        return self._local

    def _frame_tag(self, frame) -> str:
        owner = frame.f_locals.get("self")
        if id(owner) in self.paths:
            return self.tag_of_path(self.paths[id(owner)])
        return frame.f_code.co_name
