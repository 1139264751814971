"""`grade CHECK --show`: the course notes' printout of the learner's module, loaded with the reference's weights.

For each selected check: its parameters (shape, requires_grad, how many numbers) and their total beside the
reference's; each step the learner's `forward` names, with its shape and a one-line comment (the axes, and how
far it is from the reference's step of that name where the check kept its values, or, in a passing check, that it
is that step but for a bias or a scale: an intermediate value); the max abs diff of the output; for the unembedding
and the whole model the next-token predictions on the prompt, the learner's beside the reference's; and the whole
model's missing and unexpected state_dict keys. Everything is read from what the
check's reply already carries (a `grade --trace` run records every named tensor) and from the reference entry.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from grader.host.diagnose import equal_step, matches_step, named_step
from grader.host.figures import next_token_predictions
from grader.host.render.text import fallback_banner
from grader.host.results import CheckResult, Report
from grader.host.verdict import Evidence
from grader.shared import wire

BLOCK = re.compile(r"^blocks\.(\d+)(?=\.|$)")  # a block of the stack, whose copies the printout shows once


@dataclass(frozen=True)
class Sizes:
    """The axes a tensor's shape is read with, from the reference's weights: GPT-2 small's names for them."""

    named: dict[str, int]  # d_model, n_heads, d_head, d_mlp, d_vocab, n_ctx

    @classmethod
    def of(cls, weights: dict[str, list[int]]) -> Sizes:
        d_vocab, d_model = weights.get("embed.W_E", (0, 0))
        n_heads, _, d_head = weights.get("blocks.0.attn.W_Q", (0, 0, 0))
        d_mlp = weights.get("blocks.0.mlp.W_in", (0, 0))[1]
        n_ctx = weights.get("pos_embed.W_pos", (0, 0))[0]
        return cls(dict(d_model=d_model, n_heads=n_heads, d_head=d_head, d_mlp=d_mlp, d_vocab=d_vocab, n_ctx=n_ctx))

    def axes(self, shape: list[int], batch: int | None, posn: int | None) -> str:
        """ "batch, posn, n_heads, d_head": each axis by the first size it equals (the case's batch and positions
        first; batch only as the first axis, so a kept size-1 axis reads 1); two position axes side by side are a
        query's and a key's."""
        known = [("batch", batch), ("posn", posn), *self.named.items()]
        names = [next((name for name, size in known[i > 0 :] if size == n), str(n)) for i, n in enumerate(shape)]
        text = ", ".join(names)
        return text.replace("posn, posn", "query_pos, key_pos")


def weight_shapes(reference) -> dict[str, list[int]]:
    """Every reference parameter's shape, read from the weights file's header alone."""
    from safetensors import safe_open

    with safe_open(str(reference.weights_path), "np") as handle:
        return {key: list(handle.get_slice(key).get_shape()) for key in handle.keys()}


def printout(report: Report, evidences: dict[str, Evidence]) -> list[str]:
    """The printout of every selected check, after one line naming the reference (and saying when it is random)."""
    weights = weight_shapes(next(iter(evidences.values())).reference) if evidences else {}
    lines = [f"grade --show: {report.package} against {evidences_reference(evidences, report)}"]
    lines += random_reference_line(report)
    for result in report.checks:
        lines += ["", *check_printout(result, evidences[result.id], weights, Sizes.of(weights))]
    return lines


def evidences_reference(evidences: dict[str, Evidence], report: Report) -> str:
    return next((e.reference_name for e in evidences.values()), report.reference)


def random_reference_line(report: Report) -> list[str]:
    """One line when the numbers are the random reference's, not GPT-2's."""
    if report.reference != "random":
        return []
    said = "a seeded RANDOM model of GPT-2's shape, not GPT-2: verdicts hold, numbers differ"
    return [fallback_banner(report) or f"{said} (--reference random)"]


def check_printout(result: CheckResult, evidence: Evidence, weights: dict, sizes: Sizes) -> list[str]:
    check = evidence.check
    head = f"{check.id} ({result.status}): {check.target.label} in {check.target.file}.py"
    case = next(iter(evidence.cases), None)
    prefix = evidence.cases[case].weights if case else None
    lines = [head + ("" if prefix is None else f", loaded with the reference's {loaded_part(prefix)} weights")]
    lines += parameter_lines(evidence.reply.parameters, reference_total(weights, prefix), root_tag(evidence, case))
    if case:
        lines += step_lines(evidence, case, sizes, explained=result.status == "pass")
    lines.append(difference_line(result, evidence))
    lines += prediction_lines(evidence)
    lines += key_lines(evidence, prefix)
    return lines


