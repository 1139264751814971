"""One check's cases in the check's process: the learner's target driven case by case, its outputs written."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
from dataclasses import is_dataclass, replace
from pathlib import Path

from grader.learner import device_truth
from grader.learner.device import DeviceUnavailable, device_mixup, resolve_device
from grader.learner.drivers.replay import replaying
from grader.learner.guards import Forbidden
from grader.learner.package import LearnerPackage, describe, in_place_update, learner_frame, one_line, source_place
from grader.learner.recorder import Recorder, parameter_shapes
from grader.learner.weights import SkipRandomFills, Source, WeightsMismatch, load_weights
from grader.shared import wire
from grader.shared.types import counts_by_part
from grader.shared.wire import Capture, CaseSpec, Reply, ReplyStatus, Request, TargetSpec

# One thread for torch in every check: the same sums in the same order on any machine, so every number a
# report gives repeats; the checks' matrices are small (measured: no check slower on one thread than on two),
# and a second lane runs beside this one on the other core (runner.lanes.parallel).
CHECK_THREADS = 1


class CaseContext:
    """What a driver gets for one case: the learner's package, the case's tensors, and a way to
    build the learner's modules loaded with reference weights (memoised per weights and overrides);
    and the check's reply so far, which drivers add to through `update_reply`."""

    def __init__(self, package: LearnerPackage, target: TargetSpec, weights, inputs, device=None):
        self.package, self.target, self.weights, self.inputs = package, target, weights, inputs
        self.device = device or "cpu"
        self.reply = Reply("ran")
        self.stand_in_decided = False  # whether `reply.stand_in` is this check's answer yet (interp asks once)
        self.case = CaseSpec("", 0, None, [])
        self.captured: list = []  # the recorded tensors of this case, when they are kept
        self._built: dict = {}
        self._stand_ins: dict = {}

    def update_reply(self, **fields) -> None:
        """The reply with these fields set; a field the wire format does not have is a TypeError here."""
        self.reply = replace(self.reply, **fields)

    def start(self, case: CaseSpec) -> None:
        self.case, self.captured = case, []

    @property
    def args(self) -> list:
        return [
            self.inputs.get_tensor(wire.ARG.format(case=self.case.name, i=i)).to(self.device)
            for i in range(self.case.args)
        ]

    def tensor(self, name: str):
        """An extra input tensor of this case (a `Case.extra` of the check)."""
        return self.inputs.get_tensor(wire.EXTRA.format(case=self.case.name, name=name)).to(self.device)

    def module(self, cls):
        """`cls(Config())` of the learner's package, loaded with this case's reference weights; at the case's
        own config, with its own weights, where it names another model (`CaseSpec.config`)."""
        memo = self._memo(cls)
        if memo not in self._built:
            self._built = {}  # one at a time: the whole model is large
            module, facts = self._loaded(cls)
            self.update_reply(
                weights=facts,
                param_counts=counts_by_part((name, p.numel()) for name, p in module.named_parameters()),
            )
            self._built[memo] = module
        return self._built[memo]

    def stand_in(self, cls):
        """The grader's own module `cls`, loaded as `module` loads the learner's (`device_truth`); one at a time."""
        memo = self._memo(cls)
        if memo not in self._stand_ins:
            self._stand_ins = {memo: self._loaded(cls)[0]}
        return self._stand_ins[memo]

    def _memo(self, cls) -> tuple:
        """What a built module is remembered by: its class, and the case's weights, overrides and config."""
        return cls, self.case.weights, tuple(self.case.overrides), tuple(sorted(self.case.config.items()))

    def _loaded(self, cls):
        """`cls(Config())` on the device, loaded with the case's weights, and what loading them found."""
        prefix = self.case.weights or ""
        with SkipRandomFills() if self.target.fast_init else contextlib.nullcontext():
            module = cls(self.config())
        overrides = set(self.case.overrides)
        # Another model's parameters are all the case's own; GPT-2's are the weights file's under the prefix.
        keys = {} if self.case.config else self._weights_under(prefix)
        sources = self.weights.sources({name: key for name, key in keys.items() if name not in overrides})
        sources |= {name: self._override(name) for name in overrides if self.case.config or name in keys}
        facts = load_weights(module, sources)
        return module.to(self.device), facts  # loaded on the CPU, where the weights are read

    def _weights_under(self, prefix: str) -> dict[str, str]:
        """The weights file's keys under `prefix`, by the name of the parameter each is (the prefix left out)."""
        return {key[len(prefix) :]: key for key in self.weights.keys() if key.startswith(prefix)}

    def config(self):
        """The learner's Config: GPT-2's, or the case's model's (its fields replaced; a dataclass is needed)."""
        config = self.package.config()
        if not self.case.config:
            return config
        if not is_dataclass(config):
            raise TypeError("Config must be a dataclass: this case builds a smaller model with dataclasses.replace")
        return replace(config, **self.case.config)

    def _override(self, name: str) -> Source:
        """A parameter's value this case replaces GPT-2's with (an input of the check's own)."""
        key = wire.OVERRIDE.format(case=self.case.name, parameter=name)
        return Source(self.inputs.get_slice(key).get_shape(), lambda: self.inputs.get_tensor(key), False)

    def target_function(self):
        """The learner's function, or the method of its module loaded with this case's weights."""
        obj = self.package.attribute(self.target.file, self.target.name)
        function = obj if self.target.method is None else getattr(self.module(obj), self.target.method)
        self.point_at(function)
        return function

    def call(self, *args, capture: Capture | None = None):
        """The target called on `args` as the default driver calls it, recorded where the check captures: for a
        driver that only adapts the arguments (drivers.offset)."""
        return call_target(self, list(args), capture)

    def point_at(self, function, also=()) -> None:
        """Name `function`, where the learner defined it, as the place a failing check points to; `also`, the other
        functions it calls that a named mistake may be in. A decorated method (torch.inference_mode) is the
        learner's function it wraps."""
        function = inspect.unwrap(function)
        methods = [place for place in (source_place(inspect.unwrap(f)) for f in also) if place]
        self.update_reply(target_where=source_place(function), in_place=in_place_update(function), methods=methods)


