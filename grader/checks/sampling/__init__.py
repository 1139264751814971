"""Part 2: sampling, beam search and the KV cache, one module per check, each on a stand-in model or fixed logits
(never GPT-2's weights), so their answers come from first principles. `_compare` holds the comparisons (in NumPy, in
the grader's process), `_oracle` what a right or a known wrong sampler gives, `_beam_search` the exact beams.

Each module declares its `CHECK` and its `PAGE` of docs/course/; `ORDER` places those that share a page.
"""

ORDER: tuple[str, ...] = ()