def loaded_part(prefix: str) -> str:
    """ "blocks.0.attn" for the prefix `blocks.0.attn.`; the whole model's is empty."""
    return prefix.rstrip(".") or "whole model"


def root_tag(evidence: Evidence, case: str | None) -> str:
    """What the recorder tags the module under check's own tensors with (`blocks.0.attn`, `Transformer`)."""
    weights = evidence.cases[case].weights if case else None
    return (weights or "").rstrip(".") or evidence.check.target.name


def reference_total(weights: dict[str, list[int]], prefix: str | None) -> int | None:
    """How many numbers the reference's parameters under `prefix` hold (None: the target takes no weights)."""
    if prefix is None:
        return None
    return sum(math.prod(shape) for key, shape in weights.items() if key.startswith(prefix))


# --- parameters ---------------------------------------------------------------------------------------------


def parameter_lines(parameters: list[wire.ParameterShape], reference: int | None, root: str) -> list[str]:
    if not parameters:
        return ["  parameters: none recorded (the module did not build, or the target is a function)"]
    rows = [(relative_name(p, root), p.shape, p.requires_grad) for p in parameters]
    width = max(len(name) for name, _, _ in rows)
    lines = ["  parameters:"]
    for name, shape, trains in shown_once_per_block(rows):
        lines.append(f"    {name:<{width}}  {shape_text(shape):<16} requires_grad={trains}  {math.prod(shape):>12,}")
    lines += repeated_blocks_line(rows)
    total = sum(math.prod(shape) for _, shape, _ in rows)
    beside = "" if reference is None else f" (the reference's: {reference:,})"
    lines.append(f"    total: {total:,} numbers in {len(rows)} parameters{beside}")
    return lines


def relative_name(parameter: wire.ParameterShape, root: str) -> str:
    """`ln1.w` for a block's parameter, `W_Q` for an attention's own: the path below the module under check."""
    below = parameter.tag.removeprefix(root).lstrip(".") if parameter.tag.startswith(root) else parameter.tag
    return f"{below}.{parameter.name}" if below else parameter.name


def block_of(name: str) -> tuple[int, str] | None:
    """(3, "ln1.w") for `blocks.3.ln1.w`."""
    found = BLOCK.match(name)
    return (int(found.group(1)), name[found.end() :].lstrip(".")) if found else None


def shown_once_per_block(rows: list[tuple]) -> list[tuple]:
    """Every row but those of blocks after the first, which the stack repeats."""
    return [row for row in rows if (block_of(row[0]) or (0, ""))[0] == 0]


def repeated_blocks_line(rows: list[tuple]) -> list[str]:
    """One line for blocks.1 on, when each holds what blocks.0 holds; their rows when one does not."""
    by_block: dict[int, list[tuple]] = {}
    for name, shape, trains in rows:
        if (found := block_of(name)) is not None:
            by_block.setdefault(found[0], []).append((found[1], shape, trains))
    later = sorted(n for n in by_block if n > 0)
    if not later:
        return []
    if all(by_block[n] == by_block[0] for n in later):
        each = sum(math.prod(shape) for _, shape, _ in by_block[0])
        span = f"blocks.{later[0]}-blocks.{later[-1]}"
        return [f"    {span}: the same {len(by_block[0])} parameters as blocks.0 ({each:,} each)"]
    return [
        f"    blocks.{n}.{own}  {shape_text(shape)}  requires_grad={trains}"
        for n in later
        for own, shape, trains in by_block[n]
    ]


# --- steps --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """A tensor the learner's module named on one case: a local of its own code, its return, or a part's output."""

    name: str
    shape: list[int]
    value: np.ndarray | None  # when the check kept its values
    argument: bool = False  # what a function of the module's was called with, not what its code made


def steps_of(evidence: Evidence, case: str) -> list[Step]:
    """The module's own named tensors and its direct parts' outputs, in the order its code made them; not the
    tensors inside its parts (their own --show prints them), nor a helper's return."""
    root, parts_below = root_tag(evidence, case), (evidence.cases[case].weights or "")
    steps = []
    for record in evidence.reply.captures.get(case, []):
        name = part_name(record, parts_below) if record.kind == "modules" else own_name(record, root)
        if name is not None:
            key = wire.CAPTURE.format(case=case, i=record.saved)
            argument = record.kind == "locals" and record.line is None
            steps.append(Step(name, record.shape, evidence.outcome.outputs.get(key), argument))
    return steps


