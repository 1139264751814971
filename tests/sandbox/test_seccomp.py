"""The system-call filter (seccomp) and Landlock's fallbacks: what Landlock does not see, closed for root
and for an ordinary user alike.

As in test_sandbox.py, each hostile statement is put at the start of a correct Attention.forward, and
each test has its control: the same code getting through with the sandbox off. The checks run as the
user running these tests (root, here and on Gradescope) and, through the `grade` command started as an
unprivileged user, as an ordinary user would run them (a laptop, GitHub's runners): there the grader
drops no privilege and makes no namespace, so the filter alone stops what crosses checks.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from repo import REPO, SOLUTIONS, by_id, tiered
from test_sandbox import FIND_NO_SEGMENT, LEAVE_A_SEGMENT, attention_variant, no_segment, send_a_datagram  # noqa: F401

from grader.shared import sandbox

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux's (docs/isolation.md)")

UNPRIVILEGED_USER = 65533  # no one's: not nobody, whom the grader itself becomes as root
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = -3, -4
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_LINK, KEYCTL_SEARCH, KEYCTL_SET_TIMEOUT = 1, 8, 10, 15
PTRACE_SEIZE = 0x4206  # attaches without stopping the tracee, which here is the grader's fork server
IO_URING_PARAMS_SIZE = 120  # sizeof(struct io_uring_params)


def system_call(name: str) -> int:
    """The number of a system call on this machine, for hostile code that calls it through syscall(2)."""
    import pyseccomp

    return pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)


def program_statement(program: str) -> str:
    """One statement that runs `program` (lines of Python) in a namespace of its own."""
    return f"exec({program!r}, {{}})"


def libc_call(expression: str) -> str:
    """A statement's expression over `libc`, the C library, as hostile code reaches it through ctypes."""
    return f"(lambda libc: {expression})(__import__('ctypes').CDLL(None))"


