"""What ``scaling.py`` prints and draws from its measurements and projection.

The per-K progress line, the four tables (AllReduce with its α–β fits, the training loop per K,
the one-rank compute, the projection), the CSV of every measured and projected point, and the
figure (top row projected, bottom row measured). Nothing here measures or fits: the callers pass
the measured results, the fits and the projected rows in.
"""

from __future__ import annotations

import csv
import math

from _common import print_report
from cost_model import STRATEGIES, allreduce_seconds


# ----------------------------------------------------------------------------- formats
def _ms(s: float) -> str:
    return "-" if s is None or not math.isfinite(s) else f"{s * 1e3:.3f}" if s < 0.01 else f"{s * 1e3:.1f}"


def _secs(s: float) -> str:
    return f"{s:.3g}" if s < 1 else f"{s:.1f}" if s < 1000 else f"{s:,.0f}"


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.01 else f"{x:.2%}" if x >= 0.0001 else "<0.01%"


def _bytes(n: float) -> str:
    for unit, div in (("MB", 1e6), ("KB", 1e3)):
        if n >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n:.0f} B"


def _secs_or_dash(rep: dict, key: str) -> str:
    return f"{rep[key]:.1f} s" if key in rep else "- s"


def progress(k: int, rep: dict, note: str) -> None:
    """One line per K as its job ends (or is reused): where the job's time went, and others' load."""
    steps = "  ".join(f"{r['strategy']} {_ms(r['step_seconds'])} (setup {r['build_seconds']:.1f} s, loop "
                      f"{r['train_seconds']:.1f} s, eval {r['eval_seconds']:.1f} s, others' CPU {r['others_cpu']:.0%})"
                      for r in rep["train"])
    job = f"{rep['job_others_cpu']:.0%}" if "job_others_cpu" in rep else "-"
    print(f"  K={k:<3d} {note}job {_secs_or_dash(rep, 'job_seconds')}: start {_secs_or_dash(rep, 'startup_seconds')}, "
          f"AllReduce {rep['allreduce_seconds']:.1f} s (others' CPU {rep['allreduce_others_cpu']:.0%}), exit "
          f"{_secs_or_dash(rep, 'exit_seconds')}; ms/step {steps}; others' CPU over the job {job}", flush=True)


# ----------------------------------------------------------------------------- tables
def report_allreduce(measured: dict, fit: tuple, per_k: dict, others: dict) -> None:
    """The AllReduce table (median per (K, size) beside the global fit's error), then the per-K fits."""
    alpha, beta, _ = fit
    ks = sorted(measured)
    sizes = sorted({r["bytes"] for k in ks for r in measured[k]})
    rows = []
    for size in sizes:
        row = [_bytes(size)]
        for k in ks:
            r = next((r for r in measured[k] if r["bytes"] == size), None)
            if r is None:
                row += ["-", "-"]
                continue
            model = allreduce_seconds(size, k, alpha, beta)
            row += [_ms(r["seconds"]), f"{model / r['seconds'] - 1:+.0%}"]
        rows.append(row)
    header = ["bytes"] + [h for k in ks for h in (f"K={k} ms", "fit")]
    print_report(
        f"\nMEASURED here: AllReduce (mpi4py Allreduce, float32 SUM, in place), median of the slowest rank's time; "
        f"global α–β fit α = {alpha * 1e6:.2f} µs, β = {beta * 1e9:.4f} ns/B (1/β = {1 / beta / 1e9:.2f} GB/s)"
        if beta > 0 else
        f"\nMEASURED here: AllReduce; global fit α = {alpha * 1e6:.2f} µs, β = {beta * 1e9:.4f} ns/B (not positive)",
        header, rows,
        "fit = global α–β model / measured − 1, model T(n, K) = 2⌈log2 K⌉α + 2(K−1)/K·n·β fitted over every (K, n)\n"
        "on the relative error (a point the model underestimates counts at most -100 %, one it overestimates without\n"
        "bound, so one (α, β) pair that cannot fit every K ends up fitting the fastest points). K > 2 ranks share 2\n"
        "cores: those are this machine's shared-memory transport under oversubscription (ranks take turns on the\n"
        "cores, MPICH's waiting ranks busy-poll), not a network; the per-K fits below show α growing with K.")
    rows = []
    for k in ks:
        a, b, res = per_k[k]
        rows.append([k, f"{a * 1e6:.2f}", f"{b * 1e9:.4f}", f"{1 / b / 1e9:.2f}" if b > 0 else "-",
                     f"{max(abs(r) for r in res):.0%}", f"{others.get(k, float('nan')):.0%}"])
    print_report("\nPer-K α–β fit (same model at one K)",
                 ["K", "α µs", "β ns/B", "1/β GB/s", "max |residual|", "others' CPU"],
                 rows, "others' CPU: share of the machine other processes used during that K's AllReduce phase.")


