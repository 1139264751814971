"""Part 3: looking inside. The learner's interpretability functions, run on the learner's own
modules loaded with GPT-2's weights (see `grader/learner/drivers/interp.py`).

The logit lens and the QK and OV circuits are compared with transformer_lens's own
(`accumulated_resid(apply_ln=True)`, `FactoredMatrix`); the parameter counts with the reference's
state_dict; the direct path with GPT-2's embed and unembed modules; the folding, the tie test and
the erasing neuron with their exact formulas. Each case names what the classic mistakes output.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from grader.checks import Case, Check, Target, Tolerance, driven
from grader.checks.induction.induction import repeated_batch
from grader.checks.model._common import generator
from grader.checks.model.block import replay_extras
from grader.shared.compare import CaseComparison, validate
from grader.shared.formats import COUNT_KEYS, PROBE_LOGITS, PROBE_SHAPE, PROBE_TOKENS
from grader.shared.types import counts_by_part

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import Tensor

    from grader.builder.interface import Reference

EXACT = "the exact answer"
HEADS = ((0, 0), (-1, 5))  # (layer, head): the first block's first head and a head of the last block
PROBE_SALT = 500_009  # the probe's ids come from a generator of their own: none of the token sets' ids
SMALL_LENS = "small_repeated"  # the small induction model's lens case, and its token set: one [BOS, A, A]
SMALL_ONLY = (
    "it fails only on the small induction model (2 layers, d_model 64, 512 tokens): read every size from model.cfg "
    "or the model's own modules (model.blocks), never GPT-2's numbers"
)


def probed(cases: Callable[[Reference], list[Case]]) -> Callable[[Reference], list[Case]]:
    """`cases`, each carrying the probe that decides whether the check runs on the learner's Transformer or on the
    stand-in (drivers.interp.model): token ids of their own and GPT-2's logits there, which the learner's must give."""

    @functools.wraps(cases)
    def with_probe(ref: Reference) -> list[Case]:
        import torch

        if PROBE_TOKENS not in ref.tokens:  # a token set of its own: its logits are computed once for the part
            ref.tokens[PROBE_TOKENS] = torch.randint(0, ref.d_vocab, PROBE_SHAPE, generator=generator(ref, PROBE_SALT))
        logits = ref.activations(PROBE_TOKENS)["unembed.hook_out"]
        probe = {PROBE_TOKENS: ref.tokens[PROBE_TOKENS], PROBE_LOGITS: logits}
        return [replace(case, extra=case.extra | probe) for case in cases(ref)]

    return with_probe


def as_counts(counts: dict[str, int]) -> Tensor:
    import torch

    return torch.tensor([float(counts[key]) for key in COUNT_KEYS], dtype=torch.float64)


# --- the cases ----------------------------------------------------------------------------------


def parameter_counts_cases(ref: Reference) -> list[Case]:
    counts = counts_by_part((name, math.prod(shape)) for name, shape in ref.parameter_shapes().items())
    d_vocab = ref.d_vocab
    right = counts | {"tied": counts["total"] - counts["unembed"]}
    no_b_U = right | {"unembed": right["unembed"] - d_vocab, "total": right["total"] - d_vocab}
    mistakes = {
        "b_U is not counted: count every parameter, trainable or not": as_counts(no_b_U),
        TIED_KEEPS_B_U: as_counts(right | {"tied": right["tied"] + d_vocab}),
    }
    return [Case("gpt2", [], as_counts(right), weights="", mistakes=mistakes)]


TIED_KEEPS_B_U = (
    "the tied count keeps b_U: GPT-2 has no unembedding bias, so the quoted count leaves out the whole unembedding"
)
TIED_WITHIN_A_TOLERANCE = (
    "W_U differs from W_E^T in one entry and is_tied says True: "
    "compare every entry exactly (torch.equal), not within a tolerance"
)


ONE_STREAMS_STATISTICS = (
    "every stream was normalised with the last stream's mean and variance: apply ln_final to each stream, "
    "which takes that stream's own"
)
ONE_STREAMS_SCALE = (
    "every stream was divided by the last stream's scale (the cached ln_final scale): apply ln_final to each stream, "
    "which recomputes its variance"
)


def logit_lens_cases(ref: Reference) -> list[Case]:
    """GPT-2's lens on the prompt; then the small induction model's on [BOS, A, A], where even offline the lens shows
    structure (the repeated half's tokens predicted from layer 1 on). GPT-2's case comes first: the first case decides
    whether the check runs on the learner's Transformer, by the probe, which holds GPT-2's logits."""
    small = ref.induction_model()
    small.tokens.setdefault(SMALL_LENS, repeated_batch(small, "small")[:1])
    own_weights = {"overrides": small.parameters_of(""), "config": small.config_fields(), "hint": SMALL_ONLY}
    return [lens_case(ref, "prompt", weights=""), lens_case(small, SMALL_LENS, **own_weights)]


def lens_case(model: Reference, tokens_name: str, **fields) -> Case:
    """The logit lens of `model` on one of its token sets, named after it, with the classic mistake."""
    import torch

    tokens = model.tokens[tokens_name]
    acts = model.activations(tokens_name)
    streams = [acts[f"blocks.{layer}.hook_resid_pre"] for layer in range(model.n_layers)] + [
        acts[f"blocks.{model.n_layers - 1}.hook_resid_post"]
    ]
    no_ln = torch.stack([model.call("unembed", stream) for stream in streams])
    # ln_final with the last stream's statistics for every stream: its mean and scale, or (transformer_lens's cached
    # scale, recompute_ln=False) each stream's own mean and the last stream's scale.
    final_mean, final_scale = streams[-1].mean(dim=-1, keepdim=True), acts["ln_final.hook_scale"]
    w, b = model.weight("ln_final.w"), model.weight("ln_final.b")

    def read_with(means) -> Tensor:
        return torch.stack(
            [model.call("unembed", w * (s - m) / final_scale + b) for s, m in zip(streams, means, strict=True)]
        )

    own_means = [stream.mean(dim=-1, keepdim=True) for stream in streams]
    mistakes = {
        "ln_final is not applied: unembed ln_final(stream), as the model's own readout does": no_ln,
        ONE_STREAMS_STATISTICS: read_with([final_mean] * len(streams)),
        ONE_STREAMS_SCALE: read_with(own_means),
    }
    # Each block answers the model's output for its input, so the lens is graded on its own (one mistake, one penalty).
    blocks = {f"blocks.{layer}": (streams[layer], streams[layer + 1]) for layer in range(model.n_layers)}
    extra = replay_extras(blocks)
    return Case(tokens_name, [tokens], model.logit_lens(tokens), extra=extra, mistakes=mistakes, **fields)


def circuit_cases(kind: str):
    """Cases of qk_circuit or ov_circuit on a few heads, with what the classic mistakes give."""

    def cases(ref: Reference) -> list[Case]:
        import torch

        result = []
        for layer, head in HEADS:
            layer %= ref.n_layers
            right = ref.head_circuits(layer, head)[kind]
            every_head = sum(ref.head_circuits(layer, h)[kind] for h in range(ref.n_heads))
            order = (
                "W_K W_Q^T: rows index the query side, so W_Q W_K^T"
                if kind == "qk"
                else "W_O^T W_V^T: rows index what is read, so W_V W_O"
            )
            mistakes = {
                f"the factors are in the wrong order, this is the transpose {order}": right.T,
                "every head is summed: take W[head] of one head": every_head,
            }
            result.append(
                Case(
                    f"blocks.{layer}.head{head}",
                    [torch.tensor(head)],
                    right,
                    weights=f"blocks.{layer}.attn.",
                    mistakes=mistakes,
                )
            )
        return result

    return cases


def folded(W_folded: Tensor, b_folded: Tensor) -> Tensor:
    """fold_layernorm's answer as its driver sends it: W_folded with b_folded as a last row."""
    import torch

    return torch.cat([W_folded, b_folded[None]])


def fold_layernorm_cases(ref: Reference) -> list[Case]:
    import einops

    last = ref.n_layers - 1
    sites = [(f"blocks.{layer}.ln2", ref.parameters_of(f"blocks.{layer}.mlp"), "W_in", "b_in") for layer in (0, last)]
    attn = ref.parameters_of("blocks.0.attn")
    flat = {
        "W_V": einops.rearrange(attn["W_V"], "n_heads d_model d_head -> d_model (n_heads d_head)"),
        "b_V": attn["b_V"].flatten(),
    }
    sites.append(("blocks.0.ln1", flat, "W_V", "b_V"))
    cases = []
    for path, weights, w_name, b_name in sites:
        W, b = weights[w_name], weights[b_name]
        ln = ref.parameters_of(path)
        gamma, beta = ln["w"], ln["b"]

        mistakes = {
            "b_folded forgets ln.b: it is ln.b W + b": folded(gamma[:, None] * W, b),
            "b_folded forgets the linear map's own b: it is ln.b W + b": folded(gamma[:, None] * W, beta @ W),
            "w is not folded in: W_folded = diag(w) W": folded(W, beta @ W + b),
        }
        cases.append(
            Case(
                f"{path}.{w_name}",
                [W, b],
                folded(gamma[:, None] * W, beta @ W + b),
                weights=f"{path}.",
                mistakes=mistakes,
            )
        )
    return cases


def direct_path_cases(ref: Reference) -> list[Case]:
    cases = []
    for name in ("prompt", "random"):
        tokens = ref.tokens[name]
        embedded = ref.call("embed", tokens)
        right = ref.call("unembed", embedded)
        mistakes = {
            "the positional embedding is added: the direct path starts from W_E[tokens] alone": ref.call(
                "unembed", embedded + ref.call("pos_embed", tokens)
            ),
            "ln_final is applied: the direct path has no LayerNorm": ref.call(
                "unembed", ref.call("ln_final", embedded)
            ),
            "b_U is not added": right - ref.weight("unembed.b_U"),
        }
        cases.append(Case(name, [tokens], right, weights="", mistakes=mistakes))
    return cases


def is_tied_cases(ref: Reference) -> list[Case]:
    """GPT-2's own weights, then W_U[0, 0] moved far, and moved by less than allclose notices
    (1e-6 relative: above float32's resolution, below allclose's rtol of 1e-5)."""
    import torch

    W_E_T, W_U = ref.weight("embed.W_E").T, ref.weight("unembed.W_U")
    tied_elsewhere = torch.equal(W_U[1:], W_E_T[1:]) and torch.equal(W_U[0, 1:], W_E_T[0, 1:])
    cases = []
    for name, nudge in (("gpt2", 0.0), ("untied", 0.5), ("nearly_tied", 1e-6)):
        moved = W_U[0, 0].clone()  # what the driver does to the learner's W_U[0, 0]
        moved *= 1 + nudge
        tied = tied_elsewhere and torch.equal(moved, W_E_T[0, 0])
        hint = "" if tied else TIED_WITHIN_A_TOLERANCE
        mistakes = {hint: torch.tensor([1.0], dtype=torch.float64)} if hint else {}
        cases.append(
            Case(
                name,
                [torch.tensor(nudge)],
                torch.tensor([float(tied)], dtype=torch.float64),
                weights="",
                mistakes=mistakes,
            )
        )
    return cases


def erase_direction_cases(ref: Reference) -> list[Case]:
    import torch

    v = torch.randn(ref.d_model, generator=ref.generator)
    v = v / v.norm()
    signs = torch.tensor([[3.0, -3.0, 0.5, -0.5, 0.0], [-2.0, 2.0, 1.0, -1.0, 4.0]])
    built = torch.randn(2, 5, ref.d_model, generator=ref.generator) * 0.1 + signs[..., None] * v
    # GPT-2's residual stream, centred over positions, so that its projections on v sum to zero:
    # some are positive and some negative, and only the positive ones are erased.
    resid = ref.activations("prompt")[f"blocks.{ref.n_layers // 2}.hook_resid_pre"]
    centred = resid - resid.mean(dim=1, keepdim=True)
    toward = centred[0, 2] - centred[0, 5]
    cases = []
    for name, x, direction in (("signed_components", built, v), ("gpt2_resid", centred, toward / toward.norm())):
        projection = x @ direction
        mistakes = {
            "there is no ReLU: a negative component along v must stay": x - projection[..., None] * direction,
            "the ReLU acts on x: apply it to the projection v . x": x - (x.relu() @ direction)[..., None] * direction,
            "the component is added: the neuron writes -v, so subtract v ReLU(v . x)": x
            + projection.relu()[..., None] * direction,
        }
        cases.append(Case(name, [x, direction], x - projection.relu()[..., None] * direction, mistakes=mistakes))
    return cases


# --- comparing counts ---------------------------------------------------------------------------


def same_counts(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> CaseComparison:
    """Every count exact; the message names each part that differs."""
    invalid = validate(actual, expected)
    if invalid:
        return invalid
    shapes = {"actual_shape": list(actual.shape), "expected_shape": list(expected.shape)}
    wrong = [
        f"{key} {int(a):,} (GPT-2: {int(e):,})"
        for key, a, e in zip(COUNT_KEYS, actual, expected, strict=False)
        if a != e
    ]
    return CaseComparison(not wrong, "; ".join(wrong), float(np.abs(actual - expected).max()), **shapes)


def interp(name: str, driver: str | None) -> Target:
    return driven("interp", name, driver)


EXACT_ONLY = Tolerance(atol=0.0, rtol=0.0)
PAGE = "15-interp.md"
CHECKS = (
    Check(
        "interp.parameter_counts",
        1,
        interp("parameter_counts", "counts"),
        "parameter counts",
        probed(parameter_counts_cases),
        comparison=same_counts,
        tolerance=EXACT_ONLY,
    ),
    Check(
        "interp.logit_lens",
        2,
        interp("logit_lens", "on_model"),
        "the logit lens",
        probed(logit_lens_cases),
        tolerance=Tolerance(atol=1e-3, rtol=1e-4),
        uses=("embed", "pos_embed", "layernorm", "block", "unembed"),
    ),
    Check(
        "interp.qk_circuit",
        1,
        interp("qk_circuit", "head_circuit"),
        "a head's QK circuit",
        circuit_cases("qk"),
    ),
    Check(
        "interp.ov_circuit",
        1,
        interp("ov_circuit", "head_circuit"),
        "a head's OV circuit",
        circuit_cases("ov"),
    ),
    Check(
        "interp.fold_layernorm",
        2,
        interp("fold_layernorm", "fold"),
        "folding LayerNorm into the next map",
        fold_layernorm_cases,
        expected_from=EXACT,
    ),
    Check(
        "interp.direct_path",
        1,
        interp("direct_path_logits", "on_model"),
        "the direct path's logits",
        probed(direct_path_cases),
        uses=("embed", "unembed"),
    ),
    Check(
        "interp.is_tied",
        1,
        interp("is_tied", "tied"),
        "tied embeddings",
        probed(is_tied_cases),
        tolerance=EXACT_ONLY,
        expected_from=EXACT,
    ),
    Check(
        "interp.erase_direction",
        1,
        interp("erase_direction", None),
        "a neuron that erases a direction",
        erase_direction_cases,
        tolerance=Tolerance(atol=1e-5, rtol=1e-5),
        expected_from=EXACT,
    ),
)
