"""Part 4: training, one module per check, against answers from first principles (`_oracle`): the cross-entropy written
out, the parameter groups, the schedule, SGD steps by hand, the unigram bar the trained model must clear.

Each module declares its `CHECK` and its `PAGE` of docs/course/; `ORDER` places those that share a page.
"""

ORDER: tuple[str, ...] = ()
