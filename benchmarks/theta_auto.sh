#!/bin/sh
# The --theta auto comparison of docs/theta_auto.md: the per-round rule (default horizon,
# 1 epoch) on three frontier settings, seed 0, beside the one-calibration rule (auto-once)
# and the tuned Θ grid measured before in benchmarks/results/frontier.csv (same settings, seed, caps).
# benchmarks/results/theta_auto_base.csv holds frontier.csv's rows of these settings and targets.
# Resumable (--resume reuses finished runs of the same rule; a changed rule needs a fresh
# --workdir, as here); run from the repository root:
#   PYTHONPATH=$PWD nice -n 10 sh benchmarks/theta_auto.sh
set -e
common="--only auto --auto-rules auto --auto-round-epochs 1 --seeds 0 --resume --workdir runs/frontier-auto2"
python benchmarks/frontier.py --settings "lenet5/iid@4=0.88" $common --merge benchmarks/results/theta_auto_base.csv --out benchmarks/results/theta_auto
python benchmarks/frontier.py --settings "lenet5/dirichlet:0.1@4/adam:0.001=0.7" --max-epochs 6 $common --merge benchmarks/results/theta_auto.csv --out benchmarks/results/theta_auto
python benchmarks/frontier.py --settings "lenet5/classes:2@4/sgd:0.1=0.55" --max-epochs 6 $common --merge benchmarks/results/theta_auto.csv --out benchmarks/results/theta_auto
