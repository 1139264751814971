"""The grader's own parts put in the place of the learner's that fail their own checks, for one check.

A check whose subject composes parts (the whole model, the cached model, the MLP's gelu_new, the attention's mask)
is graded again with the grader's part in place of each of the learner's that fails its own check (the request's
`stand_ins`, `grader.shared.wire.StandInPart`), so that one mistake costs its own check and not every check that
composes it. A class or a function is replaced in the module that defines it and in every module of the learner's
package that bound the same object (`from .normalization import LayerNorm`); a method is replaced on the learner's
class, so that the learner's subclasses (the cached model's) inherit it. Everything is put back after the check:
where checks run without forks, the learner's modules stay imported for the next one.

The parts are built from torch's own functions (`drivers.stand_in_transformer`), never
from an exercise's solution, with transformer_lens's parameter names, so that GPT-2's weights load into them.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from grader.learner.drivers import stand_in_transformer
from grader.learner.package import PACKAGE_NAME, LearnerPackage


def residual(self, tokens):
    """ConcatTransformer.residual: the token half, then the position half, along d_model."""
    import torch

    return torch.cat((self.embed(tokens), self.pos_embed(tokens)), dim=-1)


OWN = {  # wire.StandInPart -> the grader's own
    "embedding.Embed": stand_in_transformer.Embed,
    "embedding.PosEmbed": stand_in_transformer.PosEmbed,
    "normalization.LayerNorm": stand_in_transformer.LayerNorm,
    "attention.Attention": stand_in_transformer.Attention,
    "attention.Attention.apply_causal_mask": stand_in_transformer.Attention.apply_causal_mask,
    "mlp.gelu_new": stand_in_transformer.gelu_new,
    "mlp.MLP": stand_in_transformer.MLP,
    "block.TransformerBlock": stand_in_transformer.TransformerBlock,
    "positions.ConcatTransformer.residual": residual,
}


def learner_modules() -> list:
    """The modules of the learner's package imported so far (not a stand-in module put under one's name)."""
    modules = list(sys.modules.values())
    return [module for module in modules if getattr(module, "__name__", "").startswith(PACKAGE_NAME + ".")]


def rebind(old, new) -> None:
    """Every name a module of the learner's package binds to `old`, bound to `new`."""
    for module in learner_modules():
        for name, value in list(vars(module).items()):
            if value is old:
                setattr(module, name, new)


@contextlib.contextmanager
def standing_in(package: LearnerPackage, parts: list[str]) -> Iterator[None]:
    """The grader's own of each part in place of the learner's while inside; the learner's put back after. A part
    whose file does not import is left alone: the check then stops at that file's own error."""
    with contextlib.ExitStack() as undo:
        for part in parts:
            try:
                undo.callback(stand_in(package, part))
            except Exception:  # its file does not import, or has no such class
                continue
        yield


def stand_in(package: LearnerPackage, part: str) -> Callable[[], None]:
    """The grader's own of `part` put in place of the learner's; what puts the learner's back."""
    file, name, *method = part.split(".")
    module, own = package.module(file), OWN[part]
    holder, attribute = (getattr(module, name), method[0]) if method else (module, name)
    learners = vars(holder).get(attribute)
    setattr(holder, attribute, own)
    if method or learners is None:  # a method's subclasses inherit it; a name never defined is bound nowhere else
        return lambda: setattr(holder, attribute, learners) if learners is not None else delattr(holder, attribute)
    rebind(learners, own)
    return lambda: rebind(own, learners)
