"""The playground's backend (`grade --play`): the learner's package and GPT-2 on the text the learner types.

`Playground.start` readies the reference entry (GPT-2's weights, or the random reference's), GPT-2 in a builder
process of its own (`gpt2`), and the grading's learner process (`worker`); both stay up across requests. `analyse`
answers for one text: the tokens, both models' next tokens, what is inside (patterns, logit lens, Part 5's scores),
"where" (Part 1's module checks judged on this text by the grading's own verdicts, no points) and an error, if the
learner's code raised or hung. Modules the learner has not written, or that raise or hang, are replaced by the
grader's own (`stand_ins`) so that the rest of the answer is there. `generate` continues the text with the learner's
sampler and GPT-2's under the same settings and seed. The learner's code runs only in the learner's confined process,
which never holds GPT-2's outputs on the text: those stay in the files this process reads.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import tempfile
import threading
from pathlib import Path
from typing import get_args

import numpy as np

from grader.host.dependencies import stand_in_part
from grader.host.pipeline import GradingRun
from grader.host.play import answers
from grader.host.play.entry import GENERATE, INSIDE, PLAY, module_checks, play_entry, text_array, with_request
from grader.host.play.gpt2 import Gpt2Process
from grader.host.play.worker import PlayLane, run_one, with_play_lane
from grader.host.refcache import ReferenceData, ensure_reference
from grader.host.results import CheckResult
from grader.host.runner import LearnerProcesses, Limits, Outcome
from grader.host.runner.request import check_timeout
from grader.shared import wire
from grader.shared.formats import PLAY_INSIDE, tensor_text

DIGITS = 4  # of a pattern's weights, as GPT-2's (grader.builder.play.DIGITS)
STOOD_IN_FOR = ("todo", "error", "timeout")  # a module's status on the text that puts the grader's in its place


def why(result: CheckResult) -> str:
    if result.status == "todo":
        return "not written yet"
    if result.status == "timeout":
        return "does not finish (stopped at the timeout)"
    return f"raises {result.message}"


def error_of(outcome: Outcome, stopped: wire.Place | None) -> dict | None:
    """The learner's exception or loop in one request, with its file and line; None where it answered."""
    if outcome.ending == "timeout":
        place = stopped or wire.Place("")
        return {"file": place.file, "line": place.line, "message": outcome.message}
    if outcome.ending != "answered" or outcome.reply.status not in ("ran", "todo"):
        place = outcome.reply.where or outcome.reply.target_where or wire.Place("")
        return {"file": place.file, "line": place.line, "message": outcome.message}
    return None


def error_of_result(result: CheckResult) -> dict:
    return {"file": result.file, "line": result.line, "message": result.message}


