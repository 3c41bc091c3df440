"""FedQS Mod①'s cosine from AMS sketches (``--fedqs-sketch-similarity``) against the exact one.

    python benchmarks/fedqs_sketch.py                      # lenet5bn and cnn, 20 clients, 10 hash seeds

Real updates, not random vectors: from one initial model, each of N clients (MNIST-5k,
Dirichlet 0.1 labels) runs one local job of ``--steps`` SGD steps; the global step is their
mean (what FedAvg would apply). For every client the exact cosine of its update with the
global step is compared with the sketched one (5 x 250 sketches, the default, over
``--hash-seeds`` hash draws). Printed per model: the mean, 95th percentile and largest
absolute error, how often the paper variant's classification ``s_i < s̄`` flips, and the
bytes a client keeps (4·d for the update, 4·l·m for its sketch).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

import _common  # noqa: F401
from _common import print_report


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="lenet5bn,cnn")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--hash-seeds", type=int, default=10)
    return p.parse_args(argv)


def updates(model_name: str, clients: int, steps: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Each client's update from one initial model, and their mean."""
    from fdahpc.data import load_dataset, partition
    from fdahpc.models import build_model
    from fdahpc.params import FlatParams
    from fdahpc.worker import BatchStream, local_steps, make_optimizer

    data = load_dataset("mnist5k", None, seed=0)
    parts = partition(data.y_train, clients, "dirichlet:0.1", 0)
    torch.manual_seed(0)
    model = build_model(model_name, data.x_train.shape[1], data.x_train.shape[2], data.num_classes)
    flat = FlatParams(model)
    w0 = flat.w.clone()
    deltas = []
    for c, rows in enumerate(parts):
        flat.w.copy_(w0)
        batches = BatchStream(data.x_train[rows], data.y_train[rows], 32, 0, c)
        opt = make_optimizer("sgd", 0.1, model.parameters(), 0.0)
        local_steps(model, batches, steps, opt.step, opt.zero_grad)
        deltas.append(flat.w - w0)
    return deltas, torch.stack(deltas).mean(0)


def main(argv=None) -> int:
    from fdahpc.aggregate import sketch_cosine
    from fdahpc.semiasync.fedqs import similarity
    from fdahpc.sketch import AmsSketch

    args = parse(argv)
    torch.set_num_threads(1)
    rows = []
    for name in args.models.split(","):
        deltas, g = updates(name, args.clients, args.steps)
        exact = np.array([similarity(d, g, "cosine") for d in deltas])
        errors, flips = [], []
        for seed in range(args.hash_seeds):
            sk = AmsSketch(g.numel(), seed=seed)
            sk_g = sk.sketch(g).astype(np.float32)
            est = np.array([sketch_cosine(sk.sketch(d).astype(np.float32), sk_g) for d in deltas])
            errors.append(np.abs(est - exact))
            flips.append(np.mean((est < est.mean()) != (exact < exact.mean())))
        err = np.concatenate(errors)
        rows.append([name, g.numel(), f"{exact.min():.2f}..{exact.max():.2f}", f"{err.mean():.3f}",
                     f"{np.quantile(err, 0.95):.3f}", f"{err.max():.3f}", f"{100 * np.mean(flips):.1f}",
                     f"{4 * g.numel() / 1e6:.2f} MB", f"{4 * sk.rows * sk.cols / 1e3:.1f} KB"])
    print_report(f"FedQS Mod① cosine, sketched (5 x 250) against exact: {args.clients} clients, {args.steps} SGD steps "
                 f"each, {args.hash_seeds} hash seeds",
                 ["model", "d", "exact cosines", "mean |err|", "p95 |err|", "max |err|", "class flips %",
                  "update kept", "sketch kept"], rows,
                 "class flips: clients whose strongly/weakly biased classification (s_i < mean s) differs from the exact one.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
