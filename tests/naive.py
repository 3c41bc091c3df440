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


def naive_fedadam_round(w_server, w_mean, m, v, eta_s, beta_1, beta_2, tau, t=None):
    """One FedAdam server round (Reddi et al.; with ``t``, Adam's bias correction for round
    t), coordinate by coordinate. Returns (new w_server, new m, new v) as float64 lists."""
    w_new, m_new, v_new = [], [], []
    for j in range(len(w_server)):
        delta = float(w_server[j]) - float(w_mean[j])
        mj = beta_1 * float(m[j]) + (1.0 - beta_1) * delta
        vj = beta_2 * float(v[j]) + (1.0 - beta_2) * delta * delta
        m_new.append(mj)
        v_new.append(vj)
        m_hat, v_hat = (mj, vj) if t is None else (mj / (1.0 - beta_1 ** t), vj / (1.0 - beta_2 ** t))
        w_new.append(float(w_server[j]) - eta_s * m_hat / (_math.sqrt(v_hat) + tau))
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


# ------------------------------------------------------------- semi-asynchronous references
# Plain float loops over FedQS (arXiv 2510.07664, Sections 3.3-3.4) and FedBuff
# (arXiv 2106.06639) for fdahpc.semiasync.rules and fdahpc.semiasync.fedqs.


def naive_fedqs_weights(n, feedback, G, staleness, clients, counts, K, N, round_now, weight="paper",
                        use_feedback=True, reset_flags=False):
    """Mod③ weights, client by client. Base p_i = n_i / sum n_j. A flagged client (with
    reset_flags only when its staleness is 0), with phi = K/N and
    F_i = (counts[c] + 1) / round_now (misread: counts[c] / max(1, sum counts); authors: the
    client's share of every aggregated update, this buffer's entries counted in), gets
      paper:   (e/2)^(phi - F_i) * (1 + min(max(G,0),2))^2 / K          (replacing p_i)
      authors: p_i * (e/2)^(phi - F_i) * (1 + min(max(G,0),2)^2)        (multiplying p_i)
      misread: exp(phi - F_i) / max(2 phi - F_i, phi/10) * (1 + min(max(G,0),9)) / (2K)
    then normalize."""
    total_n = 0.0
    for ni in n:
        total_n += float(ni)
    total_c = 0.0
    for c in counts:
        total_c += float(c)
    phi = K / N
    p = []
    for i in range(len(n)):
        base = float(n[i]) / total_n
        flagged = use_feedback and feedback[i] and (not reset_flags or staleness[i] == 0)
        if not flagged:
            p.append(base)
            continue
        g = float(G[i])
        if g < 0.0:
            g = 0.0
        if weight == "misread":
            if g > 9.0:
                g = 9.0
            F = float(counts[clients[i]]) / (total_c if total_c > 1.0 else 1.0)
            den = 2.0 * phi - F
            if den < phi / 10.0:
                den = phi / 10.0
            p.append(_math.exp(phi - F) / den * (1.0 + g) / (2.0 * K))
            continue
        if g > 2.0:
            g = 2.0
        F = (float(counts[clients[i]]) + 1.0) / round_now
        if weight == "authors":
            mine = float(counts[clients[i]]) + sum(1.0 for c in clients if c == clients[i])
            F = mine / (total_c + len(clients))
        if weight == "paper":
            p.append((_math.e / 2.0) ** (phi - F) * (1.0 + g) * (1.0 + g) / K)
        else:
            p.append(base * (_math.e / 2.0) ** (phi - F) * (1.0 + g * g))
    s = sum(p)
    return [x / s for x in p]


def naive_authors_weights(n, flag, G, F, phi):
    """The authors' Mod③ as ALGORITHMS.md §3 states it, written out once more: weights
    n_i / sum n; a flagged client's times (e/2)^(phi - F_i) times (1 + min(G_i, 2)^2); all
    normalized."""
    w = [float(x) for x in n]
    tot = sum(w)
    w = [x / tot for x in w]
    for i in range(len(w)):
        if flag[i]:
            g = min(float(G[i]), 2.0)
            w[i] = w[i] * pow(_math.e / 2.0, phi - float(F[i])) * (1.0 + g * g)
    tot = sum(w)
    return [x / tot for x in w]


