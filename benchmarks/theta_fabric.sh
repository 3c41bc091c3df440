#!/bin/sh
# The runs of tuning-free FDA on stated hardware: for each frontier setting named (default:
# the six settings of docs/theta_auto.md), --theta auto at every (horizon H,
# check cadence m) that --theta-fabric picks in one of the per-row report's rows (fabric x
# step time x model size), seed 0, into benchmarks/results/frontier_fabric.csv; FAMILY
# (default linearfda) names the strategy, e.g. FAMILY=diloco+linear for DiLoCo's outer step
# with rounds ended by LinearFDA's trigger. The commands come from `time_to_accuracy.py
# --cadences`, which lists only what that CSV lacks, so the script resumes where it stopped.
# With DILOCO=50,500 (say) each setting's DiLoCo runs of those H follow, into the same CSV.
# From the repository root:
#   nice -n 10 sh benchmarks/theta_fabric.sh [SETTING ...]
#   python benchmarks/time_to_accuracy.py     # the report, with 'linearfda auto (fabric)' rows
set -e
[ $# -gt 0 ] || set -- lenet5/iid@4 lenet5/dirichlet:0.1@4/adam:0.001 lenet5/classes:2@4/sgd:0.1 lenet5/sorted:60@8 \
    lenet5/dirichlet:0.1@8/sgd:0.1 lenet5/classes:2@8/sgd:0.1
family=${FAMILY:-linearfda}
out=benchmarks/results/frontier_fabric
for setting in "$@"; do
    cmd=$(python benchmarks/time_to_accuracy.py --cadences --tuning-free "$family auto (fabric)" \
        | grep -F -e "--settings $setting " || true)
    if [ -n "$cmd" ]; then echo "# $cmd"; eval "$cmd"; else echo "# $setting: every $family cadence ran"; fi
    if [ -n "${DILOCO:-}" ]; then
        merge=$([ -f $out.csv ] && echo "--merge $out.csv" || true)
        echo "# diloco $setting $DILOCO"
        flags=$(python benchmarks/time_to_accuracy.py --run-flags-of "$setting")  # targets and cap, as --cadences gives
        python benchmarks/frontier.py --settings "$setting" $flags --only diloco --diloco-steps "$DILOCO" --seeds 0 \
            --resume --out $out $merge
    fi
done
