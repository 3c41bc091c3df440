#!/usr/bin/env bash
# The time model checked against a real slow link (issue 40, item 6).
#
#   benchmarks/slow_link.sh [RATE ...]        # as root; default rates: 1gbit 100mbit 10mbit
#
# Makes two network namespaces (fdasl_a, fdasl_b) joined by one veth pair on a /30 that
# exists only between them (10.231.0.1 - 10.231.0.2), shapes each end's egress with tc
# (tbf at RATE; a netem delay when the kernel has netem), runs 2 ranks of
# torch.distributed over gloo/TCP, one rank in each namespace (benchmarks/slow_link.py),
# and writes benchmarks/results/slow_link.csv and benchmarks/results/slow_link.txt. Everything it made is
# removed on exit, also on an error or Ctrl-C; the whole script is bounded by
# SLOW_LINK_TIMEOUT seconds (default 1800), each job inside it by slow_link.py's own timeout.
# SLOW_LINK_PASSES (default 2): how many times each method runs per rate.
# Traffic goes only to the two addresses above, both ends our own namespaces.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
NS_A=fdasl_a NS_B=fdasl_b DEV_A=fdasl0 DEV_B=fdasl1
ADDR_A=10.231.0.1 ADDR_B=10.231.0.2
DELAY_MS="${SLOW_LINK_DELAY_MS:-5}"   # one-way delay per end, asked of netem
RATES=("$@")
[ ${#RATES[@]} -eq 0 ] && RATES=(1gbit 100mbit 10mbit)
CSV="$HERE/results/slow_link.csv"
TXT="$HERE/results/slow_link.txt"

if [ "$(id -u)" != 0 ]; then
    echo "slow_link.sh: network namespaces and tc need root; run it as root (sudo benchmarks/slow_link.sh)" >&2
    exit 2
fi
for ns in "$NS_A" "$NS_B"; do
    if ip netns list | grep -qw "$ns"; then
        echo "slow_link.sh: namespace $ns already exists (an earlier run still going?); remove it with 'ip netns del $ns'" >&2
        exit 2
    fi
done

made=()
cleanup() {
    # Deleting a namespace deletes the veth end inside it and with it its peer and qdiscs.
    for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for ns in "$NS_A" "$NS_B"; do ip netns add "$ns"; made+=("$ns"); done
ip link add "$DEV_A" netns "$NS_A" type veth peer name "$DEV_B" netns "$NS_B"
ip -n "$NS_A" addr add "$ADDR_A/30" dev "$DEV_A"
ip -n "$NS_B" addr add "$ADDR_B/30" dev "$DEV_B"
for pair in "$NS_A $DEV_A" "$NS_B $DEV_B"; do
    set -- $pair
    ip -n "$1" link set lo up
    ip -n "$1" link set "$2" up
done

# A delay needs netem; try it once and record exactly what the kernel said.
DELAY_NOTE=""
if err=$(ip netns exec "$NS_A" tc qdisc add dev "$DEV_A" root netem delay "${DELAY_MS}ms" 2>&1); then
    ip netns exec "$NS_A" tc qdisc del dev "$DEV_A" root
    USE_NETEM=1
else
    USE_NETEM=0
    DELAY_NOTE="no added delay: 'tc qdisc add dev $DEV_A root netem delay ${DELAY_MS}ms' failed: $err"
fi

rm -f "$CSV"
for rate in "${RATES[@]}"; do
    for pair in "$NS_A $DEV_A" "$NS_B $DEV_B"; do
        set -- $pair
        if [ "$USE_NETEM" = 1 ]; then
            ip netns exec "$1" tc qdisc replace dev "$2" root netem delay "${DELAY_MS}ms" rate "$rate"
        else
            # burst 64 KB: at least one GSO super-packet; latency: the queue a sender may fill
            ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$rate" burst 64kb latency 200ms
        fi
    done
    shaping="$(ip netns exec "$NS_A" tc qdisc show dev "$DEV_A" | head -1)"
    nice -n 10 timeout "${SLOW_LINK_TIMEOUT:-1800}" python "$HERE/slow_link.py" measure --rate "$rate" --csv "$CSV" \
        --ns "$NS_A,$NS_B" --dev "$DEV_A,$DEV_B" --addr "$ADDR_A" --shaping "$shaping" --passes "${SLOW_LINK_PASSES:-2}"
done
python "$HERE/slow_link.py" report --csv "$CSV" --command "benchmarks/slow_link.sh ${RATES[*]}" \
    --note "$DELAY_NOTE" > "$TXT"
cat "$TXT"
