"""Semi-asynchronous FedBuff two ways under ``mpiexec``: fdahpc's rank-0 coordinator and APPFL's MPI server.

    pip install -e ".[peers-appfl]"     # or a venv of its own (APPFL pulls torch; take torch and torchvision
                                        # from one release pair, e.g. torch==2.14.1 torchvision==0.29.1; add
                                        # h5py numba there so fdahpc runs on the same torch build)
    PYTHONPATH=. V/bin/python benchmarks/peers_appfl.py                      # N 20, K 5, 30 aggregations
    PYTHONPATH=. V/bin/python benchmarks/peers_appfl.py --print-config      # the two configurations only

The job, the same on both sides: LeNet-5 (fdahpc's, initialised from ``--seed``) on
FashionMNIST split over N clients by Dirichlet(0.5) labels (``fdahpc.data.partition``);
every client job is S local SGD steps (lr 0.05, batch 32, a fresh optimizer per job) from
the global model the client last received; the server keeps a buffer of K updates and, when
it is full, moves the model by FedBuff's rule w ← w + η_s/K · Σ Δ_i/√(1+τ_i) (Δ_i the
client's model minus the one it started from, τ_i the versions published meanwhile). R MPI
processes each: rank 0 serves, R−1 host the clients (APPFL: contiguous blocks, as its
batched MPI example splits them).

How each side is configured, and where the two cannot be made the same:
- fdahpc: ``--mode semiasync --strategy fedbuff --buffer K --server-lr η_s --tau S
  --speed-ratio 1``: a virtual clock orders the updates, every job lasting one time unit.
- APPFL (its asynchronous MPI example and its FedBuff server configuration):
  ``AsyncScheduler`` + ``FedBuffAggregator`` (staleness ``polynomial``, a = 0.5, i.e.
  1/√(1+τ); ``client_weights_mode: equal``; ``send_gradient: True``), ``VanillaTrainer``
  in ``step`` mode. APPFL's step is α·(1/N)·Σ s(τ_i)·Δ_i, with no 1/K, so α = η_s·N/K
  gives FedBuff's rule above (its example's α = 0.9 would be η_s = 0.9·K/N here).
  ``num_global_epochs`` counts client updates under AsyncScheduler: A aggregations are A·K.
- Client speeds: APPFL's MPI servers have no speed model (its FedQueue scheduler pads
  jobs with real sleeps; its virtual-clock simulator ``appfl.vsim`` runs every client in
  one process, not under MPI), so both run equal speeds: fdahpc ``--speed-ratio 1``, APPFL
  jobs of S steps each (equal real work; an epoch-long job would last as long as the
  client's data, so small clients would fill APPFL's buffer more often than fdahpc's).
- Update order: fdahpc's is the virtual clock's (ties by client id, deterministic); APPFL's
  is real arrival order. Staleness is printed per aggregation on both sides.
- The model a client gets back: APPFL answers an update at once with the model of the
  moment (holding the client's own update only if it filled the buffer); an fdahpc client
  restarts from the version that aggregated its update.
- Batches: fdahpc draws from a client's ``BatchStream`` continued across jobs; APPFL's
  DataLoader reshuffles at every job (last batch of a pass partial). Same distribution,
  different batches, so the curves are compared, never asserted equal.
- Client-side validation (on in APPFL's example configuration) is off: fdahpc's clients
  do not score; both score the global model on the server, with one function
  (``fdahpc.evaluate.score``, batches of 1 000, 10 000 test images). APPFL's MPI server
  scores nothing by itself: a ``ServerAgent`` subclass prints the line
  (``peers_appfl_app.py``).

Measured per run, from the round lines (timestamped as they arrive; ``peers.measure``):
wall seconds per aggregation (median gap), launch to the end of aggregation 1, the peak
of the summed RSS and PSS of every process the run started (sampled every 0.1 s), the
accuracy per aggregation. Timed twice: scoring after every aggregation, and only after the
last (the frameworks alone). Both run under this interpreter when it has fdahpc's h5py and
numba (``pip install h5py numba`` beside APPFL: one torch build for both sides), else fdahpc
under ``--fdahpc-python``; the header prints both interpreters' versions and the memory of one
idle process of each (torch alone, torch with APPFL).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)
import peers_job as job
from _common import REPO_ROOT, CpuMeter, print_report
from peers_job import ALPHA, BATCH, LR

__all__ = ["FedBuffJob", "appfl_client_configs", "appfl_ranks", "appfl_server_config", "appfl_update_weight",
           "fdahpc_command", "main"]

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "peers_appfl_app.py")
INSTALL = ('pip install -e ".[peers-appfl]" (torch and torchvision from one release pair, e.g. torch==2.14.1 '
           'torchvision==0.29.1), or a venv of its own: python -m venv V && V/bin/pip install appfl mpi4py '
           '"torch==2.14.1" "torchvision==0.29.1" h5py numba, then run this script with V/bin/python')
TIMINGS = {"every": "every aggregation", "end": "at the end"}
WAYS = ("fdahpc", "appfl", "appfl-nogc")
#: APPFL's ``optimize_memory`` (on by default in every agent, scheduler, aggregator, trainer and
#: communicator) runs ``gc.collect()`` several times per message on both ends; appfl-nogc turns
#: it off everywhere APPFL reads it, to show what it costs
NOGC = "appfl-nogc"


@dataclass(frozen=True)
class FedBuffJob:
    """The one FedBuff job both frameworks run; each field a flag of this script."""

    clients: int = 20       # N
    buffer: int = 5         # K updates per aggregation
    rounds: int = 30        # aggregations
    ranks: int = 3          # MPI processes: 1 server + R-1 client hosts (2 cores here: as peers.py)
    local_steps: int = 50   # S SGD steps per client job
    server_lr: float = 1.0  # η_s (fdahpc's default; FedBuff's rule with no extra scaling)
    seed: int = 0
    lr: float = LR
    batch: int = BATCH

    def __post_init__(self) -> None:
        for name in ("clients", "buffer", "local_steps", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be at least 1")
        if self.rounds < 2:
            raise ValueError(f"--rounds {self.rounds}: need at least 2 aggregations (a time per aggregation is a gap "
                             "between two)")
        if self.ranks < 2:
            raise ValueError(f"--ranks {self.ranks}: need a server and at least one client host, e.g. --ranks 3")
        if self.buffer > self.clients:
            raise ValueError(f"--buffer {self.buffer} > --clients {self.clients}: a buffer holds at most one update "
                             "per client here; use --buffer <= --clients")
        if self.clients < self.ranks - 1:
            raise ValueError(f"--clients {self.clients} < {self.ranks - 1} client hosts: use --ranks <= clients + 1")
        if not (self.lr > 0 and self.server_lr > 0):
            raise ValueError(f"--lr {self.lr} / --server-lr {self.server_lr}: must be > 0")

    @property
    def appfl_alpha(self) -> float:
        """APPFL's FedBuff α that makes its step η_s/K · Σ Δ_i/√(1+τ_i): it weighs an update
        α·(1/N)·(1+τ)^(-a) and does not divide by K."""
        return self.server_lr * self.clients / self.buffer


def fdahpc_command(j: FedBuffJob, python: str, out: str, eval_every: int) -> list[str]:
    return ["mpiexec", "-n", str(j.ranks), python, "-m", "fdahpc.train", "--mode", "semiasync", "--strategy", "fedbuff",
            "--clients", str(j.clients), "--buffer", str(j.buffer), "--rounds", str(j.rounds), "--speed-ratio", "1",
            "--server-lr", str(j.server_lr), "--tau", str(j.local_steps), "--model", "lenet5", "--dataset",
            "fashion-mnist", "--partition", ALPHA, "--optimizer", "sgd", "--lr", str(j.lr), "--batch-size",
            str(j.batch), "--seed", str(j.seed), "--eval-every", str(eval_every), "--log-every", "1", "--out", out]


def appfl_server_config(j: FedBuffJob, log_dir: str, way: str = "appfl") -> dict:
    """APPFL's server configuration: its FedBuff example's keys, the job's values."""
    cfg = {
        "client_configs": {
            "train_configs": {
                "trainer": "VanillaTrainer", "mode": "step", "num_local_steps": j.local_steps,
                "optim": "SGD", "optim_args": {"lr": j.lr},
                "loss_fn": "CrossEntropyLoss",
                "metric_path": APP, "metric_name": "accuracy",
                "do_validation": False, "do_pre_validation": False,  # fdahpc's clients do not score
                "use_dp": False, "send_gradient": True,
                "train_batch_size": j.batch, "train_data_shuffle": True,
                "logging_output_dirname": log_dir, "logging_output_filename": "result",
            },
            "model_configs": {"model_path": APP, "model_name": "lenet5", "model_kwargs": {"seed": j.seed},
                              "seed": j.seed},
            "comm_configs": {"compressor_configs": {"enable_compression": False}},
        },
        "server_configs": {
            "num_clients": j.clients,
            "scheduler": "AsyncScheduler",
            "scheduler_kwargs": {"same_init_model": True},
            "aggregator": "FedBuffAggregator",
            "aggregator_kwargs": {"client_weights_mode": "equal", "staleness_fn": "polynomial",
                                  "staleness_fn_kwargs": {"a": 0.5}, "alpha": j.appfl_alpha, "K": j.buffer},
            "device": "cpu",
            "num_global_epochs": j.rounds * j.buffer,  # AsyncScheduler counts client updates, not aggregations
            "logging_output_dirname": log_dir, "logging_output_filename": "result",
        },
    }
    if way == NOGC:
        s = cfg["server_configs"]
        for section in (s, s["scheduler_kwargs"], s["aggregator_kwargs"], cfg["client_configs"]["train_configs"]):
            section["optimize_memory"] = False
    return cfg


