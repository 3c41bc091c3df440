"""Where fdahpc's start-up goes: peers.py's fdahpc run (semi-async FedAvg, N clients) phase by phase.

    python benchmarks/startup_profile.py                        # N = 1000, 3 rounds, 3 repeats
    python benchmarks/startup_profile.py --clients 1000 --repeats 1

``peers.py`` reports start-up as launch to the end of round 1, less one round (the median
gap between round lines). This script runs the same command (``peers.commands``: 3 MPI
ranks, rank 0 serves, two hosts train, scoring after every round) and splits that time:

- the CPU seconds of ``mpiexec -n 3 python -c pass`` (launcher and interpreters), of
  ``import torch`` beyond that, and of ``import fdahpc.train, fdahpc.semiasync.mode`` beyond
  torch (NumPy, h5py, mpi4py and fdahpc's own modules), 3 processes each;
- a timeline of the run itself, each rank started through this script's ``--timeline``
  worker, which times named steps of fdahpc's setup and first round (the functions where
  ``fdahpc.semiasync.mode`` and the client host look them up are wrapped with a wall clock
  and the process's CPU clock; nothing else changes) and then calls ``fdahpc.train.main``.
  Times are seconds since the launch of each phase's first call on each rank, its wall
  time over the run, and its CPU time over the run. "Round 1's training" is the time from
  the moment every rank agreed on setup to the server's first scoring.

Ratios and shares, not absolute claims: the machine is shared (``others' CPU`` says how
much of it other processes held). On a loaded machine a phase's wall time is several times
its CPU time (3 ranks and the others' processes share 2 cores); the CPU column is what the
phase costs wherever it runs. Medians over ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

T0_ENV, OUT_ENV = "FDAHPC_STARTUP_T0", "FDAHPC_STARTUP_OUT"
RUN, SCORE = "run (after every rank agreed on setup)", "  server: score the 10 000 test images"


# ----------------------------------------------------------------------------- the per-rank worker
def timeline_worker(argv: list[str]) -> int:
    """One rank: wrap the named steps with a wall clock and this process's CPU clock, run
    ``fdahpc.train.main(argv)``, write ``{phase: [first start, first end, total wall, calls,
    total CPU]}`` (times since the launch; the CPU clock counts this process alone, so it
    holds still while others hold the cores)."""
    t0, began = float(os.environ[T0_ENV]), time.time()
    marks: dict[str, list[float]] = {}

    def note(name: str, start: float, end: float, cpu: float) -> None:
        m = marks.setdefault(name, [start - t0, end - t0, 0.0, 0, 0.0])
        m[2] += end - start
        m[3] += 1
        m[4] += cpu

    def timed(owner, attr: str, name: str) -> None:
        fn = getattr(owner, attr)

        def wrapper(*args, **kwargs):
            start, cpu = time.time(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                note(name, start, time.time(), time.process_time() - cpu)

        setattr(owner, attr, wrapper)

    note("interpreter up", began, began, time.process_time())  # CPU: the interpreter's start
    cpu = time.process_time()
    import fdahpc.train as train  # noqa: E402  (timed: this is the import being measured)

    note("import fdahpc.train (torch, numpy, h5py, mpi4py, fdahpc)", began, time.time(), time.process_time() - cpu)
    start, cpu = time.time(), time.process_time()
    import fdahpc.semiasync.client as client
    import fdahpc.semiasync.mode as mode
    import fdahpc.semiasync.server as server
    from fdahpc import run

    note("import the semi-async mode", start, time.time(), time.process_time() - cpu)
    for owner, attr, name in (
            (train, "parse_args", "parse the flags"),
            (train, "make_communicator", "MPI communicator"),
            (run, "build", "setup: run file name, data, model, role (build)"),
            (mode, "load_data", "  data: read FashionMNIST, partition, select rows"),
            (mode, "partition", "    partition into N clients"),
            (mode, "new_model", "  model build"),
            (mode, "_split", "  host: per-client batch streams"),
            (mode.Server, "__init__", "  server: Server()"),
            (mode.Host, "__init__", "  host: Host()"),
            (run, "run", RUN),
            (mode.SemiAsyncJob, "fresh", "  initial model from rank 0"),
            (run, "open_run_file", "  open the run file"),
            # a client job's optimizer (before JobSGD: torch.optim's, whose first use imports torch._dynamo)
            (client, "make_job_optimizer" if hasattr(client, "make_job_optimizer") else "make_optimizer",
             "  host: a job's optimizer"),
            (client, "local_steps", "  host: a job's local steps"),
            (client.Host, "_run_job", "  host: one client's job"),
            (server, "score", SCORE)):
        timed(owner, attr, name)
    try:
        return train.main(argv)
    finally:
        with open(os.path.join(os.environ[OUT_ENV], f"rank{os.environ.get('PMI_RANK', '0')}.json"), "w") as f:
            json.dump(marks, f)


# ----------------------------------------------------------------------------- the driver
def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3, help="rounds of the run (>= 3: start-up less one round needs a gap)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", help="passed to the run (e.g. a folder of decompressed IDX files, which fdahpc "
                                      "memory-maps instead of decompressing the .gz files on every host)")
    args = p.parse_args(argv)
    if args.clients < 10 or args.rounds < 3 or args.repeats < 1:
        p.exit(2, "startup_profile.py: --clients must be >= 10, --rounds >= 3 and --repeats >= 1, e.g. --clients 1000 "
                  "--rounds 3 --repeats 3\n")
    return args


def cpu_of(cmd: list[str]) -> float:
    """CPU seconds of ``cmd`` and every process under it (each waited for by its parent:
    mpiexec's ranks too), steadier than its wall time on a shared machine."""
    import resource

    from _common import REPO_ROOT, child_env

    def used() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    start = used()
    subprocess.run(cmd, env=child_env(), cwd=REPO_ROOT, check=True, timeout=600, capture_output=True)
    return used() - start


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--timeline":
        return timeline_worker(sys.argv[2:])
    args = parse(argv)
    import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)

    print(f"# N = {args.clients}, {args.rounds} rounds, peers.py's fdahpc command (mpiexec -n 3, scoring every round), "
          f"{args.repeats} repeats (medians); seconds since the launch"
          + (f"; --data-dir {args.data_dir}" if args.data_dir else ""), flush=True)
    report(args)
    return 0


