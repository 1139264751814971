"""The child side: runs the learner's code and sends back nothing but tensors and facts.

Started by `runner.Worker` as `python -m grader.learner PACKAGE WEIGHTS INPUTS FD`. It reads one
JSON request per line on stdin, writes each case's output to a safetensors file, and answers with
one JSON line on file descriptor FD. It imports the learner's package under a private name, never
the reference, and every comparison happens in the parent on the tensors it writes.
"""

from __future__ import annotations

import difflib
import importlib.abc
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path

PACKAGE_NAME = "learner_package"
FORBIDDEN_IMPORTS = ("transformer_lens", "transformers", "solutions")


class ForbiddenImport(ImportError):
    pass


class ReferenceBlocker(importlib.abc.MetaPathFinder):
    """Refuses the modules that would let an exercise delegate to the reference."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in FORBIDDEN_IMPORTS:
            raise ForbiddenImport(f"exercises may not import {fullname.split('.')[0]}: write the computation yourself")
        return None


class LearnerPackage:
    def __init__(self, path: Path):
        self.path = path.resolve()
        spec = importlib.util.spec_from_file_location(PACKAGE_NAME, self.path / "__init__.py", submodule_search_locations=[str(self.path)])
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


class WeightsMismatch(Exception):
    def __init__(self, facts: dict):
        super().__init__("weights do not fit")
        self.facts = facts


def load_weights(module, provided: dict) -> dict:
    """Copy reference parameters into the learner's; missing or misshapen ones stop the check."""
    import torch

    own = dict(module.named_parameters())
    missing = sorted(set(own) - set(provided))
    unexpected = sorted(set(provided) - set(own))
    misshapen = {name: [list(own[name].shape), list(provided[name].shape)] for name in own if name in provided and own[name].shape != provided[name].shape}
    facts = {"missing": missing, "unexpected": unexpected, "misshapen": misshapen, "suggestions": {name: difflib.get_close_matches(name, unexpected, n=1) for name in missing}}
    if missing or misshapen:
        raise WeightsMismatch(facts)
    with torch.no_grad():
        for name, param in own.items():
            param.copy_(provided[name])
    return facts


def param_counts(module) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name, param in module.named_parameters():
        part = name.split(".")[0]
        counts[part] = counts.get(part, 0) + param.numel()
    counts["total"] = sum(counts.values())
    return counts


def learner_frame(error: BaseException, package: Path) -> dict:
    """The innermost place in the learner's files where `error` came from."""
    if isinstance(error, SyntaxError) and error.filename and Path(error.filename).resolve().is_relative_to(package):
        return {"file": Path(error.filename).name, "line": error.lineno, "code": (error.text or "").strip()}
    frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename).resolve().is_relative_to(package)]
    if not frames:
        return {}
    frame = frames[-1]
    return {"file": Path(frame.filename).name, "line": frame.lineno, "code": (frame.line or "").strip()}


def describe(value) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


class CaseContext:
    """What a driver gets for one case: the learner's package, the case's tensors, and a way to
    build the learner's modules loaded with reference weights (memoised per weights and overrides)."""

    def __init__(self, package: LearnerPackage, target: dict, weights, inputs, reply: dict):
        self.package, self.target, self.weights, self.inputs, self.reply = package, target, weights, inputs, reply
        self.case: dict = {}
        self.key = ""
        self._built: dict = {}

    def start(self, check_id: str, case: dict) -> None:
        self.case, self.key = case, f"{check_id}/{case['name']}"

    @property
    def args(self) -> list:
        return [self.inputs.get_tensor(f"{self.key}/arg{i}") for i in range(self.case["args"])]

    def tensor(self, name: str):
        """An extra input tensor of this case, stored under `<check>/<case>/<name>`."""
        return self.inputs.get_tensor(f"{self.key}/{name}")

    def module(self, cls):
        """`cls(Config())` of the learner's package, loaded with this case's reference weights."""
        prefix = self.case["weights"] or ""
        memo = (cls, prefix, tuple(self.case["overrides"]))
        if memo not in self._built:
            module = cls(self.package.config())
            provided = {k[len(prefix) :]: self.weights.get_tensor(k) for k in self.weights.keys() if k.startswith(prefix)}
            provided.update({name: self.tensor(f"override/{name}") for name in self.case["overrides"]})
            self.reply["weights"] = load_weights(module, provided)
            self.reply["param_counts"] = param_counts(module)
            self._built = {memo: module}  # one at a time: the whole model is large
        return self._built[memo]


