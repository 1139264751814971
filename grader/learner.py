"""The learner's process: runs the learner's code and sends back nothing but tensors and facts.

Started by `runner.Worker` as `python -m grader.learner`. It says `wire.READY` once torch is
imported, then reads one `wire.Request` per line on stdin and, once the check's process has
ended, answers with one `wire.WorkerAnswer` line on its stdout (all else printed goes to stderr).
The check's process writes its reply and its outputs into the check's scratch directory, where
the grader reads and validates them: it imports the learner's package under a private name,
never the reference, and every comparison happens in the grader.

When the request says `fork` (Linux) this process is a fork server that never runs learner code
itself: it imports torch once, then runs each check in a forked copy of itself, confined by
`grader.sandbox`, within a deadline and a memory limit for the check's processes as a whole, and
kills whatever the check started once it ends. Otherwise checks run in this process in turn,
unconfined; the grader enforces their timeouts and replaces this process when one ends it.

The learner's modules, weights and inputs go to the request's device; outputs come back on the CPU.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib.abc
import importlib.util
import json
import linecache
import os
import re
import signal
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from . import sandbox, wire
from .drivers.replay import replaying
from .types import counts_by_part
from .wire import Capture, CaseSpec, Request

PACKAGE_NAME = "learner_package"
FORBIDDEN_IMPORTS = ("transformer_lens", "transformers", "solutions")
# torch's words for tensors on two devices: cuda's kernels, and the checks of meta and mps tensors
DEVICE_MIXUP = re.compile(r"Expected all tensors to be on the same device|is not on the expected device")
DEVICE_NAME = re.compile(r"\b(?:cpu|cuda|mps|meta|xpu)(?::\d+)?\b")
RANDOM_FILLS = ("normal_", "uniform_", "bernoulli_", "exponential_", "cauchy_", "log_normal_", "geometric_", "random_")
# What the code a driver runs imports on first use, beyond the driver itself: torch.optim's first
# optimizer imports torch._dynamo, about 2 s, in each training check that makes one.
DRIVER_IMPORTS = {"grader.drivers.training": ("torch._dynamo",)}
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


class Forbidden(ImportError):
    """The learner's code reached for the reference instead of computing."""


class ReferenceBlocker(importlib.abc.MetaPathFinder):
    """Refuses the modules that would let an exercise delegate to the reference."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in FORBIDDEN_IMPORTS:
            raise Forbidden(f"exercises may not import {fullname.split('.')[0]}: write the computation yourself")
        return None


def install_guards(forbidden_dirs: list[Path]) -> None:
    """Block reference imports, and reads of the solutions or the expected outputs, for good."""
    sys.meta_path.insert(0, ReferenceBlocker())
    prefixes = tuple(str(d) + os.sep for d in forbidden_dirs)

    def audit(event: str, args: tuple) -> None:
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(args[0]))
            if path.startswith(prefixes) or os.path.basename(path) == "expected.safetensors":
                raise Forbidden(f"exercises may not read {path}: write the computation yourself")

    sys.addaudithook(audit)


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300]}" if text else type(error).__name__


class LearnerPackage:
    def __init__(self, path: Path):
        self.path = path.resolve()
        spec = importlib.util.spec_from_file_location(
            PACKAGE_NAME, self.path / "__init__.py", submodule_search_locations=[str(self.path)]
        )
        if spec is None or spec.loader is None:
            raise ImportError(f"{self.path} is not a Python package (no __init__.py)")
        package = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE_NAME] = package
        spec.loader.exec_module(package)

    def module(self, file: str):
        if not (self.path / f"{file}.py").is_file():
            raise LookupError(f"{file}.py is missing from {self.path}")
        return importlib.import_module(f"{PACKAGE_NAME}.{file}")

    def attribute(self, file: str, name: str):
        module = self.module(file)
        if not hasattr(module, name):
            raise LookupError(f"{file}.py has no {name}")
        return getattr(module, name)

    def config(self):
        return self.attribute("config", "Config")()


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


class WeightsMismatch(Exception):
    def __init__(self, facts: dict):
        super().__init__("weights do not fit")
        self.facts = facts


def load_weights(module, sources: dict) -> dict:
    """Copy reference parameters into the learner's, one tensor at a time to keep memory low.

    `sources` maps a parameter name to (safetensors handle, key). Missing or misshapen
    parameters stop the check: a parameter that is not loaded would keep its initial value.
    """
    import torch

    own = dict(module.named_parameters())
    missing = sorted(set(own) - set(sources))
    unexpected = sorted(set(sources) - set(own))
    shapes = {name: handle.get_slice(key).get_shape() for name, (handle, key) in sources.items() if name in own}
    misshapen = {
        name: [list(own[name].shape), shape] for name, shape in shapes.items() if list(own[name].shape) != list(shape)
    }
    facts = {
        "missing": missing,
        "unexpected": unexpected,
        "misshapen": misshapen,
        "suggestions": {name: difflib.get_close_matches(name, unexpected, n=1) for name in missing},
    }
    if missing or misshapen:
        raise WeightsMismatch(facts)
    with torch.no_grad():
        for name, param in own.items():
            handle, key = sources[name]
            param.copy_(handle.get_tensor(key))
    return facts


def learner_frame(error: BaseException, package: Path) -> dict:
    """The innermost place in the learner's files where `error` came from, with the function there."""
    if isinstance(error, SyntaxError) and error.filename and Path(error.filename).resolve().is_relative_to(package):
        return {"file": Path(error.filename).name, "line": error.lineno, "code": (error.text or "").strip()}
    frames = [
        (frame, line)
        for frame, line in traceback.walk_tb(error.__traceback__)
        if Path(frame.f_code.co_filename).resolve().is_relative_to(package)
    ]
    if not frames:
        return {}
    frame, line = frames[-1]
    return code_place(frame.f_code, line)