def report(args) -> None:
    """The repeats, then the table."""
    import peers
    from _common import CpuMeter, print_report

    py = sys.executable
    rows: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    summary: dict[str, list[float]] = {k: [] for k in ("launch", "torch", "fdahpc", "startup", "per_round", "round1",
                                                       "others", "jobs")}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            meter = CpuMeter()
            launch = cpu_of(["mpiexec", "-n", "3", py, "-c", "pass"])
            torch_s = cpu_of(["mpiexec", "-n", "3", py, "-c", "import torch"]) - launch
            imports = cpu_of(["mpiexec", "-n", "3", py, "-c", "import fdahpc.train, fdahpc.semiasync.mode"]) - launch
            out = os.path.join(tmp, f"run{rep}.h5")
            cmd = peers.commands(argparse.Namespace(rounds=args.rounds, seed=args.seed, flower_python=py,
                                                    flower_app="module"), args.clients, out, 1)["fdahpc"]
            i = cmd.index("-m")  # python -m fdahpc.train ... -> python startup_profile.py --timeline ...
            cmd[i:i + 2] = [os.path.abspath(__file__), "--timeline"]
            cmd += ["--data-dir", args.data_dir] if args.data_dir else []
            marks = os.path.join(tmp, f"marks{rep}")
            os.makedirs(marks)
            t0 = time.time()
            r = peers.measure(cmd, args.rounds, env={T0_ENV: repr(t0), OUT_ENV: marks})
            summary["launch"].append(launch)
            summary["torch"].append(torch_s)
            summary["fdahpc"].append(imports - torch_s)
            summary["startup"].append(r["startup"])
            summary["per_round"].append(r["per_round"])
            summary["round1"].append(r["startup"] + r["per_round"])
            summary["others"].append(meter.foreign_share())
            ranks = []
            for rank in range(3):
                with open(os.path.join(marks, f"rank{rank}.json")) as f:
                    ranks.append(json.load(f))
                for name, (first, end, total, calls, cpu) in ranks[-1].items():
                    rows.setdefault((name, "server" if rank == 0 else f"host {rank}"), []).append((first, end, total, cpu))
            # round 1's training: from the moment every rank agreed on setup to the server's first scoring
            summary["jobs"].append(ranks[0][SCORE][0] - ranks[0][RUN][0])
            print(f"repeat {rep}: start-up {r['startup']:.2f} s, round {r['per_round']:.2f} s, round 1's training "
                  f"{summary['jobs'][-1]:.2f} s (others used {summary['others'][-1]:.0%} of the cores)", file=sys.stderr,
                  flush=True)
    med = {k: statistics.median(v) for k, v in summary.items()}
    table = []
    for (name, who), v in sorted(rows.items(), key=lambda kv: (statistics.median(x[0] for x in kv[1]), kv[0][1])):
        first, end, total, cpu = (statistics.median(x[i] for x in v) for i in range(4))
        table.append([name, who, f"{first:.2f}", f"{end:.2f}", f"{total:.2f}", f"{total / med['round1']:.0%}",
                      f"{cpu:.2f}"])
    print_report(f"fdahpc start-up, N = {args.clients}: start-up {med['startup']:.2f} s (launch to the end of round 1, "
                 f"{med['round1']:.2f} s, less one round, {med['per_round']:.2f} s); round 1's training (setup agreed "
                 f"to the server's first scoring) {med['jobs']:.2f} s; CPU s of 3 processes: mpiexec -n 3 python -c pass "
                 f"{med['launch']:.2f}, import torch {med['torch']:.2f} more, fdahpc's imports {med['fdahpc']:.2f} more; "
                 f"others' CPU {med['others']:.0%}",
                 ["phase", "rank", "first starts", "first ends", "total s", "/ round 1", "CPU s"], table,
                 "first starts/ends: seconds since the launch of the phase's first call on that rank; total s: all its "
                 "calls over the run (a host's jobs and the server's scorings run every round); / round 1: total over "
                 "launch to the end of round 1; CPU s: this rank's CPU time in all its calls (for 'interpreter up': "
                 "the interpreter's own start), steadier than wall time on a shared machine. Indented phases lie "
                 "inside the one above.")


if __name__ == "__main__":
    sys.exit(main())
