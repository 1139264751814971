"""What more than one interp check uses: the probe that decides whether a check runs on the learner's Transformer
(`probed`), the heads and the cases of the QK and OV circuits, the target's constructor and the exact tolerances."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING

from grader.checks import Case, Target, Tolerance, driven
from grader.checks.model._common import generator
from grader.shared.formats import PROBE_LOGITS, PROBE_SHAPE, PROBE_TOKENS

if TYPE_CHECKING:
    from collections.abc import Callable

    from grader.builder.interface import Reference

EXACT = "the exact answer"
HEADS = ((0, 0), (-1, 5))  # (layer, head): the first block's first head and a head of the last block
PROBE_SALT = 500_009  # the probe's ids come from a generator of their own: none of the token sets' ids


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


def interp(name: str, driver: str | None) -> Target:
    return driven("interp", name, driver)


EXACT_ONLY = Tolerance(atol=0.0, rtol=0.0)
