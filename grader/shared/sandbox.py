"""The operating system's confinement of one check's process (Linux): runs in the learner's process.

Applied in each forked check process before the learner's package is imported:

- the grader drops root for an unprivileged user (nobody), keeping only the capability to read
  and search files, which Landlock then limits to the allow-list below (its paths: `allow_list`);
- Landlock (a small ctypes layer over its three system calls, since no maintained binding covers
  its network and scope rules) allows reading only the Python installation, its site-packages
  minus the reference's libraries, the learner's package and the learner-side modules of the
  grader; writing only the check's own scratch directory (file rules from ABI 1); no TCP
  connection or bind (ABI 4); no signal or abstract unix socket reaching a process outside the
  check (ABI 6);
- a seccomp filter (libseccomp, through pyseccomp) closes what Landlock does not see, for root and
  an ordinary user alike: no socket but unix ones and no connect, no SysV IPC, no keyring, no
  io_uring, no ptrace or process_vm_*, no new namespaces (`DENIED_CALLS`);
- as root, the check also gets IPC and network namespaces of its own (a second wall around SysV IPC
  and UDP), and fork bombs are bounded with RLIMIT_NPROC for its user.

The fork server (`learner.serve`) is the check's child subreaper and kills whatever the check
left behind; the parent validates everything the check writes. `status()` says which layers hold
on this machine, so every report can say `sandbox: on` or `sandbox: off (why)`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import importlib.util
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grader.shared.allow_list import LEARNER_SIDE as LEARNER_SIDE  # what a check may read of the grader
from grader.shared.allow_list import forbidden_paths, python_paths, readable_paths

if TYPE_CHECKING:
    from pyseccomp import SyscallFilter

LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446  # every architecture
LANDLOCK_CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
PR_SET_KEEPCAPS, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 8, 38, 36

# Filesystem access rights, by the ABI version that introduced them.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FS_RIGHTS = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

READ = READ_FILE | READ_DIR | EXECUTE
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the rights a rule on a file may carry
SCRATCH = READ | WRITE_FILE | MAKE_REG | REMOVE_FILE | MAKE_DIR | REMOVE_DIR | TRUNCATE

UNPRIVILEGED = 65534  # nobody
CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWUSER = 0x08000000, 0x40000000, 0x10000000
CAP_DAC_READ_SEARCH = 2
LINUX_CAPABILITY_VERSION_3 = 0x20080522  # capset's header: two 32-bit words per set
CHECK_PROCESSES = 512  # tasks (threads included) the check's user may have: torch's pools fit, a fork bomb does not
# The system calls a check may not make, all out of Landlock's sight; each fails with EPERM, so honest code
# gets an error it can read, not a kill. `system_call_filter` adds the rules that look at arguments.
DENIED_CALLS = (
    # SysV IPC: no files, and made to outlive their process (ipc: the multiplexer, where there is one)
    *("shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl"),
    *("semget", "semop", "semtimedop", "semctl", "ipc"),
    *("add_key", "request_key", "keyctl"),  # the kernel's keyrings: a user's outlives all its processes
    *("io_uring_setup", "io_uring_enter", "io_uring_register"),  # system calls no filter would see
    *("ptrace", "process_vm_readv", "process_vm_writev"),  # other processes' memory
    "connect",  # unix sockets are all a check may make, and it needs none: a daemon's would act outside it
    # A margin no check needs: new namespaces (a user namespace's privileges), rarer attack surface, and
    # opening by file handle, which the capability to read kept from root allows.
    *("unshare", "setns", "bpf", "perf_event_open", "userfaultfd", "open_by_handle_at"),
)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
if _libc is not None:
    _libc.syscall.restype = ctypes.c_long
    _libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    _libc.prctl.restype = ctypes.c_int
    _libc.unshare.argtypes = (ctypes.c_int,)
    _libc.unshare.restype = ctypes.c_int
    _libc.capset.argtypes = (ctypes.POINTER(_CapHeader), ctypes.POINTER(_CapData))
    _libc.capset.restype = ctypes.c_int


def _checked(result: int, call: str) -> int:
    """`result` of a libc call that sets errno, or the OSError it stands for."""
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{call}: {os.strerror(error)}")
    return result


def _prctl(option: int, value: int, what: str) -> None:
    assert _libc is not None
    _checked(_libc.prctl(option, value, 0, 0, 0), what)


def _syscall(number: int, *args) -> int:
    assert _libc is not None
    return _checked(_libc.syscall(ctypes.c_long(number), *args), f"system call {number}")


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (or this is not Linux)."""
    if _libc is None:
        return 0
    try:
        return _syscall(
            LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION)
        )
    except OSError:
        return 0


@dataclass(frozen=True)
class Status:
    """Whether checks run confined on this machine, and why not when they do not."""

    on: bool
    reason: str  # the layers in force, or why there is no sandbox

    def describe(self) -> str:
        return f"sandbox: on ({self.reason})" if self.on else f"sandbox: off ({self.reason})"