def code_place(code, line: int) -> dict:
    """file, line, that line's code, and the function it is in: the function a comprehension or a
    nested helper belongs to, as the learner wrote it (`Beams.generate`, not `<listcomp>`)."""
    return {
        "file": Path(code.co_filename).name,
        "line": line,
        "code": linecache.getline(code.co_filename, line).strip(),
        "function": code.co_qualname.split(".<locals>")[0],
    }


def describe(value) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


class CaseContext:
    """What a driver gets for one case: the learner's package, the case's tensors, and a way to
    build the learner's modules loaded with reference weights (memoised per weights and overrides)."""

    def __init__(self, package: LearnerPackage, target: dict, weights, inputs, reply: dict, device=None):
        self.package, self.target, self.weights, self.inputs, self.reply = package, target, weights, inputs, reply
        self.device = device or "cpu"
        self.case = CaseSpec("", 0, None, [])
        self.captured: list = []  # the recorded tensors of this case, when they are kept
        self._built: dict = {}

    def start(self, case: CaseSpec) -> None:
        self.case, self.captured = case, []

    @property
    def args(self) -> list:
        return [self.inputs.get_tensor(wire.arg_key(self.case.name, i)).to(self.device) for i in range(self.case.args)]

    def tensor(self, name: str):
        """An extra input tensor of this case (a `Case.extra` of the check)."""
        return self.inputs.get_tensor(wire.extra_key(self.case.name, name)).to(self.device)

    def module(self, cls):
        """`cls(Config())` of the learner's package, loaded with this case's reference weights."""
        prefix = self.case.weights or ""
        memo = (cls, prefix, tuple(self.case.overrides))
        if memo not in self._built:
            self._built = {}  # one at a time: the whole model is large
            with SkipRandomFills() if self.target.get("fast_init", True) else contextlib.nullcontext():
                module = cls(self.package.config())
            names = [k[len(prefix) :] for k in self.weights.keys() if k.startswith(prefix)]
            overrides = self.case.overrides
            sources = {
                name: (self.inputs, wire.override_key(self.case.name, name))
                if name in overrides
                else (self.weights, prefix + name)
                for name in names
            }
            self.reply["weights"] = load_weights(module, sources)
            self.reply["param_counts"] = counts_by_part((name, p.numel()) for name, p in module.named_parameters())
            self._built[memo] = module.to(self.device)  # loaded on the CPU, where the weights are read
        return self._built[memo]


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


def source_place(function) -> dict | None:
    """Where the learner defined `function`: the place a failing check points to."""
    import inspect

    try:
        file, line = Path(inspect.getsourcefile(function)).name, inspect.getsourcelines(function)[1]
    except (TypeError, OSError):
        return None
    return {"file": file, "line": line, "function": getattr(function, "__qualname__", "")}


def target_function(ctx: CaseContext):
    """The learner's function, or the method of its module loaded with this case's weights."""
    target = ctx.target
    obj = ctx.package.attribute(target["file"], target["name"])
    function = obj if target["method"] is None else getattr(ctx.module(obj), target["method"])
    ctx.reply["target_where"] = source_place(function)
    return function


