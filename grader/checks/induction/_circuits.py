"""The cases of Part 5's checks that take a head apart (`induction.py` declares them): ablating it on hook_z
(induction.ablate_head) and what that costs on the repeated half (induction.ablation_cost), its direct effect on the
next token's logit (induction.direct_logit_attribution), its K-composition into a later head (induction.k_composition);
with the formulas of their expected answers and known mistakes (`ablated`, `mean_loss_rise`, `dla`, `frobenius`).
Torch is imported by the builder's process only: these run in the case builders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import Case
from grader.checks.induction._models import SEQ_LEN, models, next_token_loss, repeated_batch

if TYPE_CHECKING:
    from torch import Tensor

    from grader.builder.interface import Reference

GPT2_PREVIOUS_TOKEN_HEAD = (4, 11)


# --- ablate_head --------------------------------------------------------------------------------------------------


def ablated(z: Tensor, head: int, how: str, over: tuple[int, ...] = (0,), heads: slice | None = None) -> Tensor:
    """z with `heads` (default: `head` alone) zeroed, or replaced by their mean `over` these axes of z."""
    out = z.clone()
    chosen = (slice(None), slice(None), heads if heads is not None else head)
    out[chosen] = 0.0 if how == "zero" else z.mean(dim=over, keepdim=True)[chosen].expand_as(out[chosen])
    return out


ABLATED_Z = (("zero", 1, 2), ("mean", 1, 2), ("mean", 0, 1))  # (how, layer, head)


def ablate_head_cases(ref: Reference) -> list[Case]:
    import torch

    from grader.learner.drivers import text_tensor

    small = ref.induction_model()
    repeated = repeated_batch(small, "small")
    names = tuple(f"blocks.{layer}.attn.hook_z" for layer in range(small.n_layers))
    _, activation_cache = small.run_with_cache(repeated, names)
    cases = []
    for how, layer, head in ABLATED_Z:
        z = activation_cache[names[layer]].detach().clone()
        mistakes = {"every head is ablated: change z[:, :, head] only": ablated(z, head, how, heads=slice(None))}
        if how == "mean":
            mistakes |= {
                "the mean is over the positions: take it over the batch, per position": ablated(z, head, how, (1,)),
                "the mean is over d_head: take it over the batch, per position and component": ablated(
                    z, head, how, (0, 3)
                ),
            }
        args = [z, torch.tensor(head), text_tensor(how)]
        cases.append(Case(f"small.blocks.{layer}.head{head}.{how}", args, ablated(z, head, how), mistakes=mistakes))
    return cases


# --- ablation_cost ------------------------------------------------------------------------------------------------


def mean_loss_rise(clean: Tensor, ablated_logits: Tensor, tokens: Tensor, predictions: slice) -> Tensor:
    """The mean over `predictions` (positions of next_token_loss) of the ablated loss minus the clean one."""
    return (next_token_loss(ablated_logits, tokens) - next_token_loss(clean, tokens))[:, predictions].mean()


def ablation_cost_cases(ref: Reference) -> list[Case]:
    import torch

    ablations = {
        "small": [(how, 0, 1) for how in ("zero", "mean")]
        + [(how, 1, head) for head in range(4) for how in ("zero", "mean")]
    }
    # GPT-2's logits are 8 MB a sequence: one sequence, zero ablation (a mean over one sequence changes nothing).
    ablations["gpt2"] = [("zero", 5, 5), ("zero", *GPT2_PREVIOUS_TOKEN_HEAD)]
    cases = []
    for name, model in models(ref):
        tokens = repeated_batch(model, name)[: 1 if name == "gpt2" else None]
        clean = model.logits(tokens)
        for how, layer, head in ablations[name]:
            edit = lambda z, head=head, how=how: ablated(z, head, how)  # noqa: E731
            logits = model.logits_with_hook(tokens, f"blocks.{layer}.attn.hook_z", edit)
            mistakes = {
                "the first half: the repeated half's tokens are predicted at positions seq_len to 2 seq_len - 1": (
                    mean_loss_rise(clean, logits, tokens, slice(0, SEQ_LEN))
                ),
                "off by one: per_token_loss[:, p] is the loss of token p + 1, so take per_token_loss[:, seq_len:]": (
                    mean_loss_rise(clean, logits, tokens, slice(SEQ_LEN + 1, None))
                ),
                "the sign is wrong: the cost is the ablated loss minus the clean loss": -mean_loss_rise(
                    clean, logits, tokens, slice(SEQ_LEN, None)
                ),
            }
            expected = mean_loss_rise(clean, logits, tokens, slice(SEQ_LEN, None))
            args = [clean, logits, tokens, torch.tensor(SEQ_LEN)]
            cases.append(Case(f"{name}.blocks.{layer}.head{head}.{how}", args, expected, mistakes=mistakes))
    return cases


# --- direct_logit_attribution ------------------------------------------------------------------------------------


def dla(normalised: Tensor, ln_w: Tensor, W_U: Tensor, tokens: Tensor, targets: Tensor | None = None) -> Tensor:
    """Each head's ln_final-normalised output times w, read along W_U's column of each position's target (by default
    the next token): (batch, posn - 1, layer, head)."""
    import einops

    targets = tokens[:, 1:] if targets is None else targets
    weighted = normalised[:, :-1] * ln_w
    return einops.einsum(weighted, W_U[:, targets], "b p l h d, d b p -> b p l h")


def direct_logit_attribution_cases(ref: Reference) -> list[Case]:
    import torch

    small = ref.induction_model()
    ln_w, W_U = small.weight("ln_final.w").clone(), small.weight("unembed.W_U").clone()
    random = torch.randint(0, small.d_vocab, (4, 30), generator=small.generator)
    cases = []
    for name, tokens in (("small.repeated", repeated_batch(small, "small")), ("small.random", random)):
        heads = small.head_results(tokens)
        results, normalised, scale = heads["results"], heads["normalised"], heads["scale"][..., None, None]
        mistakes = {
            "ln_final's scale is forgotten: divide each head's centred output by ln_scale": dla(
                normalised * scale, ln_w, W_U, tokens
            ),
            "each position is scored on its own token: position p predicts tokens[:, p + 1]": dla(
                normalised, ln_w, W_U, tokens, tokens[:, :-1]
            ),
            "no centring: ln_final subtracts the mean over d_model first, from each head's output too": dla(
                results / scale, ln_w, W_U, tokens
            ),
        }
        args = [results, heads["scale"], ln_w, W_U, tokens]
        cases.append(Case(name, args, dla(normalised, ln_w, W_U, tokens), mistakes=mistakes))
    return cases


# --- k_composition -----------------------------------------------------------------------------------------------


def frobenius(matrix: Tensor) -> Tensor:
    return matrix.pow(2).sum().sqrt()


def k_composition_cases(ref: Reference) -> list[Case]:
    pairs = {"small": [((0, h0), (1, h1)) for h0 in range(4) for h1 in range(4)]}
    pairs["gpt2"] = [(GPT2_PREVIOUS_TOKEN_HEAD, (5, 5)), (GPT2_PREVIOUS_TOKEN_HEAD, (6, 9))]
    cases = []
    for name, model in models(ref):
        for (l0, h0), (l1, h1) in pairs[name]:
            W_OV, W_QK = model.head_circuits(l0, h0)["ov"], model.head_circuits(l1, h1)["qk"]
            norms = frobenius(W_OV) * frobenius(W_QK)
            mistakes = {
                "W_QK is not transposed (that is Q-composition): the earlier head writes into the keys, W_OV W_QK^T": (
                    frobenius(W_OV @ W_QK) / norms
                ),
                "not normalised: divide by ||W_OV||_F ||W_QK||_F": frobenius(W_OV @ W_QK.T),
            }
            expected = model.k_composition_score((l0, h0), (l1, h1))
            cases.append(Case(f"{name}.L{l0}H{h0}.L{l1}H{h1}", [W_OV, W_QK], expected, mistakes=mistakes))
    return cases
