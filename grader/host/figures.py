"""What the HTML report draws, as plain lists of numbers and strings taken from what a check
already recorded: attention patterns on the prompt beside the reference's and where they differ, where a
failing output differs, the next-token predictions on the prompt, the logit lens's top tokens, the trainer's
loss curve, and Part 5's: every head's previous-token and induction scores with the heads found, the per-token loss
along a repeated sequence, and what ablating each head costs; Part 6's skip-trigram tables with their bugs. Renderers
turn these into pictures; nothing here draws.

Every function here is total over what the learner's process sent back (any shape, dtype or value, NaN and
empty included): what cannot be drawn is left out (None, or no figure), never an exception. Each figure's data
names the model it shows (`model`): the reference's name (GPT-2, or the random reference offline), the small
trained induction model, the one-layer attention-only model, or your own model where the figure is of it."""

from __future__ import annotations

import re

import numpy as np

from grader.shared import wire

LOGIT_LENS = "interp.logit_lens"
TRAINER = "training.trainer"
YOURS = "yours"  # a figure of the learner's own model (the trainer's), not of the reference
MAX_FEATURES = 1024  # columns of a difference heatmap; wider outputs (logits) show their first ones


PREDICTING = ("unembed", "transformer")  # the checks whose output is logits over the vocabulary
PROMPT = "prompt"  # the case whose input is the reference's prompt (meta["prompt_tokens"])


def attention_patterns(evidence) -> dict:
    """GPT-2's and the learner's (batch 0) patterns, (n_heads, query, key), on the first prompt case, and
    |yours - GPT-2's| of each (NaN where yours is not a finite number)."""
    prompt = evidence.prompt_tokens
    for case in evidence.cases:
        steps = dict(evidence.steps(case))
        expected = steps.get("attn_pattern")
        if expected is None or expected.ndim != 4 or expected.shape[-1] != len(prompt):
            continue
        mine = [value for value in evidence.captured(case) if value.shape == expected.shape and is_number(value)]
        yours = mine[-1][0] if mine else None  # the last such tensor: scores come before the pattern
        tokens = evidence.token_strings(prompt)
        return {
            "attention": {
                "case": case,
                "model": evidence.reference_name,
                "tokens": tokens,
                "gpt2": expected[0].tolist(),
                "yours": None if yours is None else finite_or_nan(yours).tolist(),
                "difference": None if yours is None else absolute_difference(yours, expected[0]).tolist(),
            }
        }
    return {}


def is_number(value: np.ndarray) -> bool:
    """A real or integer array (a bool or complex one is no pattern, logits or loss)."""
    return value.dtype.kind in "fiu"


def finite_or_nan(value: np.ndarray) -> np.ndarray:
    """As float64, every infinity as NaN: what a figure cannot place on its scale is left blank."""
    value = value.astype(np.float64)
    return np.where(np.isfinite(value), value, np.nan)


