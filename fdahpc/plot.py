"""Accuracy against communication and against steps, from fdahpc HDF5 run files.

    python -m fdahpc.plot runs/a.h5 runs/b.h5 -o fig.png

Left panel: test accuracy against training GB communicated (``eval/comm_bytes``, the
paper formula, so runs of different sizes compare as in the FDA paper's figures).
Right panel: test accuracy against local steps (``eval/step``). One line per run,
labelled by strategy, worker count and the settings that distinguish it. The schema is
documented in ``fdahpc.metrics``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Run", "read_run", "run_label", "plot_runs", "main"]

_USAGE = "usage: python -m fdahpc.plot RUN.h5 [RUN.h5 ...] -o FIG.png"
_SERIES = ("eval/step", "eval/accuracy", "eval/comm_bytes")


@dataclass(frozen=True)
class Run:
    """What one run file contributes to the figure."""

    path: str
    label: str
    step: np.ndarray
    accuracy: np.ndarray
    gigabytes: np.ndarray
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
    """``"sketchfda K=8 θ=1 iid"``: strategy, workers and only the settings that apply.

    Θ is shown for FDA triggers only and τ only when set, because every config carries a
    default Θ and printing it on a FedAvg line would suggest it mattered.
    """
    strategy = _text(attrs.get("strategy", config.get("strategy", "?")))
    parts = [strategy]
    workers = attrs.get("workers", attrs.get("world_size"))
    if workers is not None:
        parts.append(f"K={_text(workers)}")
    uses_fda = "fda" in strategy or config.get("sync") in ("linear", "sketch")
    if uses_fda and config.get("theta") is not None:
        parts.append(f"θ={config['theta']:g}")
    if config.get("tau") is not None:
        parts.append(f"τ={config['tau']}")
    partition = attrs.get("partition", config.get("partition"))
    if partition not in (None, ""):
        parts.append(_text(partition))
    return " ".join(parts)


def _config(attrs) -> dict:
    try:
        config = json.loads(_text(attrs.get("config", "{}")))
    except json.JSONDecodeError:
        return {}
    return config if isinstance(config, dict) else {}


def read_run(path: str) -> Run:
    """Load the evaluation series of one run file; ``ValueError`` when it is not one."""
    import h5py

    if not os.path.isfile(path):
        raise ValueError(f"run file {path}: not found; give the --out file of a python -m fdahpc.train run")
    if not h5py.is_hdf5(path):
        raise ValueError(f"run file {path}: not an HDF5 file; give the --out file of a python -m fdahpc.train run")
    with h5py.File(path, "r") as h5:
        missing = [name for name in _SERIES if name not in h5]
        if "strategy" not in h5.attrs or missing:
            what = ", ".join(missing) if missing else "the 'strategy' attribute"
            raise ValueError(f"run file {path}: not an fdahpc run file (lacks {what}); give a file written by python -m fdahpc.train")
        attrs = dict(h5.attrs)
        step, acc, comm = (np.asarray(h5[name][()]) for name in _SERIES)
    target = _float_or_none(attrs.get("target_accuracy"))
    return Run(
        path=path,
        label=run_label(attrs, _config(attrs)),
        step=step,
        accuracy=acc,
        gigabytes=comm / 1e9,
        target_accuracy=target if target is not None and target > 0 else 0.0,
    )


def plot_runs(paths: Sequence[str], out_path: str, log_gb: bool = False) -> None:
    """Draw every run of ``paths`` into one two-panel figure saved at ``out_path``.

    ``log_gb`` puts the GB axis on a log scale, for FDA against Synchronous, whose
    traffic differs by 50-300x (points at 0 GB are then not drawn).
    """
    if not paths:
        raise ValueError("paths: empty; give at least one run file")
    folder = os.path.dirname(os.path.abspath(out_path))
    if not os.path.isdir(folder):
        raise ValueError(f"-o {out_path}: folder {folder} does not exist; create it or choose another path")
    runs = [read_run(p) for p in paths]

    import matplotlib

    matplotlib.use("Agg")  # no display on compute nodes
    import matplotlib.pyplot as plt

    fig, (ax_gb, ax_step) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for run in runs:
        ax_gb.plot(run.gigabytes, run.accuracy, marker=".", label=run.label)
        ax_step.plot(run.step, run.accuracy, marker=".", label=run.label)
    targets = sorted({r.target_accuracy for r in runs if r.target_accuracy > 0})
    for target in targets:
        for ax in (ax_gb, ax_step):
            ax.axhline(target, color="grey", linestyle="--", linewidth=1)
    if log_gb:
        ax_gb.set_xscale("log")
    ax_gb.set_xlabel("training communication (GB)")
    ax_step.set_xlabel("local steps")
    ax_gb.set_ylabel("test accuracy")
    for ax in (ax_gb, ax_step):
        ax.grid(alpha=0.3)
    ax_step.legend(fontsize="small")
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
