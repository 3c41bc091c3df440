"""Page faults of a training step and of an evaluation, with glibc's defaults and with
``fdahpc.heap.keep_freed_memory`` (what ``python -m fdahpc.train`` calls at start).

    python benchmarks/heap.py                 # -> stdout; the committed copy: benchmarks/results/heap.txt
    python benchmarks/heap.py --repeats 5 --steps 300

Each measurement is a fresh one-thread process (glibc reads its settings once): LeNet-5-BN
on random 28x28 images, ``--steps`` SGD steps at batch 50, or ``fdahpc.evaluate.score`` on
10,000 images (batches of 1,000) three times, after a warm-up. The two settings alternate,
``--repeats`` times each, and the report gives medians and the ratios of the medians
(times on a shared machine are noisy; the fault counts are not).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import _common  # noqa: F401
from _common import REPO_ROOT, median, print_report

PROBE = r"""
import json, resource, sys, time, torch
torch.set_num_threads(1)
from fdahpc.heap import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "kept" else False
from fdahpc.evaluate import score
from fdahpc.models import build_model
torch.manual_seed(0)
model = build_model("lenet5bn", 1, 28, 10)
if sys.argv[2] == "train":
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(50, 1, 28, 28), torch.randint(0, 10, (50,))
    def work(n):
        for _ in range(n):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    warm, n = 20, int(sys.argv[3])
else:
    x, y = torch.randn(10000, 1, 28, 28), torch.randint(0, 10, (10000,))
    def work(n):
        for _ in range(n):
            score(model, x, y)
    warm, n = 1, 3
work(warm)
r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
work(n)
r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
print(json.dumps(dict(kept=kept, faults=r1.ru_minflt - r0.ru_minflt, user=r1.ru_utime - r0.ru_utime,
                      sys=r1.ru_stime - r0.ru_stime, wall=t1 - t0)))
"""


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=300, help="training steps measured per process")
    return p.parse_args(argv)


def probe(setting: str, work: str, steps: int) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, setting, work, str(steps)], cwd=REPO_ROOT, check=True,
                         capture_output=True, text=True, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    args = parse(argv)
    rows = []
    for work in ("train", "evaluate"):
        got = {"default": [], "kept": []}
        for _ in range(args.repeats):
            for setting in got:
                got[setting].append(probe(setting, work, args.steps))
        if not all(r["kept"] for r in got["kept"]):
            print("note: keep_freed_memory did not apply here (not glibc, or malloc settings in the environment)")
        med = {s: {k: median(r[k] for r in runs) for k in ("faults", "user", "sys", "wall")} for s, runs in got.items()}
        unit = f"{args.steps} steps" if work == "train" else "3 evaluations"
        for setting, m in med.items():
            rows.append([work, unit, setting, f"{m['faults']:,.0f}", f"{m['user']:.2f}", f"{m['sys']:.2f}",
                         f"{m['wall']:.2f}", f"{med['default']['wall'] / m['wall']:.2f}x"])
    print_report(f"Page faults with glibc's defaults and with fdahpc.heap.keep_freed_memory "
                 f"(LeNet-5-BN, one thread, medians of {args.repeats} alternating processes)",
                 ["work", "measured", "malloc", "minor faults", "user s", "sys s", "wall s", "default wall / wall"], rows,
                 "sys s: kernel time, mostly zeroing the pages each fault brings in; one machine's figures, shared")
    return 0


if __name__ == "__main__":
    sys.exit(main())
