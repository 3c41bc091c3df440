#!/usr/bin/env bash
# A multi-node SLURM cluster on this one machine: each node a network namespace with its
# own host name and address, running its own slurmd, so that `sbatch -N 2` jobs span two
# "hosts" and MPI ranks on different nodes talk over TCP (how tests/test_slurm_nodes.py
# gets its nodes; docs/multinode.md says what it builds and what was measured).
#
#   sudo jobs/slurm_nodes.sh start     # N nodes (FDAHPC_SLURM_NODES, default 2); safe to repeat
#   export SLURM_CONF=/run/fdahpc-nodes/slurm.conf   # sbatch, srun, sinfo then use this cluster
#   jobs/slurm_nodes.sh status         # daemons per node and `sinfo`
#   sudo jobs/slurm_nodes.sh stop      # removes everything start made
#
# What start builds: a bridge fdahpc-br0 (10.213.0.1/24, no uplink, no NAT) in the root
# namespace; per node I a namespace fdahpc-nodeI with a veth pair (fdahpc-vI on the bridge,
# eth0 = 10.213.0.(10+I) inside) and /etc/netns/fdahpc-nodeI/hosts naming every node; its
# own munged (socket /run/fdahpc-nodes/munge/munge.socket); one slurmctld in the root
# namespace on 10.213.0.1; per node a slurmd started by `ip netns exec` in a UTS namespace
# whose host name is the node's name. Logs: /var/log/slurm/fdahpc-nodes-*.log.
#
# It never touches jobs/slurm_cluster.sh's one-node cluster: its config is its own file,
# /run/fdahpc-nodes/slurm.conf (export SLURM_CONF to use it), on other ports (6917/6918),
# with its own state, spool, pid files and munged, so both can run at once.
#
# Exit status: 0 ready (one line on stdout); 3 it cannot be had here (not root, no network
# namespaces, SLURM or iproute2 missing and not installable), one line on stderr; 1 any
# other failure, with the end of the daemons' logs; 2 a bad argument or node count. A
# failed or interrupted start removes what it had made (the logs stay).
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin

NODES=${FDAHPC_SLURM_NODES:-2}
CPUS=${FDAHPC_SLURM_CPUS:-4}     # per node, announced whatever the real core count
RUN=/run/fdahpc-nodes            # config, pid files, munge socket: all removed on stop
CONF=$RUN/slurm.conf
SPOOL=/var/spool/fdahpc-nodes
LOG_DIR=/var/log/slurm
BRIDGE=fdahpc-br0
NET=10.213.0
CTLD_PORT=6917
SLURMD_PORT=6918
MUNGE_SOCKET=$RUN/munge/munge.socket
export SLURM_CONF=$CONF

node() { echo "fdahpc-node$1"; }
addr() { echo "$NET.$((10 + $1))"; }

cannot() { echo "slurm_nodes.sh: $*" >&2; exit 3; }
fail() {
  echo "slurm_nodes.sh: $*" >&2
  local f i
  for f in "$RUN/munge/munged.log" "$LOG_DIR/fdahpc-nodes-slurmctld.log" \
           $(for i in $(seq "$NODES"); do echo "$LOG_DIR/fdahpc-nodes-$(node "$i").log"; done); do
    [ -f "$f" ] && { echo "--- tail $f" >&2; tail -n 12 "$f" >&2; }
  done
  exit 1
}

alive() { [ -f "$1" ] && [ -n "$(cat "$1" 2>/dev/null)" ] && [ -d "/proc/$(cat "$1")" ]; }

stop_pid() {  # pid: TERM, wait up to 10 s, then KILL
  local pid=$1
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do [ -d "/proc/$pid" ] || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
}

stop_daemon() { alive "$1" && stop_pid "$(cat "$1")"; rm -f "$1"; }

write_conf() {
  local mem_mb i names
  mem_mb=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) * 9 / 10 / 1024 / NODES ))
  names="$(node 1)"; (( NODES > 1 )) && names="fdahpc-node[1-$NODES]"
  cat <<EOF