def part_name(record: wire.Record, parts_below: str) -> str | None:
    """A direct part's output by its path (`ln1`, `blocks.3`); None for its input or a part inside a part.
    `parts_below` is the module's own prefix in the reference's weights (`blocks.0.`, "" for the whole model)."""
    path = record.tag.removeprefix(parts_below)
    direct = record.name == "output" and ("." not in path or BLOCK.fullmatch(path))
    return path if direct else None


def own_name(record: wire.Record, root: str) -> str | None:
    """A tensor the module's own code named or returned; None for a helper's."""
    return None if record.tag != root or record.name.startswith("return of") else record.name


def step_lines(evidence: Evidence, case: str, sizes: Sizes, explained: bool = False) -> list[str]:
    """Each step's line; `explained` (a passing check's): a tensor named as a step that is not it is said to be that
    step but for a bias or a scale where it is (an intermediate value, `relation`), not only to differ."""
    steps = steps_of(evidence, case)
    if not steps:
        return []
    expected = evidence.expected[case]
    batch, posn = (expected.shape[0], expected.shape[1]) if expected.ndim >= 3 else (None, None)
    reference_steps = dict(evidence.steps(case))
    groups = grouped(steps)
    width = max(len(label) for label, _ in groups)
    lines = [f"  steps on {case} (batch {batch}, {posn} positions):" if batch else f"  steps on {case}:"]
    for label, members in groups:
        first = members[0]
        argument = "argument: " if first.argument else ""
        comment = argument + sizes.axes(first.shape, batch, posn)
        comment += step_difference(members, reference_steps, evidence.check.tolerance, explained)
        lines.append(f"    {label:<{width}}  {shape_text(first.shape):<18} # {comment}")
    return lines


def grouped(steps: list[Step]) -> list[tuple[str, list[Step]]]:
    """Steps of the same name (a block's number aside) and shape, as one line: the stack's blocks, a residual
    reassigned in a loop."""
    groups: dict[tuple, list[Step]] = {}
    for step in steps:
        groups.setdefault((BLOCK.sub("blocks.N", step.name), tuple(step.shape)), []).append(step)
    return [(group_label(members), members) for members in groups.values()]


def group_label(members: list[Step]) -> str:
    first, last = members[0].name, members[-1].name
    if len(members) == 1:
        return first
    return f"{first}-{last}" if first != last else f"{first} (x{len(members)})"


def step_difference(members: list[Step], reference_steps: dict, tolerance, explained: bool = False) -> str:
    """ "; = the reference's blocks.0-blocks.11 (max abs diff 2.1e-07)": the reference's step each tensor equals (in
    any axis order), found by value whatever its name, where the check kept the values; else, for a tensor named
    as a step, how it relates to that step (`relation`), how far it is from it, or that its shape differs."""
    found = [step_match(step, reference_steps, tolerance, explained) for step in members]
    if any(f is None for f in found):
        return ""
    labels = [label for label, _, _ in found]
    span = labels[0] if len(set(labels)) == 1 else f"{labels[0]}-{labels[-1]}"
    if any(state == "differs" for _, _, state in found):
        differs = next(said for _, said, state in found if state == "differs")
        return f"; not the reference's {span}: {differs}"
    related = [said for _, said, state in found if state == "related"]
    if related:
        some = "" if len(related) == len(found) else f", {len(related)} of the {len(found)}"
        return f"; = the reference's {span}{some} {related[0]}"
    diffs = [float(d) for _, d, _ in found if not isinstance(d, str)]
    return f"; = the reference's {span}" + (f" (max abs diff {max(diffs):.2e})" if diffs else "")


def step_match(
    step: Step, reference_steps: dict, tolerance, explained: bool = False
) -> tuple[str, float | str, str] | None:
    """(the reference's step, the max abs diff or what differs or how it relates, and which: "equals", "related",
    "differs") for one tensor; how it relates only where `explained`."""
    label = None if step.value is None else equal_step(step.value, reference_steps, tolerance)
    if label is not None:
        theirs = reference_steps[label]
        same_order = step.value.shape == theirs.shape
        return label, max_abs_diff(step.value, theirs) if same_order else "axes reordered", "equals"
    label = named_step(step.name, reference_steps)  # residual_var: var
    if label is None:
        return None
    theirs = reference_steps[label]
    if list(theirs.shape) != step.shape:
        return label, f"its shape is {shape_text(theirs.shape)}", "differs"
    if step.value is None:
        return label, "same shape", "equals"
    related = relation(step.value, theirs, tolerance) if explained else None  # attn_out before b_O
    if related:
        return label, related, "related"
    return label, f"max abs diff {max_abs_diff(step.value, theirs):.2e}", "differs"


