"""One mistake, one penalty: `block` grades the block's wiring alone (GPT-2's sublayer outputs replayed into
it), the whole model is graded again with the grader's own part in place of one that fails its own check
(tests/course/test_stand_ins.py), and a check whose parts fail names them first."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from repo import SOLUTIONS, by_id, stubs, write_variant
from test_mistakes import SCALED

from grader.checks import Check, Target, registry
from grader.host.dependencies import with_failing_parts
from grader.host.results import CheckResult
from grader.shared import wire

D_HEAD = {"attention.py": [(SCALED, "attn_scores / self.cfg.d_head")]}
ON_OURS = "graded with the grader's Attention in place of yours, which fails attention"
MODEL = [check.id for check in registry() if check.part == "model"]


# --- the done-when: a mistake in attention costs attention only ------------------------------------


@pytest.fixture(scope="module")
def d_head(grade, tmp_path_factory) -> dict[str, CheckResult]:
    """Attention that divides its scores by d_head, graded at every model check and the logit lens."""
    return by_id(grade(write_variant(tmp_path_factory.mktemp("d_head"), D_HEAD), "model", "interp.logit_lens"))


def test_a_mistake_in_attention_costs_attention_only(d_head):
    statuses = {check_id: d_head[check_id].status for check_id in MODEL}
    assert statuses == {check_id: "fail" if check_id == "attention" else "pass" for check_id in MODEL}
    assert "divided by d_head" in d_head["attention"].hint
    assert not d_head["attention"].message.startswith("your ")  # its own check names its own mistake


def test_the_whole_model_passes_on_the_graders_attention_and_says_so(d_head):
    transformer = d_head["transformer"]
    assert (transformer.status, transformer.message, transformer.stood_in) == ("pass", "", ["attention"])
    assert transformer.notes[0] == ON_OURS, transformer.notes
    assert not any("fix attention" in note for note in transformer.notes)  # said once, in that line


def test_the_block_passes_and_its_note_names_attention(d_head):
    block = d_head["block"]
    assert (block.status, block.message) == ("pass", "")
    assert "passes, though your Attention fails its own check: fix attention too" in block.notes


def test_the_logit_lens_passes_on_gpt2s_blocks_and_its_note_names_attention(d_head):
    lens = d_head["interp.logit_lens"]
    assert (lens.status, lens.message) == ("pass", "")
    assert "passes, though your Attention fails its own check: fix attention too" in lens.notes


# --- the replay ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sublayer_file", ["attention.py", "normalization.py", "mlp.py"], ids=["attention", "layernorm", "mlp"]
)
def test_the_block_grades_its_wiring_with_a_sublayer_left_unwritten(sublayer_file, grade, tmp_path):
    """A sublayer copied from exercises/ raises NotImplementedError; replayed, it is never run."""
    package = write_variant(tmp_path, {})
    (package / sublayer_file).write_text((stubs() / sublayer_file).read_text())
    results = by_id(grade(package, "block", "transformer"))
    assert results["block"].status == "pass", results["block"].message
    assert results["transformer"].status == "todo"


def test_a_wiring_mistake_with_a_wrong_sublayer_still_fails_on_the_graders_sublayer(grade, tmp_path):
    """The MLP fed the wrong tensor cannot be replayed: the learner's own code runs there, and attention is the
    grader's once the block fails beside a failing attention, so the block fails on its own wiring."""
    edits = D_HEAD | {"block.py": [("resid_post = resid_mid + self.mlp(", "resid_post = self.mlp(")]}
    results = by_id(grade(write_variant(tmp_path, edits), "attention", "block"))
    block = results["block"]
    assert block.status == "fail" and not block.message.startswith("your "), block.message
    assert (block.notes[0], block.stood_in) == (ON_OURS, ["attention"])


