"""grader.host.refcache on a small entry written here by hand: what `read_entry` refuses, what `Seal` verifies and
detects, which parts a grading reads, and what `--reference auto` decides (the hub and the Hugging Face cache
stood in for: no network, no reference builder).

Every digest is worked out here from the arrays written (BLAKE3 of a tensor's bytes, of a header, of a file), not by
grader.shared.entry, so the entry's digest format is held too."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from pathlib import Path

import numpy as np
import pytest
from blake3 import blake3
from safetensors.numpy import save_file

from grader.host import refcache
from grader.host.refcache import NOT_CACHED, ReferenceUnavailable, ensure_reference, read_entry
from grader.host.seal import VERIFIED_FILE, Seal, parts_read
from grader.shared import sandbox

pytestmark = pytest.mark.unit

F32 = np.float32
WEIGHTS = {  # a GPT-2 state_dict in miniature: the embedding and two layers' attention
    "embed.W_E": np.arange(8, dtype=F32).reshape(4, 2),
    "blocks.0.attn.W_Q": np.full((2, 3), 0.5, F32),
    "blocks.0.attn.b_Q": np.array([1.0, 2.0, 3.0], F32),
    "blocks.1.attn.W_Q": np.full((2, 3), -0.5, F32),
}
EXPECTED = {
    "embed/small": np.array([[0.0, 1.0]], F32),
    "attention/prompt": np.array([[1.5, 2.5, 3.5]], F32),
    "attention/prompt/step/q": np.array([[0.5, 0.5, 0.5]], F32),
}
INPUTS = {"embed": {"0": np.array([0], np.int64)}, "attention": {"0": np.ones((1, 2), F32)}}
CASES = {
    "embed": [{"name": "small", "args": 1, "weights": "embed.", "overrides": []}],
    "attention": [{"name": "prompt", "args": 1, "weights": "blocks.0.attn.", "overrides": [], "steps": ["q"]}],
}
VOCABULARY = ["!", '"']


def digest(data: bytes) -> str:
    return blake3(data).hexdigest()


def header_digest(path: Path) -> str:
    """The digest of a safetensors file's header: its 8-byte size and the JSON it announces."""
    data = path.read_bytes()
    return digest(data[: 8 + int.from_bytes(data[:8], "little")])


def write_entry(directory: Path, kind: str = "random", checks=None) -> Path:
    """A sound entry: the four files, an inputs file per check and meta.json with every part's digest; of every
    check here, or of `checks` only (all the weights, as a cold build of the checks would load them)."""
    held = [check for check in CASES if checks is None or check in checks]
    (directory / "inputs").mkdir(parents=True)
    expected = {key: array for key, array in EXPECTED.items() if key.partition("/")[0] in held}
    save_file(WEIGHTS, str(directory / "weights.safetensors"))
    save_file(expected, str(directory / "expected.safetensors"))
    for check, tensors in INPUTS.items():
        if check not in held:
            continue
        save_file(tensors, str(directory / "inputs" / f"{check}.safetensors"))
    (directory / "vocabulary.json").write_text(json.dumps(VOCABULARY))
    digests = {"vocabulary.json": digest((directory / "vocabulary.json").read_bytes())}
    for file, tensors in (("weights.safetensors", WEIGHTS), ("expected.safetensors", expected)):
        digests[f"{file}:"] = header_digest(directory / file)
        digests |= {f"{file}:{key}": digest(array.tobytes()) for key, array in tensors.items()}
    for check in held:
        name = f"inputs/{check}.safetensors"
        digests[name] = digest((directory / name).read_bytes())
    cases = {check: CASES[check] for check in held}
    meta = {"reference": kind, "seed": 0, "cases": cases, "beside": [], "digests": digests}
    (directory / "meta.json").write_text(json.dumps(meta))
    return directory


@pytest.fixture
def entry(tmp_path) -> Path:
    return write_entry(tmp_path / "entry")


def meta_of(entry: Path) -> dict:
    return json.loads((entry / "meta.json").read_text())


def rewrite_meta(entry: Path, **changes) -> None:
    (entry / "meta.json").write_text(json.dumps({**meta_of(entry), **changes}))


def refused(entry: Path, kind: str = "random") -> str:
    with pytest.raises(ValueError) as raised:
        read_entry(entry, kind)
    return str(raised.value)


# --- read_entry -----------------------------------------------------------------------------------------------------