def call_target(ctx: CaseContext, args: list, capture: Capture | None = None):
    """The default driver: call the target, recording its intermediates when asked to; the submodules
    the case ships GPT-2's outputs for answer them (`grader.drivers.replay`)."""
    function = target_function(ctx)
    root = getattr(function, "__self__", None)
    if not capture:
        with replaying(ctx, root):
            return function(*args)
    root_tag = (ctx.case.weights or "").rstrip(".")
    recorder = Recorder(ctx.package.path, capture.modes, capture.keep, root, root_tag, ctx.target["name"])
    with recorder, replaying(ctx, root):
        try:
            return function(*args)
        finally:
            ctx.reply.setdefault("captures", {})[ctx.case.name] = recorder.records
            ctx.captured = recorder.kept
            if root is not None and "parameters" not in ctx.reply:  # the first case's, like its trace
                ctx.reply["parameters"] = parameter_shapes(root, recorder)


def parameter_shapes(root, recorder: Recorder) -> list[dict]:
    shapes = []
    for name, parameter in root.named_parameters():
        path, _, own = name.rpartition(".")
        shapes.append({"tag": recorder.tag_of_path(path), "name": own, "shape": list(parameter.shape)})
    return shapes


def driver_for(target: dict):
    if not target.get("driver"):
        return call_target
    module_name, _, function = target["driver"].partition(":")
    return getattr(importlib.import_module(module_name), function)


class Recorder:
    """Records, in order, each tensor the learner's code binds to a name or returns (the locals of
    every function in the learner's files, seen line by line) and each submodule's output, tagged by
    the module's path, which is also transformer_lens's hook prefix (`blocks.0.attn`). Each record
    keeps the line of the learner's code that produced it: the line that bound the name (the one
    run before the trace saw the change), the `return`, or the call of the submodule."""

    def __init__(self, package_dir: Path, modes: list[str], keep: list[str], root, root_tag: str, root_name: str):
        self.prefix = str(package_dir) + os.sep
        self.modes, self.keep, self.root, self.root_tag, self.root_name = modes, keep, root, root_tag, root_name
        self.paths = {id(module): name for name, module in root.named_modules()} if root is not None else {}
        self.records: list[dict] = []
        self.kept: list = []  # the values of the records whose kind a diagnosis compares
        self._last: dict = {}
        self._lines: dict = {}  # frame id: the line its last trace event was at
        self._hooks: list = []

    def tag_of_path(self, path: str) -> str:
        """`blocks.0.attn` for the attention of a block graded as `blocks.0`; the root's own name
        (`Transformer`) for a root that has no path."""
        return ".".join(part for part in (self.root_tag, path) if part) or self.root_name

    def record(self, kind: str, tag: str, name: str, value, place: tuple[str, int | None] = ("", None)) -> None:
        saved = None
        mode = "locals" if kind == "returns" else kind  # a return is seen by the same trace as the locals
        if mode in self.keep and value.device.type != "meta":  # a meta tensor has no values to keep
            saved = len(self.kept)
            self.kept.append(value.detach().cpu())  # recorded on the device, kept in the CPU's memory
        file, line = place
        self.records.append(
            {
                "kind": kind,
                "tag": tag,
                "name": name,
                "shape": list(value.shape),
                "saved": saved,
                "file": file,
                "line": line,
            }
        )

    def __enter__(self):
        if "modules" in self.modes and self.root is not None:
            for path, module in self.root.named_modules():
                if path:
                    hook = functools.partial(self._module_output, self.tag_of_path(path))
                    self._hooks.append(module.register_forward_hook(hook))
        if "locals" in self.modes:
            sys.settrace(self._global)
        return self

    def __exit__(self, *exc):
        sys.settrace(None)
        for hook in self._hooks:
            hook.remove()

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
        return self._local if event == "call" and frame.f_code.co_filename.startswith(self.prefix) else None

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
            if isinstance(arg, torch.Tensor):
                self.record("returns", tag or self._frame_tag(frame), "return", arg, (file, frame.f_lineno))
        else:
            self._lines[key] = frame.f_lineno
        return self._local

    def _frame_tag(self, frame) -> str:
        owner = frame.f_locals.get("self")
        if id(owner) in self.paths:
            return self.tag_of_path(self.paths[id(owner)])
        return frame.f_code.co_name


