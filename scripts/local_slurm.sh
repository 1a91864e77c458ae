#!/usr/bin/env bash
# Local two-node Slurm "cluster" on one machine, for CI / tutorials.
#
#   scripts/local_slurm.sh start    # install (if needed) + start munged, slurmctld, 2x slurmd
#   scripts/local_slurm.sh status   # show daemons and sinfo
#   scripts/local_slurm.sh stop     # stop everything this script started
#
# Must run as root (Debian/Ubuntu; uses apt-get for munge + slurm-wlm).
# Both compute nodes (node1, node2) run on 127.0.0.1 as separate slurmd
# processes (slurmd -N nodeX) on different ports; jobs run as root.
#
# Finished jobs: no slurmdbd, so `sacct` does not work. Read a finished job's
# State/ExitCode with `scontrol show job ID` (kept for MinJobAge=3600 s) or
# from the jobcomp file ($SLURM_LOCAL_DIR/jobcomp.txt, one line per job with
# JobState=... ExitCode=...).
#
# Environment overrides:
#   SLURM_LOCAL_DIR   state/log dir        (default /var/tmp/qwen3-trn-slurm)
#   SLURM_LOCAL_CPUS  CPUs per node        (default 1; may exceed real cores)
#   SLURM_LOCAL_WAIT  seconds to wait for nodes to become idle (default 60)
set -euo pipefail

STATE_DIR="${SLURM_LOCAL_DIR:-/var/tmp/qwen3-trn-slurm}"
CPUS_PER_NODE="${SLURM_LOCAL_CPUS:-1}"
WAIT_S="${SLURM_LOCAL_WAIT:-60}"
SLURM_CONF_FILE=/etc/slurm/slurm.conf   # Debian's compiled-in default location
MARKER="# managed by qwen3-trn scripts/local_slurm.sh"
NODES=(node1 node2)
declare -A NODE_PORT=([node1]=17001 [node2]=17002)
CTLD_PORT=6817