_TRAINING_LEGEND = (
    "ms/step: mean time between steps after the warm-up, steps after an evaluation left out, slowest rank; run file:\n"
    "(wall_seconds - eval_seconds) / steps (warm-up included); fedavg (τ = 10^9) and FDA (Θ = inf) never sync the\n"
    "models here, so FDA's figure is the monitoring cost; bytes/step: comm_bytes / steps "
    "(paper's count, all K ranks);\n"
    "- fedavg: ms/step minus FedAvg's at the same K (what the per-step collectives cost); α–β ms: the per-K fit's\n"
    "T(n, K) for those collectives (the model's 4d bytes, or the FDA state) - the additivity the projection assumes.")


def report_training(results: dict, per_k: dict, compute: dict, model: str) -> list[dict]:
    """The training loop per (K, strategy) beside what the per-K fit predicts for its per-step collectives;
    returns the same as CSV rows (part = measured)."""
    rows, csv_rows = [], []
    for k in sorted(results):
        runs = {r["strategy"]: r for r in results[k]["train"]}
        base = runs.get("fedavg")
        a, b, _ = per_k.get(k, (float("nan"), float("nan"), None))
        for strategy in STRATEGIES:
            r = runs.get(strategy)
            if r is None:
                continue
            # What the per-K α–β fit says this strategy's per-step AllReduces cost at this K.
            if strategy == "synchronous":
                predicted = allreduce_seconds(4 * r["params"], k, a, b)
            elif strategy == "fedavg":
                predicted = 0.0
            else:
                predicted = allreduce_seconds(r["state_bytes"], k, a, b)
            extra = r["step_seconds"] - base["step_seconds"] if base else float("nan")
            rows.append([k, strategy, _ms(r["step_seconds"]), _ms(r["runfile_step_seconds"]), r["timed_steps"],
                         r["syncs"], _bytes(r["bytes_per_step"]), "" if strategy == "fedavg" else _ms(extra),
                         "" if strategy == "fedavg" else _ms(predicted), f"{r['others_cpu']:.0%}"])
            csv_rows.append(dict(part="measured", model=model, strategy=strategy, ranks=k, fabric="this machine",
                                 steps_per_epoch=r["steps_per_epoch"], step_seconds=r["step_seconds"],
                                 comm_seconds=extra if strategy != "fedavg" else "", fit_seconds=predicted,
                                 bytes_per_step=r["bytes_per_step"], others_cpu=r["others_cpu"],
                                 note=f"comm_seconds = step - fedavg's step; fit_seconds = per-K alpha-beta T of the "
                                      f"per-step collectives; run file (wall-eval)/steps "
                                      f"{r['runfile_step_seconds']:.6f}; "
                                      f"{r['syncs']} syncs in {r['steps']} steps"))
    c = compute.get(model, {}).get("compute", {}).get("fedavg")
    print_report(
        f"\nMEASURED here: fdahpc.train's loop, {model}, FashionMNIST, batch 32, one job per K, per-step time "
        f"after the warm-up (one-rank compute of a {model} step, CPU: {_ms(c)} ms)",
        ["K", "strategy", "ms/step", "run file", "steps timed", "syncs", "bytes/step", "- fedavg ms", "α–β ms",
         "others' CPU"],
        rows, _TRAINING_LEGEND)
    return csv_rows


_COMPUTE_LEGEND = (
    "local: median process CPU time of the forward/backward/Adam step, pooled over the four strategies'\n"
    "interleaved steps (the same work under each); own: median CPU time of the strategy's own step\n"
    "(ModelAverager.step: FDA's drift, dot products, sketch); CPU ms/step = local + own, what the projection\n"
    "uses (CPU time is robust to other processes' load, up to their cache and memory contention); wall ms:\n"
    "median elapsed time of a whole step, inflated when others share the cores. FedAvg and FDA never sync\n"
    "here (τ = 10^9, Θ = inf).")


