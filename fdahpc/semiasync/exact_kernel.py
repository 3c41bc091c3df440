"""The fixed-point sum's Numba kernel (exact.py), in a module of its own so that importing
:mod:`fdahpc.semiasync.exact` does not import Numba."""

import numpy as np
from numba import njit


@njit(fastmath=False, cache=True, nogil=True)
def add_term_jit(acc, x, scale):  # one pass, no temporaries (NumPy needs several)
    for i in range(x.size):
        acc[i] += np.int64(np.rint(np.float64(x[i]) * scale))
