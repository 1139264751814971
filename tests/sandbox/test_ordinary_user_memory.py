"""A check's memory where the grader runs as an ordinary user (no cgroup of its own: polled), under the two attacks
that the polling of resident private pages alone let through: shared anonymous memory across forks, and socket
buffers across forks. Each is graded as an ordinary user (as root here, by dropping to nobody) and must end in the
check stopped at its memory limit, with the `sandbox:` line saying that memory is polled."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from repo import REPO
from test_resources import SHARED_ANONYMOUS, once
from test_sandbox import attention_variant

from grader.host.seal import VERIFIED_FILE as VERIFIED
from grader.shared import cgroup

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="the per-check caps are Linux's (checks run forked)"),
]
NOBODY = 65534

# Eight forks, each filling as many socket buffers as its descriptors allow (4 MB sends queued up to twice
# net.core.wmem_max each), held while the main process goes on.
SOCKETS_ACROSS_FORKS = once("""
    import socket, time
    ready, done = os.pipe()
    for _ in range(8):
        if os.fork() == 0:
            held = []
            try:
                while True:
                    sender, receiver = socket.socketpair()
                    held += [sender, receiver]
                    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2**22)
                    sender.setblocking(False)
                    try:
                        while True:
                            sender.send(bytes(2**16))
                    except BlockingIOError:
                        pass
            except OSError:
                pass
            os.write(done, b'.')
            time.sleep(60)
    assert len(b''.join(os.read(ready, 1) for _ in range(8))) == 8
""")


def change_times(directory: Path) -> dict[Path, int]:
    """What a seal compares of each file an entry's builder wrote (verified.json is the seal's own record)."""
    return {path: path.stat().st_ctime_ns for path in directory.rglob("*") if path.is_file() and path.name != VERIFIED}


def graded_as_an_ordinary_user(package, memory_gb: int, tmp_path) -> tuple[dict, str]:
    """`grade attention` of `package` run as this user, or as nobody where this is root (with a copy of the
    session's reference cache of its own), without a cgroup the grader may make."""
    environment = dict(os.environ)
    as_nobody = os.geteuid() == 0
    if as_nobody:  # `tmp_path` (and the package in it) is a directory anyone may enter, under /tmp
        session_cache, cache = Path(os.environ["GPT2_GRADER_CACHE"]), tmp_path / "cache"
        before = change_times(session_cache)
        # Copied, not hard-linked: chown on a link moves the change time of the session's own file, which the
        # seal of a grading running beside this one (on another xdist worker) takes for the entry rewritten.
        shutil.copytree(session_cache, cache, ignore=shutil.ignore_patterns("random-hub"))  # the builder's input
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(tmp_path)], check=True)
        after = change_times(session_cache)
        assert {path: after.get(path) for path in before} == before
        environment |= {"GPT2_GRADER_CACHE": str(cache), "HOME": str(tmp_path)}
    report = tmp_path / "report.json"
    ran = subprocess.run(
        [sys.executable, "-m", "grader", "--reference", "random", "--exercises", str(package), "attention"]
        + ["--memory-limit", str(memory_gb), "--timeout", "60", "--json", str(report)],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        user=NOBODY if as_nobody else None,
        group=NOBODY if as_nobody else None,
        extra_groups=[] if as_nobody else None,
    )
    assert report.exists(), ran.stdout[-3000:] + ran.stderr[-3000:]
    checks = {check["id"]: check for check in json.loads(report.read_text())["checks"]}
    return checks["attention"], ran.stdout


@pytest.fixture
def ordinary(reference):
    if os.geteuid() != 0 and cgroup.hierarchies() is not None:
        pytest.skip(
            "this user may make cgroups: the kernel counts its checks' memory (tests/sandbox/test_resources.py)"
        )
    if os.geteuid() == 0:
        runs = subprocess.run([sys.executable, "-c", ""], user=NOBODY, group=NOBODY, extra_groups=[], check=False)
        if runs.returncode != 0:
            pytest.skip(f"nobody may not run {sys.executable} (a directory above it is root's alone)")


@pytest.mark.parametrize(
    ("attack", "memory_gb"), [(SHARED_ANONYMOUS, 2), (SOCKETS_ACROSS_FORKS, 1)], ids=["shared memory", "sockets"]
)
def test_an_attack_across_forks_is_stopped_at_the_limit(ordinary, attack, memory_gb):
    with tempfile.TemporaryDirectory() as shared:  # not under pytest's own, which only its user may enter
        root = Path(shared)
        root.chmod(0o755)
        check, printed = graded_as_an_ordinary_user(attention_variant(root, attack), memory_gb, root)
        assert check["status"] == "error" and f"more than {memory_gb} GB" in check["message"], printed
        assert "memory: polled" in " ".join(printed.split()), printed[-2000:]