def test_a_wiring_mistake_alone_still_fails_with_its_hint(grade, tmp_path):
    """ln2 fed the block's input, not resid_mid: ln2 and the MLP run the learner's own (right) code on it."""
    edits = {"block.py": [("self.mlp(self.ln2(resid_mid))", "self.mlp(self.ln2(resid_pre))")]}
    block = by_id(grade(write_variant(tmp_path, edits), "block"))["block"]
    assert block.status == "fail" and "the MLP reads ln2(resid_pre)" in block.hint
    assert not block.message.startswith("your ")


def test_the_block_cases_never_ship_the_block_output(reference):
    """The learner's process gets GPT-2's sublayer inputs and outputs, never the expected block output."""
    expected, inputs = reference.expected("block"), reference.inputs("block")
    for case in reference.cases("block"):
        shipped = {key: value for key, value in inputs.items() if key.startswith(f"{case.name}/")}
        assert {
            wire.EXTRA.format(case=case.name, name=name)
            for path in ("ln1", "attn", "ln2", "mlp")
            for name in wire.replay_names(path)
        } <= set(shipped)
        for key, value in shipped.items():
            same = value.shape == expected[case.name].shape and np.allclose(value, expected[case.name], atol=1e-3)
            assert not same, f"{key} is the expected output of {case.name}"


# --- shape edges --------------------------------------------------------------------------------------

ONE_POSITION = "it fails only on a one-position sequence"
SQUEEZED_MASK = {
    "attention.py": [
        ("query_pos, key_pos = attn_scores.shape[-2:]", "query_pos, key_pos = attn_scores.squeeze().shape[-2:]")
    ]
}
# A mask built once, for the first sequence length it meets, as learners have cached it on the module.
MASK_OF_ONE_LENGTH = {
    "attention.py": [
        (
            "future = torch.triu(all_ones, diagonal=past_kv_pos_offset + 1)",
            "if not hasattr(self, 'future'):\n"
            "            self.future = torch.triu(all_ones, diagonal=past_kv_pos_offset + 1)\n"
            "        future = self.future",
        )
    ]
}


def test_a_mask_that_crashes_on_one_position_costs_the_mask_alone(grade, tmp_path):
    """squeeze() drops the batch, head and position axes of a (1, n_heads, 1, 1) score: the first sampling step."""
    results = by_id(grade(write_variant(tmp_path, SQUEEZED_MASK), "attention"))
    mask, attention = results["attention.causal_mask"], results["attention"]
    assert mask.status == "error" and "ValueError" in mask.message, mask.message
    assert f"on scores_1x1: {ONE_POSITION}" in mask.message
    assert (attention.status, attention.stood_in) == ("pass", ["attention.causal_mask"]), attention.message
    assert attention.notes[0] == (
        "graded with the grader's Attention.apply_causal_mask in place of yours, which fails attention.causal_mask"
    )


def test_a_mask_built_for_one_sequence_length_fails(grade, tmp_path):
    mask = by_id(grade(write_variant(tmp_path, MASK_OF_ONE_LENGTH), "attention.causal_mask"))["attention.causal_mask"]
    assert mask.status == "error" and "RuntimeError" in mask.message, mask.message


def test_the_one_position_cases_pass_the_solutions_and_no_more_than_that(grade):
    """A correct model is right on BOS alone, and the case exists wherever a sequence goes in."""
    results = by_id(grade(SOLUTIONS, "model"))
    assert {r.id: r.status for r in results.values()} == dict.fromkeys(MODEL, "pass")


def shapes(reference, check_id: str) -> list[tuple[int, ...]]:
    return [tuple(value.shape) for key, value in reference.inputs(check_id).items() if key.endswith("/arg0")]


@pytest.mark.parametrize("check_id", [c for c in MODEL if c != "gelu_new"])  # gelu_new is elementwise
def test_every_module_meets_batch_1_batch_2_and_one_position(reference, check_id):
    seen = shapes(reference, check_id)
    posn_axis = -2 if check_id == "attention.causal_mask" else 1
    assert {s[0] for s in seen} >= {1, 2}, seen
    assert any(s[posn_axis] == 1 for s in seen), seen
    assert any(s[posn_axis] > 1 for s in seen if s[0] == 1), seen  # batch 1 with many positions, as sampling has


