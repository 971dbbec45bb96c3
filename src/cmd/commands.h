/* commands.h — the subcommands of the zerotrain binary. Each takes the arguments after its name
 * (argv[0] is the subcommand name) and returns the process exit status; main() dispatches. */
#ifndef ZT_COMMANDS_H
#define ZT_COMMANDS_H

int zt_cmd_train(int argc, char **argv);    /* src/train.c */
int zt_cmd_tokenize(int argc, char **argv); /* src/cmd_tokenize.c */
int zt_cmd_sample(int argc, char **argv);   /* src/cmd_sample.c */
int zt_cmd_eval(int argc, char **argv);     /* src/cmd_sample.c */
int zt_cmd_selftest(int argc, char **argv); /* src/selftest.c */
int zt_cmd_estimate(int argc, char **argv); /* src/cmd_estimate.c */
int zt_cmd_run(int argc, char **argv);      /* src/cmd_run.c */
int zt_cmd_export(int argc, char **argv);   /* src/cmd_checkpoint.c */
int zt_cmd_info(int argc, char **argv);     /* src/cmd_checkpoint.c */
int zt_cmd_config(int argc, char **argv);   /* src/cmd_config.c */

#endif
