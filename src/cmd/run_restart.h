/* run_restart.h — what `zerotrain run --restarts N` needs to decide after a failed attempt: what
 * the job's output said happened (zt_attempt, fed line by line as run passes the output on), whether
 * a restart can cure it, on which hosts, and from which checkpoint (zt_restart_plan). */
#ifndef ZT_RUN_RESTART_H
#define ZT_RUN_RESTART_H

#include <stddef.h>
#include <sys/types.h>

/* What one attempt's output (the ranks' and the launcher's stdout and stderr) said. */
typedef struct zt_attempt {
    int started;          /* the banner ("model: GPT-2 ...", "model: llama ..."): every rank got through start-up */
    int start_timeout;    /* run stopped the launch: no banner within ZEROTRAIN_STARTUP_TIMEOUT */
    long steps;           /* training-step lines: the attempt got past start-up and resume */
    long saves;           /* "checkpoint saved" lines: progress a restart keeps */
    int rank_signal;      /* a rank ended on this signal, as the launcher reported (0: none) */
    int hang;             /* the watchdog found an operation that did not finish and aborted */
    int hang_on_stopped;  /* ... and named a process that stopped (watchdog.h: its stamps, on a roll of its host) */
    int disk_full;        /* an error line named a full file system or quota */
    int lost_contact;     /* the launcher lost a host's daemon */
    int launcher_ending;  /* the launcher said it is ending the failed job (it should exit soon) */
    int launcher_signal;  /* the launcher itself ended on this signal (0: it exited, or run stopped it) */
    char first_error[400]; /* the first "zerotrain: error:" line, without the prefix */
    double failed_at;     /* zt_now() at the first sign of the failure in the output (0: none) */
    char partial[2][1024]; /* the unfinished line of stdout [0] and stderr [1] */
    size_t partial_len[2];
} zt_attempt;

void zt_attempt_scan(zt_attempt *a, int stream, const char *data, size_t n);

/* The decision after a failed attempt. */
typedef struct zt_restart_plan {
    int give_up;           /* a restart cannot cure it (bad config, corrupt checkpoints, a disk that stays full) */
    char kind[24];         /* the cause in one word, for logs and the soak: killed, hang, lost-host, preempted, ... */
    char cause[700];       /* the cause, for the restart's log line or the give-up line */
    char resume_path[4096]; /* non-empty: `latest` is corrupt, resume from this older good checkpoint */
    char hostfile[64];     /* non-empty: the answering hosts, written to this file (the caller removes it) */
    long ranks;            /* ranks for the next attempt (fewer when hosts were lost) */
    long latest_step;      /* the step `latest` names (-1: none, or no checkpoint.dir) */
    double probe_seconds;  /* the host probe took this long (0: not probed) */
} zt_restart_plan;

/* What run knows of the job, for zt_restart_decide. */
typedef struct zt_restart_job {
    const char *self;             /* this binary */
    const char **train_args;      /* CONFIG and the --set pairs */
    int n_train_args;
    long ranks;                   /* asked for with -n */
    long tp;                      /* tensor-parallel ranks a group (1: none) */
    const char *hostfile;         /* NULL: one node (or Slurm's allocation) */
    int code;                     /* the attempt's exit status */
    int disk_full_in_a_row;       /* earlier attempts in a row that ended on a full disk with no save */
    const char *previous_error;   /* the previous attempt's first error line ("" for the first) */
    long attempt_ranks;           /* the ranks the failed attempt ran on (fewer than ranks: hosts were lost) */
    double disk_full_for;         /* seconds since the first of those full-disk attempts ended (0: none) */
} zt_restart_job;

void zt_restart_decide(const zt_restart_job *job, const zt_attempt *a, zt_restart_plan *plan);

/* Probes each host of job->hostfile with a one-process mpirun; the answering ones go to a new
 * hostfile (plan->hostfile; plan->ranks: the ranks they hold, at most job->ranks, whole tp groups;
 * plan->probe_seconds: how long the probe took).
 * Returns the number of hosts that did not answer (named in lost), or -1 when none answered. */
int zt_restart_hosts(const zt_restart_job *job, zt_restart_plan *plan, char *lost, size_t cap);

/* The NVMe swap directories (nvme_path) of the job's effective config, into dirs; how many. */
int zt_restart_swap_dirs(const zt_restart_job *job, char dirs[][4096], int cap);

/* Removes the swap files in dir that changed since `since` (this run's) and that no process holds:
 * a rank holds flock on its swap file until it ends, however it ends, so these are the files of
 * the job's ranks killed outright (SIGKILL, the kernel's memory-limit kill), which no exit path of
 * their own removed. Where the file system does not arbitrate locks the probe fails: nothing goes. */
void zt_restart_sweep_swaps(const char *dir, double since);

/* The parent of the process named by a /proc entry ("1234"), or -1 (not a process, or gone). */
pid_t zt_proc_parent(const char *pid_name);
/* SIGKILL to pid and every process below it on this node (listed from /proc first). */
void zt_kill_tree(pid_t root);
/* How many processes of root's tree on this node have the command name `name` (/proc/PID/comm). */
int zt_tree_count(pid_t root, const char *name);

/* The Open MPI job id of a launch (OMPI_MCA_ess_base_jobid, which mpirun and its daemons put in
 * the environment of every rank they start), read from the processes below root; 0: none found
 * (no rank started yet, srun, or not Open MPI). */
unsigned long zt_tree_mpi_jobid(pid_t root);
/* Removes from dir the Open MPI shared-memory segments (vader_segment.NODE.UID.JOBID.RANK) of job
 * `jobid` that this user owns and no process maps: those a rank killed outright (SIGKILL) left,
 * which its launcher, ended too, did not remove. Another job's segments carry another job id (two
 * live jobs with the same id would share names in Open MPI itself). Returns how many went. */
int zt_remove_mpi_segments(const char *dir, unsigned long jobid);

/* Runs argv with stdout and stderr captured into out (NUL-terminated, cut at cap); SIGKILL to the
 * whole tree after timeout_s. Returns the exit status, 128+signal, -1 when it could not start, or
 * -2 when it timed out. */
int zt_capture(const char *const *argv, double timeout_s, char *out, size_t cap);

#endif
