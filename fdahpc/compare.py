"""Compare two run files: bit-identical, equal within a tolerance, or different.

    python -m fdahpc.compare A.h5 B.h5 [--rtol 1e-4] [--accuracy-atol 0.002]

Compares the final models (bit for bit, else their relative L2 distance
``||a - b|| / ||a||``), the synchronization steps (synchronous mode) or aggregated
versions (semi-asynchronous), the evaluation series, and the kernels each run was made
with (:mod:`fdahpc.provenance`). Two runs on one machine with the same wheels and thread
counts are bit-identical; on other CPUs torch's kernels sum in other orders, and the same
run lands within about 1e-5 (docs/reproducibility.md), well inside the default
``--rtol 1e-4``. Exit status: 0 identical or within the tolerance, 1 different, 2 a file
that cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from .metrics import read_run_file
from .provenance import kernel_differences, segments_of
from .run import layout_of

__all__ = ["compare", "main"]


def _kernels(attrs) -> dict | None:
    segments = segments_of(attrs)
    return segments[-1] if segments else None


def compare(a: str, b: str, rtol: float = 1e-4, accuracy_atol: float = 2e-3) -> tuple[str, list[str]]:
    """(verdict, report lines); verdict is ``identical``, ``within`` or ``different``.
    Accuracies are compared in absolute terms (a near-tie test sample may flip class).
    ``ValueError`` (one line) for a file that cannot be read or runs of different modes."""
    (la, lb) = (layout_of(read_run_file(path, ())[0]) for path in (a, b))
    if la["events"] != lb["events"]:
        raise ValueError(f"{a} records {la['events']} and {b} {lb['events']}: runs of different kinds; compare runs "
                         "of one mode")
    events, scores = la["events"], (la["accuracy"], la["loss"])
    names = ("final/model", events, *scores)
    head_a, sa = read_run_file(a, names)
    head_b, sb = read_run_file(b, names)
    lines, verdict = [], "identical"

    def worse(v: str) -> None:
        nonlocal verdict
        order = ("identical", "within", "different")
        verdict = max(verdict, v, key=order.index)

    wa, wb = sa["final/model"].astype(np.float64), sb["final/model"].astype(np.float64)
    if wa.shape != wb.shape or wa.size == 0:
        lines.append(f"final/model: shapes {wa.shape} and {wb.shape}: not the same model")
        worse("different")
    elif np.array_equal(sa["final/model"], sb["final/model"]):
        lines.append("final/model: bit-identical")
    else:
        dist = float(np.linalg.norm(wa - wb) / max(np.linalg.norm(wa), np.finfo(float).tiny))
        lines.append(f"final/model: relative L2 distance {dist:.2e} (tolerance {rtol:g})")
        worse("within" if dist <= rtol else "different")

    ea, eb = sa[events].tolist(), sb[events].tolist()
    if ea == eb:
        lines.append(f"{events}: identical ({len(ea)} rows)")
    else:
        first = next((i for i, (x, y) in enumerate(zip(ea, eb)) if x != y), min(len(ea), len(eb)))
        lines.append(f"{events}: first difference at row {first}: {ea[first:first + 3]} and {eb[first:first + 3]}")
        worse("different")

    for name in scores:
        x, y = sa[name].astype(np.float64), sb[name].astype(np.float64)
        if x.shape != y.shape:
            lines.append(f"{name}: {len(x)} and {len(y)} rows")
            worse("different")
        elif np.array_equal(x, y, equal_nan=True):
            lines.append(f"{name}: identical ({len(x)} rows)")
        elif name.endswith("accuracy"):
            gap = np.abs(x - y)
            i = int(np.nanargmax(gap))
            lines.append(f"{name}: largest difference {gap[i]:.4f} at row {i} ({x[i]:.4f} and {y[i]:.4f}; "
                         f"tolerance {accuracy_atol:g})")
            worse("within" if gap[i] <= accuracy_atol else "different")
        else:
            gap = np.abs(x - y) / np.maximum(np.abs(x), np.finfo(float).tiny)
            i = int(np.nanargmax(gap))
            lines.append(f"{name}: largest relative difference {gap[i]:.2e} at row {i} ({x[i]:.6g} and {y[i]:.6g})")
            worse("within" if gap[i] <= rtol else "different")

    ka, kb = _kernels(head_a), _kernels(head_b)
    if ka is None or kb is None:
        lines.append("kernels: not recorded in both files")
    else:
        diffs = kernel_differences(ka, kb)
        lines.append("kernels: the same" if not diffs else f"kernels: {'; '.join(diffs)}")
    return verdict, lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fdahpc.compare", description=__doc__.strip().splitlines()[0])
    parser.add_argument("a", metavar="A.h5")
    parser.add_argument("b", metavar="B.h5")
    parser.add_argument("--rtol", type=float, default=1e-4,
                        help="largest relative difference still called equal (default 1e-4; 30x the drift between CPUs)")
    parser.add_argument("--accuracy-atol", type=float, default=2e-3,
                        help="largest accuracy difference still called equal (default 0.002: two samples in 1000)")
    args = parser.parse_args(argv)
    try:
        verdict, lines = compare(args.a, args.b, args.rtol, args.accuracy_atol)
    except ValueError as exc:
        print(f"fdahpc.compare: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    print({"identical": "bit-identical", "within": f"equal within --rtol {args.rtol:g}",
           "different": "different"}[verdict])
    return 1 if verdict == "different" else 0


if __name__ == "__main__":
    sys.exit(main())