def status() -> Status:
    """What `confine` will do here, decided without confining anything."""
    if os.environ.get("GPT2_GRADER_SANDBOX") == "off":
        return Status(False, "GPT2_GRADER_SANDBOX=off")
    if sys.platform != "linux":
        return Status(False, f"no sandbox on {sys.platform}: checks run as your own user")
    abi = landlock_abi()
    if not abi:
        return Status(False, "the kernel has no Landlock (Linux 5.13 or later, with Landlock enabled)")
    if not seccomp_available():
        return Status(False, "no libseccomp for the system-call filter (Debian, Ubuntu: apt install libseccomp2)")
    layers = [f"Landlock ABI {abi}: files" + (", TCP" if abi >= 4 else "") + (", signals" if abi >= 6 else "")]
    layers.append("seccomp: unix sockets only, no SysV IPC, keyrings, io_uring or ptrace")
    layers.append("user nobody, own IPC and network namespaces" if os.geteuid() == 0 else "your own user")
    return Status(True, "; ".join(layers))


@functools.cache
def seccomp_available() -> bool:
    """Whether `system_call_filter` can be built here; asked without importing pyseccomp, whose import
    (two searches of the library path) costs the grader's process about 50 ms."""
    if importlib.util.find_spec("pyseccomp") is None:
        return False
    try:
        ctypes.CDLL("libseccomp.so.2")
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class Policy:
    """What one check's process may touch."""

    readable: tuple[Path, ...]  # directories and files, read and execute
    listable: tuple[Path, ...]  # directories whose names (only) may be read: imports list them
    writable: Path  # the check's scratch directory
    system_calls: SyscallFilter  # `DENIED_CALLS` and the socket rules, loaded last
    ruleset: int | None = None  # readable's and listable's Landlock rules, made by the fork server; None: made here


def policy_for(package: Path, scratch: Path) -> Policy:
    """The check's allow-list, its rules in the ruleset this process keeps for the package (`package_ruleset`);
    the directories split around what is forbidden stay listable. Made in the fork server, before the fork."""
    readable, listable, system_calls = allow_lists(package)
    ruleset = package_ruleset(readable, listable, landlock_abi()) if landlock_abi() >= 1 else None
    return Policy(readable, listable, scratch, system_calls, ruleset)


@functools.lru_cache(maxsize=8)
def allow_lists(package: Path) -> tuple[tuple[Path, ...], tuple[Path, ...], SyscallFilter]:
    """What `policy_for` allows besides the scratch directory: the same for every check of a package,
    so the fork server works it out once (before forking) rather than every check's process (the
    system-call filter's binding alone takes about 50 ms to import)."""
    forbidden = forbidden_paths(package)
    roots = python_paths()
    listable = {
        parent
        for path in forbidden
        for parent in path.parents
        if any(parent == r or r in parent.parents for r in roots)
    }
    grader = Path(__file__).resolve().parents[1]
    return tuple(readable_paths(package)), tuple(sorted(listable | {grader})), system_call_filter()


