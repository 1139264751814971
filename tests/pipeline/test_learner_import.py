"""The learner's files are graded from their source, never from a bytecode cache beside them."""

from __future__ import annotations

import os
import py_compile
import sys

from repo import by_id, write_variant

RIGHT = "normalized = (residual - residual_mean) / residual_std"
WRONG = "normalized = (residual + residual_mean) / residual_std"  # the same length: a .pyc cannot tell


def test_a_stale_pyc_of_the_same_size_and_time_is_not_graded(grade, tmp_path):
    """A .pyc records its source's size and modification time; one of a wrong version written within the
    same second as the right save, at the same size, matches both, and Python's own loader would run it."""
    package = write_variant(tmp_path / "right", {})
    wrong = write_variant(tmp_path / "wrong", {"normalization.py": [(RIGHT, WRONG)]})
    source, stale = package / "normalization.py", wrong / "normalization.py"
    assert source.stat().st_size == stale.stat().st_size
    times = (source.stat().st_atime, source.stat().st_mtime)
    os.utime(stale, times)
    tag = sys.implementation.cache_tag
    py_compile.compile(str(stale), cfile=str(package / "__pycache__" / f"normalization.{tag}.pyc"), doraise=True)
    os.utime(source, times)
    assert by_id(grade(package, "layernorm"))["layernorm"].status == "pass"
    assert by_id(grade(wrong, "layernorm"))["layernorm"].status == "fail"  # the wrong version does fail
