"""Part 3: looking inside, one module per check: parameter counts, the logit lens, the QK and OV circuits, folding
LayerNorm, the direct path, tied embeddings, erasing a direction.

Each module declares its `CHECK` and its `PAGE` of docs/course/; `ORDER` places those that share a page.
"""

ORDER: tuple[str, ...] = ()
