"""The one-layer attention-only model of grader/builder/attn_only_model.py, re-trained (slow: about 150 s of one CPU
core a training). With the shipped seeds it is the shipped file, byte for byte, and its tables hold the designed
skip-trigram bugs; with other seeds the planted families and their designed bugs come back. Which head holds what,
and the corpus's own skip-trigrams, differ from one training to the next: no test asserts on either.

The tables, counts and bugs are Part 6's definitions (grader/checks/experiments/_skip_trigrams.py), on all four heads.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from repo import REPO

from grader.builder import attn_only_model, corpus
from grader.checks.experiments import _skip_trigrams as definitions

# Each planted family's two real trigrams' witnesses hold it about 20,000 times in the training windows.
WITNESSED = 10_000
# The most a designed bug may occur in the training windows: the planted windows' own text holds a few by chance
# (the shipped model's ' server ... for -> request' 3 times, ' string ... from -> zero' 5 times).
BY_CHANCE = 10


@dataclass
class Findings:
    """What a model's tables hold, head-agnostic: heads are not identifiable across trainings."""

    sources: set[int]  # every head's table's sources
    counts: dict[tuple[int, int, int], int]  # every table trigram's count in the training windows
    bugs: set[tuple[int, int, int]]  # every head's bugs
    both_in_one_head: list[tuple[int, ...]]  # the families whose two real trigrams share a head's table


def findings(weights: Path, training: attn_only_model.Training) -> Findings:
    from grader.builder.interface import Reference

    model = Reference(attn_only_model.load(weights), "attn-only-1l", bos=0)  # no sequence is begun: bos unused
    windows = attn_only_model.training_batches(training).flatten(0, 1)
    candidates = definitions.candidates(attn_only_model.token_texts())
    sources, counts, bugs, per_head = set(), {}, set(), []
    for head in range(model.n_heads):
        circuits = definitions.full_circuits(model, head)
        attention = definitions.attention_to_sources(circuits["qk"], model.model.cfg.d_head)
        table = definitions.skip_trigram_table(
            attention, circuits["ov"], candidates, definitions.N_SOURCES, definitions.K
        )
        triples = definitions.triples_of(table)
        counted = definitions.count_skip_trigrams(windows, triples, model.n_ctx)
        found = definitions.skip_trigram_bugs(
            counted.reshape(-1, definitions.K, definitions.K), definitions.MIN_REAL
        ).flatten()
        trigrams = [tuple(triple) for triple in triples.tolist()]
        sources |= set(table[0].tolist())
        counts |= dict(zip(trigrams, counted.tolist(), strict=True))
        bugs |= {trigram for trigram, bug in zip(trigrams, found.tolist(), strict=True) if bug}
        per_head.append(set(trigrams))
    families = [tuple(family) for family in attn_only_model.family_ids().tolist()]
    both = [
        (s, d1, o1, d2, o2)
        for s, d1, o1, d2, o2 in families
        if any({(s, d1, o1), (s, d2, o2)} <= held for held in per_head)
    ]
    return Findings(sources, counts, bugs, both)


def designed_bugs(family: tuple[int, ...]) -> list[tuple[int, int, int]]:
    s, d1, o1, d2, o2 = family
    return [(s, d1, o2), (s, d2, o1)]


def retrained(out: Path, model_seed: int, data_seed: int) -> Path:
    weights = out / "attn-only-1l.safetensors"
    seeds = ["--model-seed", str(model_seed), "--data-seed", str(data_seed)]
    command = [sys.executable, "-m", "grader.builder.attn_only_model", "--out", str(weights), *seeds]
    ran = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return weights


@pytest.fixture(scope="module")
def shipped() -> Findings:
    return findings(attn_only_model.SHIPPED, attn_only_model.Training())


@pytest.mark.slow
def test_the_shipped_tables_hold_six_designed_bugs(shipped):
    """Three families share a head with both their trigrams, so all six crossed trigrams are bugs; ' socket' is split
    over two heads, which forces none of its own."""
    families = [tuple(family) for family in attn_only_model.family_ids().tolist()]
    assert shipped.both_in_one_head == families[1:]
    assert {bug for family in families for bug in designed_bugs(family)} & shipped.bugs == {
        bug for family in families[1:] for bug in designed_bugs(family)
    }


@pytest.mark.slow
def test_retraining_with_the_shipped_seeds_gives_the_shipped_file(tmp_path, shipped):
    training = attn_only_model.Training()
    weights = retrained(tmp_path, training.model_seed, training.data_seed)
    recorded = json.loads(attn_only_model.facts_path(attn_only_model.SHIPPED).read_text())["weights_sha256"]
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == recorded
    assert hashlib.sha256(attn_only_model.SHIPPED.read_bytes()).hexdigest() == recorded
    again = findings(weights, training)
    assert (again.bugs, again.both_in_one_head) == (shipped.bugs, shipped.both_in_one_head)


@pytest.mark.slow
def test_other_seeds_find_the_planted_families_and_their_designed_bugs_again(tmp_path, shipped):
    training = attn_only_model.Training(model_seed=1, data_seed=2)
    found = findings(retrained(tmp_path, training.model_seed, training.data_seed), training)
    families = [tuple(family) for family in attn_only_model.family_ids().tolist()]
    assert len(found.both_in_one_head) >= 3, found.both_in_one_head
    designed = [bug for family in families for bug in designed_bugs(family) if bug in found.bugs]
    assert len(designed) >= 4, designed
    stream = corpus.load().capped(attn_only_model.D_VOCAB).train[None]
    in_corpus = definitions.count_skip_trigrams(stream, torch.tensor(designed), attn_only_model.SHAPE["n_ctx"])
    assert in_corpus.tolist() == [0] * len(designed)  # the corpus alone has none: only the factoring raises them
    for family in families:
        s, d1, o1, d2, o2 = family
        for bug in designed_bugs(family):
            if bug in designed:
                assert found.counts[bug] <= BY_CHANCE, (bug, found.counts[bug])
                assert min(found.counts.get((s, d1, o1), 0), found.counts.get((s, d2, o2), 0)) >= WITNESSED
    assert len(found.sources & shipped.sources) >= len(shipped.sources) / 2
