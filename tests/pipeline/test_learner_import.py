"""The learner's files are graded from their source, never from a bytecode cache beside them; a file that does not
import is given to the files that import it as the grader's stand-in (grader.learner.stand_ins)."""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys

from repo import REPO, by_id, write_variant

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


# --- a file that does not import: the grader's stand-in for its importers, its own error for itself ---------------

IMPORTS = """
import sys
from pathlib import Path
from grader.learner.package import LearnerPackage
from grader.shared.wire import StoodIn

unfinished = [StoodIn(name, [], "does not finish importing", 3) for name in sys.argv[2:]]
package = LearnerPackage(Path(sys.argv[1]), unfinished)
for file in ("block", "interp", "kv_cache", "skip_trigrams", "transformer", "attention", "mlp"):
    try:
        module = package.module(file)
    except Exception as error:
        print(file, type(error).__name__, str(error).splitlines()[0])
    else:
        print(file, *sorted(f"{n}:{getattr(module, n).__module__}" for n in ("Attention", "MLP") if hasattr(module, n)))
print(*[f"{stood.file} {stood.names} {stood.why}" for stood in package.stood_in()], sep="; ")
"""
GRADERS = "grader.learner.drivers.stand_in_transformer"


def imported(package, *unfinished: str) -> list[str]:
    ran = subprocess.run(
        [sys.executable, "-c", IMPORTS, str(package), *unfinished],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.splitlines()


def test_the_files_that_import_attention_py_get_the_grader_s_attention_and_it_keeps_its_own_error(tmp_path):
    package = write_variant(tmp_path, {})
    with (package / "attention.py").open("a") as attention:
        attention.write("def (\n")
    lines = imported(package)
    assert lines[0] == f"block Attention:{GRADERS} MLP:learner_package.mlp"
    assert lines[1:5] == [
        f"interp Attention:{GRADERS}",
        f"kv_cache Attention:{GRADERS}",
        f"skip_trigrams Attention:{GRADERS}",
        "transformer",
    ]
    assert lines[5].startswith("attention SyntaxError invalid syntax (attention.py")
    assert lines[6] == "mlp MLP:learner_package.mlp"
    assert lines[7] == ""  # asked for by itself, attention.py took its stand-in's place back


def test_a_name_missing_from_a_file_that_imports_is_the_grader_s_and_the_rest_is_the_learner_s(tmp_path):
    package = write_variant(tmp_path, {"mlp.py": [("class MLP(nn.Module):", "class Mlp(nn.Module):")]})
    lines = imported(package)
    assert lines[0] == f"block Attention:learner_package.attention MLP:{GRADERS}"
    assert lines[-2] == "mlp"  # the learner's own mlp.py, without an MLP


def test_a_file_that_does_not_finish_importing_is_never_run_and_says_so_asked_for_by_itself(tmp_path):
    package = write_variant(tmp_path, {"mlp.py": [("import einops\n", "import einops\n\nwhile True:\n    pass\n")]})
    lines = imported(package, "mlp.py")
    assert lines[0] == f"block Attention:learner_package.attention MLP:{GRADERS}"
    assert lines[-2] == "mlp DoesNotFinishImporting mlp.py does not finish importing (line 3 when stopped)"
    assert lines[-1] == "mlp.py ['MLP'] does not finish importing"
