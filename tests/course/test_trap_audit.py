"""The trap audit: every trap a solution's docstring states ("Trap:" or "Traps:", one clause per `;`) is placed
here, and each is a named mistake of its check (a hint the reference's cases carry), a mistake its check's message
names in words, or right code the grader rightly passes. A trap added, reworded or moved
without its place here fails the first test; a named mistake that its check stops naming fails the second."""

from __future__ import annotations

import ast
import re

import pytest
from repo import REPO, SOLUTIONS
from test_course_trap_audit import COURSE_TRAPS
from traps import Named, Right, Said, hints_of

VERDICT = "grader/host/verdict.py"
INDUCTION = "grader/checks/induction/repeated_tokens.py"
TRAPS = {
    ("attention.py", "apply_causal_mask", "keep the diagonal (a token may attend to itself)"): Named(
        "attention", "the mask hides the diagonal too"
    ),
    (
        "attention.py",
        "apply_causal_mask",
        "with an offset the mask is not square, so anchor it at the last key, not the first",
    ): Named("attention.causal_mask", "the mask ignores the cached positions"),
    ("attention.py", "apply_causal_mask", "build the mask on the scores' device"): Right(
        "on one device every mask is on the scores'; on another a mask elsewhere raises at its line"
    ),
    ("attention.py", "forward", "scale by sqrt(d_head), not d_head"): Named("attention", "divided by d_head"),
    ("attention.py", "forward", "mask before the softmax"): Named("attention", "applied after the softmax"),
    ("attention.py", "forward", "softmax over the key axis"): Named("attention", "over the query axis"),
    ("attention.py", "forward", "the heads are summed by W_O, then b_O is added once"): Named(
        "attention", "b_O is added once per head"
    ),
    ("attention.py", "forward", "heads merged before W_O go (n_heads d_head), the order of W_O's rows"): Named(
        "attention", "the heads are merged in the wrong order"
    ),
    ("block.py", "forward", "normalise what each sublayer reads, never the stream itself"): Named(
        "block", "LayerNorm comes after the residual add"
    ),
    ("block.py", "forward", "ln1 for attention, ln2 for the MLP"): Named("block", "ln1 is used before the MLP too"),
    ("block.py", "forward", "do not modify resid_pre in place (no +=)"): Said(VERDICT, "modified its input in place"),
    ("embedding.py", "forward", "this is an index, not a matrix product"): Right(
        "a one-hot matrix product gives the same rows, only slower"
    ),
    ("embedding.py", "forward", "no loop is needed"): Right("a loop gives the same rows, only slower"),
    ("embedding.py", "forward", "only the shape of tokens matters"): Named("pos_embed", "looked up by token id"),
    ("embedding.py", "forward", "indexing W_pos by the token ids is wrong"): Named(
        "pos_embed", "looked up by token id"
    ),
    (
        "induction.py",
        "repeated_tokens",
        "the same seed must give the same tokens: draw from a generator seeded with `seed`, not the global state",
    ): Said(INDUCTION, "the same seed gave other tokens"),
    ("induction.py", "per_token_loss", "position p predicts the token at p + 1, not its own token"): Named(
        "induction.per_token_loss", "each position is scored on its own token"
    ),
    ("induction.py", "previous_token_scores", "the main diagonal is a token attending to itself"): Named(
        "induction.previous_token_scores", "the main diagonal"
    ),
    ("induction.py", "previous_token_scores", "the previous token is one below it"): Named(
        "induction.previous_token_scores", "the main diagonal"
    ),
    (
        "induction.py",
        "induction_scores",
        "the stripe is seq_len - 1 below the diagonal (seq_len below is the previous occurrence itself), and only its "
        "last seq_len entries are queries of the repeated half",
    ): Named("induction.induction_scores", "seq_len back is the previous occurrence itself"),
    ("induction.py", "heads_above", "strictly above: a score equal to the threshold is not a head found"): Named(
        "induction.heads_above", "a score equal to the threshold is counted"
    ),
    ("induction.py", "ablate_head", "the mean is over the batch only, per position and per d_head component"): Named(
        "induction.ablate_head", "the mean is over the positions"
    ),
    (
        "induction.py",
        "ablation_cost",
        "per_token_loss[:, p] is the loss of token p + 1, so the repeated half (tokens seq_len + 1 to 2 * seq_len) is "
        "per_token_loss[:, seq_len:]",
    ): Named("induction.ablation_cost", "so take per_token_loss[:, seq_len:]"),
    (
        "induction.py",
        "direct_logit_attribution",
        "the scale is the whole stream's (ln_scale), not each head's own",
    ): Named("induction.direct_logit_attribution", "ln_final's scale is forgotten"),
    ("induction.py", "direct_logit_attribution", "each head's output is centred alone"): Named(
        "induction.direct_logit_attribution", "no centring"
    ),
    (
        "induction.py",
        "k_composition_score",
        "the earlier head writes into the key side, W_QK's columns, so W_QK is transposed",
    ): Named("induction.k_composition", "W_QK is not transposed"),
    ("induction.py", "k_composition_score", "then normalise"): Named("induction.k_composition", "not normalised"),
    ("interp.py", "parameter_counts", "b_U is a parameter too, even though it does not train (requires_grad=False)"): (
        Named("interp.parameter_counts", "b_U is not counted")
    ),
    ("interp.py", "logit_lens", "apply ln_final to each stream, with that stream's own mean and variance"): Named(
        "interp.logit_lens", "normalised with the last stream's mean and variance"
    ),
    ("interp.py", "qk_circuit", "rows index the query side"): Named("interp.qk_circuit", "the wrong order"),
    ("interp.py", "qk_circuit", "W_K W_Q^T is the transpose"): Named("interp.qk_circuit", "the transpose W_K W_Q^T"),
    ("interp.py", "ov_circuit", "one head only"): Named("interp.ov_circuit", "every head is summed"),
    ("interp.py", "ov_circuit", "the full attention output sums every head's"): Named(
        "interp.ov_circuit", "every head is summed"
    ),
    ("interp.py", "fold_layernorm", "ln.b passes through W too: b_folded = ln.b W + b"): Named(
        "interp.fold_layernorm", "b_folded forgets ln.b"
    ),
    ("interp.py", "direct_path_logits", "no positional embedding and no LayerNorm on this path"): Named(
        "interp.direct_path", "the positional embedding is added"
    ),
    ("interp.py", "is_tied", "compare every entry exactly"): Named("interp.is_tied", "compare every entry exactly"),
    ("interp.py", "is_tied", "equal shapes or norms are not enough"): Named(
        "interp.is_tied", "differs from W_E^T in one entry"
    ),
    ("interp.py", "erase_direction", "the ReLU acts on the projection v . x, not on x"): Named(
        "interp.erase_direction", "the ReLU acts on x"
    ),
    ("interp.py", "erase_direction", "a negative component stays"): Named("interp.erase_direction", "there is no ReLU"),
    (
        "kv_cache.py",
        "forward",
        "new query i sits at position past_posn + i and sees every key up to it: pass past_posn to apply_causal_mask "
        "(the mask of attention.py), which otherwise anchors the mask at the first key",
    ): Named("kv_cache", "CachedAttention.forward's mask ignores the cached keys"),
    (
        "kv_cache.py",
        "forward",
        "the new tokens' positions start at the cache's length, not at 0 (PosEmbed's past_kv_pos_offset)",
    ): Named("kv_cache", "starts the new tokens' positions at 0"),
    (
        "kv_cache.py",
        "sample",
        "sample_next_token still gets every id so far (the frequency penalty counts them)",
    ): Named("kv_cache", "passes sample_next_token only the tokens it feeds the model"),
    ("mlp.py", "gelu_new", "this is not the exact erf GELU"): Named("gelu_new", "the exact (erf) GELU"),
    ("mlp.py", "gelu_new", "the constants matter"): Named("gelu_new", "the constant inside tanh is 2/pi"),
    ("mlp.py", "forward", "both biases count"): Named("mlp", "b_in is not added"),
    ("mlp.py", "forward", "the nonlinearity is gelu_new, not ReLU"): Named("mlp", "the activation is ReLU"),
    ("normalization.py", "forward", "the variance divides by N, not N - 1"): Named(
        "layernorm", "the variance divides by N-1"
    ),
    ("normalization.py", "forward", "eps goes inside the square root"): Named(
        "layernorm", "eps is added outside the square root"
    ),
    ("sampling.py", "sample", "append each new token to the input of the next step"): Named(
        "sampling.generate", "the model saw the same input at every step"
    ),
    ("sampling.py", "sample", "stop right after end-of-text (tokenizer.eos_token_id), which stays in the text"): Named(
        "sampling.generate", "generation went on after end-of-text"
    ),
    (
        "sampling.py",
        "greedy_search",
        "greedy choices one at a time need not give the most likely sequence (see beam search)",
    ): Right("a fact about greedy search, which beam.search's beats_greedy case shows, not a slip in it"),
    ("sampling.py", "apply_temperature", "divide by the temperature"): Named(
        "sampling.temperature", "multiplied by the temperature"
    ),
    ("sampling.py", "apply_temperature", "multiplying does the opposite"): Named(
        "sampling.temperature", "multiplied by the temperature"
    ),
    ("sampling.py", "apply_frequency_penalty", "a token seen three times is penalised three times"): Named(
        "sampling.frequency_penalty", "penalised once, however often it occurs"
    ),
    (
        "sampling.py",
        "apply_frequency_penalty",
        "the counts need one entry per vocabulary id (torch.bincount's minlength)",
    ): Named("sampling.frequency_penalty", "the counts need one entry per vocabulary id"),
    ("sampling.py", "sample_basic", "logits are not probabilities"): Named(
        "sampling.basic", "the logits were used as probabilities"
    ),
    ("sampling.py", "sample_basic", "Categorical(logits=...) applies the softmax for you"): Named(
        "sampling.basic", "the softmax was applied twice"
    ),
    ("sampling.py", "sample_top_k", "map the index drawn among the k back to its vocabulary id"): Named(
        "sampling.top_k", "the index drawn among the kept tokens was returned"
    ),
    ("sampling.py", "sample_top_p", "keep the token that takes the sum past top_p"): Named(
        "sampling.top_p", "the token that takes the cumulative probability past top_p was dropped"
    ),
    ("sampling.py", "sample_top_p", "then apply min_tokens_to_keep"): Named(
        "sampling.top_p", "fewer than min_tokens_to_keep"
    ),
    (
        "sampling.py",
        "banned_next_tokens",
        "compare the beam's last n - 1 tokens with the first n - 1 of every earlier n-gram",
    ): Named("beam.generate", "banned the next token of every beam's n-gram"),
    ("sampling.py", "generate", "add log-probabilities (log_softmax), not logits or probabilities"): Named(
        "beam.generate", "logits were added up"
    ),
    ("sampling.py", "generate", "with no_repeat_ngram_size set, a banned token's log-prob is -inf before the top k"): (
        Named("beam.generate", "a beam repeats an n-gram")
    ),
    ("sampling.py", "filter", "rank all beams before splitting"): Named("beam.filter", "were ranked apart"),
    (
        "sampling.py",
        "filter",
        "a beam has finished when its last token is end-of-text, and the finished ones are returned, not dropped",
    ): Named("beam.filter", "finished beams (ending in end-of-text) were dropped"),
    (
        "training.py",
        "next_token_loss",
        "the logits at position t predict token t + 1, so drop the last logits and the first token",
    ): Named("training.next_token_loss", "no shift"),
    ("training.py", "make_optimizer", "b_Q, b_K and b_V are 2-D and W_E is a matrix: decide by name, not by p.ndim"): (
        Named("training.make_optimizer", "decay chosen by p.ndim >= 2")
    ),
    ("training.py", "lr_at", "step 0 must already train: the warm-up gives max_lr * (step + 1) / warmup"): Named(
        "training.lr_at", "the warm-up is off by one"
    ),
    ("training.py", "train_step", "clip after backward and before the step"): Named(
        "training.train_step", "unclipped gradients"
    ),
    ("training.py", "train_step", "without zero_grad the gradients accumulate"): Named(
        "training.train_step", "zero_grad is missing"
    ),
    ("training.py", "evaluate", "model.eval() and inference_mode are both needed"): Named(
        "training.evaluate", "model.eval() and torch.inference_mode() are both missing"
    ),
    ("training.py", "evaluate", "the accuracy is shifted like the loss"): Named(
        "training.evaluate", "the accuracy is not shifted"
    ),
    ("training.py", "fit", "set the learning rate of every parameter group, not only the first"): Named(
        "training.trainer", "only the first parameter group follows lr_at"
    ),
    ("transformer.py", "forward", "add the positional embedding"): Named(
        "transformer", "the positional embedding is not added"
    ),
    ("transformer.py", "forward", "apply the final LayerNorm before the unembedding"): Named(
        "transformer", "ln_final is not applied"
    ),
    (
        "unembedding.py",
        "forward",
        "GPT-2's b_U is all zeros, but add it anyway: the grader also tries other values",
    ): Named("unembed", "b_U is not added"),
    (
        "positions.py",
        "__init__",
        "the two widths must add up to d_model: a PosEmbed built at cfg.d_model makes the stream d_token + d_model "
        "wide",
    ): Named("concat.residual", "d_token + d_model wide"),
    (
        "positions.py",
        "residual",
        "the position half is looked up by position, never by token id (self.pos_embed reads only the shape of tokens)",
    ): Named("concat.residual", "looked up by token id"),
    (
        "positions.py",
        "residual",
        "the token half comes first and the position half after it, the order the weights are read in",
    ): Named("concat.residual", "halves are in the other order"),
    ("skip_trigrams.py", "full_ov_circuit", "rows index the source token, columns the output, so do not transpose"): (
        Named("skip_trigram.full_ov", "the full OV circuit is transposed")
    ),
    (
        "skip_trigrams.py",
        "full_ov_circuit",
        "the unembedding is W_U, not W_E^T (this model's embedding and unembedding are untied)",
    ): Named("skip_trigram.full_ov", "W_E^T is used as the unembedding"),
    ("skip_trigrams.py", "full_ov_circuit", "one head only, not every head summed"): Named(
        "skip_trigram.full_ov", "every head is summed"
    ),
    (
        "skip_trigrams.py",
        "full_qk_circuit",
        "rows index the destination, the query side, so W_E qk W_E^T and not its transpose",
    ): Named("skip_trigram.full_qk", "the full QK circuit is transposed"),
    ("skip_trigrams.py", "full_qk_circuit", "no 1/sqrt(d_head) here: that scale belongs to the softmax"): Named(
        "skip_trigram.full_qk", "scaled here by 1/sqrt(d_head)"
    ),
    (
        "skip_trigrams.py",
        "attention_to_sources",
        "the softmax is over the sources, the last axis, so each destination's row sums to 1",
    ): Named("skip_trigram.attention", "the softmax is over the destinations"),
    ("skip_trigrams.py", "attention_to_sources", "divide the scores by sqrt(d_head) first, as the attention does"): (
        Named("skip_trigram.attention", "not divided by sqrt(d_head)")
    ),
    ("skip_trigrams.py", "skip_trigram_table", "centre each source's OV row"): Named(
        "skip_trigram.table", "OV is not centred"
    ),
    (
        "skip_trigrams.py",
        "skip_trigram_table",
        "take the mean over all d_vocab outputs, before taking the candidates",
    ): Named("skip_trigram.table", "centred over the candidates only"),
    ("skip_trigrams.py", "skip_trigram_table", "a source is never its own destination"): Named(
        "skip_trigram.table", "a source is its own destination"
    ),
    (
        "skip_trigrams.py",
        "skip_trigram_table",
        "a source's destinations are read down its column of attention (what each destination pays it), not along its "
        "row",
    ): Named("skip_trigram.table", "read along the source's row"),
    ("skip_trigrams.py", "count_skip_trigrams", "s is strictly before d, never at d's own position nor after it"): (
        Named("skip_trigram.counts", "s at d's own position is counted")
    ),
    (
        "skip_trigrams.py",
        "count_skip_trigrams",
        "d sees n_ctx tokens, itself included, so s is at most n_ctx - 1 back",
    ): Named("skip_trigram.counts", "looked for n_ctx back"),
    (
        "skip_trigrams.py",
        "count_skip_trigrams",
        "each window is a text of its own, so nothing crosses from one window into the next",
    ): Named("skip_trigram.counts", "the windows are joined into one stream"),
    (
        "skip_trigrams.py",
        "count_skip_trigrams",
        "count positions, not (s, position) pairs: two s before one d count once",
    ): Named("skip_trigram.counts", "(s, position) pairs are counted"),
    ("skip_trigrams.py", "skip_trigram_bugs", "not real means fewer than min_real, not zero"): Named(
        "skip_trigram.bugs", "not real only when its count is 0"
    ),
    (
        "skip_trigrams.py",
        "skip_trigram_bugs",
        "a bug needs both witnesses, a real trigram in its row and one in its column",
    ): Named("skip_trigram.bugs", "one witness is enough here"),
}