def source_place(function) -> dict:
    """Where the learner defined `function`: the place a failing check points to."""
    import inspect

    try:
        return {"file": Path(inspect.getsourcefile(function)).name, "line": inspect.getsourcelines(function)[1]}
    except (TypeError, OSError):
        return {}


def call_target(ctx: CaseContext, args: list):
    """The default driver: call the learner's function, or the method of its loaded module."""
    target = ctx.target
    obj = ctx.package.attribute(target["file"], target["name"])
    function = obj if target["method"] is None else getattr(ctx.module(obj), target["method"])
    ctx.reply["target_where"] = source_place(function)
    return function(*args)


def driver_for(target: dict):
    if not target.get("driver"):
        return call_target
    module_name, _, function = target["driver"].partition(":")
    return getattr(importlib.import_module(module_name), function)


def run_request(package: LearnerPackage, request: dict, weights, inputs) -> dict:
    import torch
    from safetensors.torch import save_file

    reply: dict = {"outputs": [], "param_counts": {}}
    ctx = CaseContext(package, request["target"], weights, inputs, reply)
    drive = driver_for(request["target"])
    outputs = {}
    try:
        for case in request["cases"]:
            ctx.start(request["check"], case)
            args = ctx.args
            torch.manual_seed(0)  # anything random in the learner's code repeats from run to run
            with torch.no_grad():
                result = drive(ctx, args)
            if type(result) is not torch.Tensor:
                reply["bad_output"] = {"case": case["name"], "type": describe(result)}
                break
            outputs[f"{case['name']}/out"] = result.detach().cpu().clone().contiguous()
            if request["watch_inputs"]:
                for i, arg in enumerate(args):
                    outputs[f"{case['name']}/arg{i}_after"] = arg.detach().cpu().clone().contiguous()
            reply["outputs"].append(case["name"])
    except WeightsMismatch as mismatch:
        reply["weights"] = mismatch.facts
        reply["status"] = "weights"
    except NotImplementedError as error:
        reply.update(status="todo", where=learner_frame(error, package.path))
    except BaseException as error:  # learner code may raise SystemExit or KeyboardInterrupt too
        reply.update(status="error", error=f"{type(error).__name__}: {error}", where=learner_frame(error, package.path))
    if outputs:
        save_file(outputs, request["out"])
    reply.setdefault("status", "ran")
    return reply


def serve(package_path: Path, weights_path: str, inputs_path: str, reply_fd: int) -> None:
    from safetensors import safe_open

    replies = os.fdopen(reply_fd, "w")
    sys.meta_path.insert(0, ReferenceBlocker())
    if sys.path and Path(sys.path[0] or ".").resolve() == Path.cwd():
        sys.path.pop(0)  # `python -m` put the grader's working directory first; the learner gets none of it
    with safe_open(weights_path, "pt") as weights, safe_open(inputs_path, "pt") as inputs:
        package = None
        for line in sys.stdin:
            request = json.loads(line)
            try:
                package = package or LearnerPackage(package_path)
                reply = run_request(package, request, weights, inputs)
            except NotImplementedError as error:
                reply = {"status": "todo", "where": learner_frame(error, package_path.resolve())}
            except BaseException as error:
                reply = {"status": "error", "error": f"{type(error).__name__}: {error}", "where": learner_frame(error, package_path.resolve())}
            replies.write(json.dumps(reply) + "\n")
            replies.flush()


if __name__ == "__main__":
    serve(Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]))
