"""The trap audit of the course pages (docs/course/*.md), as test_trap_audit's is of the solutions' docstrings: every
trap a page lists is placed here, and each is a named mistake of its check (a hint the reference's cases carry), a
mistake its check's message names in words, or right code the grader rightly passes. A trap added, removed or
reworded at its start without its place here fails the test below; a named mistake that its check stops naming fails
test_trap_audit's, which holds both audits' places to their checks."""

from __future__ import annotations

import re

from repo import REPO
from traps import Named, Right, Said

PAGES = REPO / "docs" / "course"
COMPARE = "grader/shared/compare.py"
SAMPLING_DRIVERS = "grader/learner/drivers/sampling.py"


def page_traps() -> list[tuple[str, str]]:
    """(page, trap) for every trap a course page lists. Under a "## Traps" heading (up to the next "## "), each
    bullet is one trap, its lines joined. In prose, a sentence that begins "Trap:" or "Traps:" (up to a full stop
    that ends the paragraph or comes before a capital or a backquote) is split into clauses at "; ", as the
    docstrings' Trap(s) lines are: one entry per clause, a clause that explains the one before it included."""
    found = []
    for path in sorted(PAGES.glob("*.md")):
        if path.name == "README.md":
            continue
        text = path.read_text()
        section = re.search(r"^## Traps\n(.*?)(?=^## |\Z)", text, re.S | re.M)
        for bullet in re.split(r"^- ", section.group(1), flags=re.M)[1:] if section else []:
            found.append((path.name, " ".join(bullet.split("\n\n")[0].split())))
        for paragraph in text.split("\n\n"):
            for sentence in re.findall(r"(?:^|(?<=\. ))Traps?: (.+?)\.(?= [A-Z`]|$)", " ".join(paragraph.split())):
                found += [(path.name, clause) for clause in sentence.split("; ")]
    return found


