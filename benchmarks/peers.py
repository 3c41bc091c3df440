"""Cross-device FedAvg three ways: fdahpc, Flower's simulation engine, and a bare PyTorch loop.

    pip install -e ".[peers]"                     # Flower with its Ray simulation engine
    python benchmarks/peers.py                    # N = 100 and 1,000 clients, 3 interleaved repeats
    python benchmarks/peers.py --clients 100 --rounds 10 --repeats 1 --flower-python /path/to/python

The same job each way: LeNet-5 on FashionMNIST (the local files, no download), the
training set split over N clients by Dirichlet(0.5) labels (``fdahpc.data.partition``,
the same split for all three), each round C = 10 clients sampled, one local epoch of SGD
(lr 0.05, batch 32) from the global model, the sample-weighted mean of their models, and
the global model scored on the 10,000 test images after every round (central evaluation).
Two CPU cores for each: fdahpc as ``mpiexec -n 3`` (rank 0 coordinates, two hosts train;
``--mode semiasync --clients-per-round 10 --speed-ratio 1``), Flower with a 2-CPU Ray
backend (one CPU per client), the bare loop as 2 MPI processes that split the round's
clients and add their weighted models with one ``Allreduce`` (the floor: no framework).

Per run, from the lines each prints at the end of a round (timestamped here as they
arrive): accuracy per round, wall seconds per round (median of the rounds after the first),
start-up (launch to the end of round 1, less one round), and the peak of the summed
memory of every process the run started (Ray's included), sampled every 0.1 s, both as
RSS (what the issue's goal was stated in; shared libraries counted once per process) and as
PSS (shared pages divided among the processes that share them).
Ratios are taken against the bare loop of the same repeat; medians over the repeats.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)
from _common import REPO_ROOT, child_env, print_report

ROUND_LINE = re.compile(r"round (\d+)\b.*?accuracy ([0-9.]+)")
LR, BATCH, PER_ROUND, ALPHA = 0.05, 32, 10, "dirichlet:0.5"


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", default="100,1000")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--flower-python", default=sys.executable, help="a Python that imports flwr (pip install -e '.[peers]')")
    p.add_argument("--only", default="fdahpc,flower,bare")
    p.add_argument("--worker", choices=("bare", "flower"), help=argparse.SUPPRESS)
    p.add_argument("--out-dir", default=os.path.join(REPO_ROOT, "runs", "peers"))
    return p.parse_args(argv)


# ----------------------------------------------------------------------------- shared job
def job_data(n_clients: int, seed: int):
    """The FashionMNIST arrays and the N clients' row lists (the same for every framework)."""
    from fdahpc.data import load_dataset, partition

    data = load_dataset("fashion-mnist", seed=seed)
    return data, partition(data.y_train, n_clients, ALPHA, seed)


def new_lenet(seed: int):
    import torch

    from fdahpc.models import build_model

    torch.manual_seed(seed)
    return build_model("lenet5", 1, 28, 10)


def local_epoch(model, x, y, seed: int) -> None:
    """One epoch of SGD over (x, y) in batches of 32, shuffled by ``seed``."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=LR)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    for i in range(0, len(y), BATCH):
        idx = order[i : i + BATCH]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()


def accuracy(model, x, y) -> float:
    import torch

    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def sample(n_clients: int, rnd: int, seed: int):
    import numpy as np

    return np.sort(np.random.default_rng([seed, rnd]).choice(n_clients, PER_ROUND, replace=False))


# ----------------------------------------------------------------------------- the bare loop
def bare_worker(args) -> None:
    """2 MPI processes: each trains half the round's clients, one Allreduce of the weighted sum."""
    import numpy as np
    import torch
    from mpi4py import MPI

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    n = int(args.clients)
    data, parts = job_data(n, args.seed)
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train).long()
    xt, yt = torch.from_numpy(data.x_test), torch.from_numpy(data.y_test).long()
    model = new_lenet(args.seed)
    params = list(model.parameters())
    flat = torch.nn.utils.parameters_to_vector(params).detach().numpy().copy()
    for rnd in range(1, args.rounds + 1):
        chosen = sample(n, rnd, args.seed)
        total = sum(len(parts[c]) for c in chosen)
        acc = np.zeros_like(flat)
        for c in chosen[comm.rank :: comm.size]:
            # vector_to_parameters makes the parameters views of its vector: each client
            # trains a copy of the global model, never the global model itself
            torch.nn.utils.vector_to_parameters(torch.from_numpy(flat).clone(), params)
            rows = torch.from_numpy(parts[c])
            local_epoch(model, x[rows], y[rows], args.seed * 1_000_003 + rnd * 1009 + int(c))
            acc += len(parts[c]) / total * torch.nn.utils.parameters_to_vector(params).detach().numpy()
        comm.Allreduce(MPI.IN_PLACE, acc, op=MPI.SUM)
        flat = acc
        if comm.rank == 0:
            torch.nn.utils.vector_to_parameters(torch.from_numpy(flat), params)
            print(f"round {rnd} accuracy {accuracy(model, xt, yt):.4f}", flush=True)