# written by fdahpc jobs/slurm_nodes.sh: $NODES nodes in network namespaces on one machine.
# Removed by \`jobs/slurm_nodes.sh stop\`. Use it with: export SLURM_CONF=$CONF
ClusterName=fdahpc-nodes
SlurmctldHost=$(hostname -s)($NET.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
MpiDefault=pmi2
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
EnforcePartLimits=ALL
ReturnToService=2
SlurmdParameters=config_overrides
StateSaveLocation=$SPOOL/ctld
# %n: each slurmd its own spool, pid and log file.
SlurmdSpoolDir=$SPOOL/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/fdahpc-nodes-slurmctld.log
SlurmdLogFile=$LOG_DIR/fdahpc-nodes-%n.log
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=4
KillWait=10
# Every task: UCX (MPICH's default netmod) over TCP, as between real hosts; see write_prolog.
TaskProlog=$RUN/task_prolog.sh
EOF
  for i in $(seq "$NODES"); do
    echo "NodeName=$(node "$i") NodeAddr=$(addr "$i") CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS" \
         "ThreadsPerCore=1 RealMemory=$mem_mb State=UNKNOWN"
  done
  echo "PartitionName=nodes Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
}

reach() {  # namespace address port: a TCP connection from the namespace (no ping needed)
  ip netns exec "$1" timeout 3 bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null
}

write_prolog() {
  cat <<'EOF'
#!/bin/sh
# written by fdahpc jobs/slurm_nodes.sh. The nodes share one kernel, and UCX (MPICH's
# default netmod) sees that and moves inter-node messages through shared memory: the
# bridge would carry almost nothing. Between real hosts it is TCP (or a fabric); so here
# too, unless the job chose its own transports.
[ -n "${UCX_TLS:-}" ] || echo "export UCX_TLS=tcp,self"
EOF
}

hosts_file() {
  local i
  echo "127.0.0.1 localhost"
  echo "$NET.1 $(hostname -s)"
  for i in $(seq "$NODES"); do echo "$(addr "$i") $(node "$i")"; done
}

node_states() { sinfo -h -N -o "%N %T" 2>/dev/null | sort -u || true; }

all_idle() {
  local states
  states=$(node_states)
  [ "$(grep -cE ' (idle|mixed|allocated|completing)$' <<<"$states")" = "$NODES" ]
}

# --- teardown: everything start makes, each piece only if it is there -------------------
teardown() {  # by name, not by count: also what a start with another FDAHPC_SLURM_NODES made
  local ns pid f link
  for f in "$RUN"/slurmd-*.pid; do [ -f "$f" ] && stop_daemon "$f"; done
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^fdahpc-(node[0-9]+|probe)$/ {print $1}'); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do stop_pid "$pid"; done  # job steps left behind
    ip netns del "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^fdahpc-v[0-9]+$'); do
    ip link del "$link" 2>/dev/null || true
  done
  rm -rf /etc/netns/fdahpc-node[0-9]*
  rmdir /etc/netns 2>/dev/null || true  # only when empty: other namespaces' entries stay
  stop_daemon "$RUN/slurmctld.pid"
  stop_daemon "$RUN/munge/munged.pid"
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf "$RUN" "$SPOOL"
}

on_failure() {  # trap: a failed or interrupted start leaves nothing behind
  local rc=$?
  trap - EXIT INT TERM HUP
  teardown >/dev/null 2>&1 || true
  exit "$rc"
}

