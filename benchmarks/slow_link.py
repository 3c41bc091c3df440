"""The time model against a real slow link: 2 ranks over gloo/TCP, one in each network namespace.

    benchmarks/slow_link.sh [RATE ...]      # as root: makes the namespaces, shapes the link, runs this

``slow_link.sh`` joins two network namespaces by a veth pair shaped with ``tc`` and calls
``measure`` once per link rate; ``report`` prints the comparison. Per rate, ``measure``
starts one job of two ranks, one in each namespace (``ip netns exec``, torch.distributed
over gloo through fdahpc's own communicator), which, after a single start:

1. **probes the link**: times AllReduces of 8 B, 4d B and 4·4d B (d = LeNet-5's 61,706
   parameters; median of repeats after warm-up, a barrier before each);
2. **trains** through ``python -m fdahpc.train``'s own setup and loop (``fdahpc.run``;
   LeNet-5, FashionMNIST, K = 2, 120 steps each): a reference with no communication
   (FedAvg, ``--tau`` 10⁹) before and after each of Synchronous, FedAvg (``--tau 10``)
   and LinearFDA (``--theta 1``), twice over. Every step is stamped on both ranks, and
   every collective call is timed (its bytes and seconds).

Timed is the segment from step 20 to step 120 (100 steps; no evaluation falls inside it):
the wall time between the two steps' stamps on rank 0, the seconds rank 0 spent inside
collectives in it, and the link's own share of those: per call the shorter of the two
ranks' times (the rank that arrived last waited only for the transfer).

**The model's prediction** for a run's segment, the formula of ``time_to_accuracy.py``:

    steps · step + syncs · T(4d) + monitored · T(8 B),   T(n) = 2α + n·β   (K = 2: ring and
                                                                            Rabenseifner agree)

- step: the mean of the two reference runs around it (seconds per step of this machine's
  compute with both ranks running, under whatever else the machine was doing), times
  LinearFDA's measured ratio of its own work to FedAvg's (``scaling.csv``) for LinearFDA;
- syncs: the run's own model syncs inside the segment; monitored: LinearFDA checks every step;
- β = 8 / rate (the tc rate: the stated link); α = half the probe's 8-byte AllReduce (the
  link's latency as measured: a kernel without netem cannot add a delay).

Besides the wall time, the link's time in collectives is compared with the model's
communication term alone (syncs · T(4d) + monitored · T(8)): the link model without the
compute, which the other jobs on a shared machine make noisy. The goal: within 20 %.
fdahpc's own control message (an allgather every ``--stop-check-every`` steps) is set to
once per 1,000 steps, so none falls in the segment.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

__all__ = ["METHODS", "comm_model", "fit", "link_seconds", "predict", "rate_bps", "segment"]

#: LeNet-5 on 28×28 grey images: the model every run here trains.
D = 61_706
#: (name, flags): the reference (no communication) and the methods checked.
REFERENCE = ("reference", ["--strategy", "fedavg", "--tau", "1000000000"])
METHODS = (
    ("synchronous", ["--strategy", "synchronous"]),
    ("fedavg tau=10", ["--strategy", "fedavg", "--tau", "10"]),
    ("linearfda theta=1", ["--strategy", "linearfda", "--theta", "1"]),
)
WARMUP, STEPS = 20, 120
SIZES = (8, 4 * D, 16 * D)
FIELDS = ["rate", "pass", "order", "method", "steps", "syncs", "monitored", "seconds", "comm_seconds", "link_seconds",
          "comm_calls",
          "alpha_probe", "alpha_fit", "beta_fit", "probe", "shaping"]


def rate_bps(text: str) -> float:
    """tc's rate syntax ('1gbit', '100mbit', '500kbit') in bits per second."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]?)(bit|bps)", text.strip().lower())
    if m is None:
        raise ValueError(f"rate {text!r}: give it as tc does, e.g. 1gbit or 100mbit")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] * (8 if m.group(3) == "bps" else 1)
    return float(m.group(1)) * scale


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(α, β) of T(n) = 2α + n·β by least squares over [(n, seconds)] (K = 2)."""
    import numpy as np

    a = np.array([[2.0, n] for n, _ in points])
    t = np.array([s for _, s in points])
    (alpha, beta), *_ = np.linalg.lstsq(a, t, rcond=None)
    return float(alpha), float(beta)


def comm_model(syncs: int, monitored: int, alpha: float, beta: float) -> float:
    """syncs · T(4d) + monitored · T(8), T(n) = 2α + n·β (two ranks)."""
    return syncs * (2 * alpha + 4 * D * beta) + monitored * (2 * alpha + 8 * beta)


def predict(steps: float, syncs: int, monitored: int, step: float, alpha: float, beta: float) -> float:
    """steps · step + syncs · T(4d) + monitored · T(8)."""
    return steps * step + comm_model(syncs, monitored, alpha, beta)


def segment(stamps: list[float], calls: list[tuple[float, float, int]], first: int) -> tuple[float, list[float]]:
    """(wall seconds from the stamp of step ``first`` to the last, the seconds of each
    collective call that started in that span); ``calls`` = [(start, end, bytes)]."""
    t0, t1 = stamps[first - 1], stamps[-1]
    return t1 - t0, [b - a for a, b, _ in calls if t0 <= a < t1]


def link_seconds(per_rank: list[list[float]]) -> float:
    """The seconds the link itself took: per collective call, the shorter of the ranks' times
    (the rank that arrived last waited only for the transfer, the other also for its peer's
    compute), summed. Ranks that timed different calls: rank 0's own sum."""
    if len({len(c) for c in per_rank}) != 1:
        return sum(per_rank[0])
    return sum(min(ts) for ts in zip(*per_rank))