def stated_traps() -> list[tuple[str, str, str]]:
    """(file, function or class, clause) for every clause of every Trap(s) line of the solutions' docstrings."""
    found = []
    for path in sorted(SOLUTIONS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            docstring = ast.get_docstring(node) if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else None
            for paragraph in (docstring or "").split("\n\n"):
                stated = re.search(r"^Traps?: (.*)", paragraph, re.S | re.M)
                if stated:
                    clauses = " ".join(stated.group(1).split()).split("; ")
                    found += [(path.name, node.name, clause.rstrip(".")) for clause in clauses]
    return found


def test_every_trap_a_docstring_states_is_placed_once():
    stated = stated_traps()
    assert len(stated) == len(set(stated)) > 50
    assert sorted(set(stated) - set(TRAPS)) == [], "a trap with no place in TRAPS"
    assert sorted(set(TRAPS) - set(stated)) == [], "a place in TRAPS for a trap no docstring states"


PLACES = TRAPS | COURSE_TRAPS  # the solutions' traps, then the course pages'


@pytest.mark.parametrize("trap", [trap for trap, place in PLACES.items() if isinstance(place, Named)], ids=str)
def test_a_named_trap_is_among_its_checks_named_mistakes(reference, trap):
    place = PLACES[trap]
    assert any(place.fragment in hint for hint in hints_of(reference, place.check)), (
        place,
        hints_of(reference, place.check),
    )


def test_a_trap_said_in_words_is_in_its_source():
    said = [place for place in PLACES.values() if isinstance(place, Said)]
    assert said and all(place.fragment in (REPO / place.source).read_text() for place in said)
