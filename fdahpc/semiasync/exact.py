"""Order-free weighted sums: every term rounded once to a fixed-point integer, then added exactly.

A floating-point sum depends on the order and grouping of its additions. The server's new
model must not: not on how the clients are spread over hosts, and not on whether the
server adds the K buffered vectors itself (``--aggregate server``) or each host adds its
own members' and MPI reduces the partial sums in its own tree order (``--aggregate
hosts``). So each term ``c·x`` is computed in float64 (one rounding), scaled by ``2^S``
(exact: a power of two) and rounded to an int64; int64 addition is associative, so every
order and every grouping gives the same integers, and the result is rounded once more,
to the model's float32.

``S`` is chosen per aggregation from a bound on the sum, ``Σ |c_i|·max|x_i|``, so that
no partial sum can overflow: ``|Σ| < 2^61``. With coefficients summing to about 1 and
entries below M in magnitude, the resolution is about ``M·2^-61``, far finer than
float32's, so the result is the exactly rounded weighted sum for all practical purposes.
"""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["scale_bits", "add_term", "to_float", "JIT_MIN_SIZE"]

_HEADROOM = 61  # |Σ| < 2^61: room for the rounding of up to 2^60 terms within int64
_MAX_BITS = 960  # 2^S stays a finite float64 for any bound

#: From this many entries up the Numba kernel adds a term (4.4x NumPy's speed at 1.65 M);
#: below, NumPy does, and the process never imports Numba nor loads the kernel (about 0.5 s
#: of start-up, more than NumPy's extra temporaries cost a small model over a whole run).
#: Both compute the same integers (tested).
JIT_MIN_SIZE = 1 << 20


def scale_bits(bound: float) -> int:
    """``S`` for a sum whose terms' magnitudes add up to at most ``bound``."""
    if not math.isfinite(bound) or bound < 0:
        raise ValueError(f"bound {bound!r}: the terms' magnitudes must add up to a finite number")
    if bound == 0:
        return 0  # every term is 0
    return min(_HEADROOM - math.frexp(bound)[1], _MAX_BITS)  # 2^(e-1) <= bound < 2^e


def add_term(acc: np.ndarray, coefficient: float, x: np.ndarray, bits: int) -> None:
    """``acc += round(x · (coefficient · 2^bits))`` in int64, element-wise: one float64
    product (scaling the coefficient by a power of two is exact, so this rounds like
    ``(coefficient · x) · 2^bits``), rounded half to even."""
    if coefficient == 0:
        return
    if acc.shape != x.shape or acc.dtype != np.int64:
        raise ValueError(f"acc: expected int64 of shape {x.shape}, got {acc.dtype} {acc.shape}")
    scale = math.ldexp(float(coefficient), bits)
    if x.size >= JIT_MIN_SIZE:
        _kernel()(acc, np.ascontiguousarray(x), scale)
    else:
        _add_term_numpy(acc, x, scale)


@functools.cache
def _kernel():
    """The Numba kernel, compiled (or loaded from Numba's cache) at its first use."""
    from .exact_kernel import add_term_jit

    return add_term_jit


def _add_term_numpy(acc: np.ndarray, x: np.ndarray, scale: float) -> None:
    """The same sum in NumPy: the reference the kernel is tested against, and the small
    models' path."""
    t = x.astype(np.float64)
    t *= scale
    np.rint(t, out=t)
    acc += t.astype(np.int64)


def to_float(acc: np.ndarray, bits: int) -> np.ndarray:
    """The fixed-point sum as float64 (``acc · 2^-bits``)."""
    return acc.astype(np.float64) * math.ldexp(1.0, -bits)

