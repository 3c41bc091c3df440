"""AMS sketch: the linear summary SketchFDA communicates every local step.

``sk: R^d -> R^{l x m}`` with, for each row ``r``, a bucket hash ``h_r: [d] -> [m]``
drawn from a 2-wise independent family and a sign hash ``g_r: [d] -> {-1, +1}`` drawn
from a 4-wise independent family; ``sk(v)[r, h_r(i)] += g_r(i) * v_i`` (Alon, Matias,
Szegedy 1996; as used by SketchFDA, arXiv 2405.20988). The estimator ``M2(S) = median_r
sum_j S[r, j]^2`` is within ``(1 +- eps) ||v||^2`` w.p. ``>= 1 - delta`` for
``m = O(1/eps^2)``, ``l = O(log 1/delta)``. The sketch is linear, so averaging the
workers' sketches gives the sketch of the average drift.

Hash functions (exact, not approximate, independence):

* ``p = 2^61 - 1`` (Mersenne prime); the key of element ``i`` is ``i`` itself.
* ``h_r(i) = ((b0 + b1*i) mod p) mod m``: all degree-<=1 polynomials over Z_p, a 2-wise
  independent family (the ``mod m`` adds a bias below ``m/p ~ 2^-53``).
* ``g_r(i) = +1`` if ``(s0 + s1*i + s2*i^2 + s3*i^3) mod p`` is even, else ``-1``:
  all degree-<=3 polynomials, a 4-wise independent family (parity bias ``2^-62``).
* Coefficients are ``np.random.default_rng(seed).integers(0, p, size=(rows, 6))``,
  row ``r`` = ``(b0, b1, s0, s1, s2, s3)``. Drawing row by row makes the first rows of a
  sketch independent of ``rows`` (``rows=3`` equals the first three rows of ``rows=5``).
  Every rank and every backend derives the same tables from the same seed.

Evaluating four modular polynomials per element and row every step would cost far
more than the sketch itself, so the hashes are precomputed once (at construction,
jitted and parallel) into a table of packed 16-bit codes,
``code = (h_r(i) << 1) | [g_r(i) = -1]`` (hence ``cols <= 16384``), stored
element-major ``(dim, rows)`` so that the per-step kernel streams one array next to
the vector: ``2 * rows * dim`` bytes, e.g. 5 x 11.2 M x 2 B = 112 MB at ResNet-18
size (plus the same again on each device that calls :meth:`AmsSketch.sketch_torch`).

The per-step kernel reads each ``v_i`` once and updates all ``rows`` rows. Each
row's accumulator has ``2 * cols`` float64 slots addressed by the code itself (even
slot: ``+v_i``, odd slot: ``-v_i``), so the inner loop is one load-add-store per row
with no sign decode and no branch; ``sk[r, j] = slot[2j] - slot[2j+1]`` at the end.
Fixed-length chunks of the vector run in parallel, each into a private table, and
the tables are summed in chunk order, so a sketch is bit-identical whatever the
thread count. float64 accumulation makes linearity hold to the rounding of the
float32 inputs. Numba compiles the kernels on first use (and caches them on disk).
"""

from __future__ import annotations

import sys

import numba
import numpy as np
from numba import njit, prange

from .options import SKETCH_COLS, SKETCH_ROWS
from .threads import keep_torch_threads

__all__ = ["AmsSketch", "estimate_sq_norm", "hash_coefficients", "compile_kernels", "MERSENNE_P"]

# Numba flags, in one place. No fastmath: scatter-adds do not vectorize, so it buys
# nothing, and strict IEEE order keeps sketches bit-reproducible. cache: compile once
# per machine, not on every rank and run. nogil: a comm thread may run meanwhile.
_JIT = dict(fastmath=False, cache=True, nogil=True)
_JIT_PARALLEL = dict(_JIT, parallel=True)

