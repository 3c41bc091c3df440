"""GPU checks that ``benchmarks/gpu_check.sh`` runs on a machine with CUDA GPUs.

    python benchmarks/gpu_check.py sketch [--dim 11200000]      # one process, GPU 0
    torchrun --standalone --nproc-per-node N benchmarks/gpu_check.py allreduce [--dim 11200000]

``sketch``: the GPU AMS sketch (``AmsSketch.sketch_torch``) against the CPU Numba
kernel on the same vector (how many entries are bit-identical, as float64 and after
the float32 rounding FDA puts on the wire), then its time against a device-to-device
copy of the same vector (goal <= 5x).

``allreduce``: the communicator's model average (``allreduce_mean_`` on a flat CUDA
buffer) against a raw ``torch.distributed.all_reduce`` of the same buffer over NCCL
(goal <= 1.05x). Ratios come from one run, interleaved, medians of ``--repeats``.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
import torch


def _cuda_time(fn, repeats: int, warmup: int = 3) -> float:
    """Median seconds of ``fn()`` measured with CUDA events (after ``warmup`` calls)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def check_sketch(dim: int, repeats: int) -> int:
    from fdahpc.sketch import AmsSketch

    sk = AmsSketch(dim, rows=5, cols=250, seed=0)
    gen = torch.Generator().manual_seed(0)
    vec = torch.randn(dim, generator=gen) * torch.logspace(-6, 0, dim)[torch.randperm(dim, generator=gen)]
    cpu = sk.sketch(vec.numpy())
    gpu_vec = vec.cuda()
    gpu = sk.sketch_torch(gpu_vec).cpu().numpy()
    same64 = int(np.sum(cpu == gpu))
    same32 = int(np.sum(cpu.astype(np.float32) == gpu.astype(np.float32)))
    rel = float(np.max(np.abs(cpu - gpu)) / np.max(np.abs(cpu)))
    print(f"sketch d={dim}: GPU vs CPU kernel, {same64}/{cpu.size} entries identical in float64, "
          f"{same32}/{cpu.size} after float32 rounding (on the wire), max relative difference {rel:.2e}")
    dst = torch.empty_like(gpu_vec)
    t_copy = _cuda_time(lambda: dst.copy_(gpu_vec), repeats)
    t_sketch = _cuda_time(lambda: sk.sketch_torch(gpu_vec), repeats)
    ratio = t_sketch / t_copy
    print(f"sketch d={dim}: {t_sketch * 1e3:.3f} ms, device-to-device copy {t_copy * 1e3:.3f} ms, "
          f"ratio {ratio:.2f}x (goal <= 5x: {'met' if ratio <= 5 else 'MISSED'})")
    return 0


def check_allreduce(dim: int, repeats: int) -> int:
    import torch.distributed as dist

    from fdahpc.comm import make_communicator
    from fdahpc.params import flat_buffer

    comm = make_communicator("torch", "cuda")
    w = flat_buffer(dim, comm.device).normal_()
    raw = w.clone()
    ours, base = [], []
    for i in range(repeats + 3):  # interleaved: both see the same machine state
        t_ours = _cuda_time(lambda: comm.allreduce_mean_(w, "model"), 1, warmup=0)
        t_raw = _cuda_time(lambda: dist.all_reduce(raw), 1, warmup=0)
        if i >= 3:
            ours.append(t_ours)
            base.append(t_raw)
    ratio = statistics.median(ours) / statistics.median(base)
    if comm.is_root:
        print(f"allreduce d={dim} K={comm.world_size} ({comm.backend}): model average {statistics.median(ours) * 1e3:.3f} ms, "
              f"raw all_reduce {statistics.median(base) * 1e3:.3f} ms, ratio {ratio:.3f}x "
              f"(goal <= 1.05x: {'met' if ratio <= 1.05 else 'MISSED'})")
    comm.close()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("check", choices=("sketch", "allreduce"))
    p.add_argument("--dim", type=int, default=11_200_000, help="vector length (default: ResNet-18's 11.2 M)")
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU visible; run it on a GPU machine", file=sys.stderr)
        return 2
    return (check_sketch if args.check == "sketch" else check_allreduce)(args.dim, args.repeats)


if __name__ == "__main__":
    sys.exit(main())
