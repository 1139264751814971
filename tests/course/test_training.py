"""Part 4: training.

The solutions pass, the stubs are todo, each classic mistake written into the solutions fails at
its own check with its own hint, the outcome check trains the solutions' model to the bar within
two minutes and fails a loop whose loss is not shifted, and the grader's own expected answers
hold up against independent computations and against every mistake they are meant to tell apart.
"""

from __future__ import annotations

import numpy as np
import pytest
from repo import SOLUTIONS, by_id, stubs, tiered, write_variant

from grader.checks.training.trainer import OUTCOME_TIMEOUT

TRAINING_CHECKS = (
    "training.next_token_loss",
    "training.make_optimizer",
    "training.lr_at",
    "training.train_step",
    "training.evaluate",
    "training.trainer",
)
NO_SHIFT = [
    ("log_probs = logits[:, :-1].log_softmax(dim=-1)", "log_probs = logits.log_softmax(dim=-1)"),
    ("einops.rearrange(tokens[:, 1:],", "einops.rearrange(tokens,"),
]
CLIP_THEN_STEP = "nn.utils.clip_grad_norm_(model.parameters(), clip)\n    optimizer.step()"
# mistake: (check, edits of training.py, what the hint must say)
SET_LR = '            for group in self.optimizer.param_groups:\n                group["lr"] = lr_at('
STEP = "            self.losses.append(train_step(self.model, self.optimizer, batch, args.clip))\n"
SET_LR_AND_STEP = SET_LR + "step, args.warmup, total, args.max_lr, args.min_lr)\n" + STEP
LR_AFTER_STEP = STEP + SET_LR + "step, args.warmup, total, args.max_lr, args.min_lr)\n"
MISTAKES = {
    "no shift": ("training.next_token_loss", NO_SHIFT, "no shift"),
    "the last position only": (
        "training.next_token_loss",
        [
            (
                "-log_probs.gather(dim=-1, index=targets).mean()",
                "-log_probs.gather(dim=-1, index=targets)[:, -1].mean()",
            )
        ],
        "only the last position",
    ),
    "weight decay on every parameter": (
        "training.make_optimizer",
        [
            (
                "torch.optim.AdamW(groups, lr=lr)",
                "torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)",
            )
        ],
        "weight decay on every parameter",
    ),
    "decay chosen by ndim": (
        "training.make_optimizer",
        [('leaf.startswith("W_") and leaf not in NO_DECAY', "parameter.ndim >= 2")],
        "p.ndim >= 2",
    ),
    "clipping after the step": (
        "training.train_step",
        [(CLIP_THEN_STEP, "optimizer.step()\n    nn.utils.clip_grad_norm_(model.parameters(), clip)")],
        "unclipped gradients",
    ),
    "zero_grad missing": (
        "training.train_step",
        [("    optimizer.zero_grad()\n", "")],
        "gradients of every step accumulate",
    ),
    "model.eval() missing": (
        "training.evaluate",
        [("    model.eval()  # no dropout\n", "")],
        "model.eval() is missing",
    ),
    "inference_mode missing": (
        "training.evaluate",
        [("with torch.inference_mode():", "with torch.enable_grad():")],
        "torch.inference_mode() is missing",
    ),
    "warm-up off by one": (
        "training.lr_at",
        [("return max_lr * (step + 1) / warmup", "return max_lr * step / warmup")],
        "off by one",
    ),
    "the first parameter group's lr only": (
        "training.trainer",
        [(SET_LR, '            self.optimizer.param_groups[0]["lr"] = lr_at(')],
        "only the first parameter group follows lr_at",
    ),
    "the lr never set": ("training.trainer", [(SET_LR, "            lr_at(")], "stays at max_lr"),
    "the lr set after the step": ("training.trainer", [(SET_LR_AND_STEP, LR_AFTER_STEP)], "set after the step"),
}


@pytest.mark.slow
def test_solutions_pass_every_training_check(grade):
    report = grade(SOLUTIONS, "training", timeout=OUTCOME_TIMEOUT)
    assert [c.id for c in report.checks] == list(TRAINING_CHECKS)
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(TRAINING_CHECKS, "pass"), [
        c.message for c in report.checks
    ]
    trainer = by_id(report)["training.trainer"]
    assert trainer.seconds < 120, f"the outcome check took {trainer.seconds:.0f} s"
    assert any("held-out loss" in note for note in trainer.notes), trainer.notes


def test_stubs_are_todo(grade):
    assert {c.id: c.status for c in grade(stubs(), "training").checks} == dict.fromkeys(TRAINING_CHECKS, "todo")


# `make test-all` also grades "weight decay on every parameter" (about 1.5 s; make_optimizer's other mistake is quick)
# and two of the loop's three schedule slips.
QUICK = [
    name
    for name in MISTAKES
    if name not in ("weight decay on every parameter", "the lr never set", "the lr set after the step")
]


@pytest.mark.parametrize("mistake", tiered(MISTAKES, QUICK))
def test_mistake_fails_at_its_check_with_its_hint(grade, tmp_path, mistake):
    check_id, edits, hint = MISTAKES[mistake]
    result = by_id(grade(write_variant(tmp_path, {"training.py": edits}), check_id))[check_id]
    assert result.status == "fail", result.message
    assert hint in (result.hint or ""), (result.message, result.hint)