MERSENNE_P = (1 << 61) - 1
_HASH_FAMILY = "poly-mod-2^61-1/v1"
_MAX_COLS = 1 << 14  # bucket in 14 bits + sign bit: codes < 2^15 also read as int16 (torch)
# Elements per parallel chunk. Fixed (not derived from the thread count) so that a
# sketch is bit-identical whatever NUMBA_NUM_THREADS is; 2^17 gives 86 chunks at
# ResNet-18 size (enough to balance dozens of threads) and 20 KB tables per chunk.
_CHUNK = 1 << 17

# uint64 constants: numba promotes uint64 (op) int64 to float64, so every literal
# touching the hash arithmetic must be uint64 already.
_P = np.uint64(MERSENNE_P)
_M32 = np.uint64(0xFFFFFFFF)
_M29 = np.uint64((1 << 29) - 1)
_U3 = np.uint64(3)
_U29 = np.uint64(29)
_U32 = np.uint64(32)
_U61 = np.uint64(61)
_U1 = np.uint64(1)


def hash_coefficients(rows: int, seed: int) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Polynomial coefficients of every row, as Python ints, lowest degree first.

    Returns ``(bucket_coeffs, sign_coeffs)``: ``bucket_coeffs[r] = (b0, b1)`` and
    ``sign_coeffs[r] = (s0, s1, s2, s3)``, each uniform in ``[0, p)``. Public so that
    a reference implementation can evaluate the same polynomials with big ints.
    """
    rows = _check_int("rows", rows, 1)
    seed = _check_int("seed", seed, 0)
    draws = np.random.default_rng(seed).integers(0, MERSENNE_P, size=(rows, 6), dtype=np.int64)
    bucket = [tuple(int(c) for c in row[:2]) for row in draws]
    sign = [tuple(int(c) for c in row[2:]) for row in draws]
    return bucket, sign


def estimate_sq_norm(sk) -> float:
    """AMS second-moment estimate ``M2 = median_r sum_j sk[r, j]^2`` of ``||v||^2``.

    The median (mean of the two middle rows when ``rows`` is even) turns the per-row
    constant-probability guarantee into a ``1 - delta`` one. How tight, for l = 5,
    m = 250: for a dense ``v`` each row is about ``||v||^2 chi2_m / m`` (relative sd
    ``sqrt(2/m)`` = 8.9 %), so ``|M2/||v||^2 - 1| < 1/sqrt(m)`` holds in about 81 % of
    hash draws (over-estimates beyond ``1 + 1/sqrt(m)``: about 9 %) and within
    ``2/sqrt(m)`` in about 99 %; vectors with few non-zeros are nearly exact.
    """
    sk = np.asarray(sk, dtype=np.float64)
    if sk.ndim != 2 or sk.size == 0:
        raise ValueError(f"sk: expected a non-empty (rows, cols) array, got shape {sk.shape}")
    return float(np.median(np.einsum("rj,rj->r", sk, sk)))


# --------------------------------------------------------------------------- kernels


@njit(**_JIT)
def _fold(x):
    """x < 2^63 -> x mod p, using 2^61 = 1 (mod p)."""
    x = (x & _P) + (x >> _U61)
    if x >= _P:
        x -= _P
    return x


@njit(**_JIT)
def _mulmod(a, b):
    """a*b mod p for a, b < p = 2^61-1, without 128-bit integers.

    Split into 32-bit halves: a*b = hh*2^64 + mid*2^32 + ll; with 2^61 = 1 (mod p),
    2^64 = 8 and mid*2^32 = (mid >> 29)*2^61 + (mid & (2^29-1))*2^32. Every term is
    below 2^61 (mid < 2^62 before splitting), so the sum stays below 2^63.
    """
    a_hi = a >> _U32
    a_lo = a & _M32
    b_hi = b >> _U32
    b_lo = b & _M32
    hh = a_hi * b_hi
    mid = a_hi * b_lo + a_lo * b_hi
    ll = a_lo * b_lo
    x = (hh << _U3) + (mid >> _U29) + ((mid & _M29) << _U32) + (ll >> _U61) + (ll & _P)
    return _fold(x)


@njit(**_JIT_PARALLEL)
def _hash_table_kernel(coeffs, cols, codes):
    """codes[i, r] = (h_r(i) << 1) | (g_r(i) == -1); coeffs (rows, 6) uint64 < p."""
    dim, rows = codes.shape
    m = np.uint64(cols)
    for i in prange(dim):
        x = np.uint64(i)
        for r in range(rows):
            h = _fold(_mulmod(coeffs[r, 1], x) + coeffs[r, 0]) % m
            g = _fold(_mulmod(coeffs[r, 5], x) + coeffs[r, 4])
            g = _fold(_mulmod(g, x) + coeffs[r, 3])
            g = _fold(_mulmod(g, x) + coeffs[r, 2])
            codes[i, r] = np.uint16((h << _U1) | (g & _U1))


@njit(**_JIT)
def _chunk_kernel(vec, codes, lo, hi, t, cols):
    """t += sign-split sketch of vec[lo:hi], any number of rows.

    t holds, per row, 2*cols accumulators indexed directly by the packed code
    (even: +v_i, odd: -v_i), so the inner loop has no sign decode and no branch.
    Unsigned indices spare Numba's negative-index wrap-around on every access.
    """
    rows = np.uint64(codes.shape[1])
    flat = codes.reshape(-1)
    width = np.uint64(2 * cols)
    for i in range(np.uint64(lo), np.uint64(hi)):
        x = np.float64(vec[i])
        base = i * rows
        off = np.uint64(0)
        for r in range(rows):
            t[off + flat[base + r]] += x
            off += width


@njit(**_JIT)
def _lane(word, j):
    """16-bit lane j of a little-endian uint64 word: one packed code."""
    return (word >> np.uint64(16 * j)) & np.uint64(0xFFFF)


@njit(**_JIT)
def _chunk_kernel_5(vec, codes, words, lo, hi, t, cols):
    """_chunk_kernel for the default rows = 5, about 1.5x faster from memory.

    The kernel is limited by load/store slots (three memory operations per row and
    element) more than by bandwidth. Four elements have 20 codes, exactly five aligned
    uint64 words, so five loads fetch what twenty uint16 loads would; the lanes are
    split off with shifts, which have ports to spare.
    """
    g_lo = (lo + 3) // 4
    g_hi = hi // 4
    if g_lo >= g_hi:
        _chunk_kernel(vec, codes, lo, hi, t, cols)
        return
    _chunk_kernel(vec, codes, lo, 4 * g_lo, t, cols)
    w = np.uint64(2 * cols)
    o1, o2, o3, o4 = w, w + w, w + w + w, w + w + w + w
    for g in range(np.uint64(g_lo), np.uint64(g_hi)):
        e = g * np.uint64(4)
        x0 = np.float64(vec[e])
        x1 = np.float64(vec[e + np.uint64(1)])
        x2 = np.float64(vec[e + np.uint64(2)])
        x3 = np.float64(vec[e + np.uint64(3)])
        k = g * np.uint64(5)
        a = words[k]
        b = words[k + np.uint64(1)]
        c = words[k + np.uint64(2)]
        d = words[k + np.uint64(3)]
        f = words[k + np.uint64(4)]
        # element e+q, row r sits at flat code 5(e+q) + r: word (5q+r)//4, lane (5q+r)%4
        t[_lane(a, 0)] += x0
        t[o1 + _lane(a, 1)] += x0
        t[o2 + _lane(a, 2)] += x0
        t[o3 + _lane(a, 3)] += x0
        t[o4 + _lane(b, 0)] += x0
        t[_lane(b, 1)] += x1
        t[o1 + _lane(b, 2)] += x1
        t[o2 + _lane(b, 3)] += x1
        t[o3 + _lane(c, 0)] += x1
        t[o4 + _lane(c, 1)] += x1
        t[_lane(c, 2)] += x2
        t[o1 + _lane(c, 3)] += x2
        t[o2 + _lane(d, 0)] += x2
        t[o3 + _lane(d, 1)] += x2
        t[o4 + _lane(d, 2)] += x2
        t[_lane(d, 3)] += x3
        t[o1 + _lane(f, 0)] += x3
        t[o2 + _lane(f, 1)] += x3
        t[o3 + _lane(f, 2)] += x3
        t[o4 + _lane(f, 3)] += x3
    _chunk_kernel(vec, codes, 4 * g_hi, hi, t, cols)


@njit(**_JIT)
def _sketch_chunk(vec, codes, words, lo, hi, t, cols):
    """t = sign-split sketch of vec[lo:hi]; words is empty where lanes cannot be used."""
    t[:] = 0.0
    if codes.shape[1] == 5 and words.size > 0:
        _chunk_kernel_5(vec, codes, words, lo, hi, t, cols)
    else:
        _chunk_kernel(vec, codes, lo, hi, t, cols)


@njit(**_JIT_PARALLEL)
def _sketch_kernel_parallel(vec, codes, words, scratch, out, chunk):
    """out = sk(vec); chunk c of ``chunk`` elements goes into its own table scratch[c].

    The caller sets numba's parallel chunk size to 1 (a ``with parallel_chunksize``
    block here would defeat caching), so chunks are handed out one at a time and a
    thread slowed by another process on a shared core does not hold up the rest.
    """
    dim = vec.shape[0]
    cols = out.shape[1]
    for c in prange(scratch.shape[0]):
        _sketch_chunk(vec, codes, words, c * chunk, min(dim, (c + 1) * chunk), scratch[c], cols)
    _reduce_chunks(scratch, out)


@njit(**_JIT)
def _sketch_kernel_serial_chunks(vec, codes, words, scratch, out, chunk):
    """_sketch_kernel_parallel on the calling thread, same chunks, same bits: for one
    chunk or one thread, where waking the thread pool costs more than it saves."""
    dim = vec.shape[0]
    cols = out.shape[1]
    for c in range(scratch.shape[0]):
        _sketch_chunk(vec, codes, words, c * chunk, min(dim, (c + 1) * chunk), scratch[c], cols)
    _reduce_chunks(scratch, out)


@njit(**_JIT)
def _reduce_chunks(scratch, out):
    """out[r, j] = sum_c (plus - minus), in chunk order, so the result does not
    depend on how many threads ran or which thread took which chunk."""
    rows, cols = out.shape
    out[:] = 0.0
    for c in range(scratch.shape[0]):
        t = scratch[c]
        for r in range(rows):
            base = 2 * cols * r
            for j in range(cols):
                out[r, j] += t[base + 2 * j] - t[base + 2 * j + 1]


# --------------------------------------------------------------------------- helpers


def _check_int(name, value, lo, hi=None, fix=""):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: expected an int, got {type(value).__name__}")
    value = int(value)
    if value < lo or (hi is not None and value > hi):
        span = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name} {value}: must be {span}{fix}")
    return value


def _as_host_float32(vec, dim):
    """Zero-copy view of a numpy array or CPU torch tensor, validated for the kernel."""
    if not isinstance(vec, np.ndarray):
        device = getattr(vec, "device", None)
        if device is not None and getattr(device, "type", "cpu") != "cpu":
            raise ValueError(f"vec: on device {device}; use AmsSketch.sketch_torch for device tensors")
        if hasattr(vec, "detach"):
            vec = vec.detach().numpy()
        else:
            raise ValueError(f"vec: expected a numpy array or torch tensor, got {type(vec).__name__}")
    if vec.dtype != np.float32:
        raise ValueError(f"vec: dtype {vec.dtype}, expected float32; convert with .astype(np.float32)")
    if vec.ndim != 1 or vec.shape[0] != dim:
        raise ValueError(f"vec: shape {vec.shape}, expected ({dim},); pass the flat parameter vector")
    if not vec.flags.c_contiguous:
        raise ValueError("vec: not contiguous; pass np.ascontiguousarray(vec)")
    return vec


# --------------------------------------------------------------------------- public class


class AmsSketch:
    """AMS sketch of ``dim``-vectors with ``rows`` x ``cols`` tables, hashes from ``seed``.

    Construction builds the hash tables (``2 * rows * dim`` bytes, see module doc);
    :meth:`sketch_into` then costs one streaming pass over ``vec`` and the table.
    Sketches are float64; :attr:`nbytes` is their size when communicated as float32.
    An instance reuses private scratch, so one instance must not be used from two
    threads at once.
    """

    def __init__(self, dim: int, rows: int = SKETCH_ROWS, cols: int = SKETCH_COLS, seed: int = 0):
        self.dim = _check_int("dim", dim, 1, MERSENNE_P - 1, fix=" (keys are indices mod p)")
        self.rows = _check_int("rows (--sketch-rows)", rows, 1, fix="; use 5 (the paper's l)")
        self.cols = _check_int("cols (--sketch-cols)", cols, 1, _MAX_COLS, fix=" (buckets are packed in 14 bits)")
        self.seed = _check_int("seed", seed, 0, fix="; derive it from the run seed")
        bucket, sign = hash_coefficients(self.rows, self.seed)
        coeffs = np.array([b + s for b, s in zip(bucket, sign)], dtype=np.uint64)
        # Padded to a multiple of 4 elements so that the table is also a whole number of
        # uint64 words (see _chunk_kernel_5); the pad entries are never read as data.
        padded = np.empty((-(-self.dim // 4) * 4, self.rows), dtype=np.uint16)
        keep_torch_threads(_hash_table_kernel, coeffs, np.int64(self.cols), padded)
        self._codes = padded[: self.dim]
        little = sys.byteorder == "little"
        self._words = padded.reshape(-1).view(np.uint64) if little else np.empty(0, np.uint64)
        self._scratch = None
        self._device_codes = {}

    # ---- sketching

    @property
    def nbytes(self) -> int:
        """Bytes of one sketch on the wire (float32): ``4 * rows * cols``."""
        return 4 * self.rows * self.cols

    @property
    def codes(self) -> np.ndarray:
        """Read-only packed hash table, ``(dim, rows)`` uint16: ``(h_r(i) << 1) | [g_r(i) < 0]``."""
        view = self._codes.view()
        view.flags.writeable = False
        return view

    def sketch(self, vec) -> np.ndarray:
        """``sk(vec)`` as a new ``(rows, cols)`` float64 array."""
        return self.sketch_into(vec, np.empty((self.rows, self.cols), dtype=np.float64))

    def sketch_into(self, vec, out: np.ndarray) -> np.ndarray:
        """Write ``sk(vec)`` into ``out`` ((rows, cols) float64, C-contiguous); no allocation."""
        vec = _as_host_float32(vec, self.dim)
        if not (isinstance(out, np.ndarray) and out.dtype == np.float64
                and out.shape == (self.rows, self.cols) and out.flags.c_contiguous
                and out.flags.writeable):
            raise ValueError(f"out: expected a writeable C-contiguous float64 array of shape "
                             f"({self.rows}, {self.cols}); allocate it with np.empty")
        nchunks = -(-self.dim // _CHUNK)
        if self._scratch is None or self._scratch.shape[0] != nchunks:
            self._scratch = np.empty((nchunks, 2 * self.rows * self.cols), dtype=np.float64)
        if self._scratch.shape[0] == 1 or numba.get_num_threads() == 1:
            _sketch_kernel_serial_chunks(vec, self._codes, self._words, self._scratch, out, _CHUNK)
        else:
            previous = numba.set_parallel_chunksize(1)  # dynamic schedule, one chunk at a time
            try:
                _sketch_kernel_parallel(vec, self._codes, self._words, self._scratch, out, _CHUNK)
            finally:
                numba.set_parallel_chunksize(previous)
        return out

    def sketch_torch(self, vec):
        """``sk(vec)`` as a float64 ``(rows, cols)`` tensor on ``vec.device``.

        For GPU-resident parameters: the packed table is copied to the device once per
        device (row-major, ``2 * rows * dim`` bytes) and each row is one ``index_add_``.
        Same hashes as :meth:`sketch`; sums may differ in the last bits (atomic order).
        """
        import torch

        if not isinstance(vec, torch.Tensor) or vec.ndim != 1 or vec.shape[0] != self.dim:
            shape = tuple(vec.shape) if hasattr(vec, "shape") else type(vec).__name__
            raise ValueError(f"vec: expected a 1-D torch tensor of length {self.dim}, got {shape}")
        if not vec.is_floating_point():
            raise ValueError(f"vec: dtype {vec.dtype}, expected a floating dtype; convert with .float()")
        codes = self._device_codes.get(vec.device)
        if codes is None:
            # int16 view: torch lacks shifts on uint16; codes < 2^15 read the same.
            codes = torch.from_numpy(np.ascontiguousarray(self._codes.T).view(np.int16))
            codes = codes.to(vec.device)
            self._device_codes[vec.device] = codes
        x = vec.detach().to(torch.float64)
        out = torch.zeros((self.rows, self.cols), dtype=torch.float64, device=vec.device)
        for r in range(self.rows):
            code = codes[r]
            out[r].index_add_(0, (code >> 1).to(torch.int64), torch.where((code & 1).bool(), -x, x))
        return out

    # ---- state

    def state_dict(self) -> dict:
        """Everything the tables derive from; the tables themselves are rebuilt."""
        return {"dim": self.dim, "rows": self.rows, "cols": self.cols, "seed": self.seed,
                "hash_family": _HASH_FAMILY}

    @classmethod
    def from_state_dict(cls, state: dict) -> "AmsSketch":
        """A new sketch with the hashes recorded in ``state``."""
        _check_family(state)
        return cls(state["dim"], state["rows"], state["cols"], state["seed"])

    def load_state_dict(self, state: dict) -> None:
        """Adopt ``state``; rebuilds the tables only if a parameter changed."""
        _check_family(state)
        if all(state[k] == getattr(self, k) for k in ("dim", "rows", "cols", "seed")):
            return
        self.__init__(state["dim"], state["rows"], state["cols"], state["seed"])

    def __repr__(self) -> str:
        return f"AmsSketch(dim={self.dim}, rows={self.rows}, cols={self.cols}, seed={self.seed})"


def compile_kernels() -> None:
    """Compile every kernel now, or load it from Numba's on-disk cache.

    Numba otherwise compiles on first use. Call this on one rank before a barrier so
    that the other ranks load the cache instead of all compiling at once.
    """
    sk = AmsSketch(16, rows=5, cols=4)  # builds a table: compiles the hash kernel
    vec = np.zeros(16, dtype=np.float32)
    out = np.empty((5, 4), dtype=np.float64)
    scratch = np.empty((2, 2 * 5 * 4), dtype=np.float64)
    _sketch_kernel_serial_chunks(vec, sk._codes, sk._words, scratch, out, 8)
    _sketch_kernel_parallel(vec, sk._codes, sk._words, scratch, out, 8)


def _check_family(state):
    missing = [k for k in ("dim", "rows", "cols", "seed") if k not in state]
    if missing:
        raise ValueError(f"state: missing keys {missing}; pass AmsSketch.state_dict() output")
    family = state.get("hash_family", _HASH_FAMILY)
    if family != _HASH_FAMILY:
        raise ValueError(f"state: hash_family {family!r} is not {_HASH_FAMILY!r}; "
                         "sketches from other hash families cannot be mixed")
