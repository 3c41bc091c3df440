"""The analysis behind ``frontier.py``: crossings of a target, frontier points (median over
seeds), Pareto frontiers, leads between the FDA and FedAvg families, the report's tables and
the CSV of points. Pure functions of run files and rows; ``frontier.py`` plans and runs the
grid and draws the figure.
"""

from __future__ import annotations

import csv
import json
import math
import os

from _common import REPO_ROOT, median, print_table, read_run
from fdahpc.provenance import segments_of

FAMILIES = ("synchronous", "fedavg", "linearfda", "sketchfda", "fedavg-sgd")  # plot order
FDA = ("linearfda", "sketchfda")  #: the dynamic-averaging families
#: ``--only``'s names: the families of a setting's runs (``auto``: FDA with ``--theta auto``;
#: ``paper``: ``--paper-baseline``'s FedAvg).
ONLY = ("synchronous", "fedavg", "linearfda", "sketchfda", "auto", "paper", "diloco")
#: ``--paper-baseline``: the FDA paper's own FedAvg (SGD clients, 1-epoch rounds) against FDA
#: with the presets' Adam: reported apart, not counted as a like-for-like FedAvg point.
PAPER = "fedavg-sgd"


def crossing(run: dict, target: float) -> tuple[int, float] | None:
    """(step, GB) of the first evaluation at or above ``target``; None when none was. The GB
    include the synchronization forced there to hand back the evaluated (held) model
    (``eval/held_bytes``, 0 where the step synchronized; absent in run files from before
    evaluations scored the held model, which scored the plain mean uncharged)."""
    held = run.get("eval/held_bytes")
    if held is None:
        held = [0] * len(run["eval/step"])
    for step, acc, nbytes, forced in zip(run["eval/step"], run["eval/accuracy"], run["eval/comm_bytes"], held):
        if acc >= target:
            return int(step), (float(nbytes) + float(forced)) / 1e9
    return None


def family_of(row: dict) -> str:
    """comm_cost's family, but the FDA paper's SGD FedAvg (``--paper-baseline``) is its own."""
    return PAPER if row["family"] == "fedavg" and ":optimizer=" in row["entry"] else row["family"]


def knob_of(row: dict) -> str:
    """What distinguishes runs within a family: τ in epochs, Θ, or 'auto'."""
    if family_of(row) == PAPER:
        return f"1 ep, sgd {row['entry'].partition(':lr=')[2]}"
    if row["family"] == "fedavg":
        return row["entry"].partition("local-epochs=")[2] + " ep"
    if row["family"].endswith(("+linear", "+sketch")) and "theta=auto" in row["entry"]:
        return _auto_knob(row)  # a rule under an FDA trigger (diloco+linear): its auto runs named as FDA's
    if row["family"] == "diloco":  # its round: H inner steps
        return "H=" + row["entry"].partition("tau=")[2].partition(":")[0]
    if row["family"] in FDA:
        if "theta=auto" not in row["entry"]:
            return f"Θ={float(row['theta']):g}"
        return _auto_knob(row)
    return ""


def _auto_knob(row: dict) -> str:
    """An auto run's knob: 'auto (H E ep[, every m])' (the per-round rule) or 'auto-once (E ep)'."""
    horizon = row["entry"].partition("theta-round-epochs=")[2].partition(":")[0]
    if horizon:  # the rule re-calibrated every round (every m: the state reduced every m steps)
        every = row["entry"].partition("fda-every=")[2].partition(":")[0]
        return f"auto (H {horizon} ep" + (f", every {every})" if every else ")")
    # auto-once, or the same rule under its earlier name (a plain theta=auto entry without a horizon)
    epochs = row["entry"].partition("theta-auto-epochs=")[2]
    return f"auto-once ({epochs or '1'} ep)"


#: Where a point's runs ran (issue 62): commit, machine (host, CPU model, torch's kernel class),
#: torch and NumPy versions and the median wall seconds, from each run file's provenance; ";"
#: between differing values (a point pairing runs of two machines says so). Empty in CSVs
#: written before it.
PROVENANCE = ("commit", "machine", "torch", "numpy", "wall_seconds")


