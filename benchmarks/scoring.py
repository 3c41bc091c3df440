"""How fast ``fdahpc.evaluate.score`` scores a test set at each batch size, on the CPU.

Every evaluation (the semi-asynchronous server's after each aggregation, the synchronous
evaluator's on each rank's slice) goes through ``score``, which feeds the model one batch
at a time. This prints, per model, the CPU time of scoring at several batch sizes (median
over repeats, the sizes alternated, one thread, process CPU time) and each one's speed-up
over batches of 1000 (fdahpc's earlier default); the row marked ``*`` is the default on
the CPU (``fdahpc.evaluate.CPU_SCORE_BATCH``). It also checks what the batch size must not
change: every sample's logits (so the correct count) are the same at every size, bit for
bit, and the loss sum agrees to float rounding.

The models at the sizes fdahpc trains them: ``lenet5bn`` and ``cnn`` on 10,000 28x28
images, the Shakespeare ``lstm`` on 2,000 windows of 80 characters, the default ``gpt`` on
1,000 windows of its context.

    python benchmarks/scoring.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import math

import torch

from _common import alternated_cpu_medians
from fdahpc.evaluate import CPU_SCORE_BATCH, score
from fdahpc.models import TextModelOptions, build_model, build_text_model

SIZES = (1000, 500, 256, 128, 64)
VOCAB = 80


def cases(g: torch.Generator) -> dict:
    """{model: (model, x, y)} with random inputs and labels (the time does not depend on them)."""
    images = torch.rand(10_000, 1, 28, 28, generator=g)
    labels = torch.randint(0, 10, (10_000,), generator=g)
    torch.manual_seed(0)
    out = {name: (build_model(name, 1, 28, 10), images, labels) for name in ("lenet5bn", "cnn")}
    out["lstm"] = (build_text_model("lstm", VOCAB), torch.randint(0, VOCAB, (2000, 80), generator=g),
                   torch.randint(0, VOCAB, (2000,), generator=g))
    gpt = build_text_model("gpt", VOCAB, TextModelOptions())
    out["gpt"] = (gpt, torch.randint(0, VOCAB, (1000, gpt.context), generator=g),
                  torch.randint(0, VOCAB, (1000, gpt.context), generator=g))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    sizes = sorted(set(SIZES) | {CPU_SCORE_BATCH}, reverse=True)
    timing = {}
    for name, (model, x, y) in cases(torch.Generator().manual_seed(0)).items():
        model.eval()
        with torch.no_grad():
            whole = torch.cat([model(x[i : i + max(sizes)]) for i in range(0, len(x), max(sizes))])
            for b in sizes:
                assert torch.equal(torch.cat([model(x[i : i + b]) for i in range(0, len(x), b)]), whole), (name, b)
        scores = [score(model, x, y, batch_size=b) for b in sizes]
        assert len({s.correct for s in scores}) == 1, (name, scores)
        assert all(math.isclose(s.loss_sum, scores[0].loss_sum, rel_tol=1e-6) for s in scores), (name, scores)
        timing[name] = alternated_cpu_medians({name: [lambda b=b, m=model, x=x, y=y: score(m, x, y, batch_size=b)
                                                      for b in sizes]}, args.repeats)[name]
    print(f"# python benchmarks/scoring.py --repeats {args.repeats}   (torch {torch.__version__}, "
          f"{torch.backends.cpu.get_cpu_capability()}, one thread, CPU time, medians; * the CPU default)")
    print(f"{'model':10s} {'batch':>6s} {'ms':>10s} {'vs 1000':>8s}")
    for name, times in timing.items():
        ref = times[sizes.index(1000)]
        for b, t in zip(sizes, times):
            print(f"{name:10s} {b:6d}{'*' if b == CPU_SCORE_BATCH else ' '} {1e3 * t:9.1f} {ref / t:7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