# --- an ordinary user -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def as_ordinary_user(reference, tmp_path_factory):
    """grade(package, check_id, *options) -> that check's result: the `grade` command as an unprivileged
    user runs it, with a home, a cache (a copy of the session's reference) and a report of its own.

    As root, the user keeps the one capability to read files: the interpreter lives in root's home here,
    and the confined check keeps no more than Landlock allows. It changes nothing on the channels tried."""
    home = tmp_path_factory.mktemp("ordinary-user")
    cache, hub = home / "cache", home / "hf-empty"
    shutil.copytree(reference.directory, cache / reference.directory.name)
    hub.mkdir()
    as_user = []
    if os.geteuid() == 0:
        for path in (home, *home.rglob("*")):
            os.chown(path, UNPRIVILEGED_USER, UNPRIVILEGED_USER)
        as_user = ["setpriv", f"--reuid={UNPRIVILEGED_USER}", f"--regid={UNPRIVILEGED_USER}", "--clear-groups"]
        as_user += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--"]
    environment = {**os.environ, "HOME": str(home), "GPT2_GRADER_CACHE": str(cache), "HF_HUB_CACHE": str(hub)}

    def grade(package: Path, check_id: str, *options: str) -> dict:
        report = home / "report.json"
        command = [sys.executable, "-m", "grader", "--reference", "random", "--exercises", str(package), check_id]
        ran = subprocess.run(
            [*as_user, *command, "--json", str(report), *options],
            cwd=REPO,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ran.returncode in (0, 1), ran.stdout[-2000:] + ran.stderr[-2000:]
        graded = json.loads(report.read_text())
        assert "--no-sandbox" in options or "; your own user" in graded["sandbox"], graded["sandbox"]
        return next(check for check in graded["checks"] if check["id"] == check_id)

    return grade


@pytest.mark.slow  # the `grade` command, several times: about 10 s each
def test_the_ordinary_user_is_confined_as_one(as_ordinary_user, tmp_path):
    """The fixture's own check: its grader runs as no root, so it drops nothing and makes no namespace."""
    uid = f"assert __import__('os').geteuid() == {os.geteuid() or UNPRIVILEGED_USER}, 'the check runs as root'"
    result = as_ordinary_user(attention_variant(tmp_path, uid), "attention")
    assert result["status"] == "pass", result["message"]


# --- the user keyring -----------------------------------------------------------------------------

KEY = f"gpt2-grader-test-{uuid.uuid4().hex[:8]}"  # this session's: a key left by an earlier run is not found


def keyring_statement(body: str) -> str:
    """Hostile code that holds its user's keyring as a login session would (it may not inherit one
    that does), then runs `body` with `keyctl` and `add_key` at hand."""
    return program_statement(
        "import ctypes\n"
        "libc = ctypes.CDLL(None)\n"
        f"keyctl = lambda *args: libc.syscall({system_call('keyctl')}, *args)\n"
        f"add_key = lambda *args: libc.syscall({system_call('add_key')}, *args)\n"
        f"keyctl({KEYCTL_JOIN_SESSION_KEYRING}, None)\n"
        f"keyctl({KEYCTL_LINK}, {KEY_SPEC_USER_KEYRING}, {KEY_SPEC_SESSION_KEYRING})\n"
        f"{body}\n"
    )


LEAVE_A_KEY = keyring_statement(  # the key is gone by itself in 5 minutes
    f"keyctl({KEYCTL_SET_TIMEOUT}, add_key(b'user', {KEY.encode()!r}, b'logits', 6, {KEY_SPEC_USER_KEYRING}), 300)"
)
FIND_NO_KEY = keyring_statement(
    f"assert keyctl({KEYCTL_SEARCH}, {KEY_SPEC_USER_KEYRING}, b'user', {KEY.encode()!r}, 0) < 0, "
    "'an earlier check left it'"
)


@pytest.mark.slow  # two gradings and a keyring; the other system calls the filter refuses run in `make test`
def test_the_user_keyring_carries_nothing_from_one_grading_to_the_next(grade, tmp_path):
    """A user's keyring outlives all its processes: one check stores a key, a later grading's check searches."""
    leave, find = attention_variant(tmp_path / "leave", LEAVE_A_KEY), attention_variant(tmp_path / "find", FIND_NO_KEY)
    assert by_id(grade(leave, "attention"))["attention"].status == "pass"
    found = by_id(grade(find, "attention"))["attention"]
    assert found.status == "pass", found.message
    # The control: unconfined, the key stays, and the next grading's check finds it.
    assert by_id(grade(leave, "attention", sandbox=False))["attention"].status == "pass"
    found = by_id(grade(find, "attention", sandbox=False))["attention"]
    assert found.status == "error" and "an earlier check left it" in found.message, found.message


@pytest.mark.slow  # the `grade` command, several times: about 10 s each
def test_the_user_keyring_carries_nothing_for_an_ordinary_user(as_ordinary_user, tmp_path):
    leave, find = attention_variant(tmp_path / "leave", LEAVE_A_KEY), attention_variant(tmp_path / "find", FIND_NO_KEY)
    assert as_ordinary_user(leave, "attention")["status"] == "pass"
    found = as_ordinary_user(find, "attention")
    assert found["status"] == "pass", found["message"]
    assert as_ordinary_user(leave, "attention", "--no-sandbox")["status"] == "pass"
    found = as_ordinary_user(find, "attention", "--no-sandbox")
    assert found["status"] == "error" and "an earlier check left it" in found["message"], found["message"]


# --- SysV shared memory and UDP, for an ordinary user ----------------------------------------------


@pytest.mark.slow  # the `grade` command, several times: about 10 s each
def test_shared_memory_does_not_outlive_an_ordinary_users_check(no_segment, as_ordinary_user, tmp_path):  # noqa: F811
    leave, find = (
        attention_variant(tmp_path / "leave", LEAVE_A_SEGMENT),
        attention_variant(tmp_path / "find", FIND_NO_SEGMENT),
    )
    assert as_ordinary_user(leave, "attention")["status"] == "pass"
    assert as_ordinary_user(find, "attention")["status"] == "pass"
    # The control: unconfined, the segment stays, and the next check finds it.
    assert as_ordinary_user(leave, "attention", "--no-sandbox")["status"] == "pass"
    found = as_ordinary_user(find, "attention", "--no-sandbox")
    assert found["status"] == "error" and "an earlier check left it" in found["message"], found["message"]


@pytest.mark.slow  # the `grade` command, several times: about 10 s each
def test_no_datagram_leaves_an_ordinary_users_check(as_ordinary_user, tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.5)
        sent = send_a_datagram(listener.getsockname()[1])
        confined = as_ordinary_user(attention_variant(tmp_path / "on", sent), "attention")
        assert confined["status"] == "pass", confined["message"]
        with pytest.raises(TimeoutError):
            listener.recv(16)
        unconfined = as_ordinary_user(attention_variant(tmp_path / "off", sent), "attention", "--no-sandbox")
        assert unconfined["status"] == "pass" and listener.recv(16) == b"leak", unconfined["message"]


# --- sockets, io_uring, ptrace: each call fails ---------------------------------------------------


def families() -> list[socket.AddressFamily]:
    """The families this machine can make a socket of, unconfined: each a control below."""
    found = []
    for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK):
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM):
            found.append(family)
    return found


