/* commands.h — the subcommands of the zerotrain binary. Each takes the arguments after its name
 * (argv[0] is the subcommand name) and returns the process exit status; main() dispatches. */
#ifndef ZT_COMMANDS_H
#define ZT_COMMANDS_H

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

#endif
