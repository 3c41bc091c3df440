"""Helpers shared by the MPI benchmarks: launching jobs, reading run files, printing tables.

The benchmarks are scripts (``python benchmarks/NAME.py``), so Python puts ``benchmarks/``
on ``sys.path``, not the repository root; when fdahpc is not installed we add the root
here, once, so the scripts run from a plain checkout. Child processes get it through
``PYTHONPATH``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:
    import fdahpc  # noqa: F401
except ImportError:  # a plain checkout: import the package from the repository root
    sys.path.insert(0, REPO_ROOT)

__all__ = ["REPO_ROOT", "child_env", "launched_by_mpi", "median", "mpiexec", "print_table", "read_run", "run_train"]


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
            out[key] = value.item() if hasattr(value, "item") else value

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