def line_of(package, code: str) -> int:
    """The number of the one line of the package's training.py that holds `code`."""
    [line] = [i for i, text in enumerate((package / "training.py").read_text().splitlines(), 1) if code in text]
    return line


def test_a_loss_without_the_shift_is_located_at_the_line_that_computed_it(grade, tmp_path):
    """next_token_loss's locals are recorded: the loss that differs is pointed at where it was computed."""
    package = write_variant(tmp_path, {"training.py": NO_SHIFT})
    result = by_id(grade(package, "training.next_token_loss"))["training.next_token_loss"]
    line = line_of(package, "return -log_probs.gather(")
    assert result.status == "fail" and "no shift" in (result.hint or ""), result.diagnosis()
    assert result.divergence == (
        f"output, the first step, already differs from the grader's own computation (training.py:{line})"
    )
    assert (result.file, result.line) == ("training.py", line)


def test_zero_grad_missing_is_located_at_train_step(grade, tmp_path):
    """train_step runs under a driver, which records no locals: the slip is placed at the learner's train_step."""
    package = write_variant(tmp_path, {"training.py": [("    optimizer.zero_grad()\n", "")]})
    result = by_id(grade(package, "training.train_step"))["training.train_step"]
    assert "zero_grad is missing" in (result.hint or ""), result.diagnosis()
    assert (result.file, result.line) == ("training.py", line_of(package, "def train_step("))


def test_train_step_and_evaluate_name_a_failing_next_token_loss_first(grade, tmp_path):
    """Both call the learner's next_token_loss (the README says so): its failure is the one to fix first."""
    checks = ("training.next_token_loss", "training.train_step", "training.evaluate")
    results = by_id(grade(write_variant(tmp_path, {"training.py": NO_SHIFT}), *checks))
    assert results["training.next_token_loss"].status == "fail"
    for check_id in checks[1:]:
        assert results[check_id].status == "fail", results[check_id].message
        assert results[check_id].next_step.startswith("fix training.next_token_loss first"), results[check_id]


@pytest.mark.slow
def test_a_loop_without_the_shift_fails_the_outcome(grade, tmp_path):
    result = by_id(
        grade(write_variant(tmp_path, {"training.py": NO_SHIFT}), "training.trainer", timeout=OUTCOME_TIMEOUT)
    )["training.trainer"]
    assert result.status == "fail", result.message
    assert "held-out loss" in result.message


# --- the grader's own answers -------------------------------------------------------------------


def case_arrays(reference, check_id: str, case: str) -> tuple[dict, np.ndarray, list[tuple[str, np.ndarray]]]:
    inputs, expected = reference.inputs(check_id), reference.expected(check_id)
    names = next(c for c in reference.cases(check_id) if c.name == case).mistakes
    arguments = {key.split("/", 1)[1]: value for key, value in inputs.items() if key.startswith(f"{case}/")}
    return arguments, expected[case], [(hint, expected[f"{case}/mistake/{i}"]) for i, hint in enumerate(names)]


def test_expected_loss_is_torchs_cross_entropy(reference):
    import torch

    for case in reference.cases("training.next_token_loss"):
        args, expected, _ = case_arrays(reference, "training.next_token_loss", case.name)
        logits, tokens = torch.from_numpy(args["arg0"]), torch.from_numpy(args["arg1"])
        ours = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
        np.testing.assert_allclose(expected, ours.numpy(), rtol=1e-5)


@pytest.mark.parametrize("check_id", TRAINING_CHECKS[:-1])
def test_every_mistake_is_told_apart_from_the_right_answer(reference, check_id):
    """Each case's known mistakes are off by far more than the check's tolerance, so none passes."""
    from grader.checks import select

    tolerance = select([check_id])[0].tolerance
    for case in reference.cases(check_id):
        _, expected, mistakes = case_arrays(reference, check_id, case.name)
        for hint, wrong in mistakes:
            same = wrong.shape == expected.shape and np.allclose(
                wrong, expected, atol=10 * tolerance.atol, rtol=10 * tolerance.rtol
            )
            assert not same, f"{check_id}/{case.name}: {hint!r} gives the right answer"


def test_schedule_warms_up_to_max_lr_and_ends_at_min_lr(reference):
    for case in reference.cases("training.lr_at"):
        args, expected, _ = case_arrays(reference, "training.lr_at", case.name)
        steps, (warmup, total, max_lr, min_lr) = list(args["arg0"]), args["arg1"]
        rate = dict(zip(steps, expected, strict=False))
        assert rate[0] > 0 and rate[warmup - 1] == pytest.approx(max_lr) and rate[warmup] == pytest.approx(max_lr)
        assert rate[total] == pytest.approx(min_lr) and rate[2 * total] == pytest.approx(min_lr)
        assert all(
            a >= b for a, b in zip(expected[steps.index(warmup) :], expected[steps.index(warmup) + 1 :], strict=False)
        )


