"""Part 3: looking inside, one module per check: parameter counts, the logit lens, the QK and OV circuits, folding
LayerNorm, the direct path, tied embeddings, erasing a direction. The learner's interpretability functions, run on the
learner's own modules loaded with GPT-2's weights (see `grader/learner/drivers/interp.py`).

The logit lens and the QK and OV circuits are compared with transformer_lens's own
(`accumulated_resid(apply_ln=True)`, `FactoredMatrix`); the parameter counts with the reference's
state_dict; the direct path with GPT-2's embed and unembed modules; the folding, the tie test and
the erasing neuron with their exact formulas. Each case names what the classic mistakes output.

Each module declares its `CHECK` and its `PAGE` of docs/course/; `ORDER` places those that share a page (all of them
share 15-interp.md); `_common` holds what more than one of them uses.
"""

ORDER: tuple[str, ...] = (
    "parameter_counts",
    "logit_lens",
    "qk_circuit",
    "ov_circuit",
    "fold_layernorm",
    "direct_path",
    "is_tied",
    "erase_direction",
)
