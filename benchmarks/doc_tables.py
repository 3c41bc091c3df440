"""The measured tables of docs/*.md, printed from the committed rows in benchmarks/results/.

    python benchmarks/doc_tables.py NAME     # one table, as the doc holds it
    python benchmarks/doc_tables.py --list   # every generated table: name, doc, rows, command

Each function below prints one table of a doc page and reads only committed files (CSVs and
the reports' own tables in ``benchmarks/results/``); it runs nothing. In the doc the table sits
right under a ``<!-- generated: COMMAND -->`` line, and ``tests/test_doc_tables.py`` reruns
every such command and compares. Tables that another script prints already (``--markdown``,
``--table``) are listed here with that script's command, so ``--list`` names them all.
Per-seed values come from the rows, never from a rounded cell; a table that pairs runs from
two machines says so in its doc, beside it.
"""

from __future__ import annotations

import csv
import os
import re
import statistics
import sys

import _common  # noqa: F401  (the repository root on sys.path in a plain checkout)
from _common import RESULTS

import fedqs_regime
import semiasync

__all__ = ["TABLES", "EXTERNAL", "main"]

MINUS = "\u2212"


def _csv(name: str) -> list[dict]:
    with open(os.path.join(RESULTS, name), newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _text(name: str) -> list[str]:
    with open(os.path.join(RESULTS, name), encoding="utf-8") as fh:
        return fh.read().splitlines()


def _signed(x: float, digits: int = 2) -> str:
    """'+0.34', '−0.99': a difference in points, with the typographic minus the docs use."""
    s = f"{x:+.{digits}f}"
    return s.replace("-", MINUS)


def _g3(x: float) -> str:
    """Three significant digits (1.32, 0.099, 23.4): the peers' seconds as their reports give them."""
    return f"{x:.3g}"


def _columns(lines: list[str], start: int) -> list[list[str]]:
    """The rows of a report's fixed-width table whose header is ``lines[start]`` (a dashed line
    follows it), cut at the dashes' column boundaries, up to the first blank or unindented note."""
    bounds = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[start + 1])]
    rows = []
    for line in lines[start + 2:]:
        if not line.strip() or not re.match(r"\s*\S", line) or line.lstrip().startswith(("s/", "ms/", "peak ")):
            break
        rows.append([line[a:b if i < len(bounds) - 1 else None].strip() for i, (a, b) in enumerate(bounds)])
    return rows


def _find(lines: list[str], prefix: str, after: int = 0) -> int:
    return next(i for i in range(after, len(lines)) if lines[i].startswith(prefix))


# ----------------------------------------------------------------------------------------------- docs/results.md


def fedopt() -> list[str]:
    """FDA against FedAdam and FedAvgM, iid K = 4, to 88 % (docs/results.md)."""
    rows = {r["entry"]: r for r in _csv("comm_cost_fedopt.csv") if r["family"] not in ("sketchfda",)}
    lin = {float(r["theta"]): r for r in _csv("comm_cost_fedopt.csv") if r["family"] == "linearfda"}
    groups = [("fedadam, paper defaults (1-epoch rounds, η_s = 1e-3)", ["fedadam"]),
              ("fedadam, 1-epoch rounds, η_s = 1e-2", ["fedadam:server-lr=0.01"]),
              ("fedadam, 100-step rounds, η_s = 1e-3 / 1e-2", ["fedadam:tau=100", "fedadam:tau=100:server-lr=0.01"]),
              ("fedavgm, 1-epoch rounds / 100-step rounds", ["fedavgm", "fedavgm:tau=100"]),
              ("fedadam driven by LinearFDA, Θ = 0.02 / 0.05",
               ["fedadam+linear:theta=0.02", "fedadam+linear:theta=0.05"])]
    out = ["| strategy | steps to target | GB to target |", "|---|---|---|"]
    for label, entries in groups:
        picked = [rows[e] for e in entries]
        out.append(f"| {label} | " + " / ".join(r["steps_to_target"] for r in picked) + " | "
                   + " / ".join(_g3(float(r["gb_to_target"])) for r in picked) + " |")
    thetas = sorted(lin)
    out.append("| linearfda, Θ = " + " / ".join(f"{t:g}" for t in thetas) + " | "
               + " / ".join(lin[t]["steps_to_target"] for t in thetas) + " | "
               + " / ".join(_g3(float(lin[t]["gb_to_target"])) for t in thetas) + " |")
    return out