def provenance_of(runs: list[dict]) -> dict:
    """The :data:`PROVENANCE` columns of one point's run files (their first segment each)."""
    def each(run: dict) -> dict:
        segments = segments_of(run)  # [] for a run file written before provenance was recorded
        if not segments:
            return {}
        first = segments[0]
        rank0 = (first.get("ranks") or [{}])[0]
        commit = str(first.get("git_commit") or "")
        return dict(commit=commit[:12] + ("+dirty" if commit.endswith("dirty") else ""),
                    machine=" ".join(str(rank0.get(k, "")) for k in ("host", "cpu_model", "torch_cpu_capability")),
                    torch=first.get("torch", ""), numpy=first.get("numpy", ""))

    records = [each(run) for run in runs]
    out = {k: ";".join(dict.fromkeys(r.get(k, "") for r in records if r.get(k))) for k in PROVENANCE[:-1]}
    return dict(out, wall_seconds=f"{median(float(run['wall_seconds']) for run in runs):.1f}")


def points(setting, comm_rows: list[dict], targets: list[float]) -> list[dict]:
    """One point per (configuration, target): medians over the seeds that reached it."""
    from fdahpc.strategies import PRESETS

    out = []
    by_config: dict[tuple, list[tuple[dict, dict]]] = {}
    for r in comm_rows:  # a row may name its knob itself (a run comm_cost did not plan: shakespeare.py's)
        run = read_run(os.path.join(REPO_ROOT, r["run_file"]))
        by_config.setdefault((family_of(r), r["knob"] if "knob" in r else knob_of(r)), []).append((r, run))

    def local(run: dict) -> tuple[str, float, int]:
        """The run's local optimizer and learning rate as it trained (the flags or the preset) and its seed."""
        cfg = json.loads(run["config"])
        preset = PRESETS[cfg["strategy"]]
        return cfg["optimizer"] or preset.optimizer, cfg["lr"] or preset.lr, int(cfg["seed"])

    for target in targets:
        for (family, knob), runs in by_config.items():
            hits = [c for c in (crossing(run, target) for _, run in runs) if c is not None]
            reached = len(hits) * 2 > len(runs)
            trained = [local(run) for _, run in runs]  # (optimizer, lr, seed) of each run
            optimizer, lr = trained[0][:2]
            out.append(dict(
                setting=setting.name, model=setting.model, partition=setting.partition, workers=setting.workers,
                optimizer=optimizer, lr=lr, seed=";".join(str(seed) for _, _, seed in trained), target=target, family=family, knob=knob, auto=knob.startswith("auto"), seeds=len(runs), reached_seeds=len(hits),
                reached=reached,
                steps=median(s for s, _ in hits) if reached else median(float(run["steps"]) for _, run in runs),
                gb=median(g for _, g in hits) if reached else median(float(run["comm_bytes"]) / 1e9 for _, run in runs),
                syncs=median(float(run["syncs"]) for _, run in runs),
                final_accuracy=median(float(run["final_accuracy"]) for _, run in runs),
                run_files=";".join(r["run_file"] for r, _ in runs), **provenance_of([run for _, run in runs]),
            ))
    return out


# The comparisons ----------------------------------------------------------------------


def pareto(pts: list[dict]) -> list[dict]:
    """The points no other point beats in both steps and GB, by increasing steps."""
    front, best_gb = [], float("inf")
    for p in sorted(pts, key=lambda p: (p["steps"], p["gb"])):
        if p["gb"] < best_gb:
            front.append(p)
            best_gb = p["gb"]
    return front


def cheapest_within(pts: list[dict], steps: float) -> dict | None:
    ok = [p for p in pts if p["steps"] <= steps]
    return min(ok, key=lambda p: p["gb"]) if ok else None


#: Issue 24's bar for ``--theta auto``: at most this many times the cheapest tuned Θ's bytes,
#: in at most this many times its steps.
AUTO_GB, AUTO_STEPS = 1.5, 1.1


