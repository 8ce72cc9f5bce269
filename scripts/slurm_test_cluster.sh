#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for testing the workflow's SLURM profile for real:
# munge, slurmctld and slurmd as plain daemons (no systemd), one node with this machine's CPUs,
# one partition of its own, every piece of state in a temporary folder.
#
#   bash scripts/slurm_test_cluster.sh start    # installs the Debian packages if missing (root)
#   bash scripts/slurm_test_cluster.sh status
#   bash scripts/slurm_test_cluster.sh stop     # stops what `start` started, removes its files
#
# Settings (environment): SLURM_TEST_STATE (state folder, default /tmp/pods-slurm-test),
# SLURM_TEST_PARTITION (default podstest), SLURM_TEST_CPUS (default: all of this machine's),
# SLURM_TEST_MEM_MB (default: 80% of this machine's memory).
#
# The cluster's configuration is written to /etc/slurm/slurm.conf, the one place every SLURM
# command reads it from: `srun` inside a job step ignores SLURM_CONF. A slurm.conf there that this
# script did not write is never touched (start refuses). No accounting database: the workflow
# profile needs `slurm-status-command: squeue` and `slurm-no-account: true` on such a cluster
# (see profiles/slurm/config.yaml). Finished jobs stay listed for a day (MinJobAge), so
# `squeue --states=all` and `scontrol show job` describe every job of a test run afterwards.
set -euo pipefail

STATE=${SLURM_TEST_STATE:-/tmp/pods-slurm-test}
PARTITION=${SLURM_TEST_PARTITION:-podstest}
CONF=/etc/slurm/slurm.conf
MARK="# written by scripts/slurm_test_cluster.sh"
PACKAGES=(slurmctld slurmd munge slurm-client)

die() { echo "slurm_test_cluster: $*" >&2; exit 1; }
say() { echo "slurm_test_cluster: $*"; }

ours() { [ -f "$CONF" ] && head -n 1 "$CONF" | grep -qF "$MARK"; }

install_packages() {
    local missing=()
    for cmd in slurmctld slurmd munged sbatch; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
    [ ${#missing[@]} -eq 0 ] && return
    [ "$(id -u)" -eq 0 ] || die "missing ${missing[*]}; install them as root: apt-get install ${PACKAGES[*]}"
    say "installing ${PACKAGES[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
}

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    if munge_works; then
        say "munged already running: using it"
        return
    fi
    [ -s /etc/munge/munge.key ] || { /usr/sbin/mungekey --create --force 2>/dev/null || /usr/sbin/create-munge-key -f; }
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
    chown munge:munge /etc/munge/munge.key
    # munged refuses to run as root
    runuser -u munge -- /usr/sbin/munged --pid-file="/run/munge/munged.pid"
    cp /run/munge/munged.pid "$STATE/munged.pid.ours"
    for _ in $(seq 50); do munge_works && return; sleep 0.1; done
    die "munged did not come up"
}

write_conf() {
    local host cpus mem
    host=$(hostname -s)
    cpus=${SLURM_TEST_CPUS:-$(nproc)}
    mem=${SLURM_TEST_MEM_MB:-$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)}
    mkdir -p "$STATE/ctld" "$STATE/spool" /etc/slurm
    cat > "$CONF" <<CONF
$MARK (state in $STATE); removed by its stop
ClusterName=podstest
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
# no cgroups in a container: track processes by parent id, bind nothing
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# CPUs and memory are what a job asks for and what it is held to
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
# no slurmdbd: job state from slurmctld only, kept for a day after a job ends
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=86400
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
}

wait_idle() {
    for _ in $(seq 100); do
        if sinfo -h -p "$PARTITION" -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then return; fi
        sleep 0.2
    done
    sinfo -N -l >&2 || true
    tail -n 20 "$STATE/slurmctld.log" "$STATE/slurmd.log" >&2 || true
    die "the node did not come up (logs above)"
}

start() {
    if ours && [ -f "$STATE/slurmctld.pid" ] && kill -0 "$(cat "$STATE/slurmctld.pid")" 2>/dev/null; then
        say "already running"
        status
        return
    fi
    [ -f "$CONF" ] && ! ours && die "$CONF exists and was not written by this script: not touching a real cluster"
    install_packages
    mkdir -p "$STATE"
    start_munge
    write_conf
    /usr/sbin/slurmctld -i   # -i: ignore state from an earlier cluster in the same folder
    /usr/sbin/slurmd
    wait_idle
    status
}

stop_pid() {  # stop_pid NAME PIDFILE
    local pid
    [ -f "$2" ] || return 0
    pid=$(cat "$2")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
        say "stopped $1 ($pid)"
    fi
    rm -f "$2"
}

stop() {
    if ours; then
        scancel --quiet --full "--partition=$PARTITION" 2>/dev/null || true
    fi
    stop_pid slurmd "$STATE/slurmd.pid"
    stop_pid slurmctld "$STATE/slurmctld.pid"
    [ -f "$STATE/munged.pid.ours" ] && { stop_pid munged "$STATE/munged.pid.ours"; rm -f /run/munge/munged.pid; }
    ours && rm -f "$CONF"
    rm -rf "$STATE"
    say "stopped"
}

status() {
    ours || die "not running (no $CONF of this script)"
    sinfo -p "$PARTITION" -o "%P %a %D %T %c %m %N"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