@functools.cache
def system_call_filter() -> SyscallFilter:
    """The check's seccomp filter, built once per process: `confine` loads it into each check's."""
    from pyseccomp import ALLOW, ERRNO, MASKED_EQ, NE, Arg, SyscallFilter

    denied = ERRNO(errno.EPERM)
    calls = SyscallFilter(defaction=ALLOW)
    for name in DENIED_CALLS:
        calls.add_rule(denied, name)
    calls.add_rule(denied, "socket", Arg(0, NE, socket.AF_UNIX))
    calls.add_rule(denied, "socketpair", Arg(0, NE, socket.AF_UNIX))
    calls.add_rule(denied, "sendto", Arg(4, NE, 0))  # a datagram with an address of its own
    calls.add_rule(denied, "clone", Arg(0, MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    # clone3's flags are in memory, out of a filter's sight: "no such call", and the C library falls back to clone.
    calls.add_rule(ERRNO(errno.ENOSYS), "clone3")
    return calls


def confine(policy: Policy) -> None:
    """Confine this process, for good, to `policy` (see the module's docstring). Linux only."""
    if os.geteuid() == 0:
        _drop_root(policy.writable)
    _prctl(PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")
    _landlock(policy, landlock_abi())
    policy.system_calls.load()  # last: it denies unshare, which dropping root uses


def _drop_root(writable: Path) -> None:
    import resource

    os.chown(writable, UNPRIVILEGED, UNPRIVILEGED)
    resource.setrlimit(resource.RLIMIT_NPROC, (CHECK_PROCESSES, CHECK_PROCESSES))
    # SysV shared memory, message queues and semaphores are no files, so Landlock does not see them, and
    # they outlive their process: an IPC namespace of its own ends them with the check, and keeps this
    # check's from the next one. Landlock stops TCP only: a network namespace of its own, with nothing but
    # a loopback that is down, lets no UDP datagram out (to a server that would answer GPT-2's outputs).
    # Both stand behind the system-call filter, which refuses SysV IPC and every socket but a unix one.
    _checked(_libc.unshare(CLONE_NEWIPC | CLONE_NEWNET), "unshare(CLONE_NEWIPC | CLONE_NEWNET)")
    _prctl(PR_SET_KEEPCAPS, 1, "prctl(PR_SET_KEEPCAPS)")  # keep the permitted set across setuid
    os.setgroups([])
    os.setresgid(UNPRIVILEGED, UNPRIVILEGED, UNPRIVILEGED)
    os.setresuid(UNPRIVILEGED, UNPRIVILEGED, UNPRIVILEGED)
    # Reading and searching only: the interpreter may live under a home directory nobody cannot enter.
    keep = 1 << CAP_DAC_READ_SEARCH
    data = (_CapData * 2)(_CapData(keep, keep, 0), _CapData(0, 0, 0))
    _checked(_libc.capset(ctypes.byref(_CapHeader(LINUX_CAPABILITY_VERSION_3, 0)), data), "capset")


def _ruleset_for(abi: int) -> _RulesetAttr:
    """What a Landlock ruleset of this ABI handles: every right the kernel knows, so none is left allowed."""
    handled_fs = FS_RIGHTS[max(v for v in FS_RIGHTS if v <= abi)]
    handled_net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    return _RulesetAttr(handled_fs, handled_net, scoped)


def _landlock(policy: Policy, abi: int) -> None:
    """The policy's ruleset (the fork server's, or one made here) with the scratch added, enforced; this process's
    descriptor of it then closed, before any learner code runs."""
    ruleset = policy.ruleset if policy.ruleset is not None else _ruleset(policy.readable, policy.listable, abi)
    try:
        _allow(ruleset, policy.writable, SCRATCH & _ruleset_for(abi).handled_access_fs)
        _syscall(LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def package_ruleset(readable: tuple[Path, ...], listable: tuple[Path, ...], abi: int) -> int:
    """A Landlock ruleset of the allow-lists' rules (its 800 or so rules take about 10 ms to add), kept by this
    process for the next check of the same package, for as long as each path is the file it was (a package installed
    again, or a directory made anew, gets a new ruleset: a rule holds the inode its path had). One is kept at a time:
    every check's process inherits its descriptor.

    Each check adds its own scratch, and the ruleset keeps the rules of every earlier one; none grants anything:
    an earlier check's directory is removed, or its tmpfs unmounted, before the next check starts, so no path
    leads to it. No fork server's is another's: a twin forks before its sibling makes one."""
    key = (readable, listable, abi, tuple(_identity(path) for path in (*readable, *listable)))
    if _KEPT.get("key") != key:
        if "ruleset" in _KEPT:
            os.close(_KEPT.pop("ruleset"))
        _KEPT.update(key=key, ruleset=_ruleset(readable, listable, abi))
    return _KEPT["ruleset"]


_KEPT: dict = {}  # package_ruleset's one ruleset and what it was made for: this process's, as a fork server


def _identity(path: Path) -> tuple[int, int]:
    try:
        found = os.stat(path)
    except OSError:
        return (0, 0)
    return (found.st_dev, found.st_ino)


def _ruleset(readable: tuple[Path, ...], listable: tuple[Path, ...], abi: int) -> int:
    attr = _ruleset_for(abi)
    ruleset = _syscall(
        LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0)
    )
    for path in readable:
        _allow(ruleset, path, READ & attr.handled_access_fs)
    for path in listable:
        _allow(ruleset, path, READ_DIR)
    return ruleset


def _allow(ruleset: int, path: Path, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # nothing there: nothing to allow
    try:
        if not os.path.isdir(path):
            rights &= FILE_ONLY
        rule = _PathBeneathAttr(rights, fd)
        _syscall(
            LANDLOCK_ADD_RULE,
            ctypes.c_int(ruleset),
            ctypes.c_int(RULE_PATH_BENEATH),
            ctypes.byref(rule),
            ctypes.c_uint32(0),
        )
    finally:
        os.close(fd)


def become_subreaper() -> None:
    """Orphans of this process's descendants become its children, so none can escape a cleanup."""
    if _libc is not None:
        _prctl(PR_SET_CHILD_SUBREAPER, 1, "prctl(PR_SET_CHILD_SUBREAPER)")


def end_descendants() -> None:
    """Kill and reap every process this one has started, daemons included: as the subreaper, this
    process inherits each orphan, so the loop ends only when none is left."""
    import psutil

    for _ in range(1000):
        children = psutil.Process().children(recursive=True)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()
        with contextlib.suppress(ChildProcessError):
            while hasattr(os, "WNOHANG") and os.waitpid(-1, os.WNOHANG)[0]:
                pass
        if not children:
            return
        time.sleep(0.001)