# ----------------------------------------------------------------------------- Flower
def flower_worker(args) -> None:
    """Flower's simulation engine (Ray backend, 2 CPUs, 1 per client), message API FedAvg."""
    import torch
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    n = int(args.clients)
    client = ClientApp()
    cache: dict = {}

    def shard(pid: int):
        if "parts" not in cache:  # once per Ray worker process
            torch.set_num_threads(1)
            data, parts = job_data(n, args.seed)
            cache.update(x=torch.from_numpy(data.x_train), y=torch.from_numpy(data.y_train).long(), parts=parts)
        rows = torch.from_numpy(cache["parts"][pid])
        return cache["x"][rows], cache["y"][rows]

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        pid = int(context.node_config["partition-id"])
        model = new_lenet(args.seed)
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        x, y = shard(pid)
        rnd = int(msg.content["config"]["server-round"])
        local_epoch(model, x, y, args.seed * 1_000_003 + rnd * 1009 + pid)
        content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord({"num-examples": len(y)})})
        return Message(content=content, reply_to=msg)

    server = ServerApp()
    data, _ = job_data(n, args.seed)
    xt, yt = torch.from_numpy(data.x_test), torch.from_numpy(data.y_test).long()
    model = new_lenet(args.seed)

    def evaluate(rnd: int, arrays: ArrayRecord):
        if rnd > 0:
            model.load_state_dict(arrays.to_torch_state_dict())
            print(f"round {rnd} accuracy {accuracy(model, xt, yt):.4f}", flush=True)
        return MetricRecord({})

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = FedAvg(fraction_train=PER_ROUND / n, fraction_evaluate=0.0, min_train_nodes=PER_ROUND,
                          min_available_nodes=n)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=args.rounds,
                       evaluate_fn=evaluate)

    run_simulation(server_app=server, client_app=client, num_supernodes=n,
                   backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}})


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


