"""The typed text as a reference entry: the builder's play process writes Part 1's module checks' cases on it, and
this side adds the reference entry's weights and vocabulary (linked, never copied) and the two playground requests'
own inputs (the tokens; the sampler's settings and GPT-2's tokenizer), so that the grading's own machinery (the
learner's process, its confinement, the verdicts) runs on it."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from grader.checks import Check, Target, registry
from grader.host.refcache import ReferenceData
from grader.shared import wire

MODULES = ("embed", "pos_embed", "layernorm", "attention", "mlp", "block", "unembed", "transformer")  # course order
PLAY = "play"  # the case's name (grader.builder.play.PLAY)
LINKED = ("weights.safetensors", "vocabulary.json")  # the reference entry's, under the same names


def module_checks() -> list[Check]:
    """Part 1's checks of the modules, in course order."""
    by_id = {check.id: check for check in registry()}
    return [by_id[name] for name in MODULES]


GENERATE_TIMEOUT = 60.0  # seconds a continuation is allowed at least: 30 tokens twice (the KV cache's) on a slow CPU


def play_check(name: str, target: Target, min_timeout: float | None = None) -> Check:
    """A playground request as a check the learner's process runs (never graded, never registered): the
    transformer check's run, another driver."""
    transformer = next(check for check in registry() if check.id == "transformer")
    run = replace(transformer.run, capture=(), min_timeout=min_timeout)
    return replace(transformer, id=f"play.{name}", target=target, uses=(), run=run)


INSIDE = play_check("inside", Target("transformer", "Transformer", None, "grader.learner.drivers.play:inside"))
GENERATE = play_check(
    "generate", Target("sampling", "TransformerSampler", None, "grader.learner.drivers.play:generate"), GENERATE_TIMEOUT
)


def text_array(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()


def play_entry(out: Path, reference: ReferenceData, verified: dict) -> ReferenceData:
    """The builder's play files in `out` as an entry: the reference's weights and vocabulary linked in, and their
    digests (so the seal hashes what the learner's process maps, once a session: `verified` is the session's)."""
    for name in LINKED:
        if not (out / name).exists():
            os.symlink(reference.directory / name, out / name)
    digests = {name: digest for name, digest in reference.meta["digests"].items() if name.startswith(LINKED)}
    cases_file = out / "cases.json"
    cases = json.loads(cases_file.read_text()) if cases_file.exists() else {}
    meta = dict(reference.meta, cases=cases, beside=[], digests=digests)  # its counts, seed and prompt: the entry's
    (out / "meta.json").write_text(json.dumps(meta))
    return ReferenceData(reference.kind, out, meta, reference.fallback_reason, verified=verified)


def with_request(
    data: ReferenceData,
    check: Check,
    args: list[np.ndarray],
    settings: dict,
    extras: dict[str, np.ndarray] | None = None,
) -> ReferenceData:
    """The entry with one playground request's case: its arguments, its settings (as JSON text, read by
    `drivers.play.settings`) and other inputs (`extras`) in the check's inputs file."""
    from safetensors.numpy import save_file

    inputs = {wire.ARG.format(case=PLAY, i=i): value for i, value in enumerate(args)}
    named = {"settings": text_array(json.dumps(settings)), **(extras or {})}
    inputs |= {wire.EXTRA.format(case=PLAY, name=name): value for name, value in named.items()}
    data.inputs_path(check.id).parent.mkdir(exist_ok=True)
    save_file(inputs, str(data.inputs_path(check.id)))
    case = wire.CaseSpec(PLAY, len(args), "", [])
    meta = dict(data.meta, cases={**data.meta["cases"], check.id: [asdict(case)]})
    return ReferenceData(data.kind, data.directory, meta, data.fallback_reason, verified=data.verified)