log() { echo "[local_slurm] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

require_root() { [[ $(id -u) -eq 0 ]] || die "must run as root"; }

pid_alive() { # pidfile
    [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_packages() {
    if command -v munged >/dev/null && command -v slurmctld >/dev/null \
        && command -v slurmd >/dev/null && command -v sbatch >/dev/null; then
        return 0
    fi
    log "installing munge + slurm-wlm via apt-get"
    export DEBIAN_FRONTEND=noninteractive
    mkdir -p "$STATE_DIR/log"
    local apt_log="$STATE_DIR/log/apt-install.log"
    if ! { apt-get update -qq && apt-get install -y -qq munge slurm-wlm; } >"$apt_log" 2>&1; then
        cat "$apt_log" >&2
        die "apt-get install munge slurm-wlm failed"
    fi
}

start_munge() {
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating munge key"
        mkdir -p /etc/munge
        dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    fi
    chown munge:munge /etc/munge/munge.key 2>/dev/null || true
    chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    chmod 755 /run/munge
    if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
        return 0   # a munged is already running (ours or someone else's)
    fi
    log "starting munged"
    rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
    runuser -u munge -- /usr/sbin/munged --force
    # Record that *we* started it so `stop` only kills our own munged.
    cp /run/munge/munged.pid "$STATE_DIR/run/munged.pid"
    for _ in $(seq 50); do
        munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    cat /var/log/munge/munged.log >&2 || true
    die "munged did not come up"
}

write_conf() {
    mkdir -p /etc/slurm
    if [[ -f $SLURM_CONF_FILE ]] && ! grep -qF "$MARKER" "$SLURM_CONF_FILE"; then
        log "backing up foreign $SLURM_CONF_FILE to $SLURM_CONF_FILE.orig"
        mv -n "$SLURM_CONF_FILE" "$SLURM_CONF_FILE.orig"
    fi
    local tmp
    tmp=$(mktemp)
    cat >"$tmp" <<EOF
$MARKER
ClusterName=localcluster
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE_DIR/slurmctld
SlurmctldPidFile=$STATE_DIR/run/slurmctld.pid
SlurmctldLogFile=$STATE_DIR/log/slurmctld.log
# %n = node name (this Slurm build supports multiple slurmd per host)
SlurmdSpoolDir=$STATE_DIR/slurmd-%n
SlurmdPidFile=$STATE_DIR/run/slurmd-%n.pid
SlurmdLogFile=$STATE_DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Trust the configured CPUs instead of refusing nodes that report fewer.
SlurmdParameters=config_overrides
ReturnToService=2
# No slurmdbd: keep finished jobs visible in 'scontrol show job' for 1 h and
# append one line per finished job to a text file.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE_DIR/jobcomp.txt
MinJobAge=3600
# Slurm's default grace between SIGTERM and SIGKILL: a requeued run saves its step in it
KillWait=30
InactiveLimit=0
MailProg=/bin/true
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=${NODE_PORT[node1]} CPUs=$CPUS_PER_NODE State=UNKNOWN
NodeName=node2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=${NODE_PORT[node2]} CPUs=$CPUS_PER_NODE State=UNKNOWN
PartitionName=debug Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    if ! cmp -s "$tmp" "$SLURM_CONF_FILE" 2>/dev/null; then
        install -m 644 "$tmp" "$SLURM_CONF_FILE"
        CONF_CHANGED=1
    fi
    rm -f "$tmp"
}

dump_logs() {
    local f
    for f in "$STATE_DIR"/log/*.log; do
        [[ -f $f ]] || continue
        echo "===== $f (tail) =====" >&2
        tail -n 40 "$f" >&2
    done
}

wait_idle() {
    local deadline=$((SECONDS + WAIT_S)) out
    while ((SECONDS < deadline)); do
        out=$(sinfo -h -N -o '%N %t' 2>/dev/null || true)
        if [[ $(grep -cE '^node[12] idle$' <<<"$out") -eq 2 ]]; then
            log "nodes idle:"; sinfo -N >&2
            return 0
        fi
        # Nodes left DOWN/DRAIN from a previous run: resume them.
        if grep -qE '(down|drain|drng|fail)' <<<"$out"; then
            scontrol update NodeName=node1,node2 State=RESUME >/dev/null 2>&1 || true
        fi
        sleep 1
    done
    log "nodes not idle after ${WAIT_S}s; sinfo:"
    sinfo -N -l >&2 || true
    scontrol show node >&2 || true
    dump_logs
    die "local Slurm cluster failed to start"
}

start() {
    require_root
    install_packages
    mkdir -p "$STATE_DIR"/{run,log,slurmctld,slurmd-node1,slurmd-node2}
    start_munge
    CONF_CHANGED=0
    write_conf

    if ((CONF_CHANGED)) && pid_alive "$STATE_DIR/run/slurmctld.pid"; then
        log "slurm.conf changed: restarting slurm daemons"
        stop_slurm
    fi
    if ! pid_alive "$STATE_DIR/run/slurmctld.pid"; then
        log "starting slurmctld"
        /usr/sbin/slurmctld || { dump_logs; die "slurmctld failed to start"; }
    fi
    local n
    for n in "${NODES[@]}"; do
        if ! pid_alive "$STATE_DIR/run/slurmd-$n.pid"; then
            log "starting slurmd -N $n (port ${NODE_PORT[$n]})"
            /usr/sbin/slurmd -N "$n" || { dump_logs; die "slurmd $n failed to start"; }
        fi
    done
    wait_idle
}

stop_pidfile() { # name pidfile
    local name=$1 pf=$2 pid
    [[ -s $pf ]] || return 0
    pid=$(cat "$pf")
    if kill -0 "$pid" 2>/dev/null; then
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            log "$name did not exit, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$pf"
}

stop_slurm() {
    # Kill leftover jobs first so slurmstepd processes do not linger.
    if pid_alive "$STATE_DIR/run/slurmctld.pid"; then
        local jobs
        jobs=$(squeue -h -o %i 2>/dev/null || true)
        if [[ -n $jobs ]]; then
            # shellcheck disable=SC2086
            scancel $jobs 2>/dev/null || true
            sleep 2
        fi
    fi
    local n
    for n in "${NODES[@]}"; do
        stop_pidfile "slurmd $n" "$STATE_DIR/run/slurmd-$n.pid"
    done
    stop_pidfile slurmctld "$STATE_DIR/run/slurmctld.pid"
    # Kill any orphaned step daemons of our jobs.
    local p
    for p in $(pgrep -x slurmstepd 2>/dev/null || true); do
        kill -KILL "$p" 2>/dev/null || true
    done
}

stop() {
    require_root
    stop_slurm
    # Only stops munged if this script started it.
    stop_pidfile munged "$STATE_DIR/run/munged.pid"
}

status() {
    local n pf
    for pf in "$STATE_DIR"/run/*.pid; do
        [[ -f $pf ]] || continue
        n=$(basename "$pf" .pid)
        if pid_alive "$pf"; then echo "$n: running (pid $(cat "$pf"))"; else echo "$n: not running"; fi
    done
    sinfo -N 2>/dev/null || echo "sinfo: controller not reachable"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 {start|stop|status}" >&2; exit 2 ;;
esac
