"""Exit stress: many short jobs under a CPU burner, counting the ones that did not exit cleanly.

    python benchmarks/exit_stress.py --jobs 200 --burners 2 --csv benchmarks/results/exit_stress.csv
    python benchmarks/exit_stress.py --jobs 20 --cases torchrun-torch-sync,srun-torch-sync

A case is ``LAUNCHER-BACKEND-MODE``: ``mpiexec-mpi-sync``, ``mpiexec-mpi-semiasync``,
``mpiexec-torch-sync`` (mpiexec starts the ranks, torch.distributed over gloo reduces),
``torchrun-torch-sync``, ``srun-torch-sync`` (``srun --mpi=none --kill-on-bad-exit=1``, as
``jobs/gpu_node.sbatch`` runs) and ``srun-mpi-semiasync`` (``srun --mpi=pmi2``); the srun cases
need the one-node cluster of ``jobs/slurm_cluster.sh start`` (skipped with a line when sinfo
finds none). Each job is 2 ranks of the bundled MNIST-5k and LeNet-5, a few steps (or rounds).

A job is unclean when any of these holds:
- its exit status is not 0 (the runs here all finish: a non-zero status after a finished run is
  exactly the fault that marks a cluster job FAILED);
- its output says ``terminate called``, ``core dumped``, ``Aborted`` or ``Segmentation fault``;
- its run file is missing, or its status is not ``finished``;
- it did not end within ``--timeout`` seconds.

The burner is ``--burners`` processes spinning at nice 0 (default: one per core), so that the
ranks are descheduled at random points of their teardown, the condition the faults need. Rows
are appended to ``--csv`` as jobs end; ``--resume`` counts what is there and runs the rest.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from _common import REPO_ROOT, child_env

CASES = ("mpiexec-mpi-sync", "mpiexec-mpi-semiasync", "mpiexec-torch-sync", "torchrun-torch-sync",
         "srun-torch-sync", "srun-mpi-semiasync")
SYNC = ["--dataset", "mnist5k", "--model", "lenet5", "--strategy", "linearfda", "--max-steps", "12",
        "--eval-every", "6", "--batch-size", "16"]
SEMI = ["--mode", "semiasync", "--dataset", "mnist5k", "--model", "lenet5", "--strategy", "fedbuff", "--clients", "4",
        "--buffer", "2", "--rounds", "4", "--tau", "2", "--speed-ratio", "3", "--batch-size", "16"]
BAD_OUTPUT = re.compile(r"terminate called|core dumped|Aborted|Segmentation fault", re.IGNORECASE)
FIELDS = ("case", "job", "exit", "seconds", "status", "verdict", "why")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _burn() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # terminate() ends a burner quietly
    while True:
        pass


def command(case: str, out: str, port: int) -> list[str]:
    launcher, backend, mode = case.split("-")
    train = ["-m", "fdahpc.train", *(SEMI if mode == "semiasync" else SYNC), "--backend", backend,
             "--log-every", "1000", "--out", out]
    if launcher == "mpiexec":
        return ["mpiexec", "-n", "2", sys.executable, *train]
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port), *train]
    plugin = "pmi2" if backend == "mpi" else "none"
    return ["srun", f"--mpi={plugin}", "--kill-on-bad-exit=1", "-N1", "-n2", "--time=5", sys.executable, *train]


def run_file_status(path: str) -> str:
    if not os.path.exists(path):
        return "missing"
    try:
        import h5py

        with h5py.File(path, "r") as f:
            return str(f.attrs.get("status", "none"))
    except OSError as exc:
        return f"unreadable ({exc})"


def one_job(case: str, job: int, scratch: str, timeout: float) -> dict:
    out = os.path.join(scratch, f"{case}-{job}.h5")
    cmd = command(case, out, 29400 + job % 500)
    env = child_env()
    env.update(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        code, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, text = "timeout", str(exc.stdout or "") + str(exc.stderr or "")
    seconds = time.perf_counter() - start
    status = run_file_status(out)
    reasons = []
    if code != 0:
        reasons.append(f"exit {code}")
    bad = BAD_OUTPUT.search(text)
    if bad:
        reasons.append(f"output: {bad.group(0)}")
    if status != "finished":
        reasons.append(f"run file {status}")
    if reasons:  # keep the evidence beside the CSV row
        with open(os.path.join(scratch, f"{case}-{job}.log"), "w") as f:
            f.write(f"$ {' '.join(cmd)}\n{text}")
    if os.path.exists(out):
        os.remove(out)
    return dict(case=case, job=job, exit=code, seconds=f"{seconds:.1f}", status=status,
                verdict="unclean" if reasons else "clean", why="; ".join(reasons))


def slurm_up() -> str | None:
    """None when a SLURM node answers, else why not."""
    if shutil.which("srun") is None:
        return "srun not found (jobs/slurm_cluster.sh start installs and starts a one-node cluster)"
    try:
        idle = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo failed ({exc})"
    return None if re.search(r"idle|mix|alloc", idle) else "no SLURM node up (sudo jobs/slurm_cluster.sh start)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=200, help="jobs per case")
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    p.add_argument("--burners", type=int, default=os.cpu_count() or 2, help="CPU-burning processes beside the jobs")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds one job may take")
    p.add_argument("--csv", default=None, help="append one row per job here")
    p.add_argument("--resume", action="store_true", help="count the rows already in --csv and run only the rest")
    p.add_argument("--keep", default=None, help="folder for the logs of unclean jobs (default: a temporary one)")
    a = p.parse_args(argv)
    cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown or a.jobs < 1:
        print(f"exit_stress.py: error: {'unknown case ' + ', '.join(unknown) if unknown else '--jobs must be >= 1'}; "
              f"choose from {', '.join(CASES)}", file=sys.stderr)
        return 2
    done: dict[str, list[dict]] = {c: [] for c in cases}
    if a.resume and a.csv and os.path.exists(a.csv):
        with open(a.csv) as f:
            for row in csv.DictReader(f):
                if row["case"] in done:
                    done[row["case"]].append(row)
    why_not = slurm_up() if any(c.startswith("srun") for c in cases) else None
    scratch = a.keep or tempfile.mkdtemp(prefix="exit_stress-")
    os.makedirs(scratch, exist_ok=True)
    print(f"# {' '.join([os.path.basename(sys.argv[0]), *(argv if argv is not None else sys.argv[1:])])}")
    print(f"# {a.burners} burner(s) on {os.cpu_count()} cores; logs of unclean jobs in {scratch}", flush=True)
    # A SIGTERM (a run stopped by hand or by a time limit) ends the burners too, then the table.
    signal.signal(signal.SIGTERM, _interrupt)
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(a.burners)]
    for b in burners:
        b.start()
    writer = None
    if a.csv:
        os.makedirs(os.path.dirname(os.path.abspath(a.csv)), exist_ok=True)
        new = not os.path.exists(a.csv) or not a.resume
        handle = open(a.csv, "w" if new else "a", newline="")
        writer = csv.DictWriter(handle, FIELDS)
        if new:
            writer.writeheader()
    runnable = [c for c in cases if not (c.startswith("srun") and why_not)]
    for case in sorted(set(cases) - set(runnable)):
        print(f"{case}: skipped: {why_not}", flush=True)
    try:
        # Round-robin over the cases, so that a run cut short has measured each of them alike.
        for job, case in ((j, c) for j in range(a.jobs) for c in runnable):
            if job < len(done[case]):
                continue
            row = one_job(case, job, scratch, a.timeout)
            done[case].append(row)
            if writer:
                writer.writerow(row)
                handle.flush()
            if row["verdict"] != "clean":
                print(f"{case} job {job}: {row['why']}", flush=True)
    except KeyboardInterrupt:
        print("stopped; --resume carries on", flush=True)
    finally:
        for b in burners:
            b.terminate()
    print(f"\n{'case':<24} {'jobs':>5} {'unclean':>8} {'median s':>9}  reasons")
    for case in cases:
        rows = done[case]
        if not rows:
            continue
        bad = [r for r in rows if r["verdict"] != "clean"]
        secs = sorted(float(r["seconds"]) for r in rows)
        reasons = sorted({r["why"] for r in bad})
        print(f"{case:<24} {len(rows):>5} {len(bad):>8} {secs[len(secs) // 2]:>9.1f}  {' | '.join(reasons)[:200]}")
    # The goal counts per launcher: its cases together.
    for launcher in dict.fromkeys(c.split("-")[0] for c in cases):
        rows = [r for c in cases if c.startswith(launcher + "-") for r in done[c]]
        if rows:
            bad = sum(r["verdict"] != "clean" for r in rows)
            print(f"{'launcher ' + launcher:<24} {len(rows):>5} {bad:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
