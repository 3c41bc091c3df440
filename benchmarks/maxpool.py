"""The models' 2x2 max-pooling (``fdahpc.models.MaxPool2``) against torch's ``nn.MaxPool2d(2)``.

``MaxPool2`` computes the forward as elementwise maxima of the input's four strided
quarters and, under autograd, sends the gradient to each window's first maximum through
torch's own scatter. This prints, per case, the CPU time of torch's module and of ``MaxPool2`` (median over repeats,
the two alternated, one thread, process CPU time so other load does not inflate it) and
their ratio:

- the pooling alone without autograd, at LeNet-5's two pooling shapes (batch 50 and 1000),
  and forward + backward at batch 50;
- scoring 10,000 28x28 images with ``fdahpc.evaluate.score`` (its default batch), for
  ``lenet5bn`` and ``cnn``: every evaluation of the image models;
- a training step of ``lenet5bn`` (batch 50, forward, backward, SGD).

It also checks that the two give the same values, gradients and scores.

    python benchmarks/maxpool.py [--repeats 15]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from _common import alternated_cpu_medians
from fdahpc.evaluate import score
from fdahpc.models import MaxPool2, build_model


def with_torch_pool(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose MaxPool2 modules are torch's nn.MaxPool2d(2)."""
    import copy

    ref = copy.deepcopy(model)
    for name, m in list(ref.named_modules()):
        for child, sub in list(m.named_children()):
            if type(sub) is MaxPool2:
                setattr(m, child, nn.MaxPool2d(2))
    return ref


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    pairs = {}
    for shape in ((50, 6, 28, 28), (50, 16, 10, 10), (1000, 6, 28, 28), (1000, 16, 10, 10)):
        x = torch.relu(torch.randn(shape, generator=g))
        ref, fast = nn.MaxPool2d(2), MaxPool2()
        with torch.no_grad():
            assert torch.equal(ref(x), fast(x))
        pairs[f"pool {tuple(shape)}, no autograd"] = (torch.no_grad()(lambda x=x, m=ref: m(x)),
                                                      torch.no_grad()(lambda x=x, m=fast: m(x)))
    for shape in ((50, 6, 28, 28), (50, 16, 10, 10)):
        x = torch.relu(torch.randn(shape, generator=g)).requires_grad_(True)
        up = torch.randn(shape[0], shape[1], shape[2] // 2, shape[3] // 2, generator=g)
        grads = [torch.autograd.grad(m(x), x, up)[0] for m in (nn.MaxPool2d(2), MaxPool2())]
        assert torch.equal(*grads)
        pairs[f"pool {tuple(shape)}, forward + backward"] = tuple(
            (lambda x=x, m=m, up=up: m(x).backward(up)) for m in (nn.MaxPool2d(2), MaxPool2()))
    images = torch.rand(10_000, 1, 28, 28, generator=g)
    labels = torch.randint(0, 10, (10_000,), generator=g)
    for name in ("lenet5bn", "cnn"):
        torch.manual_seed(0)
        fast = build_model(name, 1, 28, 10)
        ref = with_torch_pool(fast)
        a, b = score(ref, images, labels), score(fast, images, labels)
        assert (a.correct, a.loss_sum) == (b.correct, b.loss_sum), (a, b)
        pairs[f"score {name}, 10,000 images"] = (lambda m=ref: score(m, images, labels),
                                                 lambda m=fast: score(m, images, labels))
    torch.manual_seed(0)
    fast = build_model("lenet5bn", 1, 28, 10)
    ref = with_torch_pool(fast)
    batch, target = images[:50], labels[:50]

    def step(model, opt):
        opt.zero_grad()
        nn.functional.cross_entropy(model(batch), target).backward()
        opt.step()

    opts = {id(m): torch.optim.SGD(m.parameters(), lr=0.01) for m in (ref, fast)}
    pairs["train step lenet5bn, batch 50"] = (lambda: step(ref, opts[id(ref)]), lambda: step(fast, opts[id(fast)]))
    print(f"# python benchmarks/maxpool.py --repeats {args.repeats}   (torch {torch.__version__}, "
          f"{torch.backends.cpu.get_cpu_capability()}, one thread, CPU time, medians)")
    print(f"{'case':45s} {'nn.MaxPool2d ms':>16s} {'MaxPool2 ms':>12s} {'ratio':>7s}")
    for case, (r, f) in alternated_cpu_medians(pairs, args.repeats).items():
        print(f"{case:45s} {1e3 * r:16.3f} {1e3 * f:12.3f} {r / f:6.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
