"""The seal trusts no record an unconfined run could have written.

Code run without the sandbox (`--no-sandbox`, GPT2_GRADER_SANDBOX=off) can rewrite the cache as its user:
here, the layernorm answers replaced by what an N-1 LayerNorm outputs, and the verification record
(verified.json) rewritten to vouch for the new file. Without the sandbox the record is believed and the
N-1 LayerNorm passes (the control); wherever the sandbox is on, every file is hashed, the entry is found
out, and the N-1 LayerNorm is judged against a rebuilt reference.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from repo import by_id, run_grade, write_variant

from grader.checks import registry
from grader.host.refcache import read_entry
from grader.host.seal import VERIFIED_FILE, parts_read
from grader.shared import sandbox, wire

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux's (docs/isolation.md)")
N_MINUS_1 = {"normalization.py": [("unbiased=False", "unbiased=True")]}
LAYERNORM = [check for check in registry() if check.id == "layernorm"]
TAMPERED = "expected.safetensors is not what the reference builder wrote"


@pytest.fixture(scope="module")
def n_minus_1(reference, tmp_path_factory) -> tuple[Path, dict]:
    """The N-1 LayerNorm, and what it outputs on each layernorm case, run unconfined."""
    from grader.host.runner import LearnerProcesses, Limits

    package = write_variant(tmp_path_factory.mktemp("n_minus_1"), N_MINUS_1)
    with LearnerProcesses(Limits(sandbox=False)) as processes:
        outcome = processes.run(package, LAYERNORM, reference)["layernorm"]
    names = [case.name for case in reference.cases("layernorm")]
    return package, {name: outcome.outputs[wire.OUTPUT.format(case=name)] for name in names}


def forge(reference, root: Path, outputs: dict) -> Path:
    """A copy of the cache as an unconfined run's code can leave it: the N-1 outputs as the layernorm
    answers, and a record that vouches for every file as it now is."""
    from safetensors.numpy import load_file, save_file

    entry = root / reference.directory.name
    shutil.copytree(reference.directory, entry)
    shutil.copytree(reference.directory.parent / "random-hub", root / "random-hub", copy_function=os.link)
    expected = load_file(str(entry / "expected.safetensors"))
    for case, output in outputs.items():
        expected[wire.EXPECTED.format(check="layernorm", case=case)] = output
    save_file(expected, str(entry / "expected.safetensors"))
    record = {}
    for part in json.loads((entry / "meta.json").read_text())["digests"]:
        st = os.stat(entry / part.partition(":")[0])
        record[part] = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    (entry / VERIFIED_FILE).write_text(json.dumps(record))
    return entry


@pytest.mark.slow  # two gradings besides the unconfined run of its fixture; the seal's hashing runs in `make test`
def test_a_forged_record_is_believed_only_without_the_sandbox(reference, n_minus_1, monkeypatch, tmp_path):
    from grader.host.pipeline import GradingRun, ReferenceTampered
    from grader.host.runner import Limits

    package, outputs = n_minus_1
    entry = forge(reference, tmp_path, outputs)
    assert sandbox.status().on, sandbox.status().describe()
    with pytest.raises(ReferenceTampered, match=TAMPERED):
        GradingRun(package, LAYERNORM, read_entry(entry, "random"), Limits()).finished()
    # The control: without the sandbox the record spares the hashing, and the forged answers are judged from.
    monkeypatch.setenv("GPT2_GRADER_SANDBOX", "off")
    believed = GradingRun(package, LAYERNORM, read_entry(entry, "random"), Limits()).finished().report
    assert by_id(believed)["layernorm"].status == "pass", by_id(believed)["layernorm"].message


@pytest.mark.slow
def test_require_sandbox_rebuilds_a_forged_entry_and_the_mistake_fails(reference, n_minus_1, tmp_path):
    package, outputs = n_minus_1
    forge(reference, tmp_path / "cache", outputs)
    args = ("--reference", "random", "--exercises", str(package), "layernorm", "--json", str(tmp_path / "r.json"))
    env = {"GPT2_GRADER_CACHE": str(tmp_path / "cache")}
    # The control: graded without the sandbox, the forged entry passes the mistake.
    believed = run_grade(*args, env={**env, "GPT2_GRADER_SANDBOX": "off"})
    assert believed.returncode == 0, believed.stdout[-2000:] + believed.stderr[-2000:]
    confined = run_grade(*args, "--require-sandbox", env=env)
    assert confined.returncode == 1, confined.stderr[-2000:]
    notices = [line for line in confined.stderr.splitlines() if "did not verify" in line]
    assert notices == [f"grade: the reference cache did not verify ({TAMPERED}); rebuilding it"]
    layernorm = json.loads((tmp_path / "r.json").read_text())["checks"][0]
    assert layernorm["id"] == "layernorm" and layernorm["status"] == "fail", layernorm


def test_a_grading_hashes_only_what_its_checks_read(reference):
    """`attention` reads its own inputs and answers and the weights its cases load, not the whole entry; each
    tensor's recorded digest is that of its bytes as safetensors reads them."""
    from blake3 import blake3
    from safetensors.numpy import load_file

    parts = parts_read(reference, ["attention"])
    prefixes = {case.weights for case in reference.cases("attention")}
    assert "inputs/attention.safetensors" in parts and "inputs/layernorm.safetensors" not in parts
    assert {"weights.safetensors:", "expected.safetensors:", "vocabulary.json"} <= set(parts)
    for file, prefix in (("weights.safetensors", tuple(prefixes)), ("expected.safetensors", ("attention/",))):
        keys = [part.partition(":")[2] for part in parts if part.startswith(file + ":") and part != file + ":"]
        assert keys and all(key.startswith(prefix) for key in keys), (file, keys[:3])
        tensors = load_file(str(reference.directory / file))
        assert len(keys) < len(tensors)
        for key in keys:
            assert reference.meta["digests"][f"{file}:{key}"] == blake3(tensors[key].tobytes()).hexdigest()
