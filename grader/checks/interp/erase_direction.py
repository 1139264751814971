"""erase_direction: a neuron that erases the positive component of x along a direction v, x - v ReLU(v . x),
compared with that exact formula on built inputs and on GPT-2's centred residual stream."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case, Check, Tolerance
from grader.checks.interp._common import EXACT, interp

if TYPE_CHECKING:
    from grader.builder.interface import Reference


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


PAGE = "15-interp.md"
CHECK = Check(
    "interp.erase_direction",
    1,
    interp("erase_direction", None),
    "a neuron that erases a direction",
    erase_direction_cases,
    tolerance=Tolerance(atol=1e-5, rtol=1e-5),
    expected_from=EXACT,
)
