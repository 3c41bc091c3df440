#!/usr/bin/env bash
# GPU check of fdahpc, one short script for a machine with CUDA GPUs (about 5 minutes):
#
#   bash benchmarks/gpu_check.sh            # from the repository root, fdahpc installed
#
# 1. Each FDA strategy trains 300 steps with --backend torch --device cuda: N ranks on N
#    GPUs over NCCL, and with one GPU also 2 ranks sharing it over gloo; the same run on
#    the CPU (gloo) is printed beside it (sync steps and accuracy; GPU kernels round
#    differently, so the steps may differ by a few).
# 2. The GPU AMS sketch against the CPU kernel, bit for bit, and its time against a
#    device-to-device copy of an 11.2 M vector (goal <= 5x).
# 3. A model AllReduce through the communicator against raw NCCL (goal <= 1.05x).
# 4. The semi-asynchronous mode with GPU hosts (--device cuda: rank 0 coordinates on the
#    CPU over MPI, 2 hosts train their clients on the GPUs) for FedQS-SGD and FedAvg with
#    --aggregate hosts, beside the same runs on CPU hosts: the same clients aggregated in
#    every round, accuracy within GPU rounding.
# Every figure is printed; the script stops at the first command that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1
OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT"

NGPU=$(python -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
if [ "$NGPU" -eq 0 ]; then
    echo "gpu_check: no CUDA GPU visible; run it on a GPU machine" >&2
    exit 2
fi
python -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'NCCL', torch.cuda.nccl.version(), '|', torch.cuda.get_device_name(0), 'x', torch.cuda.device_count())"

TRAIN=(-m fdahpc.train --dataset mnist5k --model lenet5 --max-steps 300 --eval-every 100 --log-every 100000)
summary() { python -c "
import h5py, sys
f = h5py.File(sys.argv[1], 'r'); a = f.attrs
print(f'{sys.argv[2]:<34} status {a[\"status\"]}  K {a[\"world_size\"]}  syncs {a[\"syncs\"]}  first syncs {f[\"sync/step\"][:6].tolist() if \"sync/step\" in f else []}  accuracy {a[\"final_accuracy\"]:.4f}  {a[\"wall_seconds\"]:.1f} s')
" "$1" "$2"; }

for strategy in linearfda sketchfda; do
    run() {  # label, ranks, extra flags...
        local label=$1 ranks=$2; shift 2
        torchrun --standalone --nproc-per-node "$ranks" "${TRAIN[@]}" --strategy "$strategy" "$@" \
            --out "$OUT/$strategy-$label.h5" > "$OUT/$strategy-$label.log" 2>&1 \
            || { echo "FAILED: $strategy $label (log: $OUT/$strategy-$label.log)"; tail -20 "$OUT/$strategy-$label.log"; exit 1; }
        summary "$OUT/$strategy-$label.h5" "$strategy $label"
    }
    run "nccl-${NGPU}gpu" "$NGPU" --backend torch --device cuda
    if [ "$NGPU" -eq 1 ]; then
        run "gloo-2ranks-1gpu" 2 --backend gloo --device cuda
    fi
    CPU_RANKS=$(( NGPU > 1 ? NGPU : 2 ))
    run "cpu-gloo-${CPU_RANKS}ranks" "$CPU_RANKS" --backend gloo --device cpu
done

python benchmarks/gpu_check.py sketch --dim 11200000
torchrun --standalone --nproc-per-node "$NGPU" benchmarks/gpu_check.py allreduce --dim 11200000
SEMI=(--mode semiasync --dataset mnist5k --model lenet5bn --clients 20 --buffer 5 --rounds 30 --tau 5
      --partition dirichlet:0.5 --eval-every 10 --log-every 100000)
for rule in "fedqs-sgd" "fedavg --aggregate hosts"; do
    tag=${rule%% *}
    for device in cuda cpu; do
        mpiexec -n 3 python -m fdahpc.train "${SEMI[@]}" --strategy $rule --device "$device" \
            --out "$OUT/semiasync-$tag-$device.h5" > "$OUT/semiasync-$tag-$device.log" 2>&1 \
            || { echo "FAILED: semiasync $rule $device (log: $OUT/semiasync-$tag-$device.log)"; tail -20 "$OUT/semiasync-$tag-$device.log"; exit 1; }
    done
    python -c "
import h5py, numpy as np, sys
g, c = (h5py.File(f'{sys.argv[1]}/semiasync-{sys.argv[2]}-{d}.h5', 'r') for d in ('cuda', 'cpu'))
same = np.array_equal(g['round/clients'][:], c['round/clients'][:])
print(f'semiasync {sys.argv[2]:<10} GPU hosts accuracy {g.attrs[\"final_accuracy\"]:.4f}  CPU hosts {c.attrs[\"final_accuracy\"]:.4f}  '
      f'same clients every round: {same}  {g.attrs[\"wall_seconds\"]:.1f} s vs {c.attrs[\"wall_seconds\"]:.1f} s')
sys.exit(0 if same else 1)
" "$OUT" "$tag"
done
echo "gpu_check: done (run files and logs in $OUT)"