def test_pos_embed_meets_the_whole_context(reference):
    assert (1, 1024) in shapes(reference, "pos_embed")


# --- the dependency step on its own --------------------------------------------------------------------


def check(check_id: str, *uses: str, name: str | None = None, method: str | None = "forward") -> Check:
    target = Target("f", name or check_id.title(), method)
    return Check(check_id, 1, target, "", list, uses=uses, page="01-the-model.md")


GRAPH = [
    check("mask", name="Attention", method="apply_causal_mask"),
    check("attention", "mask", name="Attention"),
    check("gelu", name="gelu", method=None),
    check("mlp", "gelu", name="MLP"),
    check("block", "attention", "mlp"),
    check("model", "block"),
]


def results(**statuses: str) -> list[CheckResult]:
    return [CheckResult(c.id, "model", "", statuses.get(c.id, "pass"), 1, "differs", next_step="look") for c in GRAPH]


def blamed(**statuses: str) -> dict[str, CheckResult]:
    return {r.id: r for r in with_failing_parts(results(**statuses), GRAPH)}


def test_only_the_part_where_the_failures_start_is_named():
    out = blamed(mask="fail", attention="fail", model="fail")
    assert out["attention"].message == "your Attention.apply_causal_mask fails its own check: fix mask first; differs"
    assert out["model"].message.startswith("your Attention.apply_causal_mask fails its own check: fix mask first")
    assert out["model"].next_step == "fix mask first (grade mask), then grade model again"
    assert out["mask"].message == "differs"  # a part is never blamed on itself


def test_every_failing_part_is_named_in_course_order():
    out = blamed(attention="fail", gelu="todo", mlp="todo", model="error")
    assert out["model"].message == (
        "your Attention fails its own check and your gelu is not implemented yet: fix attention and gelu first; differs"
    )
    assert out["model"].next_step == "fix attention and gelu first (grade attention gelu), then grade model again"


def test_a_named_mistake_stays_the_next_step():
    hinted = [
        dataclasses.replace(r, hint="the mask hides the diagonal") for r in results(mask="fail", attention="fail")
    ]
    attention = {r.id: r for r in with_failing_parts(hinted, GRAPH)}["attention"]
    assert attention.message.startswith("your Attention.apply_causal_mask fails its own check: fix mask first; ")
    assert attention.next_step == "look"


def test_a_part_reached_through_an_ungraded_check_is_still_named():
    graded = [r for r in results(attention="fail", model="fail") if r.id in ("attention", "model")]
    out = {r.id: r for r in with_failing_parts(graded, GRAPH)}
    assert out["model"].message.startswith("your Attention fails its own check: fix attention first; ")


def test_a_passing_check_with_a_failing_part_says_so_in_a_note_and_a_todo_is_left_alone():
    out = blamed(attention="fail", model="todo")
    assert out["block"].status == "pass" and out["block"].notes == [
        "passes, though your Attention fails its own check: fix attention too"
    ]
    assert (out["model"].message, out["model"].next_step) == ("differs", "look")


def test_nothing_changes_when_every_part_passes():
    assert with_failing_parts(results(model="fail"), GRAPH) == results(model="fail")


def test_every_declared_part_is_a_check_met_earlier():
    order = [c.id for c in registry()]
    for c in registry():
        assert all(part in order[: order.index(c.id)] for part in c.uses), (c.id, c.uses)


# --- a file that does not import costs its own checks only --------------------------------------------------------

ATTENTION_SYNTAX_ERROR = {
    "attention.py": [("        return attn_out + self.b_O\n", "        return attn_out + self.b_O\ndef (\n")]
}
IN_PLACE_OF_ATTENTION = "graded with the grader's Attention in place of yours: attention.py does not import"
# The checks of files that import attention.py, directly or through another (the make test selection; the slow test
# grades the whole course)
IMPORTERS = ("block", "interp.qk_circuit", "interp.parameter_counts", "skip_trigram.full_qk")


