"""``--theta-calibrate variance`` (the default) against ``estimate`` on LeNet-5, over seeds.

``--theta auto`` re-calibrates Θ after every sync from the round that just ended: on the
variance the sync measured (default) or on the trigger's own estimate that ended the round.
The estimate calibration made the GPT's rounds last about H and met all 14 of its
comm-bound rows (docs/theta_auto.md); this checks it on two LeNet-5 settings of the
frontier, K = 4 on FashionMNIST, on the 1 Gb/s / 10 ms link with 5 ms steps (H = m = 86):

- iid, SGD preset, to 88 % (at most 15 epochs);
- Dirichlet 0.1, Adam at 0.001, to 70 % (at most 6 epochs).

Per run: steps and syncs to the target (evaluated every 100 steps, so steps move in
hundreds or at an epoch's end); then the medians over the seeds. On that link a sync costs
about H/10 = 8.6 steps of compute, so a 100-step difference outweighs up to 11 syncs.
Finished runs are reused (``--workdir``); run from the repository root:

    python benchmarks/theta_calibrate.py [--seeds 0,1,2,3,4] [--workdir runs/theta-calibrate]
"""

from __future__ import annotations

import argparse
import os
import statistics

from _common import REPO_ROOT, print_report, read_run, run_train

SETTINGS = {
    "iid, SGD, 88 %": ["--partition", "iid", "--target-accuracy", "0.88", "--epochs", "15"],
    "Dirichlet 0.1, Adam, 70 %": ["--partition", "dirichlet:0.1", "--optimizer", "adam", "--lr", "0.001",
                                  "--target-accuracy", "0.7", "--epochs", "6"],
}
COMMON = ["--dataset", "fashion-mnist", "--model", "lenet5", "--strategy", "linearfda", "--theta", "auto",
          "--theta-fabric", "1,10000,5", "--eval-every", "100"]
CALIBRATIONS = ("variance", "estimate")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--workdir", default=os.path.join(REPO_ROOT, "runs", "theta-calibrate"))
    p.add_argument("--timeout", type=float, default=1800)
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    os.makedirs(args.workdir, exist_ok=True)
    rows = []
    for label, flags in SETTINGS.items():
        tag = label.split(",")[0].replace(" ", "").lower()
        for cal in CALIBRATIONS:
            got = []
            for seed in seeds:
                out = os.path.join(args.workdir, f"{tag}-{cal}-seed{seed}.h5")
                run = read_run(out) if os.path.exists(out) else {}
                if run.get("status") != "finished":
                    run = run_train(args.ranks, [*COMMON, *flags, "--theta-calibrate", cal, "--seed", str(seed)], out,
                                    args.timeout)
                reached = int(run["steps_to_target"]) >= 0
                got.append((int(run["steps_to_target"]) if reached else None, int(run["syncs"])))
            steps = [s for s, _ in got]
            done = [s for s in steps if s is not None]
            rows.append([label, cal, " ".join("-" if s is None else str(s) for s in steps),
                         " ".join(str(n) for _, n in got),
                         f"{statistics.median(done):.0f}" if len(done) == len(steps) else "not all reached",
                         f"{statistics.median(n for _, n in got):.0f}"])
    print_report(f"# python benchmarks/theta_calibrate.py --seeds {args.seeds}   (LeNet-5, K = {args.ranks}, "
                 "--theta auto --theta-fabric 1,10000,5)",
                 ["setting", "calibration", "steps to target, per seed", "syncs, per seed", "median steps",
                  "median syncs"], rows,
                 "steps: to the target, evaluated every 100 steps; syncs: model AllReduces until then (the run "
                 "stops at the target).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
