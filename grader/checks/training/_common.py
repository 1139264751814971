"""What more than one training check uses: the `training(...)` target, where their expected answers come from,
the exact tolerance, and the optimiser's slow import."""

from __future__ import annotations

from grader.checks import Target, Tolerance, driven

FIRST_PRINCIPLES = "the grader's own computation"


def training(name: str, driver: str | None, method: str | None = None) -> Target:
    return driven("training", name, driver, method)


EXACT = {"tolerance": Tolerance(atol=1e-5, rtol=1e-5), "expected_from": FIRST_PRINCIPLES}
OPTIMIZER = ("torch._dynamo",)  # torch.optim's first optimizer imports it: about 2 s