class Playground:
    """One learner's package and one reference, warm across requests; a context manager."""

    def __init__(self, package: Path, reference: ReferenceData, gpt2: Gpt2Process, processes: LearnerProcesses):
        self.package, self.reference, self.gpt2, self.processes = package.resolve(), reference, gpt2, processes
        self.lane: PlayLane = with_play_lane(processes)
        self.timeout = processes.limits.timeout
        self.verified: dict = {}  # the reference's weights, hashed once a session (`entry.play_entry`)
        self.directory = tempfile.TemporaryDirectory(prefix="gpt2-play-")
        self.numbers, self.last = itertools.count(), {}
        self.vocabulary = reference.vocabulary()
        self.tokenizer = text_array(gpt2.ask("tokenizer")["tokenizer"])
        self.stood_in: dict[str, str] | None = None  # the last text's: part label -> module
        self.lock = threading.Lock()  # one request at a time: GPT-2's process and the lane answer one each
        processes.start_for([])

    @classmethod
    def start(cls, package_dir: Path, reference: str = "auto", timeout: float = 60.0) -> Playground:
        data = ensure_reference(reference, lambda *_: None, checks=[check.id for check in module_checks()])
        processes = LearnerProcesses(Limits(timeout=timeout))
        gpt2 = Gpt2Process(data, processes.log)
        return cls(Path(package_dir), data, gpt2, processes)

    def __enter__(self) -> Playground:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.gpt2.close()
        self.processes.close()
        self.directory.cleanup()

    def _new_directory(self, kind: str) -> Path:
        """A directory for one request's files, the last request's of this kind removed (16 MB an analysis)."""
        if kind in self.last:
            shutil.rmtree(self.last[kind], ignore_errors=True)
        self.last[kind] = Path(self.directory.name) / f"{kind}-{next(self.numbers)}"
        self.last[kind].mkdir()
        return self.last[kind]

    # --- analyse ---------------------------------------------------------------------------------------------

    def analyse(self, text: str) -> dict:
        with self.lock:
            return self._analyse(text)

    def _analyse(self, text: str) -> dict:
        out = self._new_directory("analyse")
        theirs = self.gpt2.ask("analyse", text=text, out=str(out))
        data = play_entry(out, self.reference, self.verified)
        limit = {"timeout": check_timeout(INSIDE, self.processes.limits)}
        inside = with_request(data, INSIDE, [np.array([theirs["ids"]], dtype=np.int64)], limit)
        first, stopped = run_one(self.lane, self.package, INSIDE, inside, [])
        error = error_of(first, stopped)
        results = GradingRun(self.package, module_checks(), data, processes=self.processes).finished().report.checks
        stand_ins = [result for result in results if result.status in STOOD_IN_FOR]
        self.stood_in = {stand_in_part(check): check.id for check in module_checks() if check.id in ids(stand_ins)}
        outcome = first
        if not answered(first):
            labels = [label for label in self.stood_in if label in get_args(wire.StandInPart)]
            outcome, stopped = run_one(self.lane, self.package, INSIDE, inside, labels)
            error = error or error_of(outcome, stopped)
        error = error or next((error_of_result(r) for r in results if r.status in ("error", "timeout")), None)
        return self._answer(theirs, outcome, results, stand_ins, error)

    def _answer(self, theirs: dict, outcome: Outcome, results, stand_ins, error) -> dict:
        yours = yours_inside(outcome) if answered(outcome) else None
        listed = [{"module": result.id, "why": why(result)} for result in stand_ins]
        if yours and yours["stood_in"] and "transformer" not in ids(stand_ins):
            listed += [{"module": module, "why": said} for module, said in yours["stood_in"].items()]
        gpt2_last = np.load(theirs["logits_file"])
        patterns = np.array(theirs["patterns"])
        return {
            "tokens": theirs["tokens"],
            "cut": theirs["cut"],  # the text was longer than the tokens analysed
            "reference": self.reference.kind,
            "stand_ins": listed,
            "next": self._next(yours, gpt2_last),
            "inside": self._inside(yours, patterns, theirs),
            "where": [answers.where_row(result, self.reference.kind) for result in results],
            "first_difference": answers.first_difference(results),
            "error": error,
        }

    def _next(self, yours: dict | None, gpt2_last: np.ndarray) -> dict:
        mine = None if yours is None else yours["logits"][0, -1]
        return {
            "yours": [] if mine is None else answers.top_tokens(mine, self.vocabulary),
            "gpt2": answers.top_tokens(gpt2_last, self.vocabulary),
            "max_logit_diff": None if mine is None else float(np.max(np.abs(mine.astype(np.float64) - gpt2_last))),
        }

    def _inside(self, yours: dict | None, gpt2_patterns: np.ndarray, theirs: dict) -> dict:
        ids_ = theirs["ids"]
        mine = None if yours is None or not yours["patterns"].size else yours["patterns"]
        lens = None
        if yours is not None and yours["lens_p"].size:
            lens = answers.lens_cells(yours["lens_p"], yours["lens_ids"], self.vocabulary)
        return {
            "patterns": {"yours": None if mine is None else mine.round(DIGITS).tolist(), "gpt2": theirs["patterns"]},
            "logit_lens": {"yours": lens, "gpt2": theirs["logit_lens"]},
            "induction": {
                "yours": None if mine is None else answers.induction_scores(mine, ids_),
                "gpt2": answers.induction_scores(gpt2_patterns, ids_),
            },
            "previous_token": {
                "yours": None if mine is None else answers.previous_token_scores(mine),
                "gpt2": answers.previous_token_scores(gpt2_patterns),
            },
            "repeats": answers.repeats(ids_),
        }

    # --- generate --------------------------------------------------------------------------------------------

    def generate(
        self,
        text: str,
        max_new_tokens: int = 30,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        frequency_penalty: float = 0.0,
        seed: int = 0,
        greedy: bool = False,
    ) -> dict:
        kwargs = {
            "temperature": 0.0 if greedy else float(temperature),
            "top_k": int(top_k or 0),
            "top_p": float(top_p or 0.0),
            "frequency_penalty": float(frequency_penalty),
        }
        with self.lock:
            return self._generate(text, int(max_new_tokens), int(seed), kwargs)

    def _generate(self, text: str, max_new_tokens: int, seed: int, kwargs: dict) -> dict:
        if self.stood_in is None:  # which of the learner's modules to stand in for: what this text's "where" says
            self._analyse(text)
        limit = check_timeout(GENERATE, self.processes.limits)
        asked = {"timeout": limit, "text": text, "max_new_tokens": max_new_tokens, "seed": seed, "kwargs": kwargs}
        data = play_entry(self._new_directory("generate"), self.reference, self.verified)
        data = with_request(data, GENERATE, [], asked, {"tokenizer": self.tokenizer})
        labels = [label for label in self.stood_in or {} if label in get_args(wire.StandInPart)]
        # GPT-2 continues the text while the learner's sampler does, in a process of its own
        self.gpt2.send("generate", text=text, max_new_tokens=max_new_tokens, seed=seed, settings=kwargs)
        outcome, stopped = run_one(self.lane, self.package, GENERATE, data, labels)
        theirs = self.gpt2.receive("generate")
        return {"yours": yours_generated(outcome), "gpt2": theirs, "error": error_of(outcome, stopped)}


def ids(results: list[CheckResult]) -> set[str]:
    return {result.id for result in results}


def answered(outcome: Outcome) -> bool:
    return outcome.ending == "answered" and outcome.reply.status == "ran" and bool(outcome.reply.outputs)


def yours_inside(outcome: Outcome) -> dict:
    """What the inside driver sent back: the logits, and its captures by name (`formats.PLAY_INSIDE`)."""
    found = {name: outcome.outputs[wire.CAPTURE.format(case=PLAY, i=i)] for i, name in enumerate(PLAY_INSIDE)}
    found["stood_in"] = json.loads(tensor_text(found["stood_in"]))
    return found | {"logits": outcome.outputs[wire.OUTPUT.format(case=PLAY)]}


def yours_generated(outcome: Outcome) -> dict | None:
    if not answered(outcome):
        return None
    ms, cached_ms, stood_in = outcome.outputs[wire.CAPTURE.format(case=PLAY, i=0)].tolist()
    return {
        "text": tensor_text(outcome.outputs[wire.OUTPUT.format(case=PLAY)]),
        "ms_per_token": ms,
        "kv_cache": not np.isnan(cached_ms),
        "ms_per_token_cached": None if np.isnan(cached_ms) else cached_ms,
        "sampler_stood_in": bool(stood_in),
    }
