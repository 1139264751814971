"""Resources: a check's memory and tasks counted by the kernel, its descriptors, printed output and files capped.

Each hostile statement is put at the start of a correct Attention.forward (`attention_variant`): where it is
stopped the check loses its points; where the cap is lifted (no memory limit, or the check run unforked,
which has none of the per-check caps) the correct code after it earns them.
"""

from __future__ import annotations

import os
import sys
import textwrap

import pytest
from repo import by_id
from test_sandbox import attention_variant

from grader.host import runner
from grader.learner import server
from grader.shared import cgroup, sandbox

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the per-check caps are Linux's (checks run forked)")
kernel_counted = pytest.mark.skipif(
    cgroup.hierarchies() is None, reason="no cgroup the grader may make here (an ordinary user without delegation)"
)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the scratch is a tmpfs of its own where the grader is root")
# Each of these grades a hostile package twice and waits for the kernel to stop it (3 to 8 s each): `make test-all`.
# `make test` keeps the printed output's cap, the scratch's cap and test_sandbox's memory limit.
slow_cap = pytest.mark.slow


def attention(grade, package, **limits):
    return by_id(grade(package, "attention", **limits))["attention"]


def once(code: str) -> str:
    """`code`, a block, as one statement for `attention_variant` that runs at the first call of
    Attention.forward in a process only: the check calls it once per case."""
    guarded = ["import os", "if not os.environ.get('GPT2_TEST_RAN'):", "    os.environ['GPT2_TEST_RAN'] = '1'"]
    guarded += ["    " + line for line in textwrap.dedent(code).strip().splitlines()]
    return "\n".join(guarded[:1] + ["        " + line for line in guarded[1:]])


# --- memory the old polling did not see -----------------------------------------------------------

# Two processes each touch 1.4 GB of shared anonymous memory: resident, but "shared", so resident minus
# shared (the polled count) is nothing; together 2.8 GB, over the check's 2 GB. The main process waits
# until both hold their memory, then the correct code runs.
SHARED_ANONYMOUS = once("""
    import mmap, time
    ready, done = os.pipe()
    for _ in range(2):
        if os.fork() == 0:
            block = mmap.mmap(-1, 1400 * 2**20, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
            os.write(done, b'.')
            time.sleep(60)
    assert len(os.read(ready, 1) + os.read(ready, 1)) == 2
""")
# 1.5 GB written into four memfds (each within the cap on a file), kept open: pages no process maps,
# so no process's resident memory.
MEMFD = once("""
    for fd in [os.memfd_create('pages') for _ in range(4)]:
        for _ in range(24):
            os.write(fd, bytes(2**24))
""")


@kernel_counted
@slow_cap
def test_shared_anonymous_memory_counts(grade, tmp_path):
    package = attention_variant(tmp_path, SHARED_ANONYMOUS)
    limited = attention(grade, package, memory_gb=2, timeout=30)
    assert limited.status == "error" and "more than 2 GB" in limited.message, limited.message
    unlimited = attention(grade, package, memory_gb=0, timeout=30)  # the control: the memory is there to take
    assert unlimited.status == "pass", unlimited.message


@kernel_counted
@slow_cap
def test_memfd_pages_count(grade, tmp_path):
    package = attention_variant(tmp_path, MEMFD)
    limited = attention(grade, package, memory_gb=1, timeout=30)
    assert limited.status == "error" and "more than 1 GB" in limited.message, limited.message
    unlimited = attention(grade, package, memory_gb=0, timeout=30)
    assert unlimited.status == "pass", unlimited.message


# 1.5 GB queued in unix socket buffers, which no cgroup v1 counts: each socket's send buffer raised to
# 4 MB (8 MB queued, where net.core.wmem_max allows it), filled, and held.
SOCKET_BUFFERS = once("""
    import socket
    queued, held = 0, []
    while queued < 1536 * 2**20:
        sender, receiver = socket.socketpair()
        held += [sender, receiver]
        sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2**22)
        sender.setblocking(False)
        try:
            while queued < 1536 * 2**20:
                queued += sender.send(bytes(2**16))
        except BlockingIOError:
            pass
""")


