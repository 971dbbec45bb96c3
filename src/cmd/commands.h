/* commands.h — the subcommands of the zerotrain binary. Each takes the arguments after its name
 * (argv[0] is the subcommand name) and returns the process exit status; main() dispatches. */
#ifndef ZT_COMMANDS_H
#define ZT_COMMANDS_H

#include "comm/comm.h"

/* the most ranks `run -n` and `config --ranks` take: past any real job, and far from int overflow */
#define ZT_MAX_RANKS 65536

int zt_cmd_train(int argc, char **argv);    /* train.c */
int zt_cmd_tokenize(int argc, char **argv); /* tokenize.c */
int zt_cmd_sample(int argc, char **argv);   /* sample.c */
int zt_cmd_eval(int argc, char **argv);     /* sample.c */
int zt_cmd_selftest(int argc, char **argv); /* selftest.c */
int zt_cmd_estimate(int argc, char **argv); /* estimate.c */
int zt_cmd_run(int argc, char **argv);      /* run.c */
int zt_cmd_export(int argc, char **argv);   /* export.c */
int zt_cmd_info(int argc, char **argv);     /* export.c */
int zt_cmd_config(int argc, char **argv);   /* config.c */
int zt_cmd_interval(int argc, char **argv); /* interval.c */
int zt_cmd_predict(int argc, char **argv);  /* predict.c */
int zt_cmd_calibrate(int argc, char **argv); /* calibrate.c */
/* predict.c: CONFIG (with the settings `sets`) trained for three steps on the simulated GPU under the
 * hardware profile hw, costed only, train's own lines not shown: the mean of the steps after the first.
 * 0, or non-zero when the run failed (its error printed unless quiet) */
typedef struct zt_prediction {
    double step_s, tokens_per_s, flops_per_s;
    int steps;
} zt_prediction;
int zt_predict_step(const char *config, const char *hw, char **sets, int nsets, int quiet, zt_prediction *out);

/* What `predict` sees of each step of train's loop: times on the run's clock (util/clock.h),
 * the step's tokens and model FLOPs, and the engine's memory account after it. */
typedef struct zt_step_seen {
    long step;
    double seconds, tokens, flops;
    double device_bytes, host_bytes; /* the engine's account (every category), the model's scratch on the device */
    zt_comm_bytes comm, tp_comm;     /* this rank's traffic in the step: data-parallel, tensor-parallel */
} zt_step_seen;
typedef struct zt_train_observer {
    void (*step)(void *ctx, const zt_step_seen *s);
    void *ctx;
} zt_train_observer;
/* `train` with an observer called on every rank after each step is recorded (train.c) */
int zt_train_observed(int argc, char **argv, const zt_train_observer *obs);

#endif
