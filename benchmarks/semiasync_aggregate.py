"""Who adds the updates: rank 0 alone (``--aggregate server``) or the hosts (``--aggregate hosts``).

    python benchmarks/semiasync_aggregate.py                       # 4, 8, 16 and 44 ranks, small CNN
    python benchmarks/semiasync_aggregate.py --ranks 4,8 --model lenet5 --repeats 1

For each rank count R: the same semi-asynchronous job (FedAvg, N = max(4(R−1), 2K) clients, K = 10,
one-step jobs, scored once) run both ways, interleaved ``--repeats`` times. Reads from the
run files rank 0's bytes per round (as ``round/bytes`` counts them: K headers plus the K
payloads, or one reduced int64 vector; the models sent, or one broadcast) and the wall
time per round, and checks that both ways end with the same model bit for bit.

Then the α–β model of ``cost_model.py`` prices rank 0's communication per round on the
modelled fabrics up to 1,024 hosts: the server path receives K payloads and sends up to
min(K, H) models through rank 0's link one after another, ``K(α + nβ) + min(K, H)(α + n'β)``;
the host path is one reduction of the 8-byte fixed-point vector and one broadcast of the
model over H + 1 ranks, each priced like a Rabenseifner AllReduce of its size (reduce-
scatter then gather; scatter then allgather), ``T(2n, H+1) + T(n', H+1)``; n is the model's
float32 bytes, n' what a host downloads (twice n for FedQS: the model and Mod①'s reference).
Rank 0's bytes on the wire in that model: the server path ``K·n + min(K, H)·n'``, the host
path about ``2·2n + 2·n'`` (its share of the reduce-scatter and gather, of the scatter and
allgather).
"""

from __future__ import annotations

import argparse
import os
import sys

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)
from _common import REPO_ROOT, median, print_report, read_run, run_train
from cost_model import FABRICS, allreduce_seconds, fabric_alpha_beta


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="4,8,16,44")
    p.add_argument("--model", default="cnn")
    p.add_argument("--dataset", default="mnist5k", help="small, so that 44 ranks fit in a 24 GB machine")
    p.add_argument("--strategy", default="fedavg")
    p.add_argument("--buffer", type=int, default=10)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--project", default="4,16,64,256,1024", help="host counts H for the α–β projection")
    p.add_argument("--out-dir", default=os.path.join(REPO_ROOT, "runs", "semiasync_aggregate"))
    p.add_argument("--timeout", type=float, default=3600)
    return p.parse_args(argv)


def flags(args, ranks: int, how: str) -> list[str]:
    return ["--mode", "semiasync", "--strategy", args.strategy, "--model", args.model, "--dataset", args.dataset,
            "--clients", str(max(4 * (ranks - 1), 2 * args.buffer)), "--buffer", str(args.buffer), "--rounds", str(args.rounds),
            "--tau", "1", "--batch-size", "8", "--speed-ratio", "5", "--eval-every", str(args.rounds),
            "--aggregate", how]


def server_seconds(n: float, n_down: float, k: int, hosts: int, alpha: float, beta: float) -> float:
    return k * (alpha + n * beta) + min(k, hosts) * (alpha + n_down * beta)


def hosts_seconds(n: float, n_down: float, hosts: int, alpha: float, beta: float) -> float:
    return allreduce_seconds(2 * n, hosts + 1, alpha, beta) + allreduce_seconds(n_down, hosts + 1, alpha, beta)


def main(argv=None) -> int:
    import h5py
    import numpy as np

    args = parse(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    rows, params = [], None
    for ranks in [int(r) for r in args.ranks.split(",")]:
        per = {"server": [], "hosts": []}
        models = {}
        for rep in range(args.repeats):
            for how in ("server", "hosts"):
                out = os.path.join(args.out_dir, f"r{ranks}-{how}-{rep}.h5")
                run_train(ranks, flags(args, ranks, how), out, args.timeout)
                run = read_run(out)
                with h5py.File(out) as f:
                    per[how].append((run["wall_seconds"] / run["rounds_done"], float(np.median(f["round/bytes"][:]))))
                    models[how] = f["final/model"][:]
                    params = f["final/model"].shape[0]
        same = np.array_equal(models["server"], models["hosts"])
        t = {h: median([x[0] for x in per[h]]) for h in per}
        b = {h: median([x[1] for x in per[h]]) for h in per}
        rows.append([ranks, f"{b['server'] / 1e6:.2f}", f"{b['hosts'] / 1e6:.2f}", f"{b['server'] / b['hosts']:.2f}",
                     f"{1e3 * t['server']:.0f}", f"{1e3 * t['hosts']:.0f}", f"{t['server'] / t['hosts']:.2f}",
                     "yes" if same else "NO"])
        print(f"{ranks} ranks done", file=sys.stderr, flush=True)
    print_report(f"Semi-async aggregation, measured: {args.strategy}, {args.model} ({params:,} floats), K = {args.buffer}, "
                 f"N = max(4 per host, 2K), 1-step jobs, {args.repeats} interleaved repeats (medians), this machine's cores",
                 ["ranks", "rank 0 MB/round server", "hosts", "ratio", "ms/round server", "hosts", "ratio", "same model"],
                 rows, "MB/round: round/bytes (what rank 0 received and sent, logical: one copy of each collective's "
                       "buffer); ms/round: wall time over rounds, jobs included.")
    n = 4.0 * params
    n_down = 2 * n if args.strategy.startswith("fedqs") else n
    proj = []
    for fabric, spec in FABRICS.items():
        alpha, beta = fabric_alpha_beta(spec.gbps, spec.latency_us)
        for h in [int(x) for x in args.project.split(",")]:
            s = server_seconds(n, n_down, args.buffer, h, alpha, beta)
            o = hosts_seconds(n, n_down, h, alpha, beta)
            wire_s = args.buffer * n + min(args.buffer, h) * n_down
            wire_h = 2 * (h / (h + 1)) * 2 * n + 2 * (h / (h + 1)) * n_down
            proj.append([fabric, h, f"{wire_s / 1e6:.1f}", f"{wire_h / 1e6:.1f}", f"{1e3 * s:.2f}", f"{1e3 * o:.2f}",
                         f"{s / o:.2f}"])
    print()
    print_report(f"Projected rank-0 communication per round (α–β, K = {args.buffer}, n = {n / 1e6:.2f} MB)",
                 ["fabric", "hosts H", "rank 0 MB server", "hosts", "ms server", "ms hosts", "server / hosts"], proj,
                 "server: K uploads in and min(K, H) models out through rank 0's link; hosts: a reduction of the "
                 "int64 vector and a broadcast of the model, each a Rabenseifner collective over H + 1 ranks.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
