#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying and testing posexp's Slurm sweeps.
#
#   scripts/slurm_local.sh start    # munge + slurmctld + slurmd; returns once the node is idle
#   scripts/slurm_local.sh status   # the daemons this script started, and sinfo
#   scripts/slurm_local.sh stop     # stops exactly the daemons it started
#
# Needs root and Debian's `slurm-wlm` and `munge` (apt-get install slurm-wlm munge); it installs
# nothing itself. The node is this host with its cores and memory, in one partition `local`.
# With `slurmdbd` and `mariadb-server` installed too, it also starts accounting (a private
# MariaDB on 127.0.0.1:$POSEXP_SLURM_DB_PORT, default 3307, and slurmdbd), so `sacct` answers:
# submitit polls sacct for job states, and without it a cancelled job is never seen to end.
# The config goes to /etc/slurm/slurm.conf, which sbatch/squeue/submitit read by default; an
# existing slurm.conf that this script did not write is left alone (the script stops). State,
# logs and pid files live in $POSEXP_SLURM_DIR (default /tmp/posexp-slurm). Running `start`
# twice is harmless: a running cluster is left as it is.
set -euo pipefail

DIR=${POSEXP_SLURM_DIR:-/tmp/posexp-slurm}
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
DB_PORT=${POSEXP_SLURM_DB_PORT:-3307}
MARK="# written by posexp scripts/slurm_local.sh"
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)

die() { echo "slurm_local: $*" >&2; exit 1; }

alive() { [[ -f "$DIR/$1.pid" ]] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

with_accounting() { command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null; }

refuse_foreign() {
  if [[ -f $1 ]] && ! grep -qF "$MARK" "$1"; then
    die "$1 exists and was not written by this script; not touching it"
  fi
}

# A private MariaDB for slurmdbd: its own dir (owned by mysql: data, socket, pid, log) and port,
# root by unix socket only.
DB_DIR=$DIR/mariadb
DB_SOCK=$DB_DIR/mysqld.sock
start_mariadb() {
  if [[ ! -d $DB_DIR/data/mysql ]]; then
    mkdir -p "$DIR"
    install -d -o mysql -g mysql "$DB_DIR" "$DB_DIR/data"
    mariadb-install-db --user=mysql --datadir="$DB_DIR/data" --auth-root-authentication-method=socket \
      >"$DIR/mariadb-install.log" 2>&1 || die "mariadb-install-db failed; see $DIR/mariadb-install.log"
  fi
  setsid mariadbd --user=mysql --datadir="$DB_DIR/data" --socket="$DB_SOCK" --port="$DB_PORT" \
    --bind-address=127.0.0.1 --pid-file="$DB_DIR/mariadbd.pid" --log-error="$DB_DIR/mariadbd.log" \
    </dev/null >/dev/null 2>&1 &
  for _ in $(seq 1 120); do
    if mariadb --socket="$DB_SOCK" -e 'SELECT 1' >/dev/null 2>&1; then
      cp "$DB_DIR/mariadbd.pid" "$DIR/mariadbd.pid"
      return
    fi
    sleep 0.25
  done
  die "MariaDB did not start; see $DB_DIR/mariadbd.log"
}

write_dbd_conf() {
  local pass
  refuse_foreign "$DBD_CONF"
  pass=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
  mariadb --socket="$DB_SOCK" -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1';
    ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
  (umask 077; cat > "$DBD_CONF.tmp" <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$pass
StorageLoc=slurm_acct_db
PidFile=$DIR/slurmdbd.pid
LogFile=$DIR/slurmdbd.log
EOF
  )
  mv "$DBD_CONF.tmp" "$DBD_CONF"
}

start_slurmdbd() {
  slurmdbd
  for _ in $(seq 1 120); do  # slurmctld registers with slurmdbd when it starts
    sacctmgr -n list cluster >/dev/null 2>&1 && return
    sleep 0.25
  done
  die "slurmdbd did not answer; see $DIR/slurmdbd.log"
}

write_conf() {
  local host cpus mem accounting=accounting_storage/none
  host=$(hostname -s)
  # nproc reads OMP_NUM_THREADS (coreutils): under OMP_NUM_THREADS=1 the node would have 1 CPU.
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  mem=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
  refuse_foreign "$CONF"
  with_accounting && accounting=accounting_storage/slurmdbd
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
AccountingStorageType=$accounting
AccountingStorageHost=localhost
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
  if with_accounting; then
    alive mariadbd || start_mariadb
    alive slurmdbd || { write_dbd_conf; start_slurmdbd; }
  fi
  alive slurmctld || slurmctld -c   # -c: a fresh state, no jobs from an earlier cluster
  alive slurmd || slurmd
  for _ in $(seq 1 120); do  # the node registers within seconds; give it a minute
    if [[ $(sinfo -h -o '%T' 2>/dev/null | head -1) == idle ]]; then
      echo "slurm_local: node $(hostname -s) idle ($(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) CPUs) in partition local; conf $CONF"
      if with_accounting; then
        echo "slurm_local: accounting on (slurmdbd, MariaDB on 127.0.0.1:$DB_PORT): sacct answers"
      else
        echo "slurm_local: accounting off (apt-get install slurmdbd mariadb-server to have sacct)"
      fi
      return
    fi
    sleep 0.5
  done
  die "the node did not become idle; see $DIR/slurmctld.log and $DIR/slurmd.log"
}

stop() {
  local stopped=()
  for name in slurmd slurmctld slurmdbd mariadbd munged; do  # the reverse of the start order
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