def appfl_client_configs(j: FedBuffJob, log_dir: str, way: str = "appfl") -> list[dict]:
    """One configuration per client, as APPFL's batched MPI example writes them."""
    extra = {"optimize_memory": False} if way == NOGC else {}
    return [{"client_id": f"Client{i}", **extra,
             "train_configs": {"device": "cpu", "logging_output_dirname": log_dir, "logging_output_filename": "result"},
             "data_configs": {"dataset_path": APP, "dataset_name": "client_data",
                              "dataset_kwargs": {"num_clients": j.clients, "client_id": i, "seed": j.seed}}}
            for i in range(j.clients)]


def appfl_update_weight(server_config: dict, staleness: int) -> float:
    """The coefficient of an update Δ with staleness τ in APPFL's FedBuff step, read off its
    configuration: α · (1/N) (``equal`` weights) · (1+τ)^(-a)."""
    s = server_config["server_configs"]
    kw = s["aggregator_kwargs"]
    assert kw["client_weights_mode"] == "equal" and kw["staleness_fn"] == "polynomial"
    return kw["alpha"] / s["num_clients"] * (1 + staleness) ** -kw["staleness_fn_kwargs"]["a"]


# ----------------------------------------------------------------------------- command line
def parse(argv=None) -> tuple[argparse.Namespace, FedBuffJob]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = FedBuffJob()
    for f in dataclasses.fields(FedBuffJob):
        p.add_argument("--" + f.name.replace("_", "-"), type=type(getattr(d, f.name)), default=getattr(d, f.name))
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--only", default=",".join(WAYS))
    p.add_argument("--scoring", default="every,end", help="every: score after every aggregation; end: after the last")
    p.add_argument("--fdahpc-python", default=None,
                   help="the interpreter that runs fdahpc; default: this one when it has fdahpc's h5py and numba (the "
                        "same torch build on both sides), else python3 on PATH")
    p.add_argument("--out-dir", default=os.path.join(REPO_ROOT, "runs", "peers_appfl"))
    p.add_argument("--print-config", action="store_true", help="print both configurations and exit")
    p.add_argument("--appfl-layout", choices=("batched", "per-client"), default="batched",
                   help="batched: APPFL on the same R processes as fdahpc, each client host training its block of "
                        "clients in turn (APPFL's batched asynchronous MPI example); per-client: one process per "
                        "client, N+1 in all (its plain MPI example)")
    p.add_argument("--worker", choices=WAYS[1:], help=argparse.SUPPRESS)
    p.add_argument("--eval-every", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--summary", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name, value, allowed in (("--only", args.only, WAYS), ("--scoring", args.scoring, tuple(TIMINGS))):
        bad = [v for v in value.split(",") if v not in allowed]
        if bad:
            p.exit(2, f"peers_appfl.py: {name} {bad[0]!r}: unknown; use a comma list of {', '.join(allowed)}\n")
    if args.repeats < 1:
        p.exit(2, f"peers_appfl.py: --repeats {args.repeats}: must be at least 1\n")
    try:
        j = FedBuffJob(**{f.name: getattr(args, f.name) for f in dataclasses.fields(FedBuffJob)})
    except ValueError as exc:
        p.exit(2, f"peers_appfl.py: {exc}\n")
    return args, j


def resolve_python(name: str | None) -> str:
    """The real path of ``name`` (a pyenv shim resolves to its target). Default: this
    interpreter when it can run fdahpc, so both sides train on one torch build; else python3."""
    if name is None:
        import importlib.util

        if all(importlib.util.find_spec(m) for m in ("h5py", "numba")):
            return sys.executable
    found = shutil.which(name or "python3") or name or "python3"
    try:
        return subprocess.run([found, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True,
                              timeout=60, check=True).stdout.strip() or found
    except (OSError, subprocess.SubprocessError):
        return found


def appfl_missing() -> str | None:
    """Why ``import appfl`` fails here (None when it imports)."""
    try:
        import appfl  # noqa: F401
    except Exception as exc:  # a torchvision built for another torch fails with RuntimeError, not ImportError
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def appfl_ranks(j: FedBuffJob, layout: str) -> int:
    return j.clients + 1 if layout == "per-client" else j.ranks


def print_config(j: FedBuffJob, fdahpc_python: str, out_dir: str, layout: str = "batched") -> None:
    log_dir = os.path.join(out_dir, "appfl-logs")
    r = appfl_ranks(j, layout)
    print(f"# job: {json.dumps(dataclasses.asdict(j))}, partition {ALPHA}, model lenet5, dataset fashion-mnist")
    print(f"# fdahpc: {' '.join(fdahpc_command(j, fdahpc_python, os.path.join(out_dir, 'fdahpc.h5'), 1))}")
    print(f"# APPFL: mpiexec -n {r} {sys.executable} {os.path.abspath(__file__)} --worker appfl ... "
          f"(rank 0 ServerAgent + MPIServerCommunicator.serve(); ranks 1..{r - 1} MPIClientCommunicator for "
          f"clients split by np.array_split: layout {layout})")
    print("# APPFL server configuration: " + json.dumps(appfl_server_config(j, log_dir)))
    print("# APPFL client configuration (client 0; the others differ in the client id only): "
          + json.dumps(appfl_client_configs(j, log_dir)[0]))
    print(f"# {NOGC}: the same with optimize_memory: false in server_configs, scheduler_kwargs, aggregator_kwargs, "
          "train_configs, each client's configuration and its MPIClientCommunicator")
    print(f"# mapping: FedBuff step eta_s/K * sum(delta/sqrt(1+tau)) = APPFL alpha {j.appfl_alpha:g} * (1/N) * "
          f"(1+tau)^-0.5; {j.rounds} aggregations = APPFL num_global_epochs {j.rounds * j.buffer} (client updates); "
          f"speeds equal on both sides (fdahpc --speed-ratio 1; APPFL has no speed model under MPI)", flush=True)


# ----------------------------------------------------------------------------- measuring
_FDAHPC_STALENESS = ("import h5py, json, sys\n"
                     "with h5py.File(sys.argv[1], 'r') as f:\n"
                     "    print(json.dumps(f['round/staleness_mean'][()].tolist()))")


def staleness_means(way: str, out: str, summary: str, python: str) -> list[float]:
    """Mean staleness of each aggregation: fdahpc's run file (read by its own interpreter), APPFL's summary."""
    if way == "fdahpc":
        res = subprocess.run([python, "-c", _FDAHPC_STALENESS, out], capture_output=True, text=True, timeout=120,
                             check=True)
        return json.loads(res.stdout)
    with open(summary) as f:
        return [statistics.fmean(v["staleness"]) for v in json.load(f)]


def idle_footprint(python: str, modules: str) -> tuple[float, float]:
    """(RSS, PSS) in MB of one idle process of ``python`` that imported ``modules``."""
    from peers import _tree_memory

    proc = subprocess.Popen([python, "-c", f"import {modules}, sys; print('ready', flush=True); sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_common.child_env())
    try:
        proc.stdout.readline()
        time.sleep(0.5)
        rss, pss = _tree_memory(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    return rss / 2**20, pss / 2**20


def run_one(args, j: FedBuffJob, way: str, timing: str, rep: int, fdahpc_python: str) -> dict:
    from peers import measure

    eval_every = 1 if timing == "every" else j.rounds
    key = f"{way}-{timing}-r{rep}"
    out = os.path.join(args.out_dir, f"{key}.h5")
    summary = os.path.join(args.out_dir, f"{key}.json")
    loads = os.path.join(args.out_dir, f"loads-{key}.txt")
    for path in (out, summary, loads):
        if os.path.exists(path):
            os.remove(path)
    if way == "fdahpc":
        cmd = fdahpc_command(j, fdahpc_python, out, eval_every)
    else:
        cmd = ["mpiexec", "-n", str(appfl_ranks(j, args.appfl_layout)), sys.executable, os.path.abspath(__file__),
               "--worker", way, "--eval-every", str(eval_every), "--summary", summary, "--out-dir", args.out_dir,
               *[a for f in dataclasses.fields(FedBuffJob)
                 for a in ("--" + f.name.replace("_", "-"), str(getattr(j, f.name)))]]
    meter = CpuMeter()
    r = measure(cmd, j.rounds, stall=600, env={job.LOADS_ENV: loads})
    r["foreign_cpu"] = meter.foreign_share()
    r["to_first"] = r["startup"] + r["per_round"]  # launch to the end of aggregation 1
    r["staleness"] = staleness_means(way, out, summary, fdahpc_python)
    if way != "fdahpc":  # one load of the training set per client host, not one per client
        r["loads"] = job.check_loads(loads, appfl_ranks(j, args.appfl_layout) - 1, "APPFL")
    return r


def worker(args, j: FedBuffJob) -> None:
    """One MPI rank of the APPFL run."""
    sys.path.insert(0, HERE)
    import peers_appfl_app

    log_dir = os.path.join(args.out_dir, "appfl-logs")
    peers_appfl_app.run(appfl_server_config(j, log_dir, args.worker), appfl_client_configs(j, log_dir, args.worker),
                        args.eval_every, j.rounds, j.seed, args.summary, optimize_memory=args.worker != NOGC)


def main(argv=None) -> int:
    args, j = parse(argv)
    if args.worker:
        worker(args, j)
        return 0
    fdahpc_python = resolve_python(args.fdahpc_python)
    ways = args.only.split(",")
    if args.print_config:
        print_config(j, fdahpc_python, args.out_dir, args.appfl_layout)
        return 0
    if any(w != "fdahpc" for w in ways):
        why = appfl_missing()
        if why:
            print(f"peers_appfl.py: APPFL does not import in {sys.executable} ({why}); install it: {INSTALL}",
                  file=sys.stderr)
            ways = [w for w in ways if w == "fdahpc"]
            if not ways:
                return 2
    os.makedirs(args.out_dir, exist_ok=True)
    os.environ["PYTHONPATH"] = HERE + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    print_header(ways, fdahpc_python)
    print_config(j, fdahpc_python, args.out_dir, args.appfl_layout)
    results = run_all(args, j, ways, fdahpc_python)
    print_results(args, j, ways, results)
    return 0


def print_header(ways: list[str], fdahpc_python: str) -> None:
    """Both interpreters' versions, and what one idle process of each holds."""
    from importlib.metadata import version

    import torch

    from peers import versions

    appfl = len(ways) > ways.count("fdahpc")
    fdahpc_v, here_v = versions(fdahpc_python), versions(sys.executable)
    print(f"# this interpreter ({sys.executable}): {json.dumps(here_v)}, torch build {torch.__version__}"
          + (f", appfl {version('appfl')}, torchvision {version('torchvision')}" if appfl else ""))
    print(f"# --fdahpc-python ({fdahpc_python}): {json.dumps(fdahpc_v)}")
    if fdahpc_v.get("torch") != here_v.get("torch"):
        print(f"# NOTE: fdahpc trains on torch {fdahpc_v.get('torch')}, APPFL on {here_v.get('torch')}: the times "
              "compare torch builds too (give --fdahpc-python this interpreter, with h5py and numba installed)")
    for name, python, modules in (("fdahpc", fdahpc_python, "torch, mpi4py, h5py, fdahpc.train"),
                                  ("appfl", sys.executable, "torch, mpi4py"),  # its torch build alone
                                  ("appfl", sys.executable, "torch, mpi4py, appfl.agent, appfl.comm.mpi")):
        if name == "fdahpc" and "fdahpc" in ways or name == "appfl" and appfl:
            rss, pss = idle_footprint(python, modules)
            print(f"# one idle {name} process (import {modules}): {rss:.0f} MB RSS, {pss:.0f} MB PSS")


def run_all(args, j: FedBuffJob, ways: list[str], fdahpc_python: str) -> dict:
    """Every (way, scoring) run of every repeat, interleaved; resumed from the journal."""
    timings = args.scoring.split(",")
    journal = os.path.join(args.out_dir, "peers_appfl.jsonl")
    ident = json.dumps(dict(dataclasses.asdict(j), layout=args.appfl_layout, fdahpc_python=fdahpc_python),
                       sort_keys=True)
    done = {}
    if os.path.exists(journal):
        with open(journal) as f:
            done = {(d := json.loads(line)).pop("key"): d for line in f if line.strip()}
    results = {(w, t): [] for w in ways for t in timings}
    for rep in range(args.repeats):  # interleaved: each repeat runs every framework back to back
        for timing in timings:
            for way in ways:
                key = f"{ident}|{way}|{timing}|{rep}"
                r = done.get(key)
                if r is None:
                    r = run_one(args, j, way, timing, rep, fdahpc_python)
                    with open(journal, "a") as f:  # resumable: a rerun skips what is journaled
                        f.write(json.dumps(dict(key=key, **r)) + "\n")
                results[way, timing].append(r)
                print(f"repeat {rep}, scoring {TIMINGS[timing]}: {way} {r['per_round']:.3f} s/aggregation "
                      f"(others used {r['foreign_cpu']:.0%} of the cores meanwhile)", file=sys.stderr, flush=True)
    return results


def print_results(args, j: FedBuffJob, ways: list[str], results: dict) -> None:
    timings = args.scoring.split(",")
    rows, curves = [], []
    for timing in timings:
        base = results.get(("fdahpc", timing))
        for way in ways:
            rs = results[way, timing]
            ratio = (statistics.median(a["per_round"] / b["per_round"] for a, b in zip(rs, base)) if base
                     else float("nan"))
            rows.append([way, TIMINGS[timing], f"{statistics.median(x['per_round'] for x in rs):.3f}", f"{ratio:.2f}",
                         f"{statistics.median(x['to_first'] for x in rs):.1f}", f"{max(x['peak_gb'] for x in rs):.2f}",
                         f"{max(x['peak_pss_gb'] for x in rs):.2f}",
                         f"{statistics.median(x['accuracy'][-1] for x in rs):.4f}",
                         f"{statistics.fmean(rs[0]['staleness']):.2f}",
                         f"{statistics.median(x['foreign_cpu'] for x in rs):.0%}"])
            if timing == timings[0]:
                curves.append(f"{way:10s} accuracy per aggregation (repeat 0, scoring {TIMINGS[timing]}): "
                              + " ".join(f"{a:.3f}" for a in rs[0]["accuracy"]))
                curves.append(f"{way:10s} mean staleness per aggregation: "
                              + " ".join(f"{s:.1f}" for s in rs[0]["staleness"]))
    print_report(f"Semi-asynchronous FedBuff: LeNet-5, FashionMNIST {ALPHA}, N = {j.clients}, K = {j.buffer}, "
                 f"{j.rounds} aggregations, {j.local_steps} local SGD steps (lr {j.lr}, batch {j.batch}) per job, "
                 f"eta_s {j.server_lr}, equal speeds, fdahpc mpiexec -n {j.ranks}, APPFL mpiexec -n "
                 f"{appfl_ranks(j, args.appfl_layout)} ({args.appfl_layout}), {args.repeats} interleaved repeats "
                 "(medians)",
                 ["framework", "scoring", "s/aggregation", "/ fdahpc", "launch to agg 1 s", "peak GB RSS",
                  "peak GB PSS", "final accuracy", "mean staleness", "others' CPU"],
                 rows, "s/aggregation: median of the gaps between aggregation lines; / fdahpc: median of the per-repeat "
                       "ratios (same scoring); launch to agg 1: from starting mpiexec to the line of aggregation 1; "
                       "peak GB: the largest sum over all the run's processes sampled every 0.1 s, of RSS (shared "
                       "libraries counted in every process) and of PSS (shared pages divided among their sharers); "
                       "mean staleness: versions published between a job's start model and its aggregation (repeat 0); "
                       "others' CPU: the share of the machine's cores other processes used during the run (median), "
                       "the noise on the timings.")
    print()
    print("\n".join(curves))


if __name__ == "__main__":
    sys.exit(main())