def report_compute(compute: dict, results: dict, model: str) -> None:
    """The one-rank compute per step per (model, strategy): the compute term of the projection."""
    rows = []
    for name, m in compute.items():
        for strategy in STRATEGIES:
            rows.append([name, f"{m['params']:,}", strategy, _ms(m["local"]), _ms(m["own"][strategy]),
                         _ms(m["compute"][strategy]), _ms(m["compute_wall"][strategy]), m["steps"][strategy],
                         m["state_bytes"][strategy]])
    k2 = results.get(2)
    check = ""
    if k2 and model in compute:
        r = next((r for r in k2["train"] if r["strategy"] == "fedavg"), None)
        if r:
            check = (f"\nCheck: {model} FedAvg at K = 2 (one rank per core) measured {_ms(r['step_seconds'])} "
                     f"ms/step in fdahpc.train's loop; one-rank CPU {_ms(compute[model]['compute']['fedavg'])} ms.")
    print_report("\nMEASURED here: compute per step at one rank (fdahpc.ModelAverager on a local communicator, Adam, "
                 "batch 32, FashionMNIST) - the projection's compute, this CPU's",
                 ["model", "params", "strategy", "local CPU ms", "own CPU ms", "CPU ms/step", "wall ms/step", "steps",
                  "state bytes"], rows, _COMPUTE_LEGEND + check)


def report_projection(rows: list[dict], args, alpha: float, beta: float) -> None:
    """Projected seconds per epoch per (model, K), and how much faster compute must get before
    communication takes as long as it."""
    table = []
    keyed = {(r["model"], r["ranks"], r["strategy"]): r for r in rows}
    for name in dict.fromkeys(r["model"] for r in rows):
        for k in args.project_ranks:
            base = keyed.get((name, k, "synchronous"))
            line = [name, k, base["steps_per_epoch"] if base else "-"]
            for strategy in STRATEGIES:
                r = keyed.get((name, k, strategy))
                line.append("-" if r is None else f"{_secs(r['epoch_seconds'])} ({_pct(r['comm_share'])})")
            for strategy in ("synchronous", "sketchfda"):
                r = keyed.get((name, k, strategy))
                line.append("-" if r is None else f"{r['breakeven_speedup']:,.0f}x")
            table.append(line)
    scale = "" if args.compute_scale == 1 else f", compute / {args.compute_scale:g} (what-if)"
    print_report(
        f"\nPROJECTED (not measured): seconds per epoch (communication share) on a {args.fabric_gbps:g} Gb/s, "
        f"{args.fabric_latency_us:g} µs fabric (α = {alpha * 1e6:g} µs, β = {beta * 1e9:.3f} ns/B){scale}",
        ["model", "K", "steps/epoch", *STRATEGIES, "sync even at", "sketch even at"], table,
        "epoch = steps/epoch · (compute + comm); compute: this CPU's one-rank CPU time per step (table above);\n"
        "even at: how many times faster than this CPU compute must get before synchronous / sketchfda spends as long\n"
        "communicating as computing (compute / comm per step);\n"
        "comm per step: synchronous T(4d, K); fedavg T(4d, K)/τ; FDA T(state, K) + T(4d, K)/S, with T the α–β model,\n"
        f"τ = {args.fedavg_tau} and S = {args.fda_steps_per_sync} "
        "(S is an assumption: FDA's sync rate depends on Θ, data and K).")


