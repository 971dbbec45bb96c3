#!/usr/bin/env bash
# launch.sh — the part the zerotrain batch scripts share: start the ranks of one training job
# step, pass a preemption signal on to them, and requeue the job when they stopped for it.
#
#   exec scripts/slurm/launch.sh CONFIG [--set KEY=VALUE]...      (from an sbatch script)
#
# Launcher: `srun --mpi=pmix` when this Slurm has the PMIx plugin (`srun --mpi=list`), else
# `mpirun` (Open MPI reads the allocation from Slurm's environment). ZT_LAUNCHER=srun|mpirun forces
# one. One rank per Slurm task; each rank takes the GPU of its local rank when the job has GPUs.
#
# Signals: the batch scripts ask for `--signal=B:USR1@120`, so Slurm sends SIGUSR1 to this shell
# two minutes before the time limit. It is forwarded to the ranks as SIGUSR1 (srun and mpirun both
# relay SIGUSR1 to every task; mpirun would kill them on SIGTERM). zerotrain then finishes the
# current step on every rank, writes a checkpoint and exits with status 99. scancel and
# preemption send SIGTERM to the ranks themselves; here a SIGTERM is forwarded as SIGUSR1 as well.
#
# Requeue: on status 99 the job is requeued with `scontrol requeue` when it is still RUNNING (a
# time-limit signal). A job that is CANCELLED (scancel) stays cancelled; a job Slurm preempted
# with PreemptMode=REQUEUE is requeued by Slurm itself. The requeued job runs this script again;
# zerotrain resumes from checkpoint.dir/latest (checkpoint.resume: auto, the default) and logs
# "resumed from DIR at step N (SLURM_RESTART_COUNT=K)".
#
# Node loss (multi-node jobs, --no-kill): when the ranks fail and a node of the allocation no longer
# answers, the lost node is named, Slurm is given time to take it out of the job, and the job is
# requeued, fitted to the nodes left; the ranks are counted from the allocation (nodes x
# --ntasks-per-node), so it resumes on fewer ranks from the last checkpoint, resharded.
set -uo pipefail

ZT_HOME=${ZT_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}
ZT_BIN=${ZT_BIN:-$ZT_HOME/zerotrain}
ZT_PREEMPTED=99 # zerotrain's exit status after a signal-triggered checkpoint (src/cmd/train.c)
log() { echo "[launch $(date +%T)] $*"; }

(($# >= 1)) || { echo "usage: launch.sh CONFIG [--set KEY=VALUE]..." >&2; exit 2; }
[[ -x $ZT_BIN ]] || { echo "launch.sh: $ZT_BIN not found (build it with make, or set ZT_BIN)" >&2; exit 2; }
[[ -n ${SLURM_JOB_ID:-} ]] || { echo "launch.sh: not inside a Slurm job (submit an sbatch script)" >&2; exit 2; }

if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# one OpenMP thread per allocated CPU of the task
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}

child=""
signals=0
forward() { # forward SIG: ask the ranks to checkpoint and stop (SIGUSR1 in all cases, see above)
  signals=$((signals + 1))
  log "got SIG$1: asking the ranks to checkpoint and stop"
  [[ -n $child ]] && kill -USR1 "$child" 2>/dev/null || true
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM

launcher=${ZT_LAUNCHER:-auto}
if [[ $launcher == auto ]]; then
  if srun --mpi=list 2>&1 | grep -qw pmix; then launcher=srun; else launcher=mpirun; fi
fi
# ranks from the allocation this run got (a job submitted with --nodes=MIN-MAX may come back from a
# requeue on fewer nodes): nodes x tasks per node when the job asked for --ntasks-per-node
nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
ranks=${SLURM_NTASKS:-1}
[[ ${SLURM_NTASKS_PER_NODE:-} =~ ^[0-9]+$ ]] && ranks=$((nodes * SLURM_NTASKS_PER_NODE))
case $launcher in
  srun) cmd=(srun --mpi=pmix --kill-on-bad-exit=1 --nodes="$nodes" --ntasks="$ranks") ;;
  mpirun) cmd=(mpirun -np "$ranks" --bind-to none) ;;
  *) echo "launch.sh: ZT_LAUNCHER must be auto, srun or mpirun, not '$launcher'" >&2; exit 2 ;;
