"""Keep freed memory in the process: no page faults for each step's fresh tensors.

glibc's malloc gives a large freed block straight back to the kernel (blocks above its mmap
threshold, and free space above its trim threshold at the top of the heap). A training step
frees its activations and the next step allocates them again, so with the defaults every
step faults its activations in afresh, and the kernel zeroes each page. Measured on this
project's 2-core VMs (``benchmarks/heap.py``): a LeNet-5-BN step at batch 50 takes
180-900 faults, and an evaluation of 10,000 images in batches of 1,000 spends nearly as
much time in the kernel (1.4 s) as in its own code (1.8 s); kept, 0.16 s, and the
evaluation ends 1.7x sooner.

:func:`keep_freed_memory` raises both thresholds, so freed blocks stay in the heap and the
next step reuses them. The process keeps up to :data:`TRIM_BYTES` of free memory beyond
what it uses. That is never more than its own peak, which is unchanged. A user's own
malloc settings (``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, or ``glibc.malloc``
in ``GLIBC_TUNABLES``) win, and other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import os
import platform

__all__ = ["MMAP_BYTES", "TRIM_BYTES", "keep_freed_memory"]

#: Free space kept at the top of the heap; an evaluation batch of 1,000 images through
#: LeNet-5 churns more than 64 MiB.
TRIM_BYTES = 256 << 20
#: Blocks up to this size come from the heap, not from their own mapping (glibc's own
#: upper bound for the threshold it adapts by itself).
MMAP_BYTES = 32 << 20

_M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds for this process; returns whether it did
    (False: not glibc, or the user set malloc's thresholds)."""
    if any(name in os.environ for name in _USER_SETTINGS) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    mmap_set = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES)
    trim_set = libc.mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES)
    return bool(mmap_set and trim_set)