def auto_check(auto: dict, best: dict) -> bool:
    """Whether an auto run that reached the target is within the bar of the cheapest tuned Θ."""
    return auto["gb"] <= AUTO_GB * best["gb"] and auto["steps"] <= AUTO_STEPS * best["steps"]


def against_fedavg(ok: list[dict]) -> list[tuple[dict, dict | None]]:
    """Each FedAvg point that reached the target, by steps, with the cheapest FDA run (tuned
    Θ or auto) that reached it in no more steps (None: none did)."""
    fda_all = [p for p in ok if p["family"] in FDA]
    return [(p, cheapest_within(fda_all, p["steps"])) for p in sorted(ok, key=lambda p: p["steps"]) if p["family"] == "fedavg"]


def dominates(fedavg: dict, fda: dict | None) -> bool:
    """The goal's domination: FDA in no more steps (``against_fedavg``) at no more than half the GB."""
    return fda is not None and fedavg["gb"] >= 2 * fda["gb"]


#: Issue 24's screen: a regime goes to the confirm stage (three seeds) when one family's
#: frontier needs more than this many times the other's bytes at some step budget.
CONFIRM = 1.5
#: The step slack the beaten family gets in :func:`frontier_leads`: evaluations are 100 steps
#: apart and FedAvg's round lengths few, so a lead must survive 10 % more steps.
SLACK = 1.1


def frontier_leads(ok: list[dict]) -> tuple[tuple[float, dict, dict] | None, tuple[float, dict, dict] | None]:
    """(FDA's lead, FedAvg's lead) in bytes: the most times fewer GB one family's cheapest run
    within a step budget needs than the other's cheapest within ``SLACK`` x that budget, over
    every budget at which one of them reached the target (FDA: tuned Θ and auto), as
    (ratio, the leader's run, the beaten run): the pair a confirm stage reruns. None when no
    budget has both."""
    fda = [p for p in ok if p["family"] in FDA]
    avg = [p for p in ok if p["family"] == "fedavg"]

    def lead(winner: list[dict], loser: list[dict]) -> tuple[float, dict, dict] | None:
        pairs = []
        for steps in sorted({p["steps"] for p in winner}):
            w, l = cheapest_within(winner, steps), cheapest_within(loser, SLACK * steps)
            if l is not None:
                # A run that reached the target before its first model sync (the evaluated
                # average is free, as for every run) spent 0 GB: an unbounded lead.
                pairs.append((l["gb"] / w["gb"] if w["gb"] else math.inf if l["gb"] else 1.0, w, l))
        return max(pairs, key=lambda t: t[0], default=None)

    return lead(fda, avg), lead(avg, fda)


def screen_verdict(fda_lead: float | None, fedavg_lead: float | None) -> str:
    """'FDA ahead' / 'FDA behind' / 'mixed' when a family leads by more than CONFIRM (the
    regime goes to the confirm stage), 'even' otherwise. The leads are ratios, None where the
    family has no budget the other reaches the target within (it is slower at every one)."""
    if fda_lead is None and fedavg_lead is None:
        return "no shared budget"
    ahead, behind = (x is not None and x > CONFIRM for x in (fda_lead, fedavg_lead))
    return {(True, False): "FDA ahead", (False, True): "FDA behind", (True, True): "mixed"}.get((ahead, behind), "even")


def unchecked(auto: dict) -> str:
    """An auto run's verdict where no tuned Θ of its trigger reached the target: the bar has
    nothing to compare with, so the run is reported, not counted as met or missed."""
    if auto["reached"]:
        return f"reached it ({auto['steps']:.0f} steps, {auto['gb']:.4f} GB) where no tuned Θ did: no check"
    return "not reached, nor by any tuned Θ: no check"


def cheapest_tuned(auto: dict, ok: list[dict]) -> dict | None:
    """The cheapest run of ``auto``'s trigger with a tuned Θ that reached the target."""
    tuned = [p for p in ok if p["family"] == auto["family"] and not p["auto"]]
    return min(tuned, key=lambda p: p["gb"]) if tuned else None