def semiasync_lenet() -> list[str]:
    """Semi-asynchronous FL, LeNet-5, Dirichlet 0.5, N = 40, K = 5, seeds 0-2 (docs/results.md)."""
    rows = semiasync.read_rows(os.path.join(RESULTS, "semiasync_lenet.csv"))
    seeds = sorted({s for _, s in rows})
    out = ["| method | convergence accuracy % | rounds to 95 % | oscillations | virtual time to FedAvg's accuracy "
           "| vs synchronous |", "|---|---|---|---|---|---|"]
    for method in ("fedavg", "fedqs-avg", "fedsgd", "fedqs-sgd", "fedbuff", "sync-fedavg"):
        mine = {s: rows[method, s] for s in seeds}
        acc = [100 * r["convergence_accuracy"] for r in mine.values()]
        reached = {s: r["time_to_fedavg_accuracy"] for s, r in mine.items() if r["time_to_fedavg_accuracy"] == r[
            "time_to_fedavg_accuracy"]}
        never = [s for s in seeds if s not in reached]
        time = f"{statistics.fmean(reached.values()):.0f}" + (
            f" (seed {', '.join(map(str, never))} never)" if never else "")
        ratio = statistics.fmean(reached[s] / rows["sync-fedavg", s]["time_to_fedavg_accuracy"] for s in reached)
        label = "synchronous FedAvg" if method == "sync-fedavg" else method
        out.append(f"| {label} | {statistics.fmean(acc):.2f} ± {statistics.stdev(acc):.2f} "
                   f"| {statistics.fmean(r['rounds_to_95pct'] for r in mine.values()):.0f} "
                   f"| {statistics.fmean(r['oscillations'] for r in mine.values()):.1f} | {time} | {ratio:.2f} |")
    return out


#: The rework table's rows: (label, CSV, method, baseline); the baseline is always the reworked CSV's.
REWORK = (("FedAvg", "fedqs_lenet.csv", "fedavg", None),
          ("FedQS-Avg before (misread weight)", "fedqs_lenet_before.csv", "fedqs-avg", "fedavg"),
          ("FedQS-Avg, `--fedqs-variant paper`", "fedqs_lenet.csv", "fedqs-avg", "fedavg"),
          ("FedQS-Avg, `--fedqs-variant authors`", "fedqs_lenet.csv", "fedqs-avg:fedqs-variant=authors", "fedavg"),
          ("FedQS-Avg, paper variant, `--fedqs-feedback misread`", "fedqs_lenet.csv",
           "fedqs-avg:fedqs-feedback=misread", "fedavg"),
          ("FedQS-Avg, paper variant, `--fedqs-no-feedback`", "fedqs_lenet.csv", "fedqs-avg:fedqs-no-feedback",
           "fedavg"),
          ("FedSGD", "fedqs_lenet.csv", "fedsgd", None),
          ("FedQS-SGD before (misread weight)", "fedqs_lenet_before.csv", "fedqs-sgd", "fedsgd"),
          ("FedQS-SGD, `--fedqs-variant paper`", "fedqs_lenet.csv", "fedqs-sgd", "fedsgd"),
          ("FedQS-SGD, `--fedqs-variant authors`", "fedqs_lenet.csv", "fedqs-sgd:fedqs-variant=authors", "fedsgd"),
          ("FedQS-SGD, paper variant, `--fedqs-feedback misread`", "fedqs_lenet.csv",
           "fedqs-sgd:fedqs-feedback=misread", "fedsgd"),
          ("FedQS-SGD, paper variant, `--fedqs-no-feedback`", "fedqs_lenet.csv", "fedqs-sgd:fedqs-no-feedback",
           "fedsgd"))


