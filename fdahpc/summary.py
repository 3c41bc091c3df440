"""One line per run file, for finished runs and runs still being written alike.

    python -m fdahpc.summary runs/*.h5
    python -m fdahpc.summary --provenance run.h5   # also what decided its bits

Columns: status, strategy, workers (semi-asynchronous: clients and buffer), steps
(rounds), synchronizations, training GB, wall seconds to the last evaluation, the last test
accuracy, the convergence accuracy (semi-asynchronous: the FedQS paper's, the mean of the
last 20 evaluations; with the mode's defaults, 400 aggregations evaluated after each, the
paper's protocol) and where the target accuracy was first reached (step and wall seconds).
Everything is computed from the series, so a running job's line is as current as its last
flush (each evaluation). ``--provenance`` adds, under the
table, each file's record of versions, kernels, threads, hosts, job and commit, one block
per segment (the first run and each resume; :mod:`fdahpc.provenance`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .metrics import convergence_metrics, read_run_file
from .provenance import format_lines, segments_of
from .run import layout_of

__all__ = ["Summary", "summarize", "provenance_of", "main"]


class Summary(NamedTuple):
    path: str
    status: str
    strategy: str
    workers: str
    steps: int
    syncs: int
    gigabytes: float
    accuracy: float
    target: str  # "0.88@1900 (41.2 s)", "0.88 no" or "-"
    convergence: float = float("nan")  # semiasync: the FedQS paper's convergence accuracy
    seconds: float = float("nan")  # wall time to the last evaluation (NaN: a file without the series)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _reached(target: float, x: np.ndarray, acc: np.ndarray, wall: np.ndarray) -> str:
    if not target > 0:
        return "-"
    hit = np.flatnonzero(acc >= target)
    if not len(hit):
        return f"{target:g} no"
    return f"{target:g}@{int(x[hit[0]])}" + (f" ({float(wall[hit[0]]):.1f} s)" if len(wall) == len(x) else "")


def summarize(path: str) -> Summary:
    """The summary line of one run file; ``ValueError`` (one line) for a bad file."""
    attrs, _ = read_run_file(path, ())
    layout = layout_of(attrs)
    bytes_series, how = layout["bytes"]
    wall_series = layout["x"].split("/")[0] + "/wall_seconds"  # eval/... or round/..., beside the x series
    _, s = read_run_file(path, (layout["x"], layout["accuracy"], layout["events"], bytes_series, wall_series))
    status = _text(attrs.get("status", "finished"))  # files written before the status existed
    target = float(attrs.get("target_accuracy", -1.0) or -1.0)
    x, acc, b, wall = s[layout["x"]], s[layout["accuracy"]].astype(np.float64), s[bytes_series], s[wall_series]
    scored = ~np.isnan(acc)  # semi-asynchronous runs may score every few rounds only
    gigabytes = (float(b[-1]) if how == "cumulative" else float(b.sum())) / 1e9 if len(b) else 0.0
    return Summary(path, status, _text(attrs["strategy"]), layout["workers"], int(x[-1]) if len(x) else 0,
                   len(s[layout["events"]]), gigabytes, float(acc[scored][-1]) if scored.any() else float("nan"),
                   _reached(target, x[scored], acc[scored], wall[scored] if len(wall) == len(x) else wall[:0]),
                   convergence_metrics(acc)["convergence_accuracy"] if layout["convergence"] else float("nan"),
                   float(wall[-1]) if len(wall) else float("nan"))


def provenance_of(path: str) -> list[dict]:
    """The provenance segments a run file records ([] for files written before it existed)."""
    return segments_of(read_run_file(path, ())[0])


def format_provenance(path: str) -> str:
    segments = provenance_of(path)
    if not segments:
        return f"{path}: no provenance recorded (written by an older fdahpc)"
    lines = [f"{path}:"]
    for i, record in enumerate(segments):
        title = "run" if i == 0 else f"resumed at {record.get('started_at')}"
        lines.append(f"  [{title}]")
        lines += [f"    {line}" for line in format_lines(record)]
    return "\n".join(lines)


def format_table(rows: Sequence[Summary]) -> str:
    header = ("status", "strategy", "workers", "steps", "syncs", "GB", "wall s", "accuracy", "conv20", "target", "file")
    lines = [header] + [(r.status, r.strategy, r.workers, str(r.steps), str(r.syncs), f"{r.gigabytes:.4f}",
                         "-" if np.isnan(r.seconds) else f"{r.seconds:.1f}", f"{r.accuracy:.4f}",
                         "-" if np.isnan(r.convergence) else f"{r.convergence:.4f}", r.target, r.path) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(line, widths)), line[-1]]) for line in lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    show_provenance = "--provenance" in args
    args = [a for a in args if a != "--provenance"]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[0] + "\nusage: python -m fdahpc.summary [--provenance] RUN.h5 [RUN.h5 ...]",
              file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    rows, code = [], 0
    for path in args:
        try:
            rows.append(summarize(path))
        except ValueError as exc:
            print(f"fdahpc.summary: {exc}", file=sys.stderr)
            code = 2
    if rows:
        print(format_table(rows))
    if show_provenance:
        for row in rows:
            print("\n" + format_provenance(row.path))
    return code


if __name__ == "__main__":
    sys.exit(main())
