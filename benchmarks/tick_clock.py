"""The tick clock's schedule figures (``--clock ticks``, fdahpc/semiasync/ticks.py): no training.

    python benchmarks/tick_clock.py                      # N = 100, K = 10, 1:50, 400 aggregations, seeds 0-2
    python benchmarks/tick_clock.py --seeds 0 --clients 50 --buffer 5 --rounds 200

Per seed: the mean real staleness of what is aggregated (of the result actually read) and
its share of zeros, the start-stamp staleness the authors log, the share of aggregated
entries that repeat an already aggregated job, and the share of jobs overwritten before
any aggregation read them. Issue 43 measured, on the authors' own speed table (mean r
23.1), ≈ 2.5 (half 0) / ≈ 9.8 / ≈ 13 % / ≈ 15 %; fdahpc draws its table from the seed.
"""

from __future__ import annotations

import argparse

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)

from fdahpc.semiasync.ticks import tick_statistics


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--buffer", type=int, default=10)
    p.add_argument("--speed-ratio", type=int, default=50)
    p.add_argument("--rounds", type=int, default=400)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    a = p.parse_args(argv)
    print(f"tick clock: N = {a.clients}, K = {a.buffer}, 1:{a.speed_ratio}, {a.rounds} aggregations")
    print("seed  staleness  zero  stamp staleness  repeats  never aggregated  ticks  jobs")
    rows = []
    for seed in a.seeds:
        s = tick_statistics(a.clients, a.buffer, a.speed_ratio, a.rounds, seed)
        rows.append(s)
        print(f"{seed:4d}  {s['staleness_mean']:9.2f}  {s['staleness_zero']:4.0%}  {s['stamp_staleness_mean']:15.2f}  "
              f"{s['repeats']:7.1%}  {s['never_aggregated']:16.1%}  {s['ticks']:5d}  {s['jobs']:4d}")
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    print(f"mean  {mean['staleness_mean']:9.2f}  {mean['staleness_zero']:4.0%}  {mean['stamp_staleness_mean']:15.2f}  "
          f"{mean['repeats']:7.1%}  {mean['never_aggregated']:16.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