def fedqs_rework() -> list[str]:
    """FedQS before and after the faithful rework, LeNet-5, seeds 0-2 (docs/results.md). The
    old code's CSV has no staleness column: its rows show '–' there."""
    files = {f: semiasync.read_rows(os.path.join(RESULTS, f))
             for f in ("fedqs_lenet.csv", "fedqs_lenet_before.csv")}
    now = files["fedqs_lenet.csv"]
    out = ["| method | convergence accuracy % | per seed − baseline (points) | mean gap | rounds to 95 % "
           "| oscillations | staleness |", "|---|---|---|---|---|---|---|"]
    for label, file, method, base in REWORK:
        rows = files[file]
        seeds = sorted(s for m, s in rows if m == method)
        mine = [rows[method, s] for s in seeds]
        acc = [100 * r["convergence_accuracy"] for r in mine]
        gaps = ([100 * (rows[method, s]["convergence_accuracy"] - now[base, s]["convergence_accuracy"]) for s in seeds]
                if base else [])
        per_seed = " ".join(_signed(g) for g in gaps)
        mean_gap = _signed(statistics.fmean(gaps)) if gaps else ""
        stale = (f"{statistics.fmean(r['staleness_mean'] for r in mine):.1f}" if "staleness_mean" in mine[0] else "–")
        out.append(f"| {label} | {statistics.fmean(acc):.2f} ± {statistics.stdev(acc):.2f} | {per_seed} | {mean_gap} "
                   f"| {statistics.fmean(r['rounds_to_95pct'] for r in mine):.0f} "
                   f"| {statistics.fmean(r['oscillations'] for r in mine):.1f} | {stale} |")
    return out


def peers_crossdevice() -> list[str]:
    """Cross-device FedAvg against Flower and the bare loop (docs/results.md, peers.txt section 1)."""
    lines = _text("peers.txt")
    head = _find(lines, "   N  framework")
    cell = {(int(r[0]), r[1], r[2]): r for r in _columns(lines, head)}
    out = ["| N | scoring | fdahpc | Flower | bare | fdahpc / Flower |", "|---|---|---|---|---|---|"]
    for n in sorted({k[0] for k in cell}):
        for scoring in ("every round", "at the end"):
            f, fl, b = (cell[n, w, scoring] for w in ("fdahpc", "flower", "bare"))
            out.append(f"| {n:,} | {scoring} | {_g3(float(f[3]))} ({f[4]}×) | {_g3(float(fl[3]))} ({fl[4]}×) "
                       f"| {_g3(float(b[3]))} | {float(f[3]) / float(fl[3]):.2f} |")
    return out


def peers_local_sgd() -> list[str]:
    """Synchronous Local SGD over gloo: fdahpc, torch's averager, post-local SGD, torchft
    (docs/results.md, peers.txt sections 2 and 3). '/ fdahpc' is peers.txt's median of the
    per-repeat ratios; torchft ran once, apart, so its ratio is over fdahpc's median."""
    lines = _text("peers.txt")
    head = _find(lines, "         way  ms/step")
    rows = {r[0]: r for r in _columns(lines, head)}
    labels = (("fdahpc", "fdahpc `--strategy fedavg --tau 10`"),
              ("fdahpc-quiet", "fdahpc, signals agreed at the end only (`--stop-check-every 900`)"),
              ("periodic", "torch `PeriodicModelAverager(period=10)`"),
              ("postlocal", "post-local SGD (DDP for 100 steps, then the averager)"))
    out = ["| way | ms/step | / fdahpc | accuracy |", "|---|---|---|---|"]
    for key, label in labels:
        r = rows[key]
        out.append(f"| {label} | {r[1]} | {r[2]} | {r[5]} |")
    ft = next(line for line in lines if line.startswith('{"way": "torchft LocalSGD"'))
    ms = float(re.search(r'"ms_per_step": ([0-9.]+)', ft).group(1))
    acc = re.search(r'"final_accuracy": ([0-9.]+)', ft).group(1)
    out.append(f"| torchft `LocalSGD(sync_every=10)`, 2 replica groups (one run, not interleaved) | {ms:.2f} "
               f"| {ms / float(rows['fdahpc'][1]):.2f} | {acc} |")
    return out