@slow_cap
def test_socket_buffers_are_bounded_by_the_descriptors(grade, tmp_path):
    package = attention_variant(tmp_path, SOCKET_BUFFERS)
    capped = attention(grade, package, memory_gb=1, timeout=30)
    assert capped.status == "error", capped.message
    assert "Too many open files" in capped.message or "more than 1 GB" in capped.message, capped.message
    unforked = attention(grade, package, memory_gb=1, timeout=30, fork=False)  # the control: no per-check caps
    assert unforked.status == "pass", unforked.message


# --- tasks ---------------------------------------------------------------------------------------

# Forks until a fork fails, each child waiting; unconfined (so, as root, no RLIMIT_NPROC of the sandbox's).
FORK_BOMB = once("""
    import time
    forked = 0
    try:
        while forked < 1000:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            forked += 1
    except OSError:
        raise RuntimeError(f'only {forked} forks') from None
""")


@kernel_counted
@slow_cap
def test_a_fork_bomb_is_bounded_by_the_check_group(grade, tmp_path):
    result = attention(grade, attention_variant(tmp_path, FORK_BOMB), sandbox=False, timeout=60)
    assert result.status == "error" and "only" in result.message, result.message
    forked = int(result.message.split("only ")[1].split()[0])
    assert 0 < forked < sandbox.CHECK_PROCESSES, result.message


# --- disk ----------------------------------------------------------------------------------------

PRINTED_BYTES = 300 * 2**20
# Prints 300 MB, then finds out what of it is in its scratch (the old printed.txt was).
PRINTS = once(f"""
    for _ in range({PRINTED_BYTES // 2**20}):
        os.write(1, b'x' * (2**20 - 1) + b'\\n')
    on_disk = sum(entry.stat().st_size for entry in os.scandir(os.environ['TMPDIR']))
    assert on_disk < 2**20, f'{{on_disk}} bytes of the scratch used'
""")


def test_what_a_check_prints_is_capped_and_never_on_disk(grade, tmp_path):
    result = attention(grade, attention_variant(tmp_path, PRINTS), timeout=30)
    assert result.status == "pass", result.message
    *lines, note = result.printed
    assert note == f"... {PRINTED_BYTES - server.MAX_PRINTED_BYTES} more bytes"
    assert lines and sum(map(len, lines)) <= server.MAX_PRINTED_BYTES


def test_printed_lines_show_what_was_not_kept():
    from grader.shared.wire import WorkerAnswer

    assert runner.printed_lines(WorkerAnswer("answered", printed="one\ntwo\x1b\n")) == ["one", "two\ufffd"]
    assert runner.printed_lines(WorkerAnswer("answered", printed="one", printed_beyond=7)) == [
        "one",
        "... 7 more bytes",
    ]


# 768 MB in one temporary file (in the scratch, where the check is forked): more than any file of a
# check's may hold (512 MB), within a tmpfs scratch's 1 GB.
BIG_FILE = once("""
    with __import__('tempfile').TemporaryFile(buffering=0) as big:
        for _ in range(48):
            big.write(bytes(2**24))
""")


@slow_cap
def test_a_file_of_the_scratch_is_capped(grade, tmp_path):
    package = attention_variant(tmp_path, BIG_FILE)
    capped = attention(grade, package, timeout=30)
    assert capped.status == "error" and "File too large" in capped.message, capped.message
    assert "\n" not in capped.message
    unforked = attention(grade, package, timeout=30, fork=False)  # the control: no per-check caps
    assert unforked.status == "pass", unforked.message


# 1.2 GB in files of 96 MB each, every one within the per-file cap: the tmpfs is full first.
MANY_FILES = once("""
    for i in range(13):
        with open(os.path.join(os.environ['TMPDIR'], f'part{i}'), 'wb', buffering=0) as part:
            for _ in range(6):
                part.write(bytes(2**24))
""")


@as_root
def test_the_scratch_is_capped_as_a_whole(grade, tmp_path):
    result = attention(grade, attention_variant(tmp_path, MANY_FILES), timeout=30)
    assert result.status == "error" and "No space left on device" in result.message, result.message
