#!/usr/bin/env bash
# Stop the daemons started by tests/slurm/start_slurm.sh (by their pid files only).
#   tests/slurm/stop_slurm.sh           # stop; keep state, database and logs
#   tests/slurm/stop_slurm.sh --purge   # stop, then delete the scratch folder and the
#                                       # /etc/slurm symlinks that point into it
set -euo pipefail
S=${MMSPEC_SLURM_DIR:-/tmp/mmspec-slurm}

stop() {  # stop NAME PIDFILE
    local pidfile=$2 pid
    [[ -s $pidfile ]] || return 0
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            echo "stop_slurm: $1 ($pid) ignored SIGTERM for 10 s, sending SIGKILL" >&2
            kill -9 "$pid" 2>/dev/null || true
        fi
        echo "stop_slurm: stopped $1 ($pid)"
    fi
    rm -f "$pidfile"
}

stop slurmd "$S/run/slurmd.pid"
stop slurmctld "$S/run/slurmctld.pid"
stop slurmdbd "$S/run/slurmdbd.pid"
stop mariadbd "$S/run/mariadb.pid"
stop munged "$S/munge/munged.pid"
rm -f "$S/run/munged.pid"

if [[ ${1:-} == --purge ]]; then
    for f in slurm.conf gres.conf; do
        if [[ -L /etc/slurm/$f && $(readlink "/etc/slurm/$f") == "$S/etc/$f" ]]; then
            rm -f "/etc/slurm/$f"
            if [[ -e /etc/slurm/$f.before-mmspec ]]; then mv "/etc/slurm/$f.before-mmspec" "/etc/slurm/$f"; fi
        fi
    done
    rm -rf "$S"
    echo "stop_slurm: removed $S"
fi