def peers_appfl() -> list[str]:
    """Semi-asynchronous FedBuff: fdahpc's coordinator and APPFL (docs/results.md, peers.txt section 4)."""
    lines = _text("peers.txt")
    first = _find(lines, " framework            scoring")
    rows = {(r[0], r[1]): r for r in _columns(lines, first)}
    shipped = {r[0]: r for r in _columns(lines, _find(lines, "framework            scoring", first + 1))}
    f_every, f_end = rows["fdahpc", "every aggregation"], rows["fdahpc", "at the end"]
    a_every, a_end = rows["appfl-nogc", "every aggregation"], rows["appfl-nogc", "at the end"]
    ship = shipped["appfl"]
    out = ["| | s/aggregation, scoring every | at the end only | launch to aggregation 1, scoring every (at the end) "
           "| peak GB PSS (RSS) |", "|---|---|---|---|---|",
           f"| fdahpc | {_g3(float(f_every[2]))} | {_g3(float(f_end[2]))} | {f_every[4]} s ({f_end[4]} s) "
           f"| {f_every[6]} ({f_every[5]}) |",
           f"| APPFL, `optimize_memory` off | {_g3(float(a_every[2]))} (fdahpc {1 / float(a_every[3]):.2f}×) "
           f"| {_g3(float(a_end[2]))} ({1 / float(a_end[3]):.2f}×) | {a_every[4]} s ({a_end[4]} s) "
           f"| {a_every[6]} ({a_every[5]}): fdahpc {float(f_every[6]) / float(a_every[6]):.2f}× |",
           f"| APPFL as it ships (4 aggregations) | {_g3(float(ship[2]))} (fdahpc {1 / float(ship[3]):.2g}×) | "
           f"| {ship[4]} s | {ship[6]} ({ship[5]}) |"]
    return out


#: semiasync_memory.txt's runs, in its order: (the run's line, the row's label, the note on its models, whether
#: the row states the ≤ 8 GB goal).
MEMORY = (("# python benchmarks/semiasync_memory.py --model cnn",
           "small CNN (1.65 M), FedQS-Avg, `--fedqs-sketch-similarity`", "the 1 GB cache full; the rest on disk", True),
          ("# python benchmarks/semiasync_memory.py   (LeNet-5, FedAvg",
           "LeNet-5, FedAvg (measured before the allocator setting below)", "all under the cache", False),
          ("# python benchmarks/semiasync_memory.py --clients 100000",
           "LeNet-5, FedAvg, N = 100,000 on `synthetic:200000`", "the 1 GB cache full on the hosts", True),
          ("# python benchmarks/semiasync_memory.py --clients 1000,10000 --strategy fedqs-avg",
           "LeNet-5, FedQS-Avg, `--fedqs-variant authors` (each client's full update kept)",
           "versions and clients' updates, the cache full", False))


def semiasync_memory() -> list[str]:
    """Semi-asynchronous memory at N = 1,000 and 10,000 (100,000) clients (docs/results.md)."""
    lines = _text("semiasync_memory.txt")
    out = ["| model, rule | N = 1,000 | N = 10,000 | models held at most (server / hosts), N = 10,000 |",
           "|---|---|---|---|"]
    for start, label, note, goal in MEMORY:
        at = _find(lines, start)
        head = next(i for i in range(at, len(lines)) if re.match(r"\s+N  rounds", lines[i]))
        rows = {int(r[0]): r for r in _columns(lines, head)}
        big = max(rows)
        held = [f"{int(x):,}" for x in rows[big][4].split(" / ")]
        verdict = "met" if float(rows[big][2]) <= 8 else "missed"
        big_cell = f"**{rows[big][2]} GB** (goal ≤ 8: {verdict})" if goal else f"{rows[big][2]} GB"
        small = f"{rows[1000][2]} GB" if 1000 in rows else ""
        out.append(f"| {label} | {small} | {big_cell} | {held[0]} / {', '.join(held[1:])} ({note}) |")
    return out


