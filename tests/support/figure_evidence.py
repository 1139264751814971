"""Hand-built evidence for the HTML report's figures (grader.host.figures): a stand-in reference holding one
check's cases, expected tensors and a vocabulary of a few tokens, and the learner's outputs as given, so a test
states its arrays in full. No reference build, no learner process, no torch: tests/unit/test_figures_unit.py and the
property tests of tests/sandbox/test_reply_totality.py use it."""

from __future__ import annotations

import numpy as np

from grader.checks import Check, Run, Target
from grader.host.runner import Outcome
from grader.host.verdict import Evidence
from grader.shared import wire
from grader.shared.types import Tolerance

VOCABULARY = ["The", " cat", " sat", " on", " mat"]
PROMPT_TOKENS = [0, 1, 2]


class StandInReference:
    """What the figures read of a reference cache entry, held in memory."""

    def __init__(self, cases: list[wire.CaseSpec], expected: dict, kind: str = "gpt2", inputs: dict | None = None):
        self.kind, self._cases, self._expected, self._inputs = kind, cases, expected, inputs or {}
        self.meta = {"param_counts": {"total": 1}, "prompt_tokens": PROMPT_TOKENS}

    def cases(self, check_id: str) -> list[wire.CaseSpec]:
        return self._cases

    def expected(self, check_id: str) -> dict:
        return self._expected

    def inputs(self, check_id: str) -> dict:
        return self._inputs

    def vocabulary(self) -> list[str]:
        return VOCABULARY


def check(check_id: str, watch_inputs: bool = False) -> Check:
    return Check(
        id=check_id,
        points=1,
        target=Target("toy", "Toy", method="forward"),
        summary="a toy",
        cases=lambda ref: [],
        tolerance=Tolerance(atol=1e-4, rtol=1e-4),
        run=Run(watch_inputs=watch_inputs),
        page="01-the-model.md",
    )


def evidence(
    check_id: str, cases: list[wire.CaseSpec], expected: dict, outputs: dict, captures=None, kind="gpt2", inputs=None
):
    reply = wire.Reply("ran", outputs=[case.name for case in cases], captures=captures or {})
    outcome = Outcome("answered", reply, outputs, seconds=0.1)
    return Evidence(check(check_id, bool(inputs)), outcome, StandInReference(cases, expected, kind, inputs))


# Two heads on the three prompt tokens: head 0 attends to the first token, head 1 to itself.
GPT2_PATTERN = np.array(
    [[[[1, 0, 0], [1, 0, 0], [1, 0, 0]], [[1, 0, 0], [0, 1, 0], [0, 0, 1]]]], dtype=np.float32
)  # (batch 1, head 2, query 3, key 3)


def attention_evidence(*yours: np.ndarray, kind: str = "gpt2") -> Evidence:
    case = wire.CaseSpec("prompt", 1, "blocks.0.attn.", [], steps=["attn_pattern"])
    expected = {"prompt": np.zeros((1, 3, 8)), wire.STEP.format(case="prompt", label="attn_pattern"): GPT2_PATTERN}
    records = [wire.Record("locals", "blocks.0.attn", f"t{i}", list(value.shape), i) for i, value in enumerate(yours)]
    outputs = {"prompt/out": np.zeros((1, 3, 8))}
    outputs |= {wire.CAPTURE.format(case="prompt", i=i): value for i, value in enumerate(yours)}
    return evidence("attention", [case], expected, outputs, {"prompt": records}, kind)


# The reference's logits on the 3 prompt tokens over a vocabulary of 5: after "The" " cat", after " cat" " sat", ...
REFERENCE_LOGITS = np.array([[[0, 5, 0, 0, 0], [0, 0, 5, 0, 0], [0, 0, 0, 5, 0]]], dtype=np.float32)


def predictions_evidence(output: np.ndarray | None, check_id: str = "transformer") -> Evidence:
    case = wire.CaseSpec("prompt", 1, "", [])
    outputs = {} if output is None else {"prompt/out": output}
    return evidence(check_id, [case], {"prompt": REFERENCE_LOGITS}, outputs)


# --- Part 5: induction heads, on the small trained model's numbers (docs/induction-model.md), under the case names
# of grader/checks/induction/ ("small." the small trained model) --------------------------------------------------