esac
cmd+=("$ZT_BIN" train "$@")

log "job ${SLURM_JOB_ID} restart ${SLURM_RESTART_COUNT:-0} on ${SLURM_JOB_NODELIST:-?}:" \
  "$ranks ranks on $nodes nodes, OMP_NUM_THREADS=$OMP_NUM_THREADS, GPUs ${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-none}}"
log "${cmd[*]}"
"${cmd[@]}" &
child=$!

# `wait` returns early (status > 128) when a trapped signal arrives: then wait again. bash keeps
# the status of a child that exited meanwhile, so the second wait returns it.
while :; do
  seen=$signals
  wait "$child"
  rc=$?
  ((rc > 128 && signals != seen)) || break
done
log "zerotrain exited with status $rc"

lost_nodes() { # the nodes of this allocation whose slurmd does not answer a one-task step
  local n
  for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null); do
    timeout 20 srun --nodes=1 --ntasks=1 --nodelist="$n" --mpi=none --overlap true >/dev/null 2>&1 || echo "$n"
  done
}
job_nodes() { scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | grep -o ' NodeList=[^ ]*' | cut -d= -f2; }

# Node loss: with --no-kill (train-multi-node.sbatch) Slurm does not end the job when a node fails;
# it marks the node DOWN after SlurmdTimeout, ends the step that used it and takes the node out of
# the job. Requeue the job then: it comes back on the nodes it still has, with fewer ranks (counted
# above), and zerotrain resumes from the last checkpoint, resharded.
if ((rc != 0 && rc != ZT_PREEMPTED && nodes > 1)); then
  lost=$(lost_nodes | paste -sd, -)
  if [[ -n $lost ]]; then
    tmo=$(scontrol show config 2>/dev/null | awk -F'= ' '/^SlurmdTimeout/ {print $2+0}')
    tmo=$((3 * ${tmo:-300} + 30))
    log "zerotrain: error: lost node(s) $lost of job $SLURM_JOB_ID (slurmd does not answer); waiting up to $tmo s for Slurm to take them out of the job"
    end=$((SECONDS + tmo))
    while ((SECONDS < end)) && [[ $(job_nodes) == "$SLURM_JOB_NODELIST" ]]; do sleep 1; done
    now=$(job_nodes)
    if [[ -n $now && $now != "$SLURM_JOB_NODELIST" ]]; then
      log "job $SLURM_JOB_ID now has node(s) $now; requeueing it (it resumes there from the last checkpoint with fewer ranks)"
      n_now=$(scontrol show hostnames "$now" | wc -l)
      scontrol requeue "$SLURM_JOB_ID" || log "scontrol requeue failed"
      # Slurm keeps the task count of the run that failed; the job is pending now: fit it to the
      # nodes that are left (Slurm is about to end this script; try for a few seconds)
      if [[ ${SLURM_NTASKS_PER_NODE:-} =~ ^[0-9]+$ ]]; then
        for _ in $(seq 20); do
          scontrol update jobid="$SLURM_JOB_ID" NumNodes="$n_now" NumTasks=$((n_now * SLURM_NTASKS_PER_NODE)) 2>/dev/null && break
          sleep 0.25
        done
      fi
    else
      log "Slurm did not take the lost node(s) out of job $SLURM_JOB_ID within $tmo s; not requeueing"
    fi
  fi
fi

if ((rc == ZT_PREEMPTED)); then
  state=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
  if [[ $state == RUNNING ]]; then
    log "checkpoint saved; requeueing job $SLURM_JOB_ID (it resumes from the checkpoint)"
    scontrol requeue "$SLURM_JOB_ID" || log "scontrol requeue failed"
  else
    log "checkpoint saved; job is $state, not requeueing it here"
  fi
fi
exit "$rc"