def call_target(ctx: CaseContext, args: list, capture: Capture | None = None):
    """The default driver: call the target, recording its intermediates when asked to; the submodules
    the case ships GPT-2's outputs for answer them (`grader.learner.drivers.replay`)."""
    function = ctx.target_function()
    root = getattr(function, "__self__", None)
    if not capture:
        with replaying(ctx, root):
            return function(*args)
    root_tag = (ctx.case.weights or "").rstrip(".")
    recorder = Recorder(ctx.package.path, capture.modes, capture.keep, root, root_tag, ctx.target.name)
    with recorder, replaying(ctx, root):
        try:
            return function(*args)
        finally:
            ctx.update_reply(captures={**ctx.reply.captures, ctx.case.name: recorder.records})
            ctx.captured = recorder.kept
            if root is not None and not ctx.reply.parameters:  # the first case's, like its trace
                ctx.update_reply(parameters=parameter_shapes(root, recorder))


def driver_for(target: TargetSpec):
    if not target.driver:
        return call_target
    module_name, _, function = target.driver.partition(":")
    return getattr(importlib.import_module(module_name), function)


def run_request(package: LearnerPackage, request: Request, weights, inputs) -> Reply:
    """Every case of the request, in order, until one cannot be completed; the outputs written to scratch."""
    import torch
    from safetensors.torch import save_file

    from grader.learner.part_stand_ins import standing_in  # torch's: imported with it, not with this module

    torch.set_num_threads(CHECK_THREADS)
    try:
        device = torch.device("cpu") if device_truth.simulated(request.device) else resolve_device(request.device)
    except DeviceUnavailable as error:
        return Reply("error", error=str(error))
    ctx = CaseContext(package, request.target, weights, inputs, device)
    if device_truth.probes(device, request.device):
        ctx.update_reply(device=device_truth.device_name(device, request.device))
    outputs: dict = {}
    try:
        with device_truth.arithmetic(request.device), standing_in(package, request.stand_ins):
            run_cases(ctx, request, outputs)
    except WeightsMismatch as mismatch:
        ctx.update_reply(status="weights", weights=mismatch.facts)
    except BaseException as error:  # learner code may raise SystemExit or KeyboardInterrupt too
        ctx.reply = failure_reply(error, package.path, device, ctx.reply)
    ctx.update_reply(stood_in=package.stood_in())
    if outputs:
        save_file(outputs, str(Path(request.scratch) / wire.OUTPUTS_FILE))
    return ctx.reply


