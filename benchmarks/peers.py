"""Cross-device FedAvg three ways, on the same clients: fdahpc, Flower's simulation engine, a bare PyTorch loop.

    pip install -e ".[peers]"       # Flower with its Ray simulation engine (or a venv of its own:
                                    # python -m venv V && V/bin/pip install torch==2.13.0 "flwr[simulation]")
    python benchmarks/peers.py --flower-python V/bin/python     # N = 100 and 1,000, 3 interleaved repeats
    python benchmarks/peers.py --clients 100 --rounds 10 --repeats 1

The same job each way (``peers_job.py`` holds it once): LeNet-5 on FashionMNIST (the local
files, no download), the training set split over N clients by Dirichlet(0.5) labels
(``fdahpc.data.partition``); each round the C = 10 clients fdahpc's sampler picks
(``--clients-per-round``; Flower's strategy and the bare loop are handed the same list)
start from the global model and run one local epoch of SGD (lr 0.05, batch 32, each
client's batches from its seeded ``BatchStream``, the batches fdahpc draws); the
sample-weighted mean of their models is the new global model. The accuracy curves of the
three are therefore the same up to floating-point summation order, and the run checks
that they are (``--curve-tolerance``) and that fdahpc's run file names the same clients.
Scoring is one function for all (``fdahpc.evaluate.score``, batches of 1 000, on the
10 000 test images), timed twice: after every round (each framework where it scores:
fdahpc's server while its hosts train the next round, Flower's driver and the bare
loop's rank 0 between rounds) and only after the last round (framework overhead alone).
Two CPU cores for each: fdahpc as ``mpiexec -n 3`` (rank 0 coordinates, two hosts train;
``--mode semiasync --clients-per-round 10 --speed-ratio 1``), Flower with a 2-CPU Ray
backend (one CPU per client, two actors), the bare loop as 2 MPI processes that split
the round's clients greedily by sample count (largest first, to the less loaded process:
the floor of a static loop) and add their weighted models with one ``Allreduce``.

Per run, from the lines each prints at the end of a round (timestamped here as they
arrive): wall seconds per round (median of the gaps between round lines), start-up
(launch to the end of round 1, less one round), and the peak of the summed memory of
every process the run started (Ray's included), sampled every 0.1 s, as RSS and PSS.
Flower's actors record every load of the training set; a run with more loads than actors
fails (the data cache did not hold). Ratios are against the bare loop of the same repeat
and scoring; medians over the repeats.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)
import peers_job as job
from _common import REPO_ROOT, CpuMeter, child_env, print_report
from peers_job import ALPHA, BATCH, LR, PER_ROUND

ROUND_LINE = re.compile(r"round (\d+)\b.*?accuracy (nan|[0-9.]+)")
HERE = os.path.dirname(os.path.abspath(__file__))
FLOWER_ACTORS = 2  # 2 CPUs for Ray, 1 per client
FLOWER_INSTALL = ('pip install -e ".[peers]", or a venv of its own: python -m venv V && V/bin/pip install '
                  'torch==2.13.0 "flwr[simulation]", then --flower-python V/bin/python')
TIMINGS = {"every": "every round", "end": "at the end"}


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", default="100,1000")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--flower-python", default=sys.executable, help="a Python that imports flwr (" + FLOWER_INSTALL + ")")
    p.add_argument("--only", default="fdahpc,flower,bare")
    p.add_argument("--scoring", default="every,end", help="every: score after every round; end: only after the last")
    p.add_argument("--curve-tolerance", type=float, default=0.01,
                   help="largest accuracy difference allowed between frameworks on the same clients and batches")
    p.add_argument("--flower-app", choices=("module", "inline"), default="module",
                   help="inline: the ClientApp defined in this script (the old arrangement; its data cache does not "
                        "hold and the load guard fails the run)")
    p.add_argument("--worker", choices=("bare", "flower"), help=argparse.SUPPRESS)
    p.add_argument("--eval-every", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--out-dir", default=os.path.join(REPO_ROOT, "runs", "peers"))
    args = p.parse_args(argv)
    for name, value, allowed in (("--only", args.only, ("fdahpc", "flower", "bare")),
                                 ("--scoring", args.scoring, tuple(TIMINGS))):
        bad = [v for v in value.split(",") if v not in allowed]
        if bad:
            p.exit(2, f"peers.py: {name} {bad[0]!r}: unknown; use a comma list of {', '.join(allowed)}\n")
    return args


# ----------------------------------------------------------------------------- the bare loop
def greedy_split(sizes: dict[int, int], workers: int) -> list[list[int]]:
    """The round's clients over ``workers`` processes: largest first, each to the least
    loaded process so far (ties: the lower rank); every process computes the same split."""
    load, out = [0] * workers, [[] for _ in range(workers)]
    for c in sorted(sizes, key=lambda c: (-sizes[c], c)):
        w = min(range(workers), key=lambda k: (load[k], k))
        load[w] += sizes[c]
        out[w].append(c)
    return out


def bare_worker(args) -> None:
    """2 MPI processes: each trains its greedy share of the round's clients, one Allreduce
    of the weighted sum; rank 0 scores."""
    import numpy as np
    import torch
    from mpi4py import MPI

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    n = int(args.clients)
    x, y, parts = job.load_train(n, args.seed)
    xt, yt = job.load_test(args.seed)
    model = job.new_lenet(args.seed)
    params = list(model.parameters())
    flat = torch.nn.utils.parameters_to_vector(params).detach().numpy().copy()
    jobs = np.zeros(n, dtype=np.int64)
    for rnd in range(1, args.rounds + 1):
        chosen = job.schedule(n, rnd, args.seed)
        total = sum(len(parts[c]) for c in chosen)
        acc = np.zeros_like(flat)
        for c in greedy_split({c: len(parts[c]) for c in chosen}, comm.size)[comm.rank]:
            # vector_to_parameters makes the parameters views of its vector: each client
            # trains a copy of the global model, never the global model itself
            torch.nn.utils.vector_to_parameters(torch.from_numpy(flat).clone(), params)
            job.client_job(model, x, y, parts[c], c, int(jobs[c]), args.seed)
            acc += len(parts[c]) / total * torch.nn.utils.parameters_to_vector(params).detach().numpy()
        jobs[chosen] += 1
        comm.Allreduce(MPI.IN_PLACE, acc, op=MPI.SUM)
        flat = acc
        if comm.rank == 0:
            score = rnd % args.eval_every == 0 or rnd == args.rounds
            torch.nn.utils.vector_to_parameters(torch.from_numpy(flat).clone(), params)
            print(f"round {rnd} accuracy {job.score_model(model, xt, yt) if score else float('nan'):.4f}", flush=True)


# ----------------------------------------------------------------------------- Flower
def inline_client_app():
    """The old arrangement: a ClientApp defined in the launching script, its cache a local of
    the script. Flower pickles it by value with every message, so the cache is new on every
    call and every call reloads the training set; kept to show the load guard catching it."""
    from flwr.clientapp import ClientApp

    from peers_flower_app import train_on

    client = ClientApp()
    cache: dict = {}

    @client.train()
    def train(msg, context):
        return train_on(msg, cache)

    return client


def flower_worker(args) -> None:
    """Flower's simulation engine (Ray backend, 2 CPUs, 1 per client), message API FedAvg."""
    from flwr.simulation import run_simulation

    import peers_flower_app

    n = int(args.clients)
    client = peers_flower_app.app if args.flower_app == "module" else inline_client_app()
    server = peers_flower_app.server_app(n, args.rounds, args.seed, args.eval_every)
    run_simulation(server_app=server, client_app=client, num_supernodes=n,
                   backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": FLOWER_ACTORS}})


# ----------------------------------------------------------------------------- measuring
def _tree_memory(root: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes, each summed over ``root`` and every process below it. RSS counts a
    shared page (the libraries every process maps: torch's alone is about 150 MB) once per
    process; PSS divides it among the processes sharing it, so its sum is what they hold."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(pid))
            rss[int(pid)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, pss, stack = 0, 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        pss += _pss(pid)
        stack.extend(children.get(pid, []))
    return total, pss


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next((int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:")), 0)
    except OSError:
        return 0


def measure(cmd: list[str], rounds: int, stall: float = 1200, env: dict | None = None) -> dict:
    """Run ``cmd`` (``env`` added to its environment); timestamp its round lines; sample its
    process tree's memory. A run that prints no round line for ``stall`` seconds is killed
    (its whole session: a Ray whose raylet died leaves the driver waiting for ever)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**child_env(), **(env or {})}, cwd=REPO_ROOT, start_new_session=True)
    peak, done, lines, log, last = [0, 0], threading.Event(), {}, [], [start]

    def sample_memory():
        while not done.is_set():
            peak[:] = map(max, peak, _tree_memory(proc.pid))
            if time.perf_counter() - last[0] > stall:
                log.append(f"[peers.py: no round line for {stall:.0f} s; killed]\n")
                os.killpg(proc.pid, signal.SIGKILL)
                break
            done.wait(0.1)

    sampler = threading.Thread(target=sample_memory, daemon=True)
    sampler.start()
    for line in proc.stdout:
        log.append(line)
        m = ROUND_LINE.search(line)
        if m and int(m.group(1)) not in lines:
            last[0] = time.perf_counter()
            lines[int(m.group(1))] = (last[0] - start, float(m.group(2)))
    proc.wait()
    done.set()
    sampler.join()
    try:  # what the run left behind (Ray's daemons outlive a killed driver)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if proc.returncode != 0 or len(lines) < rounds:
        raise RuntimeError(f"exit {proc.returncode}, {len(lines)} of {rounds} rounds: {' '.join(cmd)}\n{''.join(log[-30:])}")
    t = [lines[r][0] for r in range(1, rounds + 1)]
    per_round = statistics.median(b - a for a, b in zip(t, t[1:]))
    return dict(per_round=per_round, startup=t[0] - per_round, peak_gb=peak[0] / 2**30, peak_pss_gb=peak[1] / 2**30,
                accuracy=[lines[r][1] for r in range(1, rounds + 1)], total=time.perf_counter() - start)


def commands(args, n: int, out: str, eval_every: int) -> dict[str, list[str]]:
    here = os.path.abspath(__file__)
    common = ["--clients", str(n), "--rounds", str(args.rounds), "--seed", str(args.seed), "--eval-every", str(eval_every)]
    fdahpc = ["mpiexec", "-n", "3", sys.executable, "-m", "fdahpc.train", "--mode", "semiasync", "--strategy", "fedavg",
              "--weighting", "samples", "--model", "lenet5", "--dataset", "fashion-mnist", "--partition", ALPHA,
              "--clients", str(n), "--clients-per-round", str(PER_ROUND), "--speed-ratio", "1", "--rounds",
              str(args.rounds), "--local-epochs", "1", "--optimizer", "sgd", "--lr", str(LR), "--batch-size", str(BATCH),
              "--seed", str(args.seed), "--eval-every", str(eval_every), "--log-every", "1", "--out", out]
    return {"fdahpc": fdahpc,
            "flower": [args.flower_python, here, "--worker", "flower", "--flower-app", args.flower_app, *common],
            "bare": ["mpiexec", "-n", "2", sys.executable, here, "--worker", "bare", *common]}


_VERSIONS = ("import importlib.metadata as m, json, platform\n"
             "def v(p):\n"
             "    try: return m.version(p)\n"
             "    except m.PackageNotFoundError: return None\n"
             "print(json.dumps(dict(python=platform.python_version(), **{p: v(p) for p in "
             "('torch', 'flwr', 'ray', 'mpi4py', 'numpy')})))")


def versions(python: str) -> dict:
    """The versions an interpreter imports (None for a package it lacks)."""
    try:
        out = subprocess.run([python, "-c", _VERSIONS], capture_output=True, text=True, timeout=120, check=True).stdout
        return json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return {"error": str(exc).splitlines()[0]}


def fdahpc_clients(path: str, rounds: int) -> list[list[int]]:
    """Each round's clients as fdahpc's run file records them."""
    import h5py

    with h5py.File(path, "r") as f:
        rows = f["round/clients"][()]
    return [sorted(int(c) for c in r if c >= 0) for r in rows[:rounds]]


def run_one(args, way: str, cmd: list[str], loads_file: str, out: str, want: list[list[int]]) -> dict:
    """One measured run with its checks: Flower's data loads, fdahpc's clients."""
    if os.path.exists(loads_file):
        os.remove(loads_file)
    meter = CpuMeter()
    try:
        r = measure(cmd, args.rounds, env={job.LOADS_ENV: loads_file})
        r["retries"] = 0
    except RuntimeError as exc:
        if way != "flower":
            raise
        # Ray's start-up can fail on a loaded machine (its raylet gives up waiting for its
        # metrics agent): once more, and the table says so.
        print(f"Flower failed, once more: {str(exc).splitlines()[0]}", file=sys.stderr, flush=True)
        if os.path.exists(loads_file):
            os.remove(loads_file)
        meter = CpuMeter()
        r = measure(cmd, args.rounds, env={job.LOADS_ENV: loads_file})
        r["retries"] = 1
    r["foreign_cpu"] = meter.foreign_share()
    if way == "flower":
        r["loads"] = job.check_loads(loads_file, FLOWER_ACTORS, "Flower")
    if way == "fdahpc" and fdahpc_clients(out, args.rounds) != want:
        raise RuntimeError(f"fdahpc's run file {out} names other clients than the schedule")
    return r


def check_curves(curves: dict[str, list[float]], tolerance: float) -> str:
    """Largest accuracy difference of each framework from the first, on scored rounds; raises
    past ``tolerance`` (the same clients and batches must give the same model)."""
    ways = list(curves)
    parts = []
    for way in ways[1:]:
        gaps = [abs(a - b) for a, b in zip(curves[ways[0]], curves[way]) if not (math.isnan(a) or math.isnan(b))]
        gap = max(gaps, default=float("nan"))
        if not gap <= tolerance:
            raise RuntimeError(f"{way} and {ways[0]} trained the same clients on the same batches but their accuracy "
                               f"differs by {gap:.4f} > --curve-tolerance {tolerance}: {curves}")
        parts.append(f"{way} vs {ways[0]} {gap:.4f}")
    return ", ".join(parts)


def main(argv=None) -> int:
    args = parse(argv)
    sys.path.insert(0, HERE)  # peers_job / peers_flower_app for Flower's actors (PYTHONPATH below)
    if args.worker == "bare":
        bare_worker(args)
        return 0
    if args.worker == "flower":
        flower_worker(args)
        return 0
    os.makedirs(args.out_dir, exist_ok=True)
    os.environ["PYTHONPATH"] = HERE + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    ways = args.only.split(",")
    here_v = versions(sys.executable)
    print(f"# this interpreter ({sys.executable}): {json.dumps(here_v)}")
    if "flower" in ways:
        flower_v = versions(args.flower_python)
        print(f"# --flower-python ({args.flower_python}): {json.dumps(flower_v)}")
        if not flower_v.get("flwr"):
            print(f"peers.py: Flower is missing from {args.flower_python}; skipping it. Install it: {FLOWER_INSTALL}",
                  file=sys.stderr)
            ways.remove("flower")
    print(f"# Flower: {FLOWER_ACTORS} Ray actors (init_args num_cpus {FLOWER_ACTORS}, client_resources num_cpus 1), "
          f"ClientApp from {'peers_flower_app (importable module)' if args.flower_app == 'module' else 'this script'}, "
          f"ScheduledFedAvg(fraction_evaluate=0), evaluate_fn on the driver", flush=True)
    timings = args.scoring.split(",")
    journal = os.path.join(args.out_dir, "peers.jsonl")
    done = {}
    if os.path.exists(journal):
        with open(journal) as f:
            done = {(d := json.loads(line)).pop("key"): d for line in f if line.strip()}
    rows, curve_lines = [], []
    sizes = [int(c) for c in args.clients.split(",")]
    results = {(n, w, t): [] for n in sizes for w in ways for t in timings}
    gaps = {}
    for rep in range(args.repeats):  # a repeat covers every N first: a cut-short run has each N once
        for n in sizes:
            want = [job.schedule(n, r, args.seed) for r in range(1, args.rounds + 1)]
            for timing in timings:  # interleaved: each repeat runs every framework back to back
                eval_every = 1 if timing == "every" else args.rounds
                out = os.path.join(args.out_dir, f"fdahpc-n{n}-{timing}-r{rep}.h5")
                cmds = commands(args, n, out, eval_every)
                for way in ways:
                    key = f"n{n}-{timing}-r{rep}-{way}-rounds{args.rounds}-seed{args.seed}-{args.flower_app}"
                    r = done.get(key)
                    if r is None:
                        r = run_one(args, way, cmds[way], os.path.join(args.out_dir, f"loads-{key}.txt"), out, want)
                        with open(journal, "a") as f:  # resumable: a rerun skips what is journaled
                            f.write(json.dumps(dict(key=key, **r)) + "\n")
                    results[n, way, timing].append(r)
                    print(f"N = {n}, repeat {rep}, scoring {TIMINGS[timing]}: {way} {r['per_round']:.3f} s/round "
                          f"(others used {r['foreign_cpu']:.0%} of the cores meanwhile)", file=sys.stderr, flush=True)
                if timing == "every" and len(ways) > 1:
                    gap = check_curves({w: results[n, w, timing][-1]["accuracy"] for w in ways}, args.curve_tolerance)
                    gaps.setdefault(n, gap)
    for n in sizes:
        if n in gaps:
            curve_lines.append(f"N = {n}: largest accuracy difference over the {args.rounds} rounds (repeat 0): {gaps[n]}")
        for timing in timings:
            for way in ways:
                r = results[n, way, timing]
                base = results.get((n, "bare", timing))
                ratio = (statistics.median(a["per_round"] / b["per_round"] for a, b in zip(r, base)) if base
                         else float("nan"))
                rows.append([n, way, TIMINGS[timing], f"{statistics.median(x['per_round'] for x in r):.3f}", f"{ratio:.2f}",
                             f"{statistics.median(x['startup'] for x in r):.1f}", f"{max(x['peak_gb'] for x in r):.2f}",
                             f"{max(x['peak_pss_gb'] for x in r):.2f}", f"{statistics.median(x['accuracy'][-1] for x in r):.4f}",
                             (str(max(x["loads"] for x in r)) + (f" ({sum(x.get('retries', 0) for x in r)} Ray restarts)"
                                                                  if any(x.get("retries") for x in r) else ""))
                             if way == "flower" else "",
                             f"{statistics.median(x['foreign_cpu'] for x in r):.0%}"])
                if timing == timings[0]:
                    curve_lines.append(f"N = {n} {way:7s} accuracy per round (repeat 0, scoring {TIMINGS[timing]}): "
                                       + " ".join(f"{a:.3f}" for a in r[0]["accuracy"]))
    print_report(f"Cross-device FedAvg: LeNet-5, FashionMNIST {ALPHA}, {PER_ROUND} clients a round (fdahpc's sampler, "
                 f"the same for all), 1 local epoch, SGD {LR}, batch {BATCH}, {args.rounds} rounds, 2 cores each, "
                 f"{args.repeats} interleaved repeats (medians)",
                 ["N", "framework", "scoring", "s/round", "/ bare loop", "start-up s", "peak GB RSS", "peak GB PSS",
                  "final accuracy", "data loads", "others' CPU"],
                 rows, "s/round: median of the gaps between round lines; / bare loop: median of the per-repeat ratios "
                       "(same scoring); start-up: launch to the end of round 1, less one round; peak GB: the largest sum "
                       "over all the run's processes (Ray's included) sampled every 0.1 s, of RSS (shared libraries "
                       "counted in every process) and of PSS (shared pages divided among their sharers); data loads: "
                       f"loads of the training set by Flower's actors (the run fails above {FLOWER_ACTORS}); others' CPU: the share of "
                       "the machine's cores other processes used during the run (median), the noise on the timings.")
    print()
    print("\n".join(curve_lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
