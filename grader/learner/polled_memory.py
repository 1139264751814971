"""A check's memory where no cgroup counts it (an ordinary user without a delegated cgroup): polled by the fork
server from /proc, and bounded where polling cannot see it.

Counted: the private pages each of the check's processes adds to what it shares with the fork server; the shared
memory they map (shared anonymous memory, memfds, files of /dev/shm), each page once however many of them map it;
the memfds and /dev/shm files they hold open without mapping them; and each socket they hold at the largest buffer
the kernel lets it queue (twice net.core.wmem_max), since no file of /proc says what a unix socket holds. Sockets
cost a correct check nothing (it opens none); a check that hoards them reaches its limit by their number."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

SHARED_FILES = ("/memfd:", "/dev/shm/")  # what an open descriptor names where its pages are memory, not disk


def anonymous_memory(pid: int) -> int:
    import psutil

    info = psutil.Process(pid).memory_info()
    return info.rss - info.shared


@functools.cache
def socket_bytes() -> int:
    """The most one socket can hold queued: twice net.core.wmem_max (the kernel doubles SO_SNDBUF)."""
    try:
        return 2 * int(Path("/proc/sys/net/core/wmem_max").read_text())
    except (OSError, ValueError):
        return 2 * 212992  # Linux's default


def check_processes_apart_from(pid: int) -> set[int]:
    """The fork server's other descendants as the check `pid` starts (a lane's twin): as its subreaper, the
    fork server inherits every process the check orphans, so its descendants from then on, those apart, are the
    check's, the orphans included."""
    import psutil

    return {child.pid for child in psutil.Process().children(recursive=True)} - {pid}


def tree_memory(others: set[int], baseline: int) -> int:
    """The memory of the check's processes (the fork server's descendants but `others`), as the module's docstring
    counts it: the pages a fork shares with the fork server (about `baseline` in each) are counted once."""
    import psutil

    total, held = baseline, {}  # held: (device, inode) of each shared file or socket -> its bytes
    for process in psutil.Process().children(recursive=True):
        if process.pid in others:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            info = process.memory_info()
            total += max(0, info.rss - info.shared - baseline) + mapped_shared(process.pid)
            held |= held_open(process.pid)
    return total + sum(held.values())


def mapped_shared(pid: int) -> int:
    """The proportional share of shared memory pages (shmem) the process maps: summed over the processes that
    map a page, the page once."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss_Shmem:"):
            return int(line.split()[1]) * 1024
    return 0


def held_open(pid: int) -> dict[tuple[int, int], int]:
    """The memfds, /dev/shm files and sockets the process holds open, by (device, inode): their bytes."""
    held = {}
    fds = Path(f"/proc/{pid}/fd")
    for fd in os.listdir(fds):
        with contextlib.suppress(OSError):
            target = os.readlink(fds / fd)
            if target.startswith("socket:"):
                held[(-1, int(target[8:-1]))] = socket_bytes()
            elif target.startswith(SHARED_FILES):
                found = os.stat(fds / fd)
                held[(found.st_dev, found.st_ino)] = found.st_blocks * 512
    return held
