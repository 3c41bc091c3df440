#!/usr/bin/env bash
# A one-node SLURM cluster on this machine: enough to submit the job scripts in jobs/ with
# sbatch and watch them run, on a laptop, a VM or a CI runner (it is how tests/test_slurm.py
# gets its cluster).
#
#   sudo jobs/slurm_cluster.sh start    # install, configure and start; safe to repeat
#   jobs/slurm_cluster.sh status        # daemons and `sinfo`
#   sudo jobs/slurm_cluster.sh stop     # stop slurmd, slurmctld and munged
#
# `start` installs Debian's slurm-wlm and munge with apt-get when sbatch is missing,
# writes /etc/slurm/slurm.conf (and refuses to replace one this script did not write),
# starts munged, slurmctld and slurmd directly (no systemd needed; everything runs as
# root, SlurmUser=root) and returns once `sinfo` shows the node up. The node announces
# FDAHPC_SLURM_CPUS CPUs (default 8) whatever the real core count, so a 2-core machine
# takes jobs of up to 8 tasks; they share the real cores. Logs: /var/log/slurm/.
#
# Exit status: 0 ready (one line on stdout); 3 SLURM cannot be had here (not root, no
# apt-get, someone else's slurm.conf), one line on stderr; 1 any other failure, with
# the end of the daemons' logs.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin   # munged, slurmctld and slurmd live in sbin

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
MARK="# written by fdahpc jobs/slurm_cluster.sh"
LOG_DIR=/var/log/slurm
CPUS=${FDAHPC_SLURM_CPUS:-8}
NODE=$(hostname -s)

cannot() { echo "slurm_cluster.sh: $*" >&2; exit 3; }
fail() {
  echo "slurm_cluster.sh: $*" >&2
  for f in "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log"; do
    [ -f "$f" ] && { echo "--- tail $f" >&2; tail -n 15 "$f" >&2; }
  done
  exit 1
}

# A pid file naming a live process (/proc rather than kill -0: that fails for non-root).
alive() { [ -f "$1" ] && [ -n "$(cat "$1")" ] && [ -d "/proc/$(cat "$1")" ]; }

node_state() { sinfo -h -n "$NODE" -o %T 2>/dev/null | head -n 1 || true; }

write_conf() {  # the config on stdout
  local mem_kb
  mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
  # Announce a little less memory than there is; jobs ask for --mem-per-cpu against it.
  local mem_mb=$(( mem_kb * 9 / 10 / 1024 ))
  cat <<EOF
$MARK: a one-node cluster for trying the job scripts.
# Remove this file (or the line above) before configuring a real cluster on this host.
ClusterName=fdahpc
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=pmi2
MailProg=/bin/true
# No cgroups (containers, VMs without systemd): plain process tracking, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Reject at submission a job that can never fit, instead of leaving it pending forever
# (which would leave \`sbatch --wait\` waiting forever).
EnforcePartLimits=ALL
ReturnToService=2
# Believe the node line below rather than the hardware: more CPUs than cores.
SlurmdParameters=config_overrides
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
# Forget finished jobs after a few seconds (no accounting here): \`sbatch --wait\` polls every
# 2 s only while its poll interval is under MinJobAge/2; at the default 300 it backs off to
# 32 s and a 10-s job takes 42 s to report.
MinJobAge=4
KillWait=10
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

start_munge() {
  if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  chmod 0755 /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  rm -f /run/munge/munged.pid
  runuser -u munge -- munged </dev/null >/dev/null 2>&1 || fail "munged did not start (see /var/log/munge/munged.log)"
  for _ in $(seq 50); do
    munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  fail "munged started but does not answer (see /var/log/munge/munged.log)"
}

stop_daemon() {  # pidfile: TERM the process it names, wait up to 10 s
  local pidfile=$1 pid
  alive "$pidfile" || return 0
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
}

cmd_start() {
  local new
  new=$(write_conf)
  if command -v sinfo >/dev/null && [ -f "$CONF" ] && [ "$new" = "$(cat "$CONF")" ] \
      && alive /run/slurmctld.pid && alive /run/slurmd.pid \
      && [[ $(node_state) =~ ^(idle|mixed|allocated|completing)$ ]]; then
    echo "slurm: node $NODE $(node_state), ${CPUS} CPUs, already running"
    return 0
  fi
  [ "$(id -u)" = 0 ] || cannot "needs root to install and start SLURM (try: sudo $0 start)"
  if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
    cannot "$CONF exists and was not written by this script; not replacing a real cluster's config"
  fi
  if ! command -v sbatch >/dev/null || ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || cannot "SLURM is not installed and apt-get is not available to install slurm-wlm and munge"
    echo "installing slurm-wlm and munge with apt-get ..." >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge; } \
      >/tmp/fdahpc-slurm-apt.log 2>&1 \
      || cannot "apt-get install slurm-wlm munge failed (log: /tmp/fdahpc-slurm-apt.log)"
    command -v sbatch >/dev/null || cannot "slurm-wlm installed but sbatch not on PATH"
  fi

  mkdir -p "$CONF_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd
  if [ ! -f "$CONF" ] || [ "$new" != "$(cat "$CONF")" ]; then  # a changed config: restart
    stop_daemon /run/slurmd.pid
    stop_daemon /run/slurmctld.pid
    printf '%s\n' "$new" >"$CONF"
  fi

  start_munge
  if ! alive /run/slurmctld.pid; then
    slurmctld </dev/null >>"$LOG_DIR/slurmctld.stdout" 2>&1 || fail "slurmctld did not start"
  fi
  ctld_up() { [[ $(scontrol ping 2>/dev/null) == *UP* ]]; }
  for _ in $(seq 50); do ctld_up && break; sleep 0.2; done
  ctld_up || fail "slurmctld does not answer"
  if ! alive /run/slurmd.pid; then
    slurmd </dev/null >>"$LOG_DIR/slurmd.stdout" 2>&1 || fail "slurmd did not start"
  fi

  local state=""
  for i in $(seq 150); do
    state=$(node_state)
    case $state in
      idle|mixed|allocated|completing) break ;;
      down*|drain*|fail*)  # e.g. after an unclean stop: put it back in service, every 2 s
        if (( i % 10 == 1 )); then scontrol update NodeName="$NODE" State=RESUME 2>/dev/null || true; fi ;;
    esac
    sleep 0.2
  done
  [[ $state =~ ^(idle|mixed|allocated|completing)$ ]] || fail "node $NODE is '${state:-unknown}' after 30 s, not idle"
  echo "slurm: node $NODE $state, ${CPUS} CPUs, partition debug ($(sinfo -V))"
}

cmd_stop() {
  [ "$(id -u)" = 0 ] || cannot "needs root to stop the daemons (try: sudo $0 stop)"
  stop_daemon /run/slurmd.pid
  stop_daemon /run/slurmctld.pid
  stop_daemon /run/munge/munged.pid
  echo "slurm: stopped"
}

cmd_status() {
  local d
  for d in /run/munge/munged.pid /run/slurmctld.pid /run/slurmd.pid; do
    if alive "$d"; then echo "$(basename "$d" .pid): running (pid $(cat "$d"))"; else echo "$(basename "$d" .pid): not running"; fi
  done
  if command -v sinfo >/dev/null; then sinfo 2>&1 || true; else echo "sinfo: not installed"; fi
}

case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
