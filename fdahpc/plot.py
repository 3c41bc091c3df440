"""Accuracy against communication and against steps, from fdahpc HDF5 run files.

    python -m fdahpc.plot runs/a.h5 runs/b.h5 -o fig.png

Synchronous runs: test accuracy against training GB communicated (``eval/comm_bytes``,
the paper formula, so runs of different sizes compare as in the FDA paper's figures), and
against local steps (``eval/step``). Semi-asynchronous runs: test accuracy against
aggregation rounds (``round/version``) and against virtual time (``round/virtual_time``),
as in the FedQS paper; and against wall seconds where every file has them. One line per run,
labelled by strategy, worker or client count and the settings that distinguish it. The schema is documented in ``fdahpc.metrics``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .metrics import read_run_file
from .run import layout_of

__all__ = ["Run", "read_run", "run_label", "plot_runs", "main"]

_USAGE = "usage: python -m fdahpc.plot RUN.h5 [RUN.h5 ...] -o FIG.png"
WALL = "wall time (s)"  # the last panel's axis, where every run file has the wall clock
@dataclass(frozen=True)
class Run:
    """What one run file contributes to the figure."""

    path: str
    label: str
    xlabels: tuple[str, ...]  # each panel's axis, as the run file's layout names it
    x: tuple[np.ndarray, ...]  # one series per panel (GB, not bytes)
    accuracy: np.ndarray
    target_accuracy: float


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _float_or_none(value) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None  # the writer stores None as ""
    return x if np.isfinite(x) else None


def run_label(attrs: dict, config: dict) -> str:
    """``"sketchfda workers=8 θ=1 iid"``: how the run file's layout names the run (strategy, workers
    and only the settings that apply; :meth:`fdahpc.run.Mode.layout`)."""
    if "layout" not in attrs:
        attrs = dict(attrs, config=json.dumps(config))
    return layout_of(attrs)["label"]


def _config(attrs) -> dict:
    try:
        config = json.loads(_text(attrs.get("config", "{}")))
    except json.JSONDecodeError:
        return {}
    return config if isinstance(config, dict) else {}


def read_run(path: str) -> Run:
    """Load the evaluation series of one run file; ``ValueError`` when it is not one."""
    attrs, _ = read_run_file(path, ())
    layout = layout_of(attrs)
    # The wall clock beside the layout's panels, where the file has it (eval/... or round/wall_seconds)
    wall = (layout["x"].split("/")[0] + "/wall_seconds", WALL, 1)
    names = (layout["accuracy"], *(name for name, _, _ in layout["panels"]), wall[0])
    _, series = read_run_file(path, names)
    acc, *xs, seconds = (np.asarray(series[name], dtype=np.float64) for name in names)
    panels = list(layout["panels"]) + ([wall] if len(seconds) == len(acc) else [])
    xs += [seconds] if len(panels) > len(xs) else []
    scored = ~np.isnan(acc)  # semi-asynchronous runs may score every few rounds only
    target = _float_or_none(attrs.get("target_accuracy"))
    return Run(
        path=path,
        label=layout["label"],
        xlabels=tuple(label for _, label, _ in panels),
        x=tuple(x[scored] / divisor for x, (_, _, divisor) in zip(xs, panels)),
        accuracy=acc[scored],
        target_accuracy=target if target is not None and target > 0 else 0.0,
    )


def _without_wall(run: Run) -> Run:
    keep = [i for i, label in enumerate(run.xlabels) if label != WALL]
    return Run(run.path, run.label, tuple(run.xlabels[i] for i in keep), tuple(run.x[i] for i in keep), run.accuracy,
               run.target_accuracy)


def plot_runs(paths: Sequence[str], out_path: str, log_gb: bool = False) -> None:
    """Draw every run of ``paths`` into one two-panel figure saved at ``out_path``.

    ``log_gb`` puts the GB axis on a log scale, for FDA against Synchronous, whose
    traffic differs by 50-300x (points at 0 GB are then not drawn). Synchronous and
    semi-asynchronous runs have different axes and go in separate figures.
    """
    if not paths:
        raise ValueError("paths: empty; give at least one run file")
    folder = os.path.dirname(os.path.abspath(out_path))
    if not os.path.isdir(folder):
        raise ValueError(f"-o {out_path}: folder {folder} does not exist; create it or choose another path")
    runs = [read_run(p) for p in paths]
    if not all(WALL in r.xlabels for r in runs):  # a file without the wall clock: that panel goes for all
        runs = [_without_wall(r) for r in runs]
    axes_of = {r.xlabels for r in runs}
    if len(axes_of) > 1:
        raise ValueError(f"runs mix files whose axes differ ({' vs '.join(', '.join(a) for a in sorted(axes_of))}); "
                         "plot each kind in its own figure")
    xlabels = axes_of.pop()

    import matplotlib

    matplotlib.use("Agg")  # no display on compute nodes
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(xlabels), figsize=(5.5 * len(xlabels), 4.2), sharey=True, squeeze=False)
    axes = axes[0]
    for run in runs:
        for ax, x in zip(axes, run.x):
            ax.plot(x, run.accuracy, marker=".", label=run.label)
    targets = sorted({r.target_accuracy for r in runs if r.target_accuracy > 0})
    for target in targets:
        for ax in axes:
            ax.axhline(target, color="grey", linestyle="--", linewidth=1)
    if log_gb and "(GB)" in xlabels[0]:
        axes[0].set_xscale("log")
    for ax, xlabel in zip(axes, xlabels):
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    axes[-1].legend(fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(out_path, dpi=120)
    except ValueError as exc:  # matplotlib: unknown extension
        raise ValueError(f"-o {out_path}: {exc}; use .png, .pdf or .svg") from None
    finally:
        plt.close(fig)


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage block
        raise _UsageError(f"{message}; {_USAGE}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(prog="python -m fdahpc.plot", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", metavar="RUN.h5", help="HDF5 run files (python -m fdahpc.train --out)")
    parser.add_argument("-o", "--out", help="figure file (.png, .pdf, .svg)")
    parser.add_argument("--log-gb", action="store_true", help="log scale for the GB axis")
    try:
        args = parser.parse_args(argv)
        if not args.runs:
            raise _UsageError("no run files given; " + _USAGE)
        if not args.out:
            raise _UsageError("no output given; add -o FIG.png")
        plot_runs(args.runs, args.out, log_gb=args.log_gb)
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except (_UsageError, ValueError, OSError) as exc:
        print(f"fdahpc.plot: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