def measure(cmd: list[str], rounds: int, timeout: float = 3600) -> dict:
    """Run ``cmd``; timestamp its round lines; sample its process tree's memory."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env(),
                            cwd=REPO_ROOT)
    peak, done, lines, log = [0, 0], threading.Event(), {}, []

    def sample_memory():
        while not done.is_set():
            peak[:] = map(max, peak, _tree_memory(proc.pid))
            done.wait(0.1)

    sampler = threading.Thread(target=sample_memory, daemon=True)
    sampler.start()
    for line in proc.stdout:
        log.append(line)
        m = ROUND_LINE.search(line)
        if m and int(m.group(1)) not in lines:
            lines[int(m.group(1))] = (time.perf_counter() - start, float(m.group(2)))
    proc.wait(timeout)
    done.set()
    sampler.join()
    if proc.returncode != 0 or len(lines) < rounds:
        raise RuntimeError(f"exit {proc.returncode}, {len(lines)} of {rounds} rounds: {' '.join(cmd)}\n{''.join(log[-30:])}")
    t = [lines[r][0] for r in range(1, rounds + 1)]
    per_round = statistics.median(b - a for a, b in zip(t, t[1:]))
    return dict(per_round=per_round, startup=t[0] - per_round, peak_gb=peak[0] / 2**30, peak_pss_gb=peak[1] / 2**30,
                accuracy=[lines[r][1] for r in range(1, rounds + 1)], total=time.perf_counter() - start)


def commands(args, n: int, out: str) -> dict[str, list[str]]:
    here = os.path.abspath(__file__)
    common = ["--clients", str(n), "--rounds", str(args.rounds), "--seed", str(args.seed)]
    fdahpc = ["mpiexec", "-n", "3", sys.executable, "-m", "fdahpc.train", "--mode", "semiasync", "--strategy", "fedavg",
              "--weighting", "samples", "--model", "lenet5", "--dataset", "fashion-mnist", "--partition", ALPHA,
              "--clients", str(n), "--clients-per-round", str(PER_ROUND), "--speed-ratio", "1", "--rounds",
              str(args.rounds), "--local-epochs", "1", "--optimizer", "sgd", "--lr", str(LR), "--batch-size", str(BATCH),
              "--seed", str(args.seed), "--eval-every", "1", "--log-every", "1", "--out", out]
    return {"fdahpc": fdahpc,
            "flower": [args.flower_python, here, "--worker", "flower", *common],
            "bare": ["mpiexec", "-n", "2", sys.executable, here, "--worker", "bare", *common]}


def main(argv=None) -> int:
    args = parse(argv)
    if args.worker == "bare":
        bare_worker(args)
        return 0
    if args.worker == "flower":
        flower_worker(args)
        return 0
    os.makedirs(args.out_dir, exist_ok=True)
    ways = args.only.split(",")
    rows, curves = [], []
    for n in [int(c) for c in args.clients.split(",")]:
        results: dict[str, list[dict]] = {w: [] for w in ways}
        for rep in range(args.repeats):
            cmds = commands(args, n, os.path.join(args.out_dir, f"fdahpc-n{n}-r{rep}.h5"))
            for way in ways:  # interleaved: each repeat runs all three back to back
                results[way].append(measure(cmds[way], args.rounds))
                print(f"N = {n}, repeat {rep}: {way} {results[way][-1]['per_round']:.3f} s/round", file=sys.stderr, flush=True)
        for way in ways:
            r = results[way]
            ratio = (statistics.median(a["per_round"] / b["per_round"] for a, b in zip(r, results["bare"]))
                     if "bare" in results else float("nan"))
            rows.append([n, way, f"{statistics.median(x['per_round'] for x in r):.3f}", f"{ratio:.2f}",
                         f"{statistics.median(x['startup'] for x in r):.1f}", f"{max(x['peak_gb'] for x in r):.2f}", f"{max(x['peak_pss_gb'] for x in r):.2f}",
                         f"{statistics.median(x['accuracy'][-1] for x in r):.4f}"])
            curves.append(f"N = {n} {way:7s} accuracy per round (repeat 0): "
                          + " ".join(f"{a:.3f}" for a in r[0]["accuracy"]))
    print_report(f"Cross-device FedAvg: LeNet-5, FashionMNIST {ALPHA}, {PER_ROUND} clients a round, 1 local epoch, SGD "
                 f"{LR}, batch {BATCH}, {args.rounds} rounds, 2 cores each, {args.repeats} interleaved repeats (medians)",
                 ["N", "framework", "s/round", "/ bare loop", "start-up s", "peak GB RSS", "peak GB PSS", "final accuracy"],
                 rows, "s/round: median over rounds 2.. of the time between round lines (central evaluation included); "
                       "/ bare loop: median of the per-repeat ratios; start-up: launch to the end of round 1, less one round; "
                       "peak GB: the largest sum over all the run's processes (Ray's included) sampled every 0.1 s, of RSS "
                       "(shared libraries counted in every process) and of PSS (shared pages divided among their sharers).")
    print()
    print("\n".join(curves))
    return 0


if __name__ == "__main__":
    sys.exit(main())