@pytest.fixture(scope="module")
def attention_syntax_error(grade, tmp_path_factory):
    return write_variant(tmp_path_factory.mktemp("attention_syntax"), ATTENTION_SYNTAX_ERROR)


def test_a_syntax_error_in_attention_py_costs_the_attention_checks_only(grade, attention_syntax_error):
    graded = by_id(grade(attention_syntax_error, "attention.causal_mask", "attention", *IMPORTERS))
    for check_id in ("attention.causal_mask", "attention"):
        assert graded[check_id].status == "error" and graded[check_id].message.startswith("SyntaxError")
        assert graded[check_id].file == "attention.py"
    for check_id in IMPORTERS:
        assert graded[check_id].status == "pass", (check_id, graded[check_id].message)
        assert IN_PLACE_OF_ATTENTION in graded[check_id].notes, (check_id, graded[check_id].notes)
        # said once: no "passes, though your Attention... fails" beside the stand-in's note
        assert not [note for note in graded[check_id].notes if "passes, though" in note], graded[check_id].notes


@pytest.mark.slow  # the whole course on a variant
def test_a_syntax_error_in_attention_py_loses_only_the_attention_checks_points_in_the_whole_course(
    grade, attention_syntax_error
):
    graded = grade(attention_syntax_error)
    lost = {result.id for result in graded.checks if result.score < result.max_score}
    assert lost == {"attention.causal_mask", "attention"}
    assert all(result.status == "pass" for result in graded.checks if result.id not in lost)


MLP_HANGS = {"mlp.py": [("import einops\n", "import einops\n\nwhile True:\n    pass\n")]}
MLP_DOES_NOT_FINISH = re.compile(r"mlp\.py does not finish importing \(line (7|8) when stopped\)")


@pytest.mark.slow  # the whole course, and one timeout
def test_a_hang_at_import_times_out_its_own_checks_only_and_is_named(grade, tmp_path):
    """A `while True` at the top of mlp.py: one preflight timeout in all; gelu_new and mlp time out without running,
    named by the file and line; every other check runs with the grader's MLP where it imports mlp.py."""
    graded = by_id(grade(write_variant(tmp_path, MLP_HANGS), timeout=40))
    for check_id in ("gelu_new", "mlp"):
        assert graded[check_id].status == "timeout" and MLP_DOES_NOT_FINISH.fullmatch(graded[check_id].message)
        assert (graded[check_id].file, graded[check_id].seconds) == ("mlp.py", 0)  # not run: the preflight paid
    others = {check_id: result for check_id, result in graded.items() if check_id not in ("gelu_new", "mlp")}
    assert {check_id: result.status for check_id, result in others.items()} == dict.fromkeys(others, "pass")
    assert any(note.startswith("graded with the grader's MLP in place of yours") for note in graded["block"].notes)
    said = [line for result in graded.values() for line in (result.message, *result.notes, result.next_step)]
    assert not [line for line in said if "gelu_new" in line or "fix gelu" in line]


@pytest.mark.slow  # two variants
@pytest.mark.parametrize(
    ("broken", "check_ids", "parts"),
    [
        ("interp.py", ("skip_trigram.full_qk", "skip_trigram.full_ov"), "ov_circuit and qk_circuit"),
        ("sampling.py", ("kv_cache",), "TransformerSampler"),
    ],
)
def test_the_grader_s_circuits_and_sampler_stand_in_for_a_file_that_does_not_import(
    grade, tmp_path, broken, check_ids, parts
):
    package = write_variant(tmp_path, {})
    with (package / broken).open("a") as source:
        source.write("def (\n")
    graded = by_id(grade(package, *check_ids))
    for check_id in check_ids:
        assert graded[check_id].status == "pass", (check_id, graded[check_id].message)
        assert f"graded with the grader's {parts} in place of yours: {broken} does not import" in graded[check_id].notes
