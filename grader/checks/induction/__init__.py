"""Part 5: induction heads, one module per check, on the small trained model (and on GPT-2's heads with the real
reference). `_models` holds the models and their [BOS, A, A] batch, `_circuits` the cases that take a head apart.

Each module declares its `CHECK` and its `PAGE` of docs/course/; `ORDER` places those that share a page.
"""

ORDER: tuple[str, ...] = ()
