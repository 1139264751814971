"""Part 5: induction heads, one module per check. The learner's functions take tensors (attention patterns,
activations, weights), and the cases hand them those of the small trained model with induction heads
(grader/builder/induction_model.py: previous-token head 0.1, induction heads 1.0-1.3), always, offline too; and GPT-2
small's own (induction heads 5.1, 5.5, 6.9, 7.2, 7.10, previous-token head 4.11) when the reference is GPT-2: on the
random reference all heads look alike, so those cases are left out and each check's notes say so.

The expected answers come from transformer_lens (run_with_cache's patterns and hook_z, run_with_hooks,
`apply_ln_to_stack`, `all_composition_scores("K")`) through the reference, or from a plain formula written here (for
the checks that take a head apart, in `_circuits`). Every model's input is a batch of [BOS, A, A] tokens, A of SEQ_LEN
random tokens (`repeated_batch`, in `_models`). The cases are named by model ("small." on the small model, "gpt2." on
GPT-2); each module's docstring says what its cases' expected tensors hold.

Each module declares its `CHECK` and its `PAGE` of docs/course/; `ORDER` places those that share a page. `_models`
holds the models and their [BOS, A, A] batch, `_circuits` the cases that take a head apart, `_common` what more than
one check uses.
"""

ORDER: tuple[str, ...] = (
    "repeated_tokens",
    "per_token_loss",
    "previous_token_scores",
    "induction_scores",
    "heads_above",
    "ablate_head",
    "ablation_cost",
    "direct_logit_attribution",
    "k_composition",
)
