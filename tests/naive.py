"""Slow, obviously-correct reference implementations; fast code is tested against them.

Each reference is a plain loop over the published definition, written for
readability, never for speed. Keep inputs small.
"""

import statistics

import numpy as np

# --------------------------------------------------------------------------- AMS sketch

MERSENNE_P = 2**61 - 1


def naive_ams_sketch(vec, rows, cols, seed):
    """sk(v)[r, h_r(i)] += g_r(i) * v_i, hashes evaluated with Python big ints.

    h_r(i) = ((b0 + b1 i) mod p) mod cols; g_r(i) = +1 if (s0 + s1 i + s2 i^2 + s3 i^3)
    mod p is even, else -1; coefficients from fdahpc.sketch.hash_coefficients.
    """
    from fdahpc.sketch import hash_coefficients  # local: other references need no numba

    bucket_coeffs, sign_coeffs = hash_coefficients(rows, seed)
    sk = [[0.0] * cols for _ in range(rows)]
    for r in range(rows):
        b0, b1 = bucket_coeffs[r]
        s0, s1, s2, s3 = sign_coeffs[r]
        for i, v in enumerate(np.asarray(vec, dtype=np.float64).tolist()):
            h = (b0 + b1 * i) % MERSENNE_P % cols
            g = 1.0 if (s0 + s1 * i + s2 * i**2 + s3 * i**3) % MERSENNE_P % 2 == 0 else -1.0
            sk[r][h] += g * v
    return np.array(sk)


def naive_sq_norm_estimate(sk):
    """M2(S) = median over rows of the row's sum of squares."""
    return statistics.median(sum(float(x) ** 2 for x in row) for row in np.asarray(sk))


# ---------------------------------------------------------------- aggregation references
# Literal float64 loops over coordinates for fdahpc.aggregate (FedAvgM, FedAdam, FedAdp).

import math as _math


def naive_fedavgm_round(w_server, w_mean, v, eta_s, beta):
    """One FedAvgM server round, coordinate by coordinate:
    Delta = w_server - w_mean; v <- beta v + Delta; w <- w - eta_s v.
    Returns (new w_server, new v) as float64 lists."""
    w_new, v_new = [], []
    for j in range(len(w_server)):
        delta = float(w_server[j]) - float(w_mean[j])
        vj = beta * float(v[j]) + delta
        v_new.append(vj)
        w_new.append(float(w_server[j]) - eta_s * vj)
    return w_new, v_new


def naive_fedadam_round(w_server, w_mean, m, v, eta_s, beta_1, beta_2, tau):
    """One FedAdam server round (Reddi et al., no bias correction), coordinate by
    coordinate. Returns (new w_server, new m, new v) as float64 lists."""
    w_new, m_new, v_new = [], [], []
    for j in range(len(w_server)):
        delta = float(w_server[j]) - float(w_mean[j])
        mj = beta_1 * float(m[j]) + (1.0 - beta_1) * delta
        vj = beta_2 * float(v[j]) + (1.0 - beta_2) * delta * delta
        m_new.append(mj)
        v_new.append(vj)
        w_new.append(float(w_server[j]) - eta_s * mj / (_math.sqrt(vj) + tau))
    return w_new, m_new, v_new


def naive_fedadp_weights(updates, n, smoothed_prev, counts_prev, alpha=5.0):
    """FedAdp weights for one round, literally: g = sum_i (n_i/n) Delta_i, angles with
    explicit loops (pi/2 when a norm is 0), per-node smoothing with counts, Gompertz,
    and the plain softmax sum_j n_j e^{f_j}. All lists are aligned with ``updates``
    (the participants of this round). Returns (psi, theta, smoothed, counts)."""
    total = float(sum(n))
    d = len(updates[0])
    g = [0.0] * d
    for u, ni in zip(updates, n):
        for j in range(d):
            g[j] += (ni / total) * float(u[j])
    g_norm = _math.sqrt(sum(x * x for x in g))
    theta, smoothed, counts = [], [], []
    for i, u in enumerate(updates):
        dot = sum(float(u[j]) * g[j] for j in range(d))
        u_norm = _math.sqrt(sum(float(x) * float(x) for x in u))
        if u_norm == 0.0 or g_norm == 0.0:
            th = _math.pi / 2
        else:
            th = _math.acos(max(-1.0, min(1.0, dot / (u_norm * g_norm))))
        c = counts_prev[i] + 1
        theta.append(th)
        counts.append(c)
        smoothed.append((c - 1) / c * smoothed_prev[i] + th / c)
    f = [alpha * (1.0 - _math.exp(-_math.exp(-alpha * (s - 1.0)))) for s in smoothed]
    num = [ni * _math.exp(fi) for ni, fi in zip(n, f)]
    den = sum(num)
    psi = [x / den for x in num]
    return psi, theta, smoothed, counts