def test_a_sound_entry_reads_with_its_cases_and_tensors(entry):
    data = read_entry(entry, "random")
    assert (data.kind, data.directory, data.fallback_reason) == ("random", entry, None)
    assert [(case.name, case.weights, case.steps) for case in data.cases("attention")] == [
        ("prompt", "blocks.0.attn.", ["q"])
    ]
    assert sorted(data.expected("attention")) == ["prompt", "prompt/step/q"]
    np.testing.assert_array_equal(data.expected("embed")["small"], EXPECTED["embed/small"])
    np.testing.assert_array_equal(data.inputs("attention")["0"], INPUTS["attention"]["0"])
    assert data.vocabulary() == VOCABULARY


def test_expected_tensors_are_read_only_views_in_the_dtypes_and_shapes_written(tmp_path):
    written = {
        "a/x": np.linspace(0, 1, 6).reshape(2, 3),
        "a/text": np.frombuffer(b"hello", np.uint8),
        "a/count": np.array(7, np.int64),
        "a/none": np.zeros((0, 3), F32),
        "ab/x": np.ones(2, F32),  # another check's: its id only begins like this one's
    }
    save_file(written, str(tmp_path / "expected.safetensors"))
    read = refcache.mapped_tensors(tmp_path / "expected.safetensors", "a/")
    assert sorted(read) == ["a/count", "a/none", "a/text", "a/x"]
    for key, value in read.items():
        assert (value.dtype, value.shape) == (written[key].dtype, written[key].shape), key
        np.testing.assert_array_equal(value, written[key])
        assert not value.flags.writeable, key


