"""Part 6: skip-trigrams and their bugs (skip_trigrams.py), on the one-layer attention-only model.

The solutions pass, the stubs are todo, each trap a docstring states, written into the solution, fails at its own
check with its own hint, the same functions written another way pass, the hand-made cases hold the edge cases they
are built for, and the solutions find the bugs designed into the shipped model: each planted family's two crossed
trigrams, which no training window holds, beside its two real ones.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from repo import REPO, SOLUTIONS, by_id, stubs, tiered, write_variant

from grader.checks.experiments import _skip_trigrams as definitions
from grader.checks.experiments.skip_trigram_counts import HAND_MADE_TRIPLES, HAND_MADE_WINDOWS
from grader.checks.experiments.skip_trigram_table import HAND_MADE_SEED

SKIP_TRIGRAM_CHECKS = (
    "skip_trigram.full_ov",
    "skip_trigram.full_qk",
    "skip_trigram.attention",
    "skip_trigram.table",
    "skip_trigram.counts",
    "skip_trigram.bugs",
)
OV_AXES = '"d_vocab_src d_model_in, d_model_in d_model_out, d_model_out d_vocab_out -> d_vocab_src d_vocab_out"'
QK_AXES = '"d_vocab_dst d_model_Q, d_model_Q d_model_K, d_vocab_src d_model_K -> d_vocab_dst d_vocab_src"'
SCALED = "(full_qk / d_head**0.5).softmax(dim=-1)"
CENTRED = "centred_ov = full_ov - full_ov.mean(dim=-1, keepdim=True)"
OWN = '    paid = paid.fill_diagonal_(float("-inf"))  # a source is not its own destination\n'
BACK = "back = torch.arange(1, n_ctx, device=windows.device)"
SEEN = "seen = s_there & (before >= 0)"
LOOP = "    counts = []\n    for s, d, o in triples.tolist():\n"
BUGS = "return ~real & in_its_row & in_its_column"
# mistake: (check, edits of skip_trigrams.py, what the hint must say)
MISTAKES = {
    "OV transposed": (
        "skip_trigram.full_ov",
        [(OV_AXES, OV_AXES.replace("-> d_vocab_src d_vocab_out", "-> d_vocab_out d_vocab_src"))],
        "the full OV circuit is transposed",
    ),
    "W_E^T as the unembedding": ("skip_trigram.full_ov", [("        W_U,\n", "        W_E.T,\n")], "W_E^T is used"),
    "every head": (
        "skip_trigram.full_ov",
        [("ov = ov_circuit(attn, head)", "ov = sum(ov_circuit(attn, h) for h in range(attn.cfg.n_heads))")],
        "every head is summed",
    ),
    "QK transposed": (
        "skip_trigram.full_qk",
        [(QK_AXES, QK_AXES.replace("-> d_vocab_dst d_vocab_src", "-> d_vocab_src d_vocab_dst"))],
        "the full QK circuit is transposed",
    ),
    "QK scaled": (
        "skip_trigram.full_qk",
        [("qk = qk_circuit(attn, head)", "qk = qk_circuit(attn, head) / attn.cfg.d_head**0.5")],
        "scaled here by 1/sqrt(d_head)",
    ),
    "softmax over destinations": (
        "skip_trigram.attention",
        [(SCALED, SCALED.replace("dim=-1", "dim=0"))],
        "the softmax is over the destinations",
    ),
    "no scale": ("skip_trigram.attention", [(SCALED, "full_qk.softmax(dim=-1)")], "not divided by sqrt(d_head)"),
    "OV not centred": ("skip_trigram.table", [(CENTRED, "centred_ov = full_ov")], "OV is not centred"),
    "OV centred over the candidates": (
        "skip_trigram.table",
        [(CENTRED, CENTRED.replace("full_ov.mean(", "full_ov[:, candidates].mean("))],
        "centred over the candidates only",
    ),
    "own destination": ("skip_trigram.table", [(OWN, "")], "a source is its own destination"),
    "along the row": (
        "skip_trigram.table",
        [('"dst src -> src dst"', '"dst src -> dst src"')],
        "read along the source's row",
    ),
    "s at d": ("skip_trigram.counts", [(BACK, BACK.replace("(1, n_ctx,", "(0, n_ctx,"))], "s at d's own position"),
    "s after d": ("skip_trigram.counts", [(SEEN, "seen = windows[rows] == s")], "s after d is counted"),
    "n_ctx back": ("skip_trigram.counts", [(BACK, BACK.replace("n_ctx,", "n_ctx + 1,"))], "looked for n_ctx back"),
    "windows joined": (
        "skip_trigram.counts",
        [(LOOP, "    windows = windows.reshape(1, -1)\n" + LOOP)],
        "the windows are joined into one stream",
    ),
    "pairs": (
        "skip_trigram.counts",
        [("counts.append(int(seen.any(dim=-1).sum()))", "counts.append(int(seen.sum()))")],
        "(s, position) pairs are counted",
    ),
    "zero is not real": (
        "skip_trigram.bugs",
        [(BUGS, "return (counts == 0) & in_its_row & in_its_column")],
        "not real only when its count is 0",
    ),
    "one witness": (
        "skip_trigram.bugs",
        [(BUGS, "return ~real & (in_its_row | in_its_column)")],
        "one witness is enough here",
    ),
}
# Three of them in `make test`, each grading one check; `make test-all` grades them all.
QUICK = ["OV transposed", "own destination", "windows joined"]
# The same functions written another way, each of which must pass: @ and .T instead of einsum (another order of the
# products), the softmax by hand, a table by a loop over the candidates with Python's stable sort, a counter looping
# over the positions found, the bugs from amax.
OTHER_STYLE = [
    ("    ov = ov_circuit(attn, head)\n", "    ov = ov_circuit(attn, head)\n    return W_E @ (ov @ W_U)\n"),
    ("    qk = qk_circuit(attn, head)\n", "    qk = qk_circuit(attn, head)\n    return (W_E @ qk) @ W_E.T\n"),
    (
        f"    return {SCALED}\n",
        "    scores = full_qk / d_head**0.5\n"
        "    weights = (scores - scores.max(dim=-1, keepdim=True).values).exp()\n"
        "    return weights / weights.sum(dim=-1, keepdim=True)\n",
    ),
    (
        f"    {CENTRED}\n",
        "    ov = full_ov - full_ov.mean(dim=-1, keepdim=True)\n"
        "    found = []\n"
        "    for i, s in enumerate(candidates.tolist()):\n"
        "        paid = attention[candidates, s].clone()\n"
        '        paid[i] = float("-inf")\n'
        "        dests = torch.argsort(paid, descending=True, stable=True)[:k]\n"
        "        raised = ov[s, candidates]\n"
        "        outs = torch.argsort(raised, descending=True, stable=True)[:k]\n"
        "        found.append((float(paid[dests[0]] * raised[outs[0]]), i, dests, outs, torch.outer(paid[dests], "
        "raised[outs])))\n"
        "    found = sorted(found, key=lambda entry: -entry[0])[:n_sources]\n"
        "    return (\n"
        "        candidates[[entry[1] for entry in found]],\n"
        "        torch.stack([candidates[entry[2]] for entry in found]),\n"
        "        torch.stack([candidates[entry[3]] for entry in found]),\n"
        "        torch.stack([entry[4] for entry in found]),\n"
        "    )\n"
        f"    {CENTRED}\n",
    ),
    (
        LOOP,
        "    counted = torch.zeros(len(triples), dtype=torch.int64)\n"
        "    for t, (s, d, o) in enumerate(triples.tolist()):\n"
        "        for b, p in ((windows[:, :-1] == d) & (windows[:, 1:] == o)).nonzero().tolist():\n"
        "            if s in windows[b, max(0, p - n_ctx + 1) : p].tolist():\n"
        "                counted[t] += 1\n"
        "    return counted\n" + LOOP,
    ),
    (
        "    real = counts >= min_real\n",
        "    real = (counts >= min_real).int()\n"
        "    return (real == 0) & (real.amax(dim=-1, keepdim=True) > 0) & (real.amax(dim=-2, keepdim=True) > 0)\n",
    ),
]


def test_solutions_pass_every_skip_trigram_check(grade):
    report = grade(SOLUTIONS, "skip_trigram")
    assert [c.id for c in report.checks] == list(SKIP_TRIGRAM_CHECKS)
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(SKIP_TRIGRAM_CHECKS, "pass"), [
        c.message for c in report.checks
    ]


def test_stubs_are_todo(grade):
    report = grade(stubs(), "skip_trigram")
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(SKIP_TRIGRAM_CHECKS, "todo")


@pytest.mark.parametrize("mistake", tiered(MISTAKES, QUICK))
def test_mistake_fails_at_its_check_with_its_hint(grade, tmp_path, mistake):
    check_id, edits, said = MISTAKES[mistake]
    result = by_id(grade(write_variant(tmp_path, {"skip_trigrams.py": edits}), check_id))[check_id]
    assert result.status == "fail", result.message
    assert said in (result.hint or "") + result.message, (result.message, result.hint)


def test_another_style_passes(grade, tmp_path):
    report = grade(write_variant(tmp_path, {"skip_trigrams.py": OTHER_STYLE}), "skip_trigram")
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(SKIP_TRIGRAM_CHECKS, "pass"), [
        c.message for c in report.checks
    ]


# --- the hand-made cases hold what they are built for ---------------------------------------------------------


def test_the_hand_made_tables_ties_decide_its_sources_destinations_and_outputs():
    """Ranked with ties to the higher id (the candidates given in descending order), every part of it changes."""
    drawn = torch.Generator().manual_seed(HAND_MADE_SEED)
    attention = torch.randint(0, 5, (8, 8), generator=drawn) / 8
    full_ov = torch.randint(-4, 5, (8, 8), generator=drawn).float()
    among = torch.tensor([0, 1, 2, 3, 5, 6, 7])
    right = definitions.skip_trigram_table(attention, full_ov, among, 3, 2)
    higher_first = definitions.skip_trigram_table(attention, full_ov, among.flip(0), 3, 2)
    assert all(not torch.equal(mine, other) for mine, other in zip(right[:3], higher_first[:3], strict=True))


def test_the_hand_made_windows_tell_each_counting_slip_apart():
    windows, triples = torch.tensor(HAND_MADE_WINDOWS), torch.tensor(HAND_MADE_TRIPLES)
    assert definitions.count_skip_trigrams(windows, triples, 5).tolist() == [3, 0, 0, 1]
    slips = [
        definitions.counted(windows, triples, range(0, 5)),  # s at d's own position
        definitions.counted(windows, triples, range(1, 6)),  # n_ctx back
        definitions.count_skip_trigrams(windows.reshape(1, -1), triples, 5),  # windows joined
        definitions.counted(windows, triples, range(1, 5), per_position=False),  # pairs
        definitions.counted(windows, triples, range(-11, 12)),  # anywhere in the window
    ]
    assert len({tuple(counts.tolist()) for counts in slips}) == len(slips)
    assert all(counts[-1] == 1 for counts in slips)  # the control: every slip counts (1, 6, 4) alike


# --- what the solutions find on the shipped model --------------------------------------------------------------

DESIGNED = {  # head: (source, real trigrams' (destination, output), the bugs they force), as texts
    1: (" string", [(" from", " left"), (" with", " zero")], [(" from", " zero"), (" with", " left")]),
    3: (" server", [(" by", " request"), (" for", " response")], [(" by", " response"), (" for", " request")]),
}
DESIGNED_KEY = (" key", [(" as", " tuple"), (" on", " mapping")], [(" as", " mapping"), (" on", " tuple")])


@pytest.fixture(scope="module")
def solved():
    """The solutions' tables of the shipped model's heads 1 and 3, and the bugs they find in each family source's
    grid, counted in the training windows that hold the source (no other window can hold its trigrams)."""
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.syspath_prepend(str(REPO))
    from safetensors.torch import load_file

    from grader.builder import attn_only_model
    from solutions import skip_trigrams
    from solutions.attention import Attention
    from solutions.config import Config

    weights = load_file(str(attn_only_model.SHIPPED))  # read as they are: no transformer_lens to import
    texts = attn_only_model.token_texts()
    windows = attn_only_model.training_batches(attn_only_model.Training()).flatten(0, 1)
    shape = {**attn_only_model.SHAPE, "d_vocab": attn_only_model.D_VOCAB}
    attn = Attention(dataclasses.replace(Config(), **shape))
    prefix = "blocks.0.attn."
    loaded = attn.load_state_dict({k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}, False)
    assert loaded.missing_keys == ["IGNORE"] and not loaded.unexpected_keys  # the mask's constant is no weight
    W_E, W_U = weights["embed.W_E"], weights["unembed.W_U"]
    candidates = definitions.candidates(texts)
    found, threads = {}, torch.get_num_threads()
    torch.set_num_threads(1)  # small operations, many of them: a second thread only slows them down
    try:
        with torch.no_grad():
            for head in (1, 3):
                full_qk = skip_trigrams.full_qk_circuit(W_E, attn, head)
                full_ov = skip_trigrams.full_ov_circuit(W_E, attn, W_U, head)
                attention = skip_trigrams.attention_to_sources(full_qk, shape["d_head"])
                table = skip_trigrams.skip_trigram_table(attention, full_ov, candidates, 8, 4)
                for i, source in enumerate(table[0].tolist()):
                    if texts[source] not in (" string", " server", " key"):
                        continue
                    triples = definitions.triples_of(tuple(part[i : i + 1] for part in table))
                    holding = windows[(windows == source).any(dim=-1)]
                    counts = skip_trigrams.count_skip_trigrams(holding, triples, shape["n_ctx"]).reshape(1, 4, 4)
                    bugs = skip_trigrams.skip_trigram_bugs(counts, definitions.MIN_REAL)
                    cells = {
                        (texts[d], texts[o]): (int(counts[0, a, b]), bool(bugs[0, a, b]))
                        for a, d in enumerate(table[1][i].tolist())
                        for b, o in enumerate(table[2][i].tolist())
                    }
                    found[head, texts[source]] = cells
    finally:
        torch.set_num_threads(threads)
        monkeypatch.undo()
    return found


@pytest.mark.parametrize("head, family", [(1, DESIGNED[1]), (3, DESIGNED[3]), (3, DESIGNED_KEY)], ids=str)
def test_the_solutions_find_the_designed_bugs_on_the_shipped_model(solved, head, family):
    source, real, designed = family
    cells = solved[head, source]
    for trigram in real:
        count, is_bug = cells[trigram]
        assert count >= 10_000 and not is_bug, (trigram, cells[trigram])
    for trigram in designed:
        count, is_bug = cells[trigram]
        assert count <= 5 and is_bug, (trigram, cells[trigram])