def cheapest_theta_edge(g: list[dict], family: str = "linearfda") -> str:
    """Where ``family``'s cheapest tuned Θ sits in its grid at one target: 'grid top' (the
    largest Θ tried), 'reach edge' (every larger Θ tried missed the target within the cap:
    the cheapest Θ is set by the target and the cap) or 'inside' (a larger Θ reached it, at
    more bytes). '-' when no tuned Θ reached the target."""
    tuned = [p for p in g if p["family"] == family and not p["auto"]]
    ok = [p for p in tuned if p["reached"]]
    if not ok:
        return "-"
    best = min(ok, key=lambda p: p["gb"])
    theta = lambda p: float(p["knob"].partition("=")[2])  # noqa: E731
    larger = [p for p in tuned if theta(p) > theta(best)]
    where = "grid top" if not larger else ("reach edge" if not any(p["reached"] for p in larger) else "inside")
    return f"Θ={theta(best):g} ({where})"


def label(p: dict) -> str:
    return f"{p['family']} {p['knob']}".strip()


def fmt(p: dict | None, key: str) -> str:
    if p is None:
        return "-"
    return f"{p[key]:.0f}" if key == "steps" else f"{p[key]:.4f}"


def report(pts: list[dict]) -> list[str]:
    """The printed comparisons; returns the goal verdict lines for the summary."""
    verdicts = []
    groups = list(dict.fromkeys((p["setting"], p["target"]) for p in pts))
    for setting, target in groups:
        g = [p for p in pts if (p["setting"], p["target"]) == (setting, target)]
        ok = [p for p in g if p["reached"]]
        fda = [p for p in ok if p["family"] in FDA and not p["auto"]]
        fda_all = [p for p in ok if p["family"] in FDA]
        print(f"\n=== {setting}, target {target:g} ===")
        rows = [[label(p), f"{p['reached_seeds']}/{p['seeds']}",
                 f"{p['steps']:.0f}" if p["reached"] else f">{p['steps']:.0f}",
                 f"{p['gb']:.4f}" if p["reached"] else f">{p['gb']:.4f}", f"{p['syncs']:.0f}", f"{p['final_accuracy']:.4f}"]
                for p in sorted(g, key=lambda p: (FAMILIES.index(p["family"]) if p["family"] in FAMILIES else 9, p["steps"]))]
        print_table(["run", "reached", "steps", "GB", "syncs (run)", "final acc"], rows)

        pairs = against_fedavg(ok)
        if pairs:
            print("\nEach FedAvg point against the cheapest FDA run (tuned Θ or auto) in no more steps:")
            rows = [[label(p), fmt(p, "steps"), fmt(p, "gb"), label(q) if q else "none", fmt(q, "steps"),
                     fmt(q, "gb"), f"{p['gb'] / q['gb']:.2f}x" if q else "-"] for p, q in pairs]
            print_table(["FedAvg", "steps", "GB", "cheapest FDA in <= steps", "steps", "GB", "FedAvg GB / FDA GB"], rows)
            verdicts.append(f"{setting} @ {target:g}: FDA dominates {sum(dominates(p, q) for p, q in pairs)} of "
                            f"{len(pairs)} FedAvg points (<= steps and <= 1/2 the GB)")
        for p in [p for p in ok if p["family"] == PAPER]:
            q = cheapest_within(fda_all, p["steps"])
            line = (f"the FDA paper's comparison (FedAvg with SGD, FDA with Adam; not like for like): {label(p)} "
                    f"{p['steps']:.0f} steps {p['gb']:.4f} GB; cheapest FDA in <= its steps: "
                    + (f"{label(q)} {q['gb']:.4f} GB ({p['gb'] / q['gb']:.2f}x fewer bytes)" if q else "none"))
            print(f"\n{line[0].upper()}{line[1:]}")
            verdicts.append(f"{setting} @ {target:g}: {line}")
        sync = next((p for p in g if p["family"] == "synchronous"), None)
        if sync is not None:
            q = cheapest_within(fda, sync["steps"]) if sync["reached"] else (min(fda, key=lambda p: p["gb"]) if fda else None)
            gt = "" if sync["reached"] else ">"
            if q:
                print(f"\nSynchronous {gt}{sync['steps']:.0f} steps, {gt}{sync['gb']:.4f} GB; cheapest tuned FDA in no more steps: "
                      f"{label(q)} {q['steps']:.0f} steps, {q['gb']:.4f} GB: {gt}{sync['gb'] / q['gb']:.0f}x fewer bytes")
                verdicts.append(f"{setting} @ {target:g}: FDA {gt}{sync['gb'] / q['gb']:.0f}x fewer bytes than Synchronous "
                                f"in {q['steps'] / sync['steps']:.2f} of its steps{'' if sync['reached'] else ' (Synchronous did not reach the target: a bound)'}")
        for auto in [p for p in g if p["auto"]]:
            best = cheapest_tuned(auto, ok)
            if best is None:
                line = f"{label(auto)} {unchecked(auto)}"
                print(line)
                verdicts.append(f"{setting} @ {target:g}: {line}")
                continue
            tuned = [p for p in fda if p["family"] == auto["family"]]
            near = cheapest_within(tuned, auto["steps"]) if auto["reached"] else None
            if not auto["reached"]:
                line = f"{label(auto)} did not reach the target ({auto['steps']:.0f} steps, {auto['gb']:.4f} GB): auto check missed"
            else:
                met = auto_check(auto, best)
                line = (f"{label(auto)} {auto['steps']:.0f} steps {auto['gb']:.4f} GB; cheapest tuned {label(best)} "
                        f"{best['steps']:.0f} steps {best['gb']:.4f} GB ({auto['gb'] / best['gb']:.2f}x its GB, "
                        f"{auto['steps'] / best['steps']:.2f}x its steps: auto check {'met' if met else 'missed'}); "
                        "cheapest tuned in <= auto's steps: "
                        + (f"{label(near)} {near['gb']:.4f} GB ({auto['gb'] / near['gb']:.2f}x)" if near else "none"))
            print(line)
            verdicts.append(f"{setting} @ {target:g}: {line}")
    return verdicts