# ----------------------------------------------------------------------------- figure and CSV
def plot(path: str, proj: list[dict], measured: dict, fit: tuple, per_k: dict, results: dict, args, model: str) -> None:
    """Top row: projected epoch time against K per model; bottom: the AllReduce and its fits, the step
    time and the per-step collectives measured here."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in proj))
    ncol = max(3, len(models))
    fig, axes = plt.subplots(2, ncol, figsize=(4.6 * ncol, 9.2), squeeze=False)
    colors = dict(zip(STRATEGIES, ("tab:red", "tab:blue", "tab:green", "tab:purple")))
    for ax, name in zip(axes[0], models):
        for strategy in STRATEGIES:
            mine = sorted((r["ranks"], r["epoch_seconds"], r["comm_epoch_seconds"]) for r in proj
                          if r["model"] == name and r["strategy"] == strategy)
            if mine:
                ks = [p[0] for p in mine]
                ax.plot(ks, [p[1] for p in mine], "-o", ms=3, color=colors[strategy], label=f"{strategy}")
                ax.plot(ks, [p[2] for p in mine], "--", lw=1, color=colors[strategy], label=f"{strategy}: comm")
        ax.set(xscale="log", yscale="log", xlabel="K (ranks)", ylabel="seconds per epoch",
               title=f"PROJECTED: {name}\n{args.fabric_gbps:g} Gb/s, {args.fabric_latency_us:g} µs; this CPU's compute"
               + ("" if args.compute_scale == 1 else f" / {args.compute_scale:g}"))
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=4, fontsize=8, bbox_to_anchor=(0.5, 0.97))
    fig.suptitle("top: PROJECTED with the α–β model (solid: epoch time, dashed: its communication part); "
                 "bottom: MEASURED on this 2-core machine", fontsize=10, y=0.995)
    for ax in axes[0][len(models):]:
        ax.axis("off")
    # Measured: AllReduce with the global fit.
    ax = axes[1][0]
    alpha, beta, _ = fit
    cmap = plt.get_cmap("viridis")
    ks = sorted(measured)
    for i, k in enumerate(ks):
        col = cmap(i / max(1, len(ks) - 1))
        pts = sorted((r["bytes"], r["seconds"]) for r in measured[k])
        ax.plot(*zip(*pts), "o", color=col, label=f"K={k}")
        xs = [p[0] for p in pts]
        ax.plot(xs, [allreduce_seconds(n, k, alpha, beta) for n in xs], "--", color=col, lw=1)
        ax.plot(xs, [allreduce_seconds(n, k, *per_k[k][:2]) for n in xs], "-", color=col, lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="message bytes (K > 2: ranks share 2 cores)", ylabel="seconds",
           title="MEASURED here: AllReduce (points), per-K fits (solid)\n"
                 f"one global fit (dashed): α={alpha * 1e6:.3g} µs, β={beta * 1e9:.3g} ns/B")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    # Measured: per-step time of the training loop.
    ax = axes[1][1]
    for strategy in STRATEGIES:
        pts = sorted((k, r["step_seconds"]) for k in results for r in results[k]["train"] if r["strategy"] == strategy)
        if pts:
            ax.plot(*zip(*pts), "s:", color=colors[strategy], label=strategy)
    ax.set(xscale="log", yscale="log", xlabel="K (ranks, on 2 cores)", ylabel="seconds per step",
           title=f"MEASURED here: {model} step time\n(K > 2: oversubscribed; FedAvg/FDA never sync)")
    ax.set_xscale("log", base=2)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    # Measured: the per-step collectives' cost against the per-K fit.
    ax = axes[1][2]
    for strategy in ("synchronous", "linearfda", "sketchfda"):
        meas, pred = [], []
        for k in sorted(results):
            runs = {r["strategy"]: r for r in results[k]["train"]}
            if strategy not in runs or "fedavg" not in runs:
                continue
            r = runs[strategy]
            extra = r["step_seconds"] - runs["fedavg"]["step_seconds"]
            if extra > 0:
                meas.append((k, extra))
            a, b, _ = per_k[k]
            n = 4 * r["params"] if strategy == "synchronous" else r["state_bytes"]
            pred.append((k, allreduce_seconds(n, k, a, b)))
        if meas:
            ax.plot(*zip(*meas), "s", color=colors[strategy], label=f"{strategy}: step − fedavg")
        if pred:
            ax.plot(*zip(*pred), "--", color=colors[strategy], lw=1, label=f"{strategy}: per-K α–β")
    ax.set(xscale="log", yscale="log", xlabel="K (ranks, on 2 cores)", ylabel="seconds per step",
           title="MEASURED here: per-step collectives\n(step − FedAvg's step; non-positive left out)")
    ax.set_xscale("log", base=2)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    for ax in axes[1][3:]:
        ax.axis("off")
    fig.tight_layout(rect=(0, 0, 1, 0.935))
    fig.savefig(path, dpi=110)
    plt.close(fig)


CSV_FIELDS = ["part", "model", "strategy", "ranks", "fabric", "message_bytes", "steps_per_epoch", "compute_seconds",
              "comm_seconds", "fit_seconds", "step_seconds", "epoch_seconds", "comm_epoch_seconds", "comm_share",
              "breakeven_speedup", "bytes_per_step", "others_cpu", "note"]


def write_csv(path: str, training_rows: list[dict], measured: dict, fit: tuple, others: dict, proj: list[dict],
              args) -> None:
    """One row per point: the training loop's (``report_training``'s rows), each AllReduce measured
    with the global fit's time, each projected (model, K, strategy)."""
    rows = list(training_rows)
    fabric = f"{args.fabric_gbps:g} Gb/s, {args.fabric_latency_us:g} us"
    for k in sorted(measured):
        for r in measured[k]:
            rows.append(dict(part="allreduce", ranks=k, fabric="this machine", message_bytes=r["bytes"],
                             comm_seconds=r["seconds"], fit_seconds=allreduce_seconds(r["bytes"], k, fit[0], fit[1]),
                             others_cpu=others[k], note=f"{r['repeats']} repeats; IQR {r['q25']:.3g}-{r['q75']:.3g} s"))
    for r in proj:
        rows.append(dict(part="projected", fabric=fabric, **{f: r[f] for f in r}))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({f: row.get(f, "") for f in CSV_FIELDS})