#: exit_stress.csv's cases by launcher, as the table groups them.
LAUNCHERS = (("mpiexec (MPI sync, MPI semi-async, gloo sync)", ("mpiexec-mpi-sync", "mpiexec-mpi-semiasync",
                                                               "mpiexec-torch-sync")),
             ("torchrun (gloo sync)", ("torchrun-torch-sync",)),
             ("srun (gloo sync `--mpi=none`, MPI semi-async `--mpi=pmi2`)", ("srun-torch-sync", "srun-mpi-semiasync")))


def exit_stress() -> list[str]:
    """Clean exits under load, per launcher (docs/results.md)."""
    rows = _csv("exit_stress.csv")
    out = ["| launcher | jobs | unclean |", "|---|---|---|"]
    for label, cases in LAUNCHERS:
        mine = [r for r in rows if r["case"] in cases]
        out.append(f"| {label} | {len(mine)} | {sum(r['verdict'] != 'clean' for r in mine)} |")
    return out


# ------------------------------------------------------------------------------------------ docs/shakespeare.md


def _gpt_label(r: dict) -> str:
    family, knob = r["family"], r["knob"]
    if family == "synchronous":
        return "Synchronous"
    if family == "fedavg":
        return f"FedAvg τ = {knob.split()[0]}"
    if family == "diloco":
        return f"DiLoCo H = {knob.split('=')[1]}"
    if r["auto"] == "True":
        h, m = re.match(r"auto \(H (\d+) steps, every (\d+)\)", knob).groups()
        return f"LinearFDA auto, H = {h}, m = {m}"
    return f"LinearFDA Θ = {knob.split('=')[1]}"


def _gpt(workers: int) -> list[str]:
    rows = [r for r in _csv("frontier_gpt.csv") if int(r["workers"]) == workers
            and r["family"] in ("synchronous", "fedavg", "linearfda", "diloco")]
    by = {}
    for r in rows:
        by.setdefault(_gpt_label(r), {})[float(r["target"])] = r
    out = ["| method | steps to 40 % | steps to 45 % | MB to 45 % |", "|---|---|---|---|"]
    for label, t in by.items():
        out.append(f"| {label} | {int(float(t[0.4]['steps'])):,} | {int(float(t[0.45]['steps'])):,} "
                   f"| {1000 * float(t[0.45]['gb']):,.1f} |")
    return out


def gpt_k4() -> list[str]:
    """The GPT on Shakespeare roles, K = 4: steps and MB to 40 % and 45 % (docs/shakespeare.md)."""
    return _gpt(4)


def gpt_k8() -> list[str]:
    """The same at K = 8 (docs/shakespeare.md)."""
    return _gpt(8)


# ------------------------------------------------------------------------------------------- docs/tick-clock.md


def tick_schedule() -> list[str]:
    """The tick clock's schedule per seed, N = 100, K = 10, 1:50, 400 aggregations (tick_clock.txt)."""
    out = ["| seed | real staleness | of which 0 | start-stamp staleness | repeats | jobs never aggregated |",
           "|---|---|---|---|---|---|"]
    for line in _text("tick_clock.txt"):
        cells = line.split()
        if cells and cells[0].isdigit():
            out.append(f"| {cells[0]} | {cells[1]} | {cells[2].replace('%', ' %')} | {cells[3]} "
                       f"| {cells[4].replace('%', ' %')} | {cells[5].replace('%', ' %')} |")
    return out


def tick_slice60() -> list[str]:
    """The first 60-aggregation slice, seed 0, tick and event clocks, both with drop-last (docs/tick-clock.md)."""
    out = ["| clock (drop-last both) | method | convergence accuracy | rounds to 95 % | oscillations | staleness |",
           "|---|---|---|---|---|---|"]
    for clock, file in (("ticks", "fedqs_regime_ticks_droplast_dirichlet0.1_slice60.csv"),
                        ("events", "fedqs_regime_droplast_dirichlet0.1.csv")):
        rows = semiasync.read_rows(os.path.join(RESULTS, file))
        base = rows["fedavg", 0]["convergence_accuracy"]
        for method, label in (("fedavg", "FedAvg"), ("fedqs-avg:fedqs-variant=authors", "FedQS-Avg, authors' variant")):
            r = rows[method, 0]
            gain = "" if method == "fedavg" else f" ({_signed(100 * (r['convergence_accuracy'] - base))})"
            stale = f"{r['staleness_mean']:.2f}" + (" (real)" if clock == "ticks" else "")
            out.append(f"| {clock} | {label} | {100 * r['convergence_accuracy']:.2f} %{gain} "
                       f"| {r['rounds_to_95pct']:.0f} | {r['oscillations']:.0f} | {stale} |")
    return out


