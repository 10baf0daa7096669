#!/usr/bin/env bash
# kill-node.sh - a compute node of the local multi-node SLURM dies, or
# comes back.
#
#   kill-node.sh NODE            SIGKILL every process in the node's network
#                                namespace (its slurmd, slurmstepds and job
#                                processes), as if the machine died. The
#                                controller marks it DOWN after SlurmdTimeout
#                                (10 s) and ends its jobs with NODE_FAIL.
#   kill-node.sh --revive NODE   starts its slurmd again and resumes it.
#
# Needs a cluster started by start-local-slurm.sh with DAISY_SLURM_NODES > 1
# (DAISY_SLURM_DIR as there, default /tmp/daisy-slurm).
set -euo pipefail

DIR=${DAISY_SLURM_DIR:-/tmp/daisy-slurm}
CONF=$DIR/etc/slurm.conf
export SLURM_CONF=$CONF
log() { printf '[daisy-slurm] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

revive=0
if [ "${1:-}" = --revive ]; then revive=1; shift; fi
NODE=${1:?usage: kill-node.sh [--revive] NODE}
NS=daisy-$NODE
ip netns list | grep -qw "$NS" || die "no network namespace $NS: is $NODE a node of a multi-node cluster?"

if [ "$revive" = 0 ]; then
  pids=$(ip netns pids "$NS")
  # shellcheck disable=SC2086  # one word per pid
  [ -n "$pids" ] && kill -KILL $pids
  log "killed $NODE ($(echo $pids | wc -w) processes)"
  exit 0
fi

rm -f "$DIR/run/slurmd-$NODE.pid"
mkdir -p "$DIR/spool/slurmd-$NODE"
nsenter --net="/run/netns/$NS" unshare --uts sh -c "hostname '$NODE' && exec slurmd -f '$CONF' -N '$NODE'" \
  </dev/null >>"$DIR/log/slurmd-$NODE.out" 2>&1
for _ in $(seq 1 100); do
  state=$(sinfo -h -N -n "$NODE" -o %t 2>/dev/null || true)
  case $state in
    idle|mix|alloc) log "$NODE is back ($state)"; exit 0 ;;
    down*|drain*|fail*) scontrol update nodename="$NODE" state=resume 2>/dev/null || true ;;
  esac
  sleep 0.3
done
die "$NODE did not come back: $(sinfo -h -N -n "$NODE" -o %t)"