def test_expected_step_is_torchs_sgd_with_clipping(reference):
    """The grader's hand-written step against torch's SGD and clip_grad_norm_, on the same TinyLM."""
    import torch

    from grader.learner.drivers.tiny_lm import TinyLM, flat_parameters

    args, expected, _ = case_arrays(reference, "training.train_step", "tiny_lm_sgd")
    batches, clip, lr = torch.from_numpy(args["arg0"]), float(args["arg1"]), float(args["arg2"])
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for batch in batches:
        optimizer.zero_grad()
        logits = model(batch)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), batch[:, 1:].flatten())
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        losses.append(loss.item())
        optimizer.step()
    assert float(norm) > clip or len(losses) == 3
    ours = torch.cat([torch.tensor(losses), flat_parameters(model)]).double().numpy()
    np.testing.assert_allclose(expected, ours, rtol=1e-5, atol=1e-6)


def test_outcome_bar_is_below_an_untrained_model(reference):
    _, expected, _ = case_arrays(reference, "training.trainer", "stdlib_docs")
    threshold, untrained = expected[:2]
    assert 3.0 < threshold < untrained - 1.0


# --- the corpus ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    from grader.builder.reference import offline_tokenizer

    return offline_tokenizer()


def test_corpus_is_deterministic_and_prose(tokenizer):
    from grader.builder import corpus

    documents = corpus.documents()
    assert documents == corpus.documents()
    assert sum(map(len, documents)) > 1_000_000 and len(set(documents)) == len(documents)
    assert all(len(text) >= corpus.MIN_CHARACTERS for text in documents)


def test_corpus_ids_map_back_to_the_text(tokenizer):
    from grader.builder import corpus

    texts = ["The cat sat on the mat.", "A dog sat on the log.", "The cat ate."] * 4
    built = corpus.from_texts(texts, tokenizer)
    assert built.decode(built.train, tokenizer).split("<|endoftext|>")[:3] == texts[:3]
    assert built.decode(built.held_out, tokenizer).split("<|endoftext|>")[:-1] == [texts[corpus.HELD_OUT_EVERY - 1]]
    counts = built.train.bincount(minlength=built.d_vocab) + built.held_out.bincount(minlength=built.d_vocab)
    assert (counts[:-1] >= counts[1:]).all()  # id 0 is the most frequent token


def test_the_corpus_cache_is_built_again_when_damaged_and_left_out_when_unwritable(tokenizer, tmp_path, monkeypatch):
    """corpus.load: a truncated cache file is built again and replaced; an unwritable cache directory (a file
    where it should be) costs the build, not the corpus (Part 6's reference build reads it)."""
    import torch

    from grader.builder import corpus
    from grader.builder import tokenizer as tokenizers

    small = corpus.from_texts(["The cat sat on the mat.", "A dog sat on the log."] * 4, tokenizer)
    builds = []
    monkeypatch.setattr(corpus, "build", lambda given: builds.append(given) or small)
    monkeypatch.setattr(tokenizers, "offline_tokenizer", lambda: tokenizer)

    def same(loaded):
        return all(
            torch.equal(getattr(loaded, part), getattr(small, part)) for part in ("train", "held_out", "gpt2_ids")
        )

    monkeypatch.setenv("GPT2_GRADER_CACHE", str(tmp_path / "cache"))
    assert same(corpus.load()) and len(builds) == 1
    (cached,) = (tmp_path / "cache").iterdir()  # the file alone: no partial write left beside it
    assert same(corpus.load()) and len(builds) == 1  # read back, not built
    cached.write_bytes(cached.read_bytes()[:100])
    assert same(corpus.load()) and len(builds) == 2
    assert same(corpus.load()) and len(builds) == 2  # the damaged file was replaced
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("GPT2_GRADER_CACHE", str(blocker / "cache"))
    assert same(corpus.load()) and len(builds) == 3


def test_batches_are_windows_of_the_stream():
    import torch

    from grader.builder import corpus

    stream = torch.arange(1000)
    text = corpus.Corpus(train=stream, held_out=stream, gpt2_ids=stream)
    batches = text.train_batches(3, 4, 16, seed=0)
    assert batches.shape == (3, 4, 16) and torch.equal(batches, text.train_batches(3, 4, 16, seed=0))
    assert ((batches[..., 1:] - batches[..., :-1]) == 1).all()
    assert torch.equal(text.held_out_batches(2, 2, 5).flatten(), stream[:20])


def test_a_capped_corpus_keeps_the_frequent_tokens(tokenizer):
    from grader.builder import corpus

    built = corpus.from_texts(["the the the cat", "the cat sat", "a mat"] * 4, tokenizer)
    capped = built.capped(3)
    assert capped.d_vocab == 3 and int(capped.train.max()) == 2
    assert (capped.train == built.train.clamp(max=2)).all()
    one_by_one = [
        tokenizer.decode([int(built.gpt2_ids[i])]) if i < 2 else corpus.RARE_TEXT for i in built.train[:8].tolist()
    ]
    assert capped.decode(capped.train[:8], tokenizer) == "".join(one_by_one)
