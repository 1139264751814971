"""What the HTML report draws, as plain lists of numbers and strings taken from what a check
already recorded: attention patterns on the prompt, where a failing output differs, the
logit lens's top tokens, and the trainer's loss curve. Renderers turn these into pictures; nothing here draws."""

from __future__ import annotations

import numpy as np

from grader.shared import wire

LOGIT_LENS = "interp.logit_lens"
TRAINER = "training.trainer"
MAX_FEATURES = 1024  # columns of a difference heatmap; wider outputs (logits) show their first ones


def attention_patterns(evidence) -> dict:
    """GPT-2's and the learner's (batch 0) patterns, (n_heads, query, key), on the first prompt case."""
    prompt = evidence.prompt_tokens
    for case in evidence.cases:
        steps = dict(evidence.steps(case))
        expected = steps.get("attn_pattern")
        if expected is None or expected.shape[-1] != len(prompt):
            continue
        mine = [value for value in evidence.captured(case) if value.shape == expected.shape]
        yours = mine[-1][0].tolist() if mine else None  # the last such tensor: scores come before the pattern
        tokens = evidence.token_strings(prompt)
        return {"attention": {"case": case, "tokens": tokens, "gpt2": expected[0].tolist(), "yours": yours}}
    return {}


def logit_lens_tops(evidence) -> dict:
    """The top token of GPT-2's logit lens, and of the learner's, at each layer and position (batch 0)."""
    if evidence.check.id != LOGIT_LENS:
        return {}
    case = next(iter(evidence.cases))

    def tops(lens: np.ndarray) -> list[list[str]]:
        return [evidence.token_strings(layer) for layer in lens[:, 0].argmax(-1)]

    output = evidence.outcome.outputs.get(wire.OUTPUT.format(case=case))
    expected = evidence.expected[case]
    yours = tops(output) if output is not None and output.shape == expected.shape else None
    return {
        "logit_lens": {"tokens": evidence.token_strings(evidence.prompt_tokens), "gpt2": tops(expected), "yours": yours}
    }


def difference(evidence, case: str) -> dict:
    """|learner - reference| of batch 0 of a failing case, positions x features, when the shapes agree."""
    output, expected = evidence.output(case), evidence.expected[case]
    if output.shape != expected.shape or expected.ndim != 3 or not np.issubdtype(output.dtype, np.floating):
        return {}
    diff = np.abs(output[0] - expected[0])[:, :MAX_FEATURES]
    return {"difference": {"case": case, "values": diff.tolist(), "features": int(expected.shape[-1])}}


def loss_curve(evidence) -> dict:
    """The learner's Trainer's loss at each step, its held-out loss and the bar it had to beat; the trainer's
    output is [held-out loss, seconds, loss of each step], its expected [the bar, an untrained model's loss]."""
    if evidence.check.id != TRAINER:
        return {}
    case = next(iter(evidence.cases))
    output, expected = evidence.outcome.outputs.get(wire.OUTPUT.format(case=case)), evidence.expected[case]
    drawable = output is not None and output.ndim == 1 and len(output) > 2 and np.issubdtype(output.dtype, np.floating)
    if not drawable or not np.isfinite(output).all():
        return {}
    levels = {"your held-out loss": float(output[0]), "to beat (unigram frequencies)": float(expected[0])}
    return {"loss_curve": {"losses": output[2:].tolist(), "levels": levels}}
