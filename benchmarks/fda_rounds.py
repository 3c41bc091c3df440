"""What an FDA run's rounds looked like: length, exact variance and the trigger's estimate.

    python benchmarks/fda_rounds.py --ranks 4 --out runs/fda_rounds/auto-iid4.h5 \
        --train "--strategy linearfda --theta auto --model lenet5 --partition iid --epochs 15 --target-accuracy 0.9"
    python benchmarks/fda_rounds.py runs/fda_rounds/auto-iid4.h5       # a run file made before

With ``--train`` it runs ``fdahpc.train`` on ``--ranks`` ranks with those flags and
``--log-variance`` (one extra full AllReduce a step, counted as evaluation: the run's
training bytes are unchanged) unless ``--out`` exists already. For every run file it prints
one line per round: its first and last step, its length, and at its last monitored step the
trigger's estimate H, the exact model variance Var (``--log-variance`` runs) and H/Var; for
``--theta auto`` the calibrated Θ and the calibration round's length; for a run that ended
inside a round, that round's H. This is how ``--theta auto`` was diagnosed (docs/results.md,
"Why --theta auto-once misses the 1.5× bar"; ``benchmarks/results/fda_rounds.txt``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

import numpy as np

import _common  # noqa: F401
from _common import print_table, read_run, run_train


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="*", help="run files (the Var column only for runs made with --log-variance)")
    p.add_argument("--train", help="fdahpc.train flags of a run to make first (with --out and --ranks)")
    p.add_argument("--out", help="the run file --train writes (kept: an existing one is read, not rerun)")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--timeout", type=float, default=3600)
    args = p.parse_args(argv)
    if bool(args.train) != bool(args.out):
        p.error("--train and --out go together: --train FLAGS --out RUN.h5")
    if not args.runs and not args.train:
        p.error("give run files, or --train FLAGS --out RUN.h5")
    return args


def rounds(run: dict) -> list[dict]:
    """One entry per round: those that ended in a synchronization and, where the run ended
    inside a round, that one (``synced`` False). For a monitored round also the trigger's
    estimate H at its last monitored step and the round's largest H, and with the run's
    variance series (``--log-variance``) the exact variance Var there."""
    syncs = np.asarray(run.get("sync/step", []), dtype=np.int64)
    step, h = np.asarray(run.get("fda/step", [])), np.asarray(run.get("fda/h", []))
    var = np.asarray(run["fda/variance"]) if "fda/variance" in run else None  # only with --log-variance
    ends = [(int(e), True) for e in syncs]
    if len(step) and step[-1] > (ends[-1][0] if ends else 0):
        ends.append((int(step[-1]), False))
    out, start = [], 0
    for end, synced in ends:
        inside = (step > start) & (step <= end)
        row = dict(first=start + 1, last=end, length=end - start, synced=synced)
        if inside.any():
            k = np.flatnonzero(inside)[-1]
            row.update(step=int(step[k]), h=float(h[k]), h_max=float(h[inside].max()),
                       **({"var": float(var[k])} if var is not None else {}))
        out.append(row)
        start = end
    return out


def report(path: str) -> None:
    run = read_run(path)
    print(f"{path}")
    if "fda_auto/calibration_steps" in run:
        print(f"--theta auto-once: Θ = {float(run['fda_auto/theta'][0]):.4g} after a calibration round of "
              f"{int(run['fda_auto/calibration_steps'][0])} steps")
    elif "fda_auto/theta" in run:  # --theta auto: one re-calibration per synchronization
        print("--theta auto: Θ after each round (round steps, exact variance at its sync): " + ", ".join(
            f"{float(t):.4g} ({int(n)}, {float(v):.4g})" for t, n, v in
            zip(run["fda_auto/theta"], run["fda_auto/round_steps"], run["fda_auto/variance"])))
    done = rounds(run)
    synced = [r for r in done if r["synced"]]
    rows = [[r["first"], r["last"], r["length"], f"{r['h']:.4g}" if "h" in r else "",
             f"{r['var']:.4g}" if "var" in r else "", f"{r['h'] / r['var']:.2f}" if r.get("var", 0) > 0 else ""]
            for r in synced]
    print_table(["first step", "last step", "length", "H at its end", "Var at its end", "H / Var"], rows)
    for r in done[len(synced):]:  # the run ended inside this round
        print(f"unfinished last round: steps {r['first']}-{r['last']} ({r['length']}), "
              f"H at the run's end {r['h']:.4g}, its largest {r['h_max']:.4g}")
    acc = run.get("eval/accuracy")
    print(f"final accuracy {float(acc[-1]):.4f}, {len(synced)} synchronizations\n" if acc is not None and len(acc) else "")


def main(argv=None) -> int:
    args = parse(argv)
    paths = list(args.runs)
    if args.train:
        if not os.path.exists(args.out):
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            run_train(args.ranks, [*shlex.split(args.train), "--log-variance"], args.out, args.timeout)
        paths.insert(0, args.out)
    for path in paths:
        report(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