def relation(yours: np.ndarray, theirs: np.ndarray, tolerance) -> str | None:
    """How a tensor named as a step relates to that step, when it is the step but for one bias added at every
    position, or one scale (an unscaled score): "but for a bias (...)", "times 8 (a scale)"; None when neither."""
    kept = np.isfinite(theirs) & np.isfinite(yours)
    if not kept.any():
        return None
    if kept.all():
        bias = np.median((yours - theirs).reshape(-1, theirs.shape[-1]), axis=0)
        if matches_step(yours, theirs + bias, tolerance):
            return "but for a bias (one vector added at every position)"
    large = kept & (np.abs(theirs) > np.abs(theirs[kept]).mean())  # ratios of the step's larger values only
    scale = float(np.median(yours[large] / theirs[large])) if large.any() else 1.0
    if matches_step(yours, theirs * scale, tolerance):
        return f"times {scale:.4g} (a scale)"
    return None


def max_abs_diff(yours: np.ndarray, theirs: np.ndarray) -> float:
    return float(differences(yours, theirs).max()) if theirs.size else 0.0


def differences(yours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """|yours - theirs| of two arrays of one shape, a NaN as inf; a score the reference masks (-inf) counts as no
    difference, as the diagnosis compares scores only where the mask keeps them (a tensor named before the mask)."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(yours.astype(np.float64) - theirs.astype(np.float64))
    return np.nan_to_num(np.where(np.isneginf(theirs), 0.0, diff), nan=np.inf, posinf=np.inf)


# --- the output, the predictions, the keys ------------------------------------------------------------------


def difference_line(result: CheckResult, evidence: Evidence) -> str:
    if result.max_abs_diff is None:
        return f"  max abs diff against {evidence.reference_name}: none ({result.message or result.status})"
    said = "within tolerance" if result.status == "pass" else result.message
    return f"  max abs diff against {evidence.reference_name}: {result.shown_diff} ({said})"


def prediction_lines(evidence: Evidence) -> list[str]:
    """Each prompt token and the token predicted after it, the learner's beside the reference's (batch 0): the
    table the HTML report draws too (grader.host.figures.next_token_predictions), as text."""
    table = next_token_predictions(evidence).get("predictions")
    if table is None:
        return []
    readable = table["yours"] is not None
    theirs = [repr(token) for token in table["reference"]]
    yours = [NO_TOP if t is None else repr(t) for t in table["yours"]] if readable else ["-"] * len(theirs)
    columns = [[repr(token) for token in table["tokens"]], yours, theirs]
    widths = [max(len(cell) for cell in [title, *column]) for title, column in zip(TITLES, columns, strict=True)]
    lines = [f"  next-token predictions on the prompt (yours beside {evidence.reference_name}'s):"]
    lines.append("    " + "  ".join(title.ljust(width) for title, width in zip(TITLES, widths, strict=True)))
    for cells in zip(*columns, strict=True):
        same = "" if not readable else ("same" if cells[1] == cells[2] else "differs")
        lines.append("    " + "  ".join(c.ljust(w) for c, w in zip((*cells, same), (*widths, 0), strict=True)).rstrip())
    if not readable:
        lines.append("    (yours: no logits of the reference's shape on the prompt, so no predictions)")
    return lines


NO_TOP = "NaN"  # a position whose logits hold a NaN: no token is on top
TITLES = ("token", "yours next", "reference next")


def key_lines(evidence: Evidence, prefix: str | None) -> list[str]:
    """The whole model's state_dict keys the learner's model lacks or has beyond the reference's."""
    facts = evidence.reply.weights
    if prefix != "" or facts is None:
        return []
    return [
        f"  missing keys (yours has, the reference's weights do not): {listed(facts.missing)}",
        f"  unexpected keys (the reference's weights have, yours does not): {listed(facts.unexpected)}",
    ]


def listed(names: Iterable[str]) -> str:
    names = list(names)
    return ", ".join(names) if names else "none"


def shape_text(shape) -> str:
    return str(tuple(int(n) for n in shape))
