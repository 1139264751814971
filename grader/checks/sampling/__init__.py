"""Part 2: sampling, beam search and the bonus KV cache, one module per check.

The learner's sampler and beams run on the grader's stand-ins (`grader/learner/drivers/stand_ins.py`: a model read
from a table, a character tokenizer), so a broken Transformer cannot fail these checks, and every expected answer
is computed from first principles: an argmax, a division, a count, the softmax of a few logits, a walk through the
table (`_oracle`), each beam candidate enumerated, its log-probability summed from the table model, the best kept
(`_beam_search`). The comparisons run in the grader's process (`_compare`, which also says how draws are judged
without flakiness; the beams' in `_beams`). The KV cache (`kv_cache`) is the one check of the part compared with
GPT-2 itself.

Known mistakes, as in every part: each case lists what each classic mistake outputs on it (only the mistakes that
answer there, and differently from the right answer), and an output that fails is named by the mistake it fits, as
the check's own comparison judges (`grader.host.verdict.diagnose`).

Each module declares its `CHECK` and its `PAGE` of docs/course/; `ORDER` places those that share a page. `_common`
holds what more than one check uses, `_beams` what more than one beam check uses.
"""

ORDER: tuple[str, ...] = (
    *("greedy", "temperature", "frequency_penalty", "basic", "top_k", "top_p", "sampling_generate"),
    *("beam_generate", "filter", "search"),
    "kv_cache",
)
