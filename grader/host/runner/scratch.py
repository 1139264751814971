"""A check's scratch directory: the only place its process may write, on a tmpfs of its own where the grader
can mount one."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import sys
from pathlib import Path

SCRATCH_BYTES = 2**30  # a check's scratch where it is a tmpfs: four times what the grader reads of its outputs
MS_NOSUID, MS_NODEV, MNT_DETACH = 2, 4, 2
ON_ERROR = "onexc" if sys.version_info >= (3, 12) else "onerror"  # rmtree's onerror is deprecated from Python 3.12


@contextlib.contextmanager
def scratch_filesystem(scratch: Path):
    """As root on Linux, a tmpfs of SCRATCH_BYTES mounted on the check's scratch directory while the check
    runs and its answer is read: what the check writes there takes no disk, and its pages are charged to
    the check's memory group. Elsewhere (an ordinary user, macOS, Windows) the directory as it is: only
    each file is capped (`learner.server.CHECK_FILE_BYTES`)."""
    mounted = _mount_tmpfs(scratch)
    try:
        yield
    finally:
        # The rmtree after it then removes the empty directory; a tmpfs left mounted is said, not fatal.
        if mounted and _libc().umount2(bytes(scratch), MNT_DETACH) != 0:
            error = os.strerror(ctypes.get_errno())
            print(f"grade: the scratch tmpfs at {scratch} stays mounted: {error}", file=sys.stderr)


def _mount_tmpfs(scratch: Path) -> bool:
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    options = f"size={SCRATCH_BYTES},mode=0700".encode()
    return _libc().mount(b"tmpfs", bytes(scratch), b"tmpfs", MS_NOSUID | MS_NODEV, options) == 0


def remove_scratch(scratch: Path) -> None:
    """The scratch directory and everything the check left in it, directories it made unreadable or unwritable
    included: its fork server's Landlock ruleset still allows writing it (`sandbox.package_ruleset`), so it must not
    outlive its check. Links are removed, never followed; every process of the check has ended by now."""

    def opened_up(function, path: str, _) -> None:
        for directory in (os.path.dirname(path), path):
            if os.path.isdir(directory) and not os.path.islink(directory):
                with contextlib.suppress(OSError):
                    os.chmod(directory, 0o700)
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, **{ON_ERROR: opened_up})
            else:
                os.unlink(path)

    shutil.rmtree(scratch, **{ON_ERROR: opened_up})


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    libc.mount.restype = ctypes.c_int
    libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
    libc.umount2.restype = ctypes.c_int
    return libc
