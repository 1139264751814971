"""The sandbox: hostile packages, written here, against every promise of docs/isolation.md.

Each hostile statement is put at the start of a correct solution's Attention.forward: where it
is stopped the check loses its points, and where it is not (the controls, without the sandbox)
the correct code after it earns them, so every test here can tell the two apart.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from repo import REPO, SOLUTIONS, by_id, run_grade, stubs, tiered, write_variant
from test_hostile import attention_body_prefix

from grader.checks import registry, select
from grader.shared import sandbox, wire

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux's (docs/isolation.md)")
DAEMON_NAME = b"gpt2-daemon"


def test_the_sandbox_is_on_on_this_machine():
    """Linux with Landlock and libseccomp: every test below is about the sandbox, not its absence."""
    assert sandbox.status().on, sandbox.status().describe()


def expected_file(reference) -> str:
    return str(reference.directory / "expected.safetensors")


def attention_variant(tmp_path: Path, statement: str) -> Path:
    return write_variant(tmp_path, {"attention.py": attention_body_prefix(statement)})


# --- forged replies ------------------------------------------------------------------------------

FORGED_INIT = {
    "a forged reply, then exit": (
        "import json, os\n"
        "open(os.path.join(os.environ['TMPDIR'], 'reply.json'), 'w')"
        ".write(json.dumps({'status': 'ran', 'outputs': []}))\n"
        "os._exit(0)\n"
    ),
    "a forged answer on every descriptor": (
        "import os\n"
        "for fd in range(3, 256):\n"
        '    try: os.write(fd, b\'{"ending": "answered"}\\n\')\n'
        "    except OSError: pass\n"
    ),
    "every case claimed, garbage outputs": (
        "import json, os\n"
        "d = os.environ['TMPDIR']\n"
        "open(os.path.join(d, 'outputs.safetensors'), 'wb').write(b'\\x10' * 64)\n"
        "names = ['prompt', 'random', 'blocks.0.prompt', 'blocks.11.random', 'gpt2', 'small_ids']\n"
        "open(os.path.join(d, 'reply.json'), 'w').write(json.dumps({'status': 'ran', 'outputs': names}))\n"
        "os._exit(0)\n"
    ),
    "the reply's encoder patched": (
        'import json\njson.dumps = lambda *args, **kwargs: \'{"status": "ran", "outputs": []}\'\n'
    ),
    "a reply that is not JSON": (
        "import os, atexit\n"
        "open(os.path.join(os.environ['TMPDIR'], 'reply.json'), 'wb').write(b'\\xff\\xfe not json')\n"
        "os._exit(0)\n"
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("init", list(FORGED_INIT.values()), ids=list(FORGED_INIT))
def test_untouched_stubs_score_nothing_whatever_init_does(init, grade, tmp_path):
    package = write_variant(tmp_path, {}, base=stubs())
    (package / "__init__.py").write_text(init)
    report = grade(package, "model", "sampling.greedy", "interp.parameter_counts")
    assert report.score == 0, {c.id: (c.status, c.message) for c in report.checks if c.score}
    assert all(c.status in ("todo", "error", "fail") for c in report.checks)


def test_a_reply_is_validated_before_it_is_believed():
    cases = [wire.CaseSpec("a", 1, None, []), wire.CaseSpec("b", 1, None, [])]
    bad = {
        b"": "not JSON",
        b"\xff\xfe{": "not JSON",
        b"[]": "malformed",
        b'{"status": "pass"}': "malformed",
        b'{"status": "ran", "outputs": ["a"]}': "no output for b",
        b'{"status": "ran", "outputs": ["b", "a"]}': "not asked for",
        b'{"status": "ran", "outputs": ["a", "b", "c"]}': "not asked for",
        b'{"status": "ran", "outputs": ["a", "b"], "param_counts": {"x": "many"}}': "malformed",
        b'{"status": "todo", "where": {"line": 3}}': "malformed",
    }
    for raw, reason in bad.items():
        parsed = wire.parse_reply(raw, cases)
        assert isinstance(parsed, wire.BadReply) and reason in parsed.reason, (raw, parsed)
    honest = wire.parse_reply(
        b'{"status": "error", "error": "ValueError: \\u001b[2J bad \\udc80", "outputs": ["a"]}', cases
    )
    assert isinstance(honest, wire.Reply) and honest.error == "ValueError: \ufffd[2J bad \ufffd"


def test_no_check_starts_as_pass(reference):
    """A reply that claims a run but brings no tensors is an error, whatever it claims."""
    from grader.host.runner import Outcome
    from grader.host.verdict import Evidence, judge

    check = next(c for c in registry() if c.id == "embed")
    names = [case.name for case in reference.cases("embed")]
    for outcome in (Outcome("answered", wire.Reply("ran")), Outcome("answered", wire.Reply("ran", outputs=names))):
        result = judge(Evidence(check, outcome, reference))
        assert result.status == "error" and result.score == 0, result


# --- reading the reference, and delegating to it -------------------------------------------------


def reading_routes(reference) -> dict[str, str]:
    expected = expected_file(reference)
    scratch_link = "__import__('os').environ['TMPDIR'] + '/x'"
    return {
        "open": f"open({expected!r}, 'rb').read(1)",
        "safetensors (Rust)": f"__import__('safetensors').safe_open({expected!r}, 'np').keys()",
        "ctypes": f"assert __import__('ctypes').CDLL(None).open({expected!r}.encode(), 0) >= 0",
        "a subprocess": f"__import__('subprocess').run(['head', '-c1', {expected!r}], check=True, capture_output=True)",
        "a symlink": f"__import__('os').symlink({expected!r}, {scratch_link}); open({scratch_link}, 'rb').read(1)",
        "a hard link": f"__import__('os').link({expected!r}, {scratch_link}); open({scratch_link}, 'rb').read(1)",
        "the solutions": (
            f"assert __import__('ctypes').CDLL(None).open({str(SOLUTIONS / 'attention.py')!r}.encode(), 0) >= 0"
        ),
        "the grader's checks": "import grader.checks.model",
        "the grader's reference": f"open({str(REPO / 'grader' / 'reference.py')!r}).read(1)",
        "transformer_lens, past the import blocker": (
            "import sys; sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != 'ReferenceBlocker']; "
            "import transformer_lens"
        ),
        "the grader's /proc": "open('/proc/%d/environ' % __import__('os').getppid(), 'rb').read(1)",
        "the grader's memory": "open('/proc/%d/mem' % __import__('os').getppid(), 'rb')",
        "a signal to the grader": "__import__('os').kill(__import__('os').getppid(), 0)",
        "the Hugging Face cache": f"__import__('os').listdir({os.environ['HF_HUB_CACHE']!r})",
    }


@pytest.fixture(scope="module")
def routes(reference):
    routes = reading_routes(reference)
    assert list(routes) == ROUTE_IDS
    return routes


ROUTE_IDS = [
    "open",
    "safetensors (Rust)",
    "ctypes",
    "a subprocess",
    "a symlink",
    "a hard link",
    "the solutions",
    "the grader's checks",
    "the grader's reference",
    "transformer_lens, past the import blocker",
    "the grader's /proc",
    "the grader's memory",
    "a signal to the grader",
    "the Hugging Face cache",
]


# One route per way out (a file, native code, another process, a link, the grader's process) in
# `make test`; every route in `make test-all`.
QUICK_ROUTES = ("open", "ctypes", "a subprocess", "a symlink", "the grader's /proc")


@pytest.mark.parametrize("route", tiered(ROUTE_IDS, QUICK_ROUTES))
def test_reaching_for_the_reference_scores_nothing(route, routes, grade, tmp_path):
    os.makedirs(os.environ["HF_HUB_CACHE"], exist_ok=True)
    results = by_id(grade(attention_variant(tmp_path, routes[route]), "embed", "attention"))
    assert results["attention"].score == 0 and results["attention"].status in ("fail", "error"), results["attention"]
    assert results["embed"].status == "pass"


@pytest.mark.parametrize("route", tiered(["ctypes", "a subprocess", "the grader's /proc"], ("ctypes",)))
def test_without_the_sandbox_the_same_code_gets_through(route, routes, grade, tmp_path):
    """The control: unconfined, these routes reach the file, so the tests above test the sandbox."""
    result = by_id(grade(attention_variant(tmp_path, routes[route]), "attention", sandbox=False))["attention"]
    assert result.status == "pass", result.message


SHM_KEY = 0x6770_7432  # "gpt2"
IPC_CREAT, IPC_RMID = 0o1000, 0
SHM = f"(lambda libc: libc.shmget({SHM_KEY}, 4096, {{flags}}))(__import__('ctypes').CDLL(None))"
LEAVE_A_SEGMENT = SHM.format(flags=oct(IPC_CREAT | 0o666))  # where it is refused, the check goes on
FIND_NO_SEGMENT = f"assert {SHM.format(flags='0')} < 0, 'an earlier check left it'"


@pytest.fixture
def no_segment():
    import ctypes

    libc = ctypes.CDLL(None)

    def remove() -> None:
        found = libc.shmget(SHM_KEY, 0, 0)
        if found >= 0:
            libc.shmctl(found, IPC_RMID, None)

    remove()
    yield
    remove()


def test_shared_memory_does_not_outlive_its_check(no_segment, grade, tmp_path):
    """SysV shared memory is no file, so Landlock does not see it, and it outlives its process: the
    system-call filter refuses it (and as root, the check's own IPC namespace would end it)."""
    leave, find = (
        attention_variant(tmp_path / "leave", LEAVE_A_SEGMENT),
        attention_variant(tmp_path / "find", FIND_NO_SEGMENT),
    )
    assert by_id(grade(leave, "attention"))["attention"].status == "pass"
    assert by_id(grade(find, "attention"))["attention"].status == "pass"
    # The control: unconfined, the segment stays, and the next check finds it.
    assert by_id(grade(leave, "attention", sandbox=False))["attention"].status == "pass"
    found = by_id(grade(find, "attention", sandbox=False))["attention"]
    assert found.status == "error" and "an earlier check left it" in found.message, found.message


# Each check's forward leaves a directory it locks in its scratch, then tries to write into every other scratch
# directory a check of this grading could have had; its own (the control) it must reach.
OTHER_SCRATCHES = """
import os, pathlib
mine = pathlib.Path(os.environ["TMPDIR"])
(mine / "probe").write_text("mine")
os.makedirs(mine / "locked" / "inner", exist_ok=True)
os.chmod(mine / "locked", 0)
reached = []
for lane in ("gpt2", "stand-ins"):
    for n in range(1, 200):
        other = mine.parent / f"check-{lane}-{n}"
        try:
            (other / "probe").write_text("theirs")
        except OSError:
            continue
        if other != mine:
            reached.append(other.name)
assert not reached, f"reached {reached}"
"""
REACH_OTHER_SCRATCHES = f"exec({OTHER_SCRATCHES!r})"


def test_no_check_reaches_the_scratch_of_an_earlier_one(grade, tmp_path):
    """A fork server keeps one Landlock ruleset per package, and each check adds its scratch to it: an earlier
    check's directory, locked as it may be, is gone before the next check starts (one lane: GPT-2's checks)."""
    results = by_id(grade(attention_variant(tmp_path, REACH_OTHER_SCRATCHES), "attention", "block", "transformer"))
    assert all(result.status == "pass" for result in results.values()), results


def send_a_datagram(port: int) -> str:
    """Hostile code that sends one datagram to this port, and goes on whatever stops it."""
    return (
        "with __import__('contextlib').suppress(OSError): "
        f"__import__('socket').socket(2, 2).sendto(b'leak', ('127.0.0.1', {port}))"
    )


@pytest.mark.slow  # the network's promise runs in `make test` as test_no_network
def test_no_datagram_leaves_the_check(grade, tmp_path):
    """UDP is out of Landlock's reach: the system-call filter makes no socket but unix ones (and as
    root, the check's own network namespace would have no way out)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.5)
        sent = send_a_datagram(listener.getsockname()[1])
        confined = by_id(grade(attention_variant(tmp_path / "on", sent), "attention"))["attention"]
        assert confined.status == "pass", confined.message
        with pytest.raises(TimeoutError):
            listener.recv(16)
        # The control: unconfined, the datagram arrives.
        unconfined = by_id(grade(attention_variant(tmp_path / "off", sent), "attention", sandbox=False))["attention"]
        assert unconfined.status == "pass" and listener.recv(16) == b"leak", unconfined.message


def test_no_network(grade, tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        statement = f"__import__('socket').create_connection(('127.0.0.1', {port}), timeout=5)"
        confined = by_id(grade(attention_variant(tmp_path / "on", statement), "attention"))["attention"]
        unconfined = by_id(grade(attention_variant(tmp_path / "off", statement), "attention", sandbox=False))[
            "attention"
        ]
    assert confined.score == 0 and "Permission" in confined.message, confined.message
    assert unconfined.status == "pass", unconfined.message


# --- writing: the cache, the grader, the reports ------------------------------------------------


def poison(path: str) -> str:
    """Overwrite the start of `path` through libc, past the audit hook on Python's open."""
    return (
        f"libc = __import__('ctypes').CDLL(None); fd = libc.open({path!r}.encode(), 2); assert fd >= 0; "
        "libc.write(fd, b'poison', 6)"
    )


def test_the_cache_cannot_be_poisoned(reference, grade, tmp_path):
    from grader.shared.entry import part_digests

    result = by_id(grade(attention_variant(tmp_path, poison(expected_file(reference))), "attention"))["attention"]
    assert result.score == 0, result.message
    expected = {part: digest for part, digest in reference.meta["digests"].items() if part.startswith("expected.")}
    assert expected and dict(part_digests(reference.directory, list(expected))) == expected


def test_a_poisoned_cache_is_never_judged_from(reference, tmp_path):
    """Unconfined, the write lands; the seal notices it before judging."""
    from grader.host.pipeline import GradingRun, ReferenceTampered
    from grader.host.refcache import read_entry
    from grader.host.runner import LearnerProcesses, Limits

    copy = tmp_path / reference.directory.name
    shutil.copytree(reference.directory, copy)
    copied = read_entry(copy, reference.kind)
    package = attention_variant(tmp_path, poison(str(copy / "expected.safetensors")))
    checks = [c for c in registry() if c.id == "attention"]
    with (
        LearnerProcesses(Limits(sandbox=False)) as processes,
        pytest.raises(ReferenceTampered, match="expected.safetensors"),
    ):
        GradingRun(package, checks, copied, processes=processes).finished()


def test_the_grader_cannot_be_edited(grade, tmp_path):
    target = REPO / "grader" / "host" / "render" / "json.py"
    before = target.read_bytes()
    result = by_id(grade(attention_variant(tmp_path, f"open({str(target)!r}, 'a').write('# pwned')"), "attention"))[
        "attention"
    ]
    assert result.score == 0 and target.read_bytes() == before


# --- processes: none survives, memory counts them all --------------------------------------------

DAEMON = (
    "import os, ctypes, time\n"
    "        if os.fork() == 0:\n"
    "            os.setsid()\n"
    "            if os.fork() == 0:\n"
    f"                ctypes.CDLL(None).prctl(15, {DAEMON_NAME!r}, 0, 0, 0)\n"
    "                time.sleep(120)\n"
    "            os._exit(0)"
)


def daemons() -> list[int]:
    found = []
    for process in psutil.process_iter(["name"]):
        if process.info["name"] == DAEMON_NAME.decode():
            found.append(process.pid)
    return found


@pytest.mark.parametrize("confined", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["sandbox", "no sandbox"])
def test_no_learner_process_outlives_its_check(confined, grade, tmp_path):
    """The daemon holds every descriptor the check had: the check still passes, and nothing is left."""
    result = by_id(grade(attention_variant(tmp_path, DAEMON), "attention", timeout=20, sandbox=confined))["attention"]
    assert result.status == "pass", result.message
    assert daemons() == []


# About a minute: the grading waits out the daemon. test_no_learner_process_outlives_its_check runs in `make test`.
@pytest.mark.slow
def test_reports_are_written_after_every_learner_process_is_gone(reference, tmp_path):
    report = tmp_path / "report.json"
    late_write = (  # a daemon that waits for the report, then overwrites it
        "import os, time\n"
        "        if os.fork() == 0:\n"
        "            os.setsid()\n"
        f"            while not os.path.exists({str(report)!r}): time.sleep(0.01)\n"
        "            time.sleep(0.1)\n"
        f"            open({str(report)!r}, 'w').write('forged')\n"
        "            os._exit(0)"
    )
    package = attention_variant(tmp_path, late_write)
    result = run_grade(
        "--reference", "random", "--exercises", str(package), "attention", "--no-sandbox", "--json", str(report)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    time.sleep(1)  # a daemon still alive would have written by now
    assert json.loads(report.read_text())["checks"][0]["status"] == "pass"


def test_memory_is_limited_for_the_check_as_a_whole(grade, tmp_path):
    """Three processes of 0.6 GB each: under any per-process cap of 1 GB, over the check's."""
    hog = (
        "import os, time\n"
        "        for _ in range(3):\n"
        "            if os.fork() == 0:\n"
        "                block = bytearray(600 * 2**20)\n"
        "                time.sleep(60)\n"
        "        time.sleep(60)"
    )
    result = by_id(grade(attention_variant(tmp_path, hog), "attention", memory_gb=1, timeout=30))["attention"]
    assert result.status == "error" and "more than 1 GB" in result.message, result.message


# --- honest mistakes that used to crash the grading ----------------------------------------------


def test_honest_oddities_are_graded(grade, tmp_path):
    bfloat16 = attention_variant(tmp_path / "bf16", "low = normalized_resid_pre.to(torch.bfloat16)")
    surrogate = attention_variant(tmp_path / "surrogate", "raise ValueError('bad \\udc80 value \\x1b[31m red')")
    results = by_id(grade(bfloat16, "attention")) | {"surrogate": by_id(grade(surrogate, "attention"))["attention"]}
    assert results["attention"].status == "pass", results["attention"].message
    odd = results["surrogate"]
    assert odd.status == "error" and "bad \ufffd value \ufffd[31m red" in odd.message, odd.message
    json.dumps(odd.to_dict(), allow_nan=False).encode("utf-8")


def test_the_report_never_holds_invalid_json_numbers():
    from grader.host.render import json as json_renderer
    from grader.host.results import CheckResult, Report

    report = Report("random", "pkg", [CheckResult("x", "model", "", "fail", 1, max_abs_diff=float("inf"))])
    assert json.loads(json_renderer.render(report))["checks"][0]["max_abs_diff"] is None


# --- batch grading, GitHub, notebooks -----------------------------------------------------------


def test_batch_rejects_symbolic_links(reference, tmp_path):
    from grader.host.tools.batch import Options, grade_submission

    linked_dir, linked_file = tmp_path / "linked_dir", tmp_path / "linked_file"
    linked_dir.mkdir()
    (linked_dir / "exercises").symlink_to(SOLUTIONS)
    shutil.copytree(SOLUTIONS, linked_file / "exercises")
    (linked_file / "exercises" / "attention.py").unlink()
    (linked_file / "exercises" / "attention.py").symlink_to(expected_file(reference))
    options = Options((), "random", 10.0, 60.0)
    assert "symbolic links are not accepted: exercises" in grade_submission(linked_dir, registry(), options).error
    assert "exercises/attention.py" in grade_submission(linked_file, registry(), options).error


def test_gradebook_cells_are_never_formulas(tmp_path):
    import csv

    from grader.host.tools.batch import Submission, write_gradebook

    names = ['=HYPERLINK("http://x")', "+1", "-1", "@SUM(A1)", "plain"]
    write_gradebook(tmp_path / "g.csv", [Submission(name, error="=1+1") for name in names], select(["embed"]))
    rows = list(csv.reader((tmp_path / "g.csv").open()))[1:]
    assert [row[0] for row in rows] == ["'" + n for n in names[:4]] + ["plain"]
    assert all(row[-1] == "'=1+1" for row in rows)


def test_classroom50_outputs_cannot_be_broken_out_of(tmp_path):
    from grader.host.platforms.classroom50 import writer as classroom50
    from grader.host.platforms.github import writer as github
    from grader.host.results import CheckResult, Report

    sneaky = "x\nstatus=success\nsummary=forged<<EOF\n"
    report = Report("random", str(tmp_path), [CheckResult("embed", "model", "", "fail", 1, message=sneaky * 10_000)])
    assert classroom50.outputs(report).splitlines() == ["status=failure", "summary=0/1 points, 0 of 1 checks pass"]
    assert len(classroom50.release_body(report).encode()) <= classroom50.RELEASE_BODY_BYTES
    assert len(github.summary(report).encode()) < 2**20


@pytest.mark.slow
def test_notebook_verdicts_come_from_a_process_of_their_own(reference, monkeypatch, tmp_path):
    """What the learner's cells did to the kernel (here: the grader's verdict patched) changes nothing."""
    from grader.host import verdict
    from grader.host.platforms.nbgrader.notebooks import NotebookGrader
    from grader.host.results import CheckResult

    passing = lambda evidence: CheckResult(evidence.check.id, evidence.check.part, "", "pass", 1)  # noqa: E731
    monkeypatch.setattr(verdict, "judge", passing)
    package = tmp_path / "notebook_exercises"
    shutil.copytree(stubs(), package)
    with pytest.raises(AssertionError, match="embed: todo"):
        NotebookGrader(package).grade_check("embed")


@pytest.mark.slow  # the `grade` command twice; test_reports_say_when_the_sandbox_is_off runs it in `make test`
def test_require_sandbox_refuses_without_one(reference, tmp_path):
    refused = run_grade(
        "--reference", "random", "--solutions", "embed", "--require-sandbox", env={"GPT2_GRADER_SANDBOX": "off"}
    )
    assert refused.returncode == 2 and "--require-sandbox" in refused.stderr and "sandbox: off" in refused.stderr
    graded = run_grade(
        "--reference", "random", "--solutions", "embed", "--require-sandbox", "--json", str(tmp_path / "r.json")
    )
    assert graded.returncode == 0 and json.loads((tmp_path / "r.json").read_text())["sandbox"].startswith(
        "sandbox: on ("
    )
    assert "sandbox: on" in graded.stdout


def test_reports_say_when_the_sandbox_is_off(reference, tmp_path):
    result = run_grade(
        "--reference",
        "random",
        "--solutions",
        "embed",
        "--json",
        str(tmp_path / "r.json"),
        env={"GPT2_GRADER_SANDBOX": "off"},
    )
    assert result.returncode == 0 and "sandbox: off (GPT2_GRADER_SANDBOX=off)" in result.stdout
    assert json.loads((tmp_path / "r.json").read_text())["sandbox"] == "sandbox: off (GPT2_GRADER_SANDBOX=off)"


def test_expected_outputs_never_reach_the_learner(reference):
    """The check's process is handed the weights and its own inputs: no expected tensor is among them."""
    from safetensors.numpy import load_file

    expected = load_file(expected_file(reference))
    inputs = load_file(str(reference.inputs_path("attention")))
    answers = [value for key, value in expected.items() if key.startswith("attention/")]
    assert not any(
        value.shape == answer.shape and np.array_equal(value, answer) for value in inputs.values() for answer in answers
    )
