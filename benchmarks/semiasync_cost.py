"""What the coordinator costs: a semi-asynchronous run against the same local work with
no communication, and the memory it takes.

    python benchmarks/semiasync_cost.py                       # 100 clients, small CNN, 4 ranks
    python benchmarks/semiasync_cost.py --model lenet5 --dataset mnist5k
    python benchmarks/semiasync_cost.py --clock ticks --eval-every 1 --model lenet5bn --ranks 2   # scoring included

1. Runs ``--mode semiasync`` (fedqs-avg by default: the rule with the most per-client
   state) with N clients on R ranks and reads, from its run file, the wall time of the
   serving loop, the jobs and local steps each host computed, and every rank's peak RSS.
2. Runs the same jobs on the same R ranks with no message at all: each host rank loads
   its clients' data and runs, per job, a fresh model state through the host's own
   local-job code (``Host.train``: the same optimizer and steps); rank 0 idles.
Prints the ratio of the two wall times (goal ≤ 1.3×) and the peak memory of all ranks
together (goal < 4 GB for 100 clients of the small CNN on 4 ranks), in one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)
from _common import REPO_ROOT, launched_by_mpi, median, mpiexec, print_report, run_train


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategy", default="fedqs-avg")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--buffer", type=int, default=10)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--tau", type=int, default=10, help="local steps per job")
    p.add_argument("--model", default="cnn")
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--partition", default="dirichlet:0.5")
    p.add_argument("--clock", default="events", help="--clock of the semi-asynchronous run (events or ticks)")
    p.add_argument("--eval-every", type=int, default=1000, help="score rarely: this measures the coordinator, not the test set")
    p.add_argument("--out-dir", default=os.path.join(REPO_ROOT, "runs", "semiasync_cost"))
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--repeats", type=int, default=3, help="alternate the two runs this often; report the median ratio")
    p.add_argument("--jobs", default=None, help=argparse.SUPPRESS)  # baseline worker: jobs per rank
    return p.parse_args(argv)


def baseline_worker(args) -> None:
    """One rank of the no-communication run: the same jobs, timed between two barriers."""
    import numpy as np
    import torch
    from mpi4py import MPI

    from fdahpc.config import TrainConfig
    from fdahpc.run import build, resolve

    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    cfg = TrainConfig(mode="semiasync", strategy=args.strategy, clients=args.clients, buffer=args.buffer, rounds=1,
                      tau=args.tau, model=args.model, dataset=args.dataset, partition=args.partition,
                      out=os.path.join(args.out_dir, "baseline-unused.h5"))
    from fdahpc.comm.mpi import MPICommunicator

    setup = build(resolve(cfg), MPICommunicator())
    jobs = [int(j) for j in args.jobs.split(",")][comm.rank]

    def barrier() -> None:  # a sleeping wait: MPI's Barrier would spin a core the others need
        req = comm.Ibarrier()
        while not req.Test():
            time.sleep(1e-3)

    barrier()
    start = time.perf_counter()
    if comm.rank:
        host, w0 = setup.job.role, setup.job.flat.state.clone()
        ids = sorted(host.clients)
        for j in range(jobs):
            client = host.clients[ids[j % len(ids)]]
            setup.job.flat.state.copy_(w0)
            host.train(client, client.lr, 0.0)  # the host's own local-job code, no messages
            _ = setup.job.flat.state.clone()  # the upload buffer a real job fills
    elapsed = time.perf_counter() - start
    barrier()
    total = comm.allreduce(elapsed, op=MPI.MAX)
    if comm.rank == 0:
        print(f"BASELINE_SECONDS {total:.6f} {np.sum(jobs)}")


def main(argv=None) -> int:
    args = parse(argv)
    if args.jobs is not None and launched_by_mpi():
        baseline_worker(args)
        return 0
    os.makedirs(args.out_dir, exist_ok=True)
    flags = ["--mode", "semiasync", "--strategy", args.strategy, "--clients", str(args.clients), "--buffer",
             str(args.buffer), "--rounds", str(args.rounds), "--tau", str(args.tau), "--model", args.model,
             "--dataset", args.dataset, "--partition", args.partition, "--eval-every", str(args.eval_every), "--clock", args.clock]
    ratios, walls, baselines = [], [], []
    for _ in range(args.repeats):  # alternating, so a change of machine load hits both sides
        run = run_train(args.ranks, flags, os.path.join(args.out_dir, "semiasync.h5"), args.timeout)
        jobs = [int(j) for j in run["jobs_per_rank"]]
        proc = mpiexec(args.ranks, [sys.executable, os.path.abspath(__file__), *(argv or sys.argv[1:]),
                                    "--jobs", ",".join(map(str, jobs))], args.timeout)
        line = [x for x in proc.stdout.splitlines() if x.startswith("BASELINE_SECONDS")]
        if proc.returncode != 0 or not line:
            raise RuntimeError(f"baseline run failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
        walls.append(run["wall_seconds"])
        baselines.append(float(line[0].split()[1]))
        ratios.append(walls[-1] / baselines[-1])
    ratio, baseline = median(ratios), median(baselines)
    rss = [int(x) for x in run["peak_rss_per_rank"]]
    print_report(
        f"Coordinator cost: {args.strategy} on the {args.clock} clock, {args.clients} clients of {args.model} on {args.ranks} ranks, "
        f"{args.rounds} rounds of K = {args.buffer}, {args.tau}-step jobs",
        ["run", "wall s", "jobs", "local steps", "peak RSS per rank (MB)", "peak RSS total (GB)"],
        [["semi-async", f"{median(walls):.1f}", str(sum(jobs)), str(int(sum(run["local_steps_per_rank"]))),
          " ".join(f"{r / 2**20:.0f}" for r in rss), f"{sum(rss) / 2**30:.2f}"],
         ["same jobs, no messages", f"{baseline:.1f}", str(sum(jobs)), str(int(sum(run["local_steps_per_rank"]))), "", ""]],
        f"medians of {args.repeats} alternating runs; ratios {' '.join(f'{r:.2f}' for r in ratios)}. "
        "jobs: what the hosts computed (they run ahead of the server, so more than rounds x K); "
        "peak RSS: ru_maxrss of each rank, rank 0 first.")
    print(f"wall time ratio {ratio:.2f}x (goal <= 1.3x: {'met' if ratio <= 1.3 else 'MISSED'}); "
          f"peak memory {sum(rss) / 2**30:.2f} GB (goal < 4 GB: {'met' if sum(rss) < 4 * 2**30 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