# make test makes an AF_INET socket; make test-all every family.
@pytest.mark.parametrize("family", tiered(families(), ("AF_INET",), ids=[family.name for family in families()]))
def test_no_socket_but_a_unix_one_can_even_be_made(family, grade, tmp_path):
    made = f"__import__('socket').socket({int(family)}, 2).close()"
    confined = by_id(grade(attention_variant(tmp_path / "on", made), "attention"))["attention"]
    unconfined = by_id(grade(attention_variant(tmp_path / "off", made), "attention", sandbox=False))["attention"]
    assert confined.status == "error" and "Operation not permitted" in confined.message, confined.message
    assert unconfined.status == "pass", unconfined.message


DENIED_STATEMENTS = {
    "io_uring_setup": "assert {} >= 0".format(
        libc_call(
            f"libc.syscall({system_call('io_uring_setup')}, 8, "
            f"__import__('ctypes').create_string_buffer({IO_URING_PARAMS_SIZE}))"
        )
    ),
    "ptrace of the grader": program_statement(  # once: the fork server stays traced by the check,
        "import ctypes, os\n"  # and the next case's seize would fail
        "if not hasattr(os, 'seized'):\n"
        f"    assert ctypes.CDLL(None).ptrace({PTRACE_SEIZE}, os.getppid(), 0, 0) == 0\n"
        "    os.seized = True\n"
    ),
    "ptrace of its own child": program_statement(  # Landlock allows this one: the filter alone stops it
        "import ctypes, os, signal, time\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    time.sleep(30)\n"
        "    os._exit(0)\n"
        "try:\n"
        f"    assert ctypes.CDLL(None).ptrace({PTRACE_SEIZE}, child, 0, 0) == 0\n"
        "finally:\n"
        "    os.kill(child, signal.SIGKILL)\n"
        "    os.waitpid(child, 0)\n"
    ),
}


@pytest.mark.parametrize("call", list(DENIED_STATEMENTS))
def test_denied_calls_fail(call, grade, tmp_path):
    statement = DENIED_STATEMENTS[call]
    confined = by_id(grade(attention_variant(tmp_path / "on", statement), "attention"))["attention"]
    unconfined = by_id(grade(attention_variant(tmp_path / "off", statement), "attention", sandbox=False))["attention"]
    assert confined.status == "error" and confined.score == 0, confined.message
    assert unconfined.status == "pass", unconfined.message


@pytest.mark.slow  # the `grade` command, twice
@pytest.mark.parametrize("call", list(DENIED_STATEMENTS))
def test_denied_calls_fail_for_an_ordinary_user(call, as_ordinary_user, tmp_path):
    """As root the check's change of user already keeps it from tracing even its own child (it is no
    longer dumpable); an ordinary user's check has only the filter."""
    statement = DENIED_STATEMENTS[call]
    confined = as_ordinary_user(attention_variant(tmp_path / "on", statement), "attention")
    unconfined = as_ordinary_user(attention_variant(tmp_path / "off", statement), "attention", "--no-sandbox")
    assert confined["status"] == "error" and confined["points"] == 0, confined["message"]
    assert unconfined["status"] == "pass", unconfined["message"]


def test_no_daemons_unix_socket_can_be_reached(grade, tmp_path):
    """Landlock does not see a connection to a unix socket that exists (a session bus could start anything)."""
    path = tmp_path / "daemon.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as daemon:
        daemon.bind(str(path))
        daemon.listen()
        os.chmod(path, 0o777)  # anyone may connect, the check's user nobody included
        reached = f"__import__('socket').socket(1, 1).connect({str(path)!r})"
        confined = by_id(grade(attention_variant(tmp_path / "on", reached), "attention"))["attention"]
        unconfined = by_id(grade(attention_variant(tmp_path / "off", reached), "attention", sandbox=False))["attention"]
    assert confined.status == "error" and "Operation not permitted" in confined.message, confined.message
    assert unconfined.status == "pass", unconfined.message