def regimes(pts: list[dict]) -> list[list[str]]:
    """One row per (setting, target): the fewest steps each family reached the target in,
    each family's lead in bytes (:func:`frontier_leads`), the screen's verdict, the FedAvg
    points FDA dominates, where LinearFDA's cheapest tuned Θ sits in its grid
    (:func:`cheapest_theta_edge`), and each auto run's check."""
    rows = []
    for setting, target in dict.fromkeys((p["setting"], p["target"]) for p in pts):
        g = [p for p in pts if (p["setting"], p["target"]) == (setting, target)]
        ok = [p for p in g if p["reached"]]
        pairs = against_fedavg(ok)
        checks = []
        for auto in sorted((p for p in g if p["auto"]), key=label):
            best = cheapest_tuned(auto, ok)
            if best is None:
                verdict = unchecked(auto)
            elif auto["reached"]:
                verdict = (f"{auto['gb'] / best['gb']:.2f}x GB, {auto['steps'] / best['steps']:.2f}x steps: "
                           f"{'met' if auto_check(auto, best) else 'missed'}")
            else:
                verdict = "not reached: missed"
            checks.append(f"{label(auto)} {verdict}")
        fewest = [min((p["steps"] for p in ok if p["family"] in fams), default=None)
                  for fams in (FDA, ("fedavg",))]
        leads = frontier_leads(ok)
        rows.append([setting, f"{target:g}", " / ".join("-" if s is None else f"{s:.0f}" for s in fewest),
                     " / ".join("-" if x is None else f"{format_lead(x[0])} ({x[1]['knob']} vs {x[2]['knob']}, "
                                f"{seed_count(x[1], x[2])})" for x in leads),
                     screen_verdict(*(x and x[0] for x in leads)), f"{sum(dominates(p, q) for p, q in pairs)} of {len(pairs)}",
                     cheapest_theta_edge(g), "; ".join(checks) or "-"])
    return rows