def naive_layer_angle(delta, ref, layers):
    """The authors' per-layer angle in degrees, in plain floats: per (start, end) layer,
    skip it if either vector has a zero; min-max to [0, 1] (a constant vector: left as
    it is); divide by the sum; the angle between the two; the mean over the layers kept
    (0 when none)."""
    angles = []
    for lo, hi in layers:
        x = [float(v) for v in delta[lo:hi]]
        y = [float(v) for v in ref[lo:hi]]
        if any(v == 0.0 for v in x) or any(v == 0.0 for v in y):
            continue
        if max(x) != min(x):
            x = [(v - min(x)) / (max(x) - min(x)) for v in x]
        if max(y) != min(y):
            y = [(v - min(y)) / (max(y) - min(y)) for v in y]
        sx, sy = sum(x), sum(y)
        x = [v / sx for v in x]
        y = [v / sy for v in y]
        dot = sum(a * b for a, b in zip(x, y))
        nx = _math.sqrt(sum(a * a for a in x))
        ny = _math.sqrt(sum(b * b for b in y))
        c = dot / nx / ny
        c = 1.0 if c > 1.0 else (-1.0 if c < -1.0 else c)
        angles.append(_math.degrees(_math.acos(c)))
    return sum(angles) / len(angles) if angles else 0.0


def naive_fedqs_decision(lr_prev, f_i, f_bar, s_i, s_bar, label_acc, a=0.002, m0=0.1, k=0.2,
                         lr_min=0.001, lr_max=0.2, cap=9.0, label_gap=0.30, momentum=True, variant="paper",
                         cosine=True, g_max=2.0, authors_momentum=False):
    """Mod②, the table of the paper as if-statements. Returns
    (type name, lr, momentum rate, feedback, F, G)."""
    if f_i <= 0:
        F = cap
    else:
        F = f_bar / f_i
        if F > cap:
            F = cap
    if variant == "authors":
        if s_bar <= 0:
            G = 1.0
        else:
            G = s_i / s_bar
            if G > cap:
                G = cap
        strong = s_i > s_bar
    else:
        num, den = (1.0 + s_bar, 1.0 + s_i) if cosine else (s_bar, s_i)
        if den <= 0:
            G = 1.0 if num <= 0 else g_max
        else:
            G = num / den
            if G < 0:
                G = 0.0
            if G > g_max:
                G = g_max
        strong = s_i < s_bar
    if f_i > f_bar and strong:
        kind, lr, feedback = "FSBC", lr_prev, True
    elif f_i > f_bar:
        kind, lr, feedback = "FWBC", lr_prev - a * F, False
    elif not strong:
        kind, lr, feedback = "SWBC", lr_prev + a * F, False
    else:
        kind, lr = "SSBC", lr_prev + a * F
        feedback = False
        if label_acc is not None and len(label_acc) > 0:
            feedback = max(label_acc) - min(label_acc) >= label_gap
    if lr < lr_min:
        lr = lr_min
    if lr > lr_max:
        lr = lr_max
    if feedback or not momentum or (variant == "authors" and not authors_momentum):
        m = 0.0
    elif G == 0:
        m = m0 + 0.4
    elif variant == "authors" and kind == "SSBC":
        # their _multi files: 0.1 + max(0, min(20 (0.1 θ̄/θ - 0.1), 0.4)); θ > θ̄ here, so 0.1
        m = m0 + max(0.0, min(2.0 * (1.0 / G - 1.0), 0.4))
    elif variant == "authors":
        m = m0 + min(2.0 * (1.0 / G - 1.0), 0.4)
        if m < 0:
            m = 0.0
    else:
        m = m0 + k * (1.0 / G - 1.0)
        if m < 0:
            m = 0.0
        if m > m0 + 0.4:
            m = m0 + 0.4
    return kind, lr, m, feedback, F, G


def naive_heavy_ball(w0, grads, lr, m):
    """Equation 3 literally: w_e = w_{e-1} - lr [sum_{r=1..e} m^r g_{e-r} + g_e] for
    e = 1..E with grads = [g_1, ..., g_E] and g_0 = 0. Returns [w_1, ..., w_E] as lists."""
    d = len(w0)
    g = [[0.0] * d] + [[float(x) for x in gr] for gr in grads]
    w = [float(x) for x in w0]
    out = []
    for e in range(1, len(g)):
        for j in range(d):
            step = g[e][j]
            for r in range(1, e + 1):
                step += m ** r * g[e - r][j]
            w[j] -= lr * step
        out.append(list(w))
    return out


