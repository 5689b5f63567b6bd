#!/usr/bin/env bash
# Stop the daemons started by tests/slurm/start_slurm.sh (by their pid files only), and take
# back the /etc/slurm symlinks that point into the scratch folder: with no controller behind
# them, every Slurm client (`scontrol`, which Snakemake's Slurm plugin runs at each start to
# pick its status command) would retry it for 10 s. start_slurm.sh lays them again.
#   tests/slurm/stop_slurm.sh           # stop; keep state, database and logs
#   tests/slurm/stop_slurm.sh --purge   # stop, then delete the scratch folder
set -euo pipefail
S=${MMSPEC_SLURM_DIR:-/tmp/mmspec-slurm}

# stop NAME:PIDFILE...: SIGTERM to all of them at once, then wait (SIGKILL after 10 s)
stop() {
    local item name pidfile pid pids=() names=()
    for item in "$@"; do
        name=${item%%:*} pidfile=${item#*:}
        [[ -s $pidfile ]] || continue
        pid=$(cat "$pidfile")
        rm -f "$pidfile"
        # a pid file left by a killed run may name a pid since given to another process
        [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || continue
        kill "$pid" 2>/dev/null || continue
        pids+=("$pid") names+=("$name")
    done
    local i
    for i in "${!pids[@]}"; do
        for _ in $(seq 100); do kill -0 "${pids[$i]}" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "${pids[$i]}" 2>/dev/null; then
            echo "stop_slurm: ${names[$i]} (${pids[$i]}) ignored SIGTERM for 10 s, sending SIGKILL" >&2
            kill -9 "${pids[$i]}" 2>/dev/null || true
        fi
        echo "stop_slurm: stopped ${names[$i]} (${pids[$i]})"
    done
}

stop "slurmd:$S/run/slurmd.pid" "slurmctld:$S/run/slurmctld.pid" "slurmdbd:$S/run/slurmdbd.pid"
stop "mariadbd:$S/run/mariadb.pid" "munged:$S/munge/munged.pid"
rm -f "$S/run/munged.pid"

for f in slurm.conf gres.conf; do
    if [[ -L /etc/slurm/$f && $(readlink "/etc/slurm/$f") == "$S/etc/$f" ]]; then
        rm -f "/etc/slurm/$f"
        if [[ -e /etc/slurm/$f.before-mmspec ]]; then mv "/etc/slurm/$f.before-mmspec" "/etc/slurm/$f"; fi
    fi
done

if [[ ${1:-} == --purge ]]; then
    rm -rf "$S"
    echo "stop_slurm: removed $S"
fi
