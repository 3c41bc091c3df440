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
     slowest rank; bytes per step = the run file's ``comm_bytes / steps`` (the FDA paper's
     count: K ranks, models up and down, monitoring state up). The run file's
     ``(wall_seconds - eval_seconds) / steps`` is printed beside it as a check.

   Why one job per K and not one ``fdahpc.train`` job per strategy: starting 44 ranks that
   each import torch and read FashionMNIST takes minutes on 2 cores; one job per K runs the
   same ``fdahpc.sync_loop.build`` / ``train`` code (the strategies, the communicator, the
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
PREFIX = ``--out`` (default ``benchmarks/scaling``; ``--quick``: ``runs/scaling_quick/scaling``).

Run (about 11 minutes on a 2-core machine that another 4-rank job kept 10-75 % busy, most of it
starting 32 and 44 ranks; ``--quick``, K = 2, 4 and LeNet-5 only, about a minute):

    python benchmarks/scaling.py [--quick] [--ranks 2,4,8,16,32,44] [--models lenet5,cnn,resnet18]
        [--fabric-gbps 100] [--fabric-latency-us 2] [--fedavg-tau epoch] [--fda-steps-per-sync epoch]
        [--warmup-steps 8] [--steps 24] [--ar-budget 0.5] [--compute-scale 1] [--out PREFIX]
        [--workdir DIR [--resume]]

``--resume`` with the ``--workdir`` of an earlier run reuses each K whose job finished
there (same sizes, steps and model) and the one-rank compute (same models and budget),
and measures only what is missing.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time

# Importing _common also makes fdahpc importable from a plain checkout.
from _common import REPO_ROOT, CpuMeter, launched_by_mpi, mpiexec, print_report, read_run, wait_for_quiet

HERE = os.path.dirname(os.path.abspath(__file__))
STRATEGIES = ("synchronous", "fedavg", "linearfda", "sketchfda")
#: How each strategy runs in the measurements: FedAvg and FDA never synchronize the models,
#: so what they cost per step is local training plus (FDA) the monitoring AllReduce.
MEASURED_FLAGS = {
    "synchronous": ["--strategy", "synchronous"],
    "fedavg": ["--strategy", "fedavg", "--tau", "1000000000"],
    "linearfda": ["--strategy", "linearfda", "--theta", "inf"],
    "sketchfda": ["--strategy", "sketchfda", "--theta", "inf"],
}
AVERAGER_OPTIONS = {"synchronous": {}, "fedavg": {"tau": 10 ** 9},
                    "linearfda": {"theta": float("inf")}, "sketchfda": {"theta": float("inf")}}

DEFAULTS = dict(ranks="2,4,8,16,32,44", models="lenet5,cnn,resnet18", sizes="auto", warmup_steps=8, steps=24,
                ar_budget=0.5, compute_budget=1.0)
QUICK = dict(ranks="2,4", models="lenet5", sizes="8,4096,262144", warmup_steps=2, steps=6,
             ar_budget=0.2, compute_budget=0.05)


# ----------------------------------------------------------------------------- the model
def latency_rounds(k: int) -> int:
    """2·⌈log2 K⌉: the latency terms of a reduce-scatter plus an allgather."""
    return 2 * math.ceil(math.log2(k)) if k > 1 else 0


def bandwidth_bytes(n: float, k: int) -> float:
    """2·(K−1)/K·n: the bytes each rank sends (and receives) in a Rabenseifner AllReduce."""
    return 2.0 * (k - 1) / k * n


def allreduce_seconds(n: float, k: int, alpha: float, beta: float) -> float:
    """T(n, K) = 2⌈log2 K⌉α + 2(K−1)/K·n·β; zero for one rank."""
    return latency_rounds(k) * alpha + bandwidth_bytes(n, k) * beta


def fit_alpha_beta(points) -> tuple[float, float, list[float]]:
    """Least squares on the relative error of T(n, K) over ``points`` = [(K, n, seconds)].

    Returns (α, β, residuals) with residual = fit / measured − 1 per point. Noiseless
    times from the model give back its α and β.
    """
    import numpy as np

    pts = [(k, n, t) for k, n, t in points if k > 1 and t > 0]
    if len(pts) < 2:
        raise ValueError("fit_alpha_beta: need at least two measurements with K > 1 and a positive time")
    a = np.array([[latency_rounds(k), bandwidth_bytes(n, k)] for k, n, _ in pts], dtype=float)
    t = np.array([t for *_, t in pts], dtype=float)
    scale = a.max(axis=0)  # columns of similar size keep lstsq well conditioned
    scale[scale == 0] = 1.0
    coef, *_ = np.linalg.lstsq(a / t[:, None] / scale, np.ones_like(t), rcond=None)
    alpha, beta = (coef / scale).tolist()
    residuals = [allreduce_seconds(n, k, alpha, beta) / t - 1 for k, n, t in pts]
    return alpha, beta, residuals


def steps_per_epoch(samples: int, k: int, batch: int) -> int:
    """fdahpc's epoch (``sync_loop.build``): one pass over the mean partition."""
    return max(1, math.ceil(samples / k / batch))


def period(spec, spe: int) -> int:
    """``"epoch"`` → the epoch's steps, else the given number of steps."""
    return spe if spec == "epoch" else max(1, int(spec))


def project(models: dict, ranks, alpha: float, beta: float, samples: int, batch: int, fedavg_tau="epoch",
            fda_steps_per_sync="epoch", compute_scale: float = 1.0) -> list[dict]:
    """Projected seconds per epoch; ``models[name] = {"params", "compute": {strategy: s},
    "state_bytes": {strategy: bytes}}``. One dict per (model, K, strategy); its
    ``breakeven_speedup`` is how many times faster compute must get before that strategy
    spends as long communicating as computing."""
    rows = []
    for name, m in models.items():
        model_bytes = 4 * m["params"]
        for k in ranks:
            spe = steps_per_epoch(samples, k, batch)
            full = allreduce_seconds(model_bytes, k, alpha, beta)
            for strategy in STRATEGIES:
                if strategy not in m["compute"]:
                    continue
                if strategy == "synchronous":
                    comm, syncs = full, 1.0
                elif strategy == "fedavg":
                    syncs = 1.0 / period(fedavg_tau, spe)
                    comm = full * syncs
                else:
                    syncs = 1.0 / period(fda_steps_per_sync, spe)
                    comm = allreduce_seconds(m["state_bytes"][strategy], k, alpha, beta) + full * syncs
                compute = m["compute"][strategy] / compute_scale
                step = compute + comm
                rows.append(dict(model=name, strategy=strategy, ranks=k, steps_per_epoch=spe, compute_seconds=compute,
                                 comm_seconds=comm, step_seconds=step, epoch_seconds=spe * step,
                                 comm_epoch_seconds=spe * comm, comm_share=comm / step if step > 0 else float("nan"),
                                 breakeven_speedup=compute / comm if comm > 0 else float("inf"),
                                 bytes_per_step=k * (2 * model_bytes * syncs + m["state_bytes"].get(strategy, 0))))
    return rows


# ----------------------------------------------------------------------------- flags
def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: K = 2, 4, LeNet-5 only, 3 sizes, a few steps")
    p.add_argument("--ranks", help=f"comma-separated K to measure here (default {DEFAULTS['ranks']})")
    p.add_argument("--models", help=f"models to project (default {DEFAULTS['models']})")
    p.add_argument("--model", default="lenet5", help="model of the measured training runs (default lenet5)")
    p.add_argument("--dataset", default="fashion-mnist", help="dataset of every run (default fashion-mnist)")
    p.add_argument("--data-dir", default=None,
                   help="its IDX files (default fdahpc's FashionMNIST folder); .gz files are decompressed once into the work folder")
    p.add_argument("--sizes", help="AllReduce message sizes in bytes, comma-separated, or auto: powers of 8 from 8 B "
                                   "to 16 MiB plus 4·d of each model (default auto)")
    p.add_argument("--ar-budget", type=float, help=f"seconds of AllReduce calls per (K, size), at least 3 calls "
                                                   f"(default {DEFAULTS['ar_budget']})")
    p.add_argument("--warmup-steps", type=int, help=f"steps left out at the start of each training run (default {DEFAULTS['warmup_steps']})")
    p.add_argument("--steps", type=int, help=f"timed steps per training run (default {DEFAULTS['steps']})")
    p.add_argument("--compute-budget", type=float,
                   help=f"CPU seconds of timed one-rank steps per (model, strategy), 3 to 20 steps (default {DEFAULTS['compute_budget']})")
    p.add_argument("--project-ranks", default="2,4,8,16,32,64,128,256,512,1024", help="K to project (default powers of 2 to 1024)")
    p.add_argument("--fabric-gbps", type=float, default=100.0, help="projected fabric's bandwidth per rank, Gb/s (default 100)")
    p.add_argument("--fabric-latency-us", type=float, default=2.0, help="projected fabric's latency α, µs (default 2)")
    p.add_argument("--fedavg-tau", default="epoch", help="projected FedAvg round, in steps, or epoch (default epoch)")
    p.add_argument("--fda-steps-per-sync", default="epoch",
                   help="projected steps between FDA model syncs, or epoch (default epoch; an assumption, see the docstring)")
    p.add_argument("--compute-scale", type=float, default=1.0,
                   help="what-if: divide this CPU's measured compute per step by X (default 1: as measured)")
    p.add_argument("--wait-idle", type=float, default=30, help="first wait up to this many seconds for other processes to go idle (default 30)")
    p.add_argument("--timeout", type=float, default=900, help="seconds before one K's job is killed (default 900)")
    p.add_argument("--workdir", default=None, help="folder for run files and the decompressed data (default: a temporary folder)")
    p.add_argument("--resume", action="store_true",
                   help="reuse the results of K's jobs already in --workdir (same sizes, steps and model); run the rest")
    p.add_argument("--out", default=None, help="CSV/PNG/TXT path prefix (default benchmarks/scaling; quick: runs/scaling_quick/scaling)")
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
        args.out = os.path.join(REPO_ROOT, "runs", "scaling_quick", "scaling") if args.quick else os.path.join(HERE, "scaling")
    return args


def message_sizes(spec: str, model_bytes) -> list[int]:
    """Bytes per AllReduce: ``auto`` = 8 B · 8^i up to 16 MiB plus the models' sizes; multiples of 4."""
    if spec == "auto":
        sizes = {8 ** i for i in range(1, 9)} | set(model_bytes)
    else:
        sizes = {int(float(x)) for x in spec.split(",") if x.strip()}
    return sorted({max(4, 4 * math.ceil(s / 4)) for s in sizes})


# ----------------------------------------------------------------------------- the MPI job (one per K)
def _allreduce_phase(mpi_comm, sizes: list[int], budget: float) -> list[dict]:
    """Median over repeats of the slowest rank's time of one Allreduce, per size."""
    import numpy as np
    from mpi4py import MPI

    out = []
    for size in sizes:
        buf = np.ones(size // 4, dtype=np.float32)

        def timed_call():
            buf[:] = 1.0  # untimed: a sum that never overflows
            mpi_comm.Barrier()
            t0 = time.perf_counter()
            mpi_comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            return time.perf_counter() - t0

        warm = max(timed_call(), timed_call())  # first calls set up the transport's buffers
        warm = mpi_comm.allreduce(warm, op=MPI.MAX)
        reps = mpi_comm.bcast(int(min(200, max(3, budget / max(warm, 1e-6)))), root=0)
        mine = np.array([timed_call() for _ in range(reps)])
        slowest = np.empty_like(mine)
        mpi_comm.Allreduce(mine, slowest, op=MPI.MAX)
        out.append(dict(bytes=size, repeats=reps, seconds=float(np.median(slowest)),
                        q25=float(np.percentile(slowest, 25)), q75=float(np.percentile(slowest, 75))))
    return out


def _own_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _train_phase(args, comm, workdir: str, data_dir: str, order: list[str]) -> list[dict]:
    """Each strategy through fdahpc.train's own setup and loop, timing every step."""
    import numpy as np
    from mpi4py import MPI

    from fdahpc.config import parse_args
    from fdahpc.run import build, mode_of
    from fdahpc.run import run as train

    mpi_comm = comm.comm
    total = args.warmup_steps + args.steps
    rows = []
    for strategy in order:
        out = os.path.join(workdir, f"k{comm.world_size}-{strategy}.h5")
        flags = [*MEASURED_FLAGS[strategy], "--model", args.model, "--dataset", args.dataset,
                 *(["--data-dir", data_dir] if data_dir else []), "--max-steps", str(total), "--epochs", "1000",
                 "--log-every", "1000000", "--threads", "1", "--out", out]
        cfg = parse_args(flags)
        mode_of(cfg.mode).prepare(cfg, comm)  # as fdahpc.train: rank 0 compiles or loads the kernels first
        t_build = time.perf_counter()
        setup = build(cfg, comm)
        comm.barrier()
        t_build = time.perf_counter() - t_build
        stamps = []
        inner = setup.strategy.after_step

        def after_step(inner=inner, stamps=stamps):
            synced = inner()
            stamps.append(time.perf_counter())
            return synced

        setup.strategy.after_step = after_step  # the loop calls it once per step, right after the local step
        comm.barrier()
        meter = CpuMeter(include_children=False)
        cpu0 = _own_cpu()
        t_train = time.perf_counter()
        result = train(setup)
        t_train = time.perf_counter() - t_train
        own = _own_cpu() - cpu0
        foreign = meter.foreign_share(own_extra=mpi_comm.allreduce(own) - own)
        # Interval i (stamps[i] - stamps[i-1]) is step i+1 plus what ran after step i: an
        # evaluation there (epoch end, --eval-every, never the last step here) is left out.
        spe = setup.steps_per_epoch
        every = cfg.eval_every or 0
        kept = [stamps[i] - stamps[i - 1] for i in range(max(1, args.warmup_steps), len(stamps))
                if not (i % spe == 0 or (every and i % every == 0))]
        mean = float(np.mean(kept)) if kept else float("nan")
        slowest = mpi_comm.allreduce(mean, op=MPI.MAX)
        del setup
        if comm.is_root:
            run = read_run(out)
            rows.append(dict(strategy=strategy, step_seconds=slowest, timed_steps=len(kept),
                             runfile_step_seconds=(run["wall_seconds"] - run["eval_seconds"]) / run["steps"],
                             steps=int(run["steps"]), syncs=int(run["syncs"]), comm_bytes=int(run["comm_bytes"]),
                             bytes_per_step=run["comm_bytes"] / run["steps"], params=int(run["params"]),
                             steps_per_epoch=int(run["steps_per_epoch"]), state_bytes=int(run["state_bytes"]),
                             eval_seconds=float(run["eval_seconds"]), others_cpu=foreign, build_seconds=t_build,
                             train_seconds=t_train,
                             exit_code=int(result.get("exit_code", 0))))
    return rows


def worker(args) -> None:
    from mpi4py import MPI

    mpi_comm = MPI.COMM_WORLD
    mpi_comm.Barrier()  # every rank started, imported torch and fdahpc (through _common) and MPI_Init
    report = dict(ranks=mpi_comm.Get_size(), ready_time=time.time())
    sizes = [int(x) for x in args.size_list.split(",")]
    meter = CpuMeter(include_children=False)
    cpu0 = _own_cpu()
    t0 = time.perf_counter()
    report["allreduce"] = _allreduce_phase(mpi_comm, sizes, args.ar_budget)
    own = _own_cpu() - cpu0
    report["allreduce_seconds"] = time.perf_counter() - t0
    report["allreduce_others_cpu"] = meter.foreign_share(own_extra=mpi_comm.allreduce(own) - own)
    import torch

    from fdahpc.comm.mpi import MPICommunicator

    torch.set_num_threads(1)
    comm = MPICommunicator(mpi_comm)
    shift = args.ranks.index(comm.world_size) if comm.world_size in args.ranks else 0
    order = list(STRATEGIES[shift % 4:] + STRATEGIES[: shift % 4])  # no strategy always runs first
    workdir = os.path.dirname(os.path.abspath(args.result))
    report["train"] = _train_phase(args, comm, workdir, args.data_dir, order)
    if comm.is_root:
        report["done_time"] = time.time()
        with open(args.result, "w") as fh:
            json.dump(report, fh)


# ----------------------------------------------------------------------------- one rank: compute per step
def measure_compute(models: list[str], dataset: str, data_dir: str, budget: float) -> tuple[dict, int, int]:
    """CPU seconds per training step, one rank, per (model, strategy): the median local step
    (pooled over the strategies, 3 to 20 interleaved steps of each) plus the median of the
    strategy's own step; also params and state bytes.

    Returns (models, training samples N, batch size)."""
    import numpy as np
    import torch

    from fdahpc import ModelAverager
    from fdahpc.comm import LocalCommunicator
    from fdahpc.config import TrainConfig
    from fdahpc.data import load_dataset
    from fdahpc.models import build_model
    from fdahpc.strategies import local_optimizer
    from fdahpc.worker import make_optimizer

    torch.set_num_threads(1)
    from fdahpc.sketch import compile_kernels

    compile_kernels()  # Numba's cache, loaded once before any step is timed
    seen = {}

    def first_rows(labels):
        seen["n"] = len(labels)
        return np.arange(min(len(labels), 32 * 16))

    data = load_dataset(dataset, data_dir, train_indices=first_rows)
    batch = TrainConfig().batch_size
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    c, s = data.x_train.shape[1], data.x_train.shape[2]
    out = {}
    for name in models:
        m = out[name] = dict(compute={}, own={}, compute_wall={}, state_bytes={}, steps={})
        runners = {}
        for strategy in STRATEGIES:
            torch.manual_seed(0)
            model = build_model(name, c, s, data.num_classes)
            m["params"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
            averager = ModelAverager(model, LocalCommunicator(), strategy, **AVERAGER_OPTIONS[strategy])
            cfg = TrainConfig(strategy=strategy)
            opt = make_optimizer(*local_optimizer(cfg), model.parameters(), cfg.weight_decay)
            m["state_bytes"][strategy] = int(averager.strategy.trigger.state_bytes)
            model.train()
            runners[strategy] = (model, opt, averager)

        def step(strategy, i):
            """(CPU s of the local step, CPU s of the averager's step, wall s of both)."""
            model, opt, averager = runners[strategy]
            rows = torch.arange(i * batch, (i + 1) * batch) % len(y)
            c0, w0 = time.process_time(), time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
            opt.step()
            c1 = time.process_time()
            averager.step()
            c2 = time.process_time()
            return c1 - c0, c2 - c1, time.perf_counter() - w0

        for strategy in STRATEGIES:
            step(strategy, 0)  # warm-up: allocations, the optimizer's state
        # Interleaved, in a rotating order, so the load of other processes falls on every strategy alike.
        # The local step is the same work under every strategy: its CPU time is pooled over all of
        # them; what differs is the averager's own step (FDA's drift, products and sketch).
        local, own, wall = [], {st: [] for st in STRATEGIES}, {st: [] for st in STRATEGIES}
        rounds = 0
        while rounds < 3 or (rounds < 20 and sum(local) < budget * len(STRATEGIES)):
            shift = rounds % len(STRATEGIES)
            for strategy in STRATEGIES[shift:] + STRATEGIES[:shift]:
                a, b, w = step(strategy, 1 + rounds)
                local.append(a)
                own[strategy].append(b)
                wall[strategy].append(w)
            rounds += 1
        m["local"] = float(np.median(local))
        for strategy in STRATEGIES:
            m["own"][strategy] = float(np.median(own[strategy]))
            m["compute"][strategy] = m["local"] + m["own"][strategy]
            m["compute_wall"][strategy] = float(np.median(wall[strategy]))
            m["steps"][strategy] = rounds
        runners.clear()  # free this model's four replicas before the next
    return out, seen["n"], batch


def prepare_data(dataset: str, data_dir: str | None, workdir: str) -> str:
    """A folder of plain IDX files (memory-mapped by fdahpc, read row by row) for the runs."""
    import gzip

    from fdahpc.data import FASHION_MNIST_DIR

    src = data_dir or (FASHION_MNIST_DIR if dataset == "fashion-mnist" else None)
    if src is None or not os.path.isdir(src) or not any(f.endswith(".gz") for f in os.listdir(src)):
        return src
    dst = os.path.join(workdir, "data")
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        path = os.path.join(src, f)
        if f.endswith(".gz"):
            with gzip.open(path, "rb") as fin, open(os.path.join(dst, f[:-3]), "wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
        elif os.path.isfile(path):
            shutil.copy(path, dst)
    return dst


# ----------------------------------------------------------------------------- report
class _Tee(io.TextIOBase):
    def __init__(self, *streams) -> None:
        self.streams = streams

    def write(self, s: str) -> int:
        for st in self.streams:
            st.write(s)
        return len(s)

    def flush(self) -> None:
        for st in self.streams:
            st.flush()


def _ms(s: float) -> str:
    return "-" if s is None or not math.isfinite(s) else f"{s * 1e3:.3f}" if s < 0.01 else f"{s * 1e3:.1f}"


def _secs(s: float) -> str:
    return f"{s:.3g}" if s < 1 else f"{s:.1f}" if s < 1000 else f"{s:,.0f}"


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.01 else f"{x:.2%}" if x >= 0.0001 else "<0.01%"


def _bytes(n: float) -> str:
    for unit, div in (("MB", 1e6), ("KB", 1e3)):
        if n >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n:.0f} B"


def report_allreduce(measured: dict, fit: tuple, per_k: dict, others: dict) -> None:
    alpha, beta, _ = fit
    ks = sorted(measured)
    sizes = sorted({r["bytes"] for k in ks for r in measured[k]})
    rows = []
    for size in sizes:
        row = [_bytes(size)]
        for k in ks:
            r = next((r for r in measured[k] if r["bytes"] == size), None)
            if r is None:
                row += ["-", "-"]
                continue
            model = allreduce_seconds(size, k, alpha, beta)
            row += [_ms(r["seconds"]), f"{model / r['seconds'] - 1:+.0%}"]
        rows.append(row)
    header = ["bytes"] + [h for k in ks for h in (f"K={k} ms", "fit")]
    print_report(
        f"\nMEASURED here: AllReduce (mpi4py Allreduce, float32 SUM, in place), median of the slowest rank's time; "
        f"global α–β fit α = {alpha * 1e6:.2f} µs, β = {beta * 1e9:.4f} ns/B (1/β = {1 / beta / 1e9:.2f} GB/s)"
        if beta > 0 else f"\nMEASURED here: AllReduce; global fit α = {alpha * 1e6:.2f} µs, β = {beta * 1e9:.4f} ns/B (not positive)",
        header, rows,
        "fit = global α–β model / measured − 1, model T(n, K) = 2⌈log2 K⌉α + 2(K−1)/K·n·β fitted over every (K, n)\n"
        "on the relative error (a point the model underestimates counts at most -100 %, one it overestimates without\n"
        "bound, so one (α, β) pair that cannot fit every K ends up fitting the fastest points). K > 2 ranks share 2\n"
        "cores: those are this machine's shared-memory transport under oversubscription (ranks take turns on the\n"
        "cores, MPICH's waiting ranks busy-poll), not a network; the per-K fits below show α growing with K.")
    rows = []
    for k in ks:
        a, b, res = per_k[k]
        rows.append([k, f"{a * 1e6:.2f}", f"{b * 1e9:.4f}", f"{1 / b / 1e9:.2f}" if b > 0 else "-",
                     f"{max(abs(r) for r in res):.0%}", f"{others.get(k, float('nan')):.0%}"])
    print_report("\nPer-K α–β fit (same model at one K)", ["K", "α µs", "β ns/B", "1/β GB/s", "max |residual|", "others' CPU"],
                 rows, "others' CPU: share of the machine other processes used during that K's AllReduce phase.")


def report_training(results: dict, per_k: dict, compute: dict, model: str) -> list[dict]:
    rows, csv_rows = [], []
    for k in sorted(results):
        runs = {r["strategy"]: r for r in results[k]["train"]}
        base = runs.get("fedavg")
        a, b, _ = per_k.get(k, (float("nan"), float("nan"), None))
        for strategy in STRATEGIES:
            r = runs.get(strategy)
            if r is None:
                continue
            # What the per-K α–β fit says this strategy's per-step AllReduces cost at this K.
            if strategy == "synchronous":
                predicted = allreduce_seconds(4 * r["params"], k, a, b)
            elif strategy == "fedavg":
                predicted = 0.0
            else:
                predicted = allreduce_seconds(r["state_bytes"], k, a, b)
            extra = r["step_seconds"] - base["step_seconds"] if base else float("nan")
            rows.append([k, strategy, _ms(r["step_seconds"]), _ms(r["runfile_step_seconds"]), r["timed_steps"], r["syncs"],
                         _bytes(r["bytes_per_step"]), "" if strategy == "fedavg" else _ms(extra),
                         "" if strategy == "fedavg" else _ms(predicted), f"{r['others_cpu']:.0%}"])
            csv_rows.append(dict(part="measured", model=model, strategy=strategy, ranks=k, fabric="this machine",
                                 steps_per_epoch=r["steps_per_epoch"], step_seconds=r["step_seconds"],
                                 comm_seconds=extra if strategy != "fedavg" else "", fit_seconds=predicted,
                                 bytes_per_step=r["bytes_per_step"], others_cpu=r["others_cpu"],
                                 note=f"comm_seconds = step - fedavg's step; fit_seconds = per-K alpha-beta T of the "
                                      f"per-step collectives; run file (wall-eval)/steps {r['runfile_step_seconds']:.6f}; "
                                      f"{r['syncs']} syncs in {r['steps']} steps"))
    c = compute.get(model, {}).get("compute", {}).get("fedavg")
    print_report(
        f"\nMEASURED here: fdahpc.train's loop, {model}, FashionMNIST, batch 32, one job per K, per-step time after the "
        f"warm-up (one-rank compute of a {model} step, CPU: {_ms(c)} ms)",
        ["K", "strategy", "ms/step", "run file", "steps timed", "syncs", "bytes/step", "- fedavg ms", "α–β ms", "others' CPU"],
        rows,
        "ms/step: mean time between steps after the warm-up, steps after an evaluation left out, slowest rank; run file:\n"
        "(wall_seconds - eval_seconds) / steps (warm-up included); fedavg (τ = 10^9) and FDA (Θ = inf) never sync the\n"
        "models here, so FDA's figure is the monitoring cost; bytes/step: comm_bytes / steps (paper's count, all K ranks);\n"
        "- fedavg: ms/step minus FedAvg's at the same K (what the per-step collectives cost); α–β ms: the per-K fit's\n"
        "T(n, K) for those collectives (the model's 4d bytes, or the FDA state) - the additivity the projection assumes.")
    return csv_rows


def report_compute(compute: dict, results: dict, model: str) -> None:
    rows = []
    for name, m in compute.items():
        for strategy in STRATEGIES:
            rows.append([name, f"{m['params']:,}", strategy, _ms(m["local"]), _ms(m["own"][strategy]),
                         _ms(m["compute"][strategy]), _ms(m["compute_wall"][strategy]), m["steps"][strategy],
                         m["state_bytes"][strategy]])
    k2 = results.get(2)
    check = ""
    if k2 and model in compute:
        r = next((r for r in k2["train"] if r["strategy"] == "fedavg"), None)
        if r:
            check = (f"\nCheck: {model} FedAvg at K = 2 (one rank per core) measured {_ms(r['step_seconds'])} ms/step in "
                     f"fdahpc.train's loop; one-rank CPU {_ms(compute[model]['compute']['fedavg'])} ms.")
    print_report("\nMEASURED here: compute per step at one rank (fdahpc.ModelAverager on a local communicator, Adam, "
                 "batch 32, FashionMNIST) - the projection's compute, this CPU's",
                 ["model", "params", "strategy", "local CPU ms", "own CPU ms", "CPU ms/step", "wall ms/step", "steps",
                  "state bytes"], rows,
                 "local: median process CPU time of the forward/backward/Adam step, pooled over the four strategies'\n"
                 "interleaved steps (the same work under each); own: median CPU time of the strategy's own step\n"
                 "(ModelAverager.step: FDA's drift, dot products, sketch); CPU ms/step = local + own, what the projection\n"
                 "uses (CPU time is robust to other processes' load, up to their cache and memory contention); wall ms:\n"
                 "median elapsed time of a whole step, inflated when others share the cores. FedAvg and FDA never sync\n"
                 "here (τ = 10^9, Θ = inf)." + check)


def report_projection(rows: list[dict], args, alpha: float, beta: float) -> None:
    table = []
    keyed = {(r["model"], r["ranks"], r["strategy"]): r for r in rows}
    for name in dict.fromkeys(r["model"] for r in rows):
        for k in args.project_ranks:
            base = keyed.get((name, k, "synchronous"))
            line = [name, k, base["steps_per_epoch"] if base else "-"]
            for strategy in STRATEGIES:
                r = keyed.get((name, k, strategy))
                line.append("-" if r is None else f"{_secs(r['epoch_seconds'])} ({_pct(r['comm_share'])})")
            for strategy in ("synchronous", "sketchfda"):
                r = keyed.get((name, k, strategy))
                line.append("-" if r is None else f"{r['breakeven_speedup']:,.0f}x")
            table.append(line)
    scale = "" if args.compute_scale == 1 else f", compute / {args.compute_scale:g} (what-if)"
    print_report(
        f"\nPROJECTED (not measured): seconds per epoch (communication share) on a {args.fabric_gbps:g} Gb/s, "
        f"{args.fabric_latency_us:g} µs fabric (α = {alpha * 1e6:g} µs, β = {beta * 1e9:.3f} ns/B){scale}",
        ["model", "K", "steps/epoch", *STRATEGIES, "sync even at", "sketch even at"], table,
        "epoch = steps/epoch · (compute + comm); compute: this CPU's one-rank CPU time per step (table above);\n"
        "even at: how many times faster than this CPU compute must get before synchronous / sketchfda spends as long\n"
        "communicating as computing (compute / comm per step);\n"
        "comm per step: synchronous T(4d, K); fedavg T(4d, K)/τ; FDA T(state, K) + T(4d, K)/S, with T the α–β model,\n"
        f"τ = {args.fedavg_tau} and S = {args.fda_steps_per_sync} (S is an assumption: FDA's sync rate depends on Θ, data and K).")


def plot(path: str, proj: list[dict], measured: dict, fit: tuple, per_k: dict, results: dict, args, model: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in proj))
    ncol = max(3, len(models))
    fig, axes = plt.subplots(2, ncol, figsize=(4.6 * ncol, 9.2), squeeze=False)
    colors = dict(zip(STRATEGIES, ("tab:red", "tab:blue", "tab:green", "tab:purple")))
    for ax, name in zip(axes[0], models):
        for strategy in STRATEGIES:
            mine = sorted((r["ranks"], r["epoch_seconds"], r["comm_epoch_seconds"]) for r in proj
                          if r["model"] == name and r["strategy"] == strategy)
            if mine:
                ks = [p[0] for p in mine]
                ax.plot(ks, [p[1] for p in mine], "-o", ms=3, color=colors[strategy], label=f"{strategy}")
                ax.plot(ks, [p[2] for p in mine], "--", lw=1, color=colors[strategy], label=f"{strategy}: comm")
        ax.set(xscale="log", yscale="log", xlabel="K (ranks)", ylabel="seconds per epoch",
               title=f"PROJECTED: {name}\n{args.fabric_gbps:g} Gb/s, {args.fabric_latency_us:g} µs; this CPU's compute"
               + ("" if args.compute_scale == 1 else f" / {args.compute_scale:g}"))
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=4, fontsize=8, bbox_to_anchor=(0.5, 0.97))
    fig.suptitle("top: PROJECTED with the α–β model (solid: epoch time, dashed: its communication part); "
                 "bottom: MEASURED on this 2-core machine", fontsize=10, y=0.995)
    for ax in axes[0][len(models):]:
        ax.axis("off")
    # Measured: AllReduce with the global fit.
    ax = axes[1][0]
    alpha, beta, _ = fit
    cmap = plt.get_cmap("viridis")
    ks = sorted(measured)
    for i, k in enumerate(ks):
        col = cmap(i / max(1, len(ks) - 1))
        pts = sorted((r["bytes"], r["seconds"]) for r in measured[k])
        ax.plot(*zip(*pts), "o", color=col, label=f"K={k}")
        xs = [p[0] for p in pts]
        ax.plot(xs, [allreduce_seconds(n, k, alpha, beta) for n in xs], "--", color=col, lw=1)
        ax.plot(xs, [allreduce_seconds(n, k, *per_k[k][:2]) for n in xs], "-", color=col, lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="message bytes (K > 2: ranks share 2 cores)", ylabel="seconds",
           title=f"MEASURED here: AllReduce (points), per-K fits (solid)\none global fit (dashed): α={alpha * 1e6:.3g} µs, "
                 f"β={beta * 1e9:.3g} ns/B")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    # Measured: per-step time of the training loop.
    ax = axes[1][1]
    for strategy in STRATEGIES:
        pts = sorted((k, r["step_seconds"]) for k in results for r in results[k]["train"] if r["strategy"] == strategy)
        if pts:
            ax.plot(*zip(*pts), "s:", color=colors[strategy], label=strategy)
    ax.set(xscale="log", yscale="log", xlabel="K (ranks, on 2 cores)", ylabel="seconds per step",
           title=f"MEASURED here: {model} step time\n(K > 2: oversubscribed; FedAvg/FDA never sync)")
    ax.set_xscale("log", base=2)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    # Measured: the per-step collectives' cost against the per-K fit.
    ax = axes[1][2]
    for strategy in ("synchronous", "linearfda", "sketchfda"):
        meas, pred = [], []
        for k in sorted(results):
            runs = {r["strategy"]: r for r in results[k]["train"]}
            if strategy not in runs or "fedavg" not in runs:
                continue
            r = runs[strategy]
            extra = r["step_seconds"] - runs["fedavg"]["step_seconds"]
            if extra > 0:
                meas.append((k, extra))
            a, b, _ = per_k[k]
            n = 4 * r["params"] if strategy == "synchronous" else r["state_bytes"]
            pred.append((k, allreduce_seconds(n, k, a, b)))
        if meas:
            ax.plot(*zip(*meas), "s", color=colors[strategy], label=f"{strategy}: step − fedavg")
        if pred:
            ax.plot(*zip(*pred), "--", color=colors[strategy], lw=1, label=f"{strategy}: per-K α–β")
    ax.set(xscale="log", yscale="log", xlabel="K (ranks, on 2 cores)", ylabel="seconds per step",
           title="MEASURED here: per-step collectives\n(step − FedAvg's step; non-positive left out)")
    ax.set_xscale("log", base=2)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    for ax in axes[1][3:]:
        ax.axis("off")
    fig.tight_layout(rect=(0, 0, 1, 0.935))
    fig.savefig(path, dpi=110)
    plt.close(fig)


CSV_FIELDS = ["part", "model", "strategy", "ranks", "fabric", "message_bytes", "steps_per_epoch", "compute_seconds",
              "comm_seconds", "fit_seconds", "step_seconds", "epoch_seconds", "comm_epoch_seconds", "comm_share",
              "breakeven_speedup", "bytes_per_step", "others_cpu", "note"]


# ----------------------------------------------------------------------------- main
def _reusable(path: str, sizes: list[int], steps: int, params: int) -> dict | None:
    """An earlier job's results for this K when they measured the same sizes, steps and model."""
    try:
        with open(path) as fh:
            rep = json.load(fh)
    except (OSError, ValueError):
        return None
    same = ([r["bytes"] for r in rep.get("allreduce", [])] == sizes and len(rep.get("train", [])) == len(STRATEGIES)
            and all(r["steps"] == steps and r["params"] == params for r in rep["train"]))
    return rep if same else None


def _secs_or_dash(rep: dict, key: str) -> str:
    return f"{rep[key]:.1f} s" if key in rep else "- s"


def run_measurements(args, workdir: str, data_dir: str, sizes: list[int], params: int) -> dict:
    results = {}
    for k in args.ranks:
        result = os.path.join(workdir, f"k{k}.json")
        rep = _reusable(result, sizes, args.warmup_steps + args.steps, params) if args.resume else None
        if rep is not None:
            results[k] = rep
            _progress(k, rep, "reused from an earlier job; ")
            continue
        if os.path.exists(result):
            os.remove(result)
        argv = [sys.executable, os.path.abspath(__file__), "--worker", "--result", result, "--size-list",
                ",".join(map(str, sizes)), *(["--data-dir", data_dir] if data_dir else []), "--ranks", ",".join(map(str, args.ranks)),
                "--model", args.model, "--dataset", args.dataset, "--warmup-steps", str(args.warmup_steps),
                "--steps", str(args.steps), "--ar-budget", str(args.ar_budget)]
        meter = CpuMeter()
        t_launch = time.time()
        proc = mpiexec(k, argv, args.timeout)
        wall = time.time() - t_launch
        if proc.returncode != 0 or not os.path.exists(result):
            tail = "\n".join(proc.stdout.strip().splitlines()[-20:])
            raise RuntimeError(f"K={k}: the job failed (exit {proc.returncode})\n{tail}")
        with open(result) as fh:
            rep = json.load(fh)
        rep["startup_seconds"] = rep["ready_time"] - t_launch
        rep["exit_seconds"] = t_launch + wall - rep["done_time"]
        rep["job_seconds"] = wall
        rep["job_others_cpu"] = meter.foreign_share()
        with open(result, "w") as fh:  # with the launch's own figures, for --resume
            json.dump(rep, fh)
        results[k] = rep
        _progress(k, rep, "")
    return results


def _progress(k: int, rep: dict, note: str) -> None:
    steps = "  ".join(f"{r['strategy']} {_ms(r['step_seconds'])} (setup {r['build_seconds']:.1f} s, loop "
                      f"{r['train_seconds']:.1f} s, eval {r['eval_seconds']:.1f} s, others' CPU {r['others_cpu']:.0%})"
                      for r in rep["train"])
    job = f"{rep['job_others_cpu']:.0%}" if "job_others_cpu" in rep else "-"
    print(f"  K={k:<3d} {note}job {_secs_or_dash(rep, 'job_seconds')}: start {_secs_or_dash(rep, 'startup_seconds')}, "
          f"AllReduce {rep['allreduce_seconds']:.1f} s (others' CPU {rep['allreduce_others_cpu']:.0%}), exit "
          f"{_secs_or_dash(rep, 'exit_seconds')}; ms/step {steps}; others' CPU over the job {job}", flush=True)


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
        print(f"  the machine did not go idle within {args.wait_idle:.0f} s; measuring anyway (others' CPU is reported)", flush=True)
    data_dir = prepare_data(args.dataset, args.data_dir, workdir)
    wanted = list(dict.fromkeys([*args.models, args.model]))
    cache = os.path.join(workdir, "compute.json")
    key = dict(models=wanted, dataset=args.dataset, budget=args.compute_budget, method="pooled local + own")
    cached = None
    if args.resume and os.path.exists(cache):
        with open(cache) as fh:
            cached = json.load(fh)
        cached = cached if cached.get("key") == key else None
    if cached is not None:
        compute, samples, batch = cached["compute"], cached["samples"], cached["batch"]
        print(f"  one-rank compute of {len(compute)} models reused from {cache} (others' CPU then "
              f"{cached['others_cpu']:.0%})", flush=True)
    else:
        meter = CpuMeter(include_children=False)
        t0 = time.perf_counter()
        compute, samples, batch = measure_compute(wanted, args.dataset, data_dir, args.compute_budget)
        others = meter.foreign_share()
        print(f"  one-rank compute of {len(compute)} models in {time.perf_counter() - t0:.0f} s "
              f"(others' CPU {others:.0%})", flush=True)
        with open(cache, "w") as fh:
            json.dump(dict(key=key, compute=compute, samples=samples, batch=batch, others_cpu=others), fh)
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
    spe_check = [(k, r["steps_per_epoch"], steps_per_epoch(samples, k, batch)) for k in results for r in results[k]["train"]]
    bad = [(k, a, b) for k, a, b in spe_check if a != b]
    if bad:
        print(f"\nWARNING: steps per epoch differ from fdahpc's run files (K, run file, ours): {bad}")

    f_alpha, f_beta = args.fabric_latency_us * 1e-6, 8.0 / (args.fabric_gbps * 1e9)
    proj_models = {m: compute[m] for m in args.models}
    proj = project(proj_models, args.project_ranks, f_alpha, f_beta, samples, batch, args.fedavg_tau,
                   args.fda_steps_per_sync, args.compute_scale)
    report_projection(proj, args, f_alpha, f_beta)

    fabric = f"{args.fabric_gbps:g} Gb/s, {args.fabric_latency_us:g} us"
    for k in sorted(measured):
        for r in measured[k]:
            csv_rows.append(dict(part="allreduce", ranks=k, fabric="this machine", message_bytes=r["bytes"],
                                 comm_seconds=r["seconds"], fit_seconds=allreduce_seconds(r["bytes"], k, fit[0], fit[1]),
                                 others_cpu=measured_others[k], note=f"{r['repeats']} repeats; IQR {r['q25']:.3g}-{r['q75']:.3g} s"))
    for r in proj:
        csv_rows.append(dict(part="projected", fabric=fabric, **{f: r[f] for f in r}))
    with open(args.out + ".csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in csv_rows:
            writer.writerow({f: row.get(f, "") for f in CSV_FIELDS})
    plot(args.out + ".png", proj, measured, fit, per_k, results, args, args.model)
    print(f"\nglobal fit (this machine): α = {fit[0] * 1e6:.2f} µs, β = {fit[1] * 1e9:.4f} ns/B; "
          f"fabric projected: α = {f_alpha * 1e6:g} µs, β = {f_beta * 1e9:.3f} ns/B")
    print(f"rows: {args.out}.csv\nplot: {args.out}.png\nreport: {args.out}.txt\n"
          f"total {time.perf_counter() - t_start:.0f} s; run files in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