def run_cases(ctx: CaseContext, request: Request, outputs: dict) -> None:
    """Drive each case in turn, its tensors into `outputs` and its name into the reply, until one returns
    what cannot be compared (the reply's `bad_output`) or raises (to the caller)."""
    import torch

    drive = driver_for(request.target)
    if request.capture:  # the default driver, or one that calls the target through it (drivers.offset)
        drive = functools.partial(drive, capture=request.capture)
    for case in request.cases:
        ctx.start(case)
        args = ctx.args
        torch.manual_seed(request.round)  # anything random in the learner's code repeats from run to run
        with torch.no_grad():
            result = drive(ctx, args)
        problem = output_problem(result, args, from_driver=bool(request.target.driver))
        if problem:
            ctx.update_reply(bad_output=wire.BadOutput(case.name, problem))
            return
        outputs[wire.OUTPUT.format(case=case.name)] = result.detach().cpu().clone().contiguous()
        if device_truth.probes(ctx.device, request.device):
            probe = device_truth.stand_in_output(ctx, ctx.args)  # fresh inputs: the learner's may have changed
            if probe is not None:
                outputs[wire.DEVICE_PROBE.format(case=case.name)] = probe
        for i, value in enumerate(ctx.captured):
            outputs[wire.CAPTURE.format(case=case.name, i=i)] = readable(value)
        if request.watch_inputs:
            for i, arg in enumerate(args):
                outputs[wire.ARG_AFTER.format(case=case.name, i=i)] = arg.detach().cpu().clone().contiguous()
        ctx.update_reply(outputs=[*ctx.reply.outputs, case.name])


def readable(value):
    """A recorded tensor in a dtype the grader's NumPy can read (a bfloat16 local becomes float32)."""
    import torch

    value = value.detach().clone().contiguous()
    return value.float() if value.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2) else value


def output_problem(result, args: list, from_driver: bool = False) -> str | None:
    """Why `result` cannot be compared at all, or None. Values are judged in the parent. A driver
    (grader code) may sum up on the CPU what the learner's code computed on another device."""
    import torch

    if result is None:  # a forward without `return`, the commonest way to return nothing
        return "returned None: is its `return` missing?"
    if type(result) is not torch.Tensor:
        return f"returned a {describe(result)}, not a torch.Tensor"
    device = next((arg.device for arg in args if isinstance(arg, torch.Tensor)), torch.device("cpu"))
    if result.device != device and not (from_driver and result.device.type == "cpu"):
        return f"returned a tensor on {result.device}, expected {device} (the input's device)"
    if result.dtype == torch.bfloat16 or result.dtype.itemsize == 1 and result.dtype.is_floating_point:
        return f"returned {result.dtype}: compute in float32, as GPT-2 does"
    return None


def failure_reply(error: BaseException, package: Path, device=None, so_far: Reply | None = None) -> Reply:
    """The reply of a check whose learner code raised `error`: what it completed (`so_far`), then why it
    stopped and where in the learner's files."""
    status, message = failure(error, device)
    return replace(so_far or Reply(status), status=status, error=message, where=learner_frame(error, package))


def failure(error: BaseException, device=None) -> tuple[ReplyStatus, str]:
    """The reply's status and message for `error`."""
    mixup = device_mixup(error, device)
    if mixup:
        return "error", mixup
    if isinstance(error, Forbidden):
        return "forbidden", str(error)
    if isinstance(error, PermissionError) and error.filename:
        return (
            "forbidden",
            f"exercises may not read or write {error.filename}: the sandbox allows only your package and Python",
        )
    if isinstance(error, NotImplementedError):
        return "todo", ""
    return "error", one_line(error)
