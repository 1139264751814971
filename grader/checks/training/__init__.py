"""Part 4: training, one module per check, against answers from first principles (`_oracle`): the cross-entropy written
out, the parameter groups from the parameters' names, the schedule's formula, SGD steps taken by hand on the stand-in
`TinyLM` (grader/learner/drivers/tiny_lm.py) from the same seed. The learner's loss, optimiser, schedule, step and
evaluation, then the learner's own loop training a tiny Transformer on the standard library's documentation, offline:
that outcome check asks for a held-out loss, computed by the grader, below what the corpus's unigram frequencies give.

Each module declares its `CHECK` and its `PAGE` of docs/course/; `ORDER` places those that share a page. `_common`
holds what more than one of them uses.
"""

ORDER: tuple[str, ...] = ("next_token_loss", "make_optimizer", "lr_at", "train_step", "evaluate", "trainer")
