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

Semi-asynchronous ranks then call :func:`release_freed_models`, which lowers the mmap
threshold to 1 MB: they allocate and free thousands of model-sized vectors, and heap
fragmentation took more memory than the models held (7.8 GB of peak RSS against 6.2 GB
with the 1,000-client small-CNN run, docs/results.md). There every block of 1 MB or more is
mapped afresh again, the server's evaluation batches included; blocks below it (a
LeNet-5 model, a training step's activations at batch 50) stay in the heap.
"""

from __future__ import annotations

import ctypes
import os
import platform

__all__ = ["MMAP_BYTES", "MODEL_MMAP_BYTES", "TRIM_BYTES", "keep_freed_memory", "release_freed_models"]

#: Free space kept at the top of the heap; an evaluation batch of 1,000 images through
#: LeNet-5 churns more than 64 MiB.
TRIM_BYTES = 256 << 20
#: Blocks up to this size come from the heap, not from their own mapping (glibc's own
#: upper bound for the threshold it adapts by itself).
MMAP_BYTES = 32 << 20

#: Semi-asynchronous ranks: blocks from this size on are mapped on their own and unmapped when freed.
MODEL_MMAP_BYTES = 1 << 20

_M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def _glibc():
    """glibc, unless the user set malloc's thresholds or the C library is another (None)."""
    if any(name in os.environ for name in _USER_SETTINGS) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return None
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds for this process; returns whether it did
    (False: not glibc, or the user set malloc's thresholds)."""
    libc = _glibc()
    if libc is None:
        return False
    mmap_set = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES)
    trim_set = libc.mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES)
    return bool(mmap_set and trim_set)


def release_freed_models(threshold: int = MODEL_MMAP_BYTES) -> bool:
    """Make glibc map every block of ``threshold`` bytes or more on its own, so a freed model
    goes back to the system at once (a fixed threshold also ends glibc's own adjustment of
    it, which raised it after each large free). Returns whether it did."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))
