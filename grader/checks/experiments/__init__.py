"""Part 6: the course notes' two open questions as experiments, one module per check.

Positions concatenated rather than added (`concat.*`): the learner's ConcatTransformer, whose residual stream starts
as [token embedding | position embedding], on a small model's weights, against transformer_lens running the same
model with each embedding padded with zeros to d_model (a concatenation is a sum of two zero-padded halves).

Skip-trigrams and their bugs (`skip_trigram.*`): on the one-layer attention-only model shipped in
grader/builder/data/attn-only-1l.safetensors (grader/builder/attn_only_model.py), each head's full QK and OV circuits
over the vocabulary, its strongest skip-trigrams, how often the training text holds them, and the bugs the
factoring forces.

Each module declares its `CHECK` and its `PAGE` of docs/course/; `ORDER` places those that share a page.
"""

ORDER: tuple[str, ...] = (
    "concat_residual",
    "concat_transformer",
    "skip_trigram_full_ov",
    "skip_trigram_full_qk",
    "skip_trigram_attention",
    "skip_trigram_table",
    "skip_trigram_counts",
    "skip_trigram_bugs",
)
