#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying and testing posexp's Slurm sweeps.
#
#   scripts/slurm_local.sh start    # munge + slurmctld + slurmd; returns once the node is idle
#   scripts/slurm_local.sh status   # the daemons this script started, and sinfo
#   scripts/slurm_local.sh stop     # stops exactly the daemons it started
#
# Needs root and Debian's `slurm-wlm` and `munge` (apt-get install slurm-wlm munge); it installs
# nothing itself. The node is this host with its cores and memory, in one partition `local`.
# The config goes to /etc/slurm/slurm.conf, which sbatch/squeue/submitit read by default; an
# existing slurm.conf that this script did not write is left alone (the script stops). State,
# logs and pid files live in $POSEXP_SLURM_DIR (default /tmp/posexp-slurm). Running `start`
# twice is harmless: a running cluster is left as it is.
set -euo pipefail

DIR=${POSEXP_SLURM_DIR:-/tmp/posexp-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by posexp scripts/slurm_local.sh"
DAEMONS=(munged slurmctld slurmd)

die() { echo "slurm_local: $*" >&2; exit 1; }

alive() { [[ -f "$DIR/$1.pid" ]] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

write_conf() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
  if [[ -f $CONF ]] && ! grep -qF "$MARK" "$CONF"; then
    die "$CONF exists and was not written by this script; not touching it"
  fi
  mkdir -p "$DIR/state" "$DIR/spool" /etc/slurm
  cat > "$CONF.tmp" <<EOF
$MARK
ClusterName=posexp-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
KillWait=30
MinJobAge=300
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.tmp" "$CONF"
}

start() {
  [[ $(id -u) == 0 ]] || die "start needs root (the daemons run as root here)"
  for bin in munged slurmctld slurmd sinfo; do
    command -v "$bin" >/dev/null || die "$bin not found: apt-get install slurm-wlm munge"
  done
  if alive slurmctld && alive slurmd; then
    echo "slurm_local: already running ($(sinfo -h -o '%P %D %T' | head -1))"
    return
  fi
  write_conf
  if ! alive munged; then
    install -d -o munge -g munge -m 0755 /run/munge
    [[ -f /etc/munge/munge.key ]] || mungekey --create
    mkdir -p "$DIR"
    runuser -u munge -- munged --pid-file=/run/munge/posexp-munged.pid  # munge's own dir
    cp /run/munge/posexp-munged.pid "$DIR/munged.pid"
  fi
  alive slurmctld || slurmctld -c   # -c: a fresh state, no jobs from an earlier cluster
  alive slurmd || slurmd
  for _ in $(seq 1 120); do  # the node registers within seconds; give it a minute
    if [[ $(sinfo -h -o '%T' 2>/dev/null | head -1) == idle ]]; then
      echo "slurm_local: node $(hostname -s) idle ($(nproc) CPUs) in partition local; conf $CONF"
      return
    fi
    sleep 0.5
  done
  die "the node did not become idle; see $DIR/slurmctld.log and $DIR/slurmd.log"
}

stop() {
  local stopped=()
  for name in slurmd slurmctld munged; do  # the reverse of the start order
    if alive "$name"; then
      kill "$(cat "$DIR/$name.pid")"
      for _ in $(seq 1 40); do alive "$name" || break; sleep 0.25; done
      alive "$name" && kill -9 "$(cat "$DIR/$name.pid")"
      stopped+=("$name")
    fi
    rm -f "$DIR/$name.pid"
  done
  echo "slurm_local: stopped ${stopped[*]:-nothing (not running)}"
}

status() {
  local name
  for name in "${DAEMONS[@]}"; do
    if alive "$name"; then echo "$name: running (pid $(cat "$DIR/$name.pid"))"; else echo "$name: stopped"; fi
  done
  if alive slurmctld; then sinfo; fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: scripts/slurm_local.sh start|stop|status" ;;
esac
