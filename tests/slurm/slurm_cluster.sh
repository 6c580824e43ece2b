#!/usr/bin/env bash
# A one-host Slurm cluster in a directory of its own, for the Slurm tests: munged, slurmctld and
# slurmd with their configuration, keys, state, logs and sockets all under DIR, on free ports,
# so that it neither needs nor touches /etc/slurm or a system munged.
#
#   slurm_cluster.sh start DIR   start it; prints `SLURM_CONF=DIR/slurm.conf` once the node is
#                                idle (the variable every Slurm command of the test needs)
#   slurm_cluster.sh stop DIR    stop the three daemons (by the pids they wrote); idempotent
#
# Needs root (slurmd runs jobs as their users) and Debian's slurm-wlm and munge. Exit 2 names
# what is missing; exit 1 shows the end of the daemon's log that did not come up.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1
dir=$2

stop() {
  for daemon in slurmd slurmctld munged; do
    local pidfile="$dir/$daemon.pid"
    [ -f "$pidfile" ] || continue
    local pid
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
}

# A TCP port no socket uses, below the kernel's ephemeral range (32768 up): a port in that
# range may be taken by an outgoing connection between this check and slurmd's bind.
free_port() {
  local port
  while true; do
    port=$((20000 + RANDOM % 12000))
    ss -Htan "sport = :$port" 2>/dev/null | grep -q . || { echo "$port"; return; }
  done
}

fail_with_log() {
  echo "slurm_cluster: $1; the end of $2:" >&2
  tail -n 20 "$2" >&2 || true
  stop
  exit 1
}

case "$action" in
  stop) stop; exit 0 ;;
  start) ;;
  *) usage ;;
esac

for tool in munged mungekey slurmctld slurmd scontrol sinfo srun; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || {
    echo "slurm_cluster: $tool is missing: apt-get install slurm-wlm munge" >&2; exit 2; }
done
[ "$(id -u)" -eq 0 ] || { echo "slurm_cluster: slurmd must run as root: run as root" >&2; exit 2; }
export PATH="$PATH:/usr/sbin"

mkdir -p "$dir"/{state,spool,munge}
chmod 0700 "$dir/munge"
host=$(hostname -s)
cpus=$(nproc)

# munge: a fresh key and a socket of our own.
[ -f "$dir/munge/munge.key" ] || mungekey --create --keyfile="$dir/munge/munge.key" 2>/dev/null ||
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$dir/munge/munge.key"
socket="$dir/munge/munge.socket"
munged --force --socket="$socket" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" ||
  fail_with_log "munged did not start" "$dir/munged.log"

ctld_port=$(free_port)
slurmd_port=$(free_port)
while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
cat > "$dir/slurm.conf" <<CONF
ClusterName=mitra-test
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmdTimeout=30
KillWait=5
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"

slurmctld -f "$SLURM_CONF" -i || fail_with_log "slurmctld did not start" "$dir/slurmctld.log"
slurmd -f "$SLURM_CONF" || fail_with_log "slurmd did not start" "$dir/slurmd.log"

for _ in $(seq 100); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
  [ "$state" = "idle" ] && { echo "SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.2
done
fail_with_log "node $host is '${state:-unknown}', not idle, after 20 s" "$dir/slurmd.log"