def naive_fedbuff(w, deltas, staleness, K, eta):
    """FedBuff's server step, coordinate by coordinate:
    w + eta * (1/K) * sum_i delta_i / sqrt(1 + tau_i). Returns a float list."""
    out = []
    for j in range(len(w)):
        acc = 0.0
        for delta, tau in zip(deltas, staleness):
            acc += float(delta[j]) / _math.sqrt(1.0 + tau)
        out.append(float(w[j]) + eta * acc / K)
    return out


def naive_mstep(w, models, staleness, K, alpha, a=0.5):
    """M-step FedAsync: beta_i = alpha (1 + tau_i)^(-a) / K;
    w_j <- (1 - sum beta) w_j + sum beta_i model_i[j]. Returns a float list."""
    beta = [alpha * (1.0 + t) ** (-a) / K for t in staleness]
    keep = 1.0 - sum(beta)
    return [keep * float(w[j]) + sum(b * float(m[j]) for b, m in zip(beta, models)) for j in range(len(w))]


def naive_wkafl(w, deltas, staleness, eta):
    """WKAFL: a_i = (e/2)^(-tau_i) / sum; g = sum a_i delta_i; drop delta_i with
    cos(delta_i, g) < 0 (keep all if all would go); w + eta * sum_kept a_i delta_i / sum_kept a_i."""
    raw = [(_math.e / 2.0) ** (-t) for t in staleness]
    a = [x / sum(raw) for x in raw]
    d = len(w)
    g = [sum(a[i] * float(deltas[i][j]) for i in range(len(a))) for j in range(d)]
    ng = _math.sqrt(sum(x * x for x in g))
    keep = []
    for delta in deltas:
        nd = _math.sqrt(sum(float(x) * float(x) for x in delta))
        dot = sum(float(x) * y for x, y in zip(delta, g))
        keep.append(ng == 0 or nd == 0 or dot / (nd * ng) >= 0.0)
    if not any(keep):
        keep = [True] * len(keep)
    tot = sum(ai for ai, k in zip(a, keep) if k)
    return [float(w[j]) + eta * sum(a[i] * float(deltas[i][j]) for i in range(len(a)) if keep[i]) / tot
            for j in range(d)]


def naive_sketched_cosines(n, sketches):
    """FedAdp's sketched cos(Delta_i, g): sk(g) = sum_i n_i sk_i, then per node the median
    over rows of the row cosines (0 where a row has zero norm), with plain loops."""
    nodes, rows, cols = len(sketches), len(sketches[0]), len(sketches[0][0])
    sk_g = [[sum(n[i] * float(sketches[i][r][j]) for i in range(nodes)) for j in range(cols)] for r in range(rows)]
    out = []
    for i in range(nodes):
        per_row = []
        for r in range(rows):
            a, b = [float(x) for x in sketches[i][r]], sk_g[r]
            dot = sum(x * y for x, y in zip(a, b))
            norm = _math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
            per_row.append(dot / norm if norm > 0 else 0.0)
        per_row.sort()
        mid = len(per_row) // 2
        out.append(per_row[mid] if len(per_row) % 2 else (per_row[mid - 1] + per_row[mid]) / 2)
    return out


def paper_comm_bytes(*, syncs, steps, dim, workers, state_bytes=0, model_reductions=1, round_state_bytes=0):
    """The FDA paper's training traffic (ALGORITHMS.md): every synchronization moves each
    worker's float32 model up and down (``4·d·K·2`` per full-model reduction) and any
    small state the rule gathers that round up and down too; every step each worker
    uploads its monitoring state once. The oracle for the measured figure."""
    per_sync = model_reductions * 4 * dim * workers * 2 + round_state_bytes * workers * 2
    return syncs * per_sync + state_bytes * steps * workers


# --------------------------------------------------------------------------- character samples

def naive_text_samples(role_texts, context, stride=1):
    """(role, x, next characters) for every window of ``context`` characters that has a
    next character, inside each role's text separately, starts ``stride`` apart."""
    out = []
    for role, text in enumerate(role_texts):
        for s in range(0, len(text) - context, stride):
            out.append((role, text[s:s + context], text[s + 1:s + context + 1]))
    return out

