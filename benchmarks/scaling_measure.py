"""What ``scaling.py`` measures on this machine: the MPI job per K, the one-rank compute, their files.

- :func:`run_measurements` starts one ``mpiexec -n K`` job per K (``scaling.py --worker``), or reuses
  a finished one's ``WORKDIR/kK.json`` under ``--resume``;
- :func:`worker` is that job: the AllReduce microbenchmark, then fdahpc.train's setup and loop
  (``fdahpc.run.build`` / ``run``) for each strategy, timing every step;
- :func:`one_rank_compute` measures the projection's compute per step at one rank (kept in
  ``WORKDIR/compute.json``), and :func:`prepare_data` decompresses the dataset once for all jobs.

mpi4py is imported only inside the functions that run under ``mpiexec``, so the launching process
never initializes MPI itself.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import sys
import time

# Importing _common also makes fdahpc importable from a plain checkout.
from _common import CpuMeter, mpiexec, read_run
from cost_model import STRATEGIES
from scaling_report import progress

HERE = os.path.dirname(os.path.abspath(__file__))
#: The script each K's job runs (with ``--worker``): the entry point, so the job parses the same flags.
ENTRY = os.path.join(HERE, "scaling.py")
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

    from fdahpc.cli import parse_args
    from fdahpc.run import build
    from fdahpc.run import run as train

    mpi_comm = comm.comm
    total = args.warmup_steps + args.steps
    rows = []
    for strategy in order:
        out = os.path.join(workdir, f"k{comm.world_size}-{strategy}.h5")
        flags = [*MEASURED_FLAGS[strategy], "--model", args.model, "--dataset", args.dataset,
                 *(["--data-dir", data_dir] if data_dir else []), "--max-steps", str(total), "--epochs", "1000",
                 "--log-every", "1000000", "--threads", "1", "--out", out]
        plan = parse_args(flags)
        plan.mode.prepare(plan, comm)  # as fdahpc.train: rank 0 compiles or loads the kernels first
        t_build = time.perf_counter()
        setup = build(plan, comm)
        comm.barrier()
        t_build = time.perf_counter() - t_build
        stamps = []
        inner = setup.job.strategy.after_step

        def after_step(loss=None, inner=inner, stamps=stamps):
            synced = inner(loss)
            stamps.append(time.perf_counter())
            return synced

        setup.job.strategy.after_step = after_step  # the loop calls it once per step, right after the local step
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
        spe = setup.job.steps_per_epoch
        every = plan.cfg.eval_every or 0
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
                             # the last evaluation's count, before the run's closing sync (final_sync):
                             # the steady state per step that the projection multiplies
                             bytes_per_step=float(run["eval/comm_bytes"][-1]) / run["steps"], params=int(run["params"]),
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


def one_rank_compute(args, workdir: str, data_dir: str) -> tuple[dict, int, int]:
    """:func:`measure_compute` of ``--models`` and ``--model``, saved in ``WORKDIR/compute.json`` and
    reused from there under ``--resume`` when models, dataset and budget match."""
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
        return compute, samples, batch
    meter = CpuMeter(include_children=False)
    t0 = time.perf_counter()
    compute, samples, batch = measure_compute(wanted, args.dataset, data_dir, args.compute_budget)
    others = meter.foreign_share()
    print(f"  one-rank compute of {len(compute)} models in {time.perf_counter() - t0:.0f} s "
          f"(others' CPU {others:.0%})", flush=True)
    with open(cache, "w") as fh:
        json.dump(dict(key=key, compute=compute, samples=samples, batch=batch, others_cpu=others), fh)
    return compute, samples, batch


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


# ----------------------------------------------------------------------------- launching the jobs
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


def run_measurements(args, workdir: str, data_dir: str, sizes: list[int], params: int) -> dict:
    """One ``mpiexec -n K`` job per K of ``--ranks``: {K: its results, with the job's start, exit and load}."""
    results = {}
    for k in args.ranks:
        result = os.path.join(workdir, f"k{k}.json")
        rep = _reusable(result, sizes, args.warmup_steps + args.steps, params) if args.resume else None
        if rep is not None:
            results[k] = rep
            progress(k, rep, "reused from an earlier job; ")
            continue
        if os.path.exists(result):
            os.remove(result)
        argv = [sys.executable, ENTRY, "--worker", "--result", result, "--size-list", ",".join(map(str, sizes)),
                *(["--data-dir", data_dir] if data_dir else []), "--ranks", ",".join(map(str, args.ranks)),
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
        progress(k, rep, "")
    return results