# --- start -------------------------------------------------------------------------------
check_can() {
  [ "$(id -u)" = 0 ] || cannot "needs root for network namespaces and daemons (try: sudo $0 start)"
  command -v ip >/dev/null || cannot "iproute2's ip is missing; install it: apt-get install iproute2"
  command -v unshare >/dev/null && command -v nsenter >/dev/null \
    || cannot "unshare or nsenter is missing; install util-linux"
  if ! command -v sbatch >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null \
      || cannot "SLURM is not installed and apt-get is not there to install it; install slurm-wlm and munge"
    echo "installing slurm-wlm and munge with apt-get ..." >&2
    { apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge; } \
      >/tmp/fdahpc-slurm-apt.log 2>&1 \
      || cannot "apt-get install slurm-wlm munge failed; see /tmp/fdahpc-slurm-apt.log"
  fi
  # A probe namespace: containers without CAP_SYS_ADMIN or without netns support fail here.
  ip netns del fdahpc-probe 2>/dev/null || true
  ip netns add fdahpc-probe 2>/dev/null \
    || cannot "ip netns add fails (no CAP_SYS_ADMIN or no netns support); run on a VM or host as root"
  if ! nsenter --net=/run/netns/fdahpc-probe unshare --uts --mount true 2>/dev/null; then
    ip netns del fdahpc-probe
    cannot "unshare --uts --mount fails in a network namespace; run on a VM or host as root"
  fi
  ip netns del fdahpc-probe
}

start_munge() {
  mkdir -p "$RUN/munge"
  chown munge:munge "$RUN/munge"
  chmod 0755 "$RUN/munge"
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  runuser -u munge -- munged --socket="$MUNGE_SOCKET" --pid-file="$RUN/munge/munged.pid" \
    --log-file="$RUN/munge/munged.log" --seed-file="$RUN/munge/munged.seed" </dev/null >/dev/null 2>&1 \
    || fail "munged did not start (log above); check /etc/munge/munge.key is owned by munge and mode 0400"
  for _ in $(seq 50); do
    munge -S "$MUNGE_SOCKET" -n </dev/null 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  fail "munged started but does not answer on $MUNGE_SOCKET; see its log above"
}

must() {  # a command whose failure ends the start with its own error line
  local err
  err=$("$@" 2>&1) || fail "'$*' failed: ${err:-no message}; run '$0 stop' and start again"
}

make_network() {
  local i ns
  modprobe bridge 2>/dev/null || true
  ip link add "$BRIDGE" type bridge 2>/dev/null \
    || cannot "cannot create the bridge $BRIDGE (no bridge support in this kernel?); run on a VM or host"
  must ip addr add "$NET.1/24" dev "$BRIDGE"
  must ip link set "$BRIDGE" up
  mkdir -p /etc/netns
  for i in $(seq "$NODES"); do
    ns=$(node "$i")
    must ip netns add "$ns"
    must ip link add "fdahpc-v$i" type veth peer name eth0 netns "$ns"
    must ip link set "fdahpc-v$i" master "$BRIDGE" up
    must ip -n "$ns" link set lo up
    must ip -n "$ns" addr add "$(addr "$i")/24" dev eth0
    must ip -n "$ns" link set eth0 up
    mkdir -p "/etc/netns/$ns"
    hosts_file >"/etc/netns/$ns/hosts"
  done
}