# Keyed by (page, the trap's first words): each key's words begin exactly one trap of its page.
COURSE_TRAPS = {
    ("02-embed.md", "No loop and no matrix product"): Right("a loop or a one-hot product gives the same rows, slower"),
    ("02-embed.md", "Do not squeeze or assume a size"): Named("embed", "nothing may assume more than one position"),
    ("02-embed.md", "The ids are a LongTensor on the module's device"): Right(
        "a fact about the input and W_E: rows indexed from W_E are already float, on its device"
    ),
    ("03-pos-embed.md", "Indexing `W_pos` by the token ids is the classic mistake"): Named(
        "pos_embed", "looked up by token id"
    ),
    ("03-pos-embed.md", "Return the batch axis"): Named("pos_embed", "the batch axis is missing"),
    ("03-pos-embed.md", "Start at `past_kv_pos_offset`"): Named(
        "pos_embed", "the positions start at 0, not at past_kv_pos_offset"
    ),
    ("03-pos-embed.md", "The grader also asks for the whole context"): Right("a description of the check's cases"),
    ("04-layernorm.md", "Reduce over the **last** axis"): Named(
        "layernorm", "mean and variance are taken over positions"
    ),
    ("04-layernorm.md", "The variance is the *biased* one"): Named("layernorm", "the variance divides by N-1"),
    ("04-layernorm.md", "`eps` goes **inside** the square root"): Named(
        "layernorm", "eps is added outside the square root"
    ),
    ("04-layernorm.md", "Apply `w` and `b` last"): Named("layernorm", "w and b are not applied"),
    ("04-layernorm.md", "Compute the variance as the mean of (x - mean)²"): Named(
        "layernorm", "a variance computed as E[x^2] - E[x]^2 loses its digits"
    ),
    ("04-layernorm.md", "GPT-2's first position (BOS) has a huge residual norm"): Right(
        "a description of a case: a right LayerNorm passes it, and a wrong one fails its ordinary cases too"
    ),
    ("05-attention.md", "Scale by `sqrt(d_head)`"): Named("attention", "divided by d_head"),
    ("05-attention.md", "Mask before the softmax"): Named(
        "attention", "applied after the softmax, so the weights left"
    ),
    ("05-attention.md", "Keep the diagonal"): Named("attention", "the mask hides the diagonal too"),
    ("05-attention.md", "Softmax over the last axis"): Named("attention", "over the query axis"),
    ("05-attention.md", "A mask built by comparing values"): Named(
        "attention.causal_mask", "allowed scores equal to 0 were masked"
    ),
    ("05-attention.md", "Build the mask on the scores' device"): Right(
        "on one device every mask is on the scores'; on another a mask elsewhere raises at its line"
    ),
    ("05-attention.md", "A softmax written as exp / sum overflows"): Named("attention", "the softmax overflows"),
    # Forgetting b_K is right (the softmax ignores it); forgetting any of the other three is named.
    ("05-attention.md", "`b_K` adds the same amount to every score"): Named("attention", "b_Q is not added to q"),
    ("05-attention.md", "Heads merged into one vector before `W_O`"): Named(
        "attention", "the heads are merged in the wrong order"
    ),
    ("06-mlp.md", "Not ReLU, and not the exact (erf) GELU"): Named("gelu_new", "the exact (erf) GELU"),
    ("06-mlp.md", "The constant inside tanh"): Named("gelu_new", "the constant inside tanh is 2/pi"),
    ("06-mlp.md", "A tanh written from exponentials"): Named("gelu_new", "tanh overflows on large inputs"),
    ("06-mlp.md", "Both biases"): Named("mlp", "b_out is not added"),
    ("06-mlp.md", "`MLP.forward` should call your own `gelu_new`"): Right(
        "advice: an MLP that computes gelu_new another way is right, and passes"
    ),
    ("07-block.md", "Two residual connections"): Named("block", "the attention residual is missing"),
    ("07-block.md", "Two LayerNorms"): Named("block", "ln1 is used before the MLP too"),
    ("07-block.md", "The MLP reads `ln2(resid_mid)`"): Named("block", "the MLP reads ln2(resid_pre)"),
    ("07-block.md", "Normalise what the sublayers read"): Named("block", "LayerNorm comes after the residual add"),
    ("08-unembed.md", "Add `b_U`"): Named("unembed", "b_U is not added to the logits"),
    # A transposed W_U raises at its line; an output that loses an axis is a shape the comparison names.
    ("08-unembed.md", "Contract `d_model` and keep batch and position"): Said(COMPARE, "output shape"),
    ("09-transformer.md", "Add the positional embedding"): Named(
        "transformer", "the positional embedding is not added"
    ),
    ("09-transformer.md", "Loop over every block"): Named("transformer", "only one block is applied"),
    ("09-transformer.md", "Apply `ln_final` before the unembedding"): Named("transformer", "ln_final is not applied"),
    ("09-transformer.md", "Small differences"): Right("a description of the check's tolerance and its notes"),
    ("11-sampling.md", "Divide by the temperature"): Named("sampling.temperature", "multiplied by the temperature"),
    ("11-sampling.md", "Divide the logits, and return logits"): Named(
        "sampling.temperature", "the temperature changed nothing"
    ),
    ("11-sampling.md", "Count repeats"): Named("sampling.frequency_penalty", "penalised once, however often"),
    ("11-sampling.md", "Logits are not probabilities"): Named(
        "sampling.basic", "the logits were used as probabilities"
    ),
    ("11-sampling.md", "Top-k and top-p draw an *index among the kept tokens*"): Named(
        "sampling.top_p", "the index drawn among the kept tokens was returned"
    ),
    ("11-sampling.md", "Renormalise the kept tokens' probabilities"): Named("sampling.top_k", "not renormalised"),
    ("11-sampling.md", "Top-p keeps the token that takes the running sum past"): Named(
        "sampling.top_p", "the token that takes the cumulative probability past top_p was dropped"
    ),
    ("11-sampling.md", "In the loop, feed each new token back in"): Named(
        "sampling.generate", "end-of-text was left out of the text"
    ),
    ("12-beam-search.md", "Add **log**-probabilities"): Named("beam.generate", "logits were added up"),
    ("12-beam-search.md", "A banned token's log-probability becomes -inf"): Named(
        "beam.generate", "was banned in every beam"
    ),
    ("12-beam-search.md", "`filter` ranks every beam by its sum"): Named("beam.filter", "not sorted by log-prob sum"),
    ("12-beam-search.md", "Return `Beams` whose fields are tensors"): Said(SAMPLING_DRIVERS, "; return tensors"),
    ("13-kv-cache.md", "The new tokens' positions start at the cache's length"): Named(
        "kv_cache", "starts the new tokens' positions at 0"
    ),
    ("13-kv-cache.md", "The new queries see every cached key"): Named(
        "kv_cache", "CachedAttention.forward's mask ignores the cached keys"
    ),
    ("13-kv-cache.md", "In the sampler, `sample_next_token` still gets every id"): Named(
        "kv_cache", "passes sample_next_token only the tokens it feeds the model"
    ),
    ("13-kv-cache.md", "The check feeds a sequence in chunks"): Right("a description of the check's cases"),
    ("15-interp.md", "apply `ln_final` to every reading"): Named("interp.logit_lens", "ln_final is not applied"),
    ("15-interp.md", "the unembedding was never trained"): Named("interp.logit_lens", "ln_final is not applied"),
    ("15-interp.md", "the order of the factors"): Named("interp.ov_circuit", "the wrong order"),
    ("15-interp.md", "both biases belong in `b_folded`"): Named("interp.fold_layernorm", "forgets the linear map's"),
    ("15-interp.md", "the ReLU acts on the projection"): Named("interp.erase_direction", "the ReLU acts on x"),
    ("17-training-loop.md", "the shift, and its direction"): Named("training.next_token_loss", "shifted the wrong way"),
    ("17-training-loop.md", "the mean over every position and sequence"): Named(
        "training.next_token_loss", "the loss is summed"
    ),
    ("17-training-loop.md", "the sign"): Named("training.next_token_loss", "the sign is wrong"),
    ("17-training-loop.md", "clipping after the step"): Named("training.train_step", "unclipped gradients"),
    ("19-induction.md", "the logits at p predict the token at p + 1"): Named(
        "induction.per_token_loss", "each position is scored on its own token"
    ),
    # Scoring the last position too gives (batch, posn), a shape the comparison names.
    ("19-induction.md", "the last position predicts nothing you have"): Said(COMPARE, "output shape"),
    ("19-induction.md", "the main diagonal is a token attending to itself"): Named(
        "induction.previous_token_scores", "the main diagonal"
    ),
    ("19-induction.md", "offset -seq_len is the previous occurrence itself"): Named(
        "induction.induction_scores", "seq_len back is the previous occurrence itself"
    ),
    ("19-induction.md", "and the induction stripe also crosses two queries"): Named(
        "induction.induction_scores", "the whole stripe is averaged"
    ),
    ("19-induction.md", "the mean over the batch only"): Named("induction.ablate_head", "the mean is over d_head"),
    ("19-induction.md", "`per_token_loss[:, p]` is the loss of token p + 1"): Named(
        "induction.ablation_cost", "so take per_token_loss[:, seq_len:]"
    ),
    ("19-induction.md", "the scale forgotten, no centring"): Named(
        "induction.direct_logit_attribution", "ln_final's scale is forgotten"
    ),
    ("19-induction.md", "the transpose, and the normalisation"): Named("induction.k_composition", "not normalised"),
}


def test_every_trap_a_course_page_lists_is_placed_once():
    listed = page_traps()
    assert len(listed) == len(set(listed)) > 60
    begun = {key: [trap for trap in listed if trap[0] == key[0] and trap[1].startswith(key[1])] for key in COURSE_TRAPS}
    assert [key for key, traps in begun.items() if len(traps) != 1] == [], "a place that begins no trap, or several"
    placed = [trap for traps in begun.values() for trap in traps]
    assert sorted(set(listed) - set(placed)) == [], "a trap with no place in COURSE_TRAPS"
