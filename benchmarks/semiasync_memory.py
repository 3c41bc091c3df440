"""Memory of the semi-asynchronous mode as the number of clients grows.

    python benchmarks/semiasync_memory.py                                   # LeNet-5, FedAvg, N = 1k and 10k
    python benchmarks/semiasync_memory.py --model cnn --strategy fedqs-avg --extra=--fedqs-sketch-similarity

For each N: one run of ``--mode semiasync`` on R ranks (2-step jobs, K = 10, speed ratio
1:50) long enough that every client reports (2N/K aggregations: virtual time passes the
slowest client's 50 units), read from its run file: every rank's peak RSS and the most
models it held in memory at once (a host's global versions, the server's early updates;
beyond ``--model-cache-gb`` they wait on disk). Then, per client, the bytes of each
component of the state a rank keeps, taken from the objects the mode builds (one host's
clients, built in this process) and from the server's per-client arrays.

The data set bounds N: FashionMNIST has 60,000 training samples and every client needs
one, so N = 100,000 needs a larger training set (``--dataset``); the mode refuses with a
one-line error otherwise.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)
from _common import REPO_ROOT, print_report, run_train


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", default="1000,10000")
    p.add_argument("--strategy", default="fedavg")
    p.add_argument("--model", default="lenet5")
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--partition", default="iid", help="memory hardly depends on the labels; iid gives every client data")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--buffer", type=int, default=10)
    p.add_argument("--tau", type=int, default=2)
    p.add_argument("--speed-ratio", type=int, default=50)
    p.add_argument("--rounds-per-client", type=float, default=2.0, help="aggregations = this x N / K")
    p.add_argument("--extra", default="", help="more train flags, e.g. \"--model-cache-gb 0.5\"")
    p.add_argument("--out-dir", default=os.path.join(REPO_ROOT, "runs", "semiasync_memory"))
    p.add_argument("--timeout", type=float, default=7200)
    return p.parse_args(argv)


def flags(args, n: int) -> list[str]:
    rounds = math.ceil(args.rounds_per_client * n / args.buffer)
    return ["--mode", "semiasync", "--strategy", args.strategy, "--model", args.model, "--dataset", args.dataset,
            "--partition", args.partition, "--clients", str(n), "--buffer", str(args.buffer), "--tau", str(args.tau),
            "--speed-ratio", str(args.speed_ratio), "--rounds", str(rounds), "--eval-every", str(rounds),
            "--log-every", str(rounds), *shlex.split(args.extra)]


def per_client_bytes(args, n: int) -> dict[str, float]:
    """Mean bytes per client of each component, from the objects the mode builds for one
    host (rank 1 of ``--ranks``) and the server's per-client arrays."""
    import numpy as np

    from fdahpc.cli import parse_args
    from fdahpc.data import partition
    from fdahpc.models import build_model
    from fdahpc.run import load_data
    from fdahpc.semiasync.mode import _split, host_of
    from fdahpc.semiasync.rules import build_rule

    cfg = parse_args(flags(args, n)).cfg
    hosts = host_of(n, args.ranks)
    mine = [c for c in range(n) if hosts[c] == 1]
    parts = []

    def rows(labels):
        parts.extend(partition(labels, n, cfg.partition, cfg.seed))
        return np.concatenate([parts[c] for c in mine])

    data = load_data(cfg, rows)
    fedqs = build_rule(cfg.strategy).needs_client_state
    clients = _split(cfg, mine, parts, data.x_train, data.y_train, fedqs)
    model = build_model(cfg.model, data.x_train.shape[1], data.x_train.shape[2], data.num_classes)
    dim = sum(p.numel() for p in model.parameters())
    k = len(clients)
    sample = data.x_train[:1].nbytes + data.y_train[:1].nbytes
    out = {
        "training samples (the data set, split)": sum(len(c.batches) for c in clients.values()) * sample / k,
        "batch stream (generator, permutation)": sum(len(c.batches.gen.get_state().numpy().tobytes())
                                                     + 8 * len(c.batches) for c in clients.values()) / k,
    }
    if fedqs:
        sketch = "--fedqs-sketch-similarity" in args.extra
        out["FedQS last update" + (" (5x250 sketch)" if sketch else " (float32; memory up to the cache, then disk)")] = \
            5 * 250 * 4 if sketch else 4 * dim
        out["FedQS label-test rows"] = sum(c.probe.nbytes for c in clients.values() if c.probe is not None) / k
    out["server (clock with every client's job, counts, similarity, host)"] = server_bytes(n, cfg, args.ranks) / n
    return out


def server_bytes(n: int, cfg, ranks: int) -> int:
    """The server's per-client structures for ``n`` clients, measured with tracemalloc:
    the virtual clock with one job of every client in its heap (every client trains at
    once), the aggregation counts, the similarities, the client-to-host map."""
    import tracemalloc

    import numpy as np

    from fdahpc.semiasync.clock import VirtualClock
    from fdahpc.semiasync.mode import host_of

    warm = VirtualClock(2, cfg.speed_ratio, cfg.seed)  # one-off allocations (generators, caches) before tracing
    warm.start(0, 0)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    clock = VirtualClock(n, cfg.speed_ratio, cfg.seed)
    for c in clock.starters(None, 0):
        clock.start(c, 0)
    held = (clock, np.zeros(n, dtype=np.int64), np.full(n, np.nan), host_of(n, ranks))
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del held
    return used


def main(argv=None) -> int:
    args = parse(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    sizes = [int(s) for s in args.clients.split(",")]
    rows, totals = [], {}
    for n in sizes:
        out = os.path.join(args.out_dir, f"{args.strategy}-{args.model}-n{n}.h5")
        run = run_train(args.ranks, flags(args, n), out, args.timeout)
        rss = [int(x) for x in run["peak_rss_per_rank"]]
        held = [int(x) for x in run["models_held_peak_per_rank"]]
        totals[n] = sum(rss)
        rows.append([n, run["rounds_done"], f"{sum(rss) / 2**30:.2f}", " / ".join(f"{r / 2**30:.2f}" for r in rss),
                     " / ".join(str(h) for h in held), f"{run['wall_seconds']:.0f}"])
        print(f"N = {n}: {sum(rss) / 2**30:.2f} GB over {args.ranks} ranks", file=sys.stderr, flush=True)
    print_report(f"Semi-async memory: {args.strategy}, {args.model} on {args.dataset} ({args.partition}), "
                 f"{args.ranks} ranks, K = {args.buffer}, {args.tau}-step jobs, 1:{args.speed_ratio}"
                 + (f", {args.extra}" if args.extra else ""),
                 ["N", "rounds", "peak RSS GB (all ranks)", "per rank (0 = server)", "models held (per rank)", "wall s"],
                 rows, "peak RSS: each rank's own maximum, summed; models held: the most models a rank kept in memory "
                 "at once (server: updates that came early; hosts: global versions of pending jobs, and the FedQS clients' last "
                 "updates when kept in full).")
    if len(sizes) > 1:
        a, b = sizes[0], sizes[-1]
        print(f"\nmarginal memory per client (N = {a} -> {b}): {(totals[b] - totals[a]) / (b - a) / 1024:.1f} KB")
    comp = per_client_bytes(args, sizes[-1])
    print(f"\nper-client state by component (N = {sizes[-1]}, bytes):")
    for name, value in comp.items():
        print(f"  {name:45s} {value:12,.0f}")
    print(f"  {'total':45s} {sum(comp.values()):12,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