cmd_start() {
  local i ns new
  if [ -r "$CONF" ] && alive "$RUN/slurmctld.pid"; then
    new=$(write_conf)
    if [ "$new" = "$(cat "$CONF")" ] && all_idle; then
      echo "slurm: $NODES nodes ($(node_states | awk '{print $1}' | paste -sd,)) idle, already running;" \
           "SLURM_CONF=$CONF"
      return 0
    fi
  fi
  check_can
  teardown >/dev/null 2>&1 || true  # a previous start that was killed, or another node count
  trap on_failure EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  mkdir -p "$RUN" "$SPOOL/ctld" "$LOG_DIR"
  for f in "$LOG_DIR"/fdahpc-nodes-*.log; do [ -f "$f" ] && : >"$f"; done  # this start's lines only
  write_conf >"$CONF"
  write_prolog >"$RUN/task_prolog.sh"
  chmod 0755 "$RUN/task_prolog.sh"
  start_munge
  make_network
  slurmctld -f "$CONF" </dev/null >>"$LOG_DIR/fdahpc-nodes-slurmctld.log" 2>&1 \
    || fail "slurmctld did not start; its log below says why"
  for _ in $(seq 50); do [[ $(scontrol ping 2>/dev/null) == *UP* ]] && break; sleep 0.2; done
  [[ $(scontrol ping 2>/dev/null) == *UP* ]] \
    || fail "slurmctld does not answer on $NET.1:$CTLD_PORT; if its log says 'Address already in use'," \
            "free port $CTLD_PORT (ss -ltnp shows who has it)"
  for i in $(seq "$NODES"); do
    reach "$(node "$i")" "$NET.1" "$CTLD_PORT" \
      || fail "$(node "$i") cannot reach slurmctld at $NET.1:$CTLD_PORT; allow $BRIDGE in the firewall (iptables -S)"
  done
  for i in $(seq "$NODES"); do
    ns=$(node "$i")
    mkdir -p "$SPOOL/$ns"
    # The node's network (nsenter), its own host name (UTS), which is how slurmd finds its
    # NodeName line and what the job's processes report, and its own mount namespace with
    # /etc/netns/NODE/hosts bound over /etc/hosts. Not `ip netns exec`: it also remounts /sys
    # for the namespace, which hides /sys/fs/cgroup, and slurmd 22.05 then refuses to start
    # ("error: No filesystem mounted on /sys/fs/cgroup"; docs/multinode.md).
    nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private \
      sh -c "mount --bind /etc/netns/$ns/hosts /etc/hosts && hostname $ns && exec slurmd -f $CONF" </dev/null \
      >>"$LOG_DIR/fdahpc-nodes-$ns.log" 2>&1 || fail "slurmd on $ns did not start; its log below says why"
  done
  for i in $(seq 150); do
    all_idle && break
    if (( i % 10 == 1 )); then
      node_states | awk '$2 ~ /^(down|drain|fail)/ {print $1}' | while read -r n; do
        scontrol update NodeName="$n" State=RESUME 2>/dev/null || true
      done
    fi
    sleep 0.2
  done
  for i in $(seq "$NODES"); do
    reach "$(node 1)" "$(addr "$i")" "$SLURMD_PORT" \
      || fail "$(node 1) cannot reach $(node "$i") at $(addr "$i"):$SLURMD_PORT; allow $BRIDGE in the firewall"
  done
  all_idle || fail "not all $NODES nodes idle after 30 s ($(node_states | paste -sd';')); the slurmd logs below say why"
  trap - EXIT INT TERM HUP
  echo "slurm: $NODES nodes ($(node_states | awk '{print $1}' | paste -sd,)) idle, $CPUS CPUs each," \
       "partition nodes; export SLURM_CONF=$CONF"
}

cmd_stop() {
  [ "$(id -u)" = 0 ] || cannot "needs root to stop the daemons and remove the namespaces (try: sudo $0 stop)"
  teardown
  echo "slurm: nodes stopped; namespaces, bridge, $RUN and $SPOOL removed"
}

cmd_status() {
  local ns f
  for f in "$RUN/munge/munged.pid" "$RUN/slurmctld.pid"; do
    if alive "$f"; then echo "$(basename "$f" .pid): running (pid $(cat "$f"))"
    else echo "$(basename "$f" .pid): not running"; fi
  done
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^fdahpc-node[0-9]+$/ {print $1}' | sort -V); do
    if alive "$RUN/slurmd-$ns.pid"; then
      echo "slurmd $ns: running (pid $(cat "$RUN/slurmd-$ns.pid")), $(addr "${ns#fdahpc-node}")"
    else echo "slurmd $ns: not running (namespace $ns exists)"; fi
  done
  if [ -f "$CONF" ]; then sinfo -N 2>&1 || true; else echo "no $CONF: not started"; fi
}

[[ $NODES =~ ^[0-9]+$ ]] && (( NODES >= 1 && NODES <= 200 )) \
  || { echo "slurm_nodes.sh: FDAHPC_SLURM_NODES=$NODES: give a node count from 1 to 200" >&2; exit 2; }
[[ $CPUS =~ ^[0-9]+$ ]] && (( CPUS >= 1 )) \
  || { echo "slurm_nodes.sh: FDAHPC_SLURM_CPUS=$CPUS: give a CPU count of 1 or more" >&2; exit 2; }

case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 start|stop|status (FDAHPC_SLURM_NODES nodes, default 2)" >&2; exit 2 ;;
esac