def raw_safetensors(path: Path, header, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def test_a_tensor_numpy_cannot_hold_or_a_header_that_is_no_table_is_refused(tmp_path):
    path = tmp_path / "expected.safetensors"
    raw_safetensors(path, {"a/x": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}, b"\0\0")
    with pytest.raises(ValueError, match="a/x is BF16, a dtype NumPy cannot read"):
        refcache.mapped_tensors(path, "a/")
    raw_safetensors(path, [1, 2], b"")
    with pytest.raises(ValueError, match="not a safetensors header"):
        refcache.mapped_tensors(path, "a/")


@pytest.mark.parametrize("name", ["weights.safetensors", "expected.safetensors", "vocabulary.json", "meta.json"])
def test_a_missing_file_is_named(entry, name):
    (entry / name).unlink()
    assert refused(entry) == f"missing {name}"


def test_meta_json_that_is_not_json_is_refused(entry):
    (entry / "meta.json").write_text('{"reference": "random", "cases": ')
    assert refused(entry).startswith("JSONDecodeError: ")


def test_meta_json_without_its_cases_or_with_a_case_of_unknown_fields_is_refused(entry):
    meta = meta_of(entry)
    rewrite_meta(entry, cases={"embed": [{**CASES["embed"][0], "weigths": "embed."}]})
    assert refused(entry).startswith("ValidationError: ")
    (entry / "meta.json").write_text(json.dumps({key: value for key, value in meta.items() if key != "cases"}))
    assert refused(entry) == "KeyError: 'cases'"


def test_an_entry_of_another_reference_is_refused(entry):
    assert refused(entry, "gpt2") == "meta.json names another reference"


def test_a_file_that_is_not_safetensors_is_refused(entry):
    (entry / "inputs" / "embed.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not a header")
    assert refused(entry).startswith("SafetensorError: ")


def test_files_that_do_not_match_the_digests_are_refused(entry):
    save_file(INPUTS["embed"], str(entry / "inputs" / "extra.safetensors"))  # a file meta.json does not know
    assert refused(entry) == "ValueError: the files do not match meta.json's digests"
    (entry / "inputs" / "extra.safetensors").unlink()
    (entry / "inputs" / "attention.safetensors").unlink()  # a file meta.json names, gone
    assert refused(entry) == "ValueError: the files do not match meta.json's digests"


# --- parts_read -----------------------------------------------------------------------------------------------------


def test_every_part_is_read_when_no_check_is_named(entry):
    data = read_entry(entry, "random")
    assert parts_read(data, None) == list(meta_of(entry)["digests"])


def test_a_check_reads_the_vocabulary_its_inputs_its_answers_and_the_weights_its_cases_load(entry):
    data = read_entry(entry, "random")
    assert parts_read(data, ["attention"]) == [
        "vocabulary.json",
        "weights.safetensors:",
        "weights.safetensors:blocks.0.attn.W_Q",
        "weights.safetensors:blocks.0.attn.b_Q",
        "expected.safetensors:",
        "expected.safetensors:attention/prompt",
        "expected.safetensors:attention/prompt/step/q",
        "inputs/attention.safetensors",
    ]
    assert parts_read(data, ["embed"]) == [
        "vocabulary.json",
        "weights.safetensors:",
        "weights.safetensors:embed.W_E",
        "expected.safetensors:",
        "expected.safetensors:embed/small",
        "inputs/embed.safetensors",
    ]


def test_a_function_reads_no_weights_and_the_whole_model_reads_them_all(entry):
    rewrite_meta(
        entry,
        cases={
            "embed": [{**CASES["embed"][0], "weights": None}],  # a plain function: no module to load
            "attention": [{**CASES["attention"][0], "weights": ""}],  # the whole model: every weight
        },
    )
    data = read_entry(entry, "random")
    assert [part for part in parts_read(data, ["embed"]) if part.startswith("weights")] == ["weights.safetensors:"]
    assert [part for part in parts_read(data, ["attention"]) if part.startswith("weights")] == [
        "weights.safetensors:",
        *(f"weights.safetensors:{key}" for key in WEIGHTS),
    ]


# --- Seal -----------------------------------------------------------------------------------------------------------


@pytest.fixture
def unconfined(monkeypatch):
    """Checks run without the sandbox: an earlier run's record of verified parts is believed."""
    monkeypatch.setattr(sandbox, "status", lambda: sandbox.Status(False, "test"))


@pytest.fixture
def confined(monkeypatch):
    monkeypatch.setattr(sandbox, "status", lambda: sandbox.Status(True, "test"))


def tamper(entry: Path, key: str = "blocks.1.attn.W_Q") -> None:
    """One weight rewritten after the builder recorded the digests; same shape, so the header is unchanged."""
    save_file({**WEIGHTS, key: WEIGHTS[key] + 1}, str(entry / "weights.safetensors"))


def test_a_sound_entry_seals(entry, confined):
    assert Seal(read_entry(entry, "random")).broken() is None
    assert Seal(read_entry(entry, "random"), ["attention"]).broken() is None


def test_a_changed_tensor_breaks_the_seal_of_the_checks_that_read_it_only(entry, confined):
    tamper(entry, "blocks.0.attn.W_Q")
    broken = "weights.safetensors is not what the reference builder wrote"
    assert Seal(read_entry(entry, "random"), ["attention"]).broken() == broken
    assert Seal(read_entry(entry, "random"), ["embed"]).broken() is None  # embed reads embed.W_E, not that layer
    assert Seal(read_entry(entry, "random")).broken() == broken


def test_a_changed_answer_and_a_changed_vocabulary_break_the_seal(entry, confined):
    save_file({**EXPECTED, "embed/small": EXPECTED["embed/small"] * 2}, str(entry / "expected.safetensors"))
    assert Seal(read_entry(entry, "random"), ["embed"]).broken() == (
        "expected.safetensors is not what the reference builder wrote"
    )
    write_entry(entry.parent / "again")
    (entry.parent / "again" / "vocabulary.json").write_text(json.dumps(["?", '"']))
    assert Seal(read_entry(entry.parent / "again", "random"), ["embed"]).broken() == (
        "vocabulary.json is not what the reference builder wrote"
    )


def test_a_header_rewritten_as_json_that_is_no_table_breaks_the_seal(entry, confined):
    """Read before it is verified: a header that is JSON but no table is a part that does not verify, not a crash."""
    data = read_entry(entry, "random")
    raw_safetensors(entry / "expected.safetensors", [1, 2], b"")
    assert Seal(data, ["embed"]).broken() == "expected.safetensors is not what the reference builder wrote"


def test_a_file_written_while_the_checks_run_breaks_the_seal(entry, confined):
    seal = Seal(read_entry(entry, "random"), ["embed"])
    path = entry / "inputs" / "attention.safetensors"  # not even a file these checks read
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert seal.broken() == "attention.safetensors changed while the checks ran"


def forge_record(entry: Path) -> None:
    """A verified.json that vouches for the weights as they are now, after a tensor was changed."""
    stat = (entry / "weights.safetensors").stat()
    now = [stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]
    parts = [part for part in meta_of(entry)["digests"] if part.startswith("weights.safetensors")]
    (entry / VERIFIED_FILE).write_text(json.dumps(dict.fromkeys(parts, now)))


def test_an_earlier_runs_record_is_believed_only_where_checks_run_unconfined(entry, monkeypatch):
    tamper(entry)
    forge_record(entry)
    monkeypatch.setattr(sandbox, "status", lambda: sandbox.Status(False, "test"))
    assert Seal(read_entry(entry, "random")).broken() is None  # where the learner's code could read the answers anyway
    forge_record(entry)
    monkeypatch.setattr(sandbox, "status", lambda: sandbox.Status(True, "test"))
    assert Seal(read_entry(entry, "random")).broken() == "weights.safetensors is not what the reference builder wrote"


def test_a_verified_part_is_recorded_with_the_stat_of_its_file(entry, unconfined):
    data = read_entry(entry, "random")
    assert Seal(data, ["embed"]).broken() is None
    stat = (entry / "inputs" / "embed.safetensors").stat()
    record = json.loads((entry / VERIFIED_FILE).read_text())
    assert record["inputs/embed.safetensors"] == [stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]
    assert sorted(record) == sorted(parts_read(data, ["embed"]))


# --- where GPT-2 comes from: --reference auto, gpt2, random --------------------------------------------------------


class Stand:
    """The network and the reference builder, stood in for: what was asked, what was built."""

    def __init__(self, monkeypatch, *, in_hf_cache: bool, hub: bool, gpt2_builds: bool = True):
        self.hub, self.gpt2_builds = hub, gpt2_builds
        self.asked_hub, self.built, self.said = 0, [], []
        monkeypatch.setattr(refcache, "gpt2_in_hf_cache", lambda: in_hf_cache)
        monkeypatch.setattr(refcache, "hub_reachable", self.reachable)
        monkeypatch.setattr(refcache, "build_entry", self.build)

    def reachable(self, timeout: float = 3.0) -> bool:
        self.asked_hub += 1
        return self.hub

    def build(self, root, kind, seed, offline, progress, checks=None):
        self.built.append((kind, offline) if checks is None else (kind, offline, checks))
        if kind == "gpt2" and not self.gpt2_builds:
            raise ReferenceUnavailable("could not build the gpt2 reference: HTTP 503")
        return read_entry(write_entry(refcache.entry_dir(root, kind, seed, checks), kind, checks), kind)

    def progress(self, message, fraction=None):
        self.said.append(message)


def prepared(root: Path, kind: str) -> Path:
    return write_entry(refcache.entry_dir(root, kind, 0), kind)


def test_auto_takes_gpt2_from_the_hugging_face_cache_without_asking_the_hub(monkeypatch, tmp_path):
    stand = Stand(monkeypatch, in_hf_cache=True, hub=False)
    data = ensure_reference("auto", stand.progress, root=tmp_path)
    assert (data.kind, data.fallback_reason, stand.built, stand.asked_hub) == ("gpt2", None, [("gpt2", True)], 0)


def test_auto_takes_a_gpt2_entry_already_built_without_its_weights_or_the_hub(monkeypatch, tmp_path):
    prepared(tmp_path, "gpt2")
    stand = Stand(monkeypatch, in_hf_cache=False, hub=False)
    data = ensure_reference("auto", stand.progress, root=tmp_path)
    assert (data.kind, data.fallback_reason, stand.built, stand.asked_hub) == ("gpt2", None, [], 0)


def test_auto_with_a_random_entry_prepared_never_asks_the_hub(monkeypatch, tmp_path):
    prepared(tmp_path, "random")
    stand = Stand(monkeypatch, in_hf_cache=False, hub=True)
    data = ensure_reference("auto", stand.progress, root=tmp_path)
    assert (data.kind, data.fallback_reason, stand.built, stand.asked_hub) == ("random", NOT_CACHED, [], 0)


def test_auto_with_nothing_prepared_asks_the_hub_once_and_downloads_gpt2(monkeypatch, tmp_path):
    stand = Stand(monkeypatch, in_hf_cache=False, hub=True)
    data = ensure_reference("auto", stand.progress, root=tmp_path)
    assert (data.kind, data.fallback_reason, stand.built, stand.asked_hub) == ("gpt2", None, [("gpt2", False)], 1)


def test_auto_offline_with_nothing_prepared_builds_the_random_reference_and_says_why(monkeypatch, tmp_path):
    stand = Stand(monkeypatch, in_hf_cache=False, hub=False)
    data = ensure_reference("auto", stand.progress, root=tmp_path)
    assert (data.kind, data.fallback_reason, stand.built, stand.asked_hub) == (
        "random",
        NOT_CACHED,
        [("random", True)],
        1,
    )


def test_auto_falls_back_with_the_downloads_own_failure(monkeypatch, tmp_path):
    stand = Stand(monkeypatch, in_hf_cache=False, hub=True, gpt2_builds=False)
    data = ensure_reference("auto", stand.progress, root=tmp_path)
    assert (data.kind, data.fallback_reason) == ("random", "could not build the gpt2 reference: HTTP 503")
    assert stand.built == [("gpt2", False), ("random", True)]


def test_auto_rebuilds_a_damaged_gpt2_entry_from_the_cache_or_else_falls_back(monkeypatch, tmp_path):
    (prepared(tmp_path, "gpt2") / "vocabulary.json").unlink()
    stand = Stand(monkeypatch, in_hf_cache=False, hub=False)
    data = ensure_reference("auto", stand.progress, root=tmp_path)
    assert (data.kind, data.fallback_reason, stand.built) == ("random", NOT_CACHED, [("random", True)])
    assert stand.said[0].endswith("is damaged (missing vocabulary.json); rebuilding it")
    assert not refcache.entry_dir(tmp_path, "gpt2", 0).exists()  # removed, so the next --download starts clean

    (prepared(tmp_path / "again", "gpt2") / "vocabulary.json").unlink()
    stand = Stand(monkeypatch, in_hf_cache=True, hub=False)
    data = ensure_reference("auto", stand.progress, root=tmp_path / "again")
    assert (data.kind, stand.built) == ("gpt2", [("gpt2", True)])


def test_gpt2_requested_without_its_weights_or_the_hub_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    stand = Stand(monkeypatch, in_hf_cache=False, hub=False)
    with pytest.raises(ReferenceUnavailable) as raised:
        ensure_reference("gpt2", stand.progress, root=tmp_path)
    assert str(raised.value) == (
        f"GPT-2 is not in the Hugging Face cache ({tmp_path / 'hub'}) and huggingface.co cannot be reached"
    )
    assert stand.built == []


def test_random_requested_is_built_offline_once_then_read(monkeypatch, tmp_path):
    stand = Stand(monkeypatch, in_hf_cache=True, hub=True)
    assert ensure_reference("random", stand.progress, root=tmp_path).kind == "random"
    assert ensure_reference("random", stand.progress, root=tmp_path).kind == "random"
    assert (stand.built, stand.asked_hub) == ([("random", True)], 0)


def test_two_graders_on_a_cold_cache_build_once_the_second_waiting_for_the_first(monkeypatch, tmp_path):
    stand = Stand(monkeypatch, in_hf_cache=False, hub=False)
    first_building, first_may_finish = threading.Event(), threading.Event()

    def slow_build(*args):
        first_building.set()
        assert first_may_finish.wait(10)
        return stand.build(*args)

    monkeypatch.setattr(refcache, "build_entry", slow_build)
    kinds: list[str] = []
    graders = [threading.Thread(target=lambda: kinds.append(ensure_reference("random", stand.progress, tmp_path).kind))]
    graders[0].start()
    assert first_building.wait(10)
    graders.append(
        threading.Thread(target=lambda: kinds.append(ensure_reference("random", stand.progress, tmp_path).kind))
    )
    graders[1].start()
    waiting = f"another grader is building the reference at {refcache.entry_dir(tmp_path, 'random', 0)}; waiting for it"
    for _ in range(1000):  # the second grader says it waits, then waits: the first has not finished
        if stand.said:
            break
        graders[1].join(0.01)
    assert stand.said == [waiting] and graders[1].is_alive()
    first_may_finish.set()
    for grader in graders:
        grader.join(10)
    assert (kinds, stand.built) == (["random", "random"], [("random", True)])


def test_an_unwritable_cache_builds_in_a_temporary_one_for_this_run(monkeypatch, tmp_path):
    stand = Stand(monkeypatch, in_hf_cache=False, hub=False)
    build = stand.build

    def refusing(root, *args):
        if root == tmp_path / "cache":
            raise PermissionError(13, "Permission denied")
        return build(root, *args)

    monkeypatch.setattr(refcache, "build_entry", refusing)
    data = ensure_reference("random", stand.progress, root=tmp_path / "cache")
    assert stand.said == [
        f"cannot write the reference cache at {tmp_path / 'cache'} (Permission denied); using a temporary one for "
        "this run"
    ]
    assert data.kind == "random" and Path(data.owner.name) in data.directory.parents
    assert tmp_path not in data.directory.parents


def test_the_hugging_face_cache_holds_gpt2_only_with_its_config_and_weights(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snapshot = tmp_path / "models--gpt2" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert not refcache.gpt2_in_hf_cache()
    (snapshot / "model.safetensors").write_bytes(b"")
    assert refcache.gpt2_in_hf_cache()


def test_the_hugging_face_cache_is_found_as_huggingface_hub_finds_it(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert refcache.hf_hub_cache() == tmp_path / "home" / "hub"
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert refcache.hf_hub_cache() == tmp_path / "xdg" / "huggingface" / "hub"


def test_offline_the_hub_is_unreachable_without_a_connection_tried(monkeypatch):
    tried = []

    def connect(address, timeout):
        tried.append(address)
        if address != ("huggingface.co", 443):
            raise OSError("unreachable")
        return contextlib.nullcontext()

    monkeypatch.setattr(socket, "create_connection", connect)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert refcache.hub_reachable() is False and tried == []
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert refcache.hub_reachable() is True and tried == [("huggingface.co", 443)]


# --- an entry of the checks graded ------------------------------------------------------------------------------------


@pytest.fixture
def two_checks(monkeypatch):
    """The registry stood in for by this file's two checks, so that `embed` alone is a selection and both are all."""
    from types import SimpleNamespace

    import grader.checks

    monkeypatch.setattr(grader.checks, "registry", lambda: tuple(SimpleNamespace(id=check) for check in CASES))


def test_grading_a_selection_from_a_cold_cache_builds_an_entry_of_its_checks_only(monkeypatch, tmp_path, two_checks):
    stand = Stand(monkeypatch, in_hf_cache=False, hub=False)
    data = ensure_reference("random", stand.progress, root=tmp_path, checks=["embed"])
    assert stand.built == [("random", True, frozenset({"embed"}))]
    assert set(data.meta["cases"]) == {"embed"} and sorted(data.expected("embed")) == ["small"]
    assert (
        data.directory
        == refcache.entry_dir(tmp_path, "random", 0, ["embed"])
        != refcache.entry_dir(tmp_path, "random", 0)
    )
    assert ensure_reference("random", stand.progress, root=tmp_path, checks=["embed"]).directory == data.directory
    assert len(stand.built) == 1  # read again, not built again


def test_grading_more_checks_later_builds_an_entry_that_holds_them(monkeypatch, tmp_path, two_checks):
    stand = Stand(monkeypatch, in_hf_cache=False, hub=False)
    first = ensure_reference("random", stand.progress, root=tmp_path, checks=["embed"])
    more = ensure_reference("random", stand.progress, root=tmp_path, checks=["embed", "attention"])
    assert stand.built == [("random", True, frozenset({"embed"})), ("random", True)]  # both checks are every check
    assert set(more.meta["cases"]) == {"embed", "attention"} and more.directory == refcache.entry_dir(
        tmp_path, "random", 0
    )
    # The whole entry now serves any selection; the first stays where it was, unread.
    assert ensure_reference("random", stand.progress, root=tmp_path, checks=["embed"]).directory == more.directory
    assert ensure_reference("random", stand.progress, root=tmp_path, checks=["attention"]).directory == more.directory
    assert len(stand.built) == 2 and first.directory.is_dir()


def test_a_selection_entry_that_lacks_one_of_its_checks_is_rebuilt(monkeypatch, tmp_path, two_checks):
    stand = Stand(monkeypatch, in_hf_cache=False, hub=False)
    directory = refcache.entry_dir(tmp_path, "random", 0, ["embed"])
    write_entry(directory, checks=["attention"])  # under embed's name: not what its builder would have left
    data = ensure_reference("random", stand.progress, root=tmp_path, checks=["embed"])
    assert stand.said == [f"the reference cache at {directory} is damaged (it holds no cases for embed); rebuilding it"]
    assert set(data.meta["cases"]) == {"embed"} and stand.built == [("random", True, frozenset({"embed"}))]


def test_a_tampered_selection_entry_breaks_the_seal(monkeypatch, tmp_path, two_checks, confined):
    stand = Stand(monkeypatch, in_hf_cache=False, hub=False)
    data = ensure_reference("random", stand.progress, root=tmp_path, checks=["embed"])
    save_file({"embed/small": np.array([[9.0, 9.0]], F32)}, str(data.directory / "expected.safetensors"))
    broken = "expected.safetensors is not what the reference builder wrote"
    assert Seal(read_entry(data.directory, "random"), ["embed"]).broken() == broken