def run_request(package: LearnerPackage, request: Request, weights, inputs) -> dict:
    """Every case of the request, in order, until one cannot be completed; the outputs written to scratch."""
    import torch
    from safetensors.torch import save_file

    reply: dict = {"outputs": [], "param_counts": {}}
    target = asdict(request.target)
    try:
        device = resolve_device(request.device)
    except DeviceUnavailable as error:
        return {**reply, "status": "error", "error": str(error)}
    ctx = CaseContext(package, target, weights, inputs, reply, device)
    drive = driver_for(target)
    if drive is call_target and request.capture:
        drive = functools.partial(call_target, capture=request.capture)
    outputs = {}
    try:
        for case in request.cases:
            ctx.start(case)
            args = ctx.args
            torch.manual_seed(0)  # anything random in the learner's code repeats from run to run
            with torch.no_grad():
                result = drive(ctx, args)
            problem = output_problem(result, args, from_driver=bool(target.get("driver")))
            if problem:
                reply["bad_output"] = {"case": case.name, "problem": problem}
                break
            outputs[wire.output_key(case.name)] = result.detach().cpu().clone().contiguous()
            for i, value in enumerate(ctx.captured):
                outputs[wire.capture_key(case.name, i)] = readable(value)
            if request.watch_inputs:
                for i, arg in enumerate(args):
                    outputs[wire.arg_after_key(case.name, i)] = arg.detach().cpu().clone().contiguous()
            reply["outputs"].append(case.name)
    except WeightsMismatch as mismatch:
        reply.update(status="weights", weights=mismatch.facts)
    except BaseException as error:  # learner code may raise SystemExit or KeyboardInterrupt too
        reply.update(failure_reply(error, package.path, device))
    if outputs:
        save_file(outputs, str(Path(request.scratch) / wire.OUTPUTS_FILE))
    reply.setdefault("status", "ran")
    return reply


def readable(value):
    """A recorded tensor in a dtype the grader's NumPy can read (a bfloat16 local becomes float32)."""
    import torch

    value = value.detach().clone().contiguous()
    return value.float() if value.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2) else value


def output_problem(result, args: list, from_driver: bool = False) -> str | None:
    """Why `result` cannot be compared at all, or None. Values are judged in the parent. A driver
    (grader code) may sum up on the CPU what the learner's code computed on another device."""
    import torch

    if type(result) is not torch.Tensor:
        return f"returned a {describe(result)}, not a torch.Tensor"
    device = next((arg.device for arg in args if isinstance(arg, torch.Tensor)), torch.device("cpu"))
    if result.device != device and not (from_driver and result.device.type == "cpu"):
        return f"returned a tensor on {result.device}, expected {device} (the input's device)"
    if result.dtype == torch.bfloat16 or result.dtype.itemsize == 1 and result.dtype.is_floating_point:
        return f"returned {result.dtype}: compute in float32, as GPT-2 does"
    return None


def failure_reply(error: BaseException, package: Path, device=None) -> dict:
    where = learner_frame(error, package)
    mixup = device_mixup(error, device)
    if mixup:
        return {"status": "error", "error": mixup, "where": where or None}
    if isinstance(error, Forbidden):
        return {"status": "forbidden", "error": str(error), "where": where or None}
    if isinstance(error, PermissionError) and error.filename:
        message = f"exercises may not read or write {error.filename}: the sandbox allows only your package and Python"
        return {"status": "forbidden", "error": message, "where": where or None}
    if isinstance(error, NotImplementedError):
        return {"status": "todo", "where": where or None}
    return {"status": "error", "error": one_line(error), "where": where or None}


def run_check(request: Request, forked: bool) -> None:
    """One check in this process, start to finish: its reply and outputs land in its scratch directory.
    In a fork of its own it is also capped in memory and, when asked, confined."""
    from safetensors import safe_open

    package_path = Path(request.package).resolve()
    scratch = Path(request.scratch)
    try:
        # Opened before confinement: the check reads the reference only through these two handles.
        with safe_open(request.weights, "pt") as weights, safe_open(request.inputs, "pt") as inputs:
            if forked:
                limit_memory(request.memory_bytes)  # after the mmap of the weights, which reading them costs nothing
            if forked and request.sandbox:
                sandbox.confine(sandbox.policy_for(package_path, scratch))
            solutions = Path(__file__).resolve().parent.parent / "solutions"
            install_guards([] if package_path == solutions else [solutions])
            # The learner's files compile from their source, never from a .pyc in their __pycache__: one written
            # within the second of a save, at the same size, would pass for the saved file (watch mode saves often).
            sys.pycache_prefix = str(scratch / "pycache")
            package = LearnerPackage(package_path)
            reply = run_request(package, request, weights, inputs)
    except BaseException as error:
        reply = failure_reply(error, package_path)
    (scratch / wire.REPLY_FILE).write_text(json.dumps(reply))


def limit_memory(extra_bytes: int) -> int:
    """Cap this process's address space at what it uses now plus `extra_bytes` (0: no cap); the cap."""
    if not extra_bytes:
        return 0
    import resource

    with open("/proc/self/status") as status:
        in_use = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (in_use + extra_bytes, in_use + extra_bytes))
    return in_use + extra_bytes