def target_blind(pts: list[dict], family: str = "linearfda") -> list[list[str]]:
    """Whether one Θ passes the auto check at every target of a setting: one row per setting
    with two or more targets, giving the cheapest tuned Θ at each target and the tuned Θs that
    stay within ``AUTO_GB`` x the cheapest's GB in ``AUTO_STEPS`` x its steps at all of them.
    A rule that sets Θ from the run alone (before any target is known) yields one Θ for all
    targets of a run, so 'none' here means no such rule can pass the check on that setting,
    as far as the tried grid shows (a Θ between two grid points is not ruled out)."""
    rows = []
    for setting in dict.fromkeys(p["setting"] for p in pts):
        reached = {(p["knob"], p["target"]): p for p in pts
                   if p["setting"] == setting and p["family"] == family and not p["auto"] and p["reached"]}
        best = {}
        for (_, t), p in sorted(reached.items(), key=lambda kv: kv[0][1]):
            if t not in best or p["gb"] < best[t]["gb"]:
                best[t] = p
        if len(best) < 2:
            continue
        passing = [k for k in dict.fromkeys(k for k, _ in reached)
                   if all((k, t) in reached and auto_check(reached[k, t], b) for t, b in best.items())]
        rows.append([setting, ", ".join(f"{t:g}: {b['knob']}" for t, b in best.items()), ", ".join(passing) or "none"])
    return rows


def seed_count(a: dict, b: dict) -> str:
    """How many seeds the two points of a lead are medians over: '3 seeds', '1 seed', or '3/1 seeds'."""
    n, m = a["seeds"], b["seeds"]
    return f"{n} seed{'s' * (n > 1)}" if n == m else f"{n}/{m} seeds"


def format_lead(lead: float) -> str:
    """``2.05x``; a winner that spent no bytes (reached before its first sync) leads without bound."""
    return "unbounded" if math.isinf(lead) else f"{lead:.2f}x"


# The figure ---------------------------------------------------------------------------

FIELDS = ["setting", "model", "partition", "workers", "optimizer", "lr", "seed", "target", "family", "knob", "auto", "seeds", "reached_seeds",
          "reached", "steps", "gb", "syncs", "final_accuracy", "run_files", *PROVENANCE]
_TYPES = dict(workers=int, lr=float, target=float, seeds=int, reached_seeds=int, gb=float, syncs=float,
              steps=lambda v: int(float(v)) if float(v).is_integer() else float(v),  # a median of two seeds may be x.5
              final_accuracy=float, auto=lambda v: v == "True", reached=lambda v: v == "True")


def read_points(paths: list[str]) -> list[dict]:
    """The points of earlier ``--out`` CSVs, typed as :func:`points` makes them."""
    out = []
    for path in paths:
        with open(path, newline="") as fh:
            # Older CSVs lack the optimizer, lr and seed columns: those stay empty ("the presets").
            out += [{k: row.get(k, "") if row.get(k, "") == "" else _TYPES.get(k, str)(row[k]) for k in FIELDS}
                    for row in csv.DictReader(fh)]
    for p in out:
        p["knob"] = current_knob(str(p["knob"]))
    return out


def current_knob(knob: str) -> str:
    """CSVs written before the per-round rule call the one-calibration rule 'auto (N ep)'."""
    if knob.startswith("auto (") and not knob.startswith("auto (H "):
        return "auto-once" + knob[len("auto"):]
    return knob


def write_points(path: str, pts: list[dict]) -> None:
    """The points as ``--out``'s CSV (:data:`FIELDS`), read back by :func:`read_points`."""
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        for p in pts:  # a point made without run files (a test's) has no provenance: empty
            writer.writerow({k: p.get(k, "") if k in PROVENANCE else p[k] for k in FIELDS})


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` with each point that ``new`` measures again replaced, then ``new``'s other points."""
    key = lambda p: (p["setting"], p["family"], p["knob"], p["target"])  # noqa: E731
    merged = {key(p): p for p in old}
    merged.update((key(p), p) for p in new)
    return list(merged.values())
