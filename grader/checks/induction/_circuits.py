"""What Part 5's checks that take a head apart share: a head ablated on hook_z (`ablated`: the expected answer of
induction.ablate_head and the edit of induction.ablation_cost) and GPT-2's previous-token head. Torch is imported by
the builder's process only: these run in the case builders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

GPT2_PREVIOUS_TOKEN_HEAD = (4, 11)


def ablated(z: Tensor, head: int, how: str, over: tuple[int, ...] = (0,), heads: slice | None = None) -> Tensor:
    """z with `heads` (default: `head` alone) zeroed, or replaced by their mean `over` these axes of z."""
    out = z.clone()
    chosen = (slice(None), slice(None), heads if heads is not None else head)
    out[chosen] = 0.0 if how == "zero" else z.mean(dim=over, keepdim=True)[chosen].expand_as(out[chosen])
    return out
