"""Part 1: the model, one module per check. Each module is fed GPT-2's own input activation and compared with
its output.

One mistake costs one module: the block is also given GPT-2's own sublayer outputs (replayed into the learner's
ln1, attn, ln2 and mlp when they are called with GPT-2's inputs, see `grader.learner.drivers.replay`), so it grades the
block's wiring alone, and the whole model is the one check that integrates every module.

Beside those, each check has a few stress inputs that real bugs need and GPT-2's activations on a short prompt
never reach: exact zeros and ties, magnitudes beyond GPT-2's largest, hundreds of positions, BOS alone (one
position, batch 1). Each says why in a comment, and the ones aimed at one mistake carry a hint and that mistake's
output.

Each case also carries GPT-2's intermediates (`steps`, to find where a learner's computation
first leaves GPT-2's) and what the classic mistakes output (`mistakes`, to name the one a learner
most likely made). The case functions run only when the reference cache is built, so torch is
imported inside them: grading itself compares NumPy arrays and never imports torch.

Each module declares its `CHECK` and its `PAGE` of docs/course/, which place it in the course; `_common` holds what
more than one of them uses.
"""