def use_scratch_for_temporary_files(scratch: Path) -> None:
    """The one writable place of a confined check: temporary files and torch's compile caches go there."""
    import tempfile

    for variable in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        os.environ[variable] = str(scratch)
    tempfile.tempdir = str(scratch)


def check_process(request: Request, answer_fd: int) -> None:
    """The forked child: its own output file, the memory cap, the sandbox, the check; never returns."""
    try:
        os.close(answer_fd)  # the fork server's own channel to the grader
        printed = os.open(Path(request.scratch) / wire.PRINTED_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(printed, 1)
        os.dup2(printed, 2)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        use_scratch_for_temporary_files(Path(request.scratch))
        run_check(request, forked=True)
    finally:
        os._exit(0)


def supervise(pid: int, request: Request) -> wire.WorkerAnswer:
    """Wait for the check's process to end, within its time and memory; then end all it started."""
    import select

    deadline = time.monotonic() + request.timeout
    pidfd = os.pidfd_open(pid)
    baseline = anonymous_memory(os.getpid())
    answer = None
    try:
        while answer is None:
            if select.select([pidfd], [], [], 0.1)[0]:
                _, status = os.waitpid(pid, 0)
                answer = (
                    wire.WorkerAnswer("answered") if status == 0 else wire.WorkerAnswer("crashed", exit_reason(status))
                )
            elif time.monotonic() > deadline:
                answer = wire.WorkerAnswer("timeout", f"no answer within {request.timeout:g} s (an infinite loop?)")
            elif request.memory_bytes and tree_memory(pid, baseline) > baseline + request.memory_bytes:
                answer = wire.WorkerAnswer(
                    "memory", f"the check's processes used more than {request.memory_bytes / 2**30:g} GB"
                )
    finally:
        os.close(pidfd)
        sandbox.end_descendants()
    return answer


def anonymous_memory(pid: int) -> int:
    import psutil

    info = psutil.Process(pid).memory_info()
    return info.rss - info.shared


def tree_memory(pid: int, baseline: int) -> int:
    """The memory of a check's process and its descendants: pages a fork shares with the fork server
    (about `baseline` in each) are counted once."""
    import psutil

    try:
        tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = baseline
    for process in tree:
        with contextlib.suppress(psutil.Error):
            info = process.memory_info()
            total += max(0, info.rss - info.shared - baseline)
    return total


def exit_reason(status: int) -> str:
    import signal

    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return f"the check's process was killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    return f"the check's process exited with code {os.WEXITSTATUS(status)} before answering (sys.exit or os._exit?)"


def run_one(request: Request, answer_fd: int) -> wire.WorkerAnswer:
    warm_imports(request)
    if not request.fork:  # the check runs here; the grader restarts this process for the next package
        run_check(request, forked=False)
        sandbox.end_descendants()
        return wire.WorkerAnswer("answered")
    if request.sandbox:
        sandbox.allow_lists(Path(request.package).resolve())  # worked out here, once per package
    pid = os.fork()
    if pid == 0:
        check_process(request, answer_fd)
    return supervise(pid, request)


def preload() -> None:
    """Import what nearly every exercise imports, once, before any fork."""
    import psutil  # noqa: F401
    import torch  # noqa: F401

    for name in ("einops", "jaxtyping", "safetensors.torch"):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def warm_imports(request: Request) -> None:
    """Import, once and before the fork, what a check's driver and the code it drives import anyway:
    paid in every check's process otherwise. Grader and library code only, never the learner's."""
    module_name = (request.target.driver or "").partition(":")[0]
    for name in (module_name, *DRIVER_IMPORTS.get(module_name, ())) if module_name else ():
        importlib.import_module(name)


def answer_channel() -> tuple[int, object]:
    """This process's stdout, kept for the answers; fd 1 then joins stderr (the grader's log), so
    nothing printed here, by torch or by the learner's code run unforked, can pass for an answer."""
    sys.stdout.flush()
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    return answer_fd, os.fdopen(answer_fd, "w")


def serve() -> None:
    answer_fd, answers = answer_channel()
    if sys.path and Path(sys.path[0] or ".").resolve() == Path.cwd():
        sys.path.pop(0)  # `python -m` put the grader's working directory first; the learner gets none of it
    sys.dont_write_bytecode = True  # the learner's files are read, never written beside
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the grader's to handle: it ends this process itself
    sandbox.become_subreaper()
    preload()
    answers.write(wire.READY + "\n")
    answers.flush()
    for line in sys.stdin:
        answer = run_one(wire.parse_request(line), answer_fd)
        answers.write(json.dumps(asdict(answer)) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve()
