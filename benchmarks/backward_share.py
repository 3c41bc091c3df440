"""The backward pass's share of a training step, per model, on this CPU (one thread).

    python benchmarks/backward_share.py        # prints the shares, writes benchmarks/results/backward_share.txt

A synchronous step under DDP starts each gradient bucket's AllReduce as soon as the backward
pass has produced it, so the model AllReduce hides behind the backward pass; the forward pass
and the optimizer step (which needs the averaged gradient) do not overlap it.
``time_to_accuracy.py`` prices a synchronous step as ``(1 − b)·compute + max(b·compute, T)``
with ``b`` the share measured here (its ``BACKWARD_SHARE``): the median over the repeats of
backward / (forward + backward + optimizer step), each part timed on its own. The share with
the optimizer step counted as backward is printed beside it.

Inputs as the runs': batch 32 of 1×28×28 images, 10 classes (FashionMNIST) for ``lenet5`` and
``cnn``; batch 32 of 64-character windows over Shakespeare's 77 characters for ``gpt`` (its
defaults: 4 layers, 4 heads, width 64, 209 088 parameters); cross-entropy loss, Adam (the
presets' optimizer). Wall time (``time.perf_counter``) after a warm-up; a machine with other
load moves all three parts, not only one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import _common  # noqa: F401  (fdahpc importable from a plain checkout)
from _common import REPO_ROOT, RESULTS

BATCH, CONTEXT, VOCAB = 32, 64, 77
MODELS = ("lenet5", "cnn", "gpt")


def parse(argv=None) -> argparse.Namespace:
    # usage suppressed: a bad flag is one line on stderr (the problem and its fix), exit 2
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage=argparse.SUPPRESS)
    p.add_argument("--repeats", type=int, default=40, help="timed steps per model, after the warm-up (default 40)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    p.add_argument("--out", default=os.path.join(RESULTS, "backward_share.txt"))
    args = p.parse_args(argv)
    if args.repeats < 20:
        p.error(f"--repeats {args.repeats}: the median needs at least 20 repeats; give e.g. --repeats 40")
    if args.warmup < 1:
        p.error(f"--warmup {args.warmup}: give at least one untimed step, e.g. --warmup 5")
    return args


def build(name: str):
    """(model, a batch's inputs, its targets) as the runs feed them."""
    import torch

    from fdahpc.models import build_model, build_text_model

    torch.manual_seed(0)
    if name == "gpt":
        x = torch.randint(0, VOCAB, (BATCH, CONTEXT))
        return build_text_model("gpt", VOCAB), x, torch.randint(0, VOCAB, (BATCH, CONTEXT))
    return build_model(name, 1, 28, 10), torch.randn(BATCH, 1, 28, 28), torch.randint(0, 10, (BATCH,))


def time_parts(name: str, repeats: int, warmup: int) -> list[tuple[float, float, float]]:
    """(forward + loss, backward, optimizer step) seconds of each timed step."""
    import torch

    from fdahpc.models import flat_outputs

    model, x, y = build(name)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    out = []
    for i in range(warmup + repeats):
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = loss_fn(*flat_outputs(model(x), y))
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if i >= warmup:
            out.append((t1 - t0, t2 - t1, t3 - t2))
    return out


def main(argv=None) -> int:
    import torch

    args = parse(argv)
    torch.set_num_threads(1)
    lines = [f"python {os.path.relpath(__file__, REPO_ROOT)}" + "".join(f" {a}" for a in (argv or sys.argv[1:])),
             f"torch {torch.__version__}, 1 thread, batch {BATCH}, {args.warmup} warm-up + {args.repeats} timed steps "
             f"per model, medians over the timed steps",
             "backward share = backward / (forward + backward + optimizer step): the part an AllReduce can hide behind",
             f"{'model':8} {'params':>8} {'forward ms':>10} {'backward ms':>11} {'optim ms':>8} {'step ms':>8} "
             f"{'backward share':>14} {'with optim':>10}"]
    for name in MODELS:
        parts = time_parts(name, args.repeats, args.warmup)
        f, b, o = (statistics.median(p[i] for p in parts) for i in range(3))
        share = statistics.median(p[1] / sum(p) for p in parts)
        with_opt = statistics.median((p[1] + p[2]) / sum(p) for p in parts)
        n = sum(p.numel() for p in build(name)[0].parameters())
        lines.append(f"{name:8} {n:>8} {f * 1e3:>10.3f} {b * 1e3:>11.3f} {o * 1e3:>8.3f} {(f + b + o) * 1e3:>8.3f} "
                     f"{share:>14.3f} {with_opt:>10.3f}")
    print("\n".join(lines))
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