# the job: one rank in each namespace ---------------------------------------------------------


def _timed(comm, calls: list) -> None:
    """Time every collective of ``comm`` (start, end, bytes) into ``calls``."""
    for name in ("allreduce_sum_", "allreduce_mean_", "iallreduce_mean_", "bcast_", "allgather", "reduce_sum_"):
        inner = getattr(comm, name)

        def wrapped(buf, *a, _inner=inner, **kw):
            t0 = time.perf_counter()
            out = _inner(buf, *a, **kw)
            calls.append((t0, time.perf_counter(), int(getattr(buf, "nbytes", 0))))
            return out

        setattr(comm, name, wrapped)


def job(args) -> int:
    """Both ranks: probe the link, then train the schedule; rank 0 writes the results (JSON)."""
    import torch

    from fdahpc.comm import make_communicator
    from fdahpc.cli import parse_args
    from fdahpc.data import FASHION_MNIST_DIR
    from fdahpc.run import build
    from fdahpc.run import run as train

    torch.set_num_threads(1)
    comm = make_communicator("gloo", "cpu", timeout_s=120)
    probed = {}
    for n in SIZES:
        buf = torch.zeros(max(2, n // 4), dtype=torch.float32)
        times = []
        for i in range(args.repeats + 3):
            comm.barrier()
            t0 = time.perf_counter()
            comm.allreduce_sum_(buf, "model")
            if i >= 3:  # warm-up: the connection's first calls
                times.append(time.perf_counter() - t0)
        probed[n] = statistics.median(times)
    calls: list[tuple[float, float, int]] = []
    _timed(comm, calls)
    schedule = []
    for pass_ in range(args.passes):
        for name, flags in METHODS:
            schedule += [(pass_, *REFERENCE), (pass_, name, flags)]
    schedule.append((args.passes - 1, *REFERENCE))
    results = []
    for order, (pass_, name, flags) in enumerate(schedule):
        out = os.path.join(args.workdir, f"{args.rate}-{order:02d}-{name.replace(' ', '_')}.h5")
        plan = parse_args([*flags, "--backend", "gloo", "--model", "lenet5", "--dataset", "fashion-mnist",
                          "--data-dir", FASHION_MNIST_DIR, "--max-steps", str(STEPS), "--epochs", "1000",
                          "--stop-check-every", "1000", "--threads", "1", "--log-every", "1000000", "--out", out])
        plan.mode.prepare(plan, comm)
        setup = build(plan, comm)
        stamps: list[float] = []
        syncs_at: list[int] = []
        inner = setup.job.strategy.after_step

        def after_step(loss=None, inner=inner, stamps=stamps, syncs_at=syncs_at):
            synced = inner(loss)
            stamps.append(time.perf_counter())
            if synced:
                syncs_at.append(len(stamps))
            return synced

        setup.job.strategy.after_step = after_step  # the loop calls it once per step, right after the local step
        comm.barrier()
        del calls[:]
        train(setup)
        seconds, durations = segment(stamps, calls, WARMUP)
        per_rank = comm.allgather_obj(durations)
        comm_seconds, n_calls, link = sum(durations), len(durations), link_seconds(per_rank)
        syncs = sum(WARMUP < s <= STEPS for s in syncs_at)
        monitored = STEPS - WARMUP if "linearfda" in name else 0
        results.append(dict(rate=args.rate, **{"pass": pass_}, order=order, method=name, steps=STEPS - WARMUP,
                            syncs=syncs, monitored=monitored, seconds=seconds, comm_seconds=comm_seconds,
                            link_seconds=link, comm_calls=n_calls))
        if comm.is_root:
            print(f"{args.rate} #{order} {name}: {STEPS - WARMUP} steps, {syncs} syncs, {seconds:.2f} s "
                  f"({comm_seconds:.2f} s in {n_calls} collectives, the link {link:.2f} s)", flush=True)
        del setup
    if comm.is_root:
        with open(args.out, "w") as fh:
            json.dump(dict(probe=probed, runs=results), fh)
    comm.barrier()
    return 0


# the orchestration ---------------------------------------------------------------------


def measure(args) -> int:
    """Start the job's two ranks, one in each namespace, and append its rows to the CSV."""
    ns, dev = args.ns.split(","), args.dev.split(",")
    work = os.path.join(ROOT, "runs", "slow_link")
    os.makedirs(work, exist_ok=True)
    port = 29700 + int(time.time()) % 200  # a fresh port per invocation: no TIME_WAIT from an earlier one
    result = os.path.join(work, f"{args.rate}.json")
    if os.path.exists(result):
        os.remove(result)
    procs, logs = [], []
    for rank in (0, 1):
        env = [f"RANK={rank}", "WORLD_SIZE=2", "LOCAL_RANK=0", f"MASTER_ADDR={args.addr}", f"MASTER_PORT={port}",
               f"GLOO_SOCKET_IFNAME={dev[rank]}", "OMP_NUM_THREADS=1", f"PYTHONPATH={ROOT}"]
        cmd = ["timeout", "-k", "10", str(int(args.timeout)), "ip", "netns", "exec", ns[rank], "env", *env,
               sys.executable, __file__, "job", "--rate", args.rate, "--out", result, "--workdir", work,
               "--passes", str(args.passes), "--repeats", str(args.repeats)]
        logs.append(os.path.join(work, f"{args.rate}.log.{rank}"))
        procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=open(logs[-1], "w"), stderr=subprocess.STDOUT))
    codes = [p.wait() for p in procs]
    print(open(logs[0]).read(), end="")
    if any(codes) or not os.path.exists(result):
        tail = "".join(open(f).read()[-2000:] for f in logs)
        raise SystemExit(f"slow_link job failed (exit codes {codes}):\n{tail}")
    with open(result) as fh:
        got = json.load(fh)
    probed = {int(k): v for k, v in got["probe"].items()}
    alpha_fit, beta_fit = fit(sorted(probed.items()))
    new = not os.path.exists(args.csv)
    with open(args.csv, "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        if new:
            w.writeheader()
        for r in got["runs"]:
            w.writerow(dict(r, alpha_probe=probed[8] / 2, alpha_fit=alpha_fit, beta_fit=beta_fit,
                            probe=json.dumps(probed), shaping=args.shaping))
    return 0


def fda_ratio() -> float:
    """LinearFDA's step over FedAvg's on LeNet-5 (scaling.csv: its drift and dots on top of the local step)."""
    from _common import RESULTS

    with open(os.path.join(RESULTS, "scaling.csv"), newline="") as fh:
        c = {r["strategy"]: float(r["compute_seconds"]) for r in csv.DictReader(fh)
             if r["part"] == "projected" and r["model"] == "lenet5" and r["compute_seconds"]}
    return c["linearfda"] / c["fedavg"]


def report(args) -> int:
    from _common import print_report

    with open(args.csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    ratio = fda_ratio()
    print(f"# {args.command}   (its last step: python benchmarks/slow_link.py report --csv benchmarks/results/slow_link.csv)")
    if args.note:
        print(f"note: {args.note}")
    table, wall_ok, comm_ok = [], [], []
    for rate in dict.fromkeys(r["rate"] for r in rows):
        mine = [r for r in rows if r["rate"] == rate]
        first = mine[0]
        probed = {int(k): v for k, v in json.loads(first["probe"]).items()}
        beta, alpha = 8 / rate_bps(rate), float(first["alpha_probe"])
        print(f"{rate}: shaping '{first['shaping']}'; probe (gloo AllReduce, median): "
              + ", ".join(f"{n:,} B {s * 1e3:.3f} ms" for n, s in sorted(probed.items()))
              + f"; model: β = 8/rate = {beta * 1e9:.3f} ns/B, α = half the 8-byte AllReduce = {alpha * 1e6:.0f} µs "
              f"(the probe's own fit: α = {float(first['alpha_fit']) * 1e6:.0f} µs, β = {float(first['beta_fit']) * 1e9:.3f} ns/B)")
        refs = {int(r["order"]): float(r["seconds"]) / int(r["steps"]) for r in mine if r["method"] == "reference"}
        for r in (r for r in mine if r["method"] != "reference"):
            o = int(r["order"])
            around = [refs[i] for i in (o - 1, o + 1) if i in refs]
            step = sum(around) / len(around) * (ratio if "linearfda" in r["method"] else 1.0)
            syncs, monitored = int(r["syncs"]), int(r["monitored"])
            model = predict(float(r["steps"]), syncs, monitored, step, alpha, beta)
            comm = comm_model(syncs, monitored, alpha, beta)
            fitted = comm_model(syncs, monitored, float(r["alpha_fit"]), float(r["beta_fit"]))
            wall, comm_meas = float(r["seconds"]), float(r["link_seconds"])
            wall_ok.append(abs(wall / model - 1) <= 0.2)
            comm_ok.append(abs(comm_meas / comm - 1) <= 0.2 if comm > 0 else None)
            table.append([rate, r["pass"], r["method"], r["steps"], syncs, monitored, f"{step * 1e3:.1f}",
                          f"{wall:.2f}", f"{model:.2f}", f"{wall / model:.2f}", f"{float(r['comm_seconds']):.3f}",
                          f"{comm_meas:.3f}", f"{comm:.3f}",
                          f"{comm_meas / comm:.2f}" if comm > 0 else "-", f"{fitted:.3f}",
                          f"{comm_meas / fitted:.2f}" if fitted > 0 else "-",
                          "yes" if wall_ok[-1] else "no"])
    print_report(f"Measured segment ({STEPS - WARMUP} steps, {WARMUP} to {STEPS}, rank 0) against the model",
                 ["rate", "pass", "method", "steps", "syncs", "monitored", "ref ms/step", "wall s", "model s",
                  "wall/model", "rank 0 in collectives s", "link s", "model comm s", "link/model", "probe-fit comm s",
                  "link/fit", "wall within 20 %"],
                 table,
                 "model: steps · step + syncs · (2α + 4d·β) + monitored · (2α + 8·β); step: the mean of the reference runs "
                 f"(no communication) just before and after, LinearFDA's × {ratio:.3f} (its own work, scaling.csv); "
                 "rank 0 in collectives: its seconds inside collective calls in the segment (waits for the peer included); "
                 "link: per call the shorter of the two ranks' times, summed, against the model's comm term; probe-fit: "
                 "the same term with the probe's least-squares α and β (what the host and the link together delivered)")
    judged = [x for x in comm_ok if x is not None]
    print(f"{sum(wall_ok)} of {len(wall_ok)} runs' wall time within 20 % of the model; "
          f"{sum(judged)} of {len(judged)} runs' link time within 20 % of the model's communication term")
    return 0


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("job", help="one rank of the job (started by measure inside its namespace)")
    j.add_argument("--rate", required=True)
    j.add_argument("--out", required=True)
    j.add_argument("--workdir", required=True)
    j.add_argument("--passes", type=int, default=2)
    j.add_argument("--repeats", type=int, default=20)
    m = sub.add_parser("measure", help="probe and train over the shaped link (run by slow_link.sh, as root)")
    m.add_argument("--rate", required=True)
    m.add_argument("--csv", required=True)
    m.add_argument("--ns", required=True, help="the two namespaces, rank 0's first")
    m.add_argument("--dev", required=True, help="each namespace's veth end")
    m.add_argument("--addr", required=True, help="rank 0's address on the veth")
    m.add_argument("--shaping", default="")
    m.add_argument("--passes", type=int, default=2)
    m.add_argument("--repeats", type=int, default=20)
    m.add_argument("--timeout", type=float, default=900, help="seconds before the job is killed (default: %(default)s)")
    r = sub.add_parser("report", help="print the comparison from the CSV")
    r.add_argument("--csv", required=True)
    r.add_argument("--command", default="benchmarks/slow_link.sh")
    r.add_argument("--note", default="")
    args = p.parse_args(argv)
    if args.cmd == "measure":
        try:
            rate_bps(args.rate)
        except ValueError as exc:
            p.error(str(exc))
        if len(args.ns.split(",")) != 2 or len(args.dev.split(",")) != 2:
            p.error("--ns and --dev: two names each, rank 0's first, e.g. --ns fdasl_a,fdasl_b")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    return {"job": job, "measure": measure, "report": report}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
