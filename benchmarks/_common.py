"""Helpers shared by the MPI benchmarks: launching jobs, reading run files, printing tables.

The benchmarks are scripts (``python benchmarks/NAME.py``), so Python puts ``benchmarks/``
on ``sys.path``, not the repository root; when fdahpc is not installed we add the root
here, once, so the scripts run from a plain checkout. Child processes get it through
``PYTHONPATH``.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: where every committed output of a benchmark lives (CSVs, reports, figures): benchmarks/ itself holds
#: only the scripts, so a default output path is always under here
RESULTS = os.path.join(REPO_ROOT, "benchmarks", "results")

try:
    import fdahpc  # noqa: F401
except ImportError:  # a plain checkout: import the package from the repository root
    sys.path.insert(0, REPO_ROOT)

__all__ = ["REPO_ROOT", "RESULTS", "CpuMeter", "alternated_cpu_medians", "child_env", "launched_by_mpi", "median", "mpiexec",
           "print_report", "print_table", "read_run", "run_train", "wait_for_quiet"]


def launched_by_mpi() -> bool:
    from fdahpc.comm import launched_by_mpi as _launched

    return _launched()


def child_env() -> dict:
    """The environment for ``mpiexec`` children: fdahpc importable, one thread per rank."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def mpiexec(ranks: int, args: list[str], timeout: float, *, capture: bool = True) -> subprocess.CompletedProcess:
    """``mpiexec -n RANKS ARGS`` with a timeout (a hang is a failure, never a wait).

    ``subprocess.run`` kills only mpiexec on timeout; Hydra then tears down its ranks.
    """
    cmd = ["mpiexec", "-n", str(ranks), *args]
    return subprocess.run(cmd, env=child_env(), cwd=REPO_ROOT, timeout=timeout, text=True,
                          stdout=subprocess.PIPE if capture else None, stderr=subprocess.STDOUT if capture else None)


def run_train(ranks: int, flags: list[str], out: str, timeout: float) -> dict:
    """One ``python -m fdahpc.train`` MPI job writing ``out``; returns its run-file attributes.

    Raises ``RuntimeError`` with the job's last output lines when it fails or times out.
    """
    if os.path.exists(out):
        os.remove(out)
    args = [sys.executable, "-m", "fdahpc.train", *flags, "--log-every", "1000000", "--out", out]
    try:
        proc = mpiexec(ranks, args, timeout)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"timed out after {timeout:.0f} s: mpiexec -n {ranks} {' '.join(args[1:])}") from exc
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
        raise RuntimeError(f"exit {proc.returncode}: mpiexec -n {ranks} {' '.join(args[1:])}\n{tail}")
    return read_run(out)


def read_run(path: str) -> dict:
    """Root attributes of a run file plus its 1-D datasets (``eval/accuracy`` ...) as arrays."""
    import h5py

    out = {}
    with h5py.File(path, "r") as f:
        for key, value in f.attrs.items():
            out[key] = value.item() if getattr(value, "size", 0) == 1 else value

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]

        f.visititems(visit)
    if "wall_seconds" not in out:
        raise RuntimeError(f"{path}: no wall_seconds attribute; the run did not finish")
    return out


def median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def alternated_cpu_medians(cases: dict, repeats: int) -> dict:
    """``{case: (fn, fn, ...)}`` -> ``{case: (median CPU seconds of each fn, ...)}``: each fn
    called once to warm up, then the case's fns in turn ``repeats`` times, so drift in the
    machine's speed falls on all of them alike; process CPU time, so other load does not
    count (caches are still shared: say so beside the figures)."""
    out = {}
    for case, fns in cases.items():
        for fn in fns:
            fn()
        times = [[] for _ in fns]
        for _ in range(repeats):
            for k, fn in enumerate(fns):
                t0 = time.process_time()
                fn()
                times[k].append(time.process_time() - t0)
        out[case] = tuple(statistics.median(t) for t in times)
    return out


def print_table(header: list[str], rows: list[list], file=None) -> None:
    """A plain, aligned text table (numbers already formatted by the caller)."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "  ".join(c.rjust(w) for c, w in zip(r, widths))  # noqa: E731
    print(line(cells[0]), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for r in cells[1:]:
        print(line(r), file=file)
    sys.stdout.flush()


def print_report(title: str, header: list[str], rows: list[list], legend: str) -> None:
    """A benchmark's result: a title line, the table, then the legend explaining its columns."""
    print(title)
    print_table(header, rows)
    print(legend, flush=True)


# Noise on a shared machine ------------------------------------------------------------


def _busy_seconds() -> float:
    """CPU seconds the whole machine spent busy since boot (all cores, /proc/stat)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    guest = sum(fields[8:10]) if len(fields) > 9 else 0  # already inside user/nice
    return (sum(fields) - idle - guest) / os.sysconf("SC_CLK_TCK")


def _own_seconds(who: int) -> float:
    ru = resource.getrusage(who)
    return ru.ru_utime + ru.ru_stime


class CpuMeter:
    """What share of the machine *other* processes used while we measured.

    Machine busy time (/proc/stat) minus the CPU time of this process and of the children
    it has waited for (an ``mpiexec`` job and its ranks), over cores x wall time. On Linux
    only; elsewhere ``foreign_share`` is NaN.
    """

    def __init__(self, include_children: bool = True) -> None:
        self.children = include_children
        self.cores = os.cpu_count() or 1
        self.start()

    def _now(self):
        own = _own_seconds(resource.RUSAGE_SELF)
        if self.children:
            own += _own_seconds(resource.RUSAGE_CHILDREN)
        try:
            busy = _busy_seconds()
        except (OSError, ValueError, IndexError):
            busy = float("nan")
        return time.perf_counter(), busy, own

    def start(self) -> None:
        self._t0 = self._now()

    def foreign_share(self, own_extra: float = 0.0) -> float:
        """Others' CPU / (cores x wall) since ``start``; ``own_extra`` adds CPU time of ours
        this process cannot see (e.g. the other MPI ranks, summed by the caller)."""
        t1, busy1, own1 = self._now()
        t0, busy0, own0 = self._t0
        wall = t1 - t0
        if wall <= 0:
            return float("nan")
        foreign = (busy1 - busy0) - (own1 - own0) - own_extra
        return max(0.0, foreign) / (self.cores * wall)


def runnable_others() -> int:
    """Runnable tasks on the machine right now, not counting the one reading (/proc/loadavg)."""
    try:
        with open("/proc/loadavg") as fh:
            return int(fh.read().split()[3].split("/")[0]) - 1
    except (OSError, ValueError, IndexError):
        return 0


def wait_for_quiet(max_wait: float, max_runnable: int = 0, settle: float = 2.0) -> float:
    """Wait up to ``max_wait`` s until at most ``max_runnable`` other tasks stay runnable for
    ``settle`` s (sampled every 0.25 s); returns the seconds waited. Never waits forever:
    a busy shared machine is reported by :class:`CpuMeter`, not hidden."""
    t0 = time.perf_counter()
    quiet_since = None
    while time.perf_counter() - t0 < max_wait:
        if runnable_others() <= max_runnable:
            quiet_since = quiet_since or time.perf_counter()
            if time.perf_counter() - quiet_since >= settle:
                break
        else:
            quiet_since = None
        time.sleep(0.25)
    return time.perf_counter() - t0