def absolute_difference(yours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """|yours - theirs| as float64, NaN where either is not finite or the difference overflows."""
    with np.errstate(invalid="ignore", over="ignore"):
        return finite_or_nan(np.abs(yours.astype(np.float64) - theirs.astype(np.float64)))


def next_token_predictions(evidence) -> dict:
    """Each prompt token and the reference's top next token after it, and the learner's where its logits on the
    prompt have the reference's shape (batch 0); `grade --show` prints this table, the HTML report draws it."""
    if evidence.check.id not in PREDICTING or PROMPT not in evidence.cases:
        return {}
    expected = evidence.expected.get(PROMPT)
    if expected is None or expected.ndim != 3:
        return {}
    output = evidence.outcome.outputs.get(wire.OUTPUT.format(case=PROMPT))
    readable = output is not None and output.shape == expected.shape and is_number(output) and output.size > 0
    return {
        "predictions": {
            "case": PROMPT,
            "model": evidence.reference_name,
            "tokens": evidence.token_strings(evidence.prompt_tokens),
            "reference": evidence.token_strings(expected[0].argmax(-1)),
            "yours": top_tokens(evidence, output[0]) if readable else None,
        }
    }


def top_tokens(evidence, logits: np.ndarray) -> list[str | None]:
    """The top token at each position; None where the logits hold a NaN (no token is on top)."""
    with np.errstate(invalid="ignore"):
        unordered = np.isnan(logits.astype(np.float64)).any(-1)
    tops = evidence.token_strings(top_ids(logits))
    return [None if nan else top for top, nan in zip(tops, unordered.tolist(), strict=True)]


def top_ids(logits: np.ndarray) -> np.ndarray:
    """The id on top along the last axis, whatever the logits' dtype; a NaN is never on top (argmax puts it there:
    the rows that hold one are taken again without)."""
    values = logits if np.issubdtype(logits.dtype, np.floating) else logits.astype(np.float64)
    ids = values.argmax(-1)
    with_nan = np.isnan(values).any(-1)
    if with_nan.any():
        ids[with_nan] = np.nan_to_num(values[with_nan].astype(np.float64), nan=-np.inf).argmax(-1)
    return ids


def logit_lens_tops(evidence) -> dict:
    """The top token of the logit lens, the reference's and the learner's, at each layer and position (batch 0):
    GPT-2's on the prompt, and the small induction model's on [BOS, A, A] (`small_logit_lens`) where its vocabulary
    is known."""
    if evidence.check.id != LOGIT_LENS:
        return {}
    small = evidence.small_model
    gpt2 = lens_tops(evidence, PROMPT, evidence.prompt_tokens, evidence.token_strings, evidence.reference_name)
    drawn = {"logit_lens": gpt2}
    if small.get("lens_case") in evidence.cases and small.get("vocabulary"):
        vocabulary = small["vocabulary"]

        def strings(ids) -> list[str]:
            return [vocabulary[int(i)] if 0 <= int(i) < len(vocabulary) else "?" for i in ids]

        tokens = small.get("lens_tokens", [])
        drawn["small_logit_lens"] = lens_tops(evidence, small["lens_case"], tokens, strings, INDUCTION_MODEL)
    return {name: table for name, table in drawn.items() if table}


def lens_tops(evidence, case: str, tokens: list[int], strings, model: str) -> dict:
    """One case's lens table: the model it shows, the input's tokens, the reference's top token at each layer and
    position, and the learner's where its output has the expected shape; {} where the case is not there."""
    expected = evidence.expected.get(case)
    if expected is None or expected.ndim != 4:
        return {}

    def tops(lens: np.ndarray) -> list[list[str]]:
        return [strings(layer) for layer in top_ids(lens[:, 0])]

    output = evidence.outcome.outputs.get(wire.OUTPUT.format(case=case))
    yours = tops(output) if output is not None and output.shape == expected.shape else None
    return {"model": model, "tokens": strings(tokens), "gpt2": tops(expected), "yours": yours}


def difference(evidence, case: str) -> dict:
    """|learner - reference| of batch 0 of a failing case, positions x features, when the shapes agree."""
    output, expected = evidence.output(case), evidence.expected[case]
    if output.shape != expected.shape or expected.ndim != 3 or not np.issubdtype(output.dtype, np.floating):
        return {}
    diff = np.abs(output[0] - expected[0])[:, :MAX_FEATURES]
    model = evidence.reference_name
    return {"difference": {"case": case, "model": model, "values": diff.tolist(), "features": int(expected.shape[-1])}}


def loss_curve(evidence) -> dict:
    """The learner's Trainer's loss at each step, its held-out loss and the bar it had to beat; the trainer's
    output is [held-out loss, seconds, each step's loss, each step's lr of two parameter groups], its expected
    [the bar, an untrained model's loss, ...] (grader.checks.training.trainer.outcome_layout; not imported here, as that
    module imports the learner's side)."""
    if evidence.check.id != TRAINER:
        return {}
    case = next(iter(evidence.cases))
    output, expected = evidence.outcome.outputs.get(wire.OUTPUT.format(case=case)), evidence.expected[case]
    drawable = output is not None and output.ndim == 1 and len(output) > 2 and np.issubdtype(output.dtype, np.floating)
    if not drawable or not np.isfinite(output).all():
        return {}
    steps = (len(output) - 2) // 3
    levels = {"your held-out loss": float(output[0]), "to beat (unigram frequencies)": float(expected[0])}
    return {"loss_curve": {"model": YOURS, "losses": output[2 : 2 + steps].tolist(), "levels": levels}}


# --- Part 5: induction heads ------------------------------------------------------------------------------------

INDUCTION_MODEL = "the small trained induction model"  # grader/builder/induction_model.py, 2 layers of 4 heads
# The Part 5 checks (grader/checks/induction/) whose cases these figures draw; a case's name begins with the model
# it ran on: "small." the small trained model, always; "gpt2." GPT-2's own heads, only when the reference is GPT-2.
SCORES = {"induction.previous_token_scores": "previous-token", "induction.induction_scores": "induction"}
PER_TOKEN_LOSS = "induction.per_token_loss"
ABLATION_COST = "induction.ablation_cost"
# heads_above's thresholds by model, grader.checks.induction._common.THRESHOLD's (which the host may not import: that
# imports the learner's drivers); tests/unit/test_figures_unit.py holds them equal.
THRESHOLDS = {"small": 0.5, "gpt2": 0.4}
REPEATED = "small.repeated"  # per_token_loss's case on the small model's own logits on [BOS, A, A]
MAX_HEADS = 1024  # cells of a score grid or an ablation table; GPT-2's 144 heads fit
ABLATION = re.compile(r"^(?:\w+\.)?blocks\.(\d+)\.head(\d+)\.(\w+)$")  # small.blocks.1.head2.zero


def case_model(evidence, case: str) -> str:
    """The model a Part 5 case's tensors come from, by its name: GPT-2 (the reference) for "gpt2.", else the small
    trained induction model."""
    return evidence.reference_name if case.startswith("gpt2.") else INDUCTION_MODEL


def found_above(case: str) -> float:
    """heads_above's threshold for the case's model: a head scoring above it is found (GPT-2's induction heads share
    their attention more, so its threshold is lower)."""
    return THRESHOLDS["gpt2" if case.startswith("gpt2.") else "small"]


def yours_of_shape(evidence, case: str, shape: tuple) -> np.ndarray | None:
    """The learner's output on `case` when it is numbers of the expected shape, as float64 with every infinity
    as NaN; None otherwise."""
    output = evidence.outcome.outputs.get(wire.OUTPUT.format(case=case))
    if output is None or output.shape != shape or not is_number(output):
        return None
    return finite_or_nan(output)


def heads_above(scores: np.ndarray, threshold: float) -> list[list[int]]:
    """The (layer, head) of each score above the threshold (a NaN is none)."""
    with np.errstate(invalid="ignore"):
        return [[int(layer), int(head)] for layer, head in np.argwhere(np.nan_to_num(scores, nan=-np.inf) > threshold)]


def head_scores(evidence) -> dict:
    """The previous-token or induction score of every head (layer x head) on each case, the reference's and the
    learner's, with the heads each finds (above the case model's threshold)."""
    kind = SCORES.get(evidence.check.id)
    if kind is None:
        return {}
    grids = []
    for case in evidence.cases:
        expected = evidence.expected.get(case)
        if expected is None or expected.ndim != 2 or not 0 < expected.size <= MAX_HEADS:
            continue
        theirs, yours = finite_or_nan(expected), yours_of_shape(evidence, case, expected.shape)
        grids.append(
            {
                "case": case,
                "model": case_model(evidence, case),
                "threshold": found_above(case),
                "reference": theirs.tolist(),
                "yours": None if yours is None else yours.tolist(),
                "found_reference": heads_above(theirs, found_above(case)),
                "found_yours": None if yours is None else heads_above(yours, found_above(case)),
            }
        )
    return {"head_scores": {"score": kind, "grids": grids}} if grids else {}


def token_loss(evidence) -> dict:
    """The loss of each next token on [BOS, A, A] sequences, averaged over the batch, the reference's and the
    learner's: per_token_loss's output (batch, 2 * seq_len), whose entry p is the loss of token p + 1, so the
    repeated half's first token is predicted at p = seq_len. Drawn on the small model's case (REPEATED)."""
    if evidence.check.id != PER_TOKEN_LOSS or REPEATED not in evidence.cases:
        return {}
    expected = evidence.expected.get(REPEATED)
    if expected is None or expected.ndim != 2 or expected.shape[0] < 1 or expected.shape[1] < 2:
        return {}
    yours = yours_of_shape(evidence, REPEATED, expected.shape)
    return {
        "token_loss": {
            "case": REPEATED,
            "model": case_model(evidence, REPEATED),
            "reference": batch_mean(finite_or_nan(expected)),
            "yours": None if yours is None else batch_mean(yours),
            "repeat_starts": int(expected.shape[1] // 2),
        }
    }


def batch_mean(losses: np.ndarray) -> list[float]:
    """The mean over the batch at each position; NaN where any sequence's loss there is not a number."""
    with np.errstate(invalid="ignore", over="ignore"):
        return finite_or_nan(losses.mean(axis=0)).tolist()


def ablation_costs(evidence) -> dict:
    """What ablating each head costs (the rise of the loss on the repeated half, ablated minus clean), the
    reference's and the learner's: a row per case, each one number, its head and how it was ablated read from the
    case's name (small.blocks.1.head2.zero); a case of another shape is left out."""
    if evidence.check.id != ABLATION_COST:
        return {}
    rows = []
    for case in evidence.cases:
        expected = evidence.expected.get(case)
        if expected is None or expected.size != 1:
            continue
        yours = yours_of_shape(evidence, case, expected.shape)
        named = ABLATION.match(case)
        head = f"{named[1]}.{named[2]}" if named else case
        rows.append(
            {
                "case": case,
                "head": head,
                "how": named[3] if named else "",
                "model": case_model(evidence, case),
                "reference": float(finite_or_nan(expected).reshape(-1)[0]),
                "yours": None if yours is None else float(yours.reshape(-1)[0]),
            }
        )
    return {"ablation": {"rows": rows}} if rows else {}


INDUCTION_SCORES = "induction.induction_scores"
SMALL_PATTERNS = "small.induction_scores"  # its input: the small model's mean patterns on [BOS, A, A], and seq_len


def model_patterns(evidence) -> dict:
    """Every head's attention pattern of the small induction model on [BOS, A, A] (the batch's mean), from the
    reference cache's own input to the induction scores: the previous-token head's diagonal and the induction
    heads' stripe, seq_len - 1 below it, are there to see. Nothing of the learner's is drawn."""
    if evidence.check.id != INDUCTION_SCORES:
        return {}
    patterns = evidence.inputs.get(wire.ARG.format(case=SMALL_PATTERNS, i=0))
    seq_len = evidence.inputs.get(wire.ARG.format(case=SMALL_PATTERNS, i=1))
    if patterns is None or seq_len is None or patterns.ndim != 4 or patterns.shape[0] * patterns.shape[1] > 64:
        return {}
    data = {"case": SMALL_PATTERNS, "model": INDUCTION_MODEL, "patterns": finite_or_nan(patterns).tolist()}
    return {"model_patterns": data | {"repeat_starts": int(seq_len) + 1}}


# --- Part 6: skip-trigrams ----------------------------------------------------------------------------------------

ATTN_ONLY_MODEL = "the one-layer attention-only model"  # grader/builder/attn_only_model.py, 4 heads
SKIP_TRIGRAM_BUGS, SKIP_TRIGRAM_TABLE = "skip_trigram.bugs", "skip_trigram.table"


def skip_trigram_tables(evidence) -> dict:
    """Each head's skip-trigram table with its tokens written out: per source, its destinations (rows) and outputs
    (columns), and in each cell the score, how often the training windows hold the trigram, whether that makes it
    real, and whether it is a bug by the reference and by the learner's skip_trigram_bugs. The table is the
    reference's (skip_trigram.table's answer on the same head), the counts the bugs check's input."""
    if evidence.check.id != SKIP_TRIGRAM_BUGS:
        return {}
    vocabulary = evidence.small_model.get("attn_only") or []
    try:
        tables, inputs = evidence.reference.expected(SKIP_TRIGRAM_TABLE), evidence.reference.inputs(evidence.check.id)
    except (KeyError, OSError):  # a cache without the table check's answers: nothing to write the tokens from
        return {}

    def text(token) -> str:
        return vocabulary[int(token)] if 0 <= int(token) < len(vocabulary) else "?"

    heads = []
    for case in evidence.cases:
        table, counts = tables.get(case), inputs.get(wire.ARG.format(case=case, i=0))
        min_real, expected = inputs.get(wire.ARG.format(case=case, i=1)), evidence.expected.get(case)
        if table is None or counts is None or min_real is None or expected is None or counts.ndim != 3:
            continue
        n, k = counts.shape[:2]
        if table.shape != (n, 1 + 2 * k + k * k) or expected.shape != counts.shape:
            continue
        yours = yours_of_shape(evidence, case, expected.shape)
        real = counts >= int(min_real)
        sources = [
            {
                "source": text(row[0]),
                "destinations": [text(d) for d in row[1 : 1 + k]],
                "outputs": [text(o) for o in row[1 + k : 1 + 2 * k]],
                "scores": np.round(row[1 + 2 * k :].reshape(k, k), 3).tolist(),
                "counts": counts[i].tolist(),
                "real": real[i].tolist(),
                "bugs": (expected[i] > 0.5).tolist(),
                "yours": None if yours is None else (yours[i] > 0.5).tolist(),  # a NaN is no bug
            }
            for i, row in enumerate(table)
        ]
        heads.append({"case": case, "min_real": int(min_real), "sources": sources})
    return {"skip_trigrams": {"model": ATTN_ONLY_MODEL, "heads": heads}} if heads else {}


FIGURES = (  # each {} where it draws nothing
    attention_patterns,
    next_token_predictions,
    logit_lens_tops,
    loss_curve,
    head_scores,
    token_loss,
    ablation_costs,
    model_patterns,
    skip_trigram_tables,
)


def all_figures(evidence) -> dict:
    """Every figure a check's evidence gives, by name (a failing output's difference comes with its diagnosis)."""
    drawn: dict = {}
    for figure in FIGURES:
        drawn |= figure(evidence)
    return drawn
