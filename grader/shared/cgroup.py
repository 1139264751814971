"""A check's own cgroup: its memory and its tasks counted and capped by the kernel (Linux).

The fork server makes one group per check before forking it, and the check's process joins it first
thing, before any learner code runs (`CheckGroup.join`). From then on the kernel charges the group
with everything its processes allocate, shared anonymous memory, memfd and tmpfs pages, page cache
and page tables included, and stops the check at the limit with an OOM kill inside the group, which
`CheckGroup.ran_out_of_memory` reads. Pages the check shares with the fork server stay charged to
the fork server: a check is charged only for what it adds.

Where a group can be made: cgroup v1 with a memory and a pids hierarchy writable by this process
(root); cgroup v2 where this process's cgroup offers both controllers, may be written, and is
delegated to it (the root of the hierarchy or of a container's cgroup namespace, or a systemd unit
with `Delegate=yes`): its processes then move to a leaf of their own (`SERVER_LEAF`), as cgroup v2
wants of a group whose children have controllers. Elsewhere (an ordinary user without delegation,
macOS, Windows) `hierarchies()` is None and the fork server polls resident memory instead;
`accounting()` says which holds.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MEMORY, PIDS = "memory", "pids"
SERVER_LEAF = "gpt2-grader"  # v2: where a delegated group's own processes move
GROUP_PREFIX = "gpt2-check-"  # then the fork server's pid: a check's group is named GROUP_PREFIX + "<pid>-<n>"
DELEGATED = ("trusted.delegate", "user.delegate")  # the extended attributes systemd marks a delegated group with
REMOVE_TRIES = 100  # a group whose last process was just killed can be busy a moment


@dataclass(frozen=True)
class Hierarchies:
    """Where this process makes check groups: the parent group in the memory and the pids hierarchy
    (the same directory in cgroup v2)."""

    version: int
    memory: Path
    pids: Path


def accounting() -> str:
    """How a forked check's memory is counted here, for the report's sandbox line."""
    found = hierarchies()
    if found is None:
        return "memory: polled (private and shared pages, memfds, each socket at its largest buffer)"
    return f"memory: cgroup v{found.version}, counted by the kernel"


@functools.cache
def hierarchies() -> Hierarchies | None:
    """Where this process may make check groups, found without changing anything; None where it may not."""
    if sys.platform != "linux":
        return None
    try:
        mounts, own = cgroup_mounts(), own_cgroups()
    except OSError:
        return None
    if MEMORY in mounts and PIDS in mounts:
        memory, pids = mounts[MEMORY] / own.get(MEMORY, ""), mounts[PIDS] / own.get(PIDS, "")
        if writable(memory) and writable(pids):
            return Hierarchies(1, memory, pids)
    if "" in mounts and "" in own:
        group = mounts[""] / own[""]
        if {MEMORY, PIDS} <= controllers(group, "cgroup.controllers") and writable(group) and delegated(group, own[""]):
            return Hierarchies(2, group, group)
    return None


def cgroup_mounts() -> dict[str, Path]:
    """Each controller's v1 mount point, "" for the v2 hierarchy's, from this process's mountinfo."""
    mounts = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, rest = line.partition(" - ")
        root, point = fields.split()[3:5]
        kind, _, options = rest.split()[:3]
        if root != "/":  # a hierarchy seen from below its root: /proc/self/cgroup's paths do not start there
            continue
        if kind == "cgroup2":
            mounts.setdefault("", Path(point))
        elif kind == "cgroup":
            for name in {MEMORY, PIDS} & set(options.split(",")):
                mounts.setdefault(name, Path(point))
    return mounts