# --- honest code -----------------------------------------------------------------------------------

HONEST = program_statement(
    "import multiprocessing, socket, threading, torch\n"
    "a, b = multiprocessing.Pipe()\n"
    "a.send(1)\n"
    "assert b.recv() == 1\n"
    "left, right = socket.socketpair()\n"
    "left.send(b'x')\n"
    "assert right.recv(1) == b'x'\n"
    "worker = threading.Thread(target=lambda: torch.randn(3) @ torch.randn(3))\n"
    "worker.start()\n"
    "worker.join()\n"
    "child = multiprocessing.get_context('fork').Process(target=int)\n"
    "child.start()\n"
    "child.join()\n"
    "assert child.exitcode == 0\n"
)


def test_what_honest_code_does_still_works_confined(grade, tmp_path):
    """Pipes, socket pairs, threads (clone3 is refused: the C library falls back to clone) and forks: all
    a filter could break. (Subprocesses and POSIX semaphores meet Landlock: no program to run, no /dev/shm.)"""
    result = by_id(grade(attention_variant(tmp_path, HONEST), "attention"))["attention"]
    assert result.status == "pass", result.message


# --- Landlock below ABI 4, and what the report says -------------------------------------------------


def confined_child(policy: sandbox.Policy, abi: int, secret: Path) -> dict:
    """Confine a fork of this process to `policy` as if the kernel's Landlock were at `abi`; what it could do."""
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:
        found = {}
        try:
            sandbox.landlock_abi = lambda: abi
            sandbox.confine(policy)
            for name, attempt in (("read", lambda: secret.read_text()), ("inet", lambda: socket.socket().close())):
                try:
                    attempt()
                    found[name] = "done"
                except OSError as error:
                    found[name] = error.strerror
        finally:
            os.write(writing, json.dumps(found).encode())
            os._exit(0)
    os.close(writing)
    with os.fdopen(reading) as answer:
        found = json.loads(answer.read() or "{}")
    os.waitpid(pid, 0)
    return found


@pytest.mark.parametrize("abi", [1, 2, 3])
def test_landlocks_file_rules_hold_below_abi_4(abi, tmp_path):
    """Below ABI 4 Landlock has no network rules; its file rules still confine, and the filter stops TCP."""
    secret = tmp_path / "secret" / "expected.txt"
    secret.parent.mkdir()
    secret.write_text("logits")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    policy = replace(sandbox.policy_for(SOLUTIONS, scratch), ruleset=None)  # made in the child, at `abi`
    confined = confined_child(policy, abi, secret)
    assert confined == {"read": "Permission denied", "inet": "Operation not permitted"}, confined
    # The control: the same confinement, with the secret's directory allowed, reads it.
    allowed = sandbox.Policy((*policy.readable, secret.parent), policy.listable, scratch, policy.system_calls)
    assert confined_child(allowed, abi, secret)["read"] == "done"


@pytest.mark.parametrize(
    ("abi", "layer"),
    [(1, "Landlock ABI 1: files;"), (3, "Landlock ABI 3: files;"), (4, "Landlock ABI 4: files, TCP;")],
)
def test_the_report_names_the_layers_that_hold(abi, layer, monkeypatch):
    monkeypatch.setattr(sandbox, "landlock_abi", lambda: abi)
    described = sandbox.status().describe()
    assert described.startswith(f"sandbox: on ({layer} seccomp: unix sockets only, no SysV IPC"), described


def test_without_landlock_or_libseccomp_there_is_no_sandbox(monkeypatch):
    monkeypatch.setattr(sandbox, "landlock_abi", lambda: 0)
    assert sandbox.status().describe() == (
        "sandbox: off (the kernel has no Landlock (Linux 5.13 or later, with Landlock enabled))"
    )
    monkeypatch.undo()
    monkeypatch.setattr(sandbox, "seccomp_available", lambda: False)
    assert not sandbox.status().on and "libseccomp" in sandbox.status().reason
