"""Weights that do not load into the learner's modules: what the report says of them, and the named mistake (a slip of
widths) they are, if a case names one."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from grader.shared import wire


def weights_mismatch(
    facts: wire.WeightFacts,
    cases: dict[str, wire.CaseSpec],
    mistakes_of: Callable[[str], list[tuple[str, np.ndarray]]],
    reference: str = "GPT-2",
) -> tuple[str, str | None]:
    """Of weights that do not load: the message (`weights_message`: the small model's where every case builds one at
    its own config), and the named mistake they are, if a case names one. A slip of widths never runs, so what a case
    holds of it is the shape it gives a parameter: a mistake whose hint names a misshapen parameter and whose value
    has the shape the learner's parameter has (`mistakes_of(case)`: the case's (hint, value) pairs)."""
    owner = "the small model" if cases and all(case.config for case in cases.values()) else reference
    named = (
        hint
        for case in cases
        for hint, value in mistakes_of(case)
        for name, (own, _) in facts.misshapen.items()
        if name in hint and list(value.shape) == own
    )
    return weights_message(facts, owner), next(named, None)


def weights_message(facts: wire.WeightFacts, reference: str = "GPT-2") -> str:
    """Of weights that do not load: each parameter GPT-2 has not, or has at another shape."""
    owner = "GPT-2's" if reference == "GPT-2" else f"{reference}'s"
    parts = []
    for name in facts.missing:
        suggestion = facts.suggestions.get(name)
        parts.append(
            f"parameter {name} is not in {owner} weights"
            + (f" ({reference} calls it {suggestion[0]})" if suggestion else "")
            + " and would keep its random initial value"
        )
    for name, (own, theirs) in facts.misshapen.items():
        parts.append(f"parameter {name} has shape {tuple(own)}, {owner} has {tuple(theirs)}")
    return "; ".join(parts)