def own_cgroups() -> dict[str, str]:
    """This process's group in each hierarchy, relative to the hierarchy's root ("" for cgroup v2)."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(",") if names else [""]:
            own[name] = path.lstrip("/")
    return own


def controllers(group: Path, listing: str) -> set[str]:
    try:
        return set((group / listing).read_text().split())
    except OSError:
        return set()


def writable(group: Path) -> bool:
    return group.is_dir() and os.access(group, os.W_OK) and os.access(group / "cgroup.procs", os.W_OK)


def delegated(group: Path, path: str) -> bool:
    """Whether this process may rearrange `group`: the hierarchy's (or its namespace's) root, or marked delegated."""
    if not path:
        return True
    for attribute in DELEGATED:
        with contextlib.suppress(OSError):
            if os.getxattr(group, attribute) == b"1":
                return True
    return False


@functools.cache
def enable_controllers(group: Path) -> None:
    """cgroup v2: give `group`'s children the memory and pids controllers, moving its own processes
    to a leaf first (a group with processes cannot hand controllers down). Once per process."""
    if {MEMORY, PIDS} <= controllers(group, "cgroup.subtree_control"):
        return
    leaf = group / SERVER_LEAF
    leaf.mkdir(exist_ok=True)
    for _ in range(REMOVE_TRIES):
        pids = members(group)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                write(leaf / "cgroup.procs", pid)
    write(group / "cgroup.subtree_control", "+memory +pids")


def write(path: Path, value: object) -> None:
    with open(path, "w") as file:
        file.write(str(value))


def members(group: Path) -> list[int]:
    try:
        return [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


class CheckGroup:
    """One check's group (a directory in each hierarchy in cgroup v1, one in v2)."""

    def __init__(self, version: int, memory: Path, pids: Path):
        self.version, self.memory, self.pids = version, memory, pids
        self.directories = tuple(dict.fromkeys((memory, pids)))

    @classmethod
    def make(cls, number: int, memory_bytes: int, tasks: int) -> CheckGroup | None:
        """A fresh group for this process's check `number`, capped at `memory_bytes` (0: no cap, swap
        excluded) and `tasks` processes and threads; None where none can be made."""
        found = hierarchies()
        if found is None:
            return None
        group = cls.named(found, f"{GROUP_PREFIX}{os.getpid()}-{number}")
        try:
            if found.version == 2:
                enable_controllers(found.memory)
            remove_abandoned(found)
            for directory in group.directories:
                directory.mkdir()
            group.limit(memory_bytes, tasks)
        except OSError:
            group.remove()
            return None
        return group

    @classmethod
    def named(cls, found: Hierarchies, name: str) -> CheckGroup:
        return cls(found.version, found.memory / name, found.pids / name)

    def limit(self, memory_bytes: int, tasks: int) -> None:
        if self.version == 1:
            if memory_bytes:
                write(self.memory / "memory.limit_in_bytes", memory_bytes)
                if (self.memory / "memory.memsw.limit_in_bytes").exists():  # swap accounting is on
                    write(self.memory / "memory.memsw.limit_in_bytes", memory_bytes)
        elif memory_bytes:
            write(self.memory / "memory.max", memory_bytes)
            if (self.memory / "memory.swap.max").exists():
                write(self.memory / "memory.swap.max", 0)
            write(self.memory / "memory.oom.group", 1)  # an OOM kill ends the whole check
        write(self.pids / "pids.max", tasks)

    def join(self) -> None:
        """Put this process in the group: the check's process, before it runs any learner code."""
        for directory in self.directories:
            write(directory / "cgroup.procs", os.getpid())

    def ran_out_of_memory(self) -> bool:
        """Whether the kernel has killed one of the group's processes for its memory limit."""
        events = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            lines = (self.memory / events).read_text().splitlines()
        except OSError:
            return False
        counts = dict(line.split() for line in lines if len(line.split()) == 2)
        return int(counts.get("oom_kill", 0)) > 0

    def remove(self) -> None:
        """Kill every process in the group, then remove it."""
        kill_file = self.memory / "cgroup.kill"  # v2, Linux 5.14
        if self.version == 2 and kill_file.exists():
            with contextlib.suppress(OSError):
                write(kill_file, 1)
        for directory in self.directories:
            for _ in range(REMOVE_TRIES):
                for pid in members(directory):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # busy: its processes are still exiting
                    time.sleep(0.01)


@functools.cache
def remove_abandoned(found: Hierarchies) -> None:
    """Remove, once per process, the groups of fork servers that were killed mid-check (no process of
    that pid is left), with whatever of their checks still runs."""
    import psutil

    for directory in {*found.memory.glob(f"{GROUP_PREFIX}*"), *found.pids.glob(f"{GROUP_PREFIX}*")}:
        server = directory.name.removeprefix(GROUP_PREFIX).partition("-")[0]
        if server.isdigit() and not psutil.pid_exists(int(server)):
            CheckGroup.named(found, directory.name).remove()