PREVIOUS_TOKEN_SCORES = np.array([[0.11, 0.54, 0.10, 0.16], [0.03, 0.02, 0.02, 0.02]])  # (layer 2, head 4)
INDUCTION_SCORES = np.array([[0.01, 0.00, 0.01, 0.00], [0.84, 0.91, 0.77, 0.89]])
SEQ_LEN = 20  # grader.checks.induction._models.SEQ_LEN: [BOS, A, A] is 41 tokens, per_token_loss's 40 losses


def repeated_losses() -> np.ndarray:
    """(batch 8, 2 * SEQ_LEN): about log 512 nats on the random first half and its repeat's first token, then low."""
    rng = np.random.default_rng(0)
    first = 6.2 + rng.normal(0.0, 0.3, (8, SEQ_LEN + 1))
    repeated = 0.3 + rng.normal(0.0, 0.05, (8, SEQ_LEN - 1))
    return np.concatenate([first, repeated], axis=1)


# What ablating a head costs on the repeated half, by case: the previous-token head 0.1 most (every induction head
# reads it); each layer-1 induction head less (the other three back it up).
ABLATION_COSTS = {
    f"small.blocks.{layer}.head{head}.{how}": np.array(cost)
    for (layer, head), costs in {(0, 1): (2.85, 2.10), (1, 0): (0.41, 0.22), (1, 1): (0.62, 0.35)}.items()
    for how, cost in zip(("zero", "mean"), costs, strict=True)
}


def mean_patterns() -> np.ndarray:
    """(layer 2, head 4, 41, 41) patterns on [BOS, A, A]: head 0.1 on the previous token, every layer-1 head on the
    token after the previous occurrence in the repeated half, the rest spread evenly over the keys so far."""
    posn = 1 + 2 * SEQ_LEN
    even = np.tril(np.ones((posn, posn))) / np.arange(1, posn + 1)[:, None]
    patterns = np.broadcast_to(even, (2, 4, posn, posn)).copy()
    patterns[0, 1] = np.eye(posn, k=-1) + np.eye(posn) * (np.arange(posn) == 0)[:, None]
    for query in range(posn - SEQ_LEN, posn):
        patterns[1, :, query] = 0.0
        patterns[1, :, query, query - SEQ_LEN + 1] = 1.0
    return patterns


def part5_evidence(check_id: str, expected: dict, outputs: dict, inputs: dict | None = None) -> Evidence:
    specs = [wire.CaseSpec(case, 1, None, []) for case in expected]
    answered = {f"{case}/out": value for case, value in outputs.items() if value is not None}
    return evidence(check_id, specs, expected, answered, inputs=inputs)


def scores_evidence(output: np.ndarray | None, kind: str = "induction", patterns: np.ndarray | None = None) -> Evidence:
    """A score check's evidence; with `patterns`, the small model's patterns on [BOS, A, A] as its case's input (what
    the induction scores check watches), which the report draws whatever the learner's output (not its property)."""
    expected = INDUCTION_SCORES if kind == "induction" else PREVIOUS_TOKEN_SCORES
    case = f"small.{kind}_scores"
    inputs = None
    if patterns is not None:
        inputs = {wire.ARG.format(case=case, i=0): patterns, wire.ARG.format(case=case, i=1): np.array(SEQ_LEN)}
    return part5_evidence(f"induction.{kind}_scores", {case: expected}, {case: output}, inputs)


def token_loss_evidence(output: np.ndarray | None) -> Evidence:
    """per_token_loss's two cases: toy logits, which no figure draws, and the small model's own on [BOS, A, A]."""
    expected = {"toy_logits": np.ones((2, 6)), "small.repeated": repeated_losses()}
    return part5_evidence(
        "induction.per_token_loss", expected, {"toy_logits": np.ones((2, 6)), "small.repeated": output}
    )


def ablation_evidence(outputs: dict | np.ndarray | None) -> Evidence:
    """ablation_cost's cases answered with `outputs`: one per case (a dict), the same for each (an array), or none."""
    answered = outputs if isinstance(outputs, dict) else dict.fromkeys(ABLATION_COSTS, outputs)
    return part5_evidence("induction.ablation_cost", ABLATION_COSTS, answered)
