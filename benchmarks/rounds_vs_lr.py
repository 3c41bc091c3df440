"""Do a method's rounds lengthen as the learning rate falls? Syncs per window against the rate.

    python benchmarks/rounds_vs_lr.py RUN.h5 [RUN.h5 ...] [--window 100] [--out benchmarks/results/rounds_vs_lr]

For each run file (``python -m fdahpc.train`` with ``--lr-schedule``): the run cut into
windows of ``--window`` local steps; per window the local learning rate at its middle (the
run file's ``eval/lr``, the rate of each evaluated step, read at the evaluation nearest the
window's middle) and the model synchronizations in it (``sync/step``; the run's closing sync
at its last step, ``final_sync``, left out: it hands back the model, it is not a round's end).
Printed: one table per run, and a last line per run: syncs per window in the first and the
last third of the run, with the rate there (a method whose rounds lengthen as the rate falls
has fewer syncs in the last third). Written: ``--out``.txt (the printed report, headed by this
command) when ``--out`` is given.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from _common import REPO_ROOT, read_run


def windows(run: dict, width: int) -> list[tuple[int, int, float, int]]:
    """(first step, last step, rate at the middle, syncs) per window of ``width`` steps."""
    steps = int(run["steps"])
    syncs = np.asarray(run.get("sync/step", []), dtype=np.int64)
    if int(run.get("final_sync", 0)) and len(syncs) and syncs[-1] == steps:
        syncs = syncs[:-1]
    at, lr = np.asarray(run["eval/step"]), np.asarray(run["eval/lr"])
    out = []
    for first in range(1, steps + 1, width):
        last = min(steps, first + width - 1)
        middle = (first + last) / 2
        out.append((first, last, float(lr[np.argmin(np.abs(at - middle))]),
                    int(((syncs >= first) & (syncs <= last)).sum())))
    return out


def thirds(rows: list[tuple[int, int, float, int]]) -> str:
    """Syncs per window and the rate in the first and the last third of the windows."""
    n = max(1, len(rows) // 3)
    first, last = rows[:n], rows[-n:]
    mean = lambda part, i: float(np.mean([r[i] for r in part]))  # noqa: E731
    return (f"first third: {mean(first, 3):.2f} syncs/window at lr {mean(first, 2):.2e}; last third: "
            f"{mean(last, 3):.2f} at lr {mean(last, 2):.2e}")


def main(argv=None) -> int:
    # usage suppressed: a bad argument is one line on stderr, exit 2
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage=argparse.SUPPRESS)
    p.add_argument("runs", nargs="+", help="run files of python -m fdahpc.train with --lr-schedule")
    p.add_argument("--window", type=int, default=100, help="steps per window (default 100)")
    p.add_argument("--out", help="also write the report to OUT.txt")
    args = p.parse_args(argv)
    if args.window < 1:
        p.error(f"--window {args.window}: must be >= 1 step, e.g. 100")
    lines = [f"# python benchmarks/rounds_vs_lr.py {' '.join(argv if argv is not None else sys.argv[1:])}"]
    for path in args.runs:
        try:
            run = read_run(path)
        except (OSError, RuntimeError) as exc:
            p.error(f"{path}: {exc}; give a finished run file")
        if "eval/lr" not in run:
            p.error(f"{path}: has no eval/lr series (written before --lr-schedule existed); rerun it")
        rows = windows(run, args.window)
        lines.append(f"\n{os.path.relpath(path, REPO_ROOT)} ({run['strategy']}, {int(run['steps'])} steps, "
                     f"{int(run['syncs'])} syncs)")
        lines.append(f"{'steps':>13}  {'lr':>9}  syncs")
        lines += [f"{a:>6}-{b:<6}  {lr:9.2e}  {n:5d}" for a, b, lr, n in rows]
        lines.append(thirds(rows))
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out + ".txt", "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
