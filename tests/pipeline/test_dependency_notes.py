"""A package with a syntax error in transformer.py, graded: no message tells the learner to make pass a check that
passes, and the transformer's own error comes first. The dependency step on hand-built results is in
test_dependency_notes_unit.py."""

from __future__ import annotations

import pytest
from repo import by_id, write_variant
from test_dependency_notes_unit import named_to_make_pass


@pytest.mark.slow
def test_a_syntax_error_in_transformer_py_is_the_transformers_own_first(grade, tmp_path):
    package = write_variant(tmp_path, {"transformer.py": [("def forward(self", "def forward(self (")]})
    checks = ("embed", "pos_embed", "layernorm", "block", "unembed", "transformer", "training.train_step")
    graded = by_id(grade(package, *checks, "training.trainer", timeout=120))
    transformer = graded["transformer"]
    assert transformer.status == "error" and transformer.message.startswith("SyntaxError"), transformer.message
    for check in graded.values():
        passing = {name for name in named_to_make_pass(check) if name in graded and graded[name].status == "pass"}
        assert not passing, (check.id, check.message, check.notes)
        assert check.max_abs_diff is None or check.max_abs_diff >= 0, (check.id, check.max_abs_diff)
