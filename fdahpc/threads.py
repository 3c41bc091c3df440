"""Thread counts in a process where torch and Numba share one OpenMP runtime.

Numba's OpenMP threading layer starts with the first parallel kernel, or the first
``numba.get_num_threads()`` / ``set_num_threads()``, and can then set the runtime's count
to Numba's own (the cores, or ``NUMBA_NUM_THREADS``). torch's intra-op count decides how its
kernels split their sums, so a count changed in mid-run changes a model's last bits from then
on (seen here: a synchronous run and a sketched one, otherwise identical, differed after
the sketch's hash tables were built).
"""

from __future__ import annotations

import sys

__all__ = ["keep_torch_threads"]


def keep_torch_threads(fn, *args):
    """``fn(*args)``, with torch's intra-op thread count put back as it was before (when torch
    is imported): for a call that may start Numba's threading layer."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    try:
        return fn(*args)
    finally:
        if torch is not None and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