def tick400_first() -> list[str]:
    """The 400-aggregation tick-clock grid's first four rules, Dirichlet 0.1 (docs/tick-clock.md)."""
    return fedqs_regime.table("dirichlet:0.1", ["fedavg", "fedqs-avg:fedqs-variant=authors", "fedsgd",
                                                "fedqs-sgd:fedqs-variant=authors"], prefix="ticks_droplast_")


#: name -> (doc, the rows it reads, the function).
TABLES = {
    "fedopt": ("docs/results.md", "comm_cost_fedopt.csv", fedopt),
    "semiasync_lenet": ("docs/results.md", "semiasync_lenet.csv", semiasync_lenet),
    "fedqs_rework": ("docs/results.md", "fedqs_lenet.csv, fedqs_lenet_before.csv", fedqs_rework),
    "peers_crossdevice": ("docs/results.md", "peers.txt (section 1's table)", peers_crossdevice),
    "peers_local_sgd": ("docs/results.md", "peers.txt (sections 2 and 3)", peers_local_sgd),
    "peers_appfl": ("docs/results.md", "peers.txt (section 4's tables)", peers_appfl),
    "semiasync_memory": ("docs/results.md", "semiasync_memory.txt", semiasync_memory),
    "exit_stress": ("docs/results.md", "exit_stress.csv", exit_stress),
    "gpt_k4": ("docs/shakespeare.md", "frontier_gpt.csv", gpt_k4),
    "gpt_k8": ("docs/shakespeare.md", "frontier_gpt.csv", gpt_k8),
    "tick_schedule": ("docs/tick-clock.md", "tick_clock.txt", tick_schedule),
    "tick_slice60": ("docs/tick-clock.md", "fedqs_regime_ticks_droplast_dirichlet0.1_slice60.csv, "
                     "fedqs_regime_droplast_dirichlet0.1.csv", tick_slice60),
    "tick400_first": ("docs/tick-clock.md", "fedqs_regime_ticks_droplast_dirichlet0.1.csv", tick400_first),
}

#: Tables another script prints: (doc, rows, command).
EXTERNAL = (
    ("docs/results.md", "frontier.csv, scaling.csv", "python benchmarks/time_to_accuracy.py --markdown"),
    ("docs/results.md", "fedqs_regime_dirichlet0.1.csv, fedqs_regime_dirichlet0.5.csv",
     "python benchmarks/fedqs_regime.py --table"),
    ("docs/tick-clock.md", "fedqs_regime_ticks_droplast_dirichlet0.1.csv, fedqs_regime_ticks_droplast_dirichlet0.5.csv",
     "python benchmarks/fedqs_regime.py --table --partitions dirichlet:0.1,dirichlet:0.5 --clock ticks --drop-last"),
    ("docs/tick-clock.md", "fedqs_decompose200_dirichlet0.1.csv",
     "python benchmarks/fedqs_regime.py --partitions dirichlet:0.1 --decompose 200 --seeds 0,1,2 --table"),
    ("docs/tick-clock.md", "fedqs_regime_ticks_droplast_roles.csv",
     "python benchmarks/fedqs_regime.py --table --partitions roles --clock ticks --drop-last"),
)


def command(name: str) -> str:
    return f"python benchmarks/doc_tables.py {name}"


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--list"]:
        for name, (doc, rows, _) in TABLES.items():
            print(f"{name}\t{doc}\t{rows}\t{command(name)}")
        for doc, rows, cmd in EXTERNAL:
            print(f"-\t{doc}\t{rows}\t{cmd}")
        return 0
    if len(args) != 1 or args[0] not in TABLES:
        print(f"usage: doc_tables.py NAME | --list; NAME one of {', '.join(TABLES)}", file=sys.stderr)
        return 2
    print("\n".join(TABLES[args[0]][2]()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
