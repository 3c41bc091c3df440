"""Scaling past this machine: measured per-step costs here, an α–β AllReduce model, projected epoch times.

Three parts, kept apart in the output:

1. **Measured on this machine** (``--ranks``, default K = 2, 4, 8, 16, 32, 44; one
   ``mpiexec -n K`` job per K, which the script starts by relaunching itself):

   - an AllReduce microbenchmark: ``comm.Allreduce(MPI.IN_PLACE, float32 array, SUM)``
     through mpi4py, message sizes from 8 B to the largest model of ``--models`` (powers of
     8 from 8 B to 16 MiB plus each model's 4·d bytes; ``--sizes``), a Barrier before each
     call; a call's time is the slowest rank's, and the figure per (K, size) the median over
     repeats (as many as fit in ``--ar-budget`` seconds, at least 3);
   - then, in the same job, the training loop of ``python -m fdahpc.train`` (LeNet-5,
     FashionMNIST) for each strategy in turn: ``synchronous``; ``fedavg --tau 1000000000``
     and ``linearfda`` / ``sketchfda`` with ``--theta inf``, which never synchronize the
     models, so their time is local training plus (FDA) the per-step monitoring AllReduce
     of 8 B / 5 004 B. Per-step time = mean time between consecutive steps after
     ``--warmup-steps`` steps, leaving out the steps an evaluation ran before, on the
     slowest rank; bytes per step = the run file's last ``eval/comm_bytes / steps``, before
     the run's closing sync (``final_sync``) (the FDA paper's
     count: K ranks, models up and down, monitoring state up). The run file's
     ``(wall_seconds - eval_seconds) / steps`` is printed beside it as a check.

   Why one job per K and not one ``fdahpc.train`` job per strategy: starting 44 ranks that
   each import torch and read FashionMNIST takes minutes on 2 cores; one job per K runs the
   same ``fdahpc.run.build`` / ``run`` code (the strategies, the communicator, the
   run file) once per strategy after a single start. The start (mpiexec to the first
   barrier, imports included), each strategy's setup and the job's exit are measured and
   printed, never counted in a step.

   With more ranks than cores (K > 2 on 2 cores) the machine is oversubscribed: ranks take
   turns on the cores and MPICH's waiting ranks busy-poll. Everything measured at K > 2
   describes this machine's shared-memory transport under oversubscription, not a network.

2. **Fitted**: the α–β model of an AllReduce (Rabenseifner: reduce-scatter then
   allgather, each ⌈log2 K⌉ rounds)

       T(n, K) = 2·⌈log2 K⌉·α + 2·(K−1)/K·n·β          (n bytes per rank)

   by least squares on the relative error (each measurement weighs the same whatever its
   size), over all (K, n) measured; printed with each point's residual, and fitted again per
   K (α_K, β_K) to show how far one (α, β) pair describes this machine. The reduction's
   arithmetic (a γ·(K−1)/K·n term) is proportional to n as well and is folded into β.

3. **Projected**, not measured: seconds per epoch for K = 2 ... 1024 on a stated fabric
   (``--fabric-gbps 100 --fabric-latency-us 2``: α = 2 µs, β = 8 / 100e9 s/B) for
   ``--models`` (LeNet-5, the CNN, ResNet-18) and the four strategies:

       epoch = steps_per_epoch(K) · (compute + comm per step)
       steps_per_epoch(K) = ceil(N / K / batch)        (fdahpc's definition, N = 60 000)
       synchronous: T(4d, K) per step        fedavg: T(4d, K) / τ
       linearfda / sketchfda: T(state, K) + T(4d, K) / S   (state = 8 B / 5 004 B)

   with τ = ``--fedavg-tau`` and S = ``--fda-steps-per-sync`` (both one epoch by default).
   S is an *assumption*: FDA synchronizes when its variance estimate crosses Θ, which
   depends on Θ, the data and K; ``comm_cost.py`` measures it (Θ = 1-4 synced every
   ~50-400 steps at K = 4). Compute per step is measured here once per model at one rank
   (``fdahpc.ModelAverager`` on a local communicator, the same strategy code, FashionMNIST
   batches, Adam), in CPU seconds of this machine's single-threaded CPU, so robust to other
   processes' load: the median local step (forward, backward, Adam; the same work under
   every strategy, pooled over the four strategies' interleaved steps) plus the median of
   each strategy's own step (FDA's drift, dot products and sketch). ``--compute-scale X``
   projects a device X times faster (a what-if, off by default). The model assumes a
   full-bisection fabric, one rank per NIC, no overlap of communication with compute, no
   congestion and no stragglers.

Outputs: the printed report (also ``PREFIX.txt``), ``PREFIX.csv`` (part = allreduce,
measured or projected, one row per measurement / projected point) and ``PREFIX.png``
(top: projected epoch time against K per model; bottom: what was measured here), with
PREFIX = ``--out`` (default ``benchmarks/results/scaling``; ``--quick``: ``runs/scaling_quick/scaling``).

Run (about 11 minutes on a 2-core machine that another 4-rank job kept 10-75 % busy, most of it
starting 32 and 44 ranks; ``--quick``, K = 2, 4 and LeNet-5 only, about a minute):

    python benchmarks/scaling.py [--quick] [--ranks 2,4,8,16,32,44] [--models lenet5,cnn,resnet18]
        [--fabric-gbps 100] [--fabric-latency-us 2] [--fedavg-tau epoch] [--fda-steps-per-sync epoch]
        [--warmup-steps 8] [--steps 24] [--ar-budget 0.5] [--compute-scale 1] [--out PREFIX]
        [--workdir DIR [--resume]]

``--resume`` with the ``--workdir`` of an earlier run reuses each K whose job finished
there (same sizes, steps and model) and the one-rank compute (same models and budget),
and measures only what is missing.

Code: this file is the command line and the sequence of the three parts; ``cost_model.py`` holds the
α–β model, its fit and the projection (no MPI or torch, for other benchmarks to reuse);
``scaling_measure.py`` the measurements (each K's ``mpiexec`` job, which runs this file with
``--worker``, the one-rank compute, the work folder's files); ``scaling_report.py`` the tables, the
CSV and the figure.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time

# Importing _common also makes fdahpc importable from a plain checkout.
from _common import REPO_ROOT, RESULTS, launched_by_mpi, wait_for_quiet
from cost_model import FABRICS, fabric_alpha_beta, fit_alpha_beta, project, steps_per_epoch
from scaling_measure import message_sizes, one_rank_compute, prepare_data, run_measurements, worker
from scaling_report import (plot, report_allreduce, report_compute, report_projection, report_training,
                            write_csv)

#: The projected fabric unless --fabric-gbps / --fabric-latency-us say otherwise.
DEFAULT_FABRIC = FABRICS["infiniband-100g"]

DEFAULTS = dict(ranks="2,4,8,16,32,44", models="lenet5,cnn,resnet18", sizes="auto", warmup_steps=8, steps=24,
                ar_budget=0.5, compute_budget=1.0)
QUICK = dict(ranks="2,4", models="lenet5", sizes="8,4096,262144", warmup_steps=2, steps=6,
             ar_budget=0.2, compute_budget=0.05)


# ----------------------------------------------------------------------------- flags
def parse(argv=None) -> argparse.Namespace:
    """The command line; what is left unset comes from ``QUICK`` under ``--quick``, else ``DEFAULTS``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: K = 2, 4, LeNet-5 only, 3 sizes, a few steps")
    p.add_argument("--ranks", help=f"comma-separated K to measure here (default {DEFAULTS['ranks']})")
    p.add_argument("--models", help=f"models to project (default {DEFAULTS['models']})")
    p.add_argument("--model", default="lenet5", help="model of the measured training runs (default lenet5)")
    p.add_argument("--dataset", default="fashion-mnist", help="dataset of every run (default fashion-mnist)")
    p.add_argument("--data-dir", default=None,
                   help="its IDX files (default fdahpc's FashionMNIST folder); .gz files are decompressed once into "
                        "the work folder")
    p.add_argument("--sizes", help="AllReduce message sizes in bytes, comma-separated, or auto: powers of 8 from 8 B "
                                   "to 16 MiB plus 4·d of each model (default auto)")
    p.add_argument("--ar-budget", type=float, help=f"seconds of AllReduce calls per (K, size), at least 3 calls "
                                                   f"(default {DEFAULTS['ar_budget']})")
    p.add_argument("--warmup-steps", type=int,
                   help=f"steps left out at the start of each training run (default {DEFAULTS['warmup_steps']})")
    p.add_argument("--steps", type=int, help=f"timed steps per training run (default {DEFAULTS['steps']})")
    p.add_argument("--compute-budget", type=float,
                   help=f"CPU seconds of timed one-rank steps per (model, strategy), 3 to 20 steps "
                        f"(default {DEFAULTS['compute_budget']})")
    p.add_argument("--project-ranks", default="2,4,8,16,32,64,128,256,512,1024",
                   help="K to project (default powers of 2 to 1024)")
    p.add_argument("--fabric-gbps", type=float, default=DEFAULT_FABRIC.gbps,
                   help=f"projected fabric's bandwidth per rank, Gb/s (default {DEFAULT_FABRIC.gbps:g})")
    p.add_argument("--fabric-latency-us", type=float, default=DEFAULT_FABRIC.latency_us,
                   help=f"projected fabric's latency α, µs (default {DEFAULT_FABRIC.latency_us:g})")
    p.add_argument("--fedavg-tau", default="epoch", help="projected FedAvg round, in steps, or epoch (default epoch)")
    p.add_argument("--fda-steps-per-sync", default="epoch",
                   help="projected steps between FDA model syncs, or epoch (default epoch; an assumption, see the "
                        "docstring)")
    p.add_argument("--compute-scale", type=float, default=1.0,
                   help="what-if: divide this CPU's measured compute per step by X (default 1: as measured)")
    p.add_argument("--wait-idle", type=float, default=30,
                   help="first wait up to this many seconds for other processes to go idle (default 30)")
    p.add_argument("--timeout", type=float, default=900, help="seconds before one K's job is killed (default 900)")
    p.add_argument("--workdir", default=None,
                   help="folder for run files and the decompressed data (default: a temporary folder)")
    p.add_argument("--resume", action="store_true",
                   help="reuse the results of K's jobs already in --workdir (same sizes, steps and model); "
                        "run the rest")
    p.add_argument("--out", default=None,
                   help="CSV/PNG/TXT path prefix (default benchmarks/results/scaling; quick: runs/scaling_quick/scaling)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # set by the relaunch under mpiexec
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--size-list", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    preset = QUICK if args.quick else DEFAULTS
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        args.ranks = [int(x) for x in args.ranks.split(",") if x.strip()]
        args.models = [x.strip() for x in args.models.split(",") if x.strip()]
        args.project_ranks = [int(x) for x in args.project_ranks.split(",") if x.strip()]
        for spec in (args.fedavg_tau, args.fda_steps_per_sync):
            if spec != "epoch" and int(spec) < 1:
                raise ValueError(f"{spec}: a period must be a positive number of steps or epoch")
    except ValueError as exc:
        p.error(str(exc))
    if not args.ranks or min(args.ranks) < 2 or not args.project_ranks or min(args.project_ranks) < 2:
        p.error("need --ranks and --project-ranks >= 2")
    if args.steps < 1 or args.warmup_steps < 1 or args.ar_budget <= 0 or args.compute_budget <= 0:
        p.error("need --steps >= 1, --warmup-steps >= 1, --ar-budget > 0 and --compute-budget > 0")
    if args.fabric_gbps <= 0 or args.fabric_latency_us < 0 or args.compute_scale <= 0:
        p.error("need --fabric-gbps > 0, --fabric-latency-us >= 0 and --compute-scale > 0")
    if args.resume and not args.workdir:
        p.error("--resume needs the --workdir of the earlier run")
    if args.out is None:
        quick_out = os.path.join(REPO_ROOT, "runs", "scaling_quick", "scaling")
        args.out = quick_out if args.quick else os.path.join(RESULTS, "scaling")
    return args


# ----------------------------------------------------------------------------- main
class _Tee(io.TextIOBase):
    """Writes to several streams: the console and the report kept for ``PREFIX.txt``."""

    def __init__(self, *streams) -> None:
        self.streams = streams

    def write(self, s: str) -> int:
        for st in self.streams:
            st.write(s)
        return len(s)

    def flush(self) -> None:
        for st in self.streams:
            st.flush()


def main(argv=None) -> int:
    args = parse(argv)
    if args.worker:
        if not launched_by_mpi():
            raise SystemExit("--worker is for the relaunch under mpiexec")
        try:
            worker(args)
        except BaseException:
            import traceback

            from mpi4py import MPI

            traceback.print_exc()
            sys.stderr.flush()
            MPI.COMM_WORLD.Abort(1)  # never leave the other ranks inside a collective
        # A plain exit: MPI.Finalize + os._exit would skip a CPU-second of teardown per rank,
        # but at 44 ranks Hydra then fails the job (tried).
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    log = io.StringIO()
    real_stdout = sys.stdout
    sys.stdout = _Tee(real_stdout, log)
    try:
        code = _main(args)
    finally:
        sys.stdout = real_stdout
        with open(args.out + ".txt", "w") as fh:
            fh.write(log.getvalue())
    return code


def _main(args) -> int:
    t_start = time.perf_counter()
    workdir = args.workdir or tempfile.mkdtemp(prefix="scaling-")
    os.makedirs(workdir, exist_ok=True)
    print(f"scaling: measuring K = {', '.join(map(str, args.ranks))} here, projecting K = {args.project_ranks[0]}..."
          f"{args.project_ranks[-1]} for {', '.join(args.models)}; work folder {workdir}", flush=True)
    waited = wait_for_quiet(args.wait_idle)
    if waited >= args.wait_idle:
        print(f"  the machine did not go idle within {args.wait_idle:.0f} s; measuring anyway "
              "(others' CPU is reported)", flush=True)
    data_dir = prepare_data(args.dataset, args.data_dir, workdir)
    compute, samples, batch = one_rank_compute(args, workdir, data_dir)
    sizes = message_sizes(args.sizes, [4 * compute[m]["params"] for m in args.models])
    results = run_measurements(args, workdir, data_dir, sizes, compute[args.model]["params"])
    if data_dir and data_dir.startswith(workdir):
        shutil.rmtree(data_dir, ignore_errors=True)

    measured = {k: rep["allreduce"] for k, rep in results.items()}
    measured_others = {k: rep["allreduce_others_cpu"] for k, rep in results.items()}
    points = [(k, r["bytes"], r["seconds"]) for k in measured for r in measured[k]]
    fit = fit_alpha_beta(points)
    per_k = {k: fit_alpha_beta([(k, r["bytes"], r["seconds"]) for r in measured[k]]) for k in measured}
    report_allreduce(measured, fit, per_k, measured_others)
    csv_rows = report_training(results, per_k, compute, args.model)
    report_compute(compute, results, args.model)
    spe_check = [(k, r["steps_per_epoch"], steps_per_epoch(samples, k, batch))
                 for k in results for r in results[k]["train"]]
    bad = [(k, a, b) for k, a, b in spe_check if a != b]
    if bad:
        print(f"\nWARNING: steps per epoch differ from fdahpc's run files (K, run file, ours): {bad}")

    f_alpha, f_beta = fabric_alpha_beta(args.fabric_gbps, args.fabric_latency_us)
    proj_models = {m: compute[m] for m in args.models}
    proj = project(proj_models, args.project_ranks, f_alpha, f_beta, samples, batch, args.fedavg_tau,
                   args.fda_steps_per_sync, args.compute_scale)
    report_projection(proj, args, f_alpha, f_beta)

    write_csv(args.out + ".csv", csv_rows, measured, fit, measured_others, proj, args)
    plot(args.out + ".png", proj, measured, fit, per_k, results, args, args.model)
    print(f"\nglobal fit (this machine): α = {fit[0] * 1e6:.2f} µs, β = {fit[1] * 1e9:.4f} ns/B; "
          f"fabric projected: α = {f_alpha * 1e6:g} µs, β = {f_beta * 1e9:.3f} ns/B")
    print(f"rows: {args.out}.csv\nplot: {args.out}.png\nreport: {args.out}.txt\n"
          f"total {time.perf_counter() - t_start:.0f} s; run files in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
